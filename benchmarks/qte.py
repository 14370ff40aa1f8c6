"""QTE on the 401(k) data through the local pipeline and through DoubleML in-process, on one machine.

    python benchmarks/qte.py --json

Issue 16's benchmark: DoubleMLQTE with score ``'PQ'`` at ``--n-quantiles`` (default 9: 0.5,
0.55, ..., 0.9) quantiles, ``--n-folds`` x ``--n-rep`` (default 5 x 10) cross-fitting, outcome ``net_tfa``,
treatment ``e401`` (examples/data/sipp1991.dta, 9,915 rows), logistic regressions for ``ml_g``
and ``ml_m``. ``fanfit.DoubleMLQTE`` submits one job whose parts are the ``pq`` models of the
quantiles and treatment levels (18 by default; each with ``n_rep > 1`` runs two stages of one
fit unit per fold and repetition, the stages' units of every part fanned out together,
the fits before and after the fold's preliminary IPW quantile, with DoubleML's chain of start
values computed in Prepare between them; with ``n_rep = 1`` one stage, each unit running its
fold's whole nested procedure); ``doubleml.DoubleMLQTE`` fits in-process
with ``n_jobs_models=-1`` (every core). Both get the same sample splitting, so their effects must
be equal (relative 1e-9). The quantiles start at the median because DoubleML's own PQ fails
below it on these data with logistic learners (seen at 0.1-0.4, 2 folds x 2 repetitions: its
preliminary IPW search lands at the outcome's minimum, and ``ml_g`` then sees one class); fanfit
fails there the same way. The local stack is started (and the template deployed) before the
clock starts. Then ``--runs`` (default 1) pairs, fanfit then DoubleML.

Prints one JSON object: per run ``fanfit_s`` and ``doubleml_s`` (wall seconds), ``ratio``,
``coef_equal``, ``n_waves`` (Schedule's waves over the stages), ``efficiency`` (the shards' fit
seconds / (wall seconds x the job's concurrency, the local stack's cores)), the billed GB-seconds
and Lambda cost in USD (the local stack's figures priced as AWS Lambda would bill them,
:mod:`fanfit.cost`), the effects, and the medians. ``--quantiles 0.5,0.7,0.9`` picks the
quantiles; ``--float64`` casts the frame to float64 (as read, the Stata file's float32).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def _models(frame: Any, smpls: Any, quantiles: list[float], args: Any) -> tuple[Any, Any]:
    """fanfit's and DoubleML's DoubleMLQTE on the same data, learners and splitting (unfitted)."""
    import doubleml
    from sklearn.linear_model import LogisticRegression

    import fanfit

    data = doubleml.DoubleMLData(frame, y_col="net_tfa", d_cols="e401", x_cols=X_COLS)
    kw = {"quantiles": quantiles, "n_folds": args.n_folds, "n_rep": args.n_rep,
          "draw_sample_splitting": False}  # fmt: skip
    ours = fanfit.DoubleMLQTE(data, LogisticRegression(), LogisticRegression(), **kw)
    theirs = doubleml.DoubleMLQTE(data, LogisticRegression(), LogisticRegression(), **kw)
    ours.set_sample_splitting(smpls)
    theirs.set_sample_splitting(smpls)
    return ours, theirs


def _run(client: Any, frame: Any, smpls: Any, quantiles: list[float], args: Any) -> dict:
    """One timed pair: fanfit's QTE on the stack, then DoubleML's in-process."""
    ours, theirs = _models(frame, smpls, quantiles, args)
    t0 = time.perf_counter()
    ours.fit(client=client, seed=args.seed, timeout=args.timeout)
    fanfit_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    theirs.fit(n_jobs_models=-1)
    doubleml_s = time.perf_counter() - t1
    # one job of several parts: every part's result carries the job's timings; count each job once
    jobs = {job.job_id: (job, r.timings) for job, r in zip(ours.fanfit_jobs, ours.fanfit_results)}
    timings = [t for _, t in jobs.values()]
    fit_s = sum(float(s["fit_s"]) for t in timings for s in t.get("shards", []))
    concurrency = os.cpu_count() or 1  # the local stack's default max_concurrency
    return {
        "fanfit_s": round(fanfit_s, 3),
        "doubleml_s": round(doubleml_s, 3),
        "ratio": round(fanfit_s / doubleml_s, 4),
        "coef_equal": bool(np.allclose(ours.coef, theirs.coef, rtol=1e-9, atol=0.0)),
        "se_equal": bool(np.allclose(ours.se, theirs.se, rtol=1e-9, atol=0.0)),
        "n_jobs": len(jobs),
        "n_parts": len(ours.fanfit_results),
        "n_waves": sum(_waves(client, job_id) for job_id in jobs),
        # the shards' fit seconds over what the wall time offered the job's concurrency
        "efficiency": round(fit_s / (fanfit_s * concurrency), 4),
        "billed_gb_s": round(sum(float(t.get("billed_gb_s", 0.0)) for t in timings), 3),
        "lambda_cost_usd": round(sum(float(t.get("lambda_cost_usd", 0.0)) for t in timings), 6),
        "coef": [round(float(c), 6) for c in ours.coef],
    }


def _waves(client: Any, job_id: str) -> int:
    """The waves Schedule planned for a job, over its stages."""
    from fanfit import storage

    n, stage = 0, 0
    while client.store.exists(storage.schedule_key(job_id, stage)):
        n += len(client.store.get_json(storage.schedule_key(job_id, stage))["waves"])
        stage += 1
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=1, help="timed pairs (default 1)")
    parser.add_argument("--n-quantiles", type=int, default=9)
    parser.add_argument(
        "--quantiles", help="comma-separated quantiles (instead of --n-quantiles from 0.5 to 0.9)"
    )
    parser.add_argument(
        "--float64", action="store_true", help="the frame cast to float64 (as read: float32)"
    )
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per job")
    args = parser.parse_args()

    import pandas as pd

    from fanfit import dml
    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    if args.float64:
        frame = frame.astype("float64")
    smpls = dml.folds_to_smpls(dml.draw_folds(len(frame), args.n_folds, args.n_rep, args.seed))
    quantiles = [round(q, 6) for q in np.linspace(0.5, 0.9, args.n_quantiles)]
    if args.quantiles:
        quantiles = [float(q) for q in args.quantiles.split(",")]

    runs = []
    os.environ["PYTHONWARNINGS"] = "ignore"  # DoubleML's joblib workers: the same lbfgs warnings
    with warnings.catch_warnings(), ensure_local_stack():
        warnings.simplefilter(
            "ignore"
        )  # lbfgs convergence on the unscaled covariates, as DoubleML's
        client = Client.local_stack()
        for _ in range(args.runs):
            runs.append(_run(client, frame, smpls, quantiles, args))

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 6)

    out = {
        "fanfit_s": median("fanfit_s"),
        "doubleml_s": median("doubleml_s"),
        "ratio": median("ratio"),
        "lambda_cost_usd": median("lambda_cost_usd"),
        "efficiency": median("efficiency"),
        "n_waves": median("n_waves"),
        "coef_equal": all(r["coef_equal"] and r["se_equal"] for r in runs),
        "float64": args.float64,
        "quantiles": quantiles,
        "n_folds": args.n_folds,
        "n_rep": args.n_rep,
        "n_runs": len(runs),
        "runs": runs,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
