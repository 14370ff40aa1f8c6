"""Planning one wave of a stage: where its units run and how they are cut into shards.

Schedule (:mod:`fanfit.jobs.estimate.schedule`) observes the last wave, then plans the next with
this module's two phases, and writes it:

2. :func:`place`: choose, per nuisance learner, the resource its units run on: a CrossFit memory
   size the stack offers or the GPU worker (HeterPS's exact solver, :func:`fanfit.sched.profiles.
   choose_placement`, on profiles from the throughput table: :func:`plan_placement`), under the
   job's objective (deadline, budget, or the default) and its partition of the shared capacity
   (Dorm), read at this barrier; a learner both Lambda and the GPU worker can run is then split
   between them by drift-plus-penalty on the queues' backlogs (Proteus: :func:`dispatch_units`);
3. :func:`size` / :func:`size_placed`: cut each Lambda resource's units into shards from the
   predicted seconds per unit (:func:`fanfit.sched.sizing.plan_shards`; a probe wave without
   history).

The same phases plan a whole job without running it (:func:`plan_job`, ``fanfit estimate
--plan-only``) and the wave whose shards become the job's Dorm demand at a barrier
(:func:`register_wave`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fanfit import dml, storage
from fanfit.jobs import sharing
from fanfit.jobs.documents.estimate import (
    DispatchedQueue,
    EstimatePlan,
    EstimatePrediction,
    PartitionUsed,
    PlacedStage,
    PlacementDecision,
    PlacementInput,
    PlannedShards,
    PlannedStage,
    WaveDecision,
    WaveDispatch,
)
from fanfit.jobs.estimate import demand
from fanfit.jobs.estimate.data import (
    StageContext,
    n_train,
    unit_signature,
)
from fanfit.learners.allowlist import BATCHED_LEARNERS
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.lyapunov import split_wave
from fanfit.sched.profiles import (
    Objective,
    PlacementChoice,
    WorkGroup,
    choose_placement,
    wave_profiles,
)
from fanfit.sched.resources import (
    lambda_resource,
    resource_kind,
    resource_memory_mb,
    stack_gpu_resource,
)
from fanfit.sched.shards import deal, n_shards_for, share_concurrency
from fanfit.sched.sizing import DEFAULT_STARTUP_S, plan_shards, split_units
from fanfit.sched.throughput import EwmaThroughput

#: GPU worker jobs one wave deals its GPU units over (the plan has no option for more).
GPU_SHARDS_PER_WAVE = 1


@dataclass(frozen=True)
class Placement:
    """Where the wave's units run: ``gpu_shards`` on the GPU worker, ``lambda_units`` still to be
    sized (on ``lambda_resource``), under ``job_concurrency`` (the job's cap, within its
    partition). ``by_resource`` splits the Lambda units by the CrossFit memory size chosen for
    them (absent: all on ``lambda_resource``); ``decision`` is the placement's record."""

    gpu_shards: list[list[dml.FitUnit]]
    lambda_units: list[dml.FitUnit]
    job_concurrency: int
    partition: PartitionUsed | None
    lambda_resource: str | None = None
    by_resource: dict[str, list[dml.FitUnit]] | None = None
    decision: PlacementDecision | None = None

    def unit_resources(self, default_resource: str) -> dict[str, str]:
        """Unit key -> the resource this placement runs it on: its CrossFit memory size
        (``lambda-<MB>``; ``lambda_resource``, else ``default_resource``, without ``by_resource``)
        or the GPU worker."""
        by_resource = self.by_resource or {
            self.lambda_resource or default_resource: self.lambda_units
        }
        on = {u.key: resource for resource, units in by_resource.items() for u in units}
        on.update({u.key: stack_gpu_resource() for shard in self.gpu_shards for u in shard})
        return on


