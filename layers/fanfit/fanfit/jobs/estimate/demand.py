"""An estimate's demand on the shared capacity (Dorm), kept in step with its waves.

A job's *demand* is what it registers in the partition table (:func:`fanfit.jobs.sharing.
register_job`): the concurrent invocations it can use now, which Dorm's optimizer never exceeds
when it cuts the job's partition (Sun et al. 2017, SoCC: "the demand of an application is the
resources its tasks can use"). An estimate runs in waves of shards, and a wave can use at most
its own shards at once, so:

- Prepare registers a stage's demand when the stage starts (:func:`stage_demand`: its unit count,
  capped by the job's ``max_concurrency``; stage 0 is the job's arrival);
- Schedule re-registers it at each barrier, before sizing the wave it writes (:func:`follow_wave`, from Schedule's
  :func:`fanfit.jobs.estimate.wave.register_wave`:
  a ``"resize"`` event in the partition history when it changed): the Lambda shards the wave
  would run at once under the job's own cap (:func:`wave_demand`), so a probe wave or a stage's
  last wave (only what remains) asks for no idle slots, and the partition Schedule then reads is
  cut from that demand;
- a stage with nothing left asks for :data:`IDLE_DEMAND` until the next stage's Prepare or
  Aggregate (which releases the job).

With its demand, Schedule registers the job's completion figures (``remaining_s``,
``critical_s``: :func:`completion_figures`), which turn on the partition table's completion pass
(``dorm_policy``, :func:`fanfit.jobs.sharing.recompute`) once every registered job gave them. They
ride with the demand: a barrier whose demand is unchanged, the job's figures already registered,
writes nothing and does not compute them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from fanfit import dml, storage
from fanfit.jobs import sharing
from fanfit.jobs.estimate.data import StageContext, n_train, unit_signature
from fanfit.sched.throughput import EwmaThroughput, ThroughputEntry

__all__ = ["IDLE_DEMAND", "completion_figures", "follow_wave", "stage_demand", "wave_demand"]

#: Demand of a job between its stage's last wave and its next step (the partition table needs at
#: least one slot of demand per registered job).
IDLE_DEMAND = 1


def stage_demand(n_units: int, max_concurrency: int) -> int:
    """A stage's demand when it starts: its units, capped by the job's ``max_concurrency``.

    Parameters
    ----------
    n_units : int
        Fit units of the stage (>= 0).
    max_concurrency : int
        The job's cap on concurrent invocations (>= 1).

    Returns
    -------
    int
        ``min(n_units, max_concurrency)``.
    """
    return min(int(n_units), int(max_concurrency))


def wave_demand(wave_concurrency: Sequence[int], n_units: int, max_concurrency: int) -> int:
    """The Lambda demand of a wave: the shards it runs at once, capped as a stage's demand.

    Parameters
    ----------
    wave_concurrency : sequence of int
        Per Lambda resource of the wave, the Map concurrency its sizing chose
        (:attr:`fanfit.sched.sizing.ShardingDecision.max_concurrency`, at most its shard count).
    n_units : int
        The wave's Lambda units (what remains of the stage on Lambda).
    max_concurrency : int
        The job's cap.

    Returns
    -------
    int
        ``min(sum(wave_concurrency), n_units, max_concurrency)``, at least 0.
    """
    return max(
        0, min(sum(int(c) for c in wave_concurrency), stage_demand(n_units, max_concurrency))
    )


def follow_wave(
    partitions: storage.Partitions | None,
    job_id: str,
    weight: float,
    *,
    demand: int,
    gpu_demand: int = 0,
    figures: Callable[[], tuple[float, float] | None] | None = None,
) -> sharing.Partition | None:
    """Re-register the job's demand and completion figures at a barrier (Schedule), before the
    wave is sized.

    A job that holds no partition (not registered, or already released) is left alone: only
    Prepare registers a job's arrival, with its execution. A demand equal to the registered one
    changes nothing (no recomputation, no history entry) once the job registered figures;
    otherwise ``figures()`` is called, and a changed demand, or figures that appear for the first
    time, is a ``"resize"`` recomputation of every partition (:func:`fanfit.jobs.sharing.
    register_job`, as :func:`fanfit.jobs.sharing.follow_job` with an infinite tolerance), which
    registers the figures of this barrier. So an estimate's figures are refreshed with its demand,
    never alone, and computed only when they are sent: its barriers come every wave, seconds
    apart, and a recomputation at each of them (the partition table and its history written,
    every job's partition cut again) made the QTE benchmark of 6 jobs (3 quantiles, 5 folds x 3
    repetitions, local stack) take 135 s against 86 s this way and 81 s without figures (one run
    each, 2026-11-26). At an unchanged demand the registered figures stay even where this
    barrier's would be None (a unit's throughput unknown on the resource the placement now chose):
    they are not computed to find out. A train job's figures move by rounds and re-register on
    :data:`fanfit.jobs.sharing.FIGURE_TOLERANCE`. The job keeps its recorded execution and its
    ``weight``. A demand of nothing at all (no Lambda shard, no GPU shard: the stage is done)
    registers :data:`IDLE_DEMAND`.

    Parameters
    ----------
    partitions : Partitions or None
        None (no partition table) does nothing.
    job_id : str
    weight : float
        The job's weight in the fair shares (its plan's ``weight``; unchanged).
    demand : int
        Lambda demand of the wave (:func:`wave_demand`).
    gpu_demand : int
        GPU worker jobs of the wave.
    figures : callable, optional
        ``figures() -> (remaining_s, critical_s)`` or None: the job's completion figures
        (:func:`completion_figures`), called at most once, only when they are registered; None
        (or a callable returning None: a unit has no predicted seconds yet, a probe wave)
        registers none, and the completion pass stays off while the job is registered without
        them.

    Returns
    -------
    Partition or None
        The job's partition (after the recomputation when there was one); None without a table or
        a registration.

    Raises
    ------
    InvalidJobError, PartitionConflictError
        See :func:`fanfit.jobs.sharing.register_job`.
    """
    held = sharing.read_partition(partitions, job_id)
    if held is None:
        return None
    if demand + gpu_demand < 1:
        demand = IDLE_DEMAND
    same_demand = (held.demand, held.gpu_demand) == (int(demand), int(gpu_demand))
    if same_demand and (held.remaining_s is not None or held.critical_s is not None):
        return held
    now = figures() if figures is not None else None
    remaining_s, critical_s = (None, None) if now is None else now
    if same_demand and not sharing.figures_moved(held, remaining_s, critical_s, math.inf):
        return held
    return sharing.register_job(
        partitions, job_id, "estimate", demand=demand, gpu_demand=gpu_demand, weight=weight,
        remaining_s=remaining_s, critical_s=critical_s,
    )  # fmt: skip


def completion_figures(
    ctx: StageContext,
    remaining: list[dml.FitUnit],
    on: Mapping[str, str],
    history: EwmaThroughput,
    default_resource: str,
    *,
    throughput: storage.ThroughputRecords | None = None,
) -> tuple[float, float] | None:
    """An estimate's completion figures at a barrier, from the history its waves are sized from.

    A unit's predicted seconds are its training rows over the predicted throughput (samples/s)
    of its workload signature on the resource it runs on (:func:`fanfit.jobs.estimate.wave.size`'s
    figure, per unit): a unit of this stage on the resource the wave's placement put it on
    (``on``: its CrossFit memory size, or the GPU worker); a unit of a later stage (the plan knows
    them: :func:`fanfit.dml.fit_units`) on the resource this placement gave its learner, else
    ``default_resource`` (the stack's first CrossFit size).

    - ``remaining_s``: slot-seconds of work left, the sum of those seconds over this stage's
      units not yet run (``remaining``) and every unit of the later stages;
    - ``critical_s``: the longest remaining chain, seconds: a stage's units are independent and
      the stages run one after the other, so per stage still to run its longest unit, summed over
      the stages (0 for this stage when nothing of it remains).

    These are what benchmarks/sharing.py's simulated ``Job.remaining_s`` / ``Job.critical_s``
    mean for an estimate (its one stage's units not finished x a unit's seconds; one unit's
    seconds), at a barrier, where no unit is in flight.

    Parameters
    ----------
    ctx : StageContext
    remaining : list of FitUnit
        This stage's units not yet run.
    on : mapping of str to str
        Unit key -> the resource the wave's placement runs it on
        (:meth:`fanfit.jobs.estimate.wave.Placement.unit_resources`); empty when nothing remains.
    history : EwmaThroughput
        The throughput history the wave is sized from (this stage's signatures).
    default_resource : str
        ``lambda-<MB>`` of a learner the placement does not place.
    throughput : ThroughputRecords, optional
        The throughput table: the later stages' signatures that ``history`` lacks are read from it
        (one query per signature); without it, only ``history``.

    Returns
    -------
    (float, float) or None
        ``(remaining_s, critical_s)``; None when a unit's signature has no predicted throughput
        on its resource (a probe wave: no guess is made).
    """
    spec = ctx.plan.dml
    later = [ctx.plan.units(s) for s in range(ctx.stage + 1, ctx.plan.n_stages)]
    history = _with_later_stages(ctx, later, history, throughput)
    learner_on = {u.learner: on[u.key] for u in remaining if u.key in on}
    total, critical = 0.0, 0.0
    for i, units in enumerate([remaining, *later]):
        longest = 0.0
        for u in units:
            resource = (on.get(u.key) if i == 0 else None) or learner_on.get(
                u.learner, default_resource
            )
            signature = unit_signature(spec, u, ctx.n_obs, ctx.n_features)
            rate = history.predict(signature, resource)
            if rate is None or rate <= 0:
                return None
            seconds = n_train(ctx.folds, u, spec) / rate
            total += seconds
            longest = max(longest, seconds)
        critical += longest
    return total, critical


def _with_later_stages(
    ctx: StageContext,
    later: list[list[dml.FitUnit]],
    history: EwmaThroughput,
    throughput: storage.ThroughputRecords | None,
) -> EwmaThroughput:
    """``history`` plus the throughput table's entries of the later stages' signatures that this
    stage's do not cover (``history`` itself without a table or such a signature)."""
    signatures = {
        unit_signature(ctx.plan.dml, u, ctx.n_obs, ctx.n_features) for units in later for u in units
    } - set(ctx.signatures.values())
    if throughput is None or not signatures:
        return history
    return EwmaThroughput(
        alpha=history.alpha,
        threads=history.threads,
        entries=[
            *history.entries,
            *(ThroughputEntry.from_dict(e) for e in throughput.load(signatures)),
        ],
    )
