"""TrainFinalize: write ``result.json`` from the last model and the round records; mark the job
SUCCEEDED and release its partition."""

from __future__ import annotations

import time
from typing import Any

from fanfit import storage
from fanfit.cost.pricing import LAMBDA_USD_PER_GB_SECOND, lambda_cost_usd
from fanfit.errors import InvalidJobError
from fanfit.jobs import sharing
from fanfit.jobs.documents.train import FinalizeOutput, RoundRecord, TrainResult
from fanfit.jobs.train.data import full_state, read_plan
from fanfit.jobs.train.reduce import record_segment
from fanfit.train.models import model_for

__all__ = ["finalize_job"]


def finalize_job(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    round_index: int,
    execution_arn: str = "",
    memory_mb: int = 0,
    partitions: storage.Partitions | None = None,
) -> dict:
    """Write ``result.json`` from the last model and the round records; mark the job SUCCEEDED and,
    given the stack's ``partitions``, release its partition (:func:`fanfit.jobs.sharing.release_job`).

    Parameters
    ----------
    store, records : JobStore, JobRecords
    job_id : str
    round_index : int
        The round whose model is final (the ``round`` Reduce last returned, or under DS-Sync the
        last TrainSchedule's ``advance``: the last segment's rounds are then recorded here first,
        :func:`fanfit.jobs.train.reduce.record_segment`).
    execution_arn : str
    memory_mb : int
        This function's memory, MB (for the cost).

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.FinalizeOutput`, ``{"job_id": str, "result_key":
        str}``. The result (:class:`~fanfit.jobs.documents.train.TrainResult`) holds ``model``,
        ``features``, ``target``, ``n_obs``, ``n_workers``, ``worker_memory_mb``, ``balance``,
        ``sync``; the model's fields (:meth:`fanfit.train.model.TrainModel.finalize`):
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
    plan = read_plan(store, job_id)
    spec = plan.spec
    if (
        spec.sync == "ds-sync"
        and round_index
        and not store.exists(storage.train_state_key(job_id, round_index))
    ):
        # DS-Sync has no reduce: the last segment's rounds are recorded here (its workers' small
        # records)
        record_segment(store, records, job_id, round_index)
    # DS-Sync's one global merge: every group's average of its last partials (full_state), then
    # averaged over the workers by the model's finalize (fanfit.train.sgd.average_params).
    state = full_state(store, job_id, round_index)
    if state.phase != "done":
        raise InvalidJobError(f"round {round_index}'s model is not final (phase {state.phase})")
    rounds = []
    for r in range(round_index):
        key = storage.train_round_key(job_id, r)
        rounds.append(RoundRecord.parse(store.get_json(key), source=key))
    fields: dict[str, Any] = model_for(spec.model).finalize(
        spec, state, plan.classes, [r.loss for r in rounds]
    )
    gb_s = usd = 0.0
    for rec in rounds:
        for w in rec.workers:
            g, u = lambda_cost_usd(w.ended_at - w.started_at, int(w.memory_mb) or 1)
            gb_s, usd = gb_s + g, usd + u
    g, u = lambda_cost_usd(time.time() - started, memory_mb or 1)
    result = TrainResult(
        job_id=job_id,
        execution_arn=execution_arn,
        model=spec.model,
        features=list(spec.features),
        target=spec.target,
        n_obs=plan.n_obs,
        n_workers=len(plan.workers),
        worker_memory_mb=list(spec.worker_memory_mb),
        balance=spec.balance,
        sync=spec.sync,
        mean=plan.mean,
        scale=plan.scale,
        **fields,
        rounds=rounds,
        timings={
            "round_s": [r.round_s for r in rounds],
            "idle_fraction": [r.idle_fraction for r in rounds],
            "billed_gb_s": gb_s + g,
            "lambda_cost_usd": usd + u,
            "price_usd_per_gb_s": LAMBDA_USD_PER_GB_SECOND,
        },
    )
    key = store.put_json(storage.result_key(job_id), result.to_json_dict())
    records.mark_succeeded(job_id, key)
    sharing.release_job(partitions, job_id)
    return FinalizeOutput(job_id=job_id, result_key=key).to_json_dict()