@dataclass(frozen=True)
class Sizing:
    """The Lambda shards of the wave and what their cut was based on."""

    shards: list[list[dml.FitUnit]]
    decision: WaveDecision
    resource: str
    #: signature -> predicted samples/s on ``resource`` (None: no history)
    predicted: dict[str, float | None]
    startup_s: float


def plan_job(
    plan: EstimatePlan,
    folds: np.ndarray,
    history: EwmaThroughput,
    *,
    stack: str,
    memory_sizes: list[int],
    gpu_enabled: bool,
    account_concurrency: int,
) -> EstimatePrediction:
    """Plan a job without running it (``fanfit estimate --plan-only``): Schedule's own phases.

    For each stage, the stage's units (:func:`fanfit.dml.fit_units`) are placed by :func:`place`
    and sized by :func:`size_placed`, exactly as Schedule plans a stage's first wave, from
    ``history`` (the stack's ThroughputTable); no partition is read (the job holds none yet).

    Parameters
    ----------
    plan : EstimatePlan
        The job's plan as Prepare would write it (its ``job_id`` is a placeholder).
    folds : ndarray, shape (n_obs, n_rep)
    history : EwmaThroughput
        Over the stack's ThroughputTable entries of the job's signatures.
    stack : str
        The stack's name (recorded).
    memory_sizes : list of int
        The CrossFit functions' memory sizes, MB.
    gpu_enabled : bool
    account_concurrency : int
        The account's Lambda concurrency.

    Returns
    -------
    EstimatePrediction
        ``predicted_wall_s``: the sum over stages of the sizing's predicted makespan
        (:func:`fanfit.sched.sizing.plan_shards`; the placement's prediction for a probe wave);
        ``predicted_cost_usd``: the sum of the placements' costs.
    """
    spec = plan.dml
    n_features = len(spec.x_cols) + spec.n_treat - 1
    stages = []
    for stage in range(plan.n_stages):
        units = plan.units(stage)
        ctx = StageContext(
            job_id=plan.job_id, stage=stage, plan=plan, folds=folds, n_obs=plan.n_obs,
            n_features=n_features, units=units,
            signatures={u.key: unit_signature(spec, u, plan.n_obs, n_features) for u in units},
        )  # fmt: skip
        placement = place(
            ctx, units, None, history, memory_sizes=memory_sizes, gpu_enabled=gpu_enabled
        )
        sizings = size_placed(ctx, placement, history, account_concurrency=account_concurrency)
        shards = [
            PlannedShards(
                resource=s.resource,
                n_shards=len(s.shards),
                max_units_per_shard=max((len(sh) for sh in s.shards), default=0),
                policy=s.decision.policy,
                probe=bool(s.decision.probe),
                max_concurrency=s.decision.max_concurrency,
                predicted_makespan_s=s.decision.predicted_makespan_s,
            )
            for s in sizings
            if s.shards
        ]
        if placement.gpu_shards:
            shards.append(
                PlannedShards(
                    resource=stack_gpu_resource(),
                    n_shards=len(placement.gpu_shards),
                    max_units_per_shard=max(len(sh) for sh in placement.gpu_shards),
                    policy="gpu",
                    probe=False,
                    max_concurrency=len(placement.gpu_shards),
                )
            )
        assert placement.decision is not None
        # the shards as cut run side by side: the stage takes its longest resource's makespan
        makespans = [
            s.decision.predicted_makespan_s
            for s in sizings
            if s.shards and s.decision.predicted_makespan_s is not None
        ]
        split = placement.decision.dispatch or []
        dual = {d.stage for d in split}
        gpu_s = [
            st.seconds
            for st in placement.decision.stages
            if resource_kind(st.resource) == "gpu" and st.stage not in dual
        ] + [q.finish_s for d in split for q in d.queues if q.name == "gpu" and q.units]
        sized = [s for s in sizings if s.shards]
        # a resource the job's cap left for a later wave (share_concurrency): the shards above
        # are the first wave only, so the placement solver's own prediction
        deferred = set(placement.by_resource or ()) - {s.resource for s in sizings}
        wall = (
            max(makespans + gpu_s)
            if makespans and len(makespans) == len(sized) and not deferred
            else placement.decision.predicted_wall_s
        )
        stages.append(
            PlannedStage(
                stage=stage, n_units=len(units), placement=placement.decision, shards=shards,
                predicted_wall_s=wall,
            )
        )  # fmt: skip
    return EstimatePrediction(
        stack=stack,
        memory_sizes=memory_sizes,
        gpu_enabled=gpu_enabled,
        account_concurrency=account_concurrency,
        job_concurrency=plan.max_concurrency,
        stages=stages,
        predicted_wall_s=sum(s.predicted_wall_s for s in stages),
        predicted_cost_usd=sum(s.placement.predicted_cost_usd for s in stages),
    )


