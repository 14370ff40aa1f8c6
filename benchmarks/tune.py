"""DoubleML's tune() then fit() of the 401(k) PLR: fanfit on the local stack against DoubleML in-process.

    python benchmarks/tune.py --json

Issue 37's tuning benchmark (item 5, its first half): the 401(k) data of DoubleML's example
(``examples/data/sipp1991.dta``, 9,915 rows, float64), PLR of ``net_tfa`` on ``e401`` with the
covariates of README's command, ``RandomForestRegressor`` for ``ml_l`` and
``RandomForestClassifier`` for ``ml_m`` (``random_state`` 42, so that neither draws from NumPy's
global state and both sides fit the same forests), the grid of 24 candidates (``n_estimators``
100/300, ``max_depth`` 4/8/None, ``min_samples_leaf`` 1/5/20/50; ``--small``: 100 trees, depth
4/8, leaves 5/50, 4 candidates) with ``n_folds_tune`` 5, then ``fit()`` with the chosen
parameters, ``--n-folds`` x ``--n-rep`` (default 5 x 2). ``fanfit.DoubleMLPLR.tune`` runs each
search as one job on the local stack (both submitted at once) and then fits on it;
``doubleml.DoubleMLPLR`` tunes and fits in-process with ``n_jobs_cv=-1`` (every core). Both are
built, and tune, after the same global seeds, so their searches draw the same folds and must
choose the same parameters and give the same estimate (1e-9). The local stack is started (and
the template deployed) before the clock starts, and a warm-up job of the same learners fills
its ThroughputTable. Then ``--runs`` (default 3) pairs, fanfit then DoubleML.

Prints one JSON object: per run ``fanfit_s``, ``fanfit_tune_s`` and ``doubleml_s``,
``doubleml_tune_s`` (wall seconds), ``ratio`` (fanfit's tune and fit over DoubleML's),
``params_equal`` (every chosen parameter), ``scores_equal`` (every candidate's mean test score
at 1e-9), ``coef_equal`` (coef and se at 1e-9), the coef; and the medians, the number of fits
and the 1-minute load average.
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
SEED = 42


def grid(small: bool) -> dict[str, list[Any]]:
    """The search's grid: 24 candidates (issue 37), or 4 with ``small``."""
    if small:
        return {"n_estimators": [100], "max_depth": [4, 8], "min_samples_leaf": [5, 50]}
    return {"n_estimators": [100, 300], "max_depth": [4, 8, None],
            "min_samples_leaf": [1, 5, 20, 50]}  # fmt: skip


def models(data: Any, args: Any) -> tuple[Any, Any]:
    """fanfit's and DoubleML's PLR (unfitted), the same learners and, from the same global
    seed, the same sample splitting."""
    import doubleml
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    import fanfit

    out = []
    for module in (fanfit, doubleml):
        np.random.seed(SEED)  # the sample splitting each class draws at construction
        out.append(module.DoubleMLPLR(
            data, RandomForestRegressor(random_state=SEED), RandomForestClassifier(random_state=SEED),
            n_folds=args.n_folds, n_rep=args.n_rep,
        ))  # fmt: skip
    return out[0], out[1]


def _scores(res: Any) -> list[np.ndarray]:
    return [s.cv_results_["mean_test_score"] for key in ("l_tune", "m_tune")
            for s in res[0]["tune_res"][key]]  # fmt: skip


def run_pair(client: Any, data: Any, args: Any) -> dict[str, Any]:
    """One timed pair: fanfit's tune and fit on the stack, then DoubleML's in-process."""
    ours, theirs = models(data, args)
    grids = {"ml_l": grid(args.small), "ml_m": grid(args.small)}
    np.random.seed(SEED + 1)  # the search folds
    t0 = time.perf_counter()
    ours_res = ours.tune(grids, n_folds_tune=5, return_tune_res=True, client=client,
                         timeout=args.timeout)  # fmt: skip
    t1 = time.perf_counter()
    ours.fit(client=client, timeout=args.timeout)
    t2 = time.perf_counter()
    np.random.seed(SEED + 1)
    theirs_res = theirs.tune(grids, n_folds_tune=5, n_jobs_cv=-1, return_tune_res=True)
    t3 = time.perf_counter()
    theirs.fit(n_jobs_cv=-1)
    t4 = time.perf_counter()
    scores_equal = all(np.allclose(a, b, rtol=1e-9, atol=1e-12)
                       for a, b in zip(_scores(ours_res), _scores(theirs_res), strict=True))  # fmt: skip
    return {
        "fanfit_s": round(t2 - t0, 3),
        "fanfit_tune_s": round(t1 - t0, 3),
        "doubleml_s": round(t4 - t2, 3),
        "doubleml_tune_s": round(t3 - t2, 3),
        "ratio": round((t2 - t0) / (t4 - t2), 4),
        "params_equal": ours.params == theirs.params,
        "scores_equal": bool(scores_equal),
        "coef_equal": bool(
            np.allclose(ours.coef, theirs.coef, rtol=1e-9, atol=0.0)
            and np.allclose(ours.se, theirs.se, rtol=1e-9, atol=0.0)
        ),  # fmt: skip
        "coef": round(float(ours.coef[0]), 2),
        "se": round(float(ours.se[0]), 2),
        "chosen": {k: v["e401"][0][0] for k, v in ours.params.items()},
    }


def summary(runs: list[dict[str, Any]], args: Any) -> dict[str, Any]:
    """The medians of the runs and the configuration (the printed JSON object)."""

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 4)

    n_candidates = int(np.prod([len(v) for v in grid(args.small).values()]))
    return {
        "fanfit_s": median("fanfit_s"),
        "fanfit_tune_s": median("fanfit_tune_s"),
        "doubleml_s": median("doubleml_s"),
        "doubleml_tune_s": median("doubleml_tune_s"),
        "ratio": median("ratio"),
        "params_equal": all(r["params_equal"] for r in runs),
        "scores_equal": all(r["scores_equal"] for r in runs),
        "coef_equal": all(r["coef_equal"] for r in runs),
        "n_candidates": n_candidates,
        "n_tune_fits": 2 * n_candidates * 5,
        "n_fits": 2 * args.n_folds * args.n_rep,
        "n_runs": len(runs),
        "runs": runs,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=3, help="timed pairs (default 3)")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=2)
    parser.add_argument("--small", action="store_true", help="4 candidates (a quick check)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per job")
    args = parser.parse_args()

    import doubleml
    import pandas as pd

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta").astype("float64")
    data = doubleml.DoubleMLData(frame, y_col="net_tfa", d_cols="e401", x_cols=X_COLS)
    runs = []
    with warnings.catch_warnings(), ensure_local_stack():
        warnings.simplefilter("ignore")  # tune()'s deprecation note
        client = Client.local_stack()
        warm, _ = models(data, args)
        warm.fit(client=client, timeout=args.timeout)  # fills the ThroughputTable
        for _ in range(args.runs):
            runs.append(run_pair(client, data, args))
    out = summary(runs, args)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
