"""``fanfit status JOB``: the job record, its cost, and the scheduler's decisions per wave."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from fanfit.cli import common

__all__ = ["add_parser", "run"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit status`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "status", help="a job's record: status, error, and the scheduler's decisions"
    )
    p.add_argument("job_id", metavar="JOB")
    common.add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit status``; returns the exit code."""
    with common.stack_client(args) as client:
        job = client.job(args.job_id)
        record = job.record()
        cost, cost_error = common.job_cost(job)
    if cost is not None:
        record["cost"] = cost.to_dict()
    if args.output == "json":
        print(json.dumps(record, default=str))
        return 0
    for key in (
        "job_id",
        "status",
        "model",
        "score",
        "execution_arn",
        "result_key",
        "error",
        "cause",
        "failed_shard",
        "failed_stage",
        "failed_wave",
        "shard_error",
    ):
        if record.get(key) is not None:
            print(f"{key}: {record[key]}")
    print(common.cost_line(cost, cost_error, record.get("status")))
    schedule = record.get("schedule") or {}
    for wave in schedule.get("waves", []):
        d = wave["decision"]
        predicted = d.get("predicted_makespan_s")
        print(
            f"stage {wave['stage']} wave {wave['wave']}: {'probe, ' if d.get('probe') else ''}"
            f"policy {d['policy']}, {d['n_shards']} shard(s) of <= {d['units_per_shard']} fit(s), "
            f"max concurrency {d['max_concurrency']}, "
            f"{d['n_units']} fit(s) left; seconds per fit "
            f"{common.fmt(d.get('seconds_per_unit'))}, start-up {common.fmt(wave.get('startup_s'))} s, "
            f"predicted makespan {common.fmt(predicted)} s on {wave['resource']}"
        )
        for signature, rate in sorted(wave.get("predicted_samples_per_s", {}).items()):
            print(f"    throughput {signature}: {rate:,.0f} samples/s")
        if wave.get("partition"):
            part = wave["partition"]
            print(
                f"    partition {part['lambda_concurrency']} of demand {part['demand']} "
                f"(gpus {part['gpus']}, version {part['version']})"
            )
    return 0 if record.get("status") != "FAILED" else common.EXIT_FAILED
