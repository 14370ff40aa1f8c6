"""The documents of a train job: its spec, plan, round plans, partials, records and result.

Each is a :class:`~fanfit.jobs.documents.Document` (unknown keys refused; ``parse(data, source=key)``
raises :class:`~fanfit.errors.InvalidDocumentError` naming the field). Keys come from
:mod:`fanfit.storage`.

==================  ===========================================  ===============  =====================================
document            S3 key (fanfit.storage) / state               writer           readers
==================  ===========================================  ===============  =====================================
TrainJobFile        ``spec_key`` (spec.json)                      client           TrainInit
TrainSpec           inside TrainJobFile and TrainPlan             client           TrainInit, every step, progress
TrainPlan           ``plan_key`` (plan.json)                      TrainInit        TrainSchedule, TrainShard, TrainReduce,
                                                                                   TrainFinalize, resume
StateMeta           ``train_state_key`` (``__meta__`` of the npz) TrainInit/Reduce TrainSchedule/Shard/Reduce/Finalize, resume
                                                                  (DS-Sync: /Sched.
                                                                  /Finalize)
RoundPlan           ``train_round_plan_key``                      TrainSchedule    TrainShard, TrainReduce
ShardStats          ``train_partial_key`` (``__stats__``)         TrainShard       TrainReduce, progress
ShardRecord         ``train_worker_record_key`` (DS-Sync)         TrainShard       TrainSchedule, TrainFinalize
TrainStop           ``train_stop_key`` (stop.json)                TrainShard,      TrainShard (DS-Sync segments)
                                                                  failure branch,
                                                                  client cancel
RoundRecord         ``train_round_key``                           TrainReduce      TrainSchedule, TrainFinalize, progress
                                                                  (DS-Sync: /Sched.
                                                                  /Finalize)
TrainResult         ``result_key`` (result.json)                  TrainFinalize    client (TrainResult), report, cost
InitOutput          state of the execution                        TrainInit        train.asl.json
ScheduleOutput      state (the Map's items and concurrency)       TrainSchedule    train.asl.json
ShardOutput         state (the Map item's result)                 TrainShard       train.asl.json
ReduceOutput        state (DS-Sync: ScheduleOutput.advance)       TrainReduce      train.asl.json
FinalizeOutput      state                                         TrainFinalize    train.asl.json, client
==================  ===========================================  ===============  =====================================

Documents whose fields depend on the model (:class:`RoundRecord`, :class:`TrainResult`,
:class:`ShardStats`) write only the fields that were set (``exclude_unset``), so their JSON is
the shape the client, progress and report read.
"""

from __future__ import annotations

import math
import numbers
from typing import Annotated, Any, Literal, Self

import numpy as np
from pydantic import BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from fanfit.errors import InvalidDataError, InvalidJobError
from fanfit.jobs.documents import DataSource, Document, check_one_data, describe_validation_error
from fanfit.sched.resources import PlacementKind
from fanfit.train.models import TRAIN_MODELS, model_for

__all__ = [
    "BALANCES",
    "MAX_CLASSES",
    "MAX_WORKERS",
    "SYNCS",
    "TRAIN_MODELS",
    "DispatchQueue",
    "FinalizeOutput",
    "InitOutput",
    "ReduceOutput",
    "RoundDispatch",
    "RoundItem",
    "RoundPlan",
    "RoundRecord",
    "ScheduleOutput",
    "ShardOutput",
    "ShardRecord",
    "ShardStats",
    "StateMeta",
    "TrainJobFile",
    "TrainPlan",
    "TrainResult",
    "TrainSpec",
    "TrainStop",
    "TrainWorker",
    "WorkerRecord",
]

#: Batch balancing policies: plain BSP's even split, LB-BSP's split by predicted throughput, or a
#: split the user gives (``worker_batches``; e.g. the oracle split of a benchmark).
BALANCES: tuple[str, ...] = ("uniform", "lb-bsp", "static")
#: Synchronisation modes of the SGD models.
SYNCS: tuple[str, ...] = ("bsp", "ds-sync")
#: Most workers of a job: an inline Map runs at most 40 iterations at once (Step Functions quota),
#: and a round is a barrier, so every worker of a round must run at the same time.
MAX_WORKERS = 40
#: Most classes of a logistic model.
MAX_CLASSES = 1000


