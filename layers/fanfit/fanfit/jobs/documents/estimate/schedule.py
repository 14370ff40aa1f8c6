"""Job documents of an estimate job: what the client and the steps write to S3 and return into the state.

Every reader parses a document through its model (:meth:`~fanfit.jobs.documents.Document.parse`), so a
malformed one raises :class:`fanfit.errors.InvalidDocumentError` naming the field. The JSON shapes are
the ones the client, :mod:`fanfit.progress`, :mod:`fanfit.cost`, :mod:`fanfit.report` and ``fanfit
status`` read.

============================  ===========================================  =================  ======================================
document                      where (:mod:`fanfit.storage`)                written by         read by
============================  ===========================================  =================  ======================================
:class:`EstimateSpec`         ``spec_key(job)``                            client             Prepare; progress (``dml``)
:class:`EstimatePlan`         ``plan_key(job)``                            Prepare            Schedule, CrossFit, Aggregate, client
:class:`FitUnitDoc` (list)    ``units_key(job, s)``                        Prepare            Schedule
:class:`StageInputs`          ``stage_inputs_key(job, s)``                 Prepare (s > 0)    CrossFit
:class:`StepRecord`           ``prepare_record_key(job, s)``               Prepare            Aggregate (cost), progress
:class:`Shard` (list)         ``wave_key(job, s, w)``                      Schedule           the Map's ItemReader: CrossFit's
                                                                                              event, the GPU worker's task
:class:`StageSchedule`        ``schedule_key(job, s)``                     Schedule           Schedule, Aggregate, describe_failure,
                                                                                              progress
:class:`ScheduleSummary`      the job record's ``schedule``                Schedule           ``fanfit status``
:class:`ShardStats`           ``__stats__`` of ``preds_key(job, s, id)``   CrossFit           Schedule, Aggregate, progress, cost
:class:`EstimateResultDoc`    ``result_key(job)``                          Aggregate          client, report, cost, ``fanfit status``
:class:`PrepareOutput`        state ``$.plan``                             Prepare            the state machine
:class:`WaveOutput`           state ``$.schedule.wave``                    Schedule           the state machine
:class:`ShardFailure`         state (the failed wave's Catch)              Schedule           the state machine's Fail state
:class:`CrossFitOutput`       the Map Run's ResultWriter ``Output``        CrossFit           Schedule (wall seconds per shard)
:class:`AggregateOutput`      state                                        Aggregate          the state machine
:class:`ReleaseOutput`        state                                        Release            the state machine
:class:`MapRunChild` (list)   ``map_runs_prefix(job, s, w)``/.../*.json    Step Functions     Schedule, describe_failure
============================  ===========================================  =================  ======================================

``placement`` ``'gpu'`` (and a wave's ``policy`` ``'gpu'``) is fanfit's GPU worker, an AWS Batch job.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    StrictInt,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from fanfit import dml, storage
from fanfit.dml import DMLSpec, FitUnit
from fanfit.errors import InvalidDocumentError, InvalidJobError
from fanfit.jobs.documents import DataSource, Document, check_one_data, describe_validation_error
from fanfit.jobs.documents.events import FitUnitDoc, ReleaseOutput, Shard
from fanfit.limits import check_weight
from fanfit.sched.resources import PlacementKind
from fanfit.sched.sizing import POLICIES

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_UNITS_PER_SHARD",
    "AggregateOutput",
    "CombinedFramework",
    "CombinedResult",
    "CrossFitOutput",
    "DispatchedQueue",
    "EstimatePlan",
    "EstimatePrediction",
    "EstimateResultDoc",
    "EstimateSpec",
    "MAX_PARTS",
    "PartSelect",
    "PlanPart",
    "PlannedPart",
    "SpecPart",
    "EstimateTimings",
    "FitUnitDoc",
    "MapRunChild",
    "PartResult",
    "PartitionUsed",
    "PlannedShards",
    "PlannedStage",
    "PlacedStage",
    "PlacementDecision",
    "PlacementInput",
    "PrepareOutput",
    "ReleaseOutput",
    "ScheduleSummary",
    "ScheduledShard",
    "Shard",
    "ShardFailure",
    "ShardStats",
    "StageInputs",
    "StageSchedule",
    "StepRecord",
    "WaveDecision",
    "WaveDispatch",
    "WaveEntry",
    "WaveOutput",
    "WaveSummary",
    "fit_unit",
    "parse_list",
    "to_json_list",
    "unit_doc",
]

#: Largest ``max_concurrency`` a job file may ask for (Lambda's account concurrency can be raised
#: to tens of thousands; a Distributed Map runs at most 10,000 child executions at once).
MAX_CONCURRENCY = 10_000
#: Largest ``units_per_shard`` (a stage has at most MAX_N_FOLDS x MAX_N_REP x learners units).
MAX_UNITS_PER_SHARD = 100_000


class _OmitNone(Document):
    """A document whose None-valued fields (all, or those in ``OMIT_NONE``) are left out when written:
    absent in the JSON, as the steps have always written them, not ``null``."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = None

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        names = self.OMIT_NONE
        return {k: v for k, v in out.items() if v is not None or (names and k not in names)}


