"""TrainReduce: merge a round's partials into the next model, record the round, decide whether
another round runs; under DS-Sync, one group's partials into the group's model (:func:`reduce_group`,
the groups in parallel) and then the groups' records into the round's (:func:`reduce_round`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.train import (
    GroupRecord,
    GroupReduceOutput,
    ReduceOutput,
    RoundPlan,
    RoundRecord,
    ShardStats,
    TrainPlan,
    WorkerRecord,
)
from fanfit.jobs.train.data import (
    get_state,
    put_group_state,
    put_state,
    read_plan,
    read_round_plan,
    stepped_parts,
)
from fanfit.sched.lbbsp import idle_fraction
from fanfit.train.models import model_for
from fanfit.train.sgd import WorkerGradient, average_params, reduce_gradients

__all__ = ["reduce_group", "reduce_round"]


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
    the ``B`` rows, however LB-BSP split them). The run ends after ``rounds``. Under DS-Sync the
    groups have already reduced, in parallel (:func:`reduce_group`); this reads only their records
    (no model, no partial), writes the round's record and the round's state (meta and groups) and
    decides whether another round runs.

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
        return _record_groups(store, records, job_id, round_index, plan, round_plan)
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
    records: storage.JobRecords,
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
    records.update(job_id, last_round=summary)
    return ReduceOutput(
        job_id=job_id, round=record.round + 1, has_next_round=next_phase != "done"
    ).to_json_dict()


def reduce_group(store: storage.JobStore, job_id: str, round_index: int, group: int) -> dict:
    """DS-Sync: merge one group's partials of round ``round_index`` into the group's next model.

    The group ``G = groups[group]`` of the round (:attr:`RoundPlan.groups`, drawn by
    :func:`fanfit.sched.dssync.dssync_groups`) reads only its members' partials
    (``train_partial_key`` of each ``i`` in ``G``: each member's model already stepped with its
    gradient by the worker, :func:`fanfit.jobs.train.data.stepped_partial`) and writes one model,
    the second half of :func:`fanfit.train.sgd.dssync_step` restricted to the group:
    :math:`\\sum_{j \\in G} (b_j / B_G)\\, \\mathrm{step}(w_j, g_j)`, the group's state of
    round ``round_index + 1`` (``train_group_state_key``), which the group's members read in the
    next round. The groups of a round run in parallel (the ASL's Map over groups); as
    ``dssync_step`` treats each group apart, the models are those of one reduce over all groups,
    bit for bit. The group's record
    (:class:`~fanfit.jobs.documents.train.GroupRecord`, ``train_group_record_key``) keeps its
    members' statistics and losses for the round's record (:func:`reduce_round`).

    Parameters
    ----------
    group : int
        Index into the round's groups (0 <= group < number of groups).

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.GroupReduceOutput`: ``job_id, round, group,
        record_key``.

    Raises
    ------
    InvalidJobError
        Not a DS-Sync job, a group index outside the round's groups, or a member's partial
        missing.
    """
    plan = read_plan(store, job_id)
    spec = plan.spec
    if spec.sync != "ds-sync":
        raise InvalidJobError(
            f"a group reduce needs sync 'ds-sync'; job {job_id} has {spec.sync!r}"
        )
    round_plan = read_round_plan(store, job_id, round_index)
    if not 0 <= group < len(round_plan.groups):
        raise InvalidJobError(
            f"group must be in 0..{len(round_plan.groups) - 1} in round {round_index}, got {group}"
        )
    members = [int(i) for i in round_plan.groups[group]]
    stepped: list[dict[str, np.ndarray]] = []
    losses: list[float] = []
    n_samples: list[int] = []
    workers: list[WorkerRecord] = []
    for i in members:
        part, stat = _read_partial(store, job_id, round_index, i)
        model, loss, n = stepped_parts(part)
        stepped.append(model)
        losses.append(loss)
        n_samples.append(n)
        workers.append(_worker_record(stat, round_plan))
    # dssync_step's weights b_j / B_G (equal when the group has no samples), then its average
    b = np.asarray(n_samples, dtype=np.float64)
    weights = b / b.sum() if b.sum() > 0 else np.full(b.size, 1.0 / b.size)
    merged = average_params(stepped, weights)
    model_key = store.put_arrays(
        storage.train_group_state_key(job_id, round_index + 1, group), merged
    )
    record = GroupRecord(
        round=round_index,
        group=group,
        members=members,
        workers=workers,
        losses=losses,
        n_samples=n_samples,
        model_key=model_key,
    )
    key = store.put_json(
        storage.train_group_record_key(job_id, round_index, group), record.to_json_dict()
    )
    return GroupReduceOutput(
        job_id=job_id, round=round_index, group=group, record_key=key
    ).to_json_dict()


def _record_groups(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    round_index: int,
    plan: TrainPlan,
    round_plan: RoundPlan,
) -> dict:
    """DS-Sync's round reduce after its group reduces: merge the groups' records (small JSON
    objects, no model) into the round's record and write the round's state (meta and groups,
    :func:`fanfit.jobs.train.data.put_group_state`). The loss is the batch-weighted mean of the
    workers' losses, :func:`fanfit.train.sgd.reduce_gradients`' as in a single reduce."""
    spec = plan.spec
    state = get_state(store, job_id, round_index)
    by_worker: dict[int, tuple[WorkerRecord, float, int]] = {}
    for g in range(len(round_plan.groups)):
        key = storage.train_group_record_key(job_id, round_index, g)
        if not store.exists(key):
            raise InvalidJobError(f"round {round_index}: group {g} wrote no record ({key})")
        part = GroupRecord.parse(store.get_json(key), source=key)
        for w, loss, n_samples in zip(part.workers, part.losses, part.n_samples):
            by_worker[w.worker] = (w, loss, n_samples)
    n = len(plan.workers)
    if sorted(by_worker) != list(range(n)):
        raise InvalidJobError(
            f"round {round_index}: the groups' records cover workers {sorted(by_worker)}, "
            f"not 0..{n - 1}"
        )
    workers = [by_worker[i][0] for i in range(n)]
    record = _round_record(round_index, state.phase, workers, round_plan)
    record.loss = float(
        reduce_gradients(
            [WorkerGradient({}, by_worker[i][1], by_worker[i][2]) for i in range(n)]
        ).loss
    )
    n_iter = state.n_iter + 1
    phase = "done" if n_iter >= int(spec.rounds) else "train"
    store.put_json(storage.train_round_key(job_id, round_index), record.to_json_dict())
    put_group_state(
        store, job_id, round_index + 1, {"phase": phase, "n_iter": n_iter}, round_plan.groups
    )
    return _finish_round(records, job_id, record, round_plan, phase)
