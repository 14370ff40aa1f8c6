"""The accuracy of ``--plan-only``'s prediction on the local stack (issue 14, item 2).

    python benchmarks/placement_accuracy.py --json

Starts a local stack (and deploys the template) before anything is timed, runs one warm-up job
(401(k) PLR, RandomForestRegressor for ml_l and ml_m) so the ThroughputTable holds the learners'
throughput and overhead, then asks ``Client.plan_estimate`` for the same job (nothing runs) and
runs it. The prediction (``predicted_wall_s``: the placements' predicted cross-fitting seconds) is
compared with the run's cross-fitting phase (``timings['crossfit_s']``: the Map states and the
Schedule steps between waves, from the execution history). Prints one JSON object:
predicted_wall_s, crossfit_s, relative_error, within_25pct, and the placement. A measurement on a
machine shared with other work, not a test.

The run's shards start in the execution environments the warm-up left warm; the prediction's
start-up per shard is the overhead the throughput table averaged over warm shards
(:class:`fanfit.sched.throughput.EwmaThroughput`), not the warm-up's cold probe shards'.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=2)
    parser.add_argument("--n-estimators", type=int, default=50)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    import pandas as pd

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    learner = "RandomForestRegressor:" + json.dumps(
        {"n_estimators": args.n_estimators, "random_state": args.seed}
    )
    job = dict(
        model="plr", y="net_tfa", d="e401", x=X_COLS, ml_l=learner, ml_m=learner,
        n_folds=args.n_folds, n_rep=args.n_rep, seed=args.seed,
    )  # fmt: skip
    with ensure_local_stack():
        client = Client.local_stack()
        warm = client.estimate(frame, **job)  # fills the ThroughputTable
        prediction = client.plan_estimate(frame, **job)
        res = client.estimate(frame, **job)
    predicted = prediction.predicted_wall_s
    actual = float(res.timings["crossfit_s"])
    error = abs(predicted - actual) / actual
    out = {
        "predicted_wall_s": round(predicted, 3),
        "predicted_cost_usd": prediction.predicted_cost_usd,
        "crossfit_s": round(actual, 3),
        "relative_error": round(error, 4),
        "within_25pct": bool(error <= 0.25),
        "warmup_crossfit_s": round(float(warm.timings["crossfit_s"]), 3),
        "n_fits": 2 * args.n_folds * args.n_rep,
        "placement": [
            {"stage": s.stage, "resource": s.resource, "workers": s.workers, "seconds": s.seconds}
            for st in prediction.stages
            for s in st.placement.stages
        ],
        "shards": [s.to_json_dict() for st in prediction.stages for s in st.shards],
        "job_concurrency": prediction.job_concurrency,
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
