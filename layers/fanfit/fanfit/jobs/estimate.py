"""The server-side steps of an estimate job, one function per Lambda.

Each step takes S3 keys and small numbers, reads what it needs through :class:`~fanfit.storage.JobStore`,
calls into :mod:`fanfit.dml` and returns S3 keys and small numbers: no data and no predictions travel
in Step Functions state (its limit is 256 KB).

- :func:`prepare_stage` (Prepare): stage 0 validates the spec and the data, draws or checks the folds
  and writes the plan; every stage writes its (repetition, fold, learner) units.
- :func:`schedule_wave` (Schedule): records the throughput the last wave of shards measured and cuts
  the stage's remaining units into the next wave of shards (the Distributed Map's ItemReader input),
  sized by :mod:`fanfit.sched.sizing` from the throughput history; a probe wave without history.
- :func:`crossfit_shard` (CrossFit): fits the units of one shard and writes their out-of-fold
  predictions to one object.
- :func:`aggregate_job` (Aggregate): gathers every shard's predictions, computes the estimate and
  writes ``result.json`` and the assembled out-of-fold predictions (``predictions.npz``, DoubleML's
  ``external_predictions`` layout, for :func:`fanfit.dml.interop.to_doubleml`).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import time
from functools import lru_cache
from typing import Any

import numpy as np

from fanfit import dml, storage
from fanfit.cost import LAMBDA_USD_PER_GB_SECOND, LAMBDA_USD_PER_REQUEST, lambda_cost_usd
from fanfit.dml.interop import predictions_to_arrays
from fanfit.errors import InvalidJobError
from fanfit.jobs import sharing
from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY, deal, n_shards_for
from fanfit.sched.sizing import DEFAULT_STARTUP_S, POLICIES, plan_shards, split_units
from fanfit.sched.throughput import (
    EwmaThroughput,
    ShardObservation,
    ThroughputEntry,
    lambda_resource,
    workload_signature,
)


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


def _peak_rss_mb() -> float:
    """Peak resident memory of this process (the function's environment) so far, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


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
    partitions: storage.Partitions | None = None,
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
        "max_concurrency": int | None, "units_per_shard": int | None, "weight": float | None}``
        (``weight``: the job's weight in the fair shares, in (0, 100], default 1).
    stage : int
        0 for the first stage.
    execution_arn : str
        The Step Functions execution, recorded in the job record and with the job's partition
        (so that other jobs drop the partition once this execution no longer runs).
    memory_mb : int
        The function's configured memory (for the cost estimate).
    partitions : Partitions, optional
        The stack's partition table: the job registers (stage 0: it arrives) or updates (a later
        stage) its demand, the stage's unit count capped by its ``max_concurrency``, with its
        ``weight``, and every running job's partition is recomputed
        (:func:`fanfit.jobs.sharing.register_job`).

    Returns
    -------
    dict
        ``job_id, spec_key, plan_key, stage, n_units, has_next_stage, next_stage``. The stage's
        units are written to :func:`fanfit.storage.units_key`; :func:`schedule_wave` cuts them into
        shards.

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
            # a resumed job starts again without the error of its failed execution
            error=None,
            cause=None,
            failed_shard=None,
            shard_error=None,
        )
        spec = dml.DMLSpec.from_dict(plan["dml"])
    else:
        plan = store.get_json(storage.plan_key(job_id))
        if not 0 < stage < plan["n_stages"]:
            raise InvalidJobError(f"stage must be in 1..{plan['n_stages'] - 1}, got {stage}")
        spec, data, folds = _load(store, plan)
        preds = _gather_predictions(store, job_id, spec, data, folds, stages=range(stage))
        store.put_json(
            storage.stage_inputs_key(job_id, stage),
            dml.stage_inputs(spec, stage, data, folds, preds),
        )
    units = dml.fit_units(spec, stage)
    store.put_json(storage.units_key(job_id, stage), [u.to_dict() for u in units])
    if partitions is not None and units:
        on_batch = plan.get("placement") == "batch" or any(
            spec.learners[dml.learner_name(u.learner)].requires_batch for u in units
        )
        sharing.register_job(
            partitions,
            job_id,
            "estimate",
            demand=min(len(units), int(plan["max_concurrency"])),
            gpu_demand=int(plan.get("gpu_workers") or 1) if on_batch else 0,
            weight=float(plan.get("weight") or sharing.DEFAULT_WEIGHT),
            execution_arn=execution_arn,
        )
    store.put_json(
        f"{storage.job_prefix(job_id)}stages/{stage}/prepare.json",
        {
            "started_at": started,
            "ended_at": time.time(),
            "memory_mb": memory_mb,
            "n_units": len(units),
            "peak_rss_mb": _peak_rss_mb(),
        },
    )
    return {
        "job_id": job_id,
        "spec_key": spec_key,
        "plan_key": storage.plan_key(job_id),
        "stage": stage,
        "n_units": len(units),
        "has_next_stage": stage + 1 < plan["n_stages"],
        "next_stage": stage + 1,
    }


