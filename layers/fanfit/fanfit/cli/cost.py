"""``fanfit cost JOB``: what a job cost at AWS list prices, item by item; for a job of several
parts (a QTE, an APOS) also each part's fit seconds and share (:func:`fanfit.cost.part_costs`)."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from fanfit.cli import common
from fanfit.cli.jobs import table

__all__ = ["add_parser", "parts_lines", "run"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit cost`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "cost",
        help="what a job cost at AWS list prices, item by item; a job of several parts: each "
        "part's fit seconds and share",
        description="Counted from the execution history and the job's shard records "
        "(fanfit.cost); so far while the job runs. A job of several parts (--model qte, apos) "
        "also gets one line per part: its units, fit seconds, billed GB-seconds and share of "
        "the total (each shard's GB-seconds split by its units' fit seconds).",
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument("--prices", metavar="FILE",
                   help="JSON of price overrides (fields of fanfit.prices.PriceTable)")  # fmt: skip
    common.add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def parts_lines(parts: list[Any]) -> list[str]:
    """The per-part table of :func:`fanfit.cost.part_costs`: one line per part, then the total."""
    rows = [
        (str(c.part), c.label, str(c.n_units), f"{c.fit_s:.2f}", f"{c.billed_gb_s:.2f}",
         f"{100 * c.share:.1f} %", f"{c.usd:.6f}")
        for c in parts
    ]  # fmt: skip
    rows.append(("", "total", str(sum(c.n_units for c in parts)),
                 f"{sum(c.fit_s for c in parts):.2f}", f"{sum(c.billed_gb_s for c in parts):.2f}",
                 f"{100 * sum(c.share for c in parts):.1f} %",
                 f"{sum(c.usd for c in parts):.6f}"))  # fmt: skip
    header = ("part", "label", "units", "fit s", "billed GB-s", "share", "USD")
    return table(header, rows)


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit cost``; returns the exit code (3 when the job failed; its cost is printed)."""
    from fanfit.cost import part_costs
    from fanfit.prices import PriceTable

    prices = PriceTable.from_file(args.prices) if args.prices else None
    parts = None
    with common.stack_client(args) as client:
        job = client.job(args.job_id)
        status = job.status()
        cost = job.cost(prices) if prices is not None else job.cost()
        if status == "SUCCEEDED" and job.kind == "estimate":
            doc = job.result(timeout=60.0).doc
            if doc.parts:
                labels = [p.label for p in doc.parts]
                parts = part_costs(doc.timings.shards, labels, cost.total_usd)
    if args.output == "json":
        out = {"job_id": args.job_id, "status": status, "cost": cost.to_dict(),
               "parts": None if parts is None else [c.to_dict() for c in parts]}  # fmt: skip
        print(json.dumps(out, allow_nan=False))
    else:
        print(f"job {args.job_id}: {status}")
        print(common.cost_line(cost, None, status))
        rows = [(i.service, i.name, f"{i.quantity:,.6g}", i.unit, f"{i.usd:.6f}")
                for i in cost.items]  # fmt: skip
        for line in table(("service", "item", "quantity", "unit", "USD"), rows):
            print(f"    {line}")
        for note in cost.notes:
            print(f"    note: {note}")
        if parts is not None:
            print(f"parts: {len(parts)} (the job's shards split by their units' fit seconds)")
            for line in parts_lines(parts):
                print(f"    {line}")
    return common.EXIT_FAILED if status == "FAILED" else 0
