"""What one partition recomputation costs with the history full, in-process on moto.

    python benchmarks/partition_recompute.py --json

Every registration, resize and release of a job sharing the stack is a recomputation
(:func:`fanfit.jobs.sharing.recompute`): a consistent Scan of the partition table, Dorm's MILP
(twice with completion figures), one ``TransactWriteItems``, and the history entry. For each
number of running jobs (``--jobs``, default 2, 4, 8, 18, 40) the script registers them, fills the
history to its limit (:data:`fanfit.storage.PARTITIONS_HISTORY_LIMIT` recomputations), then times
``--repeats`` recomputations (each a resize of one job, so each commits) and reports the median,
with the size of the partition table's epoch item and of the history, in bytes of JSON.

Prints one JSON object: ``{"jobs": [{"n_jobs", "recompute_ms_median", "recompute_ms", "epoch_item_bytes",
"history_bytes", "history_entries"}, ...], "history_table": bool}``. Run against a checkout from
before the history table (``PYTHONPATH=<checkout>/layers/fanfit``) it measures that layout
(``history_table`` false: the history is a list in the epoch item).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def _tables(ddb) -> None:
    ddb.create_table(
        TableName="partitions",
        KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.create_table(
        TableName="partition-history",
        KeySchema=[{"AttributeName": "version", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "version", "AttributeType": "N"}],
        BillingMode="PAY_PER_REQUEST",
    )


def measure(n_jobs: int, repeats: int) -> dict:
    """One fresh moto account: ``n_jobs`` jobs, the history filled, ``repeats`` timed resizes."""
    import boto3
    from moto import mock_aws

    from fanfit import storage
    from fanfit.jobs.sharing import register_job

    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        _tables(ddb)
        try:
            parts = storage.Partitions("partitions", ddb, history_table="partition-history")
            history_table = True
        except TypeError:  # a checkout from before the history table
            parts = storage.Partitions("partitions", ddb)
            history_table = False
        ids = [f"est-20261126-000000-{i:08x}" for i in range(n_jobs)]
        figures = {"remaining_s": 100.0, "critical_s": 1.0}

        def resize(k: int) -> None:
            # each call changes one job's demand (2..9 units, one more each round over the jobs),
            # so each one commits
            register_job(parts, ids[k % n_jobs], "estimate", 2 + (k // n_jobs) % 8, capacity=(64, 0),
                         **figures)  # fmt: skip

        filled = storage.PARTITIONS_HISTORY_LIMIT + n_jobs
        for k in range(filled):
            resize(k)
        times = []
        for k in range(filled, filled + repeats):
            t0 = time.perf_counter()
            resize(k)
            times.append(time.perf_counter() - t0)
        epoch = ddb.get_item(TableName="partitions", Key={"job_id": {"S": "#epoch"}})["Item"]
        history = parts.history()
        return {
            "n_jobs": n_jobs,
            "recompute_ms_median": round(1000 * statistics.median(times), 1),
            "recompute_ms": [round(1000 * t, 1) for t in times],
            "epoch_item_bytes": len(json.dumps(epoch)),
            "history_bytes": len(json.dumps(history)),
            "history_entries": len(history),
            "history_table": history_table,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--jobs", default="2,4,8,18,40", help="numbers of running jobs")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    for key, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
        os.environ.setdefault(key, value)
    rows = [measure(int(n), args.repeats) for n in args.jobs.split(",") if n.strip()]
    layouts = [r.pop("history_table") for r in rows]
    out = {
        "jobs": rows,
        "history_table": all(layouts),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