def parse_list(model: type[Document], data: Any, *, source: str | None = None) -> list[Any]:
    """Validate a JSON array of ``model`` documents (a stage's units, a wave's shards).

    Raises
    ------
    InvalidDocumentError
        Not a list, or an item that does not fit ``model``; the message names the item's index and field.
    """
    try:
        return TypeAdapter(list[model]).validate_python(data)  # type: ignore[valid-type]
    except ValidationError as exc:
        name = f"list of {model.__name__} ({source})" if source else f"list of {model.__name__}"
        raise InvalidDocumentError(describe_validation_error(name, exc)) from None


def to_json_list(items: list[Any]) -> list[dict[str, Any]]:
    """A list of documents as JSON-ready dicts."""
    return [item.to_json_dict() for item in items]


def _dml_spec(value: Any) -> dml.DMLSpec:
    if isinstance(value, dml.DMLSpec):
        return value
    return dml.DMLSpec.from_dict(value)  # raises InvalidJobError (a ValueError) naming the option


#: A :class:`fanfit.dml.DMLSpec` in a document: validated by ``DMLSpec.from_dict``, written by ``to_dict``.
DMLSpecField = Annotated[
    dml.DMLSpec,
    PlainValidator(_dml_spec),
    PlainSerializer(lambda spec: spec.to_dict(), return_type=dict),
]
_Placement = PlacementKind
# FitUnitDoc (an item of units.json and of a shard's units) and Shard (an item of a wave's shard list,
# the Distributed Map's ItemReader input, which is CrossFit's event's ``shard``) are defined with the
# event models (:mod:`fanfit.jobs.documents.events`), which the train functions import without fanfit.dml; so is
# ReleaseOutput (Release needs no fanfit.dml either).


# --------------------------------------------------------------------------- spec and plan


#: Most parts one job may hold (a QTE over 99 quantiles is 198 parts).
MAX_PARTS = 1_000


_COLUMN = Annotated[str, Field(min_length=1, max_length=255)]
_PERIOD = Annotated[float, Field(allow_inf_nan=False)]