def plan_unbound(
    ctx: StageContext,
    remaining: list[dml.FitUnit],
    history: EwmaThroughput,
    *,
    memory_sizes: list[int],
    gpu_enabled: bool,
    account_concurrency: int,
) -> tuple[Placement, list[Sizing]]:
    """The wave planned under the job's own cap, with no partition (:func:`place` and
    :func:`size_placed`, as ``fanfit estimate --plan-only`` plans): what the job asks for."""
    unbound = place(
        ctx, remaining, None, history, memory_sizes=memory_sizes, gpu_enabled=gpu_enabled
    )
    return unbound, size_placed(ctx, unbound, history, account_concurrency=account_concurrency)


def within_partition(
    planned: tuple[Placement, list[Sizing]] | None, placement: Placement
) -> tuple[Placement, list[Sizing]] | None:
    """``planned`` (:func:`plan_unbound`) as the wave to run, when the partition that
    ``placement`` read holds all it asked for (its Lambda concurrency and GPU shards): the wave
    is then the very plan whose concurrency was registered as the demand (a plan cut again under
    the partition's cap can tie differently and run fewer shards than it holds). None otherwise."""
    if planned is None or placement.partition is None:
        return None
    unbound, sizings = planned
    used = placement.partition
    lambda_demand = sum(s.decision.max_concurrency for s in sizings if s.shards)
    if used.lambda_concurrency < lambda_demand or used.gpus < len(unbound.gpu_shards):
        return None
    return dataclasses.replace(
        unbound, partition=used, job_concurrency=placement.job_concurrency
    ), sizings


