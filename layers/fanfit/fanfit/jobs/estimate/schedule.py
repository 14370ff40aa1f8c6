"""Schedule: record what the last wave of a stage measured, and cut the stage's next wave of shards.

:func:`schedule_wave` runs four phases:

1. :func:`observe` (this module): fold the shards' measurements of the last wave into the
   throughput table, and read the history of the stage's workload signatures;
2. :func:`~fanfit.jobs.estimate.wave.place`: choose, per nuisance learner, the resource its units
   run on (a CrossFit memory size or the GPU worker; HeterPS's exact solver), under the job's
   objective and its partition of the shared capacity (Dorm), read at this barrier, after the
   job's demand followed the wave (:func:`~fanfit.jobs.estimate.wave.register_wave`);
3. :func:`~fanfit.jobs.estimate.wave.size_placed`: cut each Lambda resource's units into shards
   from the predicted seconds per unit (a probe wave without history);
4. :func:`write` (this module): write the wave's shard list (the Distributed Map's ItemReader
   input), the stage's schedule and the job record's summary.
"""

from __future__ import annotations

import time
from datetime import datetime

from fanfit import dml, storage
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.estimate import (
    EstimatePlan,
    FitUnitDoc,
    RecoveredCount,
    ScheduledShard,
    ScheduleSummary,
    Shard,
    StageSchedule,
    WaveEntry,
    WaveOutput,
    fit_unit,
    parse_list,
    to_json_list,
    unit_doc,
)
from fanfit.jobs.estimate.data import (
    StageContext,
    n_train,
    peak_rss_mb,
    read_plan,
    read_schedule,
    shard_stats,
    stage_folds,
    unit_signature,
)
from fanfit.jobs.estimate.failure import map_run_children
from fanfit.jobs.estimate.wave import (
    Placement,
    Sizing,
    place,
    plan_unbound,
    register_wave,
    size_placed,
    within_partition,
)
from fanfit.sched.resources import (
    lambda_resource,
    resource_kind,
    stack_gpu_resource,
)
from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY
from fanfit.sched.throughput import (
    EwmaThroughput,
    ShardObservation,
    ThroughputEntry,
)

