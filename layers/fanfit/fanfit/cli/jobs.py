"""``fanfit jobs``: the running jobs with their partitions of the shared concurrency (Dorm);
``fanfit jobs --all``: every job on the stack, ended ones too, with status, duration and cost."""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from fanfit.cli import common

__all__ = ["add_parser", "run", "table"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit jobs`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "jobs",
        help="running jobs with their partitions of the shared concurrency (Dorm); --all: "
        "every job with its status, duration and cost",
    )
    common.add_stack_options(p)
    p.add_argument("--all", dest="all", action="store_true",
                   help="every job on the stack, ended ones too, newest first, with status, "
                   "duration and cost (default: the running jobs and their partitions)")  # fmt: skip
    p.add_argument("--limit", type=int, default=50,
                   help="with --all: at most this many jobs, the newest (default: 50)")  # fmt: skip
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns: the header, then one line per row (no row: the header alone)."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit jobs``; returns the exit code."""
    if args.all:
        return run_all(args)
    with common.stack_client(args) as client:
        jobs = client.jobs()
    if args.output == "json":
        print(json.dumps(jobs, default=str))
        return 0
    if not jobs:
        print("no job is running (`fanfit jobs --all` lists the ended ones)")
        return 0
    header = ("job", "kind", "status", "weight", "demand", "partition", "gpus")
    rows = [
        (j["job_id"], j["kind"], j["status"], f"{j['weight']:g}", str(j["demand"]),
         str(j["partition"]), f"{j['gpus']}/{j['gpu_demand']}")
        for j in jobs
    ]  # fmt: skip
    for line in table(header, rows):
        print(line)
    return 0


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, sec = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{sec:02d}" if hours else f"{minutes}:{sec:02d}"


def run_all(args: argparse.Namespace) -> int:
    """``fanfit jobs --all``: every job, newest first."""
    with common.stack_client(args) as client:
        history = client.history(limit=args.limit)
    if args.output == "json":
        print(json.dumps(history, default=str))
        return 0
    if not history:
        print("no job on this stack")
        return 0
    header = ("job", "kind", "status", "started (UTC)", "duration", "cost (USD)")
    rows = [
        (h["job_id"], h["kind"], h["status"],
         "n/a" if h["started_at"] is None
         else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(h["started_at"])),
         _duration(h["duration_s"]) + (" so far" if h["status"] == "RUNNING" else ""),
         "n/a" if h["cost_usd"] is None else f"{h['cost_usd']:.6f}")
        for h in history
    ]  # fmt: skip
    for line in table(header, rows):
        print(line)
    return 0