def _integer(value: Any) -> Any:
    """An integer (not a bool, not a float): what ``_is_int`` accepted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError("must be an integer")
    return int(value)


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError("must be a number")
    return float(value)


def _text(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


Int = Annotated[int, BeforeValidator(_integer)]
Num = Annotated[float, BeforeValidator(_number)]
Str = Annotated[str, BeforeValidator(_text)]


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


class TrainSpec(Document):
    """A train job, as the client writes it (in ``spec.json``) and TrainInit validates it.

    Attributes
    ----------
    model : {'kmeans', 'logreg', 'linreg', 'mlp'}
        The model (:func:`fanfit.train.models.model_for`). ``mlp``: a ReLU network classifier
        (:mod:`fanfit.train.mlp`), every worker on the GPU worker (``gpu_workers == workers``).
    features : tuple of str
        Feature columns, ``d = len(features)``.
    target : str or None
        Target column (class labels for ``logreg`` and ``mlp``, values for ``linreg``); None for
        ``kmeans``.
    workers : int
        ``N``, workers per round (1 to :data:`MAX_WORKERS`).
    worker_memory_mb : tuple of int
        Memory of each Lambda worker's function, MB, length ``N - gpu_workers``.
    gpu_workers : int
        How many of the ``N`` workers (the last ones) run on the GPU worker (AWS Batch) instead of
        Lambda: a CPU-GPU hybrid round (Proteus), its batches sized by measured throughput as for
        any worker.
    rounds : int
        Most rounds (SGD steps; K-Means Lloyd iterations, ``max_iter``).
    global_batch : int or None
        ``B``, samples per SGD round (``sum_i b_i``); K-Means takes every row every round.
    balance : {'uniform', 'lb-bsp', 'static'}
    worker_batches : tuple of int
        ``static`` only: each worker's batch, samples, length ``N``, summing to ``B`` (K-Means: to
        the number of rows).
    sync : {'bsp', 'ds-sync'}
        DS-Sync applies to the SGD models only.
    group_size : int
        DS-Sync's largest group.
    n_clusters : int or None
        K-Means' ``k``.
    lr, l2 : float
        SGD learning rate (> 0) and L2 penalty (>= 0) (:func:`fanfit.train.sgd.sgd_step`).
    tol : float
        K-Means' absolute tolerance on the squared centre shift (:func:`fanfit.train.kmeans.kmeans_reduce`).
    seed : int
        Seeds mini-batches, DS-Sync groups and the K-Means initial centroids.
    standardize : bool
        Scale features to zero mean and unit variance (the training data's) before training.
    hidden : tuple of int
        ``mlp`` only: the hidden layers' widths, e.g. ``(256, 256, 256)`` (1 to
        :data:`fanfit.train.mlp.MAX_HIDDEN_LAYERS` layers).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Str
    features: tuple[Str, ...]
    target: Str | None = None
    workers: Int = 4
    worker_memory_mb: tuple[Int, ...] = ()
    gpu_workers: Int = 0
    rounds: Int = 10
    global_batch: Int | None = None
    balance: Str = "uniform"
    worker_batches: tuple[Int, ...] = ()
    sync: Str = "bsp"
    group_size: Int = 2
    n_clusters: Int | None = None
    lr: Num = 0.1
    l2: Num = 0.0
    tol: Num = 0.0
    seed: Int = 0
    standardize: bool = False
    hidden: tuple[Int, ...] = ()

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise InvalidJobError(describe_validation_error("train options", exc)) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (lists for tuples), as ``spec.json`` holds it."""
        return self.to_json_dict()

    @classmethod
    def from_dict(cls, d: Any) -> TrainSpec:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        InvalidJobError
            An unknown or missing field, or one of the wrong type (naming it).
        """
        if not isinstance(d, dict):
            raise InvalidJobError(f"a train spec must be an object; got {type(d).__name__}")
        unknown = set(d) - set(cls.model_fields)
        if unknown:
            raise InvalidJobError(f"unknown train option(s) {sorted(unknown)}")
        if "model" not in d or "features" not in d:
            raise InvalidJobError("a train job needs 'model' and 'features'")
        values = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
        for name in ("worker_memory_mb", "worker_batches", "hidden"):
            if name in values and values[name] is None:
                values[name] = ()
        return cls(**values)

    def validate(  # type: ignore[override]
        self, valid_memory_mb: tuple[int, ...] | None = None
    ) -> TrainSpec:
        """Check every option; return the spec with ``worker_memory_mb`` filled in.

        Parameters
        ----------
        valid_memory_mb : tuple of int, optional
            Memory sizes (MB) that have a TrainShard function; the first is the default. None:
            only the form of ``worker_memory_mb`` is checked.

        Returns
        -------
        TrainSpec

        Raises
        ------
        InvalidJobError
            Naming the option (``--model``, ``--workers``, ``--worker-memory``, ...) and what
            would be right.
        """
        model = model_for(self.model)
        if not self.features or len(set(self.features)) != len(self.features):
            raise InvalidJobError(
                f"--features must name distinct columns; got {list(self.features)!r}"
            )
        if model.supervised:
            if not self.target:
                raise InvalidJobError(f"--target is required for {self.model}")
            if self.target in self.features:
                raise InvalidJobError(f"--target {self.target!r} must not be one of --features")
        if not _is_int(self.workers) or not 1 <= self.workers <= MAX_WORKERS:
            raise InvalidJobError(
                f"--workers must be an integer in 1..{MAX_WORKERS}; got {self.workers!r}"
            )
        if not _is_int(self.rounds) or not 1 <= self.rounds <= 10_000:
            raise InvalidJobError(f"--rounds must be an integer in 1..10000; got {self.rounds!r}")
        if self.balance not in BALANCES:
            raise InvalidJobError(
                f"--balance must be one of {', '.join(BALANCES)}; got {self.balance!r}"
            )
        if self.balance == "static":
            batches = self.worker_batches
            if len(batches) != self.workers or not all(_is_int(b) and b >= 0 for b in batches):
                raise InvalidJobError(
                    f"--balance static needs --worker-batches: one integer >= 0 per worker "
                    f"({self.workers}); got {list(batches)!r}"
                )
            if not model.every_row and sum(batches) != self.global_batch:
                raise InvalidJobError(
                    f"--worker-batches must sum to --global-batch ({self.global_batch}); they sum "
                    f"to {sum(batches)}"
                )
        elif self.worker_batches:
            raise InvalidJobError("--worker-batches applies to --balance static only")
        if self.sync not in SYNCS:
            raise InvalidJobError(f"--sync must be one of {', '.join(SYNCS)}; got {self.sync!r}")
        if not _is_int(self.group_size) or self.group_size < 1:
            raise InvalidJobError(f"--group-size must be an integer >= 1; got {self.group_size!r}")
        if not model.every_row and (
            self.global_batch is None
            or not _is_int(self.global_batch)
            or self.global_batch < self.workers
        ):
            raise InvalidJobError(
                f"--global-batch must be an integer of at least --workers ({self.workers}) for "
                f"{self.model}; got {self.global_batch!r}"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise InvalidJobError(f"--lr must be a positive number; got {self.lr!r}")
        if not (math.isfinite(self.l2) and self.l2 >= 0):
            raise InvalidJobError(f"--l2 must be a number >= 0; got {self.l2!r}")
        if not (math.isfinite(self.tol) and self.tol >= 0):
            raise InvalidJobError(f"--tol must be a number >= 0; got {self.tol!r}")
        if not _is_int(self.seed) or self.seed < 0:
            raise InvalidJobError(f"--seed must be an integer >= 0; got {self.seed!r}")
        if not _is_int(self.gpu_workers) or not 0 <= self.gpu_workers <= self.workers:
            raise InvalidJobError(
                f"--gpu-workers must be an integer in 0..--workers ({self.workers}); got "
                f"{self.gpu_workers!r}"
            )
        model.check_spec(self)  # --n-clusters, --hidden, mlp's GPU workers, kmeans' bsp
        n_lambda = self.workers - self.gpu_workers
        memory = tuple(int(m) for m in self.worker_memory_mb)
        if len(memory) == 1 and n_lambda > 1:
            memory = memory * n_lambda
        if memory and len(memory) != n_lambda:
            raise InvalidJobError(
                f"--worker-memory must give one size or one per Lambda worker ({n_lambda}); got {list(memory)}"
            )
        if valid_memory_mb is not None:
            if not memory:
                memory = (valid_memory_mb[0],) * n_lambda
            bad = sorted({m for m in memory if m not in valid_memory_mb})
            if bad:
                raise InvalidJobError(
                    f"--worker-memory {bad} has no TrainShard function on this stack; valid sizes "
                    f"(MB): {', '.join(str(m) for m in sorted(valid_memory_mb))}"
                )
        return self.model_copy(update={"worker_memory_mb": memory})

    def check_data(self, columns: list[str], values: np.ndarray) -> None:
        """Check the columns exist, are finite, and fit the model.

        Raises
        ------
        InvalidDataError
            Naming the column.
        InvalidJobError
            ``global_batch`` or ``n_clusters`` larger than the rows, or ``workers`` more than rows.
        """
        model = model_for(self.model)
        for name in (*self.features, *([self.target] if self.target else [])):
            if name not in columns:
                raise InvalidDataError(f"column {name!r} is not in the data; it has {columns}")
            if not np.all(np.isfinite(values[:, columns.index(name)])):
                raise InvalidDataError(f"column {name!r} holds NaN or inf")
        n_obs = values.shape[0]
        if n_obs < self.workers:
            raise InvalidJobError(
                f"--workers ({self.workers}) exceeds the rows of the data ({n_obs})"
            )
        if self.global_batch is not None and not model.every_row and self.global_batch > n_obs:
            raise InvalidJobError(
                f"--global-batch ({self.global_batch}) exceeds the rows of the data ({n_obs})"
            )
        if model.every_row and self.balance == "static" and sum(self.worker_batches) != n_obs:
            raise InvalidJobError(
                f"--worker-batches must sum to the rows of the data ({n_obs}) for {self.model}; "
                f"they sum to {sum(self.worker_batches)}"
            )
        model.check_rows(self, n_obs)
        if model.classifier:
            y = values[:, columns.index(str(self.target))]
            classes = np.unique(y)
            if classes.size < 2 or classes.size > MAX_CLASSES:
                raise InvalidDataError(
                    f"column {self.target!r} must hold 2..{MAX_CLASSES} classes for "
                    f"{self.model}; it has {classes.size}"
                )


class TrainJobFile(Document):
    """``spec.json`` of a train job: what the client uploads and TrainInit reads first.

    The data is named by exactly one of ``data_key`` (the uploaded data object) and ``data_source``
    (the user's ``s3://`` object used in place, :class:`~fanfit.jobs.documents.DataSource`). Its
    top-level keys other than these (e.g. an estimate's ``max_concurrency``) are ignored; its
    ``spec`` is parsed by :meth:`TrainSpec.from_dict`.
    """

    model_config = ConfigDict(extra="ignore")

    kind: Literal["train"] = "train"
    spec: dict[str, Any]
    data_key: str | None = None
    data_source: DataSource | None = None
    init_key: str | None = None
    weight: Any = None

    @model_validator(mode="after")
    def _one_data(self) -> Self:
        check_one_data(self.data_key, self.data_source)
        return self


class _Sparse(Document):
    """A document written with only the fields that were set (its shape depends on the model)."""

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)


