"""``fanfit estimate``: DML with repeated cross-fitting on the stack.

Its options are generated from :class:`fanfit.client.options.EstimateOptions` (flag, type,
default, choices, help), so the command line, ``--config`` files, ``--dry-run`` and
:meth:`fanfit.client.Client.submit_estimate` take the same options.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from fanfit.cli import attach, common, config
from fanfit.client.options import EstimateOptions, check_budget, check_deadline, check_weight
from fanfit.errors import InvalidJobError

__all__ = ["add_parser", "print_table", "run"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit estimate`` to the subcommands ``sub``: one flag per option of
    :class:`EstimateOptions`, then the stack, output and config options."""
    p = sub.add_parser(
        "estimate",
        help="estimate a causal parameter by DML with repeated cross-fitting",
        description="Double/debiased machine learning on the stack; options named as DoubleML names them.",
    )
    common.add_job_options(p, "estimate", EstimateOptions.infos())
    p.set_defaults(func=run)


def options_from_args(args: argparse.Namespace) -> EstimateOptions:
    """The :class:`EstimateOptions` of parsed (and config-resolved) arguments, the weight, the
    deadline and the budget checked under their flags' names (``--weight``, ``--deadline``,
    ``--budget``).

    Raises
    ------
    fanfit.errors.InvalidJobError
        The weight is out of range, a deadline or budget is not a number > 0, or both are given.
    """
    options = EstimateOptions(**{name: getattr(args, name) for name in EstimateOptions.names()})
    deadline = check_deadline(options.deadline, "--deadline")
    budget = check_budget(options.budget, "--budget")
    if deadline is not None and budget is not None:
        raise InvalidJobError(
            "--deadline and --budget are two objectives for the placement; give one, not both"
        )
    return options.replace(
        weight=check_weight(options.weight, "--weight"), deadline=deadline, budget=budget
    )


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit estimate``; returns the exit code: 0 done (or started, with ``--detach``),
    4 ``--timeout`` ran out, 130 Ctrl-C (both detach: the job keeps running)."""
    config.resolve_args(args)  # --config FILE; flags on the command line win
    options = options_from_args(args)
    if args.dry_run:
        from fanfit.client.check import check_estimate

        return common.print_dry_run("estimate", args, check_estimate(options=options).describe())
    # Reject bad options before any stack is touched (without --x, once the data's columns are read).
    if options.x is not None:
        options.build_spec()
    with common.stack_client(args) as client:
        job = client.submit_estimate(args.data, options=options)
        log.info("started job %s (%s)", job.job_id, job.execution_arn)
        # --detach, --timeout and Ctrl-C: the job keeps running; the command says what next
        return attach.follow(args, job, print_table)


def print_table(result: Any) -> None:
    """The printout of a finished estimate: DoubleML's printout of a fitted model (data summary,
    score, learners and their out-of-sample losses, resampling, fit summary), then the run's
    job, seed, phases' seconds, shards and cost (:func:`fanfit.client.printout.format_estimate`)."""
    print(str(result))
