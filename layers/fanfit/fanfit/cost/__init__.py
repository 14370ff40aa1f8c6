"""What a job costs on AWS: Lambda GB-seconds and requests, Batch instance seconds, state transitions.

Every quantity is counted from what the job left behind and priced from one
:class:`fanfit.prices.PriceTable` (:data:`fanfit.prices.DEFAULT_PRICES` unless the user passes theirs).
The arithmetic (:func:`job_cost`) takes plain lists and numbers; :func:`collect_job_cost` reads them
from a finished execution with boto3 clients.

How each quantity is counted
----------------------------
Lambda (https://aws.amazon.com/lambda/pricing/)
    One *invocation record* per Lambda attempt: ``{"function", "memory_mb", "duration_s"}``. The
    execution history has one ``TaskScheduled`` event (resource type ``lambda``) per attempt, retries
    included, and each is one request. Its duration is the handler's own measurement when the
    function returns ``started_at``/``ended_at`` (epoch s) in its payload (CrossFit, TrainShard), else
    the ``TaskStarted`` -> ``TaskSucceeded``/``TaskFailed``/``TaskTimedOut`` interval of the history;
    its memory is the payload's ``memory_mb`` or the function's configured ``MemorySize``. Lambda
    bills each invocation's duration rounded up to 1 ms (:func:`billed_seconds`), times the memory in
    GB (MB / 1024). Locally these are measured durations on the host, not Lambda's REPORT lines.
    Where the children of a Distributed Map have no readable history (LocalStack runs them inside
    the parent and lists no child executions), the shard records the job wrote (``timings.shards``
    of ``result.json``: ``started_at``, ``ended_at``, ``memory_mb``) stand in: one invocation each.
Step Functions (https://aws.amazon.com/step-functions/pricing/)
    Standard workflows bill state transitions, retries included. Per execution history (the parent,
    and each child execution of a Distributed Map): one transition per ``*StateEntered`` event
    (inline Map iterations are in the parent's history, so their states count there) plus one per
    retry, counted as ``TaskScheduled`` events beyond one per ``TaskStateEntered``. A Distributed
    Map also bills one transition per child execution it starts
    (https://docs.aws.amazon.com/step-functions/latest/dg/concepts-transitions.html). Without
    child histories (LocalStack), each child counts its start plus the states on the shortest path
    through the Map's ``ItemProcessor`` (:func:`processor_state_counts`: a lower bound, exact for
    a child that takes that path and retries nothing), times ``executionCounts.total`` of
    ``DescribeMapRun``; the count is kept as ``children_estimated`` and a note says so.
Batch (https://aws.amazon.com/batch/pricing/)
    AWS Batch has no charge of its own; a job pays for its instance. One record per
    GPU job: ``StoppedAt - StartedAt`` of the job, from the ``batch:submitJob`` task's output
    under ``.sync``, else from the ``WatchGpuJob`` check that saw it end (else the task's interval), priced per second at the instance type's hourly rate
    (``Container.InstanceType`` when the output names one, else the table's
    ``gpu_instance_type``). An instance shared by several jobs is charged to each for its run time.

The package: :mod:`~fanfit.cost.pricing` (the arithmetic), :mod:`~fanfit.cost.history` (what one
execution history holds), :mod:`~fanfit.cost.collect` (reading them from AWS) and
:mod:`~fanfit.cost.parts` (each part's share of a job of several parts). Every public name
is re-exported here, each imported on first use; a Lambda function imports the submodule it needs
(``fanfit.cost.pricing``), which does not load the history readers and the job documents they parse.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fanfit.cost.collect import collect_job_cost
    from fanfit.cost.history import (
        batch_jobs_from_history,
        count_state_transitions,
        lambda_invocations_from_history,
        processor_state_counts,
    )
    from fanfit.cost.parts import PartCost, part_costs
    from fanfit.cost.pricing import (
        LAMBDA_USD_PER_GB_SECOND,
        LAMBDA_USD_PER_REQUEST,
        CostItem,
        JobCost,
        billed_seconds,
        job_cost,
        lambda_cost_usd,
    )

#: Each re-exported name and the submodule it comes from.
_EXPORTS = {
    "collect_job_cost": "fanfit.cost.collect",
    "batch_jobs_from_history": "fanfit.cost.history",
    "count_state_transitions": "fanfit.cost.history",
    "lambda_invocations_from_history": "fanfit.cost.history",
    "processor_state_counts": "fanfit.cost.history",
    "PartCost": "fanfit.cost.parts",
    "part_costs": "fanfit.cost.parts",
    "LAMBDA_USD_PER_GB_SECOND": "fanfit.cost.pricing",
    "LAMBDA_USD_PER_REQUEST": "fanfit.cost.pricing",
    "CostItem": "fanfit.cost.pricing",
    "JobCost": "fanfit.cost.pricing",
    "billed_seconds": "fanfit.cost.pricing",
    "job_cost": "fanfit.cost.pricing",
    "lambda_cost_usd": "fanfit.cost.pricing",
}

__all__ = [
    "LAMBDA_USD_PER_GB_SECOND",
    "LAMBDA_USD_PER_REQUEST",
    "CostItem",
    "JobCost",
    "PartCost",
    "batch_jobs_from_history",
    "billed_seconds",
    "collect_job_cost",
    "count_state_transitions",
    "job_cost",
    "lambda_cost_usd",
    "lambda_invocations_from_history",
    "part_costs",
    "processor_state_counts",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