def register_wave(
    partitions: storage.Partitions | None,
    ctx: StageContext,
    remaining: list[dml.FitUnit],
    history: EwmaThroughput,
    *,
    memory_sizes: list[int],
    gpu_enabled: bool,
    account_concurrency: int,
    throughput: storage.ThroughputRecords | None = None,
    planned: tuple[Placement, list[Sizing]] | None = None,
) -> sharing.Partition | None:
    """Schedule's barrier hook: register the demand of the wave about to be cut, and the job's
    completion figures.

    The wave is planned once under the job's own cap, with no partition (Schedule's
    :func:`~fanfit.jobs.estimate.wave.place` and :func:`~fanfit.jobs.estimate.wave.
    size_placed`, as ``fanfit estimate --plan-only`` plans), and its Lambda concurrency
    (:func:`~fanfit.jobs.estimate.demand.wave_demand`) and GPU shards become the job's demand,
    with the job's completion figures of that placement
    (:func:`~fanfit.jobs.estimate.demand.completion_figures`), re-registered only when the demand
    changed or the job has none registered yet (:func:`~fanfit.jobs.estimate.demand.follow_wave`),
    and computed only then: a barrier whose demand is unchanged reads the partition and plans the
    wave, nothing more. Schedule then reads the partition cut from that demand and sizes the wave
    it writes within it.

    Parameters
    ----------
    partitions : Partitions or None
        None, or a job holding no partition, plans nothing and changes nothing.
    ctx : StageContext
        The stage being scheduled.
    remaining : list of FitUnit
        The stage's units not yet run (empty: the stage is done,
        :data:`~fanfit.jobs.estimate.demand.IDLE_DEMAND`).
    history : EwmaThroughput
        The throughput history the wave is sized from.
    memory_sizes, gpu_enabled, account_concurrency
        As :func:`fanfit.jobs.estimate.schedule.schedule_wave`.
    throughput : ThroughputRecords, optional
        The throughput table: the later stages' signatures that ``history`` lacks are read from it
        for the completion figures, when they are computed (one query per signature; without it,
        only ``history``).
    planned : (Placement, list of Sizing), optional
        :func:`plan_unbound` 's plan of this wave, when the caller made it (Schedule reuses it,
        :func:`within_partition`); planned here otherwise.

    Returns
    -------
    Partition or None
        As :func:`~fanfit.jobs.estimate.demand.follow_wave`.
    """
    if partitions is None or sharing.read_partition(partitions, ctx.job_id) is None:
        return None
    default_resource = lambda_resource(memory_sizes[0])
    if not remaining:
        return demand.follow_wave(
            partitions, ctx.job_id, ctx.plan.weight, demand=0,
            figures=lambda: demand.completion_figures(
                ctx, [], {}, history, default_resource, throughput=throughput
            ),
        )  # fmt: skip
    unbound, sizings = planned or plan_unbound(
        ctx, remaining, history, memory_sizes=memory_sizes, gpu_enabled=gpu_enabled,
        account_concurrency=account_concurrency,
    )  # fmt: skip
    wave = demand.wave_demand(
        [s.decision.max_concurrency for s in sizings if s.shards],
        len(unbound.lambda_units),
        ctx.plan.max_concurrency,
    )
    return demand.follow_wave(
        partitions, ctx.job_id, ctx.plan.weight, demand=wave, gpu_demand=len(unbound.gpu_shards),
        figures=lambda: demand.completion_figures(
            ctx, remaining, unbound.unit_resources(default_resource), history, default_resource,
            throughput=throughput,
        ),
    )  # fmt: skip


# --------------------------------------------------------------------------- 2. place


def learner_groups(
    plan: EstimatePlan,
    units: list[dml.FitUnit],
    signatures: dict[str, str],
    folds: np.ndarray | Mapping[int, np.ndarray],
) -> dict[str, tuple[WorkGroup, list[dml.FitUnit]]]:
    """The units grouped by nuisance learner (the placement's stages), with their work groups.

    A learner whose spec ``requires_gpu`` (PyTorch: the Lambda layers have no torch) is a group
    that cannot run on Lambda (``lambda_ok=False``): it has no Lambda profile.
    """
    learners = plan.dml.learners
    by_learner: dict[str, list[dml.FitUnit]] = {}
    for u in units:
        by_learner.setdefault(u.learner, []).append(u)
    out = {}
    for name, group in by_learner.items():
        rows = float(np.mean([n_train(folds, u, plan.dml) for u in group]))
        out[name] = (
            WorkGroup(
                name=name,
                signature=signatures[group[0].key],
                n_units=len(group),
                rows_per_unit=rows,
                lambda_ok=not learners[dml.learner_name(name)].requires_gpu,
                batched=learners[dml.learner_name(name)].name in BATCHED_LEARNERS,
            ),
            group,
        )
    return out