class PartSelect(Document):
    """How a part selects its rows and derives its columns from the job's data: one group-time
    combination :math:`(g, t_{pre}, t_{eval})` of a staggered-adoption DID (DoubleMLDIDMulti) on
    the panel in long format, as :func:`fanfit.dml.gt_subsets.gt_subset` computes it (DoubleML
    0.11.4's ``DoubleMLDIDBinary._preprocess_data``; with ``panel`` false
    ``DoubleMLDIDCSBinary``'s). Plain data, validated here; the part's ``dml`` runs on the derived
    columns (its ``x_cols``, ``G_indicator``, ``y_diff``; or ``x_cols``, ``y_col``,
    ``G_indicator``, ``t_indicator``)."""

    kind: Literal["did_gt"] = "did_gt"
    id_col: _COLUMN
    t_col: _COLUMN
    g_col: _COLUMN
    y_col: _COLUMN
    g_value: _PERIOD
    t_value_pre: _PERIOD
    t_value_eval: _PERIOD
    control_group: Literal["never_treated", "not_yet_treated"] = "never_treated"
    anticipation_periods: Annotated[StrictInt, Field(ge=0, le=1_000)] = 0
    #: The never-treated units' group value: ``inf`` (DoubleML's for float groups) or ``0``.
    never_treated: Literal["inf", "zero"] = "inf"
    #: Panel data (one row per unit: ``G_indicator``, ``y_diff``), else repeated cross-sections
    #: (the two periods' rows: ``y_col``, ``G_indicator``, ``t_indicator``; a ``didcs`` part).
    panel: bool = True

    @model_validator(mode="after")
    def _periods(self) -> Self:
        if self.t_value_pre == self.t_value_eval:
            raise ValueError("t_value_pre and t_value_eval must be two different periods")
        return self


class SpecPart(_OmitNone):
    """One part of a job of several parts, as the client submits it: a label (``"quantile 0.5 of
    treatment 1"``, ``"treatment level 2"``) and the part's registry model (``dml``, as
    :attr:`EstimateSpec.dml`). A part that ``select`` s its rows from the job's data
    (:class:`PartSelect`: a DIDMulti's group-time combination) has its own sample splitting:
    ``folds_key`` (the client's folds of its rows, :func:`fanfit.storage.input_folds_key` of the
    part), or drawn by Prepare from the seed when absent."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = frozenset({"select", "folds_key"})

    label: str = Field(min_length=1, max_length=200)
    dml: dict[str, Any]
    select: PartSelect | None = None
    folds_key: str | None = None


class EstimateSpec(Document):
    """``spec.json``: the job the client submits (:func:`fanfit.storage.spec_key`).

    The data is named by exactly one of ``data_key`` (the uploaded data object) and ``data_source``
    (the user's ``s3://`` object used in place, :class:`~fanfit.jobs.documents.DataSource`: Prepare
    writes its columns as the data object and the plan names that). ``dml`` is kept as the client
    wrote it: Prepare validates it with
    :meth:`fanfit.dml.DMLSpec.from_dict`, whose errors name the option and keep their class
    (InvalidLearnerError, ...). ``weight`` is the job's weight in the fair shares
    (:func:`fanfit.limits.check_weight`; None reads as 1).

    A model that DoubleML fits as several models (DoubleMLQTE: one PQ, CVaR or LPQ per quantile
    and treatment level; DoubleMLAPOS: one APO per level) is one job of several ``parts``
    (:class:`SpecPart`, at most :data:`MAX_PARTS`) named by ``model`` (``'qte'``, ``'apos'``):
    every part runs on the one data object and the one sample splitting, with the same learners;
    ``dml`` is then the first part's. DoubleMLDIDMulti (``'did_multi'``) is one job whose parts
    each ``select`` their rows from the one data object (:class:`PartSelect`), each with its own
    folds (:attr:`SpecPart.folds_key`; then no ``folds_key`` of the job). ``boot_method`` and
    ``n_rep_boot`` of a job of several parts are the multiplier bootstrap of the model's combined
    result (QTE's and APOS's joint bands, :func:`fanfit.dml.combined.combine_parts`; DoubleML's
    ``bootstrap(method, n_rep_boot)``), seeded by the first part's seed; None: no joint bands.
    """

    kind: Literal["estimate"] = "estimate"
    dml: dict[str, Any]
    model: str | None = Field(default=None, max_length=40)
    parts: Annotated[list[SpecPart], Field(min_length=1, max_length=MAX_PARTS)] | None = None
    data_key: str | None = None
    data_source: DataSource | None = None
    folds_key: str | None = None
    max_concurrency: Annotated[StrictInt, Field(ge=1, le=MAX_CONCURRENCY)] | None = None
    units_per_shard: Annotated[StrictInt, Field(ge=1, le=MAX_UNITS_PER_SHARD)] | None = None
    sharding: str | None = None
    weight: float = 1.0
    #: The placement's objective (:class:`fanfit.sched.profiles.Objective`): a deadline, seconds,
    #: or a budget, USD; neither: the least cost within 5% of the fastest plan's time.
    deadline_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    budget_usd: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    boot_method: str | None = None
    n_rep_boot: Annotated[StrictInt, Field(ge=1)] | None = None

    @field_validator("boot_method")
    @classmethod
    def _boot_method(cls, value: str | None) -> str | None:
        if value is not None and value not in dml.BOOT_METHODS:
            raise ValueError(f"boot_method must be one of {', '.join(dml.BOOT_METHODS)}")
        return value

    @field_validator("data_key", mode="before")
    @classmethod
    def _data_key(cls, value: Any) -> str | None:
        return None if value is None else storage.check_data_key(value)

    @model_validator(mode="after")
    def _one_data(self) -> Self:
        check_one_data(self.data_key, self.data_source)
        return self

    @model_validator(mode="after")
    def _parts(self) -> Self:
        if (self.parts is None) != (self.model is None):
            raise ValueError("model and parts come together (a job of several parts), or neither")
        if self.parts is not None and self.parts[0].dml != self.dml:
            raise ValueError("dml must be the first part's dml in a job of several parts")
        selecting = {p.select is not None for p in self.parts or ()}
        if len(selecting) > 1:
            raise ValueError("every part selects its rows (select), or none does")
        if selecting == {True} and self.folds_key is not None:
            raise ValueError("parts that select their rows take their folds per part (folds_key)")
        if any(p.folds_key is not None and p.select is None for p in self.parts or ()):
            raise ValueError("a part's own folds_key needs its select: else the job's folds_key")
        if self.parts is None and (self.boot_method or self.n_rep_boot) is not None:
            raise ValueError(
                "boot_method and n_rep_boot of the spec bootstrap a combined result: a job of "
                "several parts only (a job of one takes them in dml)"
            )
        return self

    @field_validator("sharding", mode="before")
    @classmethod
    def _sharding(cls, value: Any) -> str | None:
        if not value:
            return None  # absent, null or empty: the default policy
        if not isinstance(value, str) or value not in POLICIES:
            shown = repr(value) if len(repr(value)) <= 100 else f"a {type(value).__name__} value"
            raise ValueError(f"sharding must be one of {', '.join(POLICIES)}; got {shown}")
        return value

    @field_validator("weight", mode="before")
    @classmethod
    def _weight(cls, value: Any) -> float:
        return check_weight(value)


class PlanPart(_OmitNone):
    """One part of a job of several parts in its plan: its label and validated spec; a part that
    selects its rows (:class:`PartSelect`) also its own folds (``folds_key``, (n_obs, n_rep) int64
    over its rows) and ``n_obs``, its row count."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = frozenset({"select", "folds_key", "n_obs"})

    label: str
    dml: DMLSpecField
    select: PartSelect | None = None
    folds_key: str | None = None
    n_obs: int | None = None


