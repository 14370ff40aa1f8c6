"""TrainInit: validate a train job and its data, resolve each worker's function, write the plan and
the round-0 model; or, for a job that already ran (``fanfit resume``), resume it
(:mod:`fanfit.jobs.train.resume`)."""

from __future__ import annotations

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidJobError
from fanfit.jobs import sharing
from fanfit.jobs.documents.train import InitOutput, TrainJobFile, TrainPlan, TrainSpec, TrainWorker
from fanfit.jobs.source import materialize_source
from fanfit.jobs.train.data import cached_data, put_group_state, put_state, read_plan
from fanfit.jobs.train.resume import register_partition, resume_job, resume_point
from fanfit.jobs.train.schedule import max_batches
from fanfit.train.models import model_for

__all__ = ["init_job", "read_job_file"]


def read_job_file(store: storage.JobStore, job_id: str, spec_key: str) -> TrainJobFile:
    """The job file at ``spec_key``, its keys checked before anything is read through them.

    Raises
    ------
    InvalidJobError
        Not an object with ``spec`` and ``data_key`` or ``data_source``, a malformed field, or a
        key outside the data prefix (``data_key``) or the job's prefix (``init_key``).
    """
    raw = store.get_json(spec_key)
    if (
        not isinstance(raw, dict)
        or "spec" not in raw
        or not ({"data_key", "data_source"} & set(raw))
    ):
        raise InvalidJobError(
            f"{spec_key} must hold an object with 'spec' and 'data_key' or 'data_source'"
        )
    job = TrainJobFile.parse(raw, source=spec_key)
    # The job file's keys are checked before anything is read or written through them.
    if job.data_source is None:
        storage.check_data_key(job.data_key)
    if job.init_key is not None:
        storage.check_job_key(job.init_key, job_id, field="init_key")
    return job


