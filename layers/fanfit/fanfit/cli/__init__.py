"""The ``fanfit`` command line.

    fanfit estimate --data FILE --model plr --y COL --d COL[,COL] --x COL,... [--ml-l SPEC] ...
    fanfit train --data FILE --model {kmeans,logreg,linreg,mlp} --features COL,... [--target COL] ...
    fanfit report JOB --out DIR
    fanfit resume JOB
    fanfit jobs
    fanfit local up | down | status

Without ``--stack`` a command uses the running local stack, or starts one for its duration. Results go
to stdout (DoubleML's printout of a fitted model, or one JSON object with ``--output json``); logs go to stderr, and
so does the live progress of ``estimate`` and ``train`` (a bar on a terminal, plain lines otherwise;
none with ``--quiet``).
Exit codes: 0 done, 2 invalid input, 3 the job failed, 4 the stack cannot be reached.

One module per command group (:mod:`~fanfit.cli.estimate`, :mod:`~fanfit.cli.train`,
:mod:`~fanfit.cli.status`, :mod:`~fanfit.cli.resume`, :mod:`~fanfit.cli.jobs`,
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

from fanfit import errors
from fanfit.cli import (
    common,
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
from fanfit.cli.common import EXIT_FAILED, EXIT_INVALID, EXIT_STACK

__all__ = ["EXIT_FAILED", "EXIT_INVALID", "EXIT_STACK", "build_parser", "main"]

#: How a command opens its stack's client; :func:`main` hands it to the command on ``args``
#: (``args.open_client``), so a test may replace it here.
_client = common.open_client


def build_parser() -> argparse.ArgumentParser:
    """The ``fanfit`` parser: the top-level options and one subcommand per command group."""
    parser = argparse.ArgumentParser(
        prog="fanfit", description="Serverless DML cross-fitting on AWS Step Functions and Lambda."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in (estimate, train, status, resume, jobs, report, local, plan, lifecycle, doctor):
        group.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fanfit`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        # --quiet leaves the result and the warnings: no progress and no "started job" line
        level=logging.DEBUG
        if args.verbose
        else logging.WARNING
        if getattr(args, "quiet", False)
        else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    args.open_client = _client
    try:
        return int(args.func(args))
    except errors.InvalidJobError as exc:
        print(f"fanfit: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except errors.StackError as exc:
        print(f"fanfit: error: {exc}", file=sys.stderr)
        return EXIT_STACK
    except errors.FanfitError as exc:
        print(f"fanfit: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
