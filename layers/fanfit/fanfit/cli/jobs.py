"""``fanfit jobs``: the running jobs with their partitions of the shared concurrency (Dorm)."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from fanfit.cli import common

__all__ = ["add_parser", "run"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit jobs`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "jobs", help="running jobs with their partitions of the shared concurrency (Dorm)"
    )
    common.add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit jobs``; returns the exit code."""
    with common.stack_client(args) as client:
        jobs = client.jobs()
    if args.output == "json":
        print(json.dumps(jobs, default=str))
        return 0
    header = ("job", "kind", "status", "weight", "demand", "partition", "gpus")
    rows = [
        (j["job_id"], j["kind"], j["status"], f"{j['weight']:g}", str(j["demand"]),
         str(j["partition"]), f"{j['gpus']}/{j['gpu_demand']}")
        for j in jobs
    ]  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print("(no running jobs)")
    return 0
