"""``fanfit train``: data-parallel training in synchronous rounds (BSP, LB-BSP, DS-Sync)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from fanfit.cli import attach, common, config
from fanfit.client.options import TrainOptions
from fanfit.jobs.documents.train import RoundRecord

__all__ = ["add_parser", "print_train", "run"]

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit train`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "train",
        help="train a model data-parallel in synchronous rounds (BSP, LB-BSP, DS-Sync)",
        description="Data-parallel training on the stack: K-Means (Lloyd) or mini-batch SGD for "
        "logistic / least-squares regression, one Lambda per worker per round, or for an MLP "
        "classifier on the GPU worker (AWS Batch).",
    )
    common.add_job_options(p, "train", TrainOptions.infos())
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit train``; returns the exit code: 0 done (or started, with ``--detach``), 4
    ``--timeout`` ran out, 130 Ctrl-C (both detach: the job keeps running)."""
    config.resolve_args(args)  # --config FILE; flags on the command line win
    options = TrainOptions(**{k: getattr(args, k) for k in TrainOptions.names()}).spec_options()
    # Reject bad options before any stack is touched (memory sizes are checked against the stack's).
    from fanfit.client.options import check_weight
    from fanfit.client.train import build_train_spec

    weight = check_weight(args.weight, "--weight")
    spec = build_train_spec(**options)
    if args.dry_run:
        return dry_run(args, spec, weight)
    with common.stack_client(args) as client:
        job = client.submit_train(args.data, weight=weight, **options)
        log.info("started job %s (%s)", job.job_id, job.execution_arn)
        # --detach, --timeout and Ctrl-C: the job keeps running; the command says what next
        return attach.follow(args, job, lambda result: print_train(result, job.job_id))


def print_train(result: Any, job_id: str) -> None:
    """The table of a finished train job: its model and one line per round."""
    print(f"fanfit train {result.model}: {result.n_iter} round(s), job {job_id}")
    if result.inertia is not None:
        print(f"inertia: {result.inertia:.6g}")
    for rd in result.rounds:
        r = RoundRecord.parse(rd, source="a round of result.json")
        batches = ",".join(str(w.batch) for w in r.workers)
        print(
            f"round {r.round:>4} ({r.phase}): batches {batches}; time {r.round_s:.3f} s, "
            f"idle {100 * r.idle_fraction:.1f} %"
            + (f", loss {r.loss:.5g}" if r.loss is not None else "")
        )
    print(f"execution: {result.execution_arn}")


def dry_run(args: argparse.Namespace, spec: Any, weight: float) -> int:
    """``--dry-run``: check the data against the spec and print what would run."""
    from fanfit.client.data import read_table, to_matrix

    columns = [*spec.features, *([spec.target] if spec.target else [])]
    names, values = to_matrix(read_table(args.data), columns)
    spec.check_data(names, values)
    info = {"model": spec.model, "n_obs": int(values.shape[0]), **spec.to_dict(), "weight": weight}
    info["worker_steps"] = spec.workers * spec.rounds
    info["fits"] = (
        f"{spec.workers} workers x {spec.rounds} rounds = {info['worker_steps']} worker steps at most"
    )
    return common.print_dry_run("train", args, info)
