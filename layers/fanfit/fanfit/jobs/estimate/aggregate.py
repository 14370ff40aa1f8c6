"""Aggregate: gather every shard's predictions, compute the estimate and write ``result.json``."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from fanfit import dml, storage
from fanfit.cost.pricing import LAMBDA_USD_PER_GB_SECOND, LAMBDA_USD_PER_REQUEST, lambda_cost_usd
from fanfit.dml import overlap
from fanfit.dml.combined import PartScores, combine_parts
from fanfit.dml.interop import predictions_to_arrays
from fanfit.dml.models import model_def
from fanfit.errors import InvalidJobError
from fanfit.jobs import sharing
from fanfit.jobs.documents.estimate import (
    AggregateOutput,
    AggregateStats,
    ClientEstimate,
    CombinedResult,
    EstimatePlan,
    EstimateResultDoc,
    EstimateSpec,
    EstimateTimings,
    PartResult,
    ShardStats,
    StepRecord,
    WaveEntry,
)
from fanfit.jobs.estimate.data import (
    gather_outputs,
    load,
    peak_rss_mb,
    read_plan,
    read_schedule,
    read_shards,
    shard_stats,
    stage_outputs,
)


def aggregate_job(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    plan_key: str,
    execution_arn: str = "",
    memory_mb: int = 0,
    partitions: storage.Partitions | None = None,
) -> AggregateOutput:
    """Turn the out-of-fold predictions of every stage into the estimate.

    Writes the assembled out-of-fold predictions to :func:`fanfit.storage.predictions_key` (one
    array of shape (n_obs, n_rep) per treatment and learner, :func:`fanfit.dml.interop.
    predictions_to_arrays`), then ``result.json``
    (:class:`~fanfit.jobs.documents.estimate.EstimateResultDoc`: :meth:`fanfit.dml.DMLResult.to_dict`
    with the nuisance losses (:func:`fanfit.dml.losses.nuisance_loss`, computed there), plus ``job_id``,
    ``execution_arn``, ``predictions_key``, ``folds_key``, ``spec``, the propensity overlap of IRM
    and IIVM (:func:`fanfit.dml.overlap.propensity_overlap`) and ``timings``: per-shard
    statistics, billed GB-seconds and the estimated Lambda cost in USD; in a job of several parts
    every part's estimate in ``parts`` and, for ``qte`` and ``apos``, the model's combined result
    in ``combined``: :func:`fanfit.dml.combined.combine_parts` of the parts' scores, bootstrapped
    with the spec's ``boot_method`` and ``n_rep_boot``), then marks the job record
    SUCCEEDED and, given the stack's ``partitions``, releases the job's partition to the jobs
    still running (:func:`fanfit.jobs.sharing.release_job`).

    Returns
    -------
    AggregateOutput
        The job id and the key of ``result.json`` (:func:`fanfit.storage.result_key`).

    Raises
    ------
    InvalidJobError
        A unit's predictions are missing; InvalidDocumentError when a document does not parse.
    """
    started = time.time()
    plan = read_plan(store, plan_key)
    outputs = stage_outputs(store, job_id, range(plan.n_stages))
    results, scores = [], []
    for part in range(len(plan.specs)):
        doc, res = _aggregate_part(store, job_id, plan, part, outputs)
        results.append(doc)
        if plan.parts and res is not None:
            scores.append(PartScores.of(res))
        del res
    del outputs
    combined = _combined(store, job_id, plan, scores) if plan.parts else None
    del scores

    shards: list[ShardStats] = []
    gb_s = usd = 0.0
    for stage in range(plan.n_stages):
        for key, arrays in read_shards(store, job_id, stage):
            stats = shard_stats(arrays, key)
            g, u = lambda_cost_usd(stats.ended_at - stats.started_at, stats.memory_mb)
            shards.append(stats.model_copy(update={"billed_gb_s": g}))
            gb_s, usd = gb_s + g, usd + u
        prep_key = storage.prepare_record_key(job_id, stage)
        prep = StepRecord.parse(store.get_json(prep_key), source=prep_key)
        steps: list[StepRecord | WaveEntry] = [prep, *read_schedule(store, job_id, stage).waves]
        for step in steps:
            g, u = lambda_cost_usd(step.ended_at - step.started_at, step.memory_mb)
            gb_s, usd = gb_s + g, usd + u
    g, u = lambda_cost_usd(time.time() - started, memory_mb)
    gb_s, usd = gb_s + g, usd + u

    parts = None
    if plan.parts:
        parts = [
            PartResult(
                **part,
                label=label,
                job_id=job_id,
                execution_arn=execution_arn,
                folds_key=plan.part_folds_key(k),
            )  # fmt: skip
            for k, (part, label) in enumerate(zip(results, plan.labels, strict=True))
        ]
    out = EstimateResultDoc(
        **results[0],
        job_id=job_id,
        execution_arn=execution_arn,
        folds_key=plan.folds_key,
        parts=parts,
        combined=combined,
        timings=EstimateTimings(
            shards=shards,
            billed_gb_s=gb_s,
            lambda_cost_usd=usd,
            aggregate=AggregateStats(memory_mb=memory_mb, peak_rss_mb=peak_rss_mb()),
            price_usd_per_gb_s=LAMBDA_USD_PER_GB_SECOND,
            price_usd_per_request=LAMBDA_USD_PER_REQUEST,
        ),
    )
    key = store.put_json(storage.result_key(job_id), out.to_json_dict())
    records.mark_succeeded(job_id, key)
    sharing.release_job(partitions, job_id)
    return AggregateOutput(job_id=job_id, result_key=key)


def _combined(
    store: storage.JobStore, job_id: str, plan: EstimatePlan, scores: list[PartScores]
) -> CombinedResult | None:
    """The model's combined result of a job of several parts, bootstrapped as its spec
    (``spec.json``: ``boot_method``, ``n_rep_boot``) says; None for a model without one."""
    key = storage.spec_key(job_id)
    spec = EstimateSpec.parse(store.get_json(key), source=key)
    combined = combine_parts(plan.model, plan.specs, scores, boot_method=spec.boot_method,
                             n_rep_boot=spec.n_rep_boot or 500)  # fmt: skip
    return None if combined is None else CombinedResult.parse(combined.to_dict(), source="combined")


def _aggregate_part(
    store: storage.JobStore,
    job_id: str,
    plan: EstimatePlan,
    part: int,
    outputs: dict[int, dict[str, np.ndarray]],
) -> tuple[dict[str, Any], dml.DMLResult | None]:
    """One part's estimate (the job's one in a job of one): :func:`fanfit.dml.aggregate` of its
    predictions, which it writes to :func:`fanfit.storage.predictions_key` of the part (a model
    whose estimate the client computes: the client's, :func:`_client_part`).

    Returns
    -------
    dict
        :meth:`fanfit.dml.DMLResult.to_dict` with ``predictions_key``, ``spec`` and
        ``propensity_overlap`` (the fields of :class:`~fanfit.jobs.documents.estimate.
        EstimateResultDoc` that are the part's own).
    DMLResult
        The estimate, with its score values (for the combined result).
    """
    spec = plan.spec(part)
    data, folds = load(store, plan, part)
    preds, _ = gather_outputs(store, job_id, spec, data, folds, range(plan.n_stages),
                              part=part, outputs=outputs)  # fmt: skip
    if model_def(spec.model).client_inputs:
        return _client_part(store, job_id, spec, data, part, preds)
    # the estimate, its nuisance losses and (with boot_method) its bootstrap: dml.aggregate
    result = dml.aggregate(spec, data, folds, preds)
    # the predictions the estimate was aggregated from, for DoubleML's external_predictions
    predictions = result.predictions or preds
    key = store.put_arrays(
        storage.predictions_key(job_id, part), predictions_to_arrays(spec.d_cols, predictions)
    )
    return {
        **result.to_dict(),
        "predictions_key": key,
        "spec": spec.to_dict(),
        "propensity_overlap": overlap.propensity_overlap(spec, data, predictions),
    }, result


def _client_part(
    store: storage.JobStore,
    job_id: str,
    spec: dml.DMLSpec,
    data: dml.DMLData,
    part: int,
    preds: dict[str, np.ndarray],
) -> tuple[dict[str, Any], None]:
    """The part of a model whose estimate the client computes (``ModelDef.client_inputs``:
    RDFlex's rdrobust): its predictions stored, the client's estimate
    (:class:`~fanfit.jobs.documents.estimate.ClientEstimate`, sent before this step) as the
    part's fields.

    Raises
    ------
    InvalidJobError
        The client's estimate is missing.
    """
    key = storage.client_estimate_key(job_id)
    if not store.exists(key):
        raise InvalidJobError(
            f"job {job_id}: model {spec.model!r} takes its estimate from the client, which sent "
            f"none ({key})."
        )
    estimate = ClientEstimate.parse(store.get_json(key), source=key)
    pred_key = store.put_arrays(
        storage.predictions_key(job_id, part), predictions_to_arrays(spec.d_cols, preds)
    )
    return {
        **estimate.to_json_dict(),
        "model": spec.model,
        "score": spec.score,
        "n_obs": int(data.n_obs),
        "n_folds": int(spec.n_cross_folds),
        "n_rep": int(spec.n_rep),
        "predictions_key": pred_key,
        "spec": spec.to_dict(),
    }, None
