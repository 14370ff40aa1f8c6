"""One 401(k) PLR job through the local pipeline and through DoubleML in-process, on one machine.

    python benchmarks/estimate_vs_doubleml.py --json

Both get the same folds and the same learners (RandomForestRegressor, 100 trees, a fixed
random_state, for ml_l and ml_m), so their coefficients must be equal; the ratio of wall times
measures what the serverless orchestration costs on this machine. DoubleML runs with n_jobs_cv=-1
(every core). The local stack is started (and the template deployed) before the clock starts,
and one warm-up job (the same job, not timed) fills the ThroughputTable, so that the timed runs
are sized from measured throughput (a warm history: no probe wave). Then ``--runs`` (default 3)
pairs, fanfit then DoubleML, each pair giving one ratio.

Prints one JSON object: the medians ``fanfit_s``, ``doubleml_s``, ``ratio`` (median of the
pairs' ratios), ``efficiency`` (median; per run, the sum of the shards' fit seconds / (fanfit's
wall seconds x the job's concurrency cap): the share of the pipeline's slot-seconds spent
fitting), ``coef_equal`` (every run), and each run's figures under ``runs``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def _fanfit_run(client: Any, frame: Any, folds: Any, learner: str, args: Any) -> tuple[Any, dict]:
    """One timed job through the pipeline: its wall seconds and its figures."""
    t0 = time.perf_counter()
    res = client.estimate(
        frame, model="plr", y="net_tfa", d="e401", x=X_COLS, ml_l=learner, ml_m=learner,
        n_folds=args.n_folds, n_rep=args.n_rep, seed=args.seed, folds=folds,
    )  # fmt: skip
    wall_s = time.perf_counter() - t0
    shards = res.timings.get("shards", [])
    concurrency = res.job._plan().max_concurrency
    fit_s = sum(float(s.get("fit_s", 0.0)) for s in shards)
    waves = (res.job.record().get("schedule") or {}).get("waves", [])
    return res.coef, {
        "fanfit_s": round(wall_s, 3),
        "efficiency": round(fit_s / (wall_s * concurrency), 4),
        "fit_s": round(fit_s, 3),
        "concurrency": concurrency,
        "n_shards": len(shards),
        "probe_waves": sum(1 for w in waves if (w.get("decision") or {}).get("probe")),
        "fanfit_coef": float(res.coef[0]),
        "fanfit_se": float(res.se[0]),
        "execution_s": round(float(res.timings.get("total_s", 0.0)), 3),
        "phases_s": {
            k: round(res.timings[k], 3) for k in ("prepare_s", "crossfit_s", "aggregate_s")
        },
    }


def _doubleml_run(frame: Any, folds: Any, params: dict, args: Any) -> tuple[float, Any]:
    """One timed DoubleML fit in-process: its wall seconds and the model."""
    import doubleml
    from sklearn.ensemble import RandomForestRegressor

    from fanfit import dml

    data = doubleml.DoubleMLData(frame, y_col="net_tfa", d_cols="e401", x_cols=X_COLS)
    t0 = time.perf_counter()
    model = doubleml.DoubleMLPLR(
        data, RandomForestRegressor(**params), RandomForestRegressor(**params),
        n_folds=args.n_folds, n_rep=args.n_rep, draw_sample_splitting=False,
    )  # fmt: skip
    model.set_sample_splitting(dml.folds_to_smpls(folds))
    model.fit(n_jobs_cv=-1)
    return time.perf_counter() - t0, model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=3, help="timed pairs (default 3)")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=4)
    parser.add_argument("--n-estimators", type=int, default=100)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    import pandas as pd

    from fanfit import dml
    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    # float64, as fanfit computes a frame (DoubleML keeps the Stata file's float32 columns otherwise)
    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta").astype("float64")
    folds = dml.draw_folds(len(frame), args.n_folds, args.n_rep, args.seed)
    params = {"n_estimators": args.n_estimators, "random_state": args.seed}
    learner = "RandomForestRegressor:" + json.dumps(params)

    runs = []
    with ensure_local_stack():
        client = Client.local_stack()
        _, warm_up = _fanfit_run(client, frame, folds, learner, args)  # fills the ThroughputTable
        for _ in range(args.runs):
            coef, run = _fanfit_run(client, frame, folds, learner, args)
            doubleml_s, model = _doubleml_run(frame, folds, params, args)
            run["doubleml_s"] = round(doubleml_s, 3)
            run["ratio"] = round(run["fanfit_s"] / doubleml_s, 4)
            run["coef_equal"] = bool(np.allclose(coef, model.coef, rtol=1e-9, atol=0.0))
            run["doubleml_coef"] = float(model.coef[0])
            run["doubleml_se"] = float(model.se[0])
            runs.append(run)

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 4)

    out = {
        "fanfit_s": median("fanfit_s"),
        "doubleml_s": median("doubleml_s"),
        "ratio": median("ratio"),
        "efficiency": median("efficiency"),
        "coef_equal": all(r["coef_equal"] for r in runs),
        "n_fits": 2 * args.n_folds * args.n_rep,
        "n_runs": len(runs),
        "runs": runs,
        "warm_up": {k: warm_up[k] for k in ("fanfit_s", "n_shards", "probe_waves", "efficiency")},
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