class TrainWorker(Document):
    """One worker of a plan: ``memory_mb`` of its Lambda function (or the GPU worker's job
    definition), the TrainShard function's ARN (empty on the GPU worker), its placement."""

    worker: int
    memory_mb: int | None
    function_arn: str = ""
    placement: PlacementKind = "lambda"


class TrainPlan(Document):
    """``plan.json`` of a train job (TrainInit): the validated spec, the data, the workers.

    ``mean``/``scale`` (d,) standardise the features (None: not standardised); ``classes`` are
    the classifier's labels (None otherwise); ``n_outputs`` clusters, classes or 1.
    """

    job_id: str
    spec: TrainSpec
    data_key: str
    n_obs: int
    n_outputs: int
    mean: list[float] | None = None
    scale: list[float] | None = None
    classes: list[float] | None = None
    weight: float = 1.0
    workers: list[TrainWorker]


class StateMeta(_Sparse):
    """The ``__meta__`` of a model state (:class:`fanfit.train.model.ModelState` without arrays)."""

    phase: Literal["train", "final", "done"]
    n_iter: int = 0
    converged: bool | None = None
    inertia: float | None = None
    #: DS-Sync: the groups whose models this state holds, not in this object: the groups of the
    #: round before (round 0: one group of every worker, its model in ``train_group_state_key``).
    #: None: the arrays are in this object (BSP, K-Means).
    groups: list[list[int]] | None = None
    #: DS-Sync, rounds after 0: the model of group ``g`` is not stored but is the average of its
    #: members' partials of the round before (each a stepped model), weighted by their batches,
    #: which each member computes itself at the start of the round (a group all-reduce,
    #: :func:`fanfit.jobs.train.data.group_average`).
    from_partials: bool | None = None