class EstimatePlan(Document):
    """``plan.json``: the validated job, written once by Prepare (:func:`fanfit.storage.plan_key`).

    Attributes
    ----------
    dml : DMLSpec
        The validated spec (written as :meth:`~fanfit.dml.DMLSpec.to_dict`).
    data_key, folds_key : str
        The data object and the folds, (n_obs, n_rep) int64.
    n_obs, n_stages : int
    max_concurrency : int
        The job's cap on concurrent shards.
    units_per_shard : int or None
        A fixed shard size, else the scheduler's.
    sharding : str
        The sizing policy (:data:`fanfit.sched.sizing.POLICIES`).
    weight : float
        The job's weight in the fair shares.
    spec_sha256 : str
        Hash of the spec's bytes: a resumed execution keeps a plan written from the same spec.
    model : str or None
        A job of several parts: its model (``'qte'``, ``'apos'``); None for a job of one.
    parts : list of PlanPart or None
        A job of several parts: each part's label and validated spec (``dml`` is the first's).
        The parts share the data object, the folds and the learners; ``n_stages`` is the most
        any part has, and stage ``s`` holds the units of every part that has it
        (:meth:`units`). Parts that select their rows (DIDMulti's combinations,
        :class:`PartSelect`) have their own folds and row counts; ``folds_key`` and ``n_obs`` are
        then the first part's (:meth:`part_folds_key`).
    """

    job_id: str
    dml: DMLSpecField
    model: str | None = None
    parts: list[PlanPart] | None = None
    data_key: str
    folds_key: str
    n_obs: int
    n_stages: int
    max_concurrency: int
    units_per_shard: int | None = None
    sharding: str = "auto"
    weight: float = 1.0
    spec_sha256: str
    deadline_s: float | None = None
    budget_usd: float | None = None

    @property
    def specs(self) -> list[DMLSpec]:
        """Every part's spec, in order (``[dml]`` for a job of one)."""
        return [p.dml for p in self.parts] if self.parts else [self.dml]

    @property
    def labels(self) -> list[str]:
        """Every part's label (``[""]`` for a job of one)."""
        return [p.label for p in self.parts] if self.parts else [""]

    def spec(self, part: int = 0) -> DMLSpec:
        """The spec of ``part``.

        Raises
        ------
        InvalidJobError
            No such part.
        """
        specs = self.specs
        if not 0 <= part < len(specs):
            raise InvalidJobError(f"part {part} does not exist; job {self.job_id} has {len(specs)}")
        return specs[part]

    def part_folds_key(self, part: int = 0) -> str:
        """The folds of ``part``: its own (a part that selects its rows), else the job's."""
        own = self.parts[part].folds_key if self.parts else None
        return own or self.folds_key

    def units(self, stage: int) -> list[FitUnit]:
        """The units of ``stage``: each part's (:func:`fanfit.dml.fit_units`) that has the stage,
        with its part index, in part order."""
        return [
            dataclasses.replace(unit, part=k) if k else unit
            for k, spec in enumerate(self.specs)
            if stage < dml.n_stages(spec)
            for unit in dml.fit_units(spec, stage)
        ]


