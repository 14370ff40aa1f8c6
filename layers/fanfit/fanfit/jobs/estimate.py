"""The server-side steps of an estimate job, one function per Lambda.

Each step takes S3 keys and small numbers, reads what it needs through :class:`~fanfit.storage.JobStore`,
calls into :mod:`fanfit.dml` and returns S3 keys and small numbers: no data and no predictions travel
in Step Functions state (its limit is 256 KB).

- :func:`prepare_stage` (Prepare): stage 0 validates the spec and the data, draws or checks the folds
  and writes the plan; every stage writes its shard list (the Distributed Map's ItemReader input).
- :func:`crossfit_shard` (CrossFit): fits the units of one shard and writes their out-of-fold
  predictions to one object.
- :func:`aggregate_job` (Aggregate): gathers every shard's predictions, computes the estimate and
  writes ``result.json``.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from functools import lru_cache
from typing import Any

import numpy as np

from fanfit import dml, storage
from fanfit.errors import InvalidJobError
from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY, deal, n_shards_for

#: AWS Lambda price (x86, first tier, us-east-1), https://aws.amazon.com/lambda/pricing/
LAMBDA_USD_PER_GB_SECOND = 0.0000166667
#: AWS Lambda price per request (x86, us-east-1), https://aws.amazon.com/lambda/pricing/
LAMBDA_USD_PER_REQUEST = 0.20 / 1_000_000


def lambda_cost_usd(duration_s: float, memory_mb: int) -> tuple[float, float]:
    """Billed GB-seconds and USD of one invocation.

    Lambda bills duration rounded up to the millisecond, times the configured memory in GB, plus a
    per-request charge (https://aws.amazon.com/lambda/pricing/).

    Parameters
    ----------
    duration_s : float
        Handler duration in seconds.
    memory_mb : int
        Configured memory in MB.

    Returns
    -------
    (gb_seconds, usd) : tuple of float
    """
    billed_s = math.ceil(max(duration_s, 0.0) * 1000.0) / 1000.0
    gb_s = billed_s * memory_mb / 1024.0
    return gb_s, gb_s * LAMBDA_USD_PER_GB_SECOND + LAMBDA_USD_PER_REQUEST


@lru_cache(maxsize=8)
def _cached_data(bucket: str, key: str) -> tuple[tuple[str, ...], np.ndarray]:
    # Data objects are content-addressed, so a warm environment may keep them between shards.
    columns, values = storage.JobStore(bucket).get_data(key)
    values.setflags(write=False)
    return tuple(columns), values


@lru_cache(maxsize=8)
def _cached_folds(bucket: str, key: str) -> np.ndarray:
    # A job's folds never change once Prepare has written them.
    folds = storage.JobStore(bucket).get_array(key)
    folds.setflags(write=False)
    return folds


def _load(
    store: storage.JobStore, plan: dict[str, Any]
) -> tuple[dml.DMLSpec, dml.DMLData, np.ndarray]:
    spec = dml.DMLSpec.from_dict(plan["dml"])
    columns, values = _cached_data(store.bucket, plan["data_key"])
    data = dml.validate_data(spec, list(columns), values)
    folds = _cached_folds(store.bucket, plan["folds_key"])
    return spec, data, folds


def prepare_stage(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    spec_key: str,
    stage: int,
    execution_arn: str = "",
    memory_mb: int = 0,
) -> dict[str, Any]:
    """Plan one stage of an estimate job.

    Stage 0 validates the spec (:class:`fanfit.dml.DMLSpec`) and the data, writes the folds (drawn from
    the seed, or the validated folds the client uploaded) and the plan, and marks the job RUNNING.
    A later stage computes its inputs from the predictions of the stages before it
    (:func:`fanfit.dml.stage_inputs`). Every stage writes its shard list.

    Parameters
    ----------
    store, records : JobStore, JobRecords
    job_id : str
    spec_key : str
        Key of the client's spec: ``{"dml": DMLSpec dict, "data_key": str, "folds_key": str | None,
        "max_concurrency": int | None, "units_per_shard": int | None}``.
    stage : int
        0 for the first stage.
    execution_arn : str
        The Step Functions execution, recorded in the job record.
    memory_mb : int
        The function's configured memory (for the cost estimate).

    Returns
    -------
    dict
        ``job_id, spec_key, plan_key, stage, shards_key, n_shards, max_concurrency, has_next_stage,
        next_stage, map_runs_prefix`` (where the Distributed Map's ResultWriter writes).

    Raises
    ------
    InvalidJobError, InvalidDataError, InvalidFoldsError, InvalidLearnerError
        When the spec, the data or the folds are wrong (the execution then fails with that name).
    """
    started = time.time()
    if stage == 0:
        plan = _write_plan(store, job_id, spec_key)
        records.mark_running(
            job_id,
            execution_arn=execution_arn,
            model=plan["dml"]["model"],
            score=plan["dml"]["score"],
            n_stages=plan["n_stages"],
        )
    else:
        plan = store.get_json(storage.plan_key(job_id))
        if not 0 < stage < plan["n_stages"]:
            raise InvalidJobError(f"stage must be in 1..{plan['n_stages'] - 1}, got {stage}")
    spec, data, folds = _load(store, plan)

    if stage > 0:
        preds = _gather_predictions(store, job_id, spec, data, folds, stages=range(stage))
        store.put_json(
            storage.stage_inputs_key(job_id, stage),
            dml.stage_inputs(spec, stage, data, folds, preds),
        )
    units = dml.fit_units(spec, stage)
    shards = deal(units, n_shards_for(len(units), plan["max_concurrency"], plan["units_per_shard"]))
    items = [
        {"shard_id": f"{i:05d}", "units": [u.to_dict() for u in shard]}
        for i, shard in enumerate(shards)
    ]
    key = store.put_json(storage.shards_key(job_id, stage), items)
    store.put_json(
        f"{storage.job_prefix(job_id)}stages/{stage}/prepare.json",
        {
            "started_at": started,
            "ended_at": time.time(),
            "memory_mb": memory_mb,
            "n_units": len(units),
            "n_shards": len(items),
        },
    )
    return {
        "job_id": job_id,
        "spec_key": spec_key,
        "plan_key": storage.plan_key(job_id),
        "stage": stage,
        "shards_key": key,
        "n_shards": len(items),
        "max_concurrency": min(plan["max_concurrency"], len(items)),
        "has_next_stage": stage + 1 < plan["n_stages"],
        "next_stage": stage + 1,
        "map_runs_prefix": f"{storage.job_prefix(job_id)}map-runs/{stage}",
    }


def _write_plan(store: storage.JobStore, job_id: str, spec_key: str) -> dict[str, Any]:
    job = store.get_json(spec_key)
    if not isinstance(job, dict) or "dml" not in job or "data_key" not in job:
        raise InvalidJobError(f"{spec_key} must hold an object with 'dml' and 'data_key'")
    spec = dml.DMLSpec.from_dict(job["dml"])
    columns, values = _cached_data(store.bucket, job["data_key"])
    data = dml.validate_data(spec, list(columns), values)
    n_obs = data.y.shape[0]
    if job.get("folds_key"):
        folds = dml.validate_folds(
            store.get_array(job["folds_key"]), n_obs, spec.n_folds, spec.n_rep
        )
    else:
        folds = dml.draw_folds(n_obs, spec.n_folds, spec.n_rep, spec.seed)
    fkey = store.put_array(storage.folds_key(job_id), folds)
    max_concurrency = int(job.get("max_concurrency") or DEFAULT_ACCOUNT_CONCURRENCY)
    units_per_shard = job.get("units_per_shard")
    if max_concurrency < 1:
        raise InvalidJobError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if units_per_shard is not None and int(units_per_shard) < 1:
        raise InvalidJobError(f"units_per_shard must be >= 1, got {units_per_shard}")
    plan = {
        "job_id": job_id,
        "dml": spec.to_dict(),
        "data_key": job["data_key"],
        "folds_key": fkey,
        "n_obs": n_obs,
        "n_stages": dml.n_stages(spec),
        "max_concurrency": max_concurrency,
        "units_per_shard": None if units_per_shard is None else int(units_per_shard),
    }
    store.put_json(storage.plan_key(job_id), plan)
    return plan


_COLD = True


def crossfit_shard(
    store: storage.JobStore,
    job_id: str,
    plan_key: str,
    stage: int,
    shard: dict[str, Any],
    memory_mb: int = 0,
) -> dict[str, Any]:
    """Fit every unit of one shard and write the out-of-fold predictions.

    Parameters
    ----------
    store : JobStore
    job_id, plan_key : str
    stage : int
    shard : dict
        ``{"shard_id": str, "units": [FitUnit dict, ...]}`` (one item of the stage's shard list).
    memory_mb : int
        The function's configured memory (for the shard's statistics).

    Returns
    -------
    dict
        ``preds_key`` and the shard's statistics: ``n_units``, ``started_at``, ``ended_at`` (epoch
        seconds), ``fit_s`` and ``io_s`` (seconds), ``memory_mb``, ``peak_rss_mb``, ``cold_start``.
        The statistics are also stored in the predictions object (array ``__stats__``).
    """
    global _COLD
    cold, _COLD = _COLD, False
    started = time.time()
    plan = store.get_json(plan_key)
    spec, data, folds = _load(store, plan)
    inputs = store.get_json(storage.stage_inputs_key(job_id, stage)) if stage > 0 else {}
    io_s = time.time() - started
    arrays: dict[str, np.ndarray] = {}
    t0 = time.perf_counter()
    for raw in shard["units"]:
        unit = dml.FitUnit.from_dict(raw)
        if unit.stage != stage:
            raise InvalidJobError(f"unit {unit.key} belongs to stage {unit.stage}, not {stage}")
        arrays[unit.key] = dml.fit_predict(spec, unit, data, folds, inputs)
    fit_s = time.perf_counter() - t0
    stats = {
        "shard_id": shard["shard_id"],
        "stage": stage,
        "n_units": len(arrays),
        "started_at": started,
        "fit_s": fit_s,
        "io_s": io_s,
        "memory_mb": memory_mb,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "cold_start": cold,
        "pid": os.getpid(),
    }
    t1 = time.perf_counter()
    key = storage.preds_key(job_id, stage, shard["shard_id"])
    stats["ended_at"] = time.time()
    arrays["__stats__"] = np.array(json.dumps(stats, allow_nan=False))
    store.put_arrays(key, arrays)
    stats["io_s"] += time.perf_counter() - t1
    return {"preds_key": key, **stats}


def _read_shards(
    store: storage.JobStore, job_id: str, stage: int
) -> tuple[list[dict[str, Any]], list[dict[str, np.ndarray]]]:
    shards = store.get_json(storage.shards_key(job_id, stage))
    objects = [store.get_arrays(storage.preds_key(job_id, stage, s["shard_id"])) for s in shards]
    return shards, objects


def _gather_predictions(
    store: storage.JobStore,
    job_id: str,
    spec: dml.DMLSpec,
    data: dml.DMLData,
    folds: np.ndarray,
    stages: range,
) -> dict[str, np.ndarray]:
    """Assemble every unit's predictions of ``stages`` into DoubleML's layout.

    Returns
    -------
    dict
        learner key -> ndarray of shape (n_obs, n_rep, n_treat).

    Raises
    ------
    InvalidJobError
        If a unit's predictions are missing (a shard did not write its object).
    """
    n_obs, n_rep, n_treat = data.y.shape[0], folds.shape[1], data.d.shape[1]
    preds: dict[str, np.ndarray] = {}
    for stage in stages:
        _, objects = _read_shards(store, job_id, stage)
        found = {k: v for obj in objects for k, v in obj.items() if k != "__stats__"}
        for unit in dml.fit_units(spec, stage):
            if unit.key not in found:
                raise InvalidJobError(f"predictions of unit {unit.key} are missing")
            target = preds.setdefault(unit.learner, np.full((n_obs, n_rep, n_treat), np.nan))
            test = np.flatnonzero(folds[:, unit.i_rep] == unit.i_fold)
            target[test, unit.i_rep, unit.i_treat] = found[unit.key]
    return preds


def aggregate_job(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    plan_key: str,
    execution_arn: str = "",
    memory_mb: int = 0,
) -> dict[str, Any]:
    """Turn the out-of-fold predictions of every stage into the estimate.

    Writes ``result.json``: :meth:`fanfit.dml.DMLResult.to_dict` plus ``job_id``, ``execution_arn`` and
    ``timings`` (per-shard statistics, billed GB-seconds and the estimated Lambda cost in USD), then marks
    the job record SUCCEEDED.

    Returns
    -------
    dict
        ``{"job_id": str, "result_key": str}``.
    """
    started = time.time()
    plan = store.get_json(plan_key)
    spec, data, folds = _load(store, plan)
    preds = _gather_predictions(store, job_id, spec, data, folds, stages=range(plan["n_stages"]))
    result = dml.aggregate(spec, data, folds, preds)
    if spec.boot_method is not None:
        result.bootstrap(method=spec.boot_method, n_rep_boot=spec.n_rep_boot, seed=spec.seed)

    shards: list[dict[str, Any]] = []
    gb_s = usd = 0.0
    for stage in range(plan["n_stages"]):
        _, objects = _read_shards(store, job_id, stage)
        for obj in objects:
            stats = json.loads(str(obj["__stats__"]))
            g, u = lambda_cost_usd(stats["ended_at"] - stats["started_at"], stats["memory_mb"])
            stats["billed_gb_s"] = g
            shards.append(stats)
            gb_s, usd = gb_s + g, usd + u
        prep = store.get_json(f"{storage.job_prefix(job_id)}stages/{stage}/prepare.json")
        g, u = lambda_cost_usd(prep["ended_at"] - prep["started_at"], prep["memory_mb"])
        gb_s, usd = gb_s + g, usd + u
    g, u = lambda_cost_usd(time.time() - started, memory_mb)
    gb_s, usd = gb_s + g, usd + u

    out = result.to_dict()
    out.update(
        {
            "job_id": job_id,
            "execution_arn": execution_arn,
            "timings": {
                "shards": shards,
                "billed_gb_s": gb_s,
                "lambda_cost_usd": usd,
                "price_usd_per_gb_s": LAMBDA_USD_PER_GB_SECOND,
                "price_usd_per_request": LAMBDA_USD_PER_REQUEST,
            },
        }
    )
    key = store.put_json(storage.result_key(job_id), out)
    records.mark_succeeded(job_id, key)
    return {"job_id": job_id, "result_key": key}
