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
``critical_s``: :func:`fanfit.jobs.estimate.wave.completion_figures`), which turn on the
partition table's completion pass (``dorm_policy``, :func:`fanfit.jobs.sharing.recompute`) once every
registered job gave them; a barrier whose demand is unchanged and whose figures moved by no more
than :data:`fanfit.jobs.sharing.FIGURE_TOLERANCE` writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fanfit import storage
from fanfit.jobs import sharing

__all__ = ["IDLE_DEMAND", "follow_wave", "stage_demand", "wave_demand"]

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
    remaining_s: float | None = None,
    critical_s: float | None = None,
) -> sharing.Partition | None:
    """Re-register the job's demand and completion figures at a barrier (Schedule), before the
    wave is sized.

    A job that holds no partition (not registered, or already released) is left alone: only
    Prepare registers a job's arrival, with its execution. A demand equal to the registered one
    changes nothing (no recomputation, no history entry), whatever the figures did, unless they
    appear for the first time; otherwise it is a ``"resize"`` recomputation of every partition
    (:func:`fanfit.jobs.sharing.follow_job`), which registers the figures of this barrier. So an
    estimate's figures are refreshed with its demand, never alone: its barriers come every wave,
    seconds apart, and a recomputation at each of them (the partition table and its history
    written, every job's partition cut again) made the QTE benchmark of 6 jobs (3 quantiles,
    5 folds x 3 repetitions, local stack) take 135 s against 86 s this way and 81 s without
    figures (one run each, 2026-11-26). A train job's figures move by rounds and re-register on
    :data:`fanfit.jobs.sharing.FIGURE_TOLERANCE`. The job keeps its
    recorded execution and its ``weight``. A demand of nothing at all (no Lambda shard, no GPU
    shard: the stage is done) registers :data:`IDLE_DEMAND`.

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
    remaining_s, critical_s : float or None
        The job's completion figures (:func:`fanfit.jobs.estimate.wave.completion_figures`);
        None when a unit has no predicted seconds yet (a probe wave): the completion pass stays
        off while the job is registered without them.

    Returns
    -------
    Partition or None
        The job's partition after the recomputation; None without a table or a registration.

    Raises
    ------
    InvalidJobError, PartitionConflictError
        See :func:`fanfit.jobs.sharing.register_job`.
    """
    if partitions is None:
        return None
    if demand + gpu_demand < 1:
        demand = IDLE_DEMAND
    return sharing.follow_job(
        partitions, job_id, "estimate", demand=demand, gpu_demand=gpu_demand, weight=weight,
        remaining_s=remaining_s, critical_s=critical_s, tolerance=math.inf,
    )  # fmt: skip
