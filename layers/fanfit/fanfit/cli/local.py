"""``fanfit local up | down | status``: the embedded local stack (LocalStack on this host)."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

__all__ = ["add_parser", "run"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit local`` to the subcommands ``sub``."""
    p = sub.add_parser("local", help="manage the embedded local stack (LocalStack on this host)")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit local``; returns the exit code."""
    from fanfit.local import stack as local_stack

    if args.action == "up":
        info = local_stack.up()
    elif args.action == "down":
        local_stack.down()
        info = local_stack.status()
    else:
        info = local_stack.status()
    if args.output == "json":
        print(json.dumps(info, default=str))
    else:
        for key, value in info.items():
            print(f"{key}: {value}")
    return 0 if args.action != "status" or info.get("running") else 1