def fit_unit(doc: FitUnitDoc) -> dml.FitUnit:
    """The :class:`fanfit.dml.FitUnit` of a unit document."""
    return dml.FitUnit(doc.stage, doc.i_treat, doc.i_rep, doc.i_fold, doc.learner, doc.part)


def unit_doc(unit: dml.FitUnit) -> FitUnitDoc:
    """The document of a :class:`fanfit.dml.FitUnit` (what :meth:`~fanfit.dml.FitUnit.to_dict` writes)."""
    return FitUnitDoc(
        stage=unit.stage, i_treat=unit.i_treat, i_rep=unit.i_rep, i_fold=unit.i_fold,
        learner=unit.learner, part=unit.part,
    )  # fmt: skip


class StageInputs(_OmitNone):
    """``stages/<s>/inputs.json``: what stage ``s`` needs from the earlier stages
    (:func:`fanfit.dml.stage_inputs`): ``{}``; ``theta_initial[i_treat][i_rep]``, the preliminary
    estimate of the IV-type scores; or ``fold_scalars[name][i_treat][i_rep][i_fold]``, the fold
    scalars of a split fold procedure (PQ, LPQ: ``theta_ipw``, each fold's preliminary IPW
    quantile, computed by Prepare from stage 0's preliminary propensities with DoubleML's chain of
    start values over the repetitions)."""

    theta_initial: list[list[float]] | None = None
    fold_scalars: dict[str, list[list[list[float]]]] | None = None


class StepRecord(Document):
    """``stages/<s>/prepare.json``: when Prepare ran and on how much memory (for the cost)."""

    started_at: float
    ended_at: float
    memory_mb: int
    n_units: int
    peak_rss_mb: float


class PrepareOutput(Document):
    """What Prepare returns into the state (``$.plan``)."""

    job_id: str
    spec_key: str
    plan_key: str
    stage: int
    n_units: int
    has_next_stage: bool
    next_stage: int