def _write_plan(store: storage.JobStore, job_id: str, spec_key: str) -> dict[str, Any]:
    raw = store.get_bytes(spec_key)
    spec_sha256 = hashlib.sha256(raw).hexdigest()
    try:
        job = json.loads(raw)
    except ValueError as exc:
        raise InvalidJobError(f"{spec_key} is not JSON: {exc}") from exc
    if not isinstance(job, dict) or not isinstance(job.get("dml"), dict) or "data_key" not in job:
        raise InvalidJobError(f"{spec_key} must hold an object with 'dml' and 'data_key'")
    # Resuming (fanfit resume): the plan of this very spec is already written; keep it and its
    # folds, so that the shards written before keep their meaning.
    existing = _existing_plan(store, job_id, spec_sha256)
    if existing is not None:
        return existing
    # Every field is checked before anything is allocated or written.
    data_key = storage.check_data_key(job["data_key"])
    folds_key = job.get("folds_key")
    if folds_key is not None:
        storage.check_job_key(folds_key, job_id, field="folds_key")
    max_concurrency = _job_int(job, "max_concurrency", DEFAULT_ACCOUNT_CONCURRENCY, MAX_CONCURRENCY)
    units_per_shard = job.get("units_per_shard")
    if units_per_shard is not None:
        units_per_shard = _job_int(job, "units_per_shard", 1, MAX_UNITS_PER_SHARD)
    sharding = job.get("sharding") or "auto"
    if not isinstance(sharding, str) or sharding not in POLICIES:
        raise InvalidJobError(f"sharding must be one of {', '.join(POLICIES)}; got {sharding!r}")
    weight = sharing.check_weight(job.get("weight"))
    spec = dml.DMLSpec.from_dict(job["dml"])
    columns, values = _cached_data(store.bucket, data_key)
    data = dml.validate_data(spec, list(columns), values)
    n_obs = data.y.shape[0]
    del data
    if folds_key:
        folds = dml.validate_folds(store.get_array(folds_key), n_obs, spec.n_folds, spec.n_rep)
    else:
        folds = dml.draw_folds(n_obs, spec.n_folds, spec.n_rep, spec.seed)
    fkey = store.put_array(storage.folds_key(job_id), folds)
    plan = {
        "job_id": job_id,
        "dml": spec.to_dict(),
        "data_key": data_key,
        "folds_key": fkey,
        "n_obs": n_obs,
        "n_stages": dml.n_stages(spec),
        "max_concurrency": max_concurrency,
        "units_per_shard": units_per_shard,
        "sharding": sharding,
        "weight": weight,
        "spec_sha256": spec_sha256,
    }
    store.put_json(storage.plan_key(job_id), plan)
    return plan


#: Largest ``max_concurrency`` a job file may ask for (Lambda's account concurrency can be raised
#: to tens of thousands; a Distributed Map runs at most 10,000 child executions at once).
MAX_CONCURRENCY = 10_000
#: Largest ``units_per_shard`` (a stage has at most MAX_N_FOLDS x MAX_N_REP x learners units).
MAX_UNITS_PER_SHARD = 100_000


