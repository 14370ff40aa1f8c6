"""Pricing a job's usage: Lambda GB-seconds and requests, state transitions, Batch instance seconds.

The arithmetic of :mod:`fanfit.cost`: plain lists and numbers in, a :class:`JobCost` out, at the
prices of one :class:`fanfit.prices.PriceTable`. No AWS call.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fanfit.prices import DEFAULT_PRICES, PriceTable

__all__ = [
    "LAMBDA_USD_PER_GB_SECOND",
    "LAMBDA_USD_PER_REQUEST",
    "CostItem",
    "JobCost",
    "billed_seconds",
    "job_cost",
    "lambda_cost_usd",
    "record_duration_s",
]


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
    throttles : int
        Lambda invocations refused for lack of concurrency (``Lambda.TooManyRequestsException``)
        and retried by the state machine; not billed (they never ran).
    """

    items: tuple[CostItem, ...]
    notes: tuple[str, ...] = ()
    throttles: int = 0

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
        ``state_transitions``, ``batch_instance_s``, ``items`` (each :meth:`CostItem.to_dict`),
        ``notes`` and ``throttles``."""
        return {
            "total_usd": self.total_usd,
            "billed_gb_s": self.billed_gb_s,
            "lambda_requests": self.lambda_requests,
            "state_transitions": self.state_transitions,
            "batch_instance_s": self.batch_instance_s,
            "items": [item.to_dict() for item in self.items],
            "notes": list(self.notes),
            "throttles": self.throttles,
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
        return cls(
            items=items,
            notes=tuple(str(n) for n in d.get("notes", [])),
            throttles=int(d.get("throttles", 0)),
        )


def record_duration_s(inv: Mapping[str, Any]) -> float:
    """Seconds of a record: its ``duration_s``, else ``ended_at - started_at`` (epoch s)."""
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
        ``prices.gpu_instance_type``).
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
        billed = billed_seconds(record_duration_s(inv))
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
        name = str(job.get("instance_type") or prices.gpu_instance_type)
        agg = per_type.setdefault(name, {"jobs": 0, "instance_s": 0.0})
        agg["jobs"] += 1
        agg["instance_s"] += max(float(job["instance_s"]), 0.0)
    for name in sorted(per_type):
        agg = per_type[name]
        unit_usd = prices.gpu_cost_usd(1.0, name)  # raises for an unpriced type
        items.append(
            CostItem(
                "batch", name, agg["instance_s"], "instance-s", unit_usd, {"jobs": int(agg["jobs"])}
            )
        )
    return JobCost(items=tuple(items), notes=tuple(notes))
