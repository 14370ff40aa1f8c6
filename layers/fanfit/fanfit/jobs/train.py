"""The server-side steps of a train job, one function per Lambda.

A train job is data-parallel training in synchronous rounds (bulk synchronous parallel). Its state
machine (orchestrator/train.asl.json) runs

    Init -> loop { Schedule -> Map(TrainShard over workers) -> Reduce -> more rounds? } -> Finalize

and every step reads and writes S3 through :class:`~fanfit.storage.JobStore`: the model between
rounds lives in ``state/<r>.npz``, the execution state carries keys and small numbers only.

- :func:`init_job` (TrainInit): validates the spec (:class:`TrainSpec`) and the data, resolves each
  worker's TrainShard function from its memory size, writes the plan and the round-0 model; or,
  for a resumed job (``fanfit resume``), keeps them and starts at the first round whose reduced
  model is not in S3 (:func:`resume_point`).
- :func:`schedule_round` (TrainSchedule): folds what the last round's workers measured
  (:class:`fanfit.sched.throughput.ShardObservation`) into the job's per-worker throughput averages
  (in S3) and the stack's throughput table (cross-job history, per ``(signature, lambda-<MB>)``),
  predicts each worker's throughput and sets its batch: LB-BSP (Chen et al., IEEE TCC 2021,
  :func:`fanfit.sched.lbbsp.lbbsp_batches`) or uniform; for DS-Sync (Wang et al. 2020) it draws the
  round's groups (:func:`fanfit.sched.dssync.dssync_groups`).
- :func:`train_shard` (TrainShard, one function per memory size): one worker's step of a round.
- :func:`reduce_round` (TrainReduce): merges the workers' partials into the next model
  (:func:`fanfit.train.kmeans.kmeans_reduce`, :func:`fanfit.train.sgd.reduce_gradients` +
  :func:`~fanfit.train.sgd.sgd_step`, or :func:`~fanfit.train.sgd.dssync_step`), records the round
  and decides whether another round runs.
- :func:`finalize_job` (TrainFinalize): writes ``result.json`` and marks the job SUCCEEDED.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from fanfit import storage
from fanfit.cost import LAMBDA_USD_PER_GB_SECOND, lambda_cost_usd
from fanfit.errors import InvalidDataError, InvalidJobError, JobNotFoundError
from fanfit.jobs import sharing
from fanfit.sched.dssync import dssync_groups
from fanfit.sched.lbbsp import idle_fraction, lbbsp_batches, uniform_batches
from fanfit.sched.throughput import (
    EwmaThroughput,
    ShardObservation,
    ThroughputEntry,
    lambda_resource,
    lambda_vcpus,
    workload_signature,
)
from fanfit.train.batches import batch_rows, row_range
from fanfit.train.kmeans import KMeansPartial, kmeans_reduce, kmeans_step
from fanfit.train.linear import init_params
from fanfit.train.mlp import init_mlp_params, layer_sizes, mlp_device, mlp_loss_gradient
from fanfit.train.sgd import (
    WorkerGradient,
    average_params,
    dssync_step,
    reduce_gradients,
    sgd_step,
    worker_gradient,
)

__all__ = [
    "BALANCES",
    "MAX_WORKERS",
    "TRAIN_MODELS",
    "ResumePoint",
    "TrainSpec",
    "finalize_job",
    "init_job",
    "reduce_round",
    "resume_point",
    "schedule_round",
    "train_shard",
]

#: Models of a train job; ``logreg`` and ``linreg`` map to :data:`fanfit.train.linear.LINEAR_MODELS`;
#: ``mlp`` is the ReLU network classifier of :mod:`fanfit.train.mlp`, whose steps run on the GPU
#: worker (AWS Batch) only.
TRAIN_MODELS: tuple[str, ...] = ("kmeans", "logreg", "linreg", "mlp")
#: Models whose target holds class labels (mapped to 0..K-1 by the plan's ``classes``).
CLASSIFIERS: tuple[str, ...] = ("logreg", "mlp")
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
_LINEAR = {"logreg": "logistic", "linreg": "least-squares"}


@dataclass(frozen=True)
class TrainSpec:
    """A train job, as the client writes it (``spec.json``) and Init validates it.

    Attributes
    ----------
    model : {'kmeans', 'logreg', 'linreg', 'mlp'}
        ``mlp``: a ReLU network classifier (:mod:`fanfit.train.mlp`), every worker on the GPU
        worker (``batch_workers == workers``).
    features : tuple of str
        Feature columns, ``d = len(features)``.
    target : str or None
        Target column (class labels for ``logreg`` and ``mlp``, values for ``linreg``); None for
        ``kmeans``.
    workers : int
        ``N``, workers per round (1 to :data:`MAX_WORKERS`).
    worker_memory_mb : tuple of int
        Memory of each Lambda worker's function, MB, length ``N - batch_workers``.
    batch_workers : int
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

    model: str
    features: tuple[str, ...]
    target: str | None = None
    workers: int = 4
    worker_memory_mb: tuple[int, ...] = ()
    batch_workers: int = 0
    rounds: int = 10
    global_batch: int | None = None
    balance: str = "uniform"
    worker_batches: tuple[int, ...] = ()
    sync: str = "bsp"
    group_size: int = 2
    n_clusters: int | None = None
    lr: float = 0.1
    l2: float = 0.0
    tol: float = 0.0
    seed: int = 0
    standardize: bool = False
    hidden: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (lists for tuples)."""
        d = asdict(self)
        d["features"] = list(self.features)
        d["worker_memory_mb"] = list(self.worker_memory_mb)
        d["worker_batches"] = list(self.worker_batches)
        d["hidden"] = list(self.hidden)
        d.pop("extra")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainSpec:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        InvalidJobError
            An unknown or missing field.
        """
        names = set(cls.__dataclass_fields__) - {"extra"}
        unknown = set(d) - names
        if unknown:
            raise InvalidJobError(f"unknown train option(s) {sorted(unknown)}")
        if "model" not in d or "features" not in d:
            raise InvalidJobError("a train job needs 'model' and 'features'")
        values = dict(d)
        values["features"] = tuple(values["features"])
        values["worker_memory_mb"] = tuple(int(m) for m in values.get("worker_memory_mb") or ())
        values["worker_batches"] = tuple(values.get("worker_batches") or ())
        values["hidden"] = tuple(values.get("hidden") or ())
        return cls(**values)

    def validate(self, valid_memory_mb: tuple[int, ...] | None = None) -> TrainSpec:
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
        if self.model not in TRAIN_MODELS:
            raise InvalidJobError(
                f"--model must be one of {', '.join(TRAIN_MODELS)}; got {self.model!r}"
            )
        if not self.features or len(set(self.features)) != len(self.features):
            raise InvalidJobError(
                f"--features must name distinct columns; got {list(self.features)!r}"
            )
        if self.model == "kmeans":
            if self.n_clusters is None or not _is_int(self.n_clusters) or self.n_clusters < 1:
                raise InvalidJobError(
                    f"--n-clusters must be an integer >= 1 for kmeans; got {self.n_clusters!r}"
                )
        elif not self.target:
            raise InvalidJobError(f"--target is required for {self.model}")
        elif self.target in self.features:
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
            if self.model != "kmeans" and sum(batches) != self.global_batch:
                raise InvalidJobError(
                    f"--worker-batches must sum to --global-batch ({self.global_batch}); they sum "
                    f"to {sum(batches)}"
                )
        elif self.worker_batches:
            raise InvalidJobError("--worker-batches applies to --balance static only")
        if self.sync not in SYNCS:
            raise InvalidJobError(f"--sync must be one of {', '.join(SYNCS)}; got {self.sync!r}")
        if self.model == "kmeans" and self.sync != "bsp":
            raise InvalidJobError(
                "--sync ds-sync applies to logreg, linreg and mlp only; kmeans is bsp"
            )
        if not _is_int(self.group_size) or self.group_size < 1:
            raise InvalidJobError(f"--group-size must be an integer >= 1; got {self.group_size!r}")
        if self.model != "kmeans" and (
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
        if not _is_int(self.batch_workers) or not 0 <= self.batch_workers <= self.workers:
            raise InvalidJobError(
                f"--batch-workers must be an integer in 0..--workers ({self.workers}); got "
                f"{self.batch_workers!r}"
            )
        if self.model == "mlp":
            layer_sizes(1, self.hidden, 1)  # InvalidJobError naming --hidden
            if self.batch_workers != self.workers:
                raise InvalidJobError(
                    f"--batch-workers must equal --workers ({self.workers}) for mlp: every mlp "
                    "worker runs on the GPU worker (AWS Batch), since the Lambda layer has no "
                    f"PyTorch; got --batch-workers {self.batch_workers}"
                )
        elif self.hidden:
            raise InvalidJobError(f"--hidden applies to --model mlp only; got {self.model}")
        n_lambda = self.workers - self.batch_workers
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
        return TrainSpec(**{**asdict(self), "worker_memory_mb": memory})

    def check_data(self, columns: list[str], values: np.ndarray) -> None:
        """Check the columns exist, are finite, and fit the model.

        Raises
        ------
        InvalidDataError
            Naming the column.
        InvalidJobError
            ``global_batch`` or ``n_clusters`` larger than the rows, or ``workers`` more than rows.
        """
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
        if self.global_batch is not None and self.model != "kmeans" and self.global_batch > n_obs:
            raise InvalidJobError(
                f"--global-batch ({self.global_batch}) exceeds the rows of the data ({n_obs})"
            )
        if (
            self.model == "kmeans"
            and self.balance == "static"
            and sum(self.worker_batches) != n_obs
        ):
            raise InvalidJobError(
                f"--worker-batches must sum to the rows of the data ({n_obs}) for kmeans; they sum "
                f"to {sum(self.worker_batches)}"
            )
        if self.model == "kmeans" and (self.n_clusters or 0) > n_obs:
            raise InvalidJobError(
                f"--n-clusters ({self.n_clusters}) exceeds the rows of the data ({n_obs})"
            )
        if self.model in CLASSIFIERS:
            y = values[:, columns.index(str(self.target))]
            classes = np.unique(y)
            if classes.size < 2 or classes.size > MAX_CLASSES:
                raise InvalidDataError(
                    f"column {self.target!r} must hold 2..{MAX_CLASSES} classes for "
                    f"{self.model}; it has {classes.size}"
                )


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


# ----------------------------------------------------------------------------------- data & state


@lru_cache(maxsize=4)
def _cached_data(bucket: str, key: str) -> tuple[tuple[str, ...], np.ndarray]:
    # Data objects are content-addressed: a warm environment keeps them between rounds.
    columns, values = storage.JobStore(bucket).get_data(key)
    values.setflags(write=False)
    return tuple(columns), values


@lru_cache(maxsize=4)
def _cached_xy(bucket: str, plan_json: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Features (n_obs, d), standardised if the plan says so, and the target (n_obs,) or None;
    class labels are mapped to 0..K-1 for logreg."""
    plan = json.loads(plan_json)
    columns, values = _cached_data(bucket, plan["data_key"])
    idx = [columns.index(c) for c in plan["spec"]["features"]]
    X = np.ascontiguousarray(values[:, idx])
    if plan.get("mean") is not None:
        X = (X - np.asarray(plan["mean"])) / np.asarray(plan["scale"])
    X.setflags(write=False)
    y = None
    target = plan["spec"]["target"]
    if target:
        y = values[:, columns.index(target)]
        if plan.get("classes") is not None:
            y = np.searchsorted(np.asarray(plan["classes"], dtype=np.float64), y).astype(np.int64)
        y.setflags(write=False)
    return X, y


def _xy(store: storage.JobStore, plan: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    return _cached_xy(store.bucket, json.dumps(plan, sort_keys=True))


def _put_state(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    arrays: dict[str, np.ndarray],
    meta: dict,
) -> str:
    return store.put_arrays(
        storage.train_state_key(job_id, round_index),
        {**arrays, "__meta__": np.array(json.dumps(meta, allow_nan=False))},
    )


def _get_state(
    store: storage.JobStore, job_id: str, round_index: int
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays = store.get_arrays(storage.train_state_key(job_id, round_index))
    meta = json.loads(str(arrays.pop("__meta__")))
    return arrays, meta


def _signature(plan: dict[str, Any]) -> str:
    """The workload signature of one worker step: model, features, outputs (or clusters)."""
    spec = plan["spec"]
    extra = {"hidden": list(spec["hidden"])} if spec.get("hidden") else {}
    return workload_signature(
        "train",
        spec["model"],
        len(spec["features"]),
        n_outputs=plan["n_outputs"],
        sync=spec["sync"],
        **extra,
    )


# ------------------------------------------------------------------------------------------ Init


@dataclass(frozen=True)
class ResumePoint:
    """Where a train job that already ran stands, read from S3 alone (:func:`resume_point`).

    Attributes
    ----------
    round : int
        The first round whose reduced model (``state/<round + 1>.npz``) is not in S3: a resumed
        execution runs rounds ``round, round + 1, ...`` from the model ``state/<round>.npz``;
        rounds ``0 .. round - 1`` are reduced and neither run nor written again. 0 when no round
        was reduced.
    phase : {'train', 'final', 'done'}
        The phase of that model: ``'done'`` when it is the final model (every round ran; only
        TrainFinalize is left).
    has_next_round : bool
        ``phase != 'done'``: another round runs before TrainFinalize.
    """

    round: int
    phase: str
    has_next_round: bool


def resume_point(store: storage.JobStore, job_id: str) -> ResumePoint | None:
    """Where an earlier execution of train job ``job_id`` left it, from what S3 holds.

    A round ``r`` counts as reduced when its next model ``train/state/<r + 1>.npz`` exists:
    TrainReduce writes the round's record (``rounds/<r>/record.json``) before that model, so a
    reduced round always has its record, and a round whose reduce did not finish runs again
    whole (its schedule is kept, :func:`schedule_round`). S3 is the source of truth: the job's
    execution may have failed or been stopped, or the stack restarted with empty tables.

    Parameters
    ----------
    store : JobStore
    job_id : str

    Returns
    -------
    ResumePoint or None
        None when the job has no plan or no round-0 model yet (TrainInit never finished): it
        starts from scratch.

    Raises
    ------
    InvalidJobError
        A reduced round has no record (an object was removed by hand): the job cannot resume.
    """
    if not store.exists(storage.plan_key(job_id)):
        return None
    prefix = f"{storage.job_prefix(job_id)}train/state/"
    indices = set()
    for key in store.list_keys(prefix):
        name = key[len(prefix) :]
        if name.endswith(".npz") and name[:-4].isdigit():
            indices.add(int(name[:-4]))
    if 0 not in indices:
        return None
    r = 0
    while r + 1 in indices:
        r += 1
    if r and not store.exists(storage.train_round_key(job_id, r - 1)):
        raise InvalidJobError(
            f"job {job_id!r}: round {r - 1} is reduced but its record "
            f"{storage.train_round_key(job_id, r - 1)} is missing; the job cannot resume: "
            "start it again as a new job"
        )
    _, meta = _get_state(store, job_id, r)
    phase = str(meta["phase"])
    return ResumePoint(round=r, phase=phase, has_next_round=phase != "done")


def _check_same_job(plan: dict[str, Any], job: dict[str, Any], spec: TrainSpec) -> None:
    """A resumed job's spec must be the one its plan was written from.

    Raises
    ------
    InvalidJobError
        The spec or the data differ from the plan's.
    """
    ours, theirs = spec.to_dict(), dict(plan.get("spec") or {})
    if not job["spec"].get("worker_memory_mb"):
        # sizes left to the stack's default: the plan's workers keep the sizes they ran with
        ours.pop("worker_memory_mb")
        theirs.pop("worker_memory_mb", None)
    changed = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
    if plan.get("data_key") != job["data_key"]:
        changed.append("data_key")
    if changed:
        raise InvalidJobError(
            f"job {plan.get('job_id')!r}: its spec differs from the plan its first execution "
            f"wrote (in {', '.join(changed)}); a train job resumes with the spec it started "
            "with: submit a new job to train with other options"
        )


def _register(partitions: Any, job_id: str, spec: Any, weight: float, execution_arn: str) -> None:
    """Register the train job's partition: its Lambda workers and its Batch GPU workers
    (:func:`fanfit.jobs.sharing.register_job`)."""
    sharing.register_job(
        partitions,
        job_id,
        "train",
        demand=spec.workers - spec.batch_workers,
        gpu_demand=spec.batch_workers,
        weight=weight,
        execution_arn=execution_arn,
    )


def _resume_job(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    job: dict[str, Any],
    spec: TrainSpec,
    point: ResumePoint,
    worker_functions: dict[int, str],
    execution_arn: str,
    batch_memory_mb: int | None,
    partitions: storage.Partitions | None,
    weight: float,
) -> dict[str, Any]:
    """:func:`init_job` of a job that already ran: keep its plan and models, start at ``point``."""
    plan = store.get_json(storage.plan_key(job_id))
    _check_same_job(plan, job, spec)
    if not store.exists(job["data_key"]):
        raise InvalidDataError(
            f"data object {job['data_key']} of job {job_id!r} does not exist in bucket "
            f"{store.bucket}; the job cannot resume without it"
        )
    if spec.batch_workers and not batch_memory_mb:
        raise InvalidJobError(
            "--batch-workers needs the stack's GPU worker (AWS Batch); this stack has none"
        )
    # The workers keep their memory sizes; their functions are this stack's (a redeployed stack
    # may name them differently).
    workers = []
    for w in plan["workers"]:
        if w.get("placement") == "batch":
            workers.append(w)
            continue
        arn = worker_functions.get(int(w["memory_mb"]))
        if arn is None:
            raise InvalidJobError(
                f"--worker-memory {w['memory_mb']} (worker {w['worker']}) has no TrainShard "
                f"function on this stack any more; valid sizes (MB): "
                f"{', '.join(str(m) for m in sorted(worker_functions))}; the job cannot resume here"
            )
        workers.append({**w, "function_arn": arn})
    if workers != plan["workers"]:
        plan = {**plan, "workers": workers}
        store.put_json(storage.plan_key(job_id), plan)
    # A resumed job runs again without the error of its failed execution.
    records.mark_running(
        job_id,
        execution_arn=execution_arn,
        kind="train",
        model=spec.model,
        error=None,
        cause=None,
        resumed_at_round=point.round,
    )
    _register(partitions, job_id, spec, weight, execution_arn)
    return {
        "job_id": job_id,
        "plan_key": storage.plan_key(job_id),
        "round": point.round,
        "n_workers": len(workers),
        "has_next_round": point.has_next_round,
        "resumed": True,
    }


def init_job(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    spec_key: str,
    worker_functions: dict[int, str],
    execution_arn: str = "",
    batch_memory_mb: int | None = None,
    partitions: storage.Partitions | None = None,
) -> dict[str, Any]:
    """Validate a train job, write its plan and the round-0 model.

    Parameters
    ----------
    store, records : JobStore, JobRecords
    job_id, spec_key : str
        ``spec_key`` holds ``{"kind": "train", "spec": TrainSpec dict, "data_key": str,
        "init_key": str | None, "weight": float | None}`` (``init_key``: K-Means initial
        centroids, (k, d) ``.npy``; ``weight``: the job's weight in the fair shares, in (0, 100],
        default 1).
    worker_functions : dict of int to str
        Memory size (MB) -> ARN of the TrainShard function with that memory; the first is the
        default size.
    execution_arn : str
        The Step Functions execution, recorded in the job record and with the job's partition
        (so that other jobs drop the partition once this execution no longer runs).
    batch_memory_mb : int, optional
        Memory (MB) of the stack's GPU worker job definition; None: the stack has no Batch path
        and a job asking for ``batch_workers`` is rejected.
    partitions : Partitions, optional
        The stack's partition table: the job arrives with demand its Lambda worker count (and
        GPU demand its GPU workers) and its ``weight``, and every running job's partition is
        recomputed (:func:`fanfit.jobs.sharing.register_job`).

    Returns
    -------
    dict
        ``job_id, plan_key, round, n_workers, has_next_round, resumed``: ``round`` 0,
        ``has_next_round`` True and ``resumed`` False for a new job. A job whose plan and round-0
        model are already in S3 (a resumed execution, ``fanfit resume``) keeps them, its
        reduced rounds and their models: ``round`` is the first round whose reduced model is not
        in S3 and ``has_next_round`` False when its model is already final
        (:func:`resume_point`); the workers' functions are this stack's, and the job record is
        RUNNING again with ``resumed_at_round``.

    Raises
    ------
    InvalidJobError, InvalidDataError
        Naming the option or column; for a resumed job also a spec that differs from its
        plan's, or a worker memory size the stack no longer has.
    """
    job = store.get_json(spec_key)
    if not isinstance(job, dict) or "spec" not in job or "data_key" not in job:
        raise InvalidJobError(f"{spec_key} must hold an object with 'spec' and 'data_key'")
    # The job file's keys are checked before anything is read or written through them.
    storage.check_data_key(job["data_key"])
    if job.get("init_key") is not None:
        storage.check_job_key(job["init_key"], job_id, field="init_key")
    weight = sharing.check_weight(job.get("weight"))
    spec = TrainSpec.from_dict(job["spec"]).validate(tuple(worker_functions))
    point = resume_point(store, job_id)
    if point is not None:
        return _resume_job(store, records, job_id, job, spec, point, worker_functions,
                           execution_arn, batch_memory_mb, partitions, weight)  # fmt: skip
    columns, values = _cached_data(store.bucket, job["data_key"])
    spec.check_data(list(columns), values)
    n_obs = int(values.shape[0])
    d = len(spec.features)
    X = values[:, [columns.index(c) for c in spec.features]]
    mean = scale = None
    if spec.standardize:
        mean = X.mean(axis=0)
        sd = X.std(axis=0)
        scale = np.where(sd > 0, sd, 1.0)
        X = (X - mean) / scale
    classes = None
    if spec.model in CLASSIFIERS:
        classes = np.unique(values[:, columns.index(str(spec.target))])
    n_outputs = (
        int(spec.n_clusters or 0)
        if spec.model == "kmeans"
        else (int(classes.size) if classes is not None else 1)
    )
    plan = {
        "job_id": job_id,
        "spec": spec.to_dict(),
        "data_key": job["data_key"],
        "n_obs": n_obs,
        "n_outputs": n_outputs,
        "mean": None if mean is None else mean.tolist(),
        "scale": None if scale is None else scale.tolist(),
        "classes": None if classes is None else classes.tolist(),
        "weight": weight,
        "workers": [
            {
                "worker": i,
                "memory_mb": m,
                "function_arn": worker_functions[m],
                "placement": "lambda",
            }
            for i, m in enumerate(spec.worker_memory_mb)
        ]
        + [
            {"worker": i, "memory_mb": batch_memory_mb, "function_arn": "", "placement": "batch"}
            for i in range(len(spec.worker_memory_mb), spec.workers)
        ],
    }
    if spec.batch_workers and not batch_memory_mb:
        raise InvalidJobError(
            "--batch-workers needs the stack's GPU worker (AWS Batch); this stack has none"
        )
    total = n_obs if spec.model == "kmeans" else int(spec.global_batch or 0)
    bounds = max_batches(plan)
    if spec.balance == "lb-bsp" and sum(bounds) < total:
        raise InvalidJobError(
            f"the workers' memory holds at most {sum(bounds)} samples per round (per worker: "
            f"{bounds}); a round needs {total}: give larger --worker-memory or a smaller "
            "--global-batch"
        )
    if spec.model == "kmeans":
        if job.get("init_key"):
            centroids = np.asarray(store.get_array(job["init_key"]), dtype=np.float64)
            if centroids.shape != (n_outputs, d) or not np.all(np.isfinite(centroids)):
                raise InvalidJobError(
                    f"init must be finite centroids of shape ({n_outputs}, {d}); got {centroids.shape}"
                )
        else:
            rng = np.random.default_rng(spec.seed)
            centroids = X[np.sort(rng.choice(n_obs, size=n_outputs, replace=False))]
        arrays = {"centroids": centroids}
        meta = {"phase": "train", "n_iter": 0}
    else:
        params = (
            init_mlp_params(d, spec.hidden, n_outputs, spec.seed)
            if spec.model == "mlp"
            else init_params(d, n_outputs)
        )
        if spec.sync == "ds-sync":
            arrays = {k: np.stack([v] * spec.workers) for k, v in params.items()}
        else:
            arrays = dict(params)
        meta = {"phase": "train", "n_iter": 0}
    store.put_json(storage.plan_key(job_id), plan)
    _put_state(store, job_id, 0, arrays, meta)
    records.mark_running(job_id, execution_arn=execution_arn, kind="train", model=spec.model)
    _register(partitions, job_id, spec, weight, execution_arn)
    return {
        "job_id": job_id,
        "plan_key": storage.plan_key(job_id),
        "round": 0,
        "n_workers": spec.workers,
        "has_next_round": True,
        "resumed": False,
    }


# -------------------------------------------------------------------------------------- Schedule


def _observations(
    plan: dict[str, Any], record: dict[str, Any]
) -> list[tuple[int, ShardObservation]]:
    signature = _signature(plan)
    out = []
    for w in record["workers"]:
        if w["batch"] <= 0:
            continue
        out.append(
            (
                int(w["worker"]),
                ShardObservation(
                    samples=int(w["batch"]),
                    compute_s=max(float(w["compute_s"]), 1e-6),
                    io_s=float(w["io_s"]),
                    memory_mb=int(w["memory_mb"]),
                    resource=w.get("resource") or lambda_resource(int(w["memory_mb"])),
                    cold_start=bool(w["cold_start"]),
                    signature=signature,
                ),
            )
        )
    return out


#: Resident memory of a worker before it holds any data: the Python runtime with numpy, boto3 and
#: the fanfit layer (measured peak RSS of a warm TrainShard on the local stack: about 110 MB), with
#: headroom, MB.
RUNTIME_BASE_MB = 160


def max_batches(plan: dict[str, Any]) -> list[int]:
    """Largest batch each worker's memory holds: LB-BSP's per-worker memory bound.

    A worker keeps the job's data in memory (``n_obs x (d + 1)`` float64, read once per warm
    environment) besides the runtime (:data:`RUNTIME_BASE_MB`); a batch of ``b`` rows then needs
    ``8 b (d + 3 K)`` bytes more for SGD (the rows' copy, logits, probabilities and residuals for
    ``K`` outputs), ``8 b (d + 4 sum(hidden) + 3 K)`` for an MLP step (autograd keeps each hidden
    layer's pre- and post-activation and their gradients), or ``8 b (k + 2)`` for a K-Means step
    (distances to ``k`` centres, labels).

    Parameters
    ----------
    plan : dict
        The job's plan (``n_obs``, ``n_features``, ``n_outputs`` or ``spec.n_clusters``, ``workers``
        with ``memory_mb``).

    Returns
    -------
    list of int, length ``N``
        Samples, at least 1 (a worker whose memory does not even hold the data still gets a row;
        it then fails with Lambda's out-of-memory error, which names the function).
    """
    spec = plan["spec"]
    n_obs, d = int(plan["n_obs"]), len(spec["features"])
    data_bytes = 8 * n_obs * (d + 1)
    if spec["model"] == "kmeans":
        per_row = 8 * (int(spec["n_clusters"]) + 2)
    elif spec["model"] == "mlp":
        per_row = 8 * (d + 4 * sum(spec["hidden"]) + 3 * int(plan.get("n_outputs", 1)))
    else:
        per_row = 8 * (d + 3 * int(plan.get("n_outputs", 1)))
    out = []
    for w in plan["workers"]:
        free = int(w["memory_mb"]) * 2**20 - RUNTIME_BASE_MB * 2**20 - data_bytes
        out.append(max(1, free // per_row))
    return out


#: Prior speed of a GPU worker before it has been measured, in Lambda vCPU equivalents: the vCPUs of
#: the job definition's g4dn.xlarge (4). Only the first round uses it; LB-BSP then sizes the GPU
#: worker's batch from what it measured.
BATCH_PRIOR_VCPUS = 4.0


def _resource(worker: dict[str, Any]) -> str:
    """The throughput-table resource of a plan's worker: ``lambda-<MB>`` or ``batch-gpu``."""
    if worker.get("placement") == "batch":
        return "batch-gpu"
    return lambda_resource(int(worker["memory_mb"]))


def _worker_resource(worker: int) -> str:
    """The per-job key of one worker: two workers of one memory size may still differ in speed."""
    return f"worker-{worker}"


def schedule_round(
    store: storage.JobStore,
    throughput: storage.ThroughputRecords,
    job_id: str,
    round_index: int,
    partitions: storage.Partitions | None = None,
) -> dict[str, Any]:
    """Record the last round's throughput and set each worker's batch for round ``round_index``.

    Throughput (samples/s) is predicted per worker by :class:`fanfit.sched.throughput.
    EwmaThroughput`: first from this job's own average for that worker (kept in S3 under
    ``train/throughput.json``, keyed ``worker-<i>``, so two workers of one memory size that run at
    different speeds are told apart); without one, from the stack's throughput table for the
    workload signature on ``lambda-<MB>`` (scaled from the nearest memory size, cross-job history);
    without any, every worker's Lambda CPU share :func:`fanfit.sched.throughput.lambda_vcpus`
    (only the ratios matter to LB-BSP). Batches are

    - ``'uniform'``: :func:`fanfit.sched.lbbsp.uniform_batches`;
    - ``'lb-bsp'``: :func:`fanfit.sched.lbbsp.lbbsp_batches`, ``b_i ~ B v_i / sum_j v_j`` (Chen et
      al., "Accelerating Distributed Learning in Non-Dedicated Environments", IEEE TCC 2021),

    with ``B`` the global batch (SGD) or every row (K-Means, so each round covers the data set).
    For DS-Sync the round's groups come from :func:`fanfit.sched.dssync.dssync_groups` (Wang et al.,
    arXiv:2007.03298, 2020).

    Parameters
    ----------
    store, throughput : JobStore, ThroughputRecords
    job_id : str
    round_index : int
        The round to plan (>= 0); for ``r > 0`` round ``r - 1``'s record must exist.
    partitions : Partitions, optional
        The stack's partition table. The job's partition (Dorm, :func:`fanfit.jobs.sharing.
        partition_at_barrier`: below its demand, stale jobs' shares are reclaimed first), read
        at this barrier, bounds how many workers run at once: the round's ``max_concurrency`` is
        ``min(Lambda workers, partition)`` plus ``min(GPU workers, GPU share)`` (at least 1
        each); the workers' batches and so the result do not change.

    Returns
    -------
    dict
        ``job_id, round, max_concurrency, workers``: the Map's ``MaxConcurrencyPath`` and one Map
        item per worker, ``{"job_id", "round", "worker", "function_arn"}``. The batches, groups,
        predictions, partition and ``max_concurrency`` go to ``rounds/<r>/plan.json``.

    A round whose plan is already in S3 keeps it (a resumed execution re-entering a round its
    first execution scheduled, or a retry): some workers may already have written their partials
    with its batches, so the batches and groups stay, the throughput is not folded in twice, and
    only ``max_concurrency`` is read again from the partition.

    Raises
    ------
    InvalidJobError
        A round out of order.
    """
    started = time.time()
    plan = store.get_json(storage.plan_key(job_id))
    spec = plan["spec"]
    workers = plan["workers"]
    try:
        kept = store.get_json(storage.train_round_plan_key(job_id, round_index))
    except JobNotFoundError:
        kept = None
    if kept is not None:
        partition = sharing.partition_at_barrier(partitions, job_id)
        return _round_items(job_id, round_index, workers, _max_concurrency(workers, partition))
    _, meta = _get_state(store, job_id, round_index)
    n = len(workers)
    signature = _signature(plan)
    tkey = storage.train_throughput_key(job_id)
    own = EwmaThroughput.from_dict(store.get_json(tkey)) if round_index else EwmaThroughput()
    history = EwmaThroughput(
        entries=[ThroughputEntry.from_dict(e) for e in throughput.load([signature])]
    )
    if round_index:
        record = store.get_json(storage.train_round_key(job_id, round_index - 1))
        observed = _observations(plan, record)
        for worker, obs in observed:
            history.update(obs)
            own.update(ShardObservation(**{**obs.to_dict(), "resource": _worker_resource(worker)}))
        keys = {(o.signature, o.resource) for _, o in observed}
        throughput.save(e.to_dict() for e in history.entries if (e.signature, e.resource) in keys)
    store.put_json(tkey, own.to_dict())

    source = "job"
    predicted = [own.predict(signature, _worker_resource(w["worker"])) for w in workers]
    if any(p is None for p in predicted):
        source = "table"
        predicted = [history.predict(signature, _resource(w)) for w in workers]
    if any(p is None for p in predicted):
        source = "cpu-share"
        predicted = [
            BATCH_PRIOR_VCPUS if w.get("placement") == "batch" else lambda_vcpus(w["memory_mb"])
            for w in workers
        ]
    speeds = np.asarray(predicted, dtype=np.float64)

    total = plan["n_obs"] if spec["model"] == "kmeans" else int(spec["global_batch"])
    if spec["balance"] == "lb-bsp":
        batches = lbbsp_batches(total, speeds, max_batch=max_batches(plan))
    elif spec["balance"] == "static":
        batches = np.asarray(spec["worker_batches"], dtype=np.int64)
    else:
        batches = uniform_batches(total, n)
    groups = (
        dssync_groups(n, int(spec["group_size"]), int(spec["seed"]), round_index)
        if spec["sync"] == "ds-sync"
        else [list(range(n))]
    )
    # The job's partition of the shared capacity, read at this barrier (Dorm): at most that many
    # workers run at once (the Map's MaxConcurrencyPath); the rest wait for a free slot.
    partition = sharing.partition_at_barrier(partitions, job_id)
    max_concurrency = _max_concurrency(workers, partition)
    round_plan = {
        "round": round_index,
        "phase": meta["phase"],
        "max_concurrency": max_concurrency,
        "partition": None if partition is None else partition.to_dict(),
        "batches": [int(b) for b in batches],
        "groups": groups,
        "predicted_samples_per_s": [float(x) for x in speeds],
        "prediction_source": source,
        "started_at": started,
        "ended_at": time.time(),
    }
    store.put_json(storage.train_round_plan_key(job_id, round_index), round_plan)
    return _round_items(job_id, round_index, workers, max_concurrency)


def _max_concurrency(workers: list[dict[str, Any]], partition: Any) -> int:
    """Workers of a round that run at once: ``min(Lambda workers, partition)`` plus ``min(GPU
    workers, GPU share)`` (at least 1 each); every worker without a partition."""
    n = len(workers)
    n_batch = sum(1 for w in workers if w.get("placement") == "batch")
    if partition is None:
        return n
    return (min(n - n_batch, partition.concurrency) if n > n_batch else 0) + (
        min(n_batch, max(1, partition.gpus)) if n_batch else 0
    )


def _round_items(
    job_id: str, round_index: int, workers: list[dict[str, Any]], max_concurrency: int
) -> dict[str, Any]:
    """:func:`schedule_round`'s output: the Map's concurrency and one item per worker."""
    return {
        "job_id": job_id,
        "round": round_index,
        "max_concurrency": max_concurrency,
        "workers": [
            {
                "job_id": job_id,
                "round": round_index,
                "worker": w["worker"],
                "function_arn": w["function_arn"],
                "placement": w.get("placement", "lambda"),
            }
            for w in workers
        ],
    }


# ------------------------------------------------------------------------------------ TrainShard

_COLD = True


def train_shard(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    worker: int,
    memory_mb: int = 0,
    resource_name: str | None = None,
) -> dict[str, Any]:
    """One worker's step of one round; writes its partial to ``rounds/<r>/workers/<i>.npz``.

    - K-Means: :func:`fanfit.train.kmeans.kmeans_step` on the worker's consecutive rows
      (:func:`fanfit.train.batches.row_range`; the round's batches cover every row).
    - logreg / linreg: :func:`fanfit.train.sgd.worker_gradient` on its rows of the round's global
      batch (:func:`fanfit.train.batches.batch_rows`), with its own model under DS-Sync.
    - mlp (on the GPU worker): :func:`fanfit.train.mlp.mlp_loss_gradient` on those rows (PyTorch,
      imported here only: float64 on the CPU, float32 on CUDA; ``$FANFIT_MLP_DEVICE``).

    Parameters
    ----------
    store : JobStore
    job_id : str
    round_index, worker : int
    memory_mb : int
        The function's configured memory, MB.
    resource_name : str, optional
        Where the step ran: ``lambda-<MB>`` (the default) or the Batch worker's
        ``batch-<instance type>``.

    Returns
    -------
    dict
        ``partial_key``, ``worker``, ``round``, ``batch`` (samples), ``compute_s`` (seconds of
        computation, no I/O), ``io_s`` (seconds reading the plan, data and model and writing the
        partial), ``memory_mb``, ``resource``, ``cold_start``, ``signature``,
        ``started_at``, ``ended_at`` (epoch s), ``peak_rss_mb``.

    Raises
    ------
    InvalidJobError
        A worker index outside the job.
    """
    global _COLD
    cold, _COLD = _COLD, False
    started = time.time()
    t_io = time.perf_counter()
    plan = store.get_json(storage.plan_key(job_id))
    spec = plan["spec"]
    if not 0 <= worker < len(plan["workers"]):
        raise InvalidJobError(f"worker must be in 0..{len(plan['workers']) - 1}, got {worker}")
    round_plan = store.get_json(storage.train_round_plan_key(job_id, round_index))
    arrays, meta = _get_state(store, job_id, round_index)
    X, y = _xy(store, plan)
    io_s = time.perf_counter() - t_io
    batches = np.asarray(round_plan["batches"], dtype=np.int64)

    # The MLP step imports torch here, before the timing: compute_s counts computation only.
    device = mlp_device() if spec["model"] == "mlp" else None
    t0 = time.perf_counter()
    if spec["model"] == "kmeans":
        rows = row_range(batches, worker)
        prev = arrays.get("prev_centroids") if round_plan["phase"] == "train" else None
        out: dict[str, np.ndarray] = kmeans_step(
            X[rows], arrays["centroids"], prev, rows.start
        ).to_arrays()
    else:
        idx = batch_rows(plan["n_obs"], batches, int(spec["seed"]), round_index, worker)
        if spec["sync"] == "ds-sync":
            params = {k: v[worker] for k, v in arrays.items()}
        else:
            params = dict(arrays)
        assert y is not None  # a target is required for the SGD models (TrainSpec.validate)
        if spec["model"] == "mlp":
            loss, grads = mlp_loss_gradient(params, X[idx], y[idx], device=device)
            out = WorkerGradient(grads, loss, int(idx.size)).to_arrays()
        else:
            out = worker_gradient(_LINEAR[spec["model"]], params, X[idx], y[idx]).to_arrays()
    compute_s = time.perf_counter() - t0

    stats = {
        "worker": worker,
        "round": round_index,
        "batch": int(batches[worker]),
        "compute_s": compute_s,
        "io_s": io_s,
        "memory_mb": memory_mb,
        "resource": resource_name or lambda_resource(memory_mb or 1),
        "placement": "batch" if (resource_name or "").startswith("batch") else "lambda",
        "cold_start": cold,
        "signature": _signature(plan),
        "started_at": started,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "pid": os.getpid(),
    }
    if spec["model"] == "mlp":
        stats["device"] = device  # where the MLP step ran: cpu (float64) or cuda (float32)
    t1 = time.perf_counter()
    key = storage.train_partial_key(job_id, round_index, worker)
    stats["ended_at"] = time.time()
    store.put_arrays(key, {**out, "__stats__": np.array(json.dumps(stats, allow_nan=False))})
    stats["io_s"] = io_s + time.perf_counter() - t1
    stats["ended_at"] = time.time()
    return {"partial_key": key, **stats}


# ---------------------------------------------------------------------------------------- Reduce


def reduce_round(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    round_index: int,
) -> dict[str, Any]:
    """Merge the workers' partials of round ``round_index`` into the model of the next round.

    K-Means: :func:`fanfit.train.kmeans.kmeans_reduce` (exact Lloyd M-step). When it converges
    strictly (no label changed) the run ends; when it converges by ``tol`` or reaches ``rounds``,
    one more round runs the final E-step (inertia of the final centroids, as scikit-learn does).
    SGD: BSP :func:`fanfit.train.sgd.reduce_gradients` then :func:`~fanfit.train.sgd.sgd_step`
    (one step on the ``B`` rows, however LB-BSP split them); DS-Sync
    :func:`~fanfit.train.sgd.dssync_step` in the round's groups. The run ends after ``rounds``.

    The round record (``rounds/<r>/record.json``) holds per worker its batch, compute and I/O
    seconds, throughput (samples/s), memory and cold start; and the round's time ``round_s`` (the
    barrier's compute time, ``max_i t_i``), its ``idle_fraction`` (``1 - mean(t)/max(t)``,
    :func:`fanfit.sched.lbbsp.idle_fraction`), ``span_s`` (first worker start to last worker end,
    with I/O), and the loss (SGD) or inertia (K-Means) under the round's model.

    Returns
    -------
    dict
        ``job_id, round`` (the next round) and ``has_next_round``.

    Raises
    ------
    InvalidJobError
        A worker's partial is missing.
    """
    plan = store.get_json(storage.plan_key(job_id))
    spec = plan["spec"]
    round_plan = store.get_json(storage.train_round_plan_key(job_id, round_index))
    arrays, meta = _get_state(store, job_id, round_index)
    n = len(plan["workers"])
    parts: list[dict[str, np.ndarray]] = []
    stats: list[dict[str, Any]] = []
    for i in range(n):
        key = storage.train_partial_key(job_id, round_index, i)
        if not store.exists(key):
            raise InvalidJobError(f"round {round_index}: worker {i} wrote no partial ({key})")
        obj = store.get_arrays(key)
        stats.append(json.loads(str(obj.pop("__stats__"))))
        parts.append(obj)

    times = [max(float(s["compute_s"]), 0.0) for s in stats]
    record: dict[str, Any] = {
        "round": round_index,
        "phase": meta["phase"],
        "workers": [
            {
                "worker": i,
                "memory_mb": s["memory_mb"],
                "resource": s["resource"],
                "batch": s["batch"],
                "compute_s": s["compute_s"],
                "io_s": s["io_s"],
                "samples_per_s": s["batch"] / s["compute_s"] if s["compute_s"] > 0 else None,
                "predicted_samples_per_s": round_plan["predicted_samples_per_s"][i],
                "cold_start": s["cold_start"],
                "started_at": s["started_at"],
                "ended_at": s["ended_at"],
                "peak_rss_mb": s["peak_rss_mb"],
                **({"device": s["device"]} if "device" in s else {}),
            }
            for i, s in enumerate(stats)
        ],
        "round_s": max(times),
        "idle_fraction": idle_fraction(times) if max(times) > 0 else 0.0,
        "span_s": max(s["ended_at"] for s in stats) - min(s["started_at"] for s in stats),
        "groups": round_plan["groups"],
        "prediction_source": round_plan["prediction_source"],
    }

    next_round = round_index + 1
    if spec["model"] == "kmeans":
        kparts = [KMeansPartial.from_arrays(p) for p in parts]
        if meta["phase"] == "final":
            inertia = float(sum(p.inertia for p in kparts))
            record["inertia"] = inertia
            new_arrays = {"centroids": arrays["centroids"]}
            new_meta = {**meta, "phase": "done", "inertia": inertia}
        else:
            C = arrays["centroids"]
            out = kmeans_reduce(kparts, C, float(spec["tol"]))
            n_iter = int(meta["n_iter"]) + 1
            record.update(
                inertia=out.inertia,
                n_changed=out.n_changed,
                center_shift=out.center_shift,
                n_relocated=out.n_relocated,
            )
            new_arrays = {"centroids": out.centroids, "prev_centroids": C}
            if out.strict:
                new_meta = {"phase": "done", "n_iter": n_iter, "converged": True,
                            "inertia": out.inertia}  # fmt: skip
            elif out.converged or n_iter >= int(spec["rounds"]):
                new_meta = {"phase": "final", "n_iter": n_iter, "converged": out.converged}
            else:
                new_meta = {"phase": "train", "n_iter": n_iter}
    else:
        grads = [WorkerGradient.from_arrays(p) for p in parts]
        lr, l2 = float(spec["lr"]), float(spec["l2"])
        if spec["sync"] == "ds-sync":
            worker_params = [{k: v[i] for k, v in arrays.items()} for i in range(n)]
            stepped = dssync_step(worker_params, grads, round_plan["groups"], lr, l2)
            new_arrays = {k: np.stack([p[k] for p in stepped]) for k in stepped[0]}
        else:
            g = reduce_gradients(grads)
            new_arrays = dict(sgd_step(dict(arrays), g.grads, lr, l2))
        record["loss"] = float(reduce_gradients(grads).loss)
        n_iter = int(meta["n_iter"]) + 1
        done = n_iter >= int(spec["rounds"])
        new_meta = {"phase": "done" if done else "train", "n_iter": n_iter}

    store.put_json(storage.train_round_key(job_id, round_index), record)
    _put_state(store, job_id, next_round, new_arrays, new_meta)
    summary = {k: record[k] for k in ("round", "phase", "round_s", "idle_fraction")}
    summary["batches"] = round_plan["batches"]
    records.update(job_id, last_round=summary)
    return {"job_id": job_id, "round": next_round, "has_next_round": new_meta["phase"] != "done"}


# -------------------------------------------------------------------------------------- Finalize


def finalize_job(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    round_index: int,
    execution_arn: str = "",
    memory_mb: int = 0,
    partitions: storage.Partitions | None = None,
) -> dict[str, Any]:
    """Write ``result.json`` from the last model and the round records; mark the job SUCCEEDED and,
    given the stack's ``partitions``, release its partition (:func:`fanfit.jobs.sharing.release_job`).

    Parameters
    ----------
    store, records : JobStore, JobRecords
    job_id : str
    round_index : int
        The round whose model is final (the ``round`` Reduce last returned).
    execution_arn : str
    memory_mb : int
        This function's memory, MB (for the cost).

    Returns
    -------
    dict
        ``{"job_id": str, "result_key": str}``. The result holds ``model``, ``features``,
        ``target``, ``n_obs``, ``n_workers``, ``worker_memory_mb``, ``balance``, ``sync``;
        ``centroids`` (k, d), ``inertia``, ``n_iter``, ``converged`` (K-Means) or ``coef``
        (d, n_outputs), ``intercept`` (n_outputs,), ``classes`` (logreg) (SGD) or ``params``
        (``{"W0": (d, h_1) nested lists, "b0": (h_1,), ...}``), ``hidden``, ``classes`` (mlp);
        ``loss`` (per round, the mean loss of the round's batch, SGD and mlp); ``mean`` and
        ``scale`` when standardised; ``rounds`` (the round records); ``timings`` (seconds, billed
        GB-seconds and the estimated Lambda cost in USD).

    Raises
    ------
    InvalidJobError
        The round's model is not final.
    """
    started = time.time()
    plan = store.get_json(storage.plan_key(job_id))
    spec = plan["spec"]
    arrays, meta = _get_state(store, job_id, round_index)
    if meta["phase"] != "done":
        raise InvalidJobError(f"round {round_index}'s model is not final (phase {meta['phase']})")
    rounds = [store.get_json(storage.train_round_key(job_id, r)) for r in range(round_index)]
    result: dict[str, Any] = {
        "job_id": job_id,
        "execution_arn": execution_arn,
        "model": spec["model"],
        "features": spec["features"],
        "target": spec["target"],
        "n_obs": plan["n_obs"],
        "n_workers": len(plan["workers"]),
        "worker_memory_mb": spec["worker_memory_mb"],
        "balance": spec["balance"],
        "sync": spec["sync"],
        "mean": plan["mean"],
        "scale": plan["scale"],
    }
    if spec["model"] == "kmeans":
        result.update(
            centroids=arrays["centroids"].tolist(),
            inertia=float(meta["inertia"]),
            n_iter=int(meta["n_iter"]),
            converged=bool(meta.get("converged", False)),
        )
    else:
        if spec["sync"] == "ds-sync":
            n = len(plan["workers"])
            params = average_params([{k: v[i] for k, v in arrays.items()} for i in range(n)])
        else:
            params = dict(arrays)
        if spec["model"] == "mlp":
            result.update(
                params={k: v.tolist() for k, v in params.items()}, hidden=list(spec["hidden"])
            )
        else:
            result.update(coef=params["W"].tolist(), intercept=params["b"].tolist())
        result.update(
            classes=plan["classes"],
            n_iter=int(meta["n_iter"]),
            loss=[r.get("loss") for r in rounds],
        )
    gb_s = usd = 0.0
    for r in rounds:
        for w in r["workers"]:
            g, u = lambda_cost_usd(w["ended_at"] - w["started_at"], int(w["memory_mb"]) or 1)
            gb_s, usd = gb_s + g, usd + u
    g, u = lambda_cost_usd(time.time() - started, memory_mb or 1)
    result["rounds"] = rounds
    result["timings"] = {
        "round_s": [r["round_s"] for r in rounds],
        "idle_fraction": [r["idle_fraction"] for r in rounds],
        "billed_gb_s": gb_s + g,
        "lambda_cost_usd": usd + u,
        "price_usd_per_gb_s": LAMBDA_USD_PER_GB_SECOND,
    }
    key = store.put_json(storage.result_key(job_id), result)
    records.mark_succeeded(job_id, key)
    sharing.release_job(partitions, job_id)
    return {"job_id": job_id, "result_key": key}