# --------------------------------------------------------------------------- waves and schedule


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
    ``recovered`` is set when a resumed execution reduced the schedule to the written shards.
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


class ShardFailure(Document):
    """What Schedule returns for a failed wave: the error and cause of the job's Fail state."""

    Error: str
    Cause: str


class MapRunChild(Document):
    """One child execution in a Map Run's ResultWriter file (``SUCCEEDED_*.json``, ``FAILED_*.json``):
    Step Functions' format, of which only these fields are read."""

    model_config = ConfigDict(extra="ignore")

    StartDate: str | None = None
    StopDate: str | None = None
    Input: Any = None
    Output: Any = None
    Error: str | None = None
    Cause: str | None = None

    def shard_id_out(self) -> str | None:
        """The shard id in the child's output (CrossFit's :class:`CrossFitOutput`), if there is one."""
        return _shard_id(self.Output, ("shard_id",))

    def shard_id_in(self) -> str | None:
        """The shard id in the child's input (the Map item: ``{"shard": {"shard_id": ...}}``)."""
        return _shard_id(self.Input, ("shard", "shard_id"))


def _shard_id(value: Any, path: tuple[str, ...]) -> str | None:
    try:
        obj = json.loads(value) if isinstance(value, str) else value
        for name in path:
            obj = obj[name]
    except (KeyError, TypeError, ValueError):
        return None
    return None if obj is None else str(obj)


# --------------------------------------------------------------------------- shards and result


class ShardStats(_OmitNone):
    """A shard's statistics: the ``__stats__`` array of its predictions object, and the records
    of ``timings.shards`` in ``result.json`` (there with ``billed_gb_s``).

    Times are epoch seconds (``started_at``, ``ended_at``) and seconds (``fit_s``, ``io_s``);
    ``unit_fit_s`` maps unit keys to fit seconds; ``resource`` is ``lambda-<MB>`` or the GPU worker's.
    ``unit_batch`` maps unit keys to the fits trained together with the unit (absent: each alone).
    """

    shard_id: str
    stage: int
    n_units: int
    unit_fit_s: dict[str, float]
    started_at: float
    fit_s: float
    io_s: float
    memory_mb: int
    resource: str | None = None
    placement: _Placement = "lambda"
    peak_rss_mb: float
    cold_start: bool
    pid: int | None = None
    ended_at: float
    billed_gb_s: float | None = None
    unit_batch: dict[str, int] | None = None


class CrossFitOutput(ShardStats):
    """What CrossFit returns: its predictions object's key and its statistics (``io_s`` counting
    the write)."""

    preds_key: str


class AggregateStats(Document):
    """Aggregate's own memory figures."""

    memory_mb: int
    peak_rss_mb: float


class EstimateTimings(Document):
    """``timings`` of ``result.json``: per-shard statistics, billed GB-seconds, the estimated Lambda
    cost (USD) and the prices it used."""

    shards: list[ShardStats]
    billed_gb_s: float
    lambda_cost_usd: float
    aggregate: AggregateStats
    price_usd_per_gb_s: float
    price_usd_per_request: float


#: The optional fields of an estimate's result: left out of ``result.json`` when None.
_RESULT_OPTIONAL = frozenset(
    {"ci_joint_95", "boot_method", "n_rep_boot", "nuisance_loss", "nuisance_metric", "spec",
     "propensity_overlap"}
)  # fmt: skip


