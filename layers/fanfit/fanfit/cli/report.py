"""``fanfit report JOB --out DIR``: a job's report.html and its PNG figures."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from fanfit import errors
from fanfit.cli import common

__all__ = ["add_parser", "run"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit report`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "report",
        help="write a job's report: report.html (self-contained) and its PNG figures",
        description="Estimate: the coefficients with confidence intervals, the per-repetition "
        "estimates and the shards' timeline (cold starts marked); train: loss or inertia per "
        "round and each worker's batch and compute time per round. Both: the job's cost.",
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for report.html and PNGs")
    p.add_argument("--prices", metavar="FILE",
                   help="JSON of price overrides (fields of fanfit.prices.PriceTable)")  # fmt: skip
    common.add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit report``; returns the exit code."""
    from pathlib import Path

    from fanfit.prices import PriceTable
    from fanfit.report import write_report

    prices = PriceTable.from_file(args.prices) if args.prices else None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise errors.InvalidJobError(f"--out {args.out!r} is a file; give a directory")
    with common.stack_client(args) as client:
        job = client.job(args.job_id)
        status = job.status()
        if status == "RUNNING":
            raise errors.InvalidJobError(
                f"job {args.job_id} is still running; report it once it has ended "
                f"(fanfit status {args.job_id})"
            )
        if status != "SUCCEEDED":
            raise errors.JobFailedError(
                f"job {args.job_id} ended {status}: there is no result to report "
                f"(fanfit status {args.job_id} shows why)"
            )
        result: Any = job.result(timeout=60.0)  # the handle of the job's kind (Client.job)
        if prices is not None:
            result.cost = job.cost(prices).to_dict()
    part_costs = None
    doc = result.doc  # result.json, as fanfit cost reads it; a train job's has no parts
    parts = getattr(doc, "parts", None)
    if result.cost is not None and parts:
        from fanfit.cost import part_costs as costs_of_parts

        labels = [p.label for p in parts]
        part_costs = costs_of_parts(doc.timings.shards, labels, float(result.cost["total_usd"]))
    try:
        path = write_report(result, out, job_id=args.job_id, part_costs=part_costs)
    except OSError as exc:
        raise errors.InvalidJobError(
            f"cannot write the report to --out {args.out!r}: {exc}"
        ) from exc
    files = sorted(str(f) for f in path.parent.glob("*.png"))
    if args.output == "json":
        print(json.dumps({"job_id": args.job_id, "report": str(path), "figures": files,
                          "cost": result.cost}, allow_nan=False))  # fmt: skip
    else:
        print(f"report: {path}")
        for f in files:
            print(f"figure: {f}")
    return 0
