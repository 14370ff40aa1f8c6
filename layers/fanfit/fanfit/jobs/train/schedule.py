"""TrainSchedule: fold the last round's throughput in and set each worker's batch for the next round.

Throughput (samples/s) is predicted per worker by :class:`fanfit.sched.throughput.EwmaThroughput`;
batches are uniform, LB-BSP's (Chen et al., IEEE TCC 2021, :func:`fanfit.sched.lbbsp.lbbsp_batches`)
or the user's; a LB-BSP round with Lambda and GPU workers first splits its samples between the two
by Proteus' drift-plus-penalty rule (Xiang et al.; :func:`fanfit.sched.lyapunov.dispatch_fragments`,
:func:`hybrid_batches`); DS-Sync (Wang et al. 2020) draws the round's groups
(:func:`fanfit.sched.dssync.dssync_groups`) and first records the round before from its workers'
records (:func:`fanfit.jobs.train.reduce.record_segment`: DS-Sync has no reduce) and picks how many
rounds the next Map runs without a global barrier (:func:`segment_rounds`); the job's partition
(Dorm) bounds the Map's concurrency, after the job's completion figures
(:func:`completion_figures`) were re-registered where they moved
(:func:`fanfit.jobs.sharing.follow_job`).
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidJobError, JobNotFoundError
from fanfit.jobs import sharing
from fanfit.jobs.documents.train import (
    DispatchQueue,
    ReduceOutput,
    RoundDispatch,
    RoundItem,
    RoundPlan,
    RoundRecord,
    ScheduleOutput,
    TrainPlan,
    TrainSpec,
    TrainWorker,
)
from fanfit.jobs.train.data import get_state, read_plan, read_round_plan, signature
from fanfit.jobs.train.reduce import dssync_phase, record_segment
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.dssync import dssync_groups
from fanfit.sched.lbbsp import RoundCostModel, is_level_shift, lbbsp_batches
from fanfit.sched.lyapunov import QueueSpec, dispatch_fragments, penalty_weight
from fanfit.sched.resources import lambda_resource, stack_gpu_resource
from fanfit.sched.throughput import (
    EwmaThroughput,
    ShardObservation,
    ThroughputEntry,
    lambda_vcpus,
)
from fanfit.split import even_batches
from fanfit.train.model import ModelState
from fanfit.train.models import model_for

__all__ = [
    "BACKLOG_SLACK",
    "completion_figures",
    "rounds_left",
    "ROUND_FRAGMENTS",
    "GPU_PRIOR_VCPUS",
    "RUNTIME_BASE_MB",
    "hybrid_batches",
    "max_batches",
    "SEGMENT_CAP",
    "SHARD_TIMEOUT_S",
    "schedule_round",
    "segment_rounds",
    "shard_timeout_s",
]

#: Resident memory of a worker before it holds any data: the Python runtime with numpy, boto3 and
#: the fanfit layer (measured peak RSS of a warm TrainShard on the local stack: about 110 MB), with
#: headroom, MB.
RUNTIME_BASE_MB = 160
#: Prior speed of a GPU worker before it has been measured, in Lambda vCPU equivalents: the vCPUs of
#: the job definition's g4dn.xlarge (4). Only the first round uses it; LB-BSP then sizes the GPU
#: worker's batch from what it measured.
GPU_PRIOR_VCPUS = 4.0
#: Fragments a hybrid round's samples are cut into for the CPU-GPU dispatch (at most one per
#: sample): the split between Lambda and GPU is exact to about 1/200 of the round.
ROUND_FRAGMENTS = 200
#: The time the cheaper queue may fall behind for its price, as a fraction of the round
#: (:func:`fanfit.sched.lyapunov.penalty_weight` of that backlog in the cheaper queue's samples):
#: a hybrid round gives at most about 5% of its time for cost.
BACKLOG_SLACK = 0.05
#: DS-Sync segments: the most rounds one Map invocation of a worker runs (:func:`segment_rounds`).
SEGMENT_CAP = 50
#: The TrainShard functions' timeout (template.yaml ``Timeout``), seconds; TrainSchedule reads it
#: from ``$FANFIT_TRAIN_SHARD_TIMEOUT_S`` (:func:`shard_timeout_s`).
SHARD_TIMEOUT_S = 900.0


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


def _queue_overheads(
    record: RoundRecord | None, scheduled_at: float | None, queues: dict[str, list[int]]
) -> dict[str, float]:
    """Each queue's measured overhead in the last round, seconds: the longest time one of its
    workers spent from the round's schedule (``scheduled_at``, epoch s) to its written partial
    other than computing, ``max_i (ended_at_i - scheduled_at - compute_s_i)`` (a Lambda
    invocation or a Batch job's start, reading the data and the model, writing the partial).
    Empty in round 0."""
    if record is None or scheduled_at is None:
        return {}
    spent = {
        w.worker: float(w.ended_at) - scheduled_at - float(w.compute_s) for w in record.workers
    }
    return {
        name: max(0.0, max((spent.get(i, 0.0) for i in idx), default=0.0))
        for name, idx in queues.items()
    }


def hybrid_batches(
    workers: list[TrainWorker],
    total: int,
    speeds: np.ndarray,
    max_batch: list[int],
    last_record: RoundRecord | None = None,
    last_scheduled_at: float | None = None,
    prices: PriceTable = DEFAULT_PRICES,
) -> tuple[np.ndarray, RoundDispatch]:
    """A round's batches when Lambda and GPU workers share it: Proteus' CPU-GPU dispatch, then
    LB-BSP within each side.

    The Lambda workers form queue ``'lambda'`` and the GPU workers queue ``'gpu'``. Every worker is
    given one sample first; the other ``total - N`` samples are cut into ``FRAGMENTS_PER_WORKER *
    N`` fragments (fewer when there are fewer samples) that arrive one per slot, the slot being the
    time both queues together serve one fragment, so queue ``q`` serves ``mu_q = s v_q / (v_lambda
    + v_gpu)`` per slot (``s`` the fragment's samples, ``v_q`` its workers' predicted throughput
    summed). Each fragment goes to ``argmin_q V c_q + Q_q(t)`` (drift-plus-penalty, Neely 2010;
    Xiang et al.'s Proteus; :func:`fanfit.sched.lyapunov.dispatch_fragments`), with

    - ``c_q`` the price of queue ``q``'s workers' seconds over ``v_q`` (:mod:`fanfit.prices`:
      Lambda GB-seconds of each worker's memory; the GPU instance's hour,
      ``$FANFIT_GPU_INSTANCE_TYPE``), USD per sample;
    - ``Q_q(0)`` the backlog measured at this barrier: a queue whose workers take longer to
      start (the GPU worker's Batch job and its PyTorch import; a cold Lambda) serves none of
      the round's samples meanwhile, so it starts ``(o_q - min_p o_p) v_q`` samples behind, with
      ``o_q`` its overhead measured in the last round (:func:`_queue_overheads`; 0 in round 0).
      The split then balances each side's overhead plus computation, the round's time.
    - ``V`` (:func:`fanfit.sched.lyapunov.penalty_weight`) such that the cheaper queue builds a
      backlog of half :data:`BACKLOG_SLACK` of the round's time (``(total - N) / (v_lambda +
      v_gpu)``) at its throughput before work spills over (the dearer queue idles meanwhile, so
      the cheaper one ends about twice that backlog, the slack, behind the even split).

    A side's share beyond its workers' memory bounds goes to the other side. Within each side,
    :func:`fanfit.sched.lbbsp.lbbsp_batches` splits its share by the workers' speeds.

    Parameters
    ----------
    workers : list of TrainWorker
        The plan's workers, Lambda and GPU (at least one of each).
    total : int
        The round's samples (global batch, or every row for K-Means), >= ``len(workers)``.
    speeds : numpy.ndarray, shape (N,)
        Predicted throughput of each worker (samples/s, or vCPU equivalents for the prior; only
        ratios and the prices' ratios matter).
    max_batch : list of int, length N
        Each worker's memory bound (:func:`max_batches`).
    last_record : RoundRecord, optional
        The last round's record (None in round 0).
    last_scheduled_at : float, optional
        When the last round was scheduled (its plan's ``ended_at``, epoch s).
    prices : PriceTable

    Returns
    -------
    (numpy.ndarray of int64, RoundDispatch)
        The batches (sum ``total``) and the dispatch's record.

    Raises
    ------
    InvalidJobError
        Fewer samples than workers, or more than the workers' memory bounds hold.
    """
    n = len(workers)
    queues = {
        name: np.array([i for i, w in enumerate(workers) if w.placement == name], dtype=np.int64)
        for name in ("lambda", "gpu")
    }
    free = int(total) - n
    bounds = np.asarray(max_batch, dtype=np.int64)
    instance = stack_gpu_resource().split(":", 1)[1]
    if instance not in prices.gpu_instance_hour_usd:
        instance = prices.gpu_instance_type
    price_per_s = {
        "lambda": sum(
            prices.lambda_cost_usd(int(workers[i].memory_mb or 0), 1.0, 0) for i in queues["lambda"]
        ),
        "gpu": len(queues["gpu"]) * prices.gpu_cost_usd(1.0, instance),
    }
    v = {name: float(speeds[idx].sum()) for name, idx in queues.items()}
    n_fragments = max(1, min(free, ROUND_FRAGMENTS))
    fragment = free / n_fragments if free > 0 else 0.0
    specs = [
        QueueSpec(
            name,
            max(fragment, 1.0) * v[name] / (v["lambda"] + v["gpu"]),
            price_per_s[name] / v[name],
        )
        for name in ("lambda", "gpu")
    ]
    overhead = _queue_overheads(
        last_record, last_scheduled_at, {k: list(idx) for k, idx in queues.items()}
    )
    first = min(overhead.values()) if overhead else 0.0
    backlog = {name: (o - first) * v[name] for name, o in overhead.items()}
    # The cheaper queue may fall BACKLOG_SLACK of the round behind. While it builds a backlog b
    # the dearer queue idles, and the b samples it did not serve go to the cheaper one too: the
    # round loses about 2 b, so b is half the slack (in the cheaper queue's samples).
    cheaper = min(specs, key=lambda q: q.cost_per_sample_usd).name
    round_s = max(free, 0) / (v["lambda"] + v["gpu"])
    V = penalty_weight(specs, BACKLOG_SLACK / 2 * round_s * v[cheaper])
    if free > 0:
        split = dispatch_fragments(free, n_fragments, specs, V, backlog)
        share = {name: split.samples_of(name) for name in queues}
        counts = {name: split.fragments[split.queue_names.index(name)] for name in queues}
    else:
        share, counts = {"lambda": 0, "gpu": 0}, {"lambda": 0, "gpu": 0}
    # a side's share beyond its memory bounds goes to the other side
    room = {name: int(bounds[idx].sum()) - idx.size for name, idx in queues.items()}
    for name, other in (("lambda", "gpu"), ("gpu", "lambda")):
        excess = share[name] - room[name]
        if excess > 0:
            share[name] -= excess
            share[other] += excess
    batches = np.zeros(n, dtype=np.int64)
    for name, idx in queues.items():
        batches[idx] = lbbsp_batches(share[name] + idx.size, speeds[idx], max_batch=bounds[idx])
    dispatch = RoundDispatch(
        V=V,
        n_fragments=n_fragments if free > 0 else 0,
        fragment_samples=fragment,
        queues=[
            DispatchQueue(
                name=q.name,  # type: ignore[arg-type]
                workers=[int(i) for i in queues[q.name]],
                samples_per_s=v[q.name],
                cost_per_sample_usd=q.cost_per_sample_usd,
                service_per_slot=q.service_per_slot,
                overhead_s=float(overhead.get(q.name, 0.0)),
                backlog_start=float(backlog.get(q.name, 0.0)),
                fragments=counts[q.name],
                samples=int(batches[queues[q.name]].sum()),
            )
            for q in specs
        ],
    )
    return batches, dispatch


def _update_own(own: EwmaThroughput, obs: ShardObservation) -> EwmaThroughput:
    """Fold a worker's newest measurement into the job's own EWMA; on a level shift
    (:func:`fanfit.sched.lbbsp.is_level_shift`: a co-tenant took or gave back CPU) restart the
    worker's estimate from that measurement, so that the next round's batches follow it at once."""
    before = own.predict(obs.signature, obs.resource)
    if not is_level_shift(before, obs.samples_per_s):
        own.update(obs)
        return own
    key = (obs.signature, obs.resource)
    kept = [e for e in own.entries if (e.signature, e.resource) != key]
    count = next(e.n_observations for e in own.entries if (e.signature, e.resource) == key)
    restart = ThroughputEntry(*key, obs.samples_per_s, obs.io_s, count + 1)
    return EwmaThroughput(alpha=own.alpha, threads=own.threads, entries=[*kept, restart])


def rounds_left(spec: TrainSpec, state: ModelState) -> int:
    """Rounds of a job not yet ended, the one about to run included, at most.

    From the model at the start of the round: K-Means' final E-step (phase ``'final'``) is the
    last round; in phase ``'train'``, ``spec.rounds - n_iter`` rounds remain (SGD: exactly; K-Means:
    at most, it may converge earlier) and K-Means adds its final E-step; ``'done'``: none.
    """
    if state.phase == "done":
        return 0
    if state.phase == "final":
        return 1
    final = 1 if spec.model == "kmeans" else 0
    return max(int(spec.rounds) - int(state.n_iter), 1) + final


def completion_figures(
    spec: TrainSpec, state: ModelState, record: RoundRecord | None, n_lambda: int
) -> tuple[float, float] | None:
    """A train job's completion figures at a round's barrier (TrainSchedule), for Dorm.

    The round's seconds ``t`` are the last round's longest worker, from its invocation's start to
    its partial written (``max_i (ended_at_i - started_at_i)`` of the round record: compute and
    I/O, without the wait for a slot when its partition was below its workers): a round's length
    at the job's whole demand. With ``L`` = :func:`rounds_left` and ``W`` = ``n_lambda``:

    - ``remaining_s = L x t x W``: slot-seconds of work left (each of its ``W`` Lambda slots is
      held for the round, bulk synchronous);
    - ``critical_s = L x t``: the rounds cannot overlap, so the job needs at least that long.

    These are benchmarks/sharing.py's simulated ``Job.remaining_s`` / ``Job.critical_s`` of a
    train job at a barrier (rounds left x ``W`` steps x a step's seconds; rounds left x a step's
    seconds, a step there being the compute plus the invocation's overhead).

    Parameters
    ----------
    spec : TrainSpec
    state : ModelState
        The model at the start of the round about to run.
    record : RoundRecord or None
        The last round's record; None in round 0.
    n_lambda : int
        The job's Lambda workers (its registered demand).

    Returns
    -------
    (float, float) or None
        ``(remaining_s, critical_s)``; None in round 0 (nothing measured yet) or with a record
        without workers.
    """
    if record is None or not record.workers:
        return None
    round_s = max(max(float(w.ended_at) - float(w.started_at), 0.0) for w in record.workers)
    left = rounds_left(spec, state)
    return left * round_s * max(int(n_lambda), 0), left * round_s


def shard_timeout_s() -> float:
    """The worker functions' timeout, seconds: ``$FANFIT_TRAIN_SHARD_TIMEOUT_S`` (set by the
    template from the TrainShard functions' ``Timeout``), else :data:`SHARD_TIMEOUT_S`.

    Raises
    ------
    InvalidJobError
        The variable is not a positive number.
    """
    raw = os.environ.get("FANFIT_TRAIN_SHARD_TIMEOUT_S", "")
    if not raw:
        return SHARD_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value <= 0:
        raise InvalidJobError(
            f"FANFIT_TRAIN_SHARD_TIMEOUT_S must be a positive number of seconds, got {raw!r}"
        )
    return value


def segment_rounds(
    spec: TrainSpec,
    n_workers: int,
    n_gpu: int,
    max_concurrency: int,
    rounds_left: int,
    round_s: float | None,
    timeout_s: float,
    cap: int = SEGMENT_CAP,
) -> int:
    """DS-Sync segments: how many consecutive rounds ``K`` one Map invocation of each worker runs.

    Within a segment the workers synchronise only within their groups (each waits for its
    round-``r - 1`` group's partials, :func:`fanfit.jobs.train.shard.train_shard`), so the
    execution's barrier (TrainSchedule, the Map's end) comes every ``K`` rounds, not every round:
    DS-Sync without a global barrier (Wang et al., arXiv:2007.03298). The rule:

    - ``K = 1`` when the job is not DS-Sync; in round 0 (``round_s`` None: nothing measured);
      under ``balance='lb-bsp'`` (its batches need each round's measurements); with any GPU
      worker (``n_gpu > 0``); when the Map's ``max_concurrency`` (the job's partition) is below
      ``n_workers`` (a worker waiting on a group member not started would deadlock);
    - otherwise ``K = min(rounds_left, floor(timeout_s / (2 round_s)), cap)`` (at least 1): the
      segment's predicted time, ``round_s x K``, stays under half the worker function's timeout.

    Parameters
    ----------
    spec : TrainSpec
    n_workers, n_gpu : int
        The job's workers, and of them the GPU workers.
    max_concurrency : int
        The Map's concurrency (:func:`_max_concurrency`).
    rounds_left : int
        :func:`rounds_left`, the round about to run included.
    round_s : float or None
        The last measured round's seconds (:func:`schedule_round`: the last segment's, from its
        schedule's start to its last partial, over its rounds); None in round 0.
    timeout_s : float
        The worker function's timeout, seconds (:func:`shard_timeout_s`).
    cap : int
        The most rounds of one segment (:data:`SEGMENT_CAP`).

    Returns
    -------
    int
        ``K`` >= 1.
    """
    if (
        spec.sync != "ds-sync"
        or round_s is None
        or spec.balance == "lb-bsp"
        or n_gpu > 0
        or max_concurrency < n_workers
    ):
        return 1
    fit = math.floor(float(timeout_s) / (2.0 * max(float(round_s), 1e-3)))
    return max(1, min(int(rounds_left), fit, int(cap)))


def schedule_round(
    store: storage.JobStore,
    throughput: storage.ThroughputRecords,
    job_id: str,
    round_index: int,
    partitions: storage.Partitions | None = None,
    records: storage.JobRecords | None = None,
) -> dict:
    """Record the last round's throughput and set each worker's batch for round ``round_index``.

    Throughput (samples/s) is predicted per worker by :class:`fanfit.sched.throughput.
    EwmaThroughput`: first from this job's own average for that worker (kept in S3 under
    ``train/throughput.json``, keyed ``worker-<i>``, so two workers of one memory size that run at
    different speeds are told apart; a measurement off that average by more than
    :data:`fanfit.sched.lbbsp.SHIFT_RATIO` restarts it, so a worker whose CPU a co-tenant takes is
    followed in the next round); without one, from the stack's throughput table for the
    workload signature on ``lambda-<MB>`` (scaled from the nearest memory size, cross-job history);
    without any, every worker's Lambda CPU share :func:`fanfit.sched.throughput.lambda_vcpus`
    (only the ratios matter to LB-BSP). Batches are

    - ``'uniform'``: :func:`fanfit.split.even_batches`;
    - ``'lb-bsp'``: :func:`fanfit.sched.lbbsp.lbbsp_batches`, ``b_i ~ B v_i / sum_j v_j`` (Chen et
      al., "Accelerating Distributed Learning in Non-Dedicated Environments", IEEE TCC 2021) in
      round 0; from round 1 on, with every worker measured, each worker's round is modelled as
      ``t_i(b) = a_i + b / v_i`` (a per-round fixed cost, fitted on the job's measured rounds by
      :class:`fanfit.sched.lbbsp.RoundCostModel`, kept in ``train/throughput.json`` under
      ``round_costs``, restarted on a level shift) and the batches equalise the predicted finish
      times, ``b_i = v_i (T - a_i)`` (``fixed_s``); the plan's ``predicted_samples_per_s`` is
      then ``b_i / t_i(b_i)``,

    with ``B`` the global batch (SGD) or every row (K-Means, so each round covers the data set).
    Under LB-BSP a round with both Lambda and GPU workers first splits ``B`` between the two by
    drift-plus-penalty (:func:`hybrid_batches`; Proteus) and records it in the round plan's
    ``dispatch``.
    For DS-Sync the round's groups come from :func:`fanfit.sched.dssync.dssync_groups` (Wang et al.,
    arXiv:2007.03298, 2020). A DS-Sync round has no reduce: before planning round ``r > 0`` this
    records the rounds of the last segment (round ``r - 1`` and those of its segment before it)
    from their workers' small records and writes their states
    (:func:`fanfit.jobs.train.reduce.record_segment`; skipped when round ``r``'s state exists).
    It then picks the segment ``K`` (:func:`segment_rounds`: 1 in round 0, under LB-BSP, with a GPU
    worker or a partition below the workers; else as many rounds as fit in half the worker
    function's timeout at the last segment's seconds per round, at most :data:`SEGMENT_CAP`) and
    writes the plans of rounds ``r .. r + K - 1`` (the same batches, each round's own groups,
    ``segment_first = r``, ``segment_rounds = K``); each Map item runs those ``K`` rounds
    (:func:`fanfit.jobs.train.shard.train_shard`), and the output's ``advance`` tells the
    execution the round after the segment (``r + K``) and whether it runs. Under segments the
    throughput of every round of the last segment is folded in, in order.

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
        each); the workers' batches and so the result do not change. From round 1 on, the job's
        :func:`completion_figures` are re-registered first when they moved by more than
        :data:`fanfit.jobs.sharing.FIGURE_TOLERANCE` since the last registration (a
        recomputation of every partition; otherwise nothing is written).
    records : JobRecords, optional
        The job table: a DS-Sync round's record updates the job's ``last_round`` there.

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.ScheduleOutput`: ``job_id, round, max_concurrency,
        workers, reduce, advance``, the Map's ``MaxConcurrencyPath``, one Map item per worker,
        whether a reduce follows (BSP) and, under DS-Sync (no reduce), the next round and whether
        it runs. The batches, groups, predictions, partition and ``max_concurrency`` go to
        ``rounds/<r>/plan.json``
        (:class:`~fanfit.jobs.documents.train.RoundPlan`).

    A round whose plan is already in S3 keeps it (a resumed execution re-entering a round its
    first execution scheduled, or a retry): some workers may already have written their partials
    with its batches, so the batches and groups stay, the throughput is not folded in twice, and
    only ``max_concurrency`` is read again from the partition. Under DS-Sync the items run the
    rest of the kept plan's segment from this round on (one round when the partition no longer
    runs every worker at once); workers skip the rounds they already wrote.

    Raises
    ------
    InvalidJobError
        A round out of order.
    """
    started = time.time()
    plan = read_plan(store, job_id)
    spec = plan.spec
    workers = plan.workers
    dssync = spec.sync == "ds-sync"
    if dssync and round_index and not store.exists(storage.train_state_key(job_id, round_index)):
        record_segment(store, records, job_id, round_index)
    try:
        kept: RoundPlan | None = read_round_plan(store, job_id, round_index)
    except JobNotFoundError:
        kept = None
    if kept is not None:
        partition = sharing.partition_at_barrier(partitions, job_id)
        max_concurrency = _max_concurrency(workers, partition)
        # the rest of the kept segment from this round on (a resumed execution may re-enter it
        # mid-way); one round at a time if the partition no longer runs every worker at once
        first = kept.segment_first if kept.segment_first is not None else round_index
        k = max(1, first + kept.segment_rounds - round_index)
        if max_concurrency < len(workers):
            k = 1
        return _round_items(
            job_id,
            round_index,
            workers,
            max_concurrency,
            _advance(job_id, round_index, get_state(store, job_id, round_index).n_iter, spec, k)
            if dssync
            else None,
            k,
        )
    state = get_state(store, job_id, round_index)
    n = len(workers)
    sig = signature(plan)
    tkey = storage.train_throughput_key(job_id)
    saved = store.get_json(tkey) if round_index else {}
    own = EwmaThroughput.from_dict(saved) if round_index else EwmaThroughput()
    costs = RoundCostModel.from_dict(saved.get("round_costs"))
    history = EwmaThroughput(entries=[ThroughputEntry.from_dict(e) for e in throughput.load([sig])])
    record: RoundRecord | None = None
    last_scheduled_at: float | None = None
    round_s: float | None = None
    if round_index:
        last_plan = read_round_plan(store, job_id, round_index - 1)
        last_scheduled_at = last_plan.ended_at
        # every round of the last segment (one round unless DS-Sync ran a segment), in order
        prev_first = (
            last_plan.segment_first if last_plan.segment_first is not None else round_index - 1
        )
        keys: set[tuple[str, str]] = set()
        for q in range(prev_first, round_index):
            rkey = storage.train_round_key(job_id, q)
            record = RoundRecord.parse(store.get_json(rkey), source=rkey)
            observed = _observations(plan, record)
            for worker, obs in observed:
                history.update(obs)
                own = _update_own(
                    own, ShardObservation(**{**obs.to_dict(), "resource": _worker_resource(worker)})
                )
                costs.observe(worker, obs.samples, obs.compute_s)
            costs.pool()
            keys |= {(o.signature, o.resource) for _, o in observed}
        throughput.save(e.to_dict() for e in history.entries if (e.signature, e.resource) in keys)
        if record is not None and record.workers:
            # the last segment's seconds per round: from its schedule's start to its last
            # partial written, over its rounds (segment_rounds' round_s)
            seg_start = read_round_plan(store, job_id, prev_first).started_at
            ended = max(float(w.ended_at) for w in record.workers)
            round_s = max(ended - seg_start, 0.0) / (round_index - prev_first)
    store.put_json(tkey, {**own.to_dict(), "round_costs": costs.to_dict()})

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
    n_gpu = sum(1 for w in workers if w.placement == "gpu")
    dispatch: RoundDispatch | None = None
    if spec.balance == "lb-bsp" and 0 < n_gpu < n:
        batches, dispatch = hybrid_batches(
            workers, total, speeds, max_batches(plan), record, last_scheduled_at
        )
    elif spec.balance == "lb-bsp" and (fitted := costs.costs(n)) is not None:
        # every worker measured: equal predicted finish times under t_i(b) = a_i + b / v_i
        fixed, rates = fitted
        batches = lbbsp_batches(total, rates, max_batch=max_batches(plan), fixed_s=fixed)
        speeds, source = batches / (fixed + batches / rates), "job"
    elif spec.balance == "lb-bsp":
        batches = lbbsp_batches(total, speeds, max_batch=max_batches(plan))
    elif spec.balance == "static":
        batches = np.asarray(spec.worker_batches, dtype=np.int64)
    else:
        batches = even_batches(total, n)
    groups = (
        dssync_groups(n, int(spec.group_size), int(spec.seed), round_index)
        if dssync
        else [list(range(n))]
    )
    # Dorm: the job's completion figures (rounds left x its last round), re-registered only when
    # they moved by more than sharing.FIGURE_TOLERANCE since the last registration
    figures = completion_figures(spec, state, record, n_lambda=n - n_gpu)
    sharing.follow_job(
        partitions, job_id, "train", demand=n - n_gpu, gpu_demand=n_gpu, weight=plan.weight,
        remaining_s=None if figures is None else figures[0],
        critical_s=None if figures is None else figures[1],
    )  # fmt: skip
    # The job's partition of the shared capacity, read at this barrier (Dorm): at most that many
    # workers run at once (the Map's MaxConcurrencyPath); the rest wait for a free slot.
    partition = sharing.partition_at_barrier(partitions, job_id)
    max_concurrency = _max_concurrency(workers, partition)
    k = segment_rounds(
        spec,
        n,
        n_gpu,
        max_concurrency,
        rounds_left(spec, state),
        round_s,
        shard_timeout_s(),
        cap=SEGMENT_CAP,
    )
    ended = time.time()
    # DS-Sync segments: every round of the segment gets its plan (batches, groups), the later
    # rounds' first, so that round_index's plan (the one a resumed execution looks for) implies
    # the others; K > 1 only without LB-BSP, so the batches are the same every round
    for q in range(round_index + k - 1, round_index - 1, -1):
        round_plan = RoundPlan(
            round=q,
            phase=state.phase,  # type: ignore[arg-type]
            max_concurrency=max_concurrency,
            partition=None if partition is None else partition.to_dict(),
            batches=[int(b) for b in batches],
            groups=groups
            if q == round_index
            else dssync_groups(n, int(spec.group_size), int(spec.seed), q),
            predicted_samples_per_s=[float(x) for x in speeds],
            prediction_source=source,  # type: ignore[arg-type]
            started_at=started,
            ended_at=ended,
            dispatch=dispatch,
        )
        if dssync:
            round_plan.segment_first = round_index
            round_plan.segment_rounds = k
        store.put_json(storage.train_round_plan_key(job_id, q), round_plan.to_json_dict())
    return _round_items(
        job_id,
        round_index,
        workers,
        max_concurrency,
        _advance(job_id, round_index, state.n_iter, spec, k) if dssync else None,
        k,
    )


def _advance(
    job_id: str, round_index: int, n_iter: int, spec: TrainSpec, k: int = 1
) -> ReduceOutput:
    """DS-Sync: what a reduce would return after the segment of ``k`` rounds from round
    ``round_index``, from a model of ``n_iter`` steps: the next round (``round_index + k``), and
    whether it runs (:func:`fanfit.jobs.train.reduce.dssync_phase` of ``n_iter + k``)."""
    return ReduceOutput(
        job_id=job_id,
        round=round_index + k,
        has_next_round=dssync_phase(n_iter + k, spec) != "done",
    )


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
    job_id: str,
    round_index: int,
    workers: list[TrainWorker],
    max_concurrency: int,
    advance: ReduceOutput | None,
    k: int = 1,
) -> dict:
    """:func:`schedule_round`'s output: the Map's concurrency, one item per worker (each runs the
    ``k`` rounds of the segment from ``round_index``), and under DS-Sync (``advance`` given: no
    reduce follows the Map) the round after the segment."""
    return ScheduleOutput(
        job_id=job_id,
        round=round_index,
        max_concurrency=max_concurrency,
        reduce=advance is None,
        advance=advance,
        workers=[
            RoundItem(
                job_id=job_id,
                round=round_index,
                worker=w.worker,
                function_arn=w.function_arn,
                placement=w.placement,
                rounds=k,
            )
            for w in workers
        ],
    ).to_json_dict()