class _EstimateFields(_OmitNone):
    """The fields of an estimate's result that each part of a job has (:class:`EstimateResultDoc`,
    :class:`PartResult`)."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = _RESULT_OPTIONAL

    model: str
    score: str
    d_cols: list[str]
    coef: dict[str, float]
    se: dict[str, float]
    t_stat: dict[str, float]
    pval: dict[str, float]
    ci_95: dict[str, list[float]]
    all_coef: dict[str, list[float]]
    all_se: dict[str, list[float]]
    n_obs: int
    n_folds: int
    n_rep: int
    ci_joint_95: dict[str, list[float]] | None = None
    boot_method: str | None = None
    n_rep_boot: int | None = None
    nuisance_loss: dict[str, list[list[float | None]]] | None = None
    nuisance_metric: dict[str, str] | None = None
    spec: dict[str, Any] | None = None
    propensity_overlap: dict[str, Any] | None = None
    job_id: str
    execution_arn: str
    predictions_key: str
    folds_key: str


class PartResult(_EstimateFields):
    """One part's estimate in the ``result.json`` of a job of several parts
    (:attr:`EstimateResultDoc.parts`): the fields of a job of one but ``timings`` (the job's), with
    the part's ``label``, ``spec`` and ``predictions_key`` (:func:`fanfit.storage.predictions_key`
    of the part)."""

    label: str


class CombinedFramework(_OmitNone):
    """The numbers of a ``DoubleMLFramework`` (:meth:`fanfit.dml.combined.Framework.to_dict`), one
    entry per theta (``names``): ``coef``, ``se``, ``t_stat``, ``pval`` (median of the
    per-repetition p-values), ``ci_95`` (``[low, high]``), ``all_coef`` and ``all_se`` (n_rep
    values each) and, after the bootstrap, ``ci_joint_95`` (the joint band)."""

    names: list[str]
    coef: list[float]
    se: list[float]
    t_stat: list[float]
    pval: list[float]
    ci_95: list[list[float]]
    all_coef: list[list[float]]
    all_se: list[list[float]]
    ci_joint_95: list[list[float]] | None = None


class CombinedResult(_OmitNone):
    """``result.json``'s ``combined`` of a job of several parts: the model's result from its parts
    (:func:`fanfit.dml.combined.combine_parts`, DoubleML 0.11.4's ``DoubleMLFramework``
    arithmetic).

    ``qte``: ``effects`` the quantile treatment effects (one per ``quantiles``, DoubleMLQTE's
    ``coef``, ``se``, ``confint``, ``confint(joint=True)``); ``apos``: ``effects`` the levels'
    average potential outcomes (DoubleMLAPOS's) and ``contrasts`` each other level minus
    ``reference_level`` (``causal_contrast``; absent for one level). With ``boot_method`` the joint
    bands of ``n_rep_boot`` draws seeded by ``seed``.
    """

    model: str
    score: str
    effects: CombinedFramework
    contrasts: CombinedFramework | None = None
    quantiles: list[float] | None = None
    treatment_levels: list[float] | None = None
    reference_level: float | None = None
    boot_method: str | None = None
    n_rep_boot: int | None = None
    seed: int | None = None


class EstimateResultDoc(_EstimateFields):
    """``result.json`` of an estimate (:func:`fanfit.storage.result_key`): the estimate as
    :meth:`fanfit.dml.DMLResult.to_dict` writes it (per treatment), with the job's keys and timings.
    ``ci_joint_95``, ``boot_method`` and ``n_rep_boot`` are present after a bootstrap only.
    ``nuisance_loss`` (prediction key -> ``n_rep`` lists of ``n_treat`` losses, DoubleML's
    ``nuisance_loss`` layout; :func:`fanfit.dml.losses.nuisance_loss`), ``nuisance_metric``
    (prediction key -> ``'RMSE'`` or ``'Log Loss'``) and ``spec`` (the job's
    :meth:`fanfit.dml.DMLSpec.to_dict`: columns, learners, seed) and, for IRM and IIVM,
    ``propensity_overlap`` (:func:`fanfit.dml.overlap.propensity_overlap`) are optional, so that a
    ``result.json`` written before they existed still parses. A job of several parts
    (:attr:`EstimatePlan.parts`) holds every part's estimate in ``parts`` (:class:`PartResult`),
    the first part's also at the top level, and, for ``qte`` and ``apos``, the model's combined
    result in ``combined`` (:class:`CombinedResult`)."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = _RESULT_OPTIONAL | {"parts", "combined"}

    timings: EstimateTimings
    parts: list[PartResult] | None = None
    combined: CombinedResult | None = None


class AggregateOutput(Document):
    """What Aggregate returns into the state."""

    job_id: str
    result_key: str
