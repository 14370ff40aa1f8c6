"""Reading one Step Functions execution history: Lambda invocations, Batch jobs, state transitions.

Pure: ``get_execution_history`` events (plain dicts: AWS's documents, not fanfit's) in, records and
counts out, as :mod:`fanfit.cost` describes them; a Lambda step's output is read through
:class:`~fanfit.jobs.documents.record.StepTiming`; :mod:`fanfit.cost.collect` fetches the histories.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeGuard

from fanfit.jobs.documents.record import StepTiming

__all__ = [
    "batch_jobs_from_history",
    "count_state_transitions",
    "event_details",
    "lambda_invocations_from_history",
    "loads_json",
    "processor_state_counts",
]

_END_TYPES = ("TaskSucceeded", "TaskFailed", "TaskTimedOut")


def _ts(value: Any) -> float:
    """Epoch seconds of a history timestamp (datetime from boto3, or a number in plain fixtures)."""
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


def event_details(event: Mapping[str, Any]) -> dict[str, Any]:
    """The ``...EventDetails`` dict of a history event (empty when it has none)."""
    for key, value in event.items():
        if key.endswith("EventDetails") and isinstance(value, dict):
            return value
    return {}


def loads_json(text: Any) -> Any:
    """``text`` parsed as JSON (None when it is not JSON); a value that is not a string as is."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return None


def _function_name(arn: str) -> str:
    """``arn:aws:lambda:r:a:function:NAME[:alias]`` -> ``NAME``; a bare name is returned as is."""
    parts = str(arn).split(":")
    if "function" in parts:
        i = parts.index("function")
        if i + 1 < len(parts):
            return parts[i + 1]
    return str(arn)


def _attempts(events: Sequence[Mapping[str, Any]], resource_type: str) -> list[dict[str, Any]]:
    """Task attempts of one resource type: scheduled event, start and end timestamps, end event."""
    by_id = {e["id"]: e for e in events if "id" in e}
    open_: dict[Any, dict[str, Any]] = {}  # scheduled event id -> attempt
    order: list[dict[str, Any]] = []
    for ev in events:
        kind = ev.get("type", "")
        if kind == "TaskScheduled":
            if event_details(ev).get("resourceType") != resource_type:
                continue
            attempt = {"scheduled": ev, "start": _ts(ev["timestamp"]), "end": None, "last": None}
            open_[ev.get("id", id(ev))] = attempt
            order.append(attempt)
        elif kind == "TaskStarted" and open_:
            sid = _scheduled_id(ev, by_id, open_)
            if sid is not None:
                open_[sid]["start"] = _ts(ev["timestamp"])
        elif kind in _END_TYPES and open_:
            sid = _scheduled_id(ev, by_id, open_)
            if sid is None:
                continue
            attempt = open_.pop(sid)
            attempt["end"] = _ts(ev["timestamp"])
            attempt["last"] = ev
    return order


def _scheduled_id(ev: Mapping[str, Any], by_id: dict[Any, Any], open_: dict[Any, Any]) -> Any:
    """The id of the open TaskScheduled event ``ev`` follows: up the previousEventId chain, or,
    in fixtures without ids, the latest open attempt."""
    prev, hops = ev.get("previousEventId"), 0
    while prev is not None and hops < 16:
        if prev in open_:
            return prev
        parent = by_id.get(prev)
        if parent is None:
            break
        prev, hops = parent.get("previousEventId"), hops + 1
    if ev.get("previousEventId") is None and "id" not in ev:
        return next(reversed(open_))
    return None


