"""A 3-level APOS on the 401(k) data through the local pipeline and through DoubleML in-process.

    python benchmarks/apos.py --json

Issue 28's APOS benchmark: DoubleMLAPOS over the three levels of 401(k) take-up (0: not
eligible, 1: eligible but not participating, 2: participating; ``e401 + p401`` of
examples/data/sipp1991.dta, 9,915 rows, cast to float64), outcome ``net_tfa``, the nine usual
covariates, ``--n-folds`` x ``--n-rep`` (default 5 x 2) cross-fitting, random forests for ``ml_g``
and ``ml_m`` (``--trees``, default 100, depth 5, as DoubleML's 401(k) examples use them; or
``--learners linear``: a linear and a logistic regression). ``fanfit.DoubleMLAPOS`` submits ONE
job whose parts are the three levels' ``apo`` models (their units fanned out together);
``doubleml.DoubleMLAPOS`` fits in-process with ``n_jobs_models=-1`` (every core). Both get the same
sample splitting, so their coefficients and causal contrasts must be equal (relative 1e-9). The
local stack is started (and the template deployed) before the clock starts; then ``--runs``
(default 1) pairs, fanfit then DoubleML.

Prints one JSON object: per run ``fanfit_s`` and ``doubleml_s`` (wall seconds), ``ratio``,
``coef_equal`` (coefficients and the contrasts against level 0), ``n_waves``, ``efficiency`` (the
shards' fit seconds / (wall seconds x the local stack's cores)), the billed GB-seconds and Lambda
cost in USD (:mod:`fanfit.cost`), and the medians.
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from qte import X_COLS, _waves  # noqa: E402 - the same data and wave count as the QTE benchmark

LEVELS = [0, 1, 2]


def _learners(args: Any) -> tuple[Any, Any]:
    """``ml_g`` and ``ml_m`` (unfitted)."""
    if args.learners == "linear":
        from sklearn.linear_model import LinearRegression, LogisticRegression

        return LinearRegression(), LogisticRegression(max_iter=1000)
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    kw = {"n_estimators": args.trees, "max_depth": 5, "random_state": 0}
    return RandomForestRegressor(**kw), RandomForestClassifier(**kw)


def _run(client: Any, data: Any, smpls: Any, args: Any) -> dict:
    """One timed pair: fanfit's APOS on the stack, then DoubleML's in-process."""
    import doubleml

    import fanfit

    kw = {"treatment_levels": LEVELS, "n_folds": args.n_folds, "n_rep": args.n_rep,
          "draw_sample_splitting": False}  # fmt: skip
    ours = fanfit.DoubleMLAPOS(data, *_learners(args), **kw)
    theirs = doubleml.DoubleMLAPOS(data, *_learners(args), **kw)
    ours.set_sample_splitting(smpls)
    theirs.set_sample_splitting(smpls)
    t0 = time.perf_counter()
    ours.fit(client=client, seed=args.seed, timeout=args.timeout)
    fanfit_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    theirs.fit(n_jobs_models=-1)
    doubleml_s = time.perf_counter() - t1
    jobs = {job.job_id: r.timings for job, r in zip(ours.fanfit_jobs, ours.fanfit_results)}
    timings = list(jobs.values())
    fit_s = sum(float(s["fit_s"]) for t in timings for s in t.get("shards", []))
    ours_cc = ours.causal_contrast(reference_levels=0)
    theirs_cc = theirs.causal_contrast(reference_levels=0)
    equal = np.allclose(ours.coef, theirs.coef, rtol=1e-9, atol=0.0) and np.allclose(
        ours_cc.thetas, theirs_cc.thetas, rtol=1e-9, atol=0.0
    )
    return {
        "fanfit_s": round(fanfit_s, 3),
        "doubleml_s": round(doubleml_s, 3),
        "ratio": round(fanfit_s / doubleml_s, 4),
        "coef_equal": bool(equal),
        "se_equal": bool(np.allclose(ours.se, theirs.se, rtol=1e-9, atol=0.0)),
        "n_jobs": len(jobs),
        "n_parts": len(ours.fanfit_results),
        "n_waves": sum(_waves(client, job_id) for job_id in jobs),
        "efficiency": round(fit_s / (fanfit_s * (os.cpu_count() or 1)), 4),
        "billed_gb_s": round(sum(float(t.get("billed_gb_s", 0.0)) for t in timings), 3),
        "lambda_cost_usd": round(sum(float(t.get("lambda_cost_usd", 0.0)) for t in timings), 6),
        "coef": [round(float(c), 3) for c in ours.coef],
        "contrasts": [round(float(c), 3) for c in ours_cc.thetas],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=1, help="timed pairs (default 1)")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=2)
    parser.add_argument("--learners", choices=["forest", "linear"], default="forest")
    parser.add_argument("--trees", type=int, default=100, help="trees per forest (default 100)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per job")
    args = parser.parse_args()

    import doubleml
    import pandas as pd

    from fanfit import dml
    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta").astype("float64")
    frame["takeup"] = frame["e401"] + frame["p401"]  # 0, 1, 2 (p401 = 1 only where e401 = 1)
    data = doubleml.DoubleMLData(frame, y_col="net_tfa", d_cols="takeup", x_cols=X_COLS)
    smpls = dml.folds_to_smpls(dml.draw_folds(len(frame), args.n_folds, args.n_rep, args.seed))

    runs = []
    os.environ["PYTHONWARNINGS"] = "ignore"  # DoubleML's joblib workers
    with warnings.catch_warnings(), ensure_local_stack():
        warnings.simplefilter("ignore")
        client = Client.local_stack()
        for _ in range(args.runs):
            runs.append(_run(client, data, smpls, args))

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
        "levels": LEVELS,
        "learners": args.learners,
        "trees": args.trees if args.learners == "forest" else None,
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
