"""``fanfit status JOB``: the job record, its cost, and the scheduler's decisions per wave."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from fanfit.cli import common
from fanfit.jobs.documents.estimate import WaveSummary
from fanfit.jobs.documents.record import JobRecord
from fanfit.progress.renderers import placement_lines

__all__ = ["add_parser", "print_wave", "run"]

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
    parsed = JobRecord.parse(record, source=f"the job record of {args.job_id}")
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
        value = getattr(parsed, key)
        if value is not None:
            print(f"{key}: {value}")
    print(common.cost_line(cost, cost_error, parsed.status))
    if parsed.schedule is not None:
        for wave in parsed.schedule.waves:
            print_wave(wave)
    return 0 if parsed.status != "FAILED" else common.EXIT_FAILED


def print_wave(wave: WaveSummary) -> None:
    """The lines of one wave of the job record's schedule: its decision, the throughput it used
    and the partition it read.

    A wave cut by the sizing policy names its shard size and the fits left; a wave placed only on
    the GPU worker (``policy`` ``'gpu'``) or of a fixed size names what its decision holds.
    """
    d = wave.decision
    size = f" of <= {d.units_per_shard} fit(s)" if d.units_per_shard is not None else ""
    left = f"{d.n_units} fit(s) left; " if d.n_units is not None else ""
    print(
        f"stage {wave.stage} wave {wave.wave}: {'probe, ' if d.probe else ''}"
        f"policy {d.policy}, {d.n_shards} shard(s){size}, "
        f"max concurrency {d.max_concurrency}, "
        f"{left}seconds per fit "
        f"{common.fmt(d.seconds_per_unit)}, start-up {common.fmt(wave.startup_s)} s, "
        f"predicted makespan {common.fmt(d.predicted_makespan_s)} s on {wave.resource}"
    )
    for signature, rate in sorted(wave.predicted_samples_per_s.items()):
        print(f"    throughput {signature}: {rate:,.0f} samples/s")
    if wave.placement is not None:
        for line in placement_lines(wave.placement):
            print(f"    {line}")
    if wave.partition is not None:
        part = wave.partition
        print(
            f"    partition {part.lambda_concurrency} of demand {part.demand} "
            f"(gpus {part.gpus}, version {part.version})"
        )
