"""TrainSchedule: fold the last round's throughput in and set each worker's batch for the next round.

Throughput (samples/s) is predicted per worker by :class:`fanfit.sched.throughput.EwmaThroughput`;
batches are uniform, LB-BSP's (Chen et al., IEEE TCC 2021, :func:`fanfit.sched.lbbsp.lbbsp_batches`)
or the user's; DS-Sync (Wang et al. 2020) draws the round's groups
(:func:`fanfit.sched.dssync.dssync_groups`); the job's partition (Dorm) bounds the Map's concurrency.
"""

from __future__ import annotations

import time

import numpy as np

from fanfit import storage
from fanfit.errors import JobNotFoundError
from fanfit.jobs import sharing
from fanfit.jobs.documents.train import (
    RoundItem,
    RoundPlan,
    RoundRecord,
    ScheduleOutput,
    TrainPlan,
    TrainWorker,
)
from fanfit.jobs.train.data import get_state, read_plan, read_round_plan, signature
from fanfit.sched.dssync import dssync_groups
from fanfit.sched.lbbsp import lbbsp_batches, uniform_batches
from fanfit.sched.resources import lambda_resource, stack_gpu_resource
from fanfit.sched.throughput import (
    EwmaThroughput,
    ShardObservation,
    ThroughputEntry,
    lambda_vcpus,
)
from fanfit.train.models import model_for

__all__ = ["GPU_PRIOR_VCPUS", "RUNTIME_BASE_MB", "max_batches", "schedule_round"]

#: Resident memory of a worker before it holds any data: the Python runtime with numpy, boto3 and
#: the fanfit layer (measured peak RSS of a warm TrainShard on the local stack: about 110 MB), with
#: headroom, MB.
RUNTIME_BASE_MB = 160
#: Prior speed of a GPU worker before it has been measured, in Lambda vCPU equivalents: the vCPUs of
#: the job definition's g4dn.xlarge (4). Only the first round uses it; LB-BSP then sizes the GPU
#: worker's batch from what it measured.
GPU_PRIOR_VCPUS = 4.0


