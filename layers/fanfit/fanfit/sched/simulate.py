"""A simulation of an AWS account running a planned job: the projection of ``--plan-only`` on AWS.

The local model of ``fanfit estimate --plan-only`` (the sizing's predicted makespan,
:func:`fanfit.sched.sizing.plan_shards`) knows the throughput of the learners but not the parts of
an AWS account that shape a fan-out of hundreds of shards: the account's Lambda concurrency, cold
starts of new execution environments, the rate at which a Distributed Map starts its child
workflow executions, the latency of Step Functions' state transitions and S3's round trips. This
module simulates them, with no AWS call: numpy and the standard library only.

Event-driven, not analytic
--------------------------
Each stage is simulated event by event (a discrete-event list schedule over the concurrency's
execution environments, a heap of the times they fall free). A closed form covers a bound at a time
(``n / rate`` for the starts, ``work / concurrency`` for the concurrency), but not their interplay
with unequal shards, the warm or cold state of each environment (an environment that finished a
shard is warm for the next shard of its function) and a start rate that throttles only the first
shards. The simulation is deterministic (no random draws: the share of cold environments is
applied to the first environments), exact for its model, and takes ``O(n log c)`` for ``n`` shards
and ``c`` environments: milliseconds for thousands of shards.

The model of a stage
--------------------
The stage's Lambda shards are the items of one Map Run, read in plan order. Child ``i`` (from 0)
starts no earlier than ``i / child_start_rate_per_s`` and when one of
``min(lambda_concurrency, stage concurrency)`` environments is free (the earliest free one). It
then takes

.. math::

    d_i = T \\tau + [\\text{cold}_i]\\, s(m_i) + R \\rho + w_i

seconds: ``T`` state transitions of ``tau`` s (the child's Choice on the placement and its Task),
a cold start ``s(m)`` when the environment has not run this function before, ``R`` S3 round trips of
``rho`` s (the shard reads the data and folds, writes its predictions and stats) and the shard's
predicted work ``w_i``. Cold start at ``m`` MB: ``sandbox + init x max(1, 1769 / m)`` (the INIT
phase imports numpy, scipy and scikit-learn on one thread; below 1,769 MB a function has less than
one vCPU, AWS Lambda Developer Guide, "Configuring Lambda function memory"). The stage takes
the last child's end plus the Schedule step before it (``stage_transitions`` transitions and
``stage_s3_round_trips`` round trips); shards on the GPU worker run beside the Map for their
placement's predicted seconds (a lane of their own: they take no Lambda concurrency). Stages run
one after another.

Cost: each Lambda shard bills ``s(m) + R rho + w_i`` at its memory (AWS bills the INIT phase, as
:mod:`fanfit.sched.placement` prices it) plus one request, two S3 GETs and two PUTs, and its
``T`` transitions (PriceTable.sfn_transition_usd; a Distributed Map's child executions are billed
per transition); the stage adds its ``stage_transitions``; GPU shards cost their placement's
figure. Prepare and Aggregate are not included (as in the local model).

Not modelled: Lambda's scaling rate (each function adds up to 1,000 environments every 10 s, AWS
Lambda Developer Guide, "Lambda scaling behavior": no bound below the default 1,000 concurrency),
throttling and its retries, failures and stragglers, and variation in the fits' seconds (each
learner's fits take their predicted seconds).

Constants (:class:`AccountModel`'s defaults) and their sources
--------------------------------------------------------------
- ``lambda_concurrency = 1000``: AWS Lambda Developer Guide, "Lambda quotas" (concurrent
  executions: 1,000 per Region by default; a raised quota is read with ``GetAccountSettings``).
- ``child_start_rate_per_s = 300``: AWS Step Functions Developer Guide, "Step Functions service
  quotas", "Quotas related to API action throttling": ``StartExecution`` of Standard workflows
  refills 300 tokens per second in the largest Regions (us-east-1, us-west-2, eu-west-1; 150
  elsewhere). The Developer Guide pages on the Distributed Map ("Using Map state in Distributed
  mode") state the 10,000 parallel child executions but no start rate of their own; the
  StartExecution refill rate is this model's assumption for it, and a parameter.
- ``cold_init_s = 1.1``: measured here: importing numpy, scipy, scikit-learn's ensemble and linear
  models and boto3 (what a CrossFit INIT phase imports) took 0.99 to 1.12 s on one core of this
  machine (3 runs, ``python -c "import time; t=time.perf_counter(); import numpy, scipy.sparse,
  sklearn.ensemble, sklearn.linear_model, boto3; print(time.perf_counter()-t)"``); 1,769 MB
  is one vCPU (AWS Lambda Developer Guide, "Configuring Lambda function memory").
- ``cold_sandbox_s = 0.25``: the environment's creation and code download before INIT. AWS
  publishes no figure; "Operating Lambda: Performance optimization - Part 1" (AWS Compute Blog)
  puts cold starts between under 100 ms and over 1 s. An assumption, a parameter.
- ``cold_share = 1.0``: the share of environments that start cold. A job that fans out from zero
  finds no warm environment (AWS Lambda Developer Guide, "Lambda execution environment
  lifecycle": an environment is reused only by later invocations of the same function); a run
  right after another of the same functions may set it lower.
- ``transition_s = 0.05``: latency of one state transition. AWS publishes no figure; an
  assumption, a parameter. ``child_transitions = 3`` (the child's Choice on the placement, its
  CrossFit Task and its end), ``stage_transitions = 4`` (the Map, the Task "Record the wave's
  throughput and size the next wave" and the two Choices of the loop): from
  orchestrator/estimate.asl.json.
- ``s3_round_trip_s = 0.15``: AWS's "Best practices design patterns: optimizing Amazon S3
  performance" (Amazon S3 User Guide, "Performance guidelines"): small-object first-byte latency of
  about 100-200 ms; the middle. ``shard_s3_round_trips = 4`` (GET data, GET folds, PUT
  predictions, PUT stats), ``stage_s3_round_trips = 4`` (Schedule reads the plan, the units and
  the shard list's history and writes the wave).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fanfit.errors import InvalidJobError
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.resources import resource_kind, resource_memory_mb

__all__ = [
    "AccountModel",
    "Projection",
    "SimShard",
    "SimStage",
    "StageProjection",
    "cold_start_s",
    "simulate_job",
    "simulate_stage",
]

#: One vCPU of Lambda, MB (AWS Lambda Developer Guide, "Configuring Lambda function memory").
_ONE_VCPU_MB = 1769


def _number(value: Any, name: str, *, minimum: float = 0.0, strict: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, int | float)
    number = float(value) if ok else math.nan
    if not ok or not math.isfinite(number) or number < minimum or (strict and number <= minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise InvalidJobError(
            f"account model: {name} must be a finite number {bound}, got {value!r}."
        )
    return number


@dataclass(frozen=True)
class AccountModel:
    """The AWS account the projection simulates; every default and its source is in the module doc.

    Parameters
    ----------
    lambda_concurrency : int, default 1000
        The account's Lambda concurrent executions.
    child_start_rate_per_s : float, default 300
        Child workflow executions a Map Run starts per second.
    cold_init_s : float, default 1.1
        INIT phase (imports) of a CrossFit environment at 1,769 MB (one vCPU), seconds.
    cold_sandbox_s : float, default 0.25
        Creating the environment before INIT, seconds.
    cold_share : float, default 1.0
        Share of the environments that start cold, 0..1.
    transition_s : float, default 0.05
        Latency of one Step Functions state transition, seconds.
    child_transitions, stage_transitions : int, default 3 and 4
        Transitions of one child execution and of the Schedule step around a stage's Map.
    s3_round_trip_s : float, default 0.15
        One S3 request's round trip for a small object, seconds.
    shard_s3_round_trips, stage_s3_round_trips : int, default 4 and 4
        S3 round trips of one shard and of one Schedule step.

    Raises
    ------
    InvalidJobError
        A value out of range, named.
    """

    lambda_concurrency: int = 1000
    child_start_rate_per_s: float = 300.0
    cold_init_s: float = 1.1
    cold_sandbox_s: float = 0.25
    cold_share: float = 1.0
    transition_s: float = 0.05
    child_transitions: int = 3
    stage_transitions: int = 4
    s3_round_trip_s: float = 0.15
    shard_s3_round_trips: int = 4
    stage_s3_round_trips: int = 4

    def __post_init__(self) -> None:
        for name in ("lambda_concurrency", "child_transitions", "stage_transitions",
                     "shard_s3_round_trips", "stage_s3_round_trips"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidJobError(
                    f"account model: {name} must be an integer >= 0, got {value!r}."
                )
        if self.lambda_concurrency < 1:
            raise InvalidJobError(
                f"account model: lambda_concurrency must be >= 1, got {self.lambda_concurrency!r}."
            )
        _number(self.child_start_rate_per_s, "child_start_rate_per_s", strict=True)
        for name in ("cold_init_s", "cold_sandbox_s", "transition_s", "s3_round_trip_s"):
            _number(getattr(self, name), name)
        if _number(self.cold_share, "cold_share") > 1.0:
            raise InvalidJobError(
                f"account model: cold_share must be in 0..1, got {self.cold_share!r}."
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict of the fields."""
        return asdict(self)


