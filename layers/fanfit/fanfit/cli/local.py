"""``fanfit local up | down | status``: the embedded local stack (LocalStack on this host)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["add_parser", "format_local", "run"]

log = logging.getLogger("fanfit")

#: How to stop the stack, and how to start it, as the lines say it.
STOP_HINT = "stop it with: fanfit local down"
START_HINT = "start it with: fanfit local up"


def add_parser(sub: Any) -> None:
    """Add ``fanfit local`` to the subcommands ``sub``."""
    p = sub.add_parser("local", help="manage the embedded local stack (LocalStack on this host)")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument(
        "--output",
        choices=["table", "json"],
        default="table",
        help="table: a few lines for a person; json: the whole record as one object",
    )
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
        print(format_local(info, args.action))
    return 0 if args.action != "status" or info.get("running") else 1


def _limits_line(info: Mapping[str, Any]) -> str:
    """Whether Lambda environments get the CPU and memory their ``MemorySize`` buys, and how."""
    summary = info.get("limits")
    if summary is None:
        return "limits: not reported yet (the first Lambda environment reports them)"
    if info.get("limits_apply"):
        return f"limits: applied ({summary})"
    return f"limits: not applied, functions run without CPU or memory limits ({summary})"


def _deploy_line(info: Mapping[str, Any]) -> str:
    """Whether the project's template is deployed into this run of the stack."""
    name = info.get("stack_name", "fanfit")
    if not info.get("deployed"):
        return f"stack {name}: not deployed (fanfit local up deploys it)"
    outputs = info.get("outputs") or {}
    when = info.get("deployed_at")
    at = (
        time.strftime(" at %Y-%m-%d %H:%M:%S UTC", time.gmtime(float(when)))
        if isinstance(when, (int, float))
        else ""
    )
    seconds = (info.get("timings") or {}).get("total_s")
    took = f" in {seconds:.1f} s" if isinstance(seconds, (int, float)) else ""
    return f"stack {name}: deployed{at}{took}, {len(outputs)} outputs (--output json lists them)"


def format_local(info: Mapping[str, Any], action: str = "status") -> str:
    """The lines ``fanfit local up|down|status`` prints for a person.

    Parameters
    ----------
    info : mapping
        :func:`fanfit.local.stack.status` or :func:`fanfit.local.stack.up`'s record.
    action : str
        ``up``, ``down`` or ``status``.

    Returns
    -------
    str
        Where the stack runs (endpoint, process, health, uptime), its state directory, whether
        the CPU and memory limits apply, whether the project is deployed into it, and how to stop
        it; when it is not running, the state directory and how to start it. ``--output json``
        prints the whole record instead.
    """
    state = f"state directory: {info.get('state_dir')}"
    if not info.get("running"):
        said = "stopped" if action == "down" else "not running"
        return f"local stack: {said}\n{state}\n{START_HINT}"
    health = "healthy" if info.get("healthy") else "NOT healthy (see its log)"
    started = (info.get("timings") or {}).get("start_s")
    age = (
        f"started in {started:.1f} s"
        if action == "up" and isinstance(started, (int, float))
        else f"up {float(info.get('uptime_s') or 0):.0f} s"
    )
    lines = [
        f"local stack: running at {info.get('endpoint')} (pid {info.get('pid')}, {health}, {age})",
        state,
        f"log: {info.get('log_file')}",
        _limits_line(info),
        _deploy_line(info),
        STOP_HINT,
    ]
    return "\n".join(lines)