def lambda_invocations_from_history(
    events: Sequence[Mapping[str, Any]], memory_mb: Mapping[str, int | None] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Lambda invocation records of one execution history.

    Parameters
    ----------
    events : sequence of dict
        ``get_execution_history`` events in order (``timestamp`` a datetime or epoch seconds;
        ``id``/``previousEventId`` as Step Functions writes them).
    memory_mb : dict of str to int, optional
        Configured memory (MB) by function ARN or name, for invocations whose payload does not
        carry ``memory_mb``.

    Returns
    -------
    invocations : list of dict
        One per ``TaskScheduled`` event of resource type ``lambda`` (retries included):
        ``function`` (name), ``function_arn``, ``memory_mb`` (None when unknown), ``duration_s``,
        ``source`` (``'handler'`` when the payload's ``started_at``/``ended_at`` gave the duration,
        else ``'history'``), ``status`` (the end event type, or ``'open'``) and ``error`` (a failed
        attempt's error name, e.g. ``Lambda.TooManyRequestsException`` for a throttle, else None).
    notes : list of str
        Functions whose memory is unknown.
    """
    memory_mb = dict(memory_mb or {})
    out: list[dict[str, Any]] = []
    unknown: set[str] = set()
    for attempt in _attempts(events, "lambda"):
        params = loads_json(event_details(attempt["scheduled"]).get("parameters")) or {}
        arn = str(params.get("FunctionName", "unknown"))
        name = _function_name(arn)
        last = attempt["last"]
        end = attempt["end"] if attempt["end"] is not None else attempt["start"]
        duration, source, memory = end - attempt["start"], "history", None
        if last is not None and last.get("type") == "TaskSucceeded":
            output = loads_json(event_details(last).get("output")) or {}
            payload = output.get("Payload") if isinstance(output, dict) else None
            if isinstance(payload, dict):
                timing = StepTiming.model_validate(payload)
                if timing.duration_s is not None:
                    duration, source = timing.duration_s, "handler"
                memory = timing.memory_mb
        if memory is None:
            memory = memory_mb.get(arn, memory_mb.get(name))
        if memory is None:
            unknown.add(name)
        out.append(
            {
                "function": name,
                "function_arn": arn,
                "memory_mb": memory,
                "duration_s": max(duration, 0.0),
                "source": source,
                "status": last.get("type") if last is not None else "open",
                "error": event_details(last).get("error") if last is not None else None,
            }
        )
    notes = [
        f"memory of function {n!r} unknown: its GB-seconds are not counted" for n in sorted(unknown)
    ]
    return out, notes


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _watched_batch_jobs(events: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{batch job id: {"StartedAt": ms, "StoppedAt": ms}}`` from the WatchGpuJob checks of the
    history that saw a job end (a Lambda task whose output Payload has ``batch_job_id`` and
    ``ended``; :mod:`fanfit.jobs.gpu_watch`)."""
    found: dict[str, dict[str, Any]] = {}
    for ev in events:
        if ev.get("type") != "TaskSucceeded":
            continue
        details = event_details(ev)
        if details.get("resourceType") != "lambda":
            continue
        output = loads_json(details.get("output"))
        payload = output.get("Payload") if isinstance(output, dict) else None
        if isinstance(payload, dict) and payload.get("ended") and payload.get("batch_job_id"):
            found[str(payload["batch_job_id"])] = {
                "StartedAt": payload.get("started_at"),
                "StoppedAt": payload.get("stopped_at"),
            }
    return found


def batch_jobs_from_history(
    events: Sequence[Mapping[str, Any]], default_instance_type: str | None = None
) -> list[dict[str, Any]]:
    """Batch job records of one execution history (``batch:submitJob`` tasks; a job's instance
    time from the task's output under ``.sync``, else from WatchGpuJob's check that saw it end).

    Parameters
    ----------
    events : sequence of dict
        ``get_execution_history`` events.
    default_instance_type : str, optional
        Used when the job's output names no ``Container.InstanceType``.

    Returns
    -------
    list of dict
        ``instance_s`` (``StoppedAt - StartedAt`` of the job, ms in the output, else the task's
        interval; seconds) and ``instance_type`` (may be None: the price table's default).
    """
    jobs: list[dict[str, Any]] = []
    watched = _watched_batch_jobs(events)
    for attempt in _attempts(events, "batch"):
        last = attempt["last"]
        end = attempt["end"] if attempt["end"] is not None else attempt["start"]
        seconds, instance_type = end - attempt["start"], default_instance_type
        output = loads_json(event_details(last).get("output")) if last is not None else None
        if isinstance(output, dict) and "StartedAt" not in output and "startedAt" not in output:
            # batch:submitJob (not .sync) ends at once: the job's times are in WatchGpuJob's output
            output = {**output, **watched.get(str(output.get("JobId", output.get("jobId"))), {})}
        if isinstance(output, dict):
            started = output.get("StartedAt", output.get("startedAt"))
            stopped = output.get("StoppedAt", output.get("stoppedAt"))
            if _is_number(started) and _is_number(stopped):
                seconds = (float(stopped) - float(started)) / 1000.0
            container = output.get("Container", output.get("container")) or {}
            instance_type = container.get("InstanceType", container.get("instanceType")) or (
                instance_type
            )
        jobs.append({"instance_s": max(seconds, 0.0), "instance_type": instance_type})
    return jobs


def count_state_transitions(events: Iterable[Mapping[str, Any]]) -> int:
    """State transitions billed for one execution history.

    Parameters
    ----------
    events : iterable of dict
        ``get_execution_history`` events of one execution.

    Returns
    -------
    int
        ``*StateEntered`` events plus retries (``TaskScheduled`` events beyond one per
        ``TaskStateEntered``).
    """
    entered = task_entered = scheduled = 0
    for ev in events:
        kind = str(ev.get("type", ""))
        if kind.endswith("StateEntered"):
            entered += 1
            task_entered += kind == "TaskStateEntered"
        elif kind == "TaskScheduled":
            scheduled += 1
    return entered + max(0, scheduled - task_entered)


def processor_state_counts(definition: Mapping[str, Any] | str) -> dict[str, int]:
    """States a child execution of each Distributed Map enters at least.

    Parameters
    ----------
    definition : dict or str
        An Amazon States Language definition (JSON text or parsed).

    Returns
    -------
    dict of str to int
        Map state name -> the fewest states entered on a path through its ``ItemProcessor`` from
        ``StartAt`` to an end (``End``, ``Succeed`` or ``Fail``; a ``Parallel`` state counts its
        branches' paths too), for every Map state (at any depth) whose ``ProcessorConfig.Mode`` is
        ``DISTRIBUTED``. A lower bound on a child's transitions: exact when the child takes the
        shortest path and retries nothing.
    """
    asl = loads_json(definition) if isinstance(definition, str) else definition
    out: dict[str, int] = {}

    def walk(states: Mapping[str, Any]) -> None:
        for name, state in states.items():
            processor = state.get("ItemProcessor") or state.get("Iterator")
            mode = ((processor or {}).get("ProcessorConfig") or {}).get("Mode")
            if state.get("Type") == "Map" and mode == "DISTRIBUTED":
                out[name] = _shortest_path(processor)
            for inner in _inner_state_maps(state):
                walk(inner)

    walk((asl or {}).get("States", {}))
    return out


def _shortest_path(machine: Mapping[str, Any]) -> int:
    """Fewest states entered from ``StartAt`` to an end state of a (sub-)state machine."""
    import heapq

    states = machine.get("States", {})
    start = machine.get("StartAt")
    if start not in states:
        return 1

    def weight(state: Mapping[str, Any]) -> int:
        branches = state.get("Branches", []) if state.get("Type") == "Parallel" else []
        return 1 + sum(_shortest_path(b) for b in branches)

    best: dict[str, int] = {}
    heap = [(weight(states[start]), str(start))]
    while heap:
        cost, name = heapq.heappop(heap)
        if name in best:
            continue
        best[name] = cost
        state = states[name]
        if state.get("End") or state.get("Type") in ("Succeed", "Fail"):
            return cost
        targets = [state.get("Next"), state.get("Default")]
        targets += [c.get("Next") for c in state.get("Choices", []) or []]
        targets += [c.get("Next") for c in state.get("Catch", []) or []]
        for t in targets:
            if t in states and t not in best:
                heapq.heappush(heap, (cost + weight(states[t]), str(t)))
    return max(best.values(), default=1)


def _inner_state_maps(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    inner = []
    for key in ("ItemProcessor", "Iterator"):
        if isinstance(state.get(key), dict):
            inner.append(state[key].get("States", {}))
    for branch in state.get("Branches", []) or []:
        inner.append(branch.get("States", {}))
    return inner