def init_job(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    spec_key: str,
    worker_functions: dict[int, str],
    execution_arn: str = "",
    gpu_memory_mb: int | None = None,
    partitions: storage.Partitions | None = None,
    memory_mb: int = 0,
) -> dict:
    """Validate a train job, write its plan and the round-0 model.

    Parameters
    ----------
    store, records : JobStore, JobRecords
    job_id, spec_key : str
        ``spec_key`` holds a :class:`~fanfit.jobs.documents.train.TrainJobFile`: ``{"kind":
        "train", "spec": TrainSpec dict, "data_key": str (or "data_source": DataSource),
        "init_key": str | None, "weight": float | None}`` (``init_key``: K-Means initial centroids, (k, d) ``.npy``; ``weight``:
        the job's weight in the fair shares, in (0, 100], default 1).
    worker_functions : dict of int to str
        Memory size (MB) -> ARN of the TrainShard function with that memory; the first is the
        default size.
    execution_arn : str
        The Step Functions execution, recorded in the job record and with the job's partition
        (so that other jobs drop the partition once this execution no longer runs).
    gpu_memory_mb : int, optional
        Memory (MB) of the stack's GPU worker job definition; None: the stack has no Batch path
        and a job asking for ``gpu_workers`` is rejected.
    partitions : Partitions, optional
        The stack's partition table: the job arrives with demand its Lambda worker count (and
        GPU demand its GPU workers) and its ``weight``, and every running job's partition is
        recomputed (:func:`fanfit.jobs.sharing.register_job`).
    memory_mb : int
        TrainInit's MemorySize, MB: a ``data_source`` (the user's ``s3://`` object used in place,
        :func:`fanfit.jobs.source.materialize_source`) must fit it; 0: not checked.

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.InitOutput`: ``job_id, plan_key, round, n_workers,
        has_next_round, resumed``: ``round`` 0, ``has_next_round`` True and ``resumed`` False for
        a new job. A job whose plan and round-0 model are already in S3 (a resumed execution,
        ``fanfit resume``) keeps them, its reduced rounds and their models: ``round`` is the first
        round whose reduced model is not in S3 and ``has_next_round`` False when its model is
        already final (:func:`fanfit.jobs.train.resume.resume_point`); the workers' functions are
        this stack's, and the job record is RUNNING again with ``resumed_at_round``.

    Raises
    ------
    InvalidJobError, InvalidDataError
        Naming the option or column; for a resumed job also a spec that differs from its
        plan's, or a worker memory size the stack no longer has.
    """
    job = read_job_file(store, job_id, spec_key)
    weight = sharing.check_weight(job.weight)
    given = TrainSpec.from_dict(job.spec)
    spec = given.validate(tuple(worker_functions))
    point = resume_point(store, job_id)
    if point is not None:
        # A data source was written as the data object when the job first ran; its plan names it.
        data_key = job.data_key or read_plan(store, job_id).data_key
        return resume_job(store, records, job_id, data_key, given, spec, point,
                          worker_functions, execution_arn, gpu_memory_mb, partitions,
                          weight)  # fmt: skip
    model = model_for(spec.model)
    if job.data_source is not None:
        used = [*spec.features, *([str(spec.target)] if spec.target else [])]
        data_key = materialize_source(
            store, job.data_source, used, memory_mb=memory_mb, function="TrainInit"
        )
    else:
        data_key = storage.check_data_key(job.data_key)
    columns, values = cached_data(store.bucket, data_key)
    spec.check_data(list(columns), values)
    n_obs = int(values.shape[0])
    X = values[:, [columns.index(c) for c in spec.features]]
    mean = scale = None
    if spec.standardize:
        mean = X.mean(axis=0)
        sd = X.std(axis=0)
        scale = np.where(sd > 0, sd, 1.0)
        X = (X - mean) / scale
    classes = None
    if model.classifier:
        classes = np.unique(values[:, columns.index(str(spec.target))])
    n_outputs = model.n_outputs(spec, None if classes is None else int(classes.size))
    n_lambda = len(spec.worker_memory_mb)
    plan = TrainPlan(
        job_id=job_id,
        spec=spec,
        data_key=data_key,
        n_obs=n_obs,
        n_outputs=n_outputs,
        mean=None if mean is None else mean.tolist(),
        scale=None if scale is None else scale.tolist(),
        classes=None if classes is None else classes.tolist(),
        weight=weight,
        workers=[
            TrainWorker(worker=i, memory_mb=m, function_arn=worker_functions[m], placement="lambda")
            for i, m in enumerate(spec.worker_memory_mb)
        ]
        + [
            TrainWorker(worker=i, memory_mb=gpu_memory_mb, function_arn="", placement="gpu")
            for i in range(n_lambda, spec.workers)
        ],
    )
    if spec.gpu_workers and not gpu_memory_mb:
        raise InvalidJobError(
            "--gpu-workers needs the stack's GPU worker (AWS Batch); this stack has none"
        )
    total = n_obs if model.every_row else int(spec.global_batch or 0)
    bounds = max_batches(plan)
    if spec.balance == "lb-bsp" and sum(bounds) < total:
        raise InvalidJobError(
            f"the workers' memory holds at most {sum(bounds)} samples per round (per worker: "
            f"{bounds}); a round needs {total}: give larger --worker-memory or a smaller "
            "--global-batch"
        )
    start = None
    if job.init_key and model.takes_start:
        start = np.asarray(store.get_array(job.init_key), dtype=np.float64)
    state = model.init(spec, X, n_outputs, start)
    store.put_json(storage.plan_key(job_id), plan.to_json_dict())
    if spec.sync == "ds-sync":
        # DS-Sync's models live one per group (fanfit.jobs.train.data.put_group_state); round 0
        # starts every worker from the same model: one group of all workers.
        first = {k: v[0] for k, v in state.arrays.items()}
        store.put_arrays(storage.train_group_state_key(job_id, 0, 0), first)
        put_group_state(store, job_id, 0, state.meta(), [list(range(spec.workers))])
    else:
        put_state(store, job_id, 0, state)
    records.mark_running(job_id, execution_arn=execution_arn, kind="train", model=spec.model)
    register_partition(partitions, job_id, spec, weight, execution_arn)
    return InitOutput(
        job_id=job_id,
        plan_key=storage.plan_key(job_id),
        round=0,
        n_workers=spec.workers,
        has_next_round=True,
        resumed=False,
    ).to_json_dict()
