"""The ``fanfit`` command line.

    fanfit estimate --data FILE --model plr --y COL --d COL[,COL] --x COL,... [--ml-l SPEC] ...
    fanfit train --data FILE --model {kmeans,logreg,linreg,mlp} --features COL,... [--target COL] ...
    fanfit report JOB --out DIR
    fanfit cost JOB
    fanfit resume JOB
    fanfit jobs
    fanfit local up | down | status
    fanfit --version

Without ``--stack`` a command uses the running local stack, or starts one for its duration. Results go
to stdout (DoubleML's printout of a fitted model, or one JSON object with ``--output json``); logs go
to stderr, and so does the live progress of ``estimate`` and ``train`` (a bar on a terminal, plain
lines otherwise; none with ``--quiet``). ``-v`` and ``--quiet`` go before or after the subcommand.
An error is one line on stderr, ``fanfit: error: ...``, naming the option, file, job or AWS error
code; exit codes: 0 done, 1 unexpected (the traceback with ``-v``), 2 bad input, 3 the job failed,
4 detached (``--timeout``), 5 the stack or AWS cannot be reached or refused
(:mod:`fanfit.cli.common`, which maps every exception to its line and code).

One module per command group (:mod:`~fanfit.cli.estimate`, :mod:`~fanfit.cli.train`,
:mod:`~fanfit.cli.status`, :mod:`~fanfit.cli.cost`, :mod:`~fanfit.cli.resume`, :mod:`~fanfit.cli.jobs`,
:mod:`~fanfit.cli.report`, :mod:`~fanfit.cli.local`, :mod:`~fanfit.cli.plan`), each with
``add_parser(sub)`` and the command's ``run(args)``; what they share is in
:mod:`~fanfit.cli.common`, job config files in :mod:`~fanfit.cli.config`. This module builds the
parser and runs a command (the console script ``fanfit = fanfit.cli:main``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from fanfit.cli import (
    common,
    cost,
    doctor,
    estimate,
    jobs,
    lifecycle,
    local,
    plan,
    report,
    resume,
    status,
    train,
)
from fanfit.cli.common import (
    EXIT_DETACHED,
    EXIT_FAILED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_STACK,
    EXIT_UNEXPECTED,
)

__all__ = [
    "EXIT_DETACHED",
    "EXIT_FAILED",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_STACK",
    "EXIT_UNEXPECTED",
    "build_parser",
    "main",
    "version",
]

#: How a command opens its stack's client; :func:`main` hands it to the command on ``args``
#: (``args.open_client``), so a test may replace it here.
_client = common.open_client


def version() -> str:
    """fanfit's version from the installed package's metadata (``pip show fanfit``); ``unknown``
    when fanfit runs from a source tree that pip did not install."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("fanfit")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


class _Commands:
    """The subparsers action, giving every subcommand the help format, ``-v``/``--quiet`` after
    its name (:func:`fanfit.cli.common.command_parent`), and a record of its parser."""

    def __init__(self, sub: Any) -> None:
        self._sub = sub
        self.parsers: dict[str, argparse.ArgumentParser] = {}

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("formatter_class", common.HelpFormatter)
        kwargs["parents"] = [*kwargs.get("parents", ()), common.command_parent()]
        kwargs.setdefault("conflict_handler", "resolve")  # a command may redefine --quiet
        p = self._sub.add_parser(name, **kwargs)
        self.parsers[name] = p
        return p  # type: ignore[no-any-return]


def _build(argv_parsers: dict[str, argparse.ArgumentParser] | None = None) -> common.Parser:
    parser = common.Parser(
        prog="fanfit",
        description="Serverless DML cross-fitting on AWS Step Functions and Lambda.",
        formatter_class=common.HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fanfit {version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help=common.VERBOSE_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=common.QUIET_HELP)
    commands = _Commands(parser.add_subparsers(dest="command", required=True))
    groups = (estimate, train, status, cost, resume, jobs, report, local, plan, lifecycle, doctor)
    for group in groups:
        group.add_parser(commands)
    if argv_parsers is not None:
        argv_parsers.update(commands.parsers)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The ``fanfit`` parser: the top-level options and one subcommand per command group."""
    return _build()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fanfit`` command; returns the exit code.

    A usage error, ``--help`` and ``--version`` return argparse's code (2, 0) instead of raising
    ``SystemExit``; every exception of the command is one line on stderr with its code
    (:func:`fanfit.cli.common.report_error`).
    """
    parsers: dict[str, argparse.ArgumentParser] = {}
    try:
        args = _build(parsers).parse_args(argv)
    except SystemExit as exc:  # usage error (one line, code 2), --help or --version (0)
        return exc.code if isinstance(exc.code, int) else EXIT_INVALID if exc.code else EXIT_OK
    logging.basicConfig(
        # --quiet leaves the result and the warnings: no progress and no "started job" line
        level=logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args.open_client = _client
    try:
        return int(args.func(args))
    except (Exception, KeyboardInterrupt) as exc:
        return common.report_error(exc, args, parsers.get(args.command))