def _job_int(job: dict[str, Any], name: str, default: int, most: int) -> int:
    """``job[name]`` as an int in ``[1, most]`` (``default`` when null or absent).

    Raises
    ------
    InvalidJobError
        Not an integer (text, a float, a bool) or out of range.
    """
    value = job.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        shown = repr(value) if len(repr(value)) <= 100 else f"a {type(value).__name__} value"
        raise InvalidJobError(f"{name} must be an integer in [1, {most:,}] or null, got {shown}")
    return value


def _existing_plan(store: storage.JobStore, job_id: str, spec_sha256: str) -> dict[str, Any] | None:
    """The job's plan if Prepare already wrote it from the same spec (and its folds exist)."""
    key = storage.plan_key(job_id)
    if not store.exists(key):
        return None
    plan = store.get_json(key)
    if not isinstance(plan, dict) or plan.get("spec_sha256") != spec_sha256:
        return None
    if not store.exists(str(plan.get("folds_key"))):
        return None
    return plan


def _unit_signature(spec: dml.DMLSpec, unit: dml.FitUnit, n_obs: int, n_features: int) -> str:
    """The workload signature of a unit: its learner spec, role, model and data shape."""
    role = "ml_m" if unit.learner.startswith("ml_m_") else unit.learner[:4]
    return workload_signature(
        "estimate",
        {"role": role, **spec.learners[role].to_dict()},
        n_features,
        n_obs=n_obs,
        model=spec.model,
    )


def _n_train(folds: np.ndarray, unit: dml.FitUnit) -> int:
    return int(np.count_nonzero(folds[:, unit.i_rep] != unit.i_fold))


def _parse_date(value: Any) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _map_run_outputs(store: storage.JobStore, prefix: str) -> dict[str, float]:
    """Per shard id, the wall seconds of its child execution, from the Map Run's ResultWriter files."""
    walls: dict[str, float] = {}
    for key in store.list_keys(prefix):
        if not key.rsplit("/", 1)[-1].startswith("SUCCEEDED_"):
            continue
        for entry in store.get_json(key):
            start, stop = _parse_date(entry.get("StartDate")), _parse_date(entry.get("StopDate"))
            try:
                shard_id = json.loads(entry["Output"])["shard_id"]
            except (KeyError, TypeError, ValueError):
                continue
            if start is not None and stop is not None:
                walls[str(shard_id)] = stop - start
    return walls


def _observe_wave(
    store: storage.JobStore,
    job_id: str,
    stage: int,
    wave: dict[str, Any],
    spec: dml.DMLSpec,
    folds: np.ndarray,
    n_obs: int,
    n_features: int,
) -> list[ShardObservation]:
    """What the shards of a finished wave measured, one observation per (shard, signature).

    ``compute_s`` sums the fit seconds of the shard's units of that signature, ``samples`` their
    training rows; ``io_s`` is the shard's whole overhead: the wall seconds of its child execution
    (start-up, orchestration, I/O) minus its fit seconds, or its own I/O seconds where the Map Run's
    results do not say.
    """
    walls = _map_run_outputs(store, wave["map_runs_prefix"])
    observations = []
    for shard in wave["shards"]:
        obj = store.get_arrays(storage.preds_key(job_id, stage, shard["shard_id"]))
        stats = json.loads(str(obj["__stats__"]))
        wall = walls.get(shard["shard_id"])
        overhead = stats["io_s"] if wall is None else max(wall - stats["fit_s"], stats["io_s"])
        by_signature: dict[str, list[float]] = {}
        for key, seconds in stats["unit_fit_s"].items():
            unit = dml.FitUnit.from_key(key)
            entry = by_signature.setdefault(
                _unit_signature(spec, unit, n_obs, n_features), [0.0, 0.0]
            )
            entry[0] += _n_train(folds, unit)
            entry[1] += seconds
        for signature, (samples, compute_s) in by_signature.items():
            observations.append(
                ShardObservation(
                    samples=int(samples),
                    compute_s=max(compute_s, 1e-6),
                    io_s=overhead,
                    memory_mb=int(stats["memory_mb"]) or 1,
                    resource=stats.get("resource") or lambda_resource(int(stats["memory_mb"]) or 1),
                    cold_start=bool(stats["cold_start"]),
                    signature=signature,
                )
            )
    return observations


