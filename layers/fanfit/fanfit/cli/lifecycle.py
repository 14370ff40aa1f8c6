"""A job's life after ``fanfit estimate`` or ``fanfit train`` started it: ``fanfit wait``,
``result``, ``cancel``, ``delete`` and ``logs`` (how those two commands follow the job they
start, ``--detach``, ``--timeout`` and Ctrl-C, is :mod:`fanfit.cli.attach`).

Exit codes: 0 done (``wait``: the job succeeded), 3 the job failed or was cancelled, 4 the
command detached from a job that still runs (``--timeout`` ran out; ``result`` of a running job),
130 detached by Ctrl-C (the job keeps running).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

from fanfit import errors
from fanfit.cli import attach, common
from fanfit.cli.estimate import print_table
from fanfit.cli.train import print_train

__all__ = [
    "add_parser",
    "print_result",
    "run_cancel",
    "run_delete",
    "run_logs",
    "run_result",
    "run_wait",
]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit wait``, ``result``, ``cancel``, ``delete`` and ``logs`` to ``sub``."""
    p = sub.add_parser(
        "wait",
        help="wait for a job to end: exit 0 when it succeeded, 3 when it failed or was "
        "cancelled, 4 when --timeout runs out first",
    )
    p.add_argument("job_id", metavar="JOB")
    common.add_stack_options(p)
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds to wait; then exit 4, the job still running (default: 3600)")  # fmt: skip
    common.add_quiet_option(p)
    p.set_defaults(func=run_wait)

    p = sub.add_parser(
        "result",
        help="print a finished job's result: the same table or JSON as an attached "
        "`fanfit estimate` or `fanfit train`",
    )
    p.add_argument("job_id", metavar="JOB")
    common.add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table",
                   help="DoubleML's printout (train: one line per round) or one JSON object "
                   "(default: table)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=0.0,
                   help="seconds to wait for a running job; then exit 4 (default: 0, do not "
                   "wait)")  # fmt: skip
    p.set_defaults(func=run_result)

    p = sub.add_parser(
        "cancel",
        help="cancel a running job: stop its execution, terminate its Batch jobs, release its "
        "partition, then wait (at most 30 s) until none of its steps runs; its status becomes "
        "CANCELLED",
    )
    p.add_argument("job_id", metavar="JOB")
    common.add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run_cancel)

    p = sub.add_parser(
        "delete",
        help="remove an ended job's S3 objects (its uploaded data too unless another job uses "
        "it) and its records",
    )
    p.add_argument("job_id", metavar="JOB")
    common.add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=run_delete)

    p = sub.add_parser(
        "logs", help="a job's CloudWatch Logs: its functions' lines and its Batch jobs' output"
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument("--shard", metavar="ID", default=None,
                   help="only the lines of this shard (its id, as `fanfit status` names it)")  # fmt: skip
    common.add_stack_options(p)
    p.add_argument("--output", choices=["table", "json"], default="table",
                   help="one line per event, or one JSON object per line (default: table)")  # fmt: skip
    p.set_defaults(func=run_logs)


def print_result(result: Any, job: Any, output: str) -> None:
    """Print a finished job's result as an attached run does: ``--output json`` one JSON
    object, else the estimate's DoubleML printout or the train job's rounds."""
    if output == "json":
        print(json.dumps(result.to_dict(), allow_nan=False))
        return
    if job.kind == "train":
        print_train(result, job.job_id)
        return
    print_table(result)


def run_wait(args: argparse.Namespace) -> int:
    """Run ``fanfit wait JOB``; 0 succeeded, 3 failed or cancelled, 4 still running."""
    with common.stack_client(args) as client:
        job = client.job(args.job_id)
        try:
            job.wait(timeout=args.timeout, progress=common.progress(args))
        except errors.WaitTimeoutError as exc:
            print(f"fanfit: {exc}; wait again, or `fanfit cancel {args.job_id}"
                  f"{attach.stack_flag(args)}`", file=sys.stderr)  # fmt: skip
            return attach.EXIT_DETACHED
        except KeyboardInterrupt:
            print(
                f"\nfanfit: interrupted. {attach.detach_hint(args.job_id, args)}", file=sys.stderr
            )
            return attach.EXIT_INTERRUPTED
        except errors.JobCancelledError as exc:
            print(f"fanfit: {exc}", file=sys.stderr)
            return common.EXIT_FAILED
        except errors.FanfitError as exc:  # the job failed (its named error)
            print(f"fanfit: job {args.job_id} failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr)  # fmt: skip
            return common.EXIT_FAILED
    print(f"job {args.job_id} SUCCEEDED")
    return 0


def run_result(args: argparse.Namespace) -> int:
    """Run ``fanfit result JOB``; 0 printed, 3 failed or cancelled, 4 still running."""
    with common.stack_client(args) as client:
        job = client.job(args.job_id)
        try:
            result = job.result(timeout=args.timeout)
        except errors.WaitTimeoutError:
            print(f"fanfit: job {args.job_id} is still running; it has no result yet. "
                  f"{attach.detach_hint(args.job_id, args)}", file=sys.stderr)  # fmt: skip
            return attach.EXIT_DETACHED
    print_result(result, job, args.output)
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    """Run ``fanfit cancel JOB``; 0 when cancelled or already ended."""
    with common.stack_client(args) as client:
        out = client.job(args.job_id).cancel()
    if args.output == "json":
        print(json.dumps(out))
        return 0
    if not out["stopped"]:
        print(f"job {args.job_id} had already ended ({out['status']}); nothing to cancel")
        return 0
    batch = out["batch_jobs_terminated"]
    print(
        f"job {args.job_id} CANCELLED: execution stopped, {len(batch)} Batch job(s) terminated, "
        + ("partition released" if out["partition_released"] else "no partition held")
    )
    still = out.get("still_running")
    if still is None:
        print("its running steps cannot be seen (no dynamodb:Scan on the idempotency table)")
    elif still:
        print(
            f"still running after {out['waited_s']:.1f} s (they stop at their next unit or "
            f"poll): {', '.join(still)}"
        )
    else:
        print(f"nothing of it runs any more ({out['waited_s']:.1f} s after the stop)")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    """Run ``fanfit delete JOB``; 0 when deleted (2: the job still runs, cancel it first)."""
    with common.stack_client(args) as client:
        out = client.delete(args.job_id)
    if args.output == "json":
        print(json.dumps(out))
        return 0
    kept = f", data kept (another job uses it): {', '.join(out['data_kept'])}" * bool(
        out["data_kept"]
    )
    print(
        f"job {args.job_id} deleted: {out['objects_removed']} object(s), "
        f"{len(out['data_removed'])} data object(s) removed{kept}; record "
        + ("removed" if out["record_removed"] else "absent")
    )
    return 0


def run_logs(args: argparse.Namespace) -> int:
    """Run ``fanfit logs JOB [--shard ID]``."""
    with common.stack_client(args) as client:
        events = client.logs(args.job_id, shard_id=args.shard)
    for ev in events:
        if args.output == "json":
            print(json.dumps(ev))
            continue
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ev["timestamp"] / 1000))
        group = ev["log_group"].rsplit("/", 1)[-1]
        print(f"{stamp}.{ev['timestamp'] % 1000:03d}Z {group}: {ev['message']}")
    if not events and args.output != "json":
        what = f"shard {args.shard} of job" if args.shard else "job"
        print(f"(no log lines of {what} {args.job_id})", file=sys.stderr)
    return 0
