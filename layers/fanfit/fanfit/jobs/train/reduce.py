"""TrainReduce: merge a round's partials into the next model, record the round, decide whether
another round runs."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.train import ReduceOutput, RoundRecord, ShardStats, WorkerRecord
from fanfit.jobs.train.data import get_state, put_state, read_plan, read_round_plan
from fanfit.sched.lbbsp import idle_fraction
from fanfit.train.models import model_for

__all__ = ["reduce_round"]


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
    the ``B`` rows, however LB-BSP split them); DS-Sync :func:`~fanfit.train.sgd.dssync_step` in
    the round's groups. The run ends after ``rounds``.

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
    state = get_state(store, job_id, round_index)
    n = len(plan.workers)
    parts: list[dict[str, np.ndarray]] = []
    stats: list[ShardStats] = []
    for i in range(n):
        key = storage.train_partial_key(job_id, round_index, i)
        if not store.exists(key):
            raise InvalidJobError(f"round {round_index}: worker {i} wrote no partial ({key})")
        obj = store.get_arrays(key)
        stats.append(ShardStats.parse(json.loads(str(obj.pop("__stats__"))), source=key))
        parts.append(obj)

    times = [max(float(s.compute_s), 0.0) for s in stats]
    workers = []
    for i, s in enumerate(stats):
        w = WorkerRecord(
            worker=i,
            memory_mb=s.memory_mb,
            resource=s.resource,
            batch=s.batch,
            compute_s=s.compute_s,
            io_s=s.io_s,
            samples_per_s=s.batch / s.compute_s if s.compute_s > 0 else None,
            predicted_samples_per_s=round_plan.predicted_samples_per_s[i],
            cold_start=s.cold_start,
            started_at=s.started_at,
            ended_at=float(s.ended_at if s.ended_at is not None else s.started_at),
            peak_rss_mb=s.peak_rss_mb,
        )
        if "device" in s.model_fields_set:
            w.device = s.device
        workers.append(w)
    record = RoundRecord(
        round=round_index,
        phase=state.phase,  # type: ignore[arg-type]
        workers=workers,
        round_s=max(times),
        idle_fraction=idle_fraction(times) if max(times) > 0 else 0.0,
        span_s=max(w.ended_at for w in workers) - min(s.started_at for s in stats),
        groups=round_plan.groups,
        prediction_source=round_plan.prediction_source,
    )
    if round_plan.dispatch is not None:
        record.dispatch = round_plan.dispatch

    nxt, fields = model_for(spec.model).reduce(spec, state, parts, round_plan.groups)
    for name, value in fields.items():
        setattr(record, name, value)

    store.put_json(storage.train_round_key(job_id, round_index), record.to_json_dict())
    put_state(store, job_id, round_index + 1, nxt)
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
        job_id=job_id, round=round_index + 1, has_next_round=nxt.phase != "done"
    ).to_json_dict()
