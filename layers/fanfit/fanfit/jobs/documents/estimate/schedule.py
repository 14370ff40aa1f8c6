"""The waves of an estimate job: how Schedule places and cuts each wave, and what it records and returns.

A wave's placement (:class:`PlacementDecision`: :class:`PlacedStage`, :class:`PlacementInput`,
:class:`WaveDispatch`) and sizing (:class:`WaveDecision`); the stage's schedule
(:class:`StageSchedule`, ``schedule_key(job, s)``: its :class:`WaveEntry` s and their
:class:`ScheduledShard` s) and the job record's view of it (:class:`ScheduleSummary`,
:class:`WaveSummary`); what Schedule returns into the state (:class:`WaveOutput`); and the plan of a
whole job that ``fanfit estimate --plan-only`` shows (:class:`EstimatePrediction`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from fanfit.jobs.documents import Document
from fanfit.jobs.documents.estimate.common import _OmitNone, _Placement

__all__ = [
    "DispatchedQueue",
    "EstimatePrediction",
    "PartitionUsed",
    "PlacedStage",
    "PlacementDecision",
    "PlacementInput",
    "PlannedPart",
    "PlannedShards",
    "PlannedStage",
    "RecoveredCount",
    "ScheduleSummary",
    "ScheduledShard",
    "StageSchedule",
    "WaveDecision",
    "WaveDispatch",
    "WaveEntry",
    "WaveOutput",
    "WaveSummary",
]


class ScheduledShard(Document):
    """A shard as the stage's schedule records it: its id, its units' keys and its placement."""

    shard_id: str
    units: list[str]
    placement: _Placement = "lambda"
    #: ``lambda-<MB>`` (the CrossFit function of that size) or ``gpu:<instance type>``; None in
    #: schedules written before shards had one (they ran on the first CrossFit function).
    resource: str | None = None


class PlacedStage(Document):
    """One learner group's place in a wave (:class:`fanfit.sched.placement.StageChoice`): its
    resource, the workers the solver assumed, and its predicted seconds and USD."""

    stage: str
    resource: str
    workers: int
    seconds: float
    cost_usd: float
    billed_s: float


class PlacementInput(Document):
    """A figure the placement used (:class:`fanfit.sched.profiles.ProfileInput`): a learner
    group's rows/s and start-up seconds on a resource, ``source`` 'measured' (the ThroughputTable),
    'scaled' (measured at another Lambda size) or 'prior'."""

    stage: str
    resource: str
    rows_per_s: float
    startup_s: float
    source: Literal["measured", "scaled", "prior"]


class DispatchedQueue(Document):
    """One queue of a wave's CPU-GPU dispatch (:class:`fanfit.sched.lyapunov.UnitSplit`): its
    resource, throughput (units/s, its workers together), cost per unit (USD), backlog at the
    barrier (seconds of work), the units and fragments it was sent, and its predicted end (seconds
    from the barrier)."""

    name: Literal["lambda", "gpu"]
    resource: str
    units_per_s: float
    usd_per_unit: float
    backlog_s: float
    units: int
    fragments: int
    finish_s: float


class WaveDispatch(Document):
    """Proteus' split of one learner group's units between the Lambda queue and the GPU worker
    (:func:`fanfit.sched.lyapunov.split_wave`): the group, its units, the fragments they were cut
    into, the penalty weight ``V`` (seconds per USD-per-unit) and the two queues."""

    stage: str
    n_units: int
    n_fragments: int
    V: float
    queues: list[DispatchedQueue]


class PlacementDecision(_OmitNone):
    """Where a wave's learner groups run and why (HeterPS, :func:`fanfit.sched.profiles.
    choose_placement`): the objective, the offered resources, the inputs, the choice, and the
    predicted wall seconds and cost of the wave (``met``: whether the plan meets the deadline or
    budget; ``fastest_s``: the fastest plan's predicted seconds)."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = frozenset({"deadline_s", "budget_usd", "dispatch"})

    objective: Literal["deadline", "budget", "default"]
    deadline_s: float | None = None
    budget_usd: float | None = None
    slack: float
    resources: list[str]
    stages: list[PlacedStage]
    inputs: list[PlacementInput]
    fastest_s: float
    met: bool
    predicted_wall_s: float
    predicted_cost_usd: float
    #: The learner groups both Lambda and the GPU worker can run, split between them by
    #: drift-plus-penalty (Proteus); None when the GPU worker is not offered or no group can.
    dispatch: list[WaveDispatch] | None = None


class PlannedShards(Document):
    """The shards a plan cuts on one resource: how many, the most fits in one, the sizing policy
    and whether the wave would be a probe (no throughput measured yet)."""

    resource: str
    n_shards: int
    max_units_per_shard: int
    policy: str
    probe: bool
    max_concurrency: int
    #: The sizing's predicted seconds of these shards (None for a probe: no prediction).
    predicted_makespan_s: float | None = None


class PlannedStage(Document):
    """One stage of ``fanfit estimate --plan-only``: its placement and its first wave's shards."""

    stage: int
    n_units: int
    placement: PlacementDecision
    shards: list[PlannedShards]
    #: The stage's predicted seconds: the sizing's predicted makespan of its shards (the longest
    #: of its resources'), or the placement's prediction where the sizing has none (a probe).
    predicted_wall_s: float


class PlannedPart(Document):
    """One part of a job of several parts in ``--plan-only``: its label and its units per stage
    (0 in a stage the part does not have)."""

    label: str
    n_units: list[int]


class EstimatePrediction(Document):
    """What ``fanfit estimate --plan-only`` and ``Client.plan_estimate`` return: the placement and
    shards of every stage, planned by Schedule's own code (:func:`fanfit.jobs.estimate.wave.
    plan_job`) from the stack's ThroughputTable, memory sizes, GPU worker and concurrency, and the
    predicted wall seconds (the sum over stages of :attr:`PlannedStage.predicted_wall_s`) and cost
    (of the placements) of the cross-fitting, Prepare and Aggregate not included. Nothing runs.
    On a stack that is not the local one the figures are an AWS account's simulation
    (:func:`fanfit.jobs.estimate.projection.project_prediction`), recorded in ``simulation``
    (:meth:`fanfit.sched.simulate.Projection.to_dict`; None: the local model). A job of several
    parts (``model`` ``'qte'`` or ``'apos'``) is planned as it runs, every part's units in the
    stages' waves together; ``parts`` gives each part's units per stage."""

    stack: str
    memory_sizes: list[int]
    gpu_enabled: bool
    account_concurrency: int
    job_concurrency: int
    stages: list[PlannedStage]
    predicted_wall_s: float
    predicted_cost_usd: float
    simulation: dict[str, Any] | None = None
    model: str | None = None
    parts: list[PlannedPart] | None = None


class WaveDecision(_OmitNone):
    """How a wave was cut: :meth:`fanfit.sched.sizing.ShardingDecision.to_dict`, or with ``policy``
    ``'fixed'`` (the job's ``units_per_shard``) or ``'gpu'`` (only GPU shards). Absent fields are
    the ones the decision did not use."""

    policy: str
    units_per_shard: int | None = None
    n_shards: int
    max_concurrency: int
    predicted_makespan_s: float | None = None
    probe: bool | None = None
    n_units: int | None = None
    seconds_per_unit: float | None = None
    startup_s: float | None = None
    account_concurrency: int | None = None
    job_concurrency: int | None = None
    timeout_s: float | None = None
    safety: float | None = None
    n_folds: int | None = None
    makespan_slack: float | None = None


class PartitionUsed(Document):
    """The job's partition as it read it at a barrier (:meth:`fanfit.jobs.sharing.Partition.to_dict`)."""

    lambda_concurrency: int
    gpus: int
    demand: int
    version: int
    gpu_demand: int = 0
    concurrency: int


class WaveSummary(_OmitNone):
    """A wave of the schedule as the job record shows it (``fanfit status``): a :class:`WaveEntry`
    without its Map Run's prefix and its shards."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = frozenset({"dropped_shards", "placement"})

    stage: int
    wave: int
    decision: WaveDecision
    resource: str
    predicted_samples_per_s: dict[str, float]
    startup_s: float
    started_at: float
    ended_at: float
    memory_mb: int
    peak_rss_mb: float
    n_gpu_shards: int
    partition: PartitionUsed | None = None
    dropped_shards: list[str] | None = None
    placement: PlacementDecision | None = None


class WaveEntry(_OmitNone):
    """A wave of ``stages/<s>/schedule.json``: its decision (:class:`WaveDecision`), the figures it
    used (resource, predicted samples/s per signature, start-up seconds), its Map Run's prefix, when
    Schedule ran and on how much memory, its GPU shard count, the job's partition it read, and its
    shards. ``dropped_shards``: shards of this wave whose predictions were missing when a resumed
    execution recovered the schedule (their units were planned again)."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = frozenset({"dropped_shards", "placement"})

    stage: int
    wave: int
    decision: WaveDecision
    resource: str
    predicted_samples_per_s: dict[str, float]
    startup_s: float
    map_runs_prefix: str
    started_at: float
    ended_at: float
    memory_mb: int
    peak_rss_mb: float
    n_gpu_shards: int
    partition: PartitionUsed | None = None
    shards: list[ScheduledShard]
    dropped_shards: list[str] | None = None
    #: Where the wave's learner groups run and why (None in schedules written before placement).
    placement: PlacementDecision | None = None

    def summary(self) -> WaveSummary:
        """The entry without its Map Run's prefix and its shards (for the job record)."""
        return WaveSummary(**{name: getattr(self, name) for name in WaveSummary.model_fields})


class RecoveredCount(Document):
    """Shards a resumed execution kept (predictions in S3) and dropped (planned again)."""

    kept: int
    dropped: int


class StageSchedule(_OmitNone):
    """``stages/<s>/schedule.json``: the waves of a stage so far (:func:`fanfit.storage.schedule_key`).

    ``next_shard_id`` is the first shard id no wave used (ids are never reused in a stage);
    ``recovered`` is set when a resumed execution reduced the schedule to the written shards. A
    stage without units (every nuisance of it given) has one too, with no wave.
    """

    waves: list[WaveEntry] = Field(default_factory=list)
    next_shard_id: int | None = None
    recovered: RecoveredCount | None = None


class ScheduleSummary(Document):
    """The job record's ``schedule``: the stage being scheduled and its waves' decisions."""

    stage: int
    waves: list[WaveSummary]


class WaveOutput(_OmitNone):
    """What Schedule returns into the state (``$.schedule.wave``); without a wave (the stage is
    done) only ``job_id, plan_key, stage, wave, has_wave``."""

    job_id: str
    plan_key: str
    stage: int
    wave: int
    has_wave: bool
    shards_key: str | None = None
    n_shards: int | None = None
    max_concurrency: int | None = None
    map_runs_prefix: str | None = None
    next_wave: int | None = None
