"""TrainReduce: merge a round's partials into the next model, record the round, decide whether
another round runs (BSP, K-Means). DS-Sync has no reduce: its workers average within their groups
at the start of the next round, and :func:`record_round` (called by the next TrainSchedule or by
TrainFinalize) merges only the workers' small records into the round's record."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidJobError, JobNotFoundError
from fanfit.jobs.documents.train import (
    ReduceOutput,
    RoundPlan,
    RoundRecord,
    ShardRecord,
    ShardStats,
    TrainSpec,
    WorkerRecord,
)
from fanfit.jobs.train.data import (
    get_state,
    put_group_state,
    put_state,
    read_plan,
    read_round_plan,
)
from fanfit.sched.lbbsp import idle_fraction
from fanfit.train.models import model_for
from fanfit.train.sgd import WorkerGradient, reduce_gradients

__all__ = ["dssync_phase", "record_round", "record_segment", "reduce_round"]

#: Threads reading a DS-Sync round's worker records at once (:func:`record_round`).
_RECORD_READERS = 16


def dssync_phase(n_iter: int, spec: TrainSpec) -> str:
    """The phase of a DS-Sync model after ``n_iter`` steps: ``'done'`` once ``spec.rounds``
    rounds ran, ``'train'`` before."""
    return "done" if n_iter >= int(spec.rounds) else "train"


def reduce_round(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    round_index: int,
) -> dict:
    """Merge the workers' partials of round ``round_index`` into the model of the next round.

    The merge is the model's :meth:`fanfit.train.model.TrainModel.reduce`. K-Means:
    :func:`fanfit.train.kmeans.kmeans_reduce` (exact Lloyd M-step); when it converges strictly (no
    label changed) the run ends; when it converges by ``tol`` or reaches ``rounds``, one more
    round runs the final E-step (inertia of the final centroids, as scikit-learn does). SGD: BSP
    :func:`fanfit.train.sgd.reduce_gradients` then :func:`~fanfit.train.sgd.sgd_step` (one step on
    the ``B`` rows, however LB-BSP split them). The run ends after ``rounds``. A DS-Sync round has
    no reduce in its execution; given one, this only records it (:func:`record_round`).

    The round record (``rounds/<r>/record.json``, :class:`~fanfit.jobs.documents.train.RoundRecord`)
    holds per worker its batch, compute and I/O seconds, throughput (samples/s), memory and cold
    start; and the round's time ``round_s`` (the barrier's compute time, ``max_i t_i``), its
    ``idle_fraction`` (``1 - mean(t)/max(t)``, :func:`fanfit.sched.lbbsp.idle_fraction`),
    ``span_s`` (first worker start to last worker end, with I/O), and the loss (SGD) or inertia
    (K-Means) under the round's model.

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.ReduceOutput`: ``job_id, round`` (the next round)
        and ``has_next_round``.

    Raises
    ------
    InvalidJobError
        A worker's partial is missing.
    """
    plan = read_plan(store, job_id)
    spec = plan.spec
    round_plan = read_round_plan(store, job_id, round_index)
    if spec.sync == "ds-sync":
        return record_round(store, records, job_id, round_index)
    state = get_state(store, job_id, round_index)
    n = len(plan.workers)
    parts: list[dict[str, np.ndarray]] = []
    stats: list[ShardStats] = []
    for i in range(n):
        part, stat = _read_partial(store, job_id, round_index, i)
        parts.append(part)
        stats.append(stat)
    workers = [_worker_record(s, round_plan) for s in stats]
    record = _round_record(round_index, state.phase, workers, round_plan)
    nxt, fields = model_for(spec.model).reduce(spec, state, parts, round_plan.groups)
    for name, value in fields.items():
        setattr(record, name, value)

    store.put_json(storage.train_round_key(job_id, round_index), record.to_json_dict())
    put_state(store, job_id, round_index + 1, nxt)
    return _finish_round(records, job_id, record, round_plan, nxt.phase)


def _read_partial(
    store: storage.JobStore, job_id: str, round_index: int, worker: int
) -> tuple[dict[str, np.ndarray], ShardStats]:
    """Worker ``worker``'s partial of the round (its arrays) and its statistics."""
    key = storage.train_partial_key(job_id, round_index, worker)
    if not store.exists(key):
        raise InvalidJobError(f"round {round_index}: worker {worker} wrote no partial ({key})")
    obj = store.get_arrays(key)
    stats = ShardStats.parse(json.loads(str(obj.pop("__stats__"))), source=key)
    return obj, stats


def _worker_record(s: ShardStats, round_plan: RoundPlan) -> WorkerRecord:
    w = WorkerRecord(
        worker=s.worker,
        memory_mb=s.memory_mb,
        resource=s.resource,
        batch=s.batch,
        compute_s=s.compute_s,
        io_s=s.io_s,
        samples_per_s=s.batch / s.compute_s if s.compute_s > 0 else None,
        predicted_samples_per_s=round_plan.predicted_samples_per_s[s.worker],
        cold_start=s.cold_start,
        started_at=s.started_at,
        ended_at=float(s.ended_at if s.ended_at is not None else s.started_at),
        peak_rss_mb=s.peak_rss_mb,
    )
    if "device" in s.model_fields_set:
        w.device = s.device
    if s.sync_s is not None:
        w.sync_s = s.sync_s
    if s.sync_held is not None:
        w.sync_held = s.sync_held
    if s.wait_s is not None:
        w.wait_s = s.wait_s
    return w


def _round_record(
    round_index: int, phase: str, workers: list[WorkerRecord], round_plan: RoundPlan
) -> RoundRecord:
    times = [max(float(w.compute_s), 0.0) for w in workers]
    record = RoundRecord(
        round=round_index,
        phase=phase,  # type: ignore[arg-type]
        workers=workers,
        round_s=max(times),
        idle_fraction=idle_fraction(times) if max(times) > 0 else 0.0,
        span_s=max(w.ended_at for w in workers) - min(w.started_at for w in workers),
        groups=round_plan.groups,
        prediction_source=round_plan.prediction_source,
    )
    if round_plan.dispatch is not None:
        record.dispatch = round_plan.dispatch
    return record


def _finish_round(
    records: storage.JobRecords | None,
    job_id: str,
    record: RoundRecord,
    round_plan: RoundPlan,
    next_phase: str,
) -> dict:
    """Update the job's ``last_round`` from the round's record; the ReduceOutput."""
    summary: dict[str, Any] = {
        "round": record.round,
        "phase": record.phase,
        "round_s": record.round_s,
        "idle_fraction": record.idle_fraction,
        "batches": round_plan.batches,
    }
    if round_plan.dispatch is not None:  # a hybrid round: samples sent to Lambda and to the GPU
        summary["dispatch"] = {
            "rule": round_plan.dispatch.rule,
            "V": round_plan.dispatch.V,
            **{q.name: q.samples for q in round_plan.dispatch.queues},
        }
    if records is not None:
        records.update(job_id, last_round=summary)
    return ReduceOutput(
        job_id=job_id, round=record.round + 1, has_next_round=next_phase != "done"
    ).to_json_dict()


def record_round(
    store: storage.JobStore,
    records: storage.JobRecords | None,
    job_id: str,
    round_index: int,
) -> dict:
    """DS-Sync: record round ``round_index`` from its workers' small records; no model is read.

    DS-Sync (Wang et al. 2020) has no reducer: each worker averages its group's partials at the
    start of the next round (:func:`fanfit.jobs.train.data.group_average`). What is left to merge
    is the round's record: this reads the N workers' :class:`~fanfit.jobs.documents.train.ShardRecord`
    objects (``train_worker_record_key``, a few hundred bytes each), writes the round's record
    (:class:`~fanfit.jobs.documents.train.RoundRecord`; its loss the batch-weighted mean of the
    workers' losses, :func:`fanfit.train.sgd.reduce_gradients`' as in one reduce) and then the
    state of round ``round_index + 1`` (meta and groups only, ``from_partials``,
    :func:`fanfit.jobs.train.data.put_group_state`), which marks the round as done for resume.
    Run by the TrainSchedule of round ``round_index + 1``, or by TrainFinalize after the last round;
    a second call rewrites the same objects.

    Parameters
    ----------
    records : JobRecords or None
        The job table, to update the job's ``last_round``; None: not updated.

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.ReduceOutput`: ``job_id, round`` (the next round)
        and ``has_next_round``.

    Raises
    ------
    InvalidJobError
        Not a DS-Sync job, or a worker's record missing.
    """
    plan = read_plan(store, job_id)
    spec = plan.spec
    if spec.sync != "ds-sync":
        raise InvalidJobError(
            f"only a DS-Sync round is recorded from its workers' records; job {job_id} has "
            f"sync {spec.sync!r}"
        )
    round_plan = read_round_plan(store, job_id, round_index)
    state = get_state(store, job_id, round_index)
    n = len(plan.workers)

    def read(i: int) -> ShardRecord:
        key = storage.train_worker_record_key(job_id, round_index, i)
        try:
            return ShardRecord.parse(store.get_json(key), source=key)
        except JobNotFoundError as exc:
            raise InvalidJobError(
                f"round {round_index}: worker {i} wrote no record ({key})"
            ) from exc

    # N small GETs at once (threads), not one after the other: they are the round's only merge
    with ThreadPoolExecutor(max_workers=min(n, _RECORD_READERS)) as pool:
        shards = list(pool.map(read, range(n)))
    workers = [_worker_record(s.stats, round_plan) for s in shards]
    record = _round_record(round_index, state.phase, workers, round_plan)
    record.loss = float(
        reduce_gradients([WorkerGradient({}, s.loss, s.n_samples) for s in shards]).loss
    )
    n_iter = state.n_iter + 1
    phase = dssync_phase(n_iter, spec)
    store.put_json(storage.train_round_key(job_id, round_index), record.to_json_dict())
    put_group_state(
        store,
        job_id,
        round_index + 1,
        {"phase": phase, "n_iter": n_iter},
        round_plan.groups,
        from_partials=True,
    )
    return _finish_round(records, job_id, record, round_plan, phase)


def record_segment(
    store: storage.JobStore,
    records: storage.JobRecords | None,
    job_id: str,
    round_index: int,
) -> list[int]:
    """DS-Sync: record every round of the segment that ended with round ``round_index - 1``.

    A segment (:func:`fanfit.jobs.train.schedule.segment_rounds`) runs rounds ``f .. f + K - 1``
    in one Map (``f`` = the last round plan's ``segment_first``); no state runs between them, so
    the TrainSchedule after it (or TrainFinalize) records them here, in ascending order, each by
    :func:`record_round` (which writes round ``s + 1``'s state, read by round ``s + 1``'s
    record). A round whose next state exists is already recorded and skipped (a retry, a resumed
    execution). A segment of one round: :func:`record_round` of ``round_index - 1`` alone.

    Returns
    -------
    list of int
        The rounds recorded now.

    Raises
    ------
    InvalidJobError
        Not a DS-Sync job, or a worker's record missing.
    """
    last = read_round_plan(store, job_id, round_index - 1)
    first = last.segment_first if last.segment_first is not None else round_index - 1
    done = []
    for s in range(first, round_index):
        if not store.exists(storage.train_state_key(job_id, s + 1)):
            record_round(store, records, job_id, s)
            done.append(s)
    return done