class DispatchQueue(Document):
    """One queue of a round's CPU-GPU dispatch (:class:`RoundDispatch`): the Lambda workers
    (``'lambda'``) or the GPU workers (``'gpu'``).

    ``workers`` are its workers' indices; ``samples_per_s`` their predicted throughput summed (in
    the prediction's units: vCPU equivalents while it is the ``cpu-share`` prior);
    ``cost_per_sample_usd`` the price of its workers' seconds over that throughput;
    ``service_per_slot`` the samples it serves while all queues serve one fragment;
    ``overhead_s`` its workers' longest time from the last round's schedule to their partial
    other than computing (start-up, I/O; 0 in round 0) and ``backlog_start`` the samples it
    starts behind the quickest queue for it (``(overhead_s - min) * samples_per_s``);
    ``fragments`` and ``samples`` what the rule sent it (``samples`` counts the one sample each
    worker is given first)."""

    name: PlacementKind
    workers: list[int]
    samples_per_s: float = Field(gt=0)
    cost_per_sample_usd: float = Field(ge=0)
    service_per_slot: float = Field(gt=0)
    overhead_s: float = Field(ge=0)
    backlog_start: float = Field(ge=0)
    fragments: int = Field(ge=0)
    samples: int = Field(ge=0)


class RoundDispatch(Document):
    """How a round with Lambda and GPU workers split its samples between them: Proteus'
    drift-plus-penalty rule (:func:`fanfit.sched.lyapunov.dispatch_fragments`) with penalty
    weight ``V`` over ``n_fragments`` fragments of about ``fragment_samples``; per queue a
    :class:`DispatchQueue`. Within a queue LB-BSP splits its samples among its workers."""

    rule: Literal["drift-plus-penalty"] = "drift-plus-penalty"
    V: float = Field(ge=0)
    n_fragments: int = Field(ge=0)
    fragment_samples: float = Field(ge=0)
    queues: list[DispatchQueue]


