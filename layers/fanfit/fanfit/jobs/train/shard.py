"""TrainShard (one function per memory size, or the GPU worker): one worker's step of one round."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
)

from fanfit import storage
from fanfit.errors import (
    GroupPartialTimeoutError,
    InvalidJobError,
    TrainJobStoppedError,
)
from fanfit.jobs.documents.events import TrainShardEvent
from fanfit.jobs.documents.train import (
    ShardOutput,
    ShardRecord,
    ShardStats,
    StateMeta,
    TrainStop,
)
from fanfit.jobs.stop import StopReader, write_stop
from fanfit.jobs.train.data import (
    get_state_groups,
    group_of,
    own_partial,
    plan_xy,
    read_plan,
    read_round_plan,
    remember_partial,
    signature,
    stepped_partial,
    worker_params,
)
from fanfit.sched.resources import lambda_resource, resource_kind
from fanfit.train.model import ModelState
from fanfit.train.models import model_for

__all__ = [
    "GROUP_POLL_S",
    "GROUP_WAIT_S",
    "STOP_CHECK_EVERY",
    "StopCheck",
    "stop_job",
    "stop_on_unfinished_attempt",
    "train_shard",
    "wait_for_group",
]

log = logging.getLogger("fanfit")

_COLD = True

#: DS-Sync segments: seconds between two polls of S3 for the group's partials of the round before.
GROUP_POLL_S = 0.03
#: DS-Sync segments: the longest a worker waits for its group's partials when no deadline is given
#: (the Lambda handler gives its invocation's remaining time), seconds.
GROUP_WAIT_S = 300.0
#: DS-Sync segments: a waiting worker HEADs the job's stop marker (:func:`fanfit.storage.
#: train_stop_key`) once at each round boundary and every this many polls while it waits. One
#: HEAD costs about 1.2 ms on moto and 6.8 ms on the local stack (docs/train.md): every 5th poll
#: adds about 0.24 and 1.4 ms a poll (a poll itself sleeps 30 ms and HEADs at least one partial;
#: the waiting worker has nothing else to do) and stops a waiting worker within 5 polls (about
#: 0.2 s, 0.5 s on a loaded machine) of the marker.
STOP_CHECK_EVERY = 5


def train_shard(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    worker: int,
    memory_mb: int = 0,
    resource_name: str | None = None,
    rounds: int = 1,
    deadline: float | None = None,
    poll_s: float = GROUP_POLL_S,
    execution_arn: str = "",
) -> dict:
    """One worker's step of one round, or under DS-Sync of a segment of ``rounds`` rounds.

    ``rounds == 1``: :func:`_step` of round ``round_index`` (every scheme). ``rounds = K > 1``
    (DS-Sync segments, :func:`fanfit.jobs.train.schedule.segment_rounds`): the worker runs rounds
    ``r = round_index .. round_index + K - 1`` in this one invocation, with no barrier between them
    but its group's: before round ``r > round_index`` it waits (:func:`wait_for_group`, bounded
    polling every ``poll_s`` seconds up to ``deadline``) until every member of its round-``r - 1``
    group wrote its partial, then steps exactly as a round of its own (:func:`_step`: the same
    group average, batches and order, so the same model bit for bit). The state of round ``r``
    (written by TrainSchedule only after the segment, :func:`fanfit.jobs.train.reduce.
    record_round`) is what it will be: the groups of round ``r - 1``'s plan, ``from_partials``,
    ``n_iter`` of the segment's first state plus ``r - round_index``. A round whose record
    (``train_worker_record_key``, written after the partial) this worker already wrote is skipped
    (a retry, a resumed execution): its partial is not computed again.

    The job's stop marker (:class:`~fanfit.jobs.documents.train.TrainStop`): a step that raises
    writes it (reason ``'failed'``, this worker, the round, the error's class) and the error is
    re-raised unchanged (a marker that cannot be written is logged, never raised in its place);
    before each round after its first, and every :data:`STOP_CHECK_EVERY` polls of a wait, the
    worker reads the marker (one HEAD) and, when it is there for its execution, stops with
    :class:`~fanfit.errors.TrainJobStoppedError` instead of waiting for its group until
    ``deadline`` (a member failed, the job was cancelled).

    Parameters
    ----------
    rounds : int
        ``K`` >= 1.
    deadline : float, optional
        Epoch seconds after which a wait for the group fails; default now + :data:`GROUP_WAIT_S`.
    poll_s : float
        Seconds between two polls (S3 HEADs of the missing partials).
    execution_arn : str
        The execution the worker runs in: a stop marker of another execution (an earlier one of a
        resumed job) is ignored; empty, every marker applies.

    Returns
    -------
    dict
        The last round's :class:`~fanfit.jobs.documents.train.ShardOutput` (:func:`_step`; of a
        skipped round, from its record).

    Raises
    ------
    InvalidJobError
        A worker index outside the job, ``rounds < 1``, or ``rounds > 1`` for a job that is not
        DS-Sync.
    GroupPartialTimeoutError
        A member's partial did not appear before ``deadline``.
    TrainJobStoppedError
        The job's stop marker of this execution appeared (another member failed, or the job was
        cancelled); this worker writes no marker of its own then.
    """
    r = round_index  # the round the worker is at, named in its stop marker if its step raises
    try:
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise InvalidJobError(f"rounds must be an integer of at least 1, got {rounds!r}")
        if rounds == 1:
            return _step(store, job_id, round_index, worker, memory_mb, resource_name)
        plan = read_plan(store, job_id)
        if plan.spec.sync != "ds-sync":
            raise InvalidJobError(
                f"rounds must be 1 for a job with sync {plan.spec.sync!r} (job {job_id}); only a "
                f"DS-Sync job runs segments of several rounds, got rounds={rounds}"
            )
        end = time.time() + GROUP_WAIT_S if deadline is None else float(deadline)
        stop = StopCheck(store, job_id, worker, execution_arn)
        first_meta: StateMeta | None = None
        out: dict = {}
        for r in range(round_index, round_index + rounds):
            rkey = storage.train_worker_record_key(job_id, r, worker)
            if store.exists(rkey):  # written after the partial: this round is done
                record = ShardRecord.parse(store.get_json(rkey), source=rkey)
                key = storage.train_partial_key(job_id, r, worker)
                out = ShardOutput(partial_key=key, **record.stats.to_json_dict()).to_json_dict()
                continue
            if r == round_index:
                out = _step(store, job_id, r, worker, memory_mb, resource_name)
                continue
            # the round boundary: a member that was computing (not waiting) stops here
            stop.check(r)
            if first_meta is None:
                _, first_meta = get_state_groups(store, job_id, round_index)
            groups = read_round_plan(store, job_id, r - 1).groups
            meta = StateMeta(
                phase="train",
                n_iter=first_meta.n_iter + r - round_index,
                groups=groups,
                from_partials=True,
            )
            wait_s = wait_for_group(
                store,
                job_id,
                r - 1,
                groups[group_of(groups, worker)],
                worker,
                end,
                poll_s,
                stop=stop,
            )
            out = _step(store, job_id, r, worker, memory_mb, resource_name, meta, wait_s)
        return out
    except TrainJobStoppedError as exc:
        log.warning("%s", exc)  # the job already stopped: its marker names why
        raise
    except Exception as exc:
        _mark_failed(store, job_id, worker, r, execution_arn, exc)
        raise


def stop_on_unfinished_attempt(
    store: storage.JobStore,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of TrainShard's handler: a retry that finds its step's earlier attempt unfinished
    stops the job (its stop marker) instead of letting its group wait for it.

    Powertools Idempotency keeps a step's record ``INPROGRESS`` from the handler's start until it
    returns; a process that dies in between (SIGKILL, out of memory: ``Runtime.ExitError``) leaves
    it so until the invocation's timeout (``in_progress_expiration``, up to 900 s). Step Functions
    retries the Map item, and the retry fails with ``IdempotencyAlreadyInProgressError`` (key:
    :attr:`fanfit.jobs.documents.events.TrainShardEvent.IDEMPOTENCY_KEY`, the execution included,
    so this is the same execution's earlier attempt). Within a DS-Sync segment the worker's
    group-mates would wait for its partials until their deadline; so the retry writes the job's
    stop marker (reason ``'failed'``, the worker, the round, the error; :func:`stop_job`, which
    the group-mates read within :data:`STOP_CHECK_EVERY` polls) and re-raises the error unchanged.
    ``fanfit resume`` then continues the job in a new execution, which the dead record does not
    block. The marker is written only for a job that exists (:func:`_mark_failed`) and a write that
    fails is logged, never raised in the error's place.

    Parameters
    ----------
    store : JobStore
        The job bucket.

    Returns
    -------
    callable
        A decorator of ``handler(event: dict, context) -> dict``, placed outside Powertools'
        ``@idempotent`` (which raises the error before the event is parsed).
    """

    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(handler)
        def wrapper(event: Any, context: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return handler(event, context, *args, **kwargs)
            except IdempotencyAlreadyInProgressError as exc:
                try:
                    step = TrainShardEvent.model_validate(event)
                except Exception:  # not a worker's event: nothing to stop
                    raise exc from None
                log.warning(
                    "job %s: worker %d's step of round %d in execution %s has an earlier attempt "
                    "that did not return (its process died, or it still runs): the job stops "
                    "(stop marker %s); `fanfit resume` continues it",
                    step.job_id,
                    step.worker,
                    step.round,
                    step.execution_arn or "(none named)",
                    storage.train_stop_key(step.job_id),
                )
                _mark_failed(store, step.job_id, step.worker, step.round, step.execution_arn, exc)
                raise

        return wrapper

    return decorate


def wait_for_group(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    members: list[int],
    worker: int,
    deadline: float,
    poll_s: float = GROUP_POLL_S,
    *,
    stop: StopCheck | None = None,
    stop_every: int = STOP_CHECK_EVERY,
) -> float:
    """Wait until every member of a DS-Sync group wrote its partial of round ``round_index``.

    Bounded polling: at most ``ceil((deadline - now) / poll_s) + 1`` polls, each an S3 HEAD of the
    partials still missing (a partial this environment holds, :func:`own_partial`, is not
    polled), ``poll_s`` seconds apart. With ``stop``, polls ``stop_every``, ``2 stop_every``, ...
    also HEAD the job's stop marker (:meth:`StopCheck.check`; the caller checks it before the
    first poll, at the round boundary), so a worker whose group-mate failed, or whose job was
    cancelled, stops within ``stop_every`` polls instead of at ``deadline``.

    Parameters
    ----------
    members : list of int
        The group's workers (``worker`` among them).
    worker : int
        The waiting worker (named in the error).
    deadline : float
        Epoch seconds.
    stop : StopCheck, optional
        The worker's reader of the job's stop marker; None: the marker is not read.
    stop_every : int
        Polls between two reads of the marker (>= 1).

    Returns
    -------
    float
        Seconds waited.

    Raises
    ------
    GroupPartialTimeoutError
        Some partials still missing at ``deadline``; names the job, round, worker and the members.
    TrainJobStoppedError
        ``stop`` found the job's stop marker; names the job, the worker, the round it was to run
        (``round_index + 1``) and the marker's reason.
    """
    started = time.perf_counter()
    every = max(1, int(stop_every))
    keys = {i: storage.train_partial_key(job_id, round_index, int(i)) for i in members}
    missing = [i for i, k in keys.items() if own_partial(store.bucket, k) is None]
    polls = max(1, math.ceil(max(deadline - time.time(), 0.0) / max(poll_s, 1e-3)) + 1)
    for attempt in range(polls):
        if stop is not None and attempt and attempt % every == 0:
            stop.check(round_index + 1, waiting=True)
        missing = [i for i in missing if not store.exists(keys[i])]
        if not missing:
            return time.perf_counter() - started
        if attempt + 1 < polls and time.time() < deadline:
            time.sleep(min(poll_s, max(deadline - time.time(), 0.0)))
        else:
            break
    raise GroupPartialTimeoutError(
        f"job {job_id}: worker {worker} waited {time.perf_counter() - started:.1f} s for its "
        f"group's partials of round {round_index}; workers {sorted(missing)} wrote none "
        "(a member failed or was not started)"
    )


def stop_job(
    store: storage.JobStore,
    job_id: str,
    reason: str,
    *,
    execution_arn: str = "",
    worker: int | None = None,
    round_index: int | None = None,
    error: BaseException | str | None = None,
) -> TrainStop:
    """Write train job ``job_id``'s stop marker (:func:`fanfit.storage.train_stop_key`).

    Parameters
    ----------
    reason : {'failed', 'cancelled'}
    execution_arn : str
        The execution that stopped (empty: the marker applies to every execution).
    worker, round_index : int, optional
        The worker that failed and the round it was at.
    error : exception or str, optional
        The error (its class name and the first 1,000 characters of its message are kept), or an
        error name.

    Returns
    -------
    TrainStop
        The marker written.

    Raises
    ------
    InvalidDocumentError
        ``reason`` is neither ``'failed'`` nor ``'cancelled'``.
    botocore.exceptions.ClientError
        The write was refused.
    """
    return write_stop(
        store,
        storage.train_stop_key(job_id),
        reason,
        execution_arn=execution_arn,
        worker=worker,
        round_index=round_index,
        error=error,
    )


class StopCheck:
    """One DS-Sync worker's reader of its job's stop marker (:class:`TrainStop`).

    :meth:`check` HEADs the marker (one request, about 1.2 ms on moto); only a marker whose ETag
    it has not seen is read (GET) and parsed. A marker of another execution (a resumed job's
    earlier, failed or cancelled execution: :meth:`TrainStop.applies_to`) is remembered by its
    ETag and ignored until it is written again.

    Parameters
    ----------
    store : JobStore
    job_id : str
    worker : int
        The worker that reads it (named in the error).
    execution_arn : str
        The worker's execution; empty: every marker applies.
    """

    def __init__(
        self, store: storage.JobStore, job_id: str, worker: int, execution_arn: str = ""
    ) -> None:
        self.store = store
        self.job_id = job_id
        self.worker = worker
        self.execution_arn = execution_arn
        self.key = storage.train_stop_key(job_id)
        self._reader = StopReader(store, self.key, execution_arn)

    def check(self, round_index: int, waiting: bool = False) -> None:
        """Raise when the job's stop marker applies to this worker.

        Parameters
        ----------
        round_index : int
            The round the worker is about to run (waiting for its group's partials of
            ``round_index - 1`` when ``waiting``).

        Raises
        ------
        TrainJobStoppedError
            The marker is there for this execution; the message names the job, the worker, the
            round and the marker's reason.
        """
        marker = self._reader.read()
        if marker is None:
            return
        doing = (
            f"waiting for its group's partials of round {round_index - 1}"
            if waiting
            else f"about to run round {round_index}"
        )
        raise TrainJobStoppedError(
            f"job {self.job_id}: worker {self.worker} stopped {doing} (round {round_index} of "
            f"its segment): {marker.describe()}; stop marker {self.key}"
        )


def _mark_failed(
    store: storage.JobStore,
    job_id: str,
    worker: int,
    round_index: int,
    execution_arn: str,
    exc: BaseException,
) -> None:
    """Write the job's stop marker for a worker whose step raised ``exc``; never raises (a marker
    that cannot be written must not take the place of the worker's own error). A job without a
    plan (no such job: an event naming a job that does not exist) gets none: nothing is written
    under a job that is not there."""
    try:
        if not store.exists(storage.plan_key(job_id)):
            return
        stop_job(
            store,
            job_id,
            "failed",
            execution_arn=execution_arn,
            worker=worker,
            round_index=round_index,
            error=exc,
        )
    except Exception as write_exc:  # the original error is what the execution must report
        log.warning(
            "job %s: worker %d failed in round %d (%s) and its stop marker could not be "
            "written: %s",
            job_id,
            worker,
            round_index,
            type(exc).__name__,
            write_exc,
        )


def _step(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    worker: int,
    memory_mb: int,
    resource_name: str | None,
    segment_meta: StateMeta | None = None,
    wait_s: float | None = None,
) -> dict:
    """One worker's step of one round; writes its partial to ``rounds/<r>/workers/<i>.npz``.

    ``segment_meta`` (a DS-Sync segment's round after its first, :func:`train_shard`): the round's
    state meta as TrainSchedule will write it, in place of reading ``train/state/<r>.npz`` (not
    written yet); ``wait_s`` the seconds waited for the group (recorded in the statistics).

    Under DS-Sync the worker first computes its own model: the average of its round-``r - 1``
    group's partials (:func:`fanfit.jobs.train.data.worker_params`), its part of the group's
    all-reduce; it then steps that model with its gradient and writes the stepped model.

    The step is the model's :meth:`fanfit.train.model.TrainModel.worker_step`:

    On the GPU worker (``resource_name`` of kind ``gpu``) K-Means and the linear models compute in
    PyTorch (:mod:`fanfit.train.torch_steps`; CUDA when present), on a Lambda worker in numpy.

    - K-Means: :func:`fanfit.train.kmeans.kmeans_step` on the worker's consecutive rows
      (:func:`fanfit.train.batches.row_range`; the round's batches cover every row).
    - logreg / linreg: :func:`fanfit.train.sgd.worker_gradient` on its rows of the round's global
      batch (:func:`fanfit.train.batches.batch_rows`), with its own model under DS-Sync.
    - mlp (on the GPU worker): :func:`fanfit.train.mlp.mlp_loss_gradient` on those rows (PyTorch,
      imported by the model's ``device()`` only: float64 on the CPU, float32 on CUDA;
      ``$FANFIT_MLP_DEVICE``).

    Parameters
    ----------
    store : JobStore
    job_id : str
    round_index, worker : int
    memory_mb : int
        The function's configured memory, MB.
    resource_name : str, optional
        Where the step ran: ``lambda-<MB>`` (the default) or the GPU worker's
        ``gpu:<instance type>``.

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.ShardOutput`: ``partial_key``, ``worker``,
        ``round``, ``batch`` (samples), ``compute_s`` (seconds of computation, no I/O), ``io_s``
        (seconds reading the plan, data and model and writing the partial), ``memory_mb``,
        ``resource``, ``cold_start``, ``signature``, ``started_at``, ``ended_at`` (epoch s),
        ``peak_rss_mb``; under DS-Sync ``sync_s`` (seconds averaging the group's partials of the
        round before, :func:`fanfit.jobs.train.data.group_average`, part of ``io_s``).

    Under DS-Sync the worker also writes its :class:`~fanfit.jobs.documents.train.ShardRecord`
    (``train_worker_record_key``: statistics, loss, batch) for the round's record.

    Raises
    ------
    InvalidJobError
        A worker index outside the job.
    """
    global _COLD
    cold, _COLD = _COLD, False
    started = time.time()
    t_io = time.perf_counter()
    plan = read_plan(store, job_id)
    spec = plan.spec
    if not 0 <= worker < len(plan.workers):
        raise InvalidJobError(f"worker must be in 0..{len(plan.workers) - 1}, got {worker}")
    round_plan = read_round_plan(store, job_id, round_index)
    if segment_meta is None:
        state, meta = get_state_groups(store, job_id, round_index)
    else:
        meta = segment_meta
        state = ModelState({}, meta.phase, meta.n_iter, meta.converged, meta.inertia)
    groups = meta.groups
    sync_s = None
    sync_held = None
    if groups is not None and meta.from_partials:
        prior = [
            storage.train_partial_key(job_id, round_index - 1, i)
            for i in groups[group_of(groups, worker)]
        ]
        sync_held = sum(own_partial(store.bucket, k) is not None for k in prior)
    if groups is not None:
        # DS-Sync: this worker's part of its group's all-reduce (no reducer): read the partials of
        # its group of the round before and average them (round 0: the first model), seen as every
        # worker's (a read-only broadcast view, no copy), so the model's worker_step picks it as
        # the worker's own.
        t_sync = time.perf_counter()
        own = worker_params(store, job_id, round_index, state, worker, meta)
        sync_s = time.perf_counter() - t_sync
        n = len(plan.workers)
        state = state.with_arrays({k: np.broadcast_to(v, (n, *v.shape)) for k, v in own.items()})
    X, y = plan_xy(store, plan)
    io_s = time.perf_counter() - t_io
    batches = np.asarray(round_plan.batches, dtype=np.int64)

    model = model_for(spec.model)
    placement = resource_kind(resource_name) if resource_name else "lambda"
    # The GPU worker computes in PyTorch, a Lambda worker in numpy; torch is imported here,
    # before the timing: compute_s counts computation only.
    device = model.device("torch" if placement == "gpu" else "numpy")
    t0 = time.perf_counter()
    out = model.worker_step(spec, state, X, y, batches, worker, round_index, device)
    compute_s = time.perf_counter() - t0
    if groups is not None:
        # DS-Sync: the worker steps its own model (the first half of dssync_step), so that its
        # next round's group reads one object per member (the stepped model), not two.
        out = stepped_partial(own, out, float(spec.lr), float(spec.l2))

    stats = ShardStats(
        worker=worker,
        round=round_index,
        batch=int(batches[worker]),
        compute_s=compute_s,
        io_s=io_s,
        memory_mb=memory_mb,
        resource=resource_name or lambda_resource(memory_mb or 1),
        placement=placement,
        cold_start=cold,
        signature=signature(plan),
        started_at=started,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        pid=os.getpid(),
    )
    if device is not None:
        stats.device = device  # where the torch step ran: cpu (float64) or cuda (float32)
    if sync_s is not None:
        stats.sync_s = sync_s
    if sync_held is not None:
        stats.sync_held = sync_held
    if wait_s is not None:
        stats.wait_s = wait_s
    t1 = time.perf_counter()
    key = storage.train_partial_key(job_id, round_index, worker)
    stats.ended_at = time.time()
    body = json.dumps(stats.to_json_dict(), allow_nan=False)
    payload = {**out, "__stats__": np.array(body)}
    store.put_arrays(key, payload)
    if groups is not None:
        remember_partial(store.bucket, key, payload)
        # DS-Sync: the round's record is merged by the next TrainSchedule (or TrainFinalize) from
        # the workers' small records, not from their partials (fanfit.jobs.train.reduce.record_round)
        stats.io_s = io_s + time.perf_counter() - t1
        stats.ended_at = time.time()
        record = ShardRecord(stats=stats, loss=float(out["loss"]), n_samples=int(out["n_samples"]))
        store.put_json(
            storage.train_worker_record_key(job_id, round_index, worker), record.to_json_dict()
        )
    stats.io_s = io_s + time.perf_counter() - t1
    stats.ended_at = time.time()
    return ShardOutput(partial_key=key, **stats.to_json_dict()).to_json_dict()