__all__ = ["observe", "schedule_wave", "write"]


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
    memory_sizes: list[int] | None = None,
    gpu_enabled: bool = False,
) -> WaveOutput:
    """Record what the last wave of a stage measured, and cut the next wave of shards.

    Wave 0 of a stage plans from the throughput history (:class:`fanfit.sched.throughput.
    EwmaThroughput` over the throughput table); a later wave first folds the previous wave's
    measurements into the table (:func:`observe`). Units whose learner needs the GPU worker go to
    it (:func:`place`). Each other unit's predicted seconds are its training rows over the
    predicted throughput of its signature on ``lambda-<crossfit_memory_mb>``; with a signature that
    has no history, the wave is a probe (:func:`size`). The decision and the figures it used go
    into the stage's schedule and the job record (:func:`write`).

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
        never exceeds, ``min(job max_concurrency, partition)``. The partition used goes into the
        wave's entry (``partition``). Before it is read, the job's demand is re-registered as the
        wave's, with the job's completion figures (:func:`register_wave`); a partition that
        holds that demand runs the very plan it came from (:func:`within_partition`).
    memory_sizes : list of int, optional
        The memory sizes the stack's CrossFit functions offer, MB (default: only
        ``crossfit_memory_mb``); :func:`place` chooses among them.
    gpu_enabled : bool
        Whether the stack has the GPU worker (then :func:`place` may choose it).

    Returns
    -------
    WaveOutput
        ``has_wave`` and, when True, the wave's shard list key, shard count, Map concurrency, Map
        Run prefix and next wave. A stage without units has no wave 0; its schedule is written
        all the same, with no wave (every reader of a stage's schedule expects one).

    Raises
    ------
    InvalidJobError
        The wave does not follow the stage's schedule, or a shard would exceed the Lambda timeout.
    """
    started = time.time()
    plan = read_plan(store, storage.plan_key(job_id))
    ctx = _stage_context(store, job_id, stage, plan)
    recovered = wave == 0 and store.exists(storage.schedule_key(job_id, stage))
    if recovered:
        # A resumed execution (fanfit resume), or a retry after the schedule was written: S3 is
        # the source of truth; the shards whose predictions exist are done, the rest run again.
        schedule = _recover_schedule(store, job_id, stage, read_schedule(store, job_id, stage))
        wave = len(schedule.waves)
    else:
        schedule = read_schedule(store, job_id, stage) if wave else StageSchedule()
    if len(schedule.waves) != wave:
        raise InvalidJobError(
            f"stage {stage} has {len(schedule.waves)} wave(s) planned; cannot plan {wave}"
        )
    last = schedule.waves[-1] if schedule.waves and not recovered else None
    history = observe(store, throughput, ctx, last)
    done = {key for w in schedule.waves for shard in w.shards for key in shard.units}
    remaining = [u for u in ctx.units if u.key not in done]
    out = WaveOutput(
        job_id=job_id, plan_key=storage.plan_key(job_id), stage=stage, wave=wave, has_wave=False
    )
    sizes = memory_sizes or [crossfit_memory_mb]
    # Dorm: the job's demand follows the wave about to be cut (jobs/estimate/demand.py)
    planned = None
    if remaining and partitions is not None:
        planned = plan_unbound(ctx, remaining, history, memory_sizes=sizes,
                               gpu_enabled=gpu_enabled, account_concurrency=account_concurrency)  # fmt: skip
    register_wave(
        partitions, ctx, remaining, history, memory_sizes=sizes, gpu_enabled=gpu_enabled,
        account_concurrency=account_concurrency, throughput=throughput, planned=planned,
    )  # fmt: skip
    if not remaining:
        if recovered or wave == 0:
            # wave 0 with nothing left: a stage without units (every nuisance of it given,
            # external_predictions_cols) records its schedule too, with no wave, as every reader
            # of a stage's schedule expects one (Prepare of the next stage, Aggregate, the
            # failure's description, progress)
            store.put_json(storage.schedule_key(job_id, stage), schedule.to_json_dict())
        return out
    placement = place(ctx, remaining, partitions, history, memory_sizes=sizes,
                      gpu_enabled=gpu_enabled)  # fmt: skip
    granted = within_partition(planned, placement)  # the partition holds the wave it asked for
    if granted is not None:
        placement, sizings = granted
    else:
        sizings = size_placed(ctx, placement, history, account_concurrency=account_concurrency)
    return write(store, records, ctx, wave, schedule, placement, sizings, started, memory_mb)


def _stage_context(
    store: storage.JobStore, job_id: str, stage: int, plan: EstimatePlan
) -> StageContext:
    """The stage's units and their signatures. The scheduler needs the data's shape and the folds,
    not the data: ``n_obs`` from the plan, the learners' features as ``DMLData.xd`` (covariates
    plus the other treatments)."""
    spec = plan.dml
    key = storage.units_key(job_id, stage)
    units = [fit_unit(u) for u in parse_list(FitUnitDoc, store.get_json(key), source=key)]
    n_obs, n_features = plan.n_obs, len(spec.x_cols) + spec.n_treat - 1
    return StageContext(
        job_id=job_id,
        stage=stage,
        plan=plan,
        folds=stage_folds(store, plan),
        n_obs=n_obs,
        n_features=n_features,
        units=units,
        signatures={u.key: unit_signature(spec, u, n_obs, n_features) for u in units},
    )


# --------------------------------------------------------------------------- 1. observe