class RoundPlan(Document):
    """``rounds/<r>/plan.json`` (TrainSchedule): the round's batches (samples per worker), DS-Sync
    groups, predicted throughput (samples/s) and where it came from, the partition read at the
    barrier (``Partition.to_dict()``) and the Map's concurrency; epoch seconds. A round with
    Lambda and GPU workers under LB-BSP also holds ``dispatch`` (:class:`RoundDispatch`): how its
    samples were split between the two."""

    round: int
    phase: Literal["train", "final", "done"]
    max_concurrency: int
    partition: dict[str, Any] | None = None
    batches: list[int]
    groups: list[list[int]]
    predicted_samples_per_s: list[float]
    prediction_source: Literal["job", "table", "cpu-share"]
    started_at: float
    ended_at: float
    dispatch: RoundDispatch | None = None
    #: DS-Sync segments: the first round of the segment this round belongs to (one Map invocation
    #: of each worker runs the segment's rounds, :func:`fanfit.jobs.train.schedule.segment_rounds`);
    #: None: a segment of this round alone.
    segment_first: int | None = None
    #: The segment's rounds ``K`` (1: one Map per round, as BSP).
    segment_rounds: int = 1


class RoundItem(Document):
    """One Map item of a round: the input of TrainShard (:class:`~fanfit.jobs.documents.events.TrainShardEvent`)."""

    job_id: str
    round: int
    worker: int
    function_arn: str
    placement: PlacementKind = "lambda"
    #: DS-Sync segments: the worker runs rounds ``round .. round + rounds - 1`` in one invocation.
    rounds: int = 1