def schedule_wave(
    store: storage.JobStore,
    records: storage.JobRecords,
    throughput: storage.ThroughputRecords,
    job_id: str,
    stage: int,
    wave: int,
    crossfit_memory_mb: int,
    account_concurrency: int = DEFAULT_ACCOUNT_CONCURRENCY,
    memory_mb: int = 0,
    partitions: storage.Partitions | None = None,
) -> dict[str, Any]:
    """Record what the last wave of a stage measured, and cut the next wave of shards.

    Wave 0 of a stage plans from the throughput history (:class:`fanfit.sched.throughput.
    EwmaThroughput` over the throughput table); a later wave first folds the previous wave's
    measurements into the table. Each unit's predicted seconds are its training rows over the
    predicted throughput of its signature on ``lambda-<crossfit_memory_mb>``; with a signature that
    has no history, the wave is a probe (:func:`fanfit.sched.sizing.plan_shards`): a few single-unit
    shards, one per unmeasured signature first, and the next wave sizes the rest. A job's fixed
    ``units_per_shard`` or ``sharding`` policy ``'per-fold'`` / ``'per-repetition'`` (DoubleML-
    Serverless's layouts) needs no history. The decision and the figures it used go into the stage's
    schedule (``stages/<s>/schedule.json``) and the job record (``schedule``).

    Parameters
    ----------
    store, records, throughput : JobStore, JobRecords, ThroughputRecords
    job_id : str
    stage, wave : int
        The stage, and the wave to plan (0 first).
    crossfit_memory_mb : int
        Memory of the CrossFit function, MB (its resource is ``lambda-<MB>``).
    account_concurrency : int
        The account's Lambda concurrency (AWS default 1,000).
    memory_mb : int
        This function's memory, MB (for the cost).
    partitions : Partitions, optional
        The stack's partition table. The job's partition (Dorm, :func:`fanfit.jobs.sharing.
        partition_at_barrier`: below its demand, stale jobs' shares are reclaimed first), read
        at this barrier, caps the wave: its shards are sized for, and its ``max_concurrency``
        never exceeds, ``min(job max_concurrency, partition)``; its GPU share caps the GPU
        workers. The partition used goes into the wave's entry (``partition``).

    Returns
    -------
    dict
        ``job_id, plan_key, stage, wave, has_wave`` and, when ``has_wave``, ``shards_key, n_shards,
        max_concurrency, map_runs_prefix, next_wave``.

    Raises
    ------
    InvalidJobError
        The wave does not follow the stage's schedule, or a shard would exceed the Lambda timeout.
    """
    started = time.time()
    plan = store.get_json(storage.plan_key(job_id))
    # The scheduler needs the data's shape and the folds, not the data: n_obs from the plan, the
    # learners' features as DMLData.xd (covariates plus the other treatments).
    spec = dml.DMLSpec.from_dict(plan["dml"])
    folds = _cached_folds(store.bucket, plan["folds_key"])
    n_obs, n_features = int(plan["n_obs"]), len(spec.x_cols) + spec.n_treat - 1
    units = [dml.FitUnit.from_dict(u) for u in store.get_json(storage.units_key(job_id, stage))]
    recovered = wave == 0 and store.exists(storage.schedule_key(job_id, stage))
    if recovered:
        # A resumed execution (fanfit resume), or a retry after the schedule was written: S3 is
        # the source of truth; the shards whose predictions exist are done, the rest run again.
        schedule = _recover_schedule(
            store, job_id, stage, store.get_json(storage.schedule_key(job_id, stage))
        )
        wave = len(schedule["waves"])
    else:
        schedule = store.get_json(storage.schedule_key(job_id, stage)) if wave else {"waves": []}
    waves = schedule["waves"]
    if len(waves) != wave:
        raise InvalidJobError(f"stage {stage} has {len(waves)} wave(s) planned; cannot plan {wave}")
    signatures = {u.key: _unit_signature(spec, u, n_obs, n_features) for u in units}
    history = EwmaThroughput(
        entries=[ThroughputEntry.from_dict(e) for e in throughput.load(signatures.values())]
    )
    if waves and not recovered:
        observed = _observe_wave(store, job_id, stage, waves[-1], spec, folds, n_obs, n_features)
        for observation in observed:
            history.update(observation)
        keys = {(o.signature, o.resource) for o in observed}
        throughput.save(e.to_dict() for e in history.entries if (e.signature, e.resource) in keys)
    done = {key for w in waves for shard in w["shards"] for key in shard["units"]}
    remaining = [u for u in units if u.key not in done]
    out: dict[str, Any] = {
        "job_id": job_id,
        "plan_key": storage.plan_key(job_id),
        "stage": stage,
        "wave": wave,
    }
    if not remaining:
        if recovered:
            store.put_json(storage.schedule_key(job_id, stage), schedule)
        return {**out, "has_wave": False}
    # Units whose learner cannot run on Lambda (PyTorch: over the 250 MB code limit), or every
    # unit when the job asks for it, go to the GPU worker (AWS Batch) in this wave, dealt over
    # ``gpu_workers`` jobs; the scheduler sizes the Lambda shards from the rest.
    on_batch = [
        u
        for u in remaining
        if plan.get("placement") == "batch"
        or spec.learners[dml.learner_name(u.learner)].requires_batch
    ]
    # The job's partition of the shared capacity, read at this barrier (Dorm): it caps the wave.
    partition = sharing.partition_at_barrier(partitions, job_id)
    job_concurrency = int(plan["max_concurrency"])
    gpu_workers = int(plan.get("gpu_workers") or 1)
    if partition is not None:
        job_concurrency = min(job_concurrency, partition.concurrency)
        gpu_workers = min(gpu_workers, max(1, partition.gpus))
    batch_shards = deal(on_batch, gpu_workers) if on_batch else []
    batch_keys = {u.key for u in on_batch}
    remaining = [u for u in remaining if u.key not in batch_keys]

    resource = lambda_resource(crossfit_memory_mb)
    predicted = {sig: history.predict(sig, resource) for sig in set(signatures.values())}
    io = [v for sig in predicted if (v := history.predict_io(sig, resource)) is not None]
    startup_s = max(io) if io else DEFAULT_STARTUP_S
    unknown = [u for u in remaining if predicted[signatures[u.key]] is None]
    seconds = (
        None
        if unknown
        else float(
            np.mean([_n_train(folds, u) / predicted[signatures[u.key]] for u in remaining])  # type: ignore[operator]
        )
    )
    fixed = plan.get("units_per_shard")
    if not remaining:
        shards: list[list[dml.FitUnit]] = []
        decision_dict: dict[str, Any] = {"policy": "batch", "n_shards": 0, "max_concurrency": 0}
    elif fixed:
        decision = plan_shards(
            len(remaining),
            seconds,
            startup_s,
            policy="per-fold",
            account_concurrency=account_concurrency,
            job_concurrency=job_concurrency,
        )
        shards = deal(remaining, n_shards_for(len(remaining), job_concurrency, fixed))
        decision_dict = {
            **decision.to_dict(),
            "policy": "fixed",
            "units_per_shard": int(fixed),
            "n_shards": len(shards),
            "max_concurrency": min(len(shards), decision.max_concurrency),
        }
    else:
        policy = plan.get("sharding", "auto")
        if unknown and policy == "auto":
            probe_first = _probe_order(remaining, signatures, {u.key for u in unknown})
            remaining = probe_first
        decision = plan_shards(
            len(remaining),
            seconds,
            startup_s,
            policy=policy,
            n_folds=spec.n_folds,
            account_concurrency=account_concurrency,
            job_concurrency=job_concurrency,
        )
        shards = split_units(remaining, decision)
        decision_dict = decision.to_dict()
    # Shard ids are never reused within a stage (a resumed job's new shards follow the old ones),
    # so a predictions object always holds the units its schedule entry names.
    first_id = int(schedule.get("next_shard_id", sum(len(w["shards"]) for w in waves)))
    placed = [(shard, "lambda") for shard in shards] + [(shard, "batch") for shard in batch_shards]
    items = [
        {
            "shard_id": f"{first_id + i:05d}",
            "units": [u.to_dict() for u in shard],
            "placement": where,
        }
        for i, (shard, where) in enumerate(placed)
    ]
    key = store.put_json(storage.wave_key(job_id, stage, wave), items)
    prefix = f"{storage.job_prefix(job_id)}map-runs/{stage}/{wave}"
    entry = {
        "stage": stage,
        "wave": wave,
        "decision": decision_dict,
        "resource": resource,
        "predicted_samples_per_s": {k: v for k, v in predicted.items() if v is not None},
        "startup_s": startup_s,
        "map_runs_prefix": prefix,
        "started_at": started,
        "ended_at": time.time(),
        "memory_mb": memory_mb,
        "peak_rss_mb": _peak_rss_mb(),
        "n_batch_shards": len(batch_shards),
        "partition": None if partition is None else partition.to_dict(),
        "shards": [
            {"shard_id": f"{first_id + i:05d}", "units": [u.key for u in shard], "placement": where}
            for i, (shard, where) in enumerate(placed)
        ],
    }
    waves.append(entry)
    schedule["next_shard_id"] = first_id + len(items)
    store.put_json(storage.schedule_key(job_id, stage), schedule)
    summary = [
        {k: v for k, v in e.items() if k not in ("shards", "map_runs_prefix")} for e in waves
    ]
    records.update(job_id, schedule={"stage": stage, "waves": summary})
    return {
        **out,
        "has_wave": True,
        "shards_key": key,
        "n_shards": len(items),
        "max_concurrency": int(decision_dict["max_concurrency"]) + len(batch_shards),
        "map_runs_prefix": prefix,
        "next_wave": wave + 1,
    }