def cold_start_s(account: AccountModel, memory_mb: int) -> float:
    """Seconds of a cold start at ``memory_mb`` MB: ``cold_sandbox_s + cold_init_s x max(1,
    1769 / memory_mb)`` (INIT is one thread; below one vCPU it gets a share of one, AWS Lambda
    Developer Guide, "Configuring Lambda function memory").

    Raises
    ------
    InvalidJobError
        ``memory_mb`` < 1.
    """
    if memory_mb < 1:
        raise InvalidJobError(f"memory_mb must be >= 1, got {memory_mb!r}.")
    return account.cold_sandbox_s + account.cold_init_s * max(1.0, _ONE_VCPU_MB / memory_mb)


@dataclass(frozen=True)
class SimShard:
    """One Lambda shard: its resource (``lambda-<MB>``) and its predicted work, seconds (the fits
    alone: no start-up or I/O, which the account model adds)."""

    resource: str
    work_s: float

    def __post_init__(self) -> None:
        if resource_kind(self.resource) != "lambda":
            raise InvalidJobError(f"a simulated shard runs on Lambda, got {self.resource!r}.")
        _number(self.work_s, "work_s")


@dataclass(frozen=True)
class SimStage:
    """One stage's planned wave: its Lambda shards in plan order, the job's concurrency for them
    (the Map's MaxConcurrency), and its GPU worker lane (the placement's seconds and USD; 0: none).

    Raises
    ------
    InvalidJobError
        ``concurrency`` < 1 or a negative GPU figure.
    """

    shards: Sequence[SimShard]
    concurrency: int
    gpu_s: float = 0.0
    gpu_cost_usd: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int):
            raise InvalidJobError(f"concurrency must be an integer, got {self.concurrency!r}.")
        if self.concurrency < 1:
            raise InvalidJobError(f"concurrency must be >= 1, got {self.concurrency!r}.")
        _number(self.gpu_s, "gpu_s")
        _number(self.gpu_cost_usd, "gpu_cost_usd")
        object.__setattr__(self, "shards", tuple(self.shards))