def plan_placement(
    groups: list[WorkGroup],
    history: EwmaThroughput,
    *,
    memory_sizes: list[int],
    gpu_enabled: bool,
    job_concurrency: int,
    gpu_slots: int = GPU_SHARDS_PER_WAVE,
    objective: Objective | None = None,
) -> tuple[PlacementChoice, PlacementDecision]:
    """Place a wave's learner groups (HeterPS) from the throughput history; pure.

    The offered resources are ``lambda-<MB>`` for each of ``memory_sizes`` and, when
    ``gpu_enabled``, the GPU worker (:func:`fanfit.sched.resources.stack_gpu_resource`). Profiles:
    :func:`fanfit.sched.profiles.wave_profiles` (measured figures, else the documented priors;
    Lambda start-up without a measurement: :data:`fanfit.sched.sizing.DEFAULT_STARTUP_S`).
    Workers: up to ``job_concurrency`` per Lambda resource and ``gpu_slots`` GPU jobs. The
    groups run side by side in the Map; the model (sum of the groups' times, each with the whole
    concurrency) is an upper bound of the wave's makespan with the same worker-seconds.
    ``fanfit estimate --plan-only`` calls this same function.

    Returns
    -------
    (PlacementChoice, PlacementDecision)
        The solver's choice and its record for the job's documents.

    Raises
    ------
    InfeasiblePlacementError, InvalidJobError
        A group with no resource it can run on.
    """
    objective = objective or Objective()
    resources = [lambda_resource(mb) for mb in memory_sizes]
    if gpu_enabled:
        resources.append(stack_gpu_resource())
    known = {(e.signature, e.resource) for e in history.entries}
    profiles, inputs = wave_profiles(
        groups,
        resources,
        history.predict,
        history.predict_io,
        lambda_startup_s=DEFAULT_STARTUP_S,
        measured=lambda sig, res: (sig, res) in known,
        predict_batched=history.predict_batched,
    )
    choice = choose_placement(
        profiles,
        objective,
        max_workers={"lambda": max(1, job_concurrency), "gpu": max(1, gpu_slots)},
    )
    placed = choice.placement
    decision = PlacementDecision(
        objective=objective.kind,  # type: ignore[arg-type]
        deadline_s=objective.deadline_s,
        budget_usd=objective.budget_usd,
        slack=objective.slack,
        resources=resources,
        stages=[PlacedStage(**s.to_dict()) for s in placed.stages],
        inputs=[PlacementInput(**i.to_dict()) for i in inputs],
        fastest_s=choice.fastest_s,
        met=choice.met,
        predicted_wall_s=placed.total_s,
        predicted_cost_usd=placed.cost_usd,
    )
    return choice, decision


def place(
    ctx: StageContext,
    remaining: list[dml.FitUnit],
    partitions: storage.Partitions | None,
    history: EwmaThroughput | None = None,
    *,
    memory_sizes: list[int] | None = None,
    gpu_enabled: bool = False,
) -> Placement:
    """Where the wave's units run, under the job's objective and partition.

    Each nuisance learner's units go where :func:`plan_placement` puts them: the CrossFit
    function of one of ``memory_sizes`` or the GPU worker, the least cost within the job's
    ``deadline_s``, the least time within its ``budget_usd``, or by default the least cost at most
    5% slower than the fastest plan. A learner that cannot run on Lambda (PyTorch) has no Lambda
    profile, so the solver places it on the GPU worker. A learner both can run, when the GPU
    worker is offered, is split between a Lambda size and the GPU worker by :func:`dispatch_units`
    (Proteus) instead. GPU units are dealt over :data:`GPU_SHARDS_PER_WAVE` jobs. The job's partition of the shared capacity, read at this
    barrier (Dorm, :func:`fanfit.jobs.sharing.partition_at_barrier`), caps the job's concurrency.
    """
    partition = sharing.partition_at_barrier(partitions, ctx.job_id)
    job_concurrency = ctx.plan.max_concurrency
    if partition is not None:
        job_concurrency = min(job_concurrency, partition.concurrency)
    sizes = memory_sizes or [1769]
    groups = learner_groups(ctx.plan, remaining, ctx.signatures, ctx.folds)
    objective = Objective(deadline_s=ctx.plan.deadline_s, budget_usd=ctx.plan.budget_usd)
    choice, decision = plan_placement(
        [g for g, _ in groups.values()],
        history if history is not None else EwmaThroughput(),
        memory_sizes=sizes,
        gpu_enabled=gpu_enabled,
        job_concurrency=job_concurrency,
        objective=objective,
    )
    on_gpu, by_resource, dispatch = dispatch_units(
        groups,
        {s.stage: s.resource for s in choice.placement.stages},
        decision.inputs,
        job_concurrency=job_concurrency,
    )
    if dispatch:
        decision = decision.model_copy(update={"dispatch": dispatch})
    gpu_keys = {u.key for u in on_gpu}
    lambda_units = [u for u in remaining if u.key not in gpu_keys]
    main = max(by_resource, key=lambda r: len(by_resource[r])) if by_resource else None
    return Placement(
        gpu_shards=deal(on_gpu, GPU_SHARDS_PER_WAVE) if on_gpu else [],
        lambda_units=lambda_units,
        job_concurrency=job_concurrency,
        partition=None if partition is None else PartitionUsed(**partition.to_dict()),
        lambda_resource=main or lambda_resource(sizes[0]),
        by_resource=by_resource,
        decision=decision,
    )


