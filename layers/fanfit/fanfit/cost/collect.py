"""Counting what a finished execution used, with boto3 clients: :func:`collect_job_cost`.

Reads the parent's history, each Distributed Map child's history where the API lists them (or
estimates them where it cannot: LocalStack), the functions' configured memory, and prices it all
with :func:`fanfit.cost.pricing.job_cost` (see :mod:`fanfit.cost` for how each quantity is counted).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fanfit.cost.history import (
    batch_jobs_from_history,
    count_state_transitions,
    event_details,
    lambda_invocations_from_history,
    loads_json,
    processor_state_counts,
)
from fanfit.cost.pricing import JobCost, job_cost
from fanfit.errors import LAMBDA_THROTTLE_ERROR
from fanfit.jobs.documents.estimate import ShardStats
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.resources import GPU_PREFIX

__all__ = ["collect_job_cost"]

log = logging.getLogger(__name__)


def _history(sfn: Any, execution_arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    pages = sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn)
    for page in pages:
        events.extend(page["events"])
    return events


#: Error codes of ``ListExecutions(mapRunArn=...)`` that say the API cannot list a Map Run's
#: children at all (an emulator), not that it is busy: retrying them cannot help.
_CANNOT_LIST_CODES = frozenset(
    {
        "ValidationException",
        "UnsupportedOperation",
        "InvalidArn",
        "InternalFailure",
        "NotImplemented",
    }
)


class _CannotListChildren(Exception):
    """The API cannot list a Map Run's child executions (raised to end the call, not retry it)."""


def _cannot_list(response: Any = None, **_: Any) -> None:
    """A ``needs-retry`` handler: raises :class:`_CannotListChildren` for an error that says the
    children cannot be listed; returns None (botocore's own retry rules) for anything else.

    LocalStack answers ``ListExecutions`` by ``mapRunArn`` with HTTP 500 ``InternalError``
    (``exception while calling stepfunctions.ListExecutions: ...``: its provider fails on the
    missing state machine ARN), which botocore retries with backoff (legacy mode: 4 retries, about
    7.5 s of sleep on average) before :func:`collect_job_cost` falls back to the shard records.
    That message is LocalStack's wrapping of a crash in its own code, never AWS's, so it is
    recognised and not retried; a throttle or an AWS 5xx is retried as before. It raises rather
    than returning False: botocore before 1.43 reads any answer but None as "retry now".

    Raises
    ------
    _CannotListChildren
        For such an error; it leaves the API call at once.
    """
    if not isinstance(response, tuple) or len(response) != 2:
        return
    error = (response[1] or {}).get("Error", {}) if isinstance(response[1], dict) else {}
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    if code in _CANNOT_LIST_CODES or (
        code == "InternalError" and message.startswith("exception while calling")
    ):
        raise _CannotListChildren(f"{code}: {message}")


def _child_executions(sfn: Any, map_run_arn: str) -> list[str] | None:
    """ARNs of a map run's child executions, or None when the API cannot list them (LocalStack).

    :func:`collect_job_cost` asks once per job: after a None it does not list the other Map Runs'
    children (one wave's run each). A failure that says the API cannot list them (:func:`_cannot_list`) is not retried: for this
    call only, a ``needs-retry`` handler runs before botocore's retry handler and ends the call.
    """
    events: Any = getattr(getattr(sfn, "meta", None), "events", None)  # None: not botocore's
    event = None
    if events is not None:
        service = sfn.meta.service_model.service_id.hyphenize()
        event = f"needs-retry.{service}.ListExecutions"
        events.register_first(event, _cannot_list, unique_id="fanfit-cost-cannot-list")
    try:
        arns: list[str] = []
        for page in sfn.get_paginator("list_executions").paginate(mapRunArn=map_run_arn):
            arns.extend(e["executionArn"] for e in page["executions"])
        return arns
    except Exception as exc:  # botocore ClientError / ParamValidationError from an emulator
        log.debug("cannot list child executions of %s: %s", map_run_arn, exc)
        return None
    finally:
        if events is not None:
            events.unregister(event, _cannot_list, unique_id="fanfit-cost-cannot-list")