@dataclass(frozen=True)
class StageProjection:
    """The simulated stage.

    Attributes
    ----------
    wall_s : float
        Seconds from the Schedule step to the last shard's end (or the GPU lane's), seconds.
    cost_usd : float
    n_shards, n_cold, environments : int
        Lambda shards, those that started cold, and the environments they could use.
    start_bound_s : float
        The start rate's own bound: the last child's earliest start, ``(n - 1) / rate``, seconds.
    billed_s : float
        Lambda seconds billed over the shards.
    """

    wall_s: float
    cost_usd: float
    n_shards: int
    n_cold: int
    environments: int
    start_bound_s: float
    billed_s: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict of the fields."""
        return asdict(self)


@dataclass(frozen=True)
class Projection:
    """The simulated job: the sum of its stages' seconds and USD, and the account it assumed."""

    wall_s: float
    cost_usd: float
    stages: tuple[StageProjection, ...]
    account: AccountModel = field(default_factory=AccountModel)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict."""
        return {
            "wall_s": self.wall_s,
            "cost_usd": self.cost_usd,
            "stages": [s.to_dict() for s in self.stages],
            "account": self.account.to_dict(),
        }


def simulate_stage(
    stage: SimStage, account: AccountModel, prices: PriceTable = DEFAULT_PRICES
) -> StageProjection:
    """Simulate one stage's Map Run on the account (model and sources in the module doc).

    Parameters
    ----------
    stage : SimStage
    account : AccountModel
    prices : PriceTable

    Returns
    -------
    StageProjection

    Raises
    ------
    InvalidJobError
        A shard's resource without a memory size.
    """
    environments = min(account.lambda_concurrency, stage.concurrency)
    n_cold_envs = math.ceil(account.cold_share * environments)
    overhead = account.child_transitions * account.transition_s
    io_s = account.shard_s3_round_trips * account.s3_round_trip_s
    # (time free, environment index, the function it is warm for: '' cold, '*' warm for any)
    free: list[tuple[float, int, str]] = [
        (0.0, k, "" if k < n_cold_envs else "*") for k in range(environments)
    ]
    heapq.heapify(free)
    end = 0.0
    n_cold = 0
    billed_total = 0.0
    cost = 0.0
    per_shard_fixed_usd = (
        2 * (prices.s3_get_usd + prices.s3_put_usd)
        + account.child_transitions * prices.sfn_transition_usd
    )
    for i, shard in enumerate(stage.shards):
        memory = resource_memory_mb(shard.resource)
        if memory is None:
            raise InvalidJobError(f"shard resource {shard.resource!r} has no memory size.")
        t_free, env, warm_for = heapq.heappop(free)
        start = max(i / account.child_start_rate_per_s, t_free)
        cold = warm_for not in ("*", shard.resource)
        billed = io_s + shard.work_s + (cold_start_s(account, memory) if cold else 0.0)
        n_cold += int(cold)
        finish = start + overhead + billed
        end = max(end, finish)
        billed_total += billed
        cost += prices.lambda_cost_usd(memory, billed) + per_shard_fixed_usd
        heapq.heappush(free, (finish, env, shard.resource))
    schedule_s = (
        account.stage_transitions * account.transition_s
        + account.stage_s3_round_trips * account.s3_round_trip_s
    )
    cost += account.stage_transitions * prices.sfn_transition_usd + stage.gpu_cost_usd
    n = len(stage.shards)
    return StageProjection(
        wall_s=float(schedule_s + max(end, stage.gpu_s)),
        cost_usd=float(cost),
        n_shards=n,
        n_cold=n_cold,
        environments=environments,
        start_bound_s=float(max(n - 1, 0) / account.child_start_rate_per_s),
        billed_s=float(billed_total),
    )


def simulate_job(
    stages: Sequence[SimStage],
    account: AccountModel | None = None,
    prices: PriceTable = DEFAULT_PRICES,
) -> Projection:
    """Simulate a job's stages one after another (:func:`simulate_stage`).

    Parameters
    ----------
    stages : sequence of SimStage
    account : AccountModel, optional
        Default: :class:`AccountModel` (AWS's defaults).
    prices : PriceTable

    Returns
    -------
    Projection
        ``wall_s`` and ``cost_usd``: the sums over the stages.
    """
    account = account or AccountModel()
    projected = tuple(simulate_stage(s, account, prices) for s in stages)
    return Projection(
        wall_s=float(sum(p.wall_s for p in projected)),
        cost_usd=float(sum(p.cost_usd for p in projected)),
        stages=projected,
        account=account,
    )
