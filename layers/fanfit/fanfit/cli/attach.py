"""How ``fanfit estimate`` and ``fanfit train`` follow a job they started: ``--detach``,
``--timeout`` and Ctrl-C (:func:`follow`), and the lines that tell how to wait for, fetch or cancel
a job the command detached from (:func:`detach_hint`).

Exit codes: 0 done (or started, with ``--detach``), 4 ``--timeout`` ran out
(:data:`EXIT_DETACHED`), 130 Ctrl-C (:data:`EXIT_INTERRUPTED`); in both the job keeps running.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from fanfit import errors
from fanfit.cli import common
from fanfit.cli.common import EXIT_DETACHED, EXIT_INTERRUPTED

__all__ = ["EXIT_DETACHED", "EXIT_INTERRUPTED", "detach_hint", "follow", "stack_flag"]

log = logging.getLogger("fanfit")

# The exit codes are fanfit.cli.common's (one table of codes): EXIT_DETACHED when --timeout ran
# out while the job still runs, EXIT_INTERRUPTED on Ctrl-C while attached (128 + SIGINT).


def stack_flag(args: argparse.Namespace) -> str:
    """`` --stack NAME [--region R]`` as the user gave them, for the commands we print."""
    out = f" --stack {args.stack}" if getattr(args, "stack", None) else ""
    return out + (f" --region {args.region}" if getattr(args, "region", None) else "")


def detach_hint(job_id: str, args: argparse.Namespace) -> str:
    """The lines telling how to wait for, fetch or cancel a job the command detached from."""
    flag = stack_flag(args)
    return (
        f"job {job_id} keeps running on the stack. Next:\n"
        f"  fanfit wait {job_id}{flag}      # wait for it to end\n"
        f"  fanfit result {job_id}{flag}    # print its result once it has ended\n"
        f"  fanfit cancel {job_id}{flag}    # stop it"
    )


def follow(args: argparse.Namespace, job: Any, print_table: Callable[[Any], None]) -> int:
    """Follow a job ``fanfit estimate`` or ``fanfit train`` started, and return the exit code.

    With ``--detach``: print the job id (``--output json``: ``job_id`` and ``execution_arn``)
    and return 0 at once. Else wait for the result (``--timeout``, live progress unless
    ``--quiet``) and print it: one JSON object with ``--output json``, else
    ``print_table(result)``. When ``--timeout`` runs out (:data:`EXIT_DETACHED`) or on Ctrl-C
    (:data:`EXIT_INTERRUPTED`), detach: the job keeps running, and stderr says how to wait for,
    fetch or cancel it. On AWS, log the execution's page in the Step Functions console first.
    """
    url = getattr(job, "console_url", None)
    if url:
        log.info("console: %s", url)
    if getattr(args, "detach", False):
        if args.output == "json":
            out = {"job_id": job.job_id, "execution_arn": job.execution_arn}
            print(json.dumps({**out, **({"console_url": url} if url else {})}))
        else:
            print(job.job_id)
        log.info("%s", detach_hint(job.job_id, args))
        return 0
    try:
        result = job.result(timeout=args.timeout, progress=common.progress(args))
    except errors.WaitTimeoutError:
        print(f"fanfit: --timeout {args.timeout:g} s ran out; detached. "
              f"{detach_hint(job.job_id, args)}", file=sys.stderr)  # fmt: skip
        return EXIT_DETACHED
    except KeyboardInterrupt:
        print(f"\nfanfit: interrupted; detached. {detach_hint(job.job_id, args)}",
              file=sys.stderr)  # fmt: skip
        return EXIT_INTERRUPTED
    if args.output == "json":
        print(json.dumps(result.to_dict(), allow_nan=False))
    else:
        print_table(result)
    return 0
