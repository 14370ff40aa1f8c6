"""The GPU worker: what an AWS Batch job of fanfit runs (``python -m fanfit.jobs.gpu KIND TASK``).

The job definition's command is ``["python", "-m", "fanfit.jobs.gpu", "Ref::kind", "Ref::task"]``;
Step Functions' ``batch:submitJob`` state (then checked by :mod:`fanfit.jobs.gpu_watch` until it
ends) fills the parameters with the shard's kind and the
same JSON event the Lambda function would get (``States.JsonToString``). The worker reads and writes
S3 exactly like the Lambda shard, so the rest of the pipeline cannot tell them apart:

- ``crossfit``: :func:`fanfit.jobs.estimate.crossfit_shard` on a :class:`~fanfit.jobs.documents.events.CrossFitEvent`;
- ``train_shard``: :func:`fanfit.jobs.train.shard.train_shard` on a :class:`~fanfit.jobs.documents.events.TrainShardEvent`.

Each writes its output under a key determined by the shard's identity, so a retried attempt
(``RetryStrategy``) overwrites the same object with the same content: no result is counted twice.
The task is parsed as JSON into a pydantic model, never evaluated. The worker's resource in the
throughput records is ``gpu:<instance type>`` (``$FANFIT_GPU_INSTANCE_TYPE``), its memory the job's ``MEMORY`` requirement
(``$FANFIT_GPU_WORKER_MEMORY_MB``; else the host's memory).

Exit codes: 0 done, 2 an invalid task (the job fails and the state machine's Catch records it),
1 any other failure.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from fanfit import errors
from fanfit.jobs.documents.events import CrossFitEvent, TrainShardEvent
from fanfit.sched.resources import stack_gpu_resource
from fanfit.storage import JobStore

log = logging.getLogger("fanfit.gpu")

KINDS = ("crossfit", "train_shard")


def _host_memory_mb() -> int:
    """The host's physical memory, MB: the worker's memory when the job does not say."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20)


def run_task(kind: str, task: dict[str, Any], store: JobStore | None = None) -> dict[str, Any]:
    """Run one shard on this worker.

    Parameters
    ----------
    kind : {'crossfit', 'train_shard'}
    task : dict
        The event the Lambda shard would get.
    store : JobStore, optional
        Default: the bucket ``$FANFIT_BUCKET``.

    Returns
    -------
    dict
        The shard's output (its S3 key and statistics), as the Lambda shard returns it.

    Raises
    ------
    InvalidJobError
        An unknown kind or a task that does not parse.
    """
    if kind not in KINDS:
        raise errors.InvalidJobError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    try:
        event = (CrossFitEvent if kind == "crossfit" else TrainShardEvent).model_validate(task)
    except ValidationError as exc:
        raise errors.InvalidJobError(f"invalid {kind} task: {exc}") from exc
    if store is None:
        store = JobStore(os.environ["FANFIT_BUCKET"])
    memory_mb = int(os.environ.get("FANFIT_GPU_WORKER_MEMORY_MB", "0") or 0) or _host_memory_mb()
    if isinstance(event, CrossFitEvent):
        from fanfit.jobs.estimate import crossfit_shard

        return crossfit_shard(
            store,
            event.job_id,
            event.plan_key,
            event.stage,
            event.shard.model_dump(),
            memory_mb=memory_mb,
            resource_name=stack_gpu_resource(),
            execution_arn=event.execution_arn,
        )
    from fanfit.jobs.train.shard import train_shard

    return train_shard(
        store,
        event.job_id,
        event.round,
        event.worker,
        memory_mb=memory_mb,
        resource_name=stack_gpu_resource(),
        execution_arn=event.execution_arn,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the Batch job: ``python -m fanfit.jobs.gpu KIND TASK_JSON``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        log.error("usage: python -m fanfit.jobs.gpu KIND TASK_JSON; got %d arguments", len(args))
        return 2
    kind, raw = args
    try:
        task = json.loads(raw)
        if not isinstance(task, dict):
            raise errors.InvalidJobError(
                f"the task must be a JSON object; got {type(task).__name__}"
            )
        out = run_task(kind, task)
    except (json.JSONDecodeError, errors.InvalidJobError) as exc:
        log.error("invalid task: %s", exc)
        return 2
    log.info("done: %s", json.dumps({k: v for k, v in out.items() if not isinstance(v, dict)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