class ReduceOutput(Document):
    """TrainReduce's output (and under DS-Sync :attr:`ScheduleOutput.advance`): the next round
    and whether it runs."""

    job_id: str
    round: int
    has_next_round: bool


class ScheduleOutput(Document):
    """TrainSchedule's output: the Map's ``MaxConcurrencyPath`` and its items; whether a Reduce
    follows the workers' Map (``reduce``: BSP) or not (DS-Sync: the workers average within their
    groups at the start of the next round), and then ``advance``, the round and whether another
    runs (what a Reduce would have returned, the ASL's ``$.progress``)."""

    job_id: str
    round: int
    max_concurrency: int
    workers: list[RoundItem]
    reduce: bool = True
    advance: ReduceOutput | None = None

    @model_validator(mode="after")
    def _advance_without_reduce(self) -> Self:
        if self.reduce == (self.advance is not None):
            raise ValueError("advance must be given exactly when reduce is false (DS-Sync)")
        return self


class ShardStats(_Sparse):
    """What a worker measured in one step (the partial's ``__stats__``): its batch (samples),
    ``compute_s`` (computation, no I/O) and ``io_s`` (seconds), its function's memory (MB), the
    resource (``lambda-<MB>``/``gpu:<instance type>``), cold start, workload signature, epoch start/end,
    peak RSS (MB), process id and, for the MLP, the device it ran on."""

    worker: int
    round: int
    batch: int
    compute_s: float
    io_s: float
    memory_mb: int
    resource: str
    placement: PlacementKind
    cold_start: bool
    signature: str
    started_at: float
    peak_rss_mb: float
    pid: int
    device: str | None = None
    ended_at: float | None = None
    #: DS-Sync: seconds reading the group's partials of the round before and averaging them (the
    #: worker's part of the group all-reduce; also counted in ``io_s``).
    sync_s: float | None = None
    #: DS-Sync, rounds after 0: of those partials, how many the worker's environment still held
    #: (the one it wrote last), not read from S3 (:func:`fanfit.jobs.train.data.own_partial`).
    sync_held: int | None = None
    #: DS-Sync segments, rounds after a segment's first: seconds the worker waited for its group's
    #: partials of the round before to appear in S3 (bounded polling, before ``sync_s``).
    wait_s: float | None = None


class ShardOutput(ShardStats):
    """TrainShard's output: the partial's key and its :class:`ShardStats`."""

    partial_key: str


class WorkerRecord(_Sparse):
    """One worker of a round record: what it measured and the throughput it was predicted."""

    worker: int
    memory_mb: int
    resource: str
    batch: int
    compute_s: float
    io_s: float
    samples_per_s: float | None
    predicted_samples_per_s: float
    cold_start: bool
    started_at: float
    ended_at: float
    peak_rss_mb: float
    device: str | None = None
    sync_s: float | None = None
    sync_held: int | None = None
    wait_s: float | None = None


class ShardRecord(Document):
    """``rounds/<r>/workers/<i>.json`` (TrainShard, DS-Sync only): the worker's statistics
    (:class:`ShardStats`), its mean loss over its batch and its batch (``n_samples``), without the
    model, so that the next TrainSchedule (or TrainFinalize after the last round) merges the
    round's record from N small objects."""

    stats: ShardStats
    loss: float
    n_samples: int = Field(ge=0)