def dispatch_units(
    groups: dict[str, tuple[WorkGroup, list[dml.FitUnit]]],
    chosen: dict[str, str],
    inputs: list[PlacementInput],
    *,
    job_concurrency: int,
    gpu_slots: int = GPU_SHARDS_PER_WAVE,
    prices: PriceTable = DEFAULT_PRICES,
) -> tuple[list[dml.FitUnit], dict[str, list[dml.FitUnit]], list[WaveDispatch]]:
    """Send each learner group's units to its resource; split those both queues can run (Proteus).

    A group the placement's inputs profile on the GPU worker and on Lambda (``lambda_ok``, the
    GPU worker offered) is dual: its units are split between the Lambda queue and the GPU worker
    by :func:`fanfit.sched.lyapunov.split_wave`, online, one group after the other, on the
    backlogs the queues hold at that point. Every other group goes where the solver put it.

    - The Lambda queue runs at the solver's Lambda size for the group, or, where the solver chose
      the GPU worker, at the size with the least USD per unit (``price per second / rows/s``;
      the smaller on a tie). It serves ``job_concurrency`` workers' ``rows/s / rows per unit``
      units/s and costs their GB-seconds (:meth:`fanfit.prices.PriceTable.lambda_cost_usd`).
    - The GPU worker serves ``gpu_slots`` jobs' units/s at the instance's price per second
      (:meth:`fanfit.prices.PriceTable.gpu_cost_usd`, the stack's instance type).
    - Backlogs, seconds of work at the barrier: the queue's start-up (the measured overhead per
      shard: the group's own on that resource; on the GPU worker, where the group's is the prior,
      the largest measured for another group of the wave, since the wave's GPU units run in one
      job) plus the work already sent to it (units x rows per unit / rows/s, over its workers).

    Parameters
    ----------
    groups : dict of str to (WorkGroup, list of FitUnit)
        :func:`learner_groups`.
    chosen : dict of str to str
        The solver's resource per group.
    inputs : list of PlacementInput
        The figures the placement used (rows/s and start-up seconds per group and resource).
    job_concurrency : int
        The job's Lambda workers.
    gpu_slots : int
        GPU worker jobs of the wave.
    prices : PriceTable

    Returns
    -------
    (list of FitUnit, dict of str to list of FitUnit, list of WaveDispatch)
        The GPU worker's units, the Lambda units by resource, and the split of each dual group.
    """
    gpu = stack_gpu_resource()
    instance = gpu.split(":", 1)[1]
    if instance not in prices.gpu_instance_hour_usd:
        instance = prices.gpu_instance_type
    figures = {(i.stage, i.resource): i for i in inputs}
    measured_gpu = [
        i.startup_s for i in inputs if resource_kind(i.resource) == "gpu" and i.source != "prior"
    ]
    dual = [n for n in chosen if groups[n][0].lambda_ok and (n, gpu) in figures]
    workers = {"lambda": max(1, job_concurrency), "gpu": max(1, gpu_slots)}
    busy = {"lambda": 0.0, "gpu": 0.0}
    on_gpu: list[dml.FitUnit] = []
    by_resource: dict[str, list[dml.FitUnit]] = {}
    for name, resource in chosen.items():
        if name in dual:
            continue
        group, units = groups[name]
        kind = resource_kind(resource)
        fig = figures.get((name, resource))
        if fig is not None:
            work = group.n_units * group.rows_per_unit / fig.rows_per_s
            busy[kind] += work / workers[kind]
        if kind == "gpu":
            on_gpu += units
        else:
            by_resource.setdefault(resource, []).extend(units)
    dispatch = []
    for name in dual:
        group, units = groups[name]
        resource = chosen[name]
        if resource_kind(resource) != "lambda":
            lambdas = [
                i for i in inputs if i.stage == name and resource_kind(i.resource) == "lambda"
            ]
            best = min(
                lambdas,
                key=lambda i: (
                    prices.lambda_cost_usd(resource_memory_mb(i.resource) or 0, 1.0, 0)
                    / i.rows_per_s,
                    resource_memory_mb(i.resource) or 0,
                ),
            )
            resource = best.resource
        lam, gp = figures[(name, resource)], figures[(name, gpu)]
        per_unit = max(group.rows_per_unit, 1.0)
        rate = {
            "lambda": lam.rows_per_s / per_unit * workers["lambda"],
            "gpu": gp.rows_per_s / per_unit * workers["gpu"],
        }
        memory = resource_memory_mb(resource) or 0
        usd = {
            "lambda": prices.lambda_cost_usd(memory, 1.0, 0) * workers["lambda"],
            "gpu": prices.gpu_cost_usd(1.0, instance) * workers["gpu"],
        }
        gpu_startup = gp.startup_s
        if gp.source == "prior" and measured_gpu:
            gpu_startup = max(measured_gpu)
        startup = {"lambda": lam.startup_s, "gpu": gpu_startup}
        split = split_wave(
            len(units), rate, usd, {q: startup[q] + busy[q] for q in ("lambda", "gpu")}
        )
        n_lambda = split.units_of("lambda")
        if n_lambda:
            by_resource.setdefault(resource, []).extend(units[:n_lambda])
        on_gpu += units[n_lambda:]
        for q in ("lambda", "gpu"):
            busy[q] += split.units_of(q) / rate[q]
        dispatch.append(
            WaveDispatch(
                stage=name,
                n_units=len(units),
                n_fragments=split.n_fragments,
                V=split.V,
                queues=[
                    DispatchedQueue(
                        name=q,  # type: ignore[arg-type]
                        resource=resource if q == "lambda" else gpu,
                        units_per_s=split.units_per_s[i],
                        usd_per_unit=split.usd_per_unit[i],
                        backlog_s=split.backlog_s[i],
                        units=split.units[i],
                        fragments=split.fragments[i],
                        finish_s=split.finish_s[i],
                    )
                    for i, q in enumerate(split.queue_names)
                ],
            )
        )
    return on_gpu, by_resource, dispatch