def _recover_schedule(
    store: storage.JobStore, job_id: str, stage: int, old: dict[str, Any]
) -> dict[str, Any]:
    """A stage's schedule reduced to the shards whose predictions exist in S3.

    Every earlier wave is kept, in order (its index and its Map Run's prefix stay taken), with only
    its written shards; the others are listed under ``dropped_shards`` and their units planned
    again by the caller. ``next_shard_id`` is the first id no earlier shard used.

    Parameters
    ----------
    store : JobStore
    job_id : str
    stage : int
    old : dict
        The schedule as an earlier execution left it (``stages/<s>/schedule.json``).

    Returns
    -------
    dict
        ``{"waves": [...], "next_shard_id": int, "recovered": {"kept": int, "dropped": int}}``.
    """
    written = set(store.list_keys(f"{storage.job_prefix(job_id)}stages/{stage}/preds/"))
    next_id = int(old.get("next_shard_id") or 0)
    waves, kept, dropped = [], 0, 0
    for entry in old.get("waves", []):
        shards = entry.get("shards", [])
        next_id = max([next_id, *(int(sh["shard_id"]) + 1 for sh in shards)])
        done = [sh for sh in shards if storage.preds_key(job_id, stage, sh["shard_id"]) in written]
        missing = [sh["shard_id"] for sh in shards if sh not in done]
        kept, dropped = kept + len(done), dropped + len(missing)
        waves.append(
            {
                **entry,
                "shards": done,
                "dropped_shards": [*entry.get("dropped_shards", []), *missing],
            }
        )
    return {
        "waves": waves,
        "next_shard_id": next_id,
        "recovered": {"kept": kept, "dropped": dropped},
    }