class TrainStop(Document):
    """``train/stop.json``: the train job stopped; a DS-Sync segment's workers stop waiting.

    Written by a worker whose step raised (:func:`fanfit.jobs.train.shard.train_shard`: reason
    ``'failed'`` with its worker, round and error class), by the state machine's failure branch
    (``orchestrator/train.asl.json``, after a worker ran out of memory or time and its retries
    ended: ``'failed'`` with the Step Functions error name, no worker) and by the client's cancel
    (``'cancelled'``). ``execution_arn`` names the execution that stopped: a worker of another
    execution (``fanfit resume`` starts a new one) ignores the marker
    (:meth:`applies_to`); an empty one applies to every execution.
    """

    reason: Literal["failed", "cancelled"]
    execution_arn: str = ""
    worker: int | None = None
    round: int | None = None
    #: The error's class (a Python exception's name, or Step Functions' error name).
    error: str = ""
    #: The error's message (its first 1,000 characters) or the cause Step Functions recorded.
    message: str = ""
    #: When it was written: epoch seconds (a worker, the client) or Step Functions' ISO 8601 time.
    written_at: float | str | None = None

    def applies_to(self, execution_arn: str) -> bool:
        """Whether a worker of execution ``execution_arn`` must stop: the marker names no
        execution, the worker does not know its own, or they are the same."""
        return not self.execution_arn or not execution_arn or self.execution_arn == execution_arn

    def describe(self) -> str:
        """The reason in words: ``'worker 2 failed in round 5 (MemoryError: ...)'``, ``'the job
        was cancelled'``."""
        if self.reason == "cancelled":
            return "the job was cancelled"
        who = "a worker" if self.worker is None else f"worker {self.worker}"
        where = "" if self.round is None else f" in round {self.round}"
        what = self.error or "an error"
        if self.message:
            what = f"{what}: {self.message[:200]}"
        return f"{who} failed{where} ({what})"


class RoundRecord(_Sparse):
    """``rounds/<r>/record.json`` (TrainReduce): per worker :class:`WorkerRecord`; the barrier's
    compute time ``round_s`` (``max_i t_i``, s), ``idle_fraction``, ``span_s`` (first start to last
    end, with I/O), the groups, and the loss (SGD) or inertia (K-Means, with ``n_changed``,
    ``center_shift``, ``n_relocated``) under the round's model; a hybrid round's ``dispatch``
    (from its :class:`RoundPlan`). The client adds ``wall_s``."""

    round: int
    phase: Literal["train", "final", "done"]
    workers: list[WorkerRecord]
    round_s: float
    idle_fraction: float
    span_s: float
    groups: list[list[int]]
    prediction_source: str
    loss: float | None = None
    inertia: float | None = None
    n_changed: int | None = None
    center_shift: float | None = None
    n_relocated: int | None = None
    wall_s: float | None = None
    dispatch: RoundDispatch | None = None


class TrainResult(_Sparse):
    """``result.json`` of a train job (TrainFinalize); read by ``fanfit.client.train.TrainResult``,
    the report and the cost. Model fields by model: K-Means ``centroids`` (k, d), ``inertia``,
    ``n_iter``, ``converged``; linear ``coef`` (d, n_outputs), ``intercept``, ``classes``,
    ``n_iter``, ``loss``; mlp ``params``, ``hidden``, ``classes``, ``n_iter``, ``loss``."""

    job_id: str
    execution_arn: str = ""
    model: str
    features: list[str]
    target: str | None
    n_obs: int
    n_workers: int
    worker_memory_mb: list[int]
    balance: str
    sync: str
    mean: list[float] | None
    scale: list[float] | None
    centroids: list[list[float]] | None = None
    inertia: float | None = None
    coef: list[list[float]] | None = None
    intercept: list[float] | None = None
    params: dict[str, Any] | None = None
    hidden: list[int] | None = None
    classes: list[float] | None = None
    n_iter: int | None = None
    loss: list[float | None] | None = None
    converged: bool | None = None
    rounds: list[RoundRecord] = Field(default_factory=list)
    timings: dict[str, Any] = Field(default_factory=dict)


class InitOutput(Document):
    """TrainInit's output (the execution's state)."""

    job_id: str
    plan_key: str
    round: int
    n_workers: int
    has_next_round: bool
    resumed: bool


class FinalizeOutput(Document):
    """TrainFinalize's output."""

    job_id: str
    result_key: str