# --------------------------------------------------------------------------- 3. size


def size(
    ctx: StageContext,
    placement: Placement,
    history: EwmaThroughput,
    crossfit_memory_mb: int,
    *,
    account_concurrency: int,
) -> Sizing:
    """Cut the Lambda units of the wave into shards.

    Each unit's predicted seconds are its training rows over the predicted throughput of its
    signature on ``lambda-<crossfit_memory_mb>``; the start-up is the largest predicted overhead
    (:data:`fanfit.sched.sizing.DEFAULT_STARTUP_S` without one). A job's fixed ``units_per_shard``
    deals the units into that size; otherwise :func:`fanfit.sched.sizing.plan_shards` decides with
    the job's ``sharding`` policy (``'per-fold'`` / ``'per-repetition'``: DoubleML-Serverless's
    layouts); under ``'auto'`` a signature without history makes the wave a probe, one unit of each
    unmeasured signature first.
    """
    plan, remaining = ctx.plan, placement.lambda_units
    resource = lambda_resource(crossfit_memory_mb)
    signatures = ctx.signatures
    predicted = {sig: history.predict(sig, resource) for sig in set(signatures.values())}
    io = [v for sig in predicted if (v := history.predict_io(sig, resource)) is not None]
    startup_s = max(io) if io else DEFAULT_STARTUP_S
    unknown = [u for u in remaining if predicted[signatures[u.key]] is None]
    seconds = None
    if not unknown:
        seconds = float(
            np.mean(
                [
                    n_train(ctx.folds, u, plan.dml) / predicted[signatures[u.key]]  # type: ignore[operator]
                    for u in remaining
                ]
            )
        )
    fixed = plan.units_per_shard
    shards: list[list[dml.FitUnit]]
    if not remaining:
        shards = []
        decision = WaveDecision(policy="gpu", n_shards=0, max_concurrency=0)
    elif fixed:
        made = plan_shards(
            len(remaining),
            seconds,
            startup_s,
            policy="per-fold",
            account_concurrency=account_concurrency,
            job_concurrency=placement.job_concurrency,
        )
        shards = deal(remaining, n_shards_for(len(remaining), placement.job_concurrency, fixed))
        decision = WaveDecision(
            **{
                **made.to_dict(),
                "policy": "fixed",
                "units_per_shard": int(fixed),
                "n_shards": len(shards),
                "max_concurrency": min(len(shards), made.max_concurrency),
            }
        )
    else:
        if unknown and plan.sharding == "auto":
            remaining = _probe_order(remaining, signatures, {u.key for u in unknown})
        made = plan_shards(
            len(remaining),
            seconds,
            startup_s,
            policy=plan.sharding,
            n_folds=plan.dml.n_cross_folds,
            account_concurrency=account_concurrency,
            job_concurrency=placement.job_concurrency,
        )
        shards = split_units(remaining, made)
        decision = WaveDecision(**made.to_dict())
    return Sizing(
        shards=shards, decision=decision, resource=resource, predicted=predicted,
        startup_s=startup_s,
    )  # fmt: skip