def collect_job_cost(
    sfn: Any,
    execution_arn: str,
    *,
    lambda_client: Any = None,
    shard_records: Sequence[ShardStats | Mapping[str, Any]] | None = None,
    shard_function: str = "CrossFit",
    prices: PriceTable = DEFAULT_PRICES,
) -> JobCost:
    """Count and price what one execution used (see the module docstring for how).

    Parameters
    ----------
    sfn : botocore Step Functions client
    execution_arn : str
        The job's (parent) execution.
    lambda_client : botocore Lambda client, optional
        For the configured memory of functions whose payload does not report it; without it
        those functions' GB-seconds are left out (and a note says so).
    shard_records : sequence of ShardStats (or their dicts), optional
        The job's shard statistics (``timings.shards`` of ``result.json``:
        :class:`fanfit.jobs.documents.estimate.ShardStats`, a dict is parsed through it), used
        for the Lambda invocations of Distributed Map children when their histories cannot be
        read; a record with ``placement == 'gpu'`` (or a ``resource`` starting with ``gpu:``)
        is a Batch job of that duration instead, at the table's ``gpu_instance_type``.
    shard_function : str
        Function name given to those invocations.
    prices : PriceTable

    Returns
    -------
    JobCost

    Raises
    ------
    botocore.exceptions.ClientError
        If the parent execution's history cannot be read.
    fanfit.errors.InvalidDocumentError
        A shard record that does not fit :class:`ShardStats` (naming the field).
    """
    shards = [
        s if isinstance(s, ShardStats) else ShardStats.parse(s, source=f"shard record {i}")
        for i, s in enumerate(shard_records or ())
    ]
    notes: list[str] = []
    parent = _history(sfn, execution_arn)
    histories = [parent]
    transitions = {"parent": count_state_transitions(parent)}
    map_runs = [
        str(event_details(e)["mapRunArn"])
        for e in parent
        if e.get("type") == "MapRunStarted" and event_details(e).get("mapRunArn")
    ]
    unread_children = 0
    listable = True  # False once the API could not list one run's children: not asked again
    for run in map_runs:
        children = _child_executions(sfn, run) if listable else None
        listable = children is not None
        if children is not None:
            transitions["child_starts"] = transitions.get("child_starts", 0) + len(children)
            for child in children:
                events = _history(sfn, child)
                histories.append(events)
                transitions["children"] = transitions.get("children", 0) + (
                    count_state_transitions(events)
                )
            continue
        try:
            counts = sfn.describe_map_run(mapRunArn=run)["executionCounts"]
            n_children = int(counts.get("total", 0))
        except Exception as exc:  # an emulator without DescribeMapRun
            log.debug("cannot describe map run %s: %s", run, exc)
            n_children = 0
        unread_children += n_children
        transitions["child_starts"] = transitions.get("child_starts", 0) + n_children
    if unread_children:
        per_child = _states_per_child(sfn, execution_arn)
        transitions["children_estimated"] = unread_children * per_child
        notes.append(
            f"{unread_children} Distributed Map child execution(s) have no readable history: "
            f"counted as {per_child} state transition(s) each, and their Lambda invocations from "
            "the job's shard records"
        )

    memory: dict[str, int | None] = {}
    invocations: list[dict[str, Any]] = []
    batch_jobs: list[dict[str, Any]] = []
    for events in histories:
        if lambda_client is not None:
            _configured_memory(lambda_client, events, memory)
        found, found_notes = lambda_invocations_from_history(events, memory)
        invocations += found
        notes += [n for n in found_notes if n not in notes]
        batch_jobs += batch_jobs_from_history(events)
    if unread_children:
        for s in shards:
            seconds = s.ended_at - s.started_at
            if s.placement == "gpu" or (s.resource or "").startswith(GPU_PREFIX):
                batch_jobs.append({"instance_s": seconds, "instance_type": None})
            else:
                invocations.append(
                    {"function": shard_function, "memory_mb": s.memory_mb, "duration_s": seconds}
                )
    # A throttled invocation never ran: Lambda bills neither its request nor its duration.
    throttles = sum(1 for i in invocations if i.get("error") == LAMBDA_THROTTLE_ERROR)
    invocations = [i for i in invocations if i.get("error") != LAMBDA_THROTTLE_ERROR]
    billable = [i for i in invocations if i.get("memory_mb") is not None]
    # Requests are billed whatever the memory: count the unknown-memory ones at 0 MB.
    billable += [{**i, "memory_mb": 0} for i in invocations if i.get("memory_mb") is None]
    cost = job_cost(billable, transitions, batch_jobs, prices, notes)
    return dataclasses.replace(cost, throttles=throttles)


def _states_per_child(sfn: Any, execution_arn: str) -> int:
    try:
        definition = sfn.describe_state_machine_for_execution(executionArn=execution_arn)[
            "definition"
        ]
        counts = processor_state_counts(definition)
    except Exception as exc:  # an emulator without the call
        log.debug("cannot read the definition of %s: %s", execution_arn, exc)
        counts = {}
    # fanfit's state machines have one Distributed Map; with several, the largest is used.
    return max(counts.values(), default=1)


def _configured_memory(
    lambda_client: Any, events: Sequence[Mapping[str, Any]], memory: dict[str, int | None]
) -> None:
    for ev in events:
        if ev.get("type") != "TaskScheduled" or event_details(ev).get("resourceType") != "lambda":
            continue
        params = loads_json(event_details(ev).get("parameters")) or {}
        arn = params.get("FunctionName")
        if not arn or arn in memory:
            continue
        try:
            memory[arn] = int(
                lambda_client.get_function_configuration(FunctionName=arn)["MemorySize"]
            )
        except Exception as exc:  # missing permission, deleted function
            log.debug("cannot read the memory size of %s: %s", arn, exc)
            memory[arn] = None  # asked once; unknown
