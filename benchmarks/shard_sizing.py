"""Shard sizing: one fit per invocation against the scheduler's sizing, on the local stack.

    python benchmarks/shard_sizing.py --json

One estimate job of 200 small fits (401(k), PLR, LassoCV for ml_l and ml_m, 5 folds x 20
repetitions x 2 learners) runs twice through the local pipeline with the same folds:

- ``per_fold``: DoubleML-Serverless's finest layout (``sharding='per-fold'``: one Lambda invocation
  per fold, repetition and learner), 200 invocations;
- ``scheduled``: the scheduler's sizing (``sharding='auto'``) from a throughput table emptied first,
  so its probe wave is included in the time.

Both run at the local stack's concurrency (the number of cores). Prints one JSON object:
``per_fold_s``, ``scheduled_s``, ``ratio`` (per_fold_s / scheduled_s; target >= 1.5), the number of
invocations of each, ``coef_equal`` and the scheduler's decisions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def _empty_throughput_table(client) -> None:
    """Delete every item of the stack's throughput table (the scheduled run starts with no history)."""
    endpoint = client.stack.endpoint_url
    cfn = client.session.client("cloudformation", endpoint_url=endpoint)
    outputs = cfn.describe_stacks(StackName=client.stack.name)["Stacks"][0]["Outputs"]
    table = next(o["OutputValue"] for o in outputs if o["OutputKey"] == "ThroughputTableName")
    ddb = client.session.client("dynamodb", endpoint_url=endpoint)
    for page in ddb.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            key = {"signature": item["signature"], "resource": item["resource"]}
            ddb.delete_item(TableName=table, Key=key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=20)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    import numpy as np
    import pandas as pd

    from fanfit import dml
    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    folds = dml.draw_folds(len(frame), args.n_folds, args.n_rep, args.seed)
    learner = 'LassoCV:{"cv": 3}'
    options = dict(
        model="plr", y="net_tfa", d="e401", x=X_COLS, ml_l=learner, ml_m=learner,
        n_folds=args.n_folds, n_rep=args.n_rep, seed=args.seed, folds=folds,
    )  # fmt: skip
    runs = {}
    with ensure_local_stack():
        client = Client.local_stack()
        _empty_throughput_table(client)
        for name, sharding in (("scheduled", "auto"), ("per_fold", "per-fold")):
            t0 = time.perf_counter()
            job = client.submit_estimate(frame, sharding=sharding, **options)
            result = job.result(timeout=3600)
            wall = time.perf_counter() - t0
            waves = job.record().get("schedule", {}).get("waves", [])
            runs[name] = {
                "wall_s": round(wall, 3),
                "coef": float(result.coef[0]),
                "invocations": len(result.timings["shards"]),
                "waves": [
                    {
                        k: w["decision"].get(k)
                        for k in (
                            "probe",
                            "n_shards",
                            "units_per_shard",
                            "max_concurrency",
                            "predicted_makespan_s",
                        )
                    }
                    for w in waves
                ],  # fmt: skip
            }
    out = {
        "per_fold_s": runs["per_fold"]["wall_s"],
        "scheduled_s": runs["scheduled"]["wall_s"],
        "ratio": round(runs["per_fold"]["wall_s"] / runs["scheduled"]["wall_s"], 3),
        "n_fits": 2 * args.n_folds * args.n_rep,
        "per_fold_invocations": runs["per_fold"]["invocations"],
        "scheduled_invocations": runs["scheduled"]["invocations"],
        "coef_equal": bool(
            np.isclose(runs["per_fold"]["coef"], runs["scheduled"]["coef"], rtol=1e-12, atol=0.0)
        ),  # fmt: skip
        "scheduled_waves": runs["scheduled"]["waves"],
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
