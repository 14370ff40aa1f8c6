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
    ``batch:submitJob.sync`` task: ``StoppedAt - StartedAt`` of the job description in its output
    (else the task's interval in the history), priced per second at the instance type's hourly rate
    (``Container.InstanceType`` when the output names one, else the table's
    ``batch_instance_type``). An instance shared by several jobs is charged to each for its run time.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeGuard

from fanfit.prices import DEFAULT_PRICES, PriceTable

__all__ = [
    "CostItem",
    "JobCost",
    "billed_seconds",
    "lambda_cost_usd",
    "batch_jobs_from_history",
    "collect_job_cost",
    "count_state_transitions",
    "job_cost",
    "lambda_invocations_from_history",
    "processor_state_counts",
]

log = logging.getLogger(__name__)

_END_TYPES = ("TaskSucceeded", "TaskFailed", "TaskTimedOut")


def billed_seconds(duration_s: float) -> float:
    """Lambda's billed duration of one invocation: ``duration_s`` rounded up to 1 ms.

    Parameters
    ----------
    duration_s : float
        Measured duration in seconds (negative values count as 0).

    Returns
    -------
    float
        Seconds, a whole number of milliseconds.
    """
    # round() first so that 0.1 s (0.1 * 1000 = 100.00000000000001) bills 100 ms, not 101.
    return math.ceil(round(max(float(duration_s), 0.0) * 1000.0, 6)) / 1000.0


#: AWS Lambda price per GB-second (:data:`fanfit.prices.DEFAULT_PRICES`).
LAMBDA_USD_PER_GB_SECOND = DEFAULT_PRICES.lambda_gb_second_usd
#: AWS Lambda price per request (:data:`fanfit.prices.DEFAULT_PRICES`).
LAMBDA_USD_PER_REQUEST = DEFAULT_PRICES.lambda_request_usd


def lambda_cost_usd(
    duration_s: float, memory_mb: int, prices: PriceTable = DEFAULT_PRICES
) -> tuple[float, float]:
    """Billed GB-seconds and USD of one invocation.

    Lambda bills duration rounded up to the millisecond (:func:`billed_seconds`), times
    the configured memory in GB, plus a per-request charge, at the prices of ``prices``
    (https://aws.amazon.com/lambda/pricing/).

    Parameters
    ----------
    duration_s : float
        Handler duration in seconds.
    memory_mb : int
        Configured memory in MB.
    prices : PriceTable

    Returns
    -------
    (gb_seconds, usd) : tuple of float
    """
    billed_s = billed_seconds(duration_s)
    return billed_s * memory_mb / 1024.0, prices.lambda_cost_usd(memory_mb, billed_s)


@dataclass(frozen=True)
class CostItem:
    """One priced line of a job's cost.

    Attributes
    ----------
    service : str
        ``'lambda'``, ``'lambda-requests'``, ``'stepfunctions'`` or ``'batch'``.
    name : str
        The function, ``'requests'``, ``'state transitions'`` or the instance type.
    quantity : float
        In ``unit``.
    unit : str
        ``'GB-s'``, ``'requests'``, ``'transitions'`` or ``'instance-s'``.
    unit_usd : float
        USD per unit.
    detail : dict
        Plain numbers behind the quantity (invocations, memory_mb, billed_s, ...).
    """

    service: str
    name: str
    quantity: float
    unit: str
    unit_usd: float
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def usd(self) -> float:
        """``quantity * unit_usd`` in USD."""
        return self.quantity * self.unit_usd

    def to_dict(self) -> dict[str, Any]:
        """Plain dict: the attributes and ``usd``."""
        return {
            "service": self.service,
            "name": self.name,
            "quantity": self.quantity,
            "unit": self.unit,
            "unit_usd": self.unit_usd,
            "usd": self.usd,
            **({"detail": dict(self.detail)} if self.detail else {}),
        }


@dataclass(frozen=True)
class JobCost:
    """The priced cost of one job.

    Attributes
    ----------
    items : tuple of CostItem
        Lambda GB-seconds per function, Lambda requests, Step Functions state transitions, Batch
        instance seconds per instance type.
    notes : tuple of str
        How anything not read directly was estimated (see the module docstring).
    """

    items: tuple[CostItem, ...]
    notes: tuple[str, ...] = ()

    @property
    def total_usd(self) -> float:
        """Sum of the items, USD."""
        return float(sum(item.usd for item in self.items))

    def _quantity(self, service: str) -> float:
        return float(sum(i.quantity for i in self.items if i.service == service))

    @property
    def billed_gb_s(self) -> float:
        """Lambda GB-seconds billed, all functions."""
        return self._quantity("lambda")

    @property
    def lambda_requests(self) -> int:
        """Lambda invocations billed."""
        return int(self._quantity("lambda-requests"))

    @property
    def state_transitions(self) -> int:
        """Step Functions state transitions billed."""
        return int(self._quantity("stepfunctions"))

    @property
    def batch_instance_s(self) -> float:
        """Batch instance seconds, all instance types."""
        return self._quantity("batch")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict: ``total_usd``, ``billed_gb_s``, ``lambda_requests``,
        ``state_transitions``, ``batch_instance_s``, ``items`` (each :meth:`CostItem.to_dict`) and
        ``notes``."""
        return {
            "total_usd": self.total_usd,
            "billed_gb_s": self.billed_gb_s,
            "lambda_requests": self.lambda_requests,
            "state_transitions": self.state_transitions,
            "batch_instance_s": self.batch_instance_s,
            "items": [item.to_dict() for item in self.items],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobCost:
        """Read what :meth:`to_dict` wrote (``usd`` and the totals are recomputed)."""
        items = tuple(
            CostItem(
                service=str(i["service"]),
                name=str(i["name"]),
                quantity=float(i["quantity"]),
                unit=str(i["unit"]),
                unit_usd=float(i["unit_usd"]),
                detail=dict(i.get("detail") or {}),
            )
            for i in d.get("items", [])
        )
        return cls(items=items, notes=tuple(str(n) for n in d.get("notes", [])))


def _duration(inv: Mapping[str, Any]) -> float:
    if "duration_s" in inv:
        return float(inv["duration_s"])
    return float(inv["ended_at"]) - float(inv["started_at"])


def job_cost(
    invocations: Iterable[Mapping[str, Any]] = (),
    transitions: int | Mapping[str, int] = 0,
    batch_jobs: Iterable[Mapping[str, Any]] = (),
    prices: PriceTable = DEFAULT_PRICES,
    notes: Sequence[str] = (),
) -> JobCost:
    """Price a job's usage.

    Parameters
    ----------
    invocations : iterable of dict
        One per Lambda invocation: ``function`` (str), ``memory_mb`` (MB, configured) and either
        ``duration_s`` or ``started_at`` and ``ended_at`` (seconds). Each is billed
        :func:`billed_seconds` x ``memory_mb / 1024`` GB-seconds and one request.
    transitions : int or dict of str to int
        Step Functions state transitions: a count, or counts by origin (e.g. ``parent``,
        ``children``, ``child_starts``), which are summed and kept as the item's detail.
    batch_jobs : iterable of dict
        One per Batch job: ``instance_s`` (seconds) and optionally ``instance_type`` (default:
        ``prices.batch_instance_type``).
    prices : PriceTable
    notes : sequence of str
        Kept on the result.

    Returns
    -------
    JobCost
        Items in order: Lambda GB-s per function (sorted by name), Lambda requests (when any),
        state transitions (when any), Batch per instance type (sorted).

    Raises
    ------
    fanfit.errors.InvalidJobError
        If a Batch job's instance type has no price in ``prices``.
    ValueError
        If an invocation has a negative memory size.
    """
    per_fn: dict[str, dict[str, float]] = {}
    for inv in invocations:
        memory = float(inv["memory_mb"])
        if memory < 0:
            raise ValueError(f"invocation of {inv.get('function')!r} has memory_mb {memory} < 0")
        billed = billed_seconds(_duration(inv))
        agg = per_fn.setdefault(
            str(inv["function"]), {"invocations": 0, "billed_s": 0.0, "gb_s": 0.0, "memory_mb": 0}
        )
        agg["invocations"] += 1
        agg["billed_s"] += billed
        agg["gb_s"] += billed * memory / 1024.0
        agg["memory_mb"] = max(agg["memory_mb"], memory)
    items: list[CostItem] = []
    for name in sorted(per_fn):
        agg = per_fn[name]
        items.append(
            CostItem(
                service="lambda",
                name=name,
                quantity=agg["gb_s"],
                unit="GB-s",
                unit_usd=prices.lambda_gb_second_usd,
                detail={
                    "invocations": int(agg["invocations"]),
                    "billed_s": agg["billed_s"],
                    "memory_mb": int(agg["memory_mb"]),
                },
            )
        )
    n_requests = sum(int(a["invocations"]) for a in per_fn.values())
    if n_requests:
        items.append(
            CostItem(
                "lambda-requests", "requests", n_requests, "requests", prices.lambda_request_usd
            )
        )
    if isinstance(transitions, Mapping):
        n_transitions = int(sum(int(v) for v in transitions.values()))
        t_detail = {str(k): int(v) for k, v in transitions.items()}
    else:
        n_transitions, t_detail = int(transitions), {}
    if n_transitions:
        items.append(
            CostItem(
                "stepfunctions",
                "state transitions",
                n_transitions,
                "transitions",
                prices.sfn_transition_usd,
                t_detail,
            )
        )
    per_type: dict[str, dict[str, float]] = {}
    for job in batch_jobs:
        name = str(job.get("instance_type") or prices.batch_instance_type)
        agg = per_type.setdefault(name, {"jobs": 0, "instance_s": 0.0})
        agg["jobs"] += 1
        agg["instance_s"] += max(float(job["instance_s"]), 0.0)
    for name in sorted(per_type):
        agg = per_type[name]
        unit_usd = prices.batch_cost_usd(1.0, name)  # raises for an unpriced type
        items.append(
            CostItem(
                "batch", name, agg["instance_s"], "instance-s", unit_usd, {"jobs": int(agg["jobs"])}
            )
        )
    return JobCost(items=tuple(items), notes=tuple(notes))


# ------------------------------------------------------------------- reading an execution history


def _ts(value: Any) -> float:
    """Epoch seconds of a history timestamp (datetime from boto3, or a number in plain fixtures)."""
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


def _details(event: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in event.items():
        if key.endswith("EventDetails") and isinstance(value, dict):
            return value
    return {}


def _json(text: Any) -> Any:
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
            if _details(ev).get("resourceType") != resource_type:
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
        else ``'history'``) and ``status`` (the end event type, or ``'open'``).
    notes : list of str
        Functions whose memory is unknown.
    """
    memory_mb = dict(memory_mb or {})
    out: list[dict[str, Any]] = []
    unknown: set[str] = set()
    for attempt in _attempts(events, "lambda"):
        params = _json(_details(attempt["scheduled"]).get("parameters")) or {}
        arn = str(params.get("FunctionName", "unknown"))
        name = _function_name(arn)
        last = attempt["last"]
        end = attempt["end"] if attempt["end"] is not None else attempt["start"]
        duration, source, memory = end - attempt["start"], "history", None
        if last is not None and last.get("type") == "TaskSucceeded":
            output = _json(_details(last).get("output")) or {}
            payload = output.get("Payload") if isinstance(output, dict) else None
            if isinstance(payload, dict):
                if _is_number(payload.get("started_at")) and _is_number(payload.get("ended_at")):
                    duration = float(payload["ended_at"]) - float(payload["started_at"])
                    source = "handler"
                if _is_number(payload.get("memory_mb")) and payload["memory_mb"] > 0:
                    memory = int(payload["memory_mb"])
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
            }
        )
    notes = [
        f"memory of function {n!r} unknown: its GB-seconds are not counted" for n in sorted(unknown)
    ]
    return out, notes


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def batch_jobs_from_history(
    events: Sequence[Mapping[str, Any]], default_instance_type: str | None = None
) -> list[dict[str, Any]]:
    """Batch job records of one execution history (``batch:submitJob.sync`` tasks).

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
    for attempt in _attempts(events, "batch"):
        last = attempt["last"]
        end = attempt["end"] if attempt["end"] is not None else attempt["start"]
        seconds, instance_type = end - attempt["start"], default_instance_type
        output = _json(_details(last).get("output")) if last is not None else None
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
    asl = _json(definition) if isinstance(definition, str) else definition
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


# ---------------------------------------------------------------------------------- AWS reading


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


def _cannot_list(response: Any = None, **_: Any) -> bool | None:
    """A ``needs-retry`` handler: False (no retry) for an error that says the children cannot be
    listed, None (botocore's own retry rules) for anything else.

    LocalStack answers ``ListExecutions`` by ``mapRunArn`` with HTTP 500 ``InternalError``
    (``exception while calling stepfunctions.ListExecutions: ...``: its provider fails on the
    missing state machine ARN), which botocore retries with backoff (legacy mode: 4 retries, about
    7.5 s of sleep on average) before :func:`collect_job_cost` falls back to the shard records.
    That message is LocalStack's wrapping of a crash in its own code, never AWS's, so it is
    recognised and not retried; a throttle or an AWS 5xx is retried as before.
    """
    if not isinstance(response, tuple) or len(response) != 2:
        return None
    error = (response[1] or {}).get("Error", {}) if isinstance(response[1], dict) else {}
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    if code in _CANNOT_LIST_CODES or (
        code == "InternalError" and message.startswith("exception while calling")
    ):
        return False
    return None


def _child_executions(sfn: Any, map_run_arn: str) -> list[str] | None:
    """ARNs of a map run's child executions, or None when the API cannot list them (LocalStack).

    A failure that says the API cannot list them (:func:`_cannot_list`) is not retried: for this
    call only, a ``needs-retry`` handler runs before botocore's retry handler.
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
    shard_records: Sequence[Mapping[str, Any]] | None = None,
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
    shard_records : sequence of dict, optional
        The job's shard statistics (``started_at``, ``ended_at``, ``memory_mb``), used for the
        Lambda invocations of Distributed Map children when their histories cannot be read; a
        record with ``placement == 'batch'`` (or a ``resource`` starting with ``batch``) is a
        Batch job of that duration instead (``instance_type`` when it names one).
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
    """
    notes: list[str] = []
    parent = _history(sfn, execution_arn)
    histories = [parent]
    transitions = {"parent": count_state_transitions(parent)}
    map_runs = [
        str(_details(e)["mapRunArn"])
        for e in parent
        if e.get("type") == "MapRunStarted" and _details(e).get("mapRunArn")
    ]
    unread_children = 0
    for run in map_runs:
        children = _child_executions(sfn, run)
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
    if unread_children and shard_records:
        for s in shard_records:
            if s.get("placement") == "batch" or str(s.get("resource", "")).startswith("batch"):
                batch_jobs.append(
                    {"instance_s": _duration(s), "instance_type": s.get("instance_type")}
                )
            else:
                invocations.append(
                    {
                        "function": shard_function,
                        "memory_mb": s["memory_mb"],
                        "duration_s": _duration(s),
                    }
                )
    billable = [i for i in invocations if i.get("memory_mb") is not None]
    # Requests are billed whatever the memory: count the unknown-memory ones at 0 MB.
    billable += [{**i, "memory_mb": 0} for i in invocations if i.get("memory_mb") is None]
    return job_cost(billable, transitions, batch_jobs, prices, notes)


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
        if ev.get("type") != "TaskScheduled" or _details(ev).get("resourceType") != "lambda":
            continue
        params = _json(_details(ev).get("parameters")) or {}
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