#: Longest last error kept in the job record and in the execution's cause, characters.
MAX_ERROR_CHARS = 2_000


def _error_text(error: str, cause: str) -> str:
    """``'<name>: <message>'`` from a Step Functions error and cause (a Lambda's cause is the JSON
    of its ``errorType``/``errorMessage``), at most :data:`MAX_ERROR_CHARS` characters."""
    message = cause or ""
    try:
        parsed = json.loads(cause)
    except (TypeError, ValueError):
        parsed = None
    if isinstance(parsed, dict):
        error = str(parsed.get("errorType") or error)
        message = str(parsed.get("errorMessage") or parsed.get("Cause") or cause)
    text = f"{error}: {message}" if message else str(error)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _failed_children(store: storage.JobStore, prefix: str) -> list[tuple[str, str, str]]:
    """``(shard_id, error, cause)`` of each failed child execution in a Map Run's ResultWriter
    output (``FAILED_*.json`` under ``prefix``)."""
    out = []
    for key in store.list_keys(prefix):
        if not key.rsplit("/", 1)[-1].startswith("FAILED_"):
            continue
        entries = store.get_json(key)
        for entry in entries if isinstance(entries, list) else []:
            try:
                item = (
                    json.loads(entry["Input"])
                    if isinstance(entry["Input"], str)
                    else entry["Input"]
                )
                shard_id = str(item["shard"]["shard_id"])
            except (KeyError, TypeError, ValueError):
                continue
            out.append((shard_id, str(entry.get("Error") or ""), str(entry.get("Cause") or "")))
    return sorted(out)