def observe(
    store: storage.JobStore,
    throughput: storage.ThroughputRecords,
    ctx: StageContext,
    last: WaveEntry | None,
) -> EwmaThroughput:
    """The throughput history of the stage's signatures, with the last wave's measurements folded in.

    Parameters
    ----------
    last : WaveEntry or None
        The wave that just ran (None for a stage's first wave, or a recovered schedule: nothing
        new was measured). Its observations update the throughput table.

    Returns
    -------
    EwmaThroughput
        Over the table's entries of ``ctx.signatures``.
    """
    history = EwmaThroughput(
        entries=[ThroughputEntry.from_dict(e) for e in throughput.load(ctx.signatures.values())]
    )
    if last is not None:
        observed = _observe_wave(store, ctx, last)
        for observation in observed:
            history.update(observation)
        keys = {(o.signature, o.resource) for o in observed}
        throughput.save(e.to_dict() for e in history.entries if (e.signature, e.resource) in keys)
    return history


def _parse_date(value: str | None) -> float | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _map_run_walls(store: storage.JobStore, prefix: str) -> dict[str, float]:
    """Per shard id, the wall seconds of its child execution, from the Map Run's ResultWriter files."""
    walls: dict[str, float] = {}
    for child in map_run_children(store, prefix, "SUCCEEDED"):
        start, stop = _parse_date(child.StartDate), _parse_date(child.StopDate)
        shard_id = child.shard_id_out()
        if shard_id is not None and start is not None and stop is not None:
            walls[shard_id] = stop - start
    return walls


def _observe_wave(
    store: storage.JobStore, ctx: StageContext, wave: WaveEntry
) -> list[ShardObservation]:
    """What the shards of a finished wave measured, one observation per (shard, signature).

    ``compute_s`` sums the fit seconds of the shard's units of that signature, ``samples`` their
    training rows; ``io_s`` is the shard's whole overhead: the wall seconds of its child execution
    (start-up, orchestration, I/O) minus its fit seconds, or its own I/O seconds where the Map Run's
    results do not say.
    """
    walls = _map_run_walls(store, wave.map_runs_prefix)
    observations = []
    for shard in wave.shards:
        key = storage.preds_key(ctx.job_id, ctx.stage, shard.shard_id)
        stats = shard_stats(store.get_arrays(key), key)
        wall = walls.get(shard.shard_id)
        overhead = stats.io_s if wall is None else max(wall - stats.fit_s, stats.io_s)
        by_signature: dict[str, list[float]] = {}
        for unit_key, seconds in stats.unit_fit_s.items():
            unit = dml.FitUnit.from_key(unit_key)
            entry = by_signature.setdefault(
                unit_signature(ctx.plan.dml, unit, ctx.n_obs, ctx.n_features), [0.0, 0.0, 0.0, 0.0]
            )
            entry[0] += n_train(ctx.folds, unit, ctx.plan.dml)
            entry[1] += seconds
            entry[2] += (stats.unit_batch or {}).get(unit_key, 1)  # batched fits (GPU worker)
            entry[3] += 1
        memory_mb = stats.memory_mb or 1
        for signature, (samples, compute_s, batch, n_units) in by_signature.items():
            observations.append(
                ShardObservation(
                    fits_per_batch=batch / n_units,
                    samples=int(samples),
                    compute_s=max(compute_s, 1e-6),
                    io_s=overhead,
                    memory_mb=memory_mb,
                    resource=stats.resource or lambda_resource(memory_mb),
                    cold_start=stats.cold_start,
                    signature=signature,
                )
            )
    return observations


# --------------------------------------------------------------------------- 4. write


