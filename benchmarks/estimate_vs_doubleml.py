"""One 401(k) PLR job through the local pipeline and through DoubleML in-process, on one machine.

    python benchmarks/estimate_vs_doubleml.py --json

Both get the same folds and the same learners (RandomForestRegressor, 100 trees, a fixed
random_state, for ml_l and ml_m), so their coefficients must be equal; the ratio of wall times
measures what the serverless orchestration costs on this machine. DoubleML runs with n_jobs_cv=-1
(every core). The local stack is started (and the template deployed) before the clock starts.
Prints one JSON object: fanfit_s, doubleml_s, ratio, coef_equal (and the details).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=4)
    parser.add_argument("--n-estimators", type=int, default=100)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    import doubleml
    import pandas as pd
    from sklearn.ensemble import RandomForestRegressor

    from fanfit import dml
    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    folds = dml.draw_folds(len(frame), args.n_folds, args.n_rep, args.seed)
    params = {"n_estimators": args.n_estimators, "random_state": args.seed}
    learner = "RandomForestRegressor:" + json.dumps(params)

    with ensure_local_stack():
        client = Client.local_stack()
        t0 = time.perf_counter()
        res = client.estimate(
            frame, model="plr", y="net_tfa", d="e401", x=X_COLS, ml_l=learner, ml_m=learner,
            n_folds=args.n_folds, n_rep=args.n_rep, seed=args.seed, folds=folds,
        )  # fmt: skip
        fanfit_s = time.perf_counter() - t0

    data = doubleml.DoubleMLData(frame, y_col="net_tfa", d_cols="e401", x_cols=X_COLS)
    t0 = time.perf_counter()
    model = doubleml.DoubleMLPLR(
        data, RandomForestRegressor(**params), RandomForestRegressor(**params),
        n_folds=args.n_folds, n_rep=args.n_rep, draw_sample_splitting=False,
    )  # fmt: skip
    model.set_sample_splitting(dml.folds_to_smpls(folds))
    model.fit(n_jobs_cv=-1)
    doubleml_s = time.perf_counter() - t0

    out = {
        "fanfit_s": round(fanfit_s, 3),
        "doubleml_s": round(doubleml_s, 3),
        "ratio": round(fanfit_s / doubleml_s, 4),
        "coef_equal": bool(np.allclose(res.coef, model.coef, rtol=1e-9, atol=0.0)),
        "fanfit_coef": float(res.coef[0]),
        "doubleml_coef": float(model.coef[0]),
        "fanfit_se": float(res.se[0]),
        "doubleml_se": float(model.se[0]),
        "n_fits": 2 * args.n_folds * args.n_rep,
        "n_shards": len(res.timings.get("shards", [])),
        "phases_s": {
            k: round(res.timings[k], 3) for k in ("prepare_s", "crossfit_s", "aggregate_s")
        },
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
