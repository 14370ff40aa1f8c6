"""``fanfit resume JOB``: run a stopped or failed job again from what S3 holds."""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from fanfit.cli import common
from fanfit.cli.estimate import print_table
from fanfit.cli.train import print_train

__all__ = ["add_parser", "run"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit resume`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "resume",
        help="run a stopped or failed job again from what S3 holds: an estimate's shards "
        "without predictions, a train job's rounds from the first one not reduced",
        description="Starts a new execution of JOB. An estimate keeps its plan and folds, and "
        "every shard whose predictions are in S3 counts as done; a train job keeps its plan and "
        "every reduced round, and starts at the first round whose reduced model is not in S3, "
        "from the last reduced model (this works after a restart of the stack too).",
    )
    p.add_argument("job_id", metavar="JOB")
    common.add_stack_options(p)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the result")
    p.add_argument("--output", choices=["table", "json"], default="table")
    common.add_quiet_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit resume``; returns the exit code."""
    with common.stack_client(args) as client:
        job = client.resume(args.job_id)
        log.info("resumed job %s (%s)", job.job_id, job.execution_arn)
        result = job.result(timeout=args.timeout, progress=common.progress(args))
    if args.output == "json":
        print(json.dumps(result.to_dict(), allow_nan=False))
    elif job.kind == "train":
        print_train(result, job.job_id)
    else:
        print_table(result)
    return 0