def size_placed(
    ctx: StageContext,
    placement: Placement,
    history: EwmaThroughput,
    *,
    account_concurrency: int,
) -> list[Sizing]:
    """:func:`size` for each Lambda resource the placement chose, in order of their unit counts
    (the first is the wave's main sizing). The job's concurrency is shared between the resources
    (:func:`fanfit.sched.shards.share_concurrency`), so the wave's Map never runs more than the
    job's cap at once; a resource left without a share (more resources than the cap) runs in a
    later wave of the stage."""
    groups = placement.by_resource
    if not groups:
        default = resource_memory_mb(placement.lambda_resource or lambda_resource(1769))
        return [
            size(ctx, placement, history, default or 1769, account_concurrency=account_concurrency)
        ]
    order = sorted(groups, key=lambda r: (-len(groups[r]), r))
    shares = share_concurrency([len(groups[r]) for r in order], placement.job_concurrency)
    sizings = []
    for resource, share in zip(order, shares, strict=True):
        if not share:
            continue  # the cap is spent on the larger resources: these units wait a wave
        part = Placement(
            gpu_shards=[],
            lambda_units=groups[resource],
            job_concurrency=share,
            partition=placement.partition,
            lambda_resource=resource,
        )
        memory = resource_memory_mb(resource) or 1769
        sizings.append(size(ctx, part, history, memory, account_concurrency=account_concurrency))
    return sizings


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