def max_batches(plan: TrainPlan) -> list[int]:
    """Largest batch each worker's memory holds: LB-BSP's per-worker memory bound.

    A worker keeps the job's data in memory (``n_obs x (d + 1)`` float64, read once per warm
    environment) besides the runtime (:data:`RUNTIME_BASE_MB`); a batch of ``b`` rows then needs
    :meth:`fanfit.train.model.TrainModel.bytes_per_row` more per row: ``8 b (d + 3 K)`` for SGD
    (the rows' copy, logits, probabilities and residuals for ``K`` outputs),
    ``8 b (d + 4 sum(hidden) + 3 K)`` for an MLP step (autograd keeps each hidden layer's pre- and
    post-activation and their gradients), or ``8 b (k + 2)`` for a K-Means step (distances to
    ``k`` centres, labels).

    Parameters
    ----------
    plan : TrainPlan
        The job's plan (``n_obs``, ``n_outputs``, the spec's features, ``workers`` with
        ``memory_mb``).

    Returns
    -------
    list of int, length ``N``
        Samples, at least 1 (a worker whose memory does not even hold the data still gets a row;
        it then fails with Lambda's out-of-memory error, which names the function).
    """
    spec = plan.spec
    n_obs, d = int(plan.n_obs), len(spec.features)
    data_bytes = 8 * n_obs * (d + 1)
    per_row = model_for(spec.model).bytes_per_row(spec, int(plan.n_outputs))
    out = []
    for w in plan.workers:
        free = int(w.memory_mb or 0) * 2**20 - RUNTIME_BASE_MB * 2**20 - data_bytes
        out.append(max(1, free // per_row))
    return out


def _observations(plan: TrainPlan, record: RoundRecord) -> list[tuple[int, ShardObservation]]:
    sig = signature(plan)
    out = []
    for w in record.workers:
        if w.batch <= 0:
            continue
        out.append(
            (
                int(w.worker),
                ShardObservation(
                    samples=int(w.batch),
                    compute_s=max(float(w.compute_s), 1e-6),
                    io_s=float(w.io_s),
                    memory_mb=int(w.memory_mb),
                    resource=w.resource or lambda_resource(int(w.memory_mb)),
                    cold_start=bool(w.cold_start),
                    signature=sig,
                ),
            )
        )
    return out


def _resource(worker: TrainWorker) -> str:
    """The throughput-table resource of a plan's worker: ``lambda-<MB>`` or ``gpu:<instance type>``."""
    if worker.placement == "gpu":
        return stack_gpu_resource()
    return lambda_resource(int(worker.memory_mb or 0))


def _worker_resource(worker: int) -> str:
    """The per-job key of one worker: two workers of one memory size may still differ in speed."""
    return f"worker-{worker}"


def schedule_round(
    store: storage.JobStore,
    throughput: storage.ThroughputRecords,
    job_id: str,
    round_index: int,
    partitions: storage.Partitions | None = None,
) -> dict:
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
        :class:`~fanfit.jobs.documents.train.ScheduleOutput`: ``job_id, round, max_concurrency,
        workers``, the Map's ``MaxConcurrencyPath`` and one Map item per worker. The batches,
        groups, predictions, partition and ``max_concurrency`` go to ``rounds/<r>/plan.json``
        (:class:`~fanfit.jobs.documents.train.RoundPlan`).

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
    plan = read_plan(store, job_id)
    spec = plan.spec
    workers = plan.workers
    try:
        kept: RoundPlan | None = read_round_plan(store, job_id, round_index)
    except JobNotFoundError:
        kept = None
    if kept is not None:
        partition = sharing.partition_at_barrier(partitions, job_id)
        return _round_items(job_id, round_index, workers, _max_concurrency(workers, partition))
    state = get_state(store, job_id, round_index)
    n = len(workers)
    sig = signature(plan)
    tkey = storage.train_throughput_key(job_id)
    own = EwmaThroughput.from_dict(store.get_json(tkey)) if round_index else EwmaThroughput()
    history = EwmaThroughput(entries=[ThroughputEntry.from_dict(e) for e in throughput.load([sig])])
    if round_index:
        rkey = storage.train_round_key(job_id, round_index - 1)
        record = RoundRecord.parse(store.get_json(rkey), source=rkey)
        observed = _observations(plan, record)
        for worker, obs in observed:
            history.update(obs)
            own.update(ShardObservation(**{**obs.to_dict(), "resource": _worker_resource(worker)}))
        keys = {(o.signature, o.resource) for _, o in observed}
        throughput.save(e.to_dict() for e in history.entries if (e.signature, e.resource) in keys)
    store.put_json(tkey, own.to_dict())

    source = "job"
    predicted = [own.predict(sig, _worker_resource(w.worker)) for w in workers]
    if any(p is None for p in predicted):
        source = "table"
        predicted = [history.predict(sig, _resource(w)) for w in workers]
    if any(p is None for p in predicted):
        source = "cpu-share"
        predicted = [
            GPU_PRIOR_VCPUS if w.placement == "gpu" else lambda_vcpus(int(w.memory_mb or 0))
            for w in workers
        ]
    speeds = np.asarray(predicted, dtype=np.float64)

    total = plan.n_obs if model_for(spec.model).every_row else int(spec.global_batch or 0)
    if spec.balance == "lb-bsp":
        batches = lbbsp_batches(total, speeds, max_batch=max_batches(plan))
    elif spec.balance == "static":
        batches = np.asarray(spec.worker_batches, dtype=np.int64)
    else:
        batches = uniform_batches(total, n)
    groups = (
        dssync_groups(n, int(spec.group_size), int(spec.seed), round_index)
        if spec.sync == "ds-sync"
        else [list(range(n))]
    )
    # The job's partition of the shared capacity, read at this barrier (Dorm): at most that many
    # workers run at once (the Map's MaxConcurrencyPath); the rest wait for a free slot.
    partition = sharing.partition_at_barrier(partitions, job_id)
    max_concurrency = _max_concurrency(workers, partition)
    round_plan = RoundPlan(
        round=round_index,
        phase=state.phase,  # type: ignore[arg-type]
        max_concurrency=max_concurrency,
        partition=None if partition is None else partition.to_dict(),
        batches=[int(b) for b in batches],
        groups=groups,
        predicted_samples_per_s=[float(x) for x in speeds],
        prediction_source=source,  # type: ignore[arg-type]
        started_at=started,
        ended_at=time.time(),
    )
    store.put_json(storage.train_round_plan_key(job_id, round_index), round_plan.to_json_dict())
    return _round_items(job_id, round_index, workers, max_concurrency)


def _max_concurrency(workers: list[TrainWorker], partition: sharing.Partition | None) -> int:
    """Workers of a round that run at once: ``min(Lambda workers, partition)`` plus ``min(GPU
    workers, GPU share)`` (at least 1 each); every worker without a partition."""
    n = len(workers)
    n_gpu = sum(1 for w in workers if w.placement == "gpu")
    if partition is None:
        return n
    return (min(n - n_gpu, partition.concurrency) if n > n_gpu else 0) + (
        min(n_gpu, max(1, partition.gpus)) if n_gpu else 0
    )


def _round_items(
    job_id: str, round_index: int, workers: list[TrainWorker], max_concurrency: int
) -> dict:
    """:func:`schedule_round`'s output: the Map's concurrency and one item per worker."""
    return ScheduleOutput(
        job_id=job_id,
        round=round_index,
        max_concurrency=max_concurrency,
        workers=[
            RoundItem(
                job_id=job_id,
                round=round_index,
                worker=w.worker,
                function_arn=w.function_arn,
                placement=w.placement,
            )
            for w in workers
        ],
    ).to_json_dict()