def describe_failure(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    stage: int,
    wave: int,
    *,
    error: str,
    cause: str,
) -> dict[str, Any]:
    """Name the shard that made a wave's Distributed Map fail, and record it in the job record.

    The failed shards and their last errors come from the Map Run's ResultWriter output
    (``FAILED_*.json`` under the wave's ``map_runs_prefix``: each failed child execution's input,
    error and cause); where it wrote none, from the Map's own error when it names a shard, else the
    wave's first shard whose predictions object is missing, with the Map's error as its last error.

    Parameters
    ----------
    store, records : JobStore, JobRecords
    job_id : str
    stage, wave : int
        The wave whose Map failed.
    error, cause : str
        The Map's error name and cause, as its Catch received them.

    Returns
    -------
    dict
        ``{"Error": "ShardFailedError", "Cause": str}`` naming the shard (stage, wave, id) and its
        last error, for the state machine's Fail state; ``failed_shard``, ``failed_stage``,
        ``failed_wave``, ``shard_error`` and ``failed_shards`` go into the job record.
        When no shard can be named (the Map failed for another reason), ``Error`` and ``Cause``
        are the Map's own.
    """
    schedule = store.get_json(storage.schedule_key(job_id, stage))
    entry = next((w for w in schedule["waves"] if w["wave"] == wave), None)
    if entry is None:
        return {"Error": error, "Cause": cause}
    failed = _failed_children(store, entry["map_runs_prefix"])
    if not failed:
        ids = [sh["shard_id"] for sh in entry["shards"]]
        named = [i for i in ids if f"shard {i}" in cause or f'"shard_id": "{i}"' in cause]
        written = set(store.list_keys(f"{storage.job_prefix(job_id)}stages/{stage}/preds/"))
        missing = [i for i in ids if storage.preds_key(job_id, stage, i) not in written]
        failed = [(i, error, cause) for i in (named or missing)]
    if not failed:
        return {"Error": error, "Cause": cause}
    shard_id, shard_err, shard_cause = failed[0]
    last_error = _error_text(shard_err or error, shard_cause or cause)
    ids = sorted({f[0] for f in failed})
    records.update(
        job_id,
        failed_shard=shard_id,
        failed_stage=stage,
        failed_wave=wave,
        shard_error=last_error,
        failed_shards=ids[:100],
    )
    more = f" ({len(ids)} shards failed: {', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''})"
    return {
        "Error": "ShardFailedError",
        "Cause": (
            f"shard {shard_id} (stage {stage}, wave {wave}) kept failing after its retries: "
            f"{last_error}{more if len(ids) > 1 else ''}. Fix the cause and run `fanfit resume "
            f"{job_id}`: only the shards without predictions run again."
        ),
    }


def _probe_order(
    units: list[dml.FitUnit], signatures: dict[str, str], unknown: set[str]
) -> list[dml.FitUnit]:
    """``units`` with one unit of each unmeasured signature first (round-robin), then the rest."""
    by_signature: dict[str, list[dml.FitUnit]] = {}
    for u in units:
        if u.key in unknown:
            by_signature.setdefault(signatures[u.key], []).append(u)
    first: list[dml.FitUnit] = []
    queues = list(by_signature.values())
    while any(queues):
        for queue in queues:
            if queue:
                first.append(queue.pop(0))
    chosen = {u.key for u in first}
    return first + [u for u in units if u.key not in chosen]


_COLD = True