def write(
    store: storage.JobStore,
    records: storage.JobRecords,
    ctx: StageContext,
    wave: int,
    schedule: StageSchedule,
    placement: Placement,
    sizings: list[Sizing],
    started: float,
    memory_mb: int,
) -> WaveOutput:
    """Write the wave: its shard list (:func:`fanfit.storage.wave_key`, the Map's ItemReader
    input), its entry in the stage's schedule (:func:`fanfit.storage.schedule_key`) and the job
    record's ``schedule`` summary (``fanfit status``).

    Shard ids are never reused within a stage (a resumed job's new shards follow the old ones), so
    a predictions object always holds the units its schedule entry names.
    """
    job_id, stage = ctx.job_id, ctx.stage
    first_id = schedule.next_shard_id
    if first_id is None:
        first_id = sum(len(w.shards) for w in schedule.waves)
    gpu = stack_gpu_resource()
    sizing = sizings[0]
    placed = [(shard, s.resource) for s in sizings for shard in s.shards]
    placed += [(shard, gpu) for shard in placement.gpu_shards]
    predicted = {k: v for s in sizings for k, v in s.predicted.items() if v is not None}
    lambda_concurrency = sum(s.decision.max_concurrency for s in sizings)
    items = [
        Shard(
            shard_id=f"{first_id + i:05d}",
            units=[unit_doc(u) for u in shard],
            placement=resource_kind(resource),
            resource=resource,
        )
        for i, (shard, resource) in enumerate(placed)
    ]
    key = store.put_json(storage.wave_key(job_id, stage, wave), to_json_list(items))
    prefix = storage.map_runs_prefix(job_id, stage, wave)
    entry = WaveEntry(
        stage=stage,
        wave=wave,
        decision=sizing.decision,
        resource=sizing.resource,
        predicted_samples_per_s=predicted,
        startup_s=sizing.startup_s,
        map_runs_prefix=prefix,
        started_at=started,
        ended_at=time.time(),
        memory_mb=memory_mb,
        peak_rss_mb=peak_rss_mb(),
        n_gpu_shards=len(placement.gpu_shards),
        partition=placement.partition,
        placement=placement.decision,
        shards=[
            ScheduledShard(
                shard_id=item.shard_id,
                units=[u.key for u in shard],
                placement=item.placement,
                resource=item.resource,
            )
            for item, (shard, _) in zip(items, placed, strict=True)
        ],
    )
    schedule.waves.append(entry)
    schedule.next_shard_id = first_id + len(items)
    store.put_json(storage.schedule_key(job_id, stage), schedule.to_json_dict())
    summary = ScheduleSummary(stage=stage, waves=[w.summary() for w in schedule.waves])
    records.update(job_id, schedule=summary.to_json_dict())
    return WaveOutput(
        job_id=job_id,
        plan_key=storage.plan_key(job_id),
        stage=stage,
        wave=wave,
        has_wave=True,
        shards_key=key,
        n_shards=len(items),
        max_concurrency=lambda_concurrency + len(placement.gpu_shards),
        map_runs_prefix=prefix,
        next_wave=wave + 1,
    )


def _recover_schedule(
    store: storage.JobStore, job_id: str, stage: int, old: StageSchedule
) -> StageSchedule:
    """A stage's schedule reduced to the shards whose predictions exist in S3.

    Every earlier wave is kept, in order (its index and its Map Run's prefix stay taken), with only
    its written shards; the others are listed under ``dropped_shards`` and their units planned
    again by the caller. ``next_shard_id`` is the first id no earlier shard used.

    Parameters
    ----------
    store : JobStore
    job_id : str
    stage : int
    old : StageSchedule
        The schedule as an earlier execution left it.

    Returns
    -------
    StageSchedule
        With ``recovered`` counting the shards kept and dropped.
    """
    written = set(store.list_keys(storage.preds_prefix(job_id, stage)))
    next_id = old.next_shard_id or 0
    waves, kept, dropped = [], 0, 0
    for entry in old.waves:
        next_id = max([next_id, *(int(sh.shard_id) + 1 for sh in entry.shards)])
        done = [
            sh for sh in entry.shards if storage.preds_key(job_id, stage, sh.shard_id) in written
        ]
        missing = [sh.shard_id for sh in entry.shards if sh not in done]
        kept, dropped = kept + len(done), dropped + len(missing)
        waves.append(
            entry.model_copy(
                update={"shards": done, "dropped_shards": [*(entry.dropped_shards or []), *missing]}
            )
        )
    return StageSchedule(
        waves=waves, next_shard_id=next_id, recovered=RecoveredCount(kept=kept, dropped=dropped)
    )
