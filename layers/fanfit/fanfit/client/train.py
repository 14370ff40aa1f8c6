"""The user side of train jobs: build and check the spec, start the state machine, read the result.

>>> client = fanfit.Client.local_stack()
>>> res = client.train("digits.csv", model="kmeans", features=[...], n_clusters=10, workers=4,
...                    rounds=20, balance="lb-bsp")
>>> res.centroids, res.inertia, res.rounds[0]["idle_fraction"]

The job runs on orchestrator/train.asl.json (see :mod:`fanfit.jobs.train`): the data is uploaded
once (keyed by its content hash), the model lives in S3 between rounds, and the result holds the
final model and one record per round (each worker's batch, compute seconds and throughput; the
round's time and idle fraction).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fanfit import errors, storage
from fanfit.client.check import check_gpu_worker, data_source
from fanfit.client.data import check_header_columns, read_table, to_matrix
from fanfit.client.jobs import JobHandle, StackClient, cost_or_none, record_submission
from fanfit.client.options import (
    TrainOptions,
    check_columns,
    check_int,
    check_number,
    check_str,
    check_weight,
)
from fanfit.jobs.documents import DataSource
from fanfit.jobs.documents.train import TrainJobFile, TrainSpec
from fanfit.jobs.documents.train import TrainResult as TrainResultDoc
from fanfit.jobs.states import TrainState

__all__ = ["TrainJob", "TrainResult", "build_train_spec", "submit_train"]

_ERRORS: dict[str, type[errors.FanfitError]] = {
    "InvalidJobError": errors.InvalidJobError,
    "InvalidDataError": errors.InvalidDataError,
}
#: The Map state of orchestrator/train.asl.json: one entry and exit per round.
_ROUND_STATE = TrainState.RUN_ROUND


def _as_list(value: str | Sequence[Any] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [c.strip() for c in value.split(",") if c.strip()]
    return [str(c) for c in value]


def _int_list(value: int | str | Sequence[int] | None, option: str) -> tuple[int, ...]:
    """Integers from ``"1,2,3"``, one int, or a sequence; ``()`` for None.

    Raises
    ------
    InvalidJobError
        Naming ``option`` when an item is not an integer.
    """
    if value is None:
        return ()
    items = (
        value.split(",") if isinstance(value, str) else [value] if isinstance(value, int) else value
    )
    try:
        return tuple(int(str(m).strip()) for m in items)
    except (TypeError, ValueError) as exc:
        raise errors.InvalidJobError(
            f"{option} must be integers, comma-separated; got {value!r}"
        ) from exc


def _memory_list(value: int | str | Sequence[int] | None) -> tuple[int, ...]:
    return _int_list(value, "--worker-memory (MB)")


def build_train_spec(
    *,
    model: str,
    features: str | Sequence[str],
    target: str | None = None,
    workers: int = 4,
    worker_memory: int | str | Sequence[int] | None = None,
    gpu_workers: int = 0,
    global_batch: int | None = None,
    rounds: int = 10,
    balance: str = "uniform",
    worker_batches: str | Sequence[int] | None = None,
    sync: str = "bsp",
    group_size: int = 2,
    n_clusters: int | None = None,
    lr: float = 0.1,
    l2: float = 0.0,
    tol: float = 0.0,
    seed: int = 0,
    standardize: bool = False,
    hidden: str | Sequence[int] | None = None,
    valid_memory_mb: tuple[int, ...] | None = None,
) -> TrainSpec:
    """Build and check a :class:`fanfit.jobs.train.TrainSpec` from user options.

    Parameters
    ----------
    model : {'kmeans', 'logreg', 'linreg', 'mlp'}
        ``mlp``: a ReLU network classifier trained on the GPU worker (AWS Batch) only, so
        ``gpu_workers`` must equal ``workers`` (:mod:`fanfit.train.mlp`).
    features : str or sequence of str
        Feature columns (comma-separated in a str).
    target : str, optional
        Target column (logreg, mlp: class labels; linreg: values).
    workers : int
        Workers per round (1..40).
    worker_memory : int, str or sequence of int, optional
        Memory (MB) of every Lambda worker, or one per Lambda worker (``"1769,1769,885,885"``).
    gpu_workers : int
        How many workers (the last ones) run on the stack's GPU worker (AWS Batch) instead of
        Lambda, in the same rounds (a CPU-GPU hybrid round).
    global_batch : int, optional
        Samples per SGD round (logreg, linreg); K-Means takes every row.
    rounds : int
        Most rounds.
    balance : {'uniform', 'lb-bsp', 'static'}
    worker_batches : str or sequence of int, optional
        ``static``: each worker's batch (``"60000,60000,40000,40000"``), summing to the global
        batch (K-Means: to the rows).
    sync : {'bsp', 'ds-sync'}
    group_size : int
        DS-Sync group size.
    n_clusters : int, optional
        K-Means' ``k``.
    lr, l2 : float
        SGD learning rate and L2 penalty.
    tol : float
        K-Means' absolute tolerance on the squared centre shift.
    seed : int
    standardize : bool
        Scale features to zero mean, unit variance.
    hidden : str or sequence of int, optional
        ``mlp``: hidden layer widths (``"256,256,256"``).
    valid_memory_mb : tuple of int, optional
        The stack's TrainShard memory sizes (the first is the default).

    Returns
    -------
    TrainSpec

    Raises
    ------
    fanfit.errors.InvalidJobError
        Naming the option.
    """
    check_str("model", model)
    check_columns("features", features)
    check_str("target", target, optional=True)
    for name, value in (("workers", workers), ("gpu_workers", gpu_workers),
                        ("rounds", rounds), ("group_size", group_size), ("seed", seed)):  # fmt: skip
        check_int(name, value)
    check_int("global_batch", global_batch, optional=True)
    check_int("n_clusters", n_clusters, optional=True)
    check_str("balance", balance)
    check_str("sync", sync)
    for option, number in (("lr", lr), ("l2", l2), ("tol", tol)):
        check_number(option, number)
    spec = TrainSpec(
        model=str(model).lower(),
        features=tuple(_as_list(features)),
        target=target or None,
        workers=workers,
        worker_memory_mb=_memory_list(worker_memory),
        gpu_workers=gpu_workers,
        rounds=rounds,
        global_batch=global_batch,
        balance=balance,
        worker_batches=_int_list(worker_batches, "--worker-batches"),
        sync=sync,
        group_size=group_size,
        n_clusters=n_clusters,
        lr=float(lr),
        l2=float(l2),
        tol=float(tol),
        seed=seed,
        standardize=bool(standardize),
        hidden=_int_list(hidden, "--hidden"),
    )
    return spec.validate(valid_memory_mb)


@dataclass
class TrainResult:
    """A finished train job.

    Attributes
    ----------
    raw : dict
        ``result.json`` as TrainFinalize wrote it.
    doc : fanfit.jobs.documents.train.TrainResult
        ``raw`` parsed through its model.
    model : str
    centroids : ndarray of shape (k, d) or None
        K-Means.
    inertia : float or None
        K-Means: sum of squared distances to the nearest final centroid.
    coef : ndarray of shape (d, n_outputs) or None
        logreg / linreg, on the (standardised, if asked) features.
    intercept : ndarray of shape (n_outputs,) or None
    params : dict of str to ndarray or None
        mlp: ``W0`` (d, h_1), ``b0`` (h_1,), ..., ``W<L-1>`` (h_{L-1}, n_classes), ``b<L-1>``
        (:mod:`fanfit.train.mlp`), on the (standardised, if asked) features.
    hidden : list of int or None
        mlp: the hidden layers' widths.
    classes : list of float or None
        logreg, mlp: the label of each output column.
    loss : list of float or None
        SGD models (logreg, linreg, mlp): per round, the mean loss of its global batch under the
        round's model (before its step).
    n_iter : int
        Rounds that updated the model.
    rounds : list of dict
        Per round: ``workers`` (each: ``batch``, ``compute_s``, ``samples_per_s``, ``memory_mb``,
        ...), ``round_s`` (max compute seconds), ``idle_fraction``, ``span_s``, and ``wall_s``
        (the Map state's seconds in the execution history).
    execution_arn : str
    cost : dict or None
        :meth:`fanfit.cost.JobCost.to_dict` of the job (USD), when it could be counted.
    """

    raw: dict[str, Any]
    timings: dict[str, Any] = field(default_factory=dict)
    cost: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        r = self.doc = TrainResultDoc.parse(self.raw, source="result.json")
        self.model: str = r.model
        self.centroids = None if r.centroids is None else np.asarray(r.centroids)
        self.inertia: float | None = r.inertia
        self.coef = None if r.coef is None else np.asarray(r.coef)
        self.intercept = None if r.intercept is None else np.asarray(r.intercept)
        self.params: dict[str, np.ndarray] | None = (
            None
            if r.params is None
            else {k: np.asarray(v, dtype=np.float64) for k, v in r.params.items()}
        )
        self.hidden: list[int] | None = r.hidden
        self.loss: list[float | None] | None = r.loss
        self.classes: list[float] | None = r.classes
        if r.n_iter is None:
            raise errors.InvalidDocumentError(
                "malformed TrainResult (result.json): n_iter: missing"
            )
        self.n_iter: int = r.n_iter
        self.rounds: list[dict[str, Any]] = [rd.to_json_dict() for rd in r.rounds]
        self.execution_arn: str = r.execution_arn

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Apply the job's standardisation (if any) to features ``X`` of shape (n, d)."""
        X = np.asarray(X, dtype=np.float64)
        if self.doc.mean is None:
            return X
        return (X - np.asarray(self.doc.mean)) / np.asarray(self.doc.scale)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions for raw features ``X`` (n, d): class labels (logreg, mlp), values (linreg)
        or nearest centroid index (kmeans); shape (n,). Numpy only (no torch needed)."""
        Z = self.transform(X)
        if self.model == "kmeans":
            from fanfit.train.kmeans import kmeans_predict

            return kmeans_predict(Z, np.asarray(self.centroids))
        if self.model == "mlp":
            from fanfit.train.mlp import mlp_predict

            assert self.params is not None
            return np.asarray(self.classes)[mlp_predict(self.params, Z)]
        scores = Z @ self.coef + self.intercept
        if self.model == "logreg":
            return np.asarray(self.classes)[scores.argmax(axis=1)]
        return scores[:, 0]

    def to_dict(self) -> dict[str, Any]:
        """The ``--output json`` object: ``result.json`` plus ``timings`` and ``cost``."""
        out = {**self.doc.to_json_dict(), "timings": {**self.doc.timings, **self.timings}}
        if self.cost is not None:
            out["cost"] = self.cost
        return out


class TrainJob(JobHandle):
    """A started train job: ``wait()``, ``result()``, ``status()``, ``record()``, ``cost()``.

    Polling, failures and ``cost()`` are :class:`fanfit.client.JobHandle`'s; :meth:`wait` pauses
    at most 1 s between polls.
    """

    kind = "train"
    _ERRORS = _ERRORS
    _MAX_POLL_S = 1.0

    def __init__(self, client: StackClient, job_id: str, execution_arn: str) -> None:
        super().__init__(client, job_id, execution_arn)
        self._result: TrainResult | None = None

    def record(self) -> dict[str, Any]:
        """The job record (status, model, last round's batches and idle fraction)."""
        return self.client.records.get(self.job_id) or {"job_id": self.job_id}

    def round_wall_seconds(self) -> list[float]:
        """Wall seconds of each round's Map state (all workers, barrier included), in order.

        Only the rounds this handle's execution ran: a resumed job's execution (:meth:`fanfit.
        client.Client.resume`) runs its last rounds, from the first one not reduced before.

        Returns
        -------
        list of float
            Seconds.
        """
        walls: list[float] = []
        entered = None
        sfn = self.client.sfn
        pages = sfn.get_paginator("get_execution_history").paginate(executionArn=self.execution_arn)
        try:
            events = [ev for page in pages for ev in page["events"]]
        except sfn.exceptions.ExecutionDoesNotExist:  # a restarted local stack: no walls known
            return walls
        for ev in events:
            kind = ev["type"]
            # Only the workers' Map: a DS-Sync round also runs a Map over its groups.
            if kind == "MapStateEntered":
                name = ev.get("stateEnteredEventDetails", {}).get("name")
                entered = ev["timestamp"] if name in (None, _ROUND_STATE) else None
            elif kind == "MapStateExited" and entered is not None:
                walls.append((ev["timestamp"] - entered).total_seconds())
                entered = None
        return walls

    def result(self, timeout: float = 3600.0, *, progress: bool | str | Any = False) -> TrainResult:
        """Wait for the job and read its result (cached); each round gets ``wall_s``.

        ``progress`` shows live progress (rounds done) while it waits, as
        :meth:`fanfit.client.JobHandle.wait`. A resumed job's execution ran only its last rounds:
        those get ``wall_s`` (the rounds' walls align from the end), the earlier ones None;
        ``timings["round_wall_s"]`` lists this execution's rounds.
        """
        if self._result is None:
            self.wait(timeout, progress=progress)
            key = storage.result_key(self.job_id)
            doc = TrainResultDoc.parse(self.client.store.get_json(key), source=key)
            walls = self.round_wall_seconds()
            skipped = max(len(doc.rounds) - len(walls), 0)
            for i, record in enumerate(doc.rounds):
                record.wall_s = walls[i - skipped] if i >= skipped else None
            self._result = TrainResult(raw=doc.to_json_dict(), timings={"round_wall_s": walls})
            self._result.cost = cost_or_none(self)
        return self._result


def submit_train(
    client: StackClient,
    data: Any,
    *,
    init: Any = None,
    job_id: str | None = None,
    weight: float = 1.0,
    **options: Any,
) -> TrainJob:
    """Upload a train job and start its execution (:meth:`fanfit.client.Client.submit_train`).

    Parameters
    ----------
    client : StackClient
        A :class:`fanfit.client.Client`.
    data : str, path, DataFrame or s3:// URI
        CSV, Parquet or Stata file, or a DataFrame. An ``s3://`` URI of a ``.csv``, ``.npz`` or
        ``.npy`` object in the stack's bucket (or in the bucket of its ``ExternalDataBucketName``
        parameter) is used in place: only its header is read here, TrainInit reads the object.
    init : array_like of shape (n_clusters, d), optional
        K-Means initial centroids (in the standardised space when ``standardize``); default:
        ``n_clusters`` distinct rows drawn with the seed.
    job_id : str, optional
    weight : float
        The job's weight in the fair shares of the account's concurrency when several jobs run
        at once (Dorm, :mod:`fanfit.jobs.sharing`): a positive number, at most 100; default 1.
    **options
        Those of :func:`build_train_spec` (:class:`fanfit.client.options.TrainOptions`).

    Returns
    -------
    TrainJob

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidDataError
        Before anything is uploaded.
    fanfit.errors.StackError
        If the stack has no train state machine.
    fanfit.errors.GpuWorkerDisabledError
        ``gpu_workers`` on a stack without the GPU worker (:func:`~fanfit.client.check.check_gpu_worker`).
    """
    if not client.stack.train_state_machine_arn:
        raise errors.StackError(
            f"stack {client.stack.name!r} has no TrainStateMachineArn output; redeploy it"
        )
    checked = TrainOptions(data=data, weight=weight, **options)  # TypeError: an unknown option
    weight = check_weight(checked.weight)
    spec = build_train_spec(
        **checked.spec_options(), valid_memory_mb=client.stack.train_worker_memory_mb or None
    )
    check_gpu_worker(client, gpu_workers=spec.gpu_workers)  # needs EnableGpuWorker=true
    columns = [*spec.features, *([spec.target] if spec.target else [])]
    # s3:// data in the stack's (or the external) bucket: checked on its header, used in place
    # (TrainInit reads it, checks the values and the memory).
    header = data_source(client, data)
    if header is not None:
        check_header_columns(header.columns, columns, header.obj.uri)
        source = DataSource.of(header.obj)
    else:
        source = None
        names, values = to_matrix(read_table(data, client.s3), columns)
        spec.check_data(names, values)
        # Data over a function's memory is rejected before anything is uploaded or started.
        client.check_limits("train", n_rows=int(values.shape[0]), n_cols=int(values.shape[1]))
    job_id = job_id or f"train-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    centroids = None if init is None else np.asarray(init, dtype=np.float64)
    if centroids is not None and centroids.shape != (spec.n_clusters, len(spec.features)):
        raise errors.InvalidJobError(
            f"init must have shape (n_clusters, n_features) = ({spec.n_clusters}, "
            f"{len(spec.features)}); got {centroids.shape}"
        )
    data_key = None if source is not None else client.store.put_data(names, values)
    init_key = (
        None
        if centroids is None
        else client.store.put_array(storage.input_init_key(job_id), centroids)
    )
    # The document TrainInit validates (TrainJobFile), written through its model.
    job = TrainJobFile(
        spec=spec.to_dict(), data_key=data_key, data_source=source, init_key=init_key, weight=weight
    )
    key = client.store.put_json(storage.spec_key(job_id), job.to_json_dict())
    started = client.sfn.start_execution(
        stateMachineArn=client.stack.train_state_machine_arn,
        name=job_id,
        input=json.dumps({"job_id": job_id, "spec_key": key}),
    )
    record_submission(client, job_id, "train", started["executionArn"])
    return TrainJob(client, job_id, started["executionArn"])