def crossfit_shard(
    store: storage.JobStore,
    job_id: str,
    plan_key: str,
    stage: int,
    shard: dict[str, Any],
    memory_mb: int = 0,
    resource_name: str | None = None,
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
    resource_name : str, optional
        Where the shard ran, for the throughput records: ``lambda-<MB>`` (the default) or the Batch
        worker's ``batch-<instance type>``.

    Returns
    -------
    dict
        ``preds_key`` and the shard's statistics: ``n_units``, ``unit_fit_s`` (unit key -> seconds),
        ``started_at``, ``ended_at`` (epoch seconds), ``fit_s`` and ``io_s`` (seconds), ``memory_mb``,
        ``resource``, ``peak_rss_mb``, ``cold_start``.
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
    unit_fit_s: dict[str, float] = {}
    t0 = time.perf_counter()
    for raw in shard["units"]:
        unit = dml.FitUnit.from_dict(raw)
        if unit.stage != stage:
            raise InvalidJobError(f"unit {unit.key} belongs to stage {unit.stage}, not {stage}")
        t_unit = time.perf_counter()
        arrays[unit.key] = dml.fit_predict(spec, unit, data, folds, inputs)
        unit_fit_s[unit.key] = time.perf_counter() - t_unit
    fit_s = time.perf_counter() - t0
    stats = {
        "shard_id": shard["shard_id"],
        "stage": stage,
        "n_units": len(arrays),
        "unit_fit_s": unit_fit_s,
        "started_at": started,
        "fit_s": fit_s,
        "io_s": io_s,
        "memory_mb": memory_mb,
        "resource": resource_name or lambda_resource(memory_mb or 1),
        "placement": "batch" if (resource_name or "").startswith("batch") else "lambda",
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
    schedule = store.get_json(storage.schedule_key(job_id, stage))
    shards = [shard for wave in schedule["waves"] for shard in wave["shards"]]
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
    partitions: storage.Partitions | None = None,
) -> dict[str, Any]:
    """Turn the out-of-fold predictions of every stage into the estimate.

    Writes the assembled out-of-fold predictions to :func:`fanfit.storage.predictions_key` (one
    array of shape (n_obs, n_rep) per treatment and learner, :func:`fanfit.dml.interop.
    predictions_to_arrays`), then ``result.json``: :meth:`fanfit.dml.DMLResult.to_dict` plus
    ``job_id``, ``execution_arn``, ``predictions_key``, ``folds_key`` and ``timings`` (per-shard
    statistics, billed GB-seconds and the estimated Lambda cost in USD), then marks the job record
    SUCCEEDED and, given the stack's ``partitions``, releases the job's partition to the jobs
    still running (:func:`fanfit.jobs.sharing.release_job`).

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
    # the predictions the estimate was aggregated from, for DoubleML's external_predictions
    predictions_key = store.put_arrays(
        storage.predictions_key(job_id),
        predictions_to_arrays(spec.d_cols, result.predictions or preds),
    )

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
        steps = [prep, *store.get_json(storage.schedule_key(job_id, stage))["waves"]]
        for step in steps:
            g, u = lambda_cost_usd(step["ended_at"] - step["started_at"], step["memory_mb"])
            gb_s, usd = gb_s + g, usd + u
    g, u = lambda_cost_usd(time.time() - started, memory_mb)
    gb_s, usd = gb_s + g, usd + u

    out = result.to_dict()
    out.update(
        {
            "job_id": job_id,
            "execution_arn": execution_arn,
            "predictions_key": predictions_key,
            "folds_key": plan["folds_key"],
            "timings": {
                "shards": shards,
                "billed_gb_s": gb_s,
                "lambda_cost_usd": usd,
                "aggregate": {"memory_mb": memory_mb, "peak_rss_mb": _peak_rss_mb()},
                "price_usd_per_gb_s": LAMBDA_USD_PER_GB_SECOND,
                "price_usd_per_request": LAMBDA_USD_PER_REQUEST,
            },
        }
    )
    key = store.put_json(storage.result_key(job_id), out)
    records.mark_succeeded(job_id, key)
    sharing.release_job(partitions, job_id)
    return {"job_id": job_id, "result_key": key}
