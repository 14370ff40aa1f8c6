"""Dorm's completion pass: the partitions fanfit runs, weighted toward the jobs that finish first.

Dorm (Sun, Wen, Duong and Yan, "Towards Distributed Machine Learning in Shared Clusters: A
Dynamically-Partitioned Approach", IEEE SMARTCOMP 2017, arXiv:1704.06738) maximises utilization
subject to a bound on the fairness loss. Its utilization-fairness optimizer
(:func:`fanfit.sched.partition.dorm_partitions`) keeps every working slot busy but, being fair,
stretches the long jobs, which then end late, alone, and leave the capacity idle (issue 15's
simulation: 198 idle slot-seconds in the low-demand tail against FCFS's 175). Where the jobs
registered their remaining work ``r_i`` and remaining critical path ``T_i``, :func:`dorm_policy`
(what the partition table and benchmarks/sharing.py run) solves the same MILP a second time with
each job's utilization term weighted by :func:`completion_values`: shortest remaining work first
(Schrage and Miller, "The queue M/G/1 with the shortest remaining processing time discipline",
Operations Research 14(4), 1966), and a job whose ``T_i`` reaches 0.9 of ``sum_j r_j / C``, the
makespan's lower bound (Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math.
17(2), 1969), before all; subject to ``U >= U*`` of the first solve (work-conserving),
``F <= max(0.24, F*)`` (Dorm's fairness-loss bound) and the same adjustment bound ``theta``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidJobError
from fanfit.sched.partition import DEFAULT_MAX_CHANGES, PartitionDecision, dorm_partitions

__all__ = [
    "COMPLETION_ALPHA",
    "CRITICAL_BOOST",
    "CRITICAL_SHARE",
    "DEFAULT_FAIRNESS_BOUND",
    "completion_values",
    "dorm_policy",
]

#: Bound on the fairness loss ``F`` of :func:`dorm_policy`'s completion pass (Dorm's fairness-loss
#: bound; chosen in benchmarks/sharing.py's simulation, see :func:`dorm_policy`).
DEFAULT_FAIRNESS_BOUND = 0.24
#: Spread of the shortest-remaining-work ranks in :func:`completion_values` (first: ``1 + alpha``).
COMPLETION_ALPHA = 1.0
#: Added to the value of a job on the makespan's critical path (:func:`completion_values`).
CRITICAL_BOOST = 3.0
#: A job is on the critical path when its remaining critical path is at least this share of the
#: time the present jobs' work takes on the whole capacity (:func:`completion_values`).
CRITICAL_SHARE = 0.9


def completion_values(remaining_s: ArrayLike, critical_s: ArrayLike, capacity: float) -> np.ndarray:
    """What a slot of each job is worth to completion: shortest remaining work first, and the
    makespan's critical path before all.

    ``v_i = 1 + alpha (1 - rank_i / n) + boost [T_i >= share x sum_j r_j / C]``: ``rank_i`` is job
    ``i``'s place (0 first) when the jobs are sorted by remaining work ``r_i`` (ties by order
    given), so the job with the least work left is worth ``1 + alpha`` and the one with the most
    ``1 + alpha / n``: shortest remaining processing time first, the order that minimises the mean
    completion time on one server (Schrage and Miller, "The queue M/G/1 with the shortest remaining
    processing time discipline", Operations Research 14(4), 1966). ``T_i`` is the job's remaining
    critical path, the seconds it needs even at its whole demand (a train job: its rounds left
    times a round's seconds; an estimate: a unit's seconds), and ``sum_j r_j / C`` the seconds the
    present jobs' work takes on the whole capacity; the makespan is at least the larger of the two
    (Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 17(2), 1969), so a
    job whose ``T_i`` reaches ``share`` of that time ends last unless it runs at its whole demand
    now: it gets ``boost`` on top, which outranks every rank.

    Parameters
    ----------
    remaining_s : array_like of float, shape (n_jobs,)
        ``r_i``: slot-seconds of work each job has left (>= 0).
    critical_s : array_like of float, shape (n_jobs,)
        ``T_i``: seconds each job needs at least, at its whole demand (>= 0).
    capacity : float
        ``C``: Lambda slots shared (> 0).

    Returns
    -------
    numpy.ndarray of float, shape (n_jobs,)
        ``v_i`` in ``[1, 1 + alpha + boost]``, for :func:`dorm_partitions`'s ``value``. ``alpha``
        = :data:`COMPLETION_ALPHA`, ``boost`` = :data:`CRITICAL_BOOST`, ``share`` =
        :data:`CRITICAL_SHARE` (chosen in benchmarks/sharing.py's simulation).

    Raises
    ------
    InvalidJobError
        Arrays of different lengths, negative or not finite, or a capacity not above 0.
    """
    r = np.asarray(remaining_s, dtype=float).reshape(-1)
    t = np.asarray(critical_s, dtype=float).reshape(-1)
    if r.shape != t.shape or not (np.all(np.isfinite(r)) and np.all(np.isfinite(t))):
        raise InvalidJobError(
            "remaining_s and critical_s must be finite, one per job, got "
            f"{r.tolist()} and {t.tolist()}"
        )
    if np.any(r < 0) or np.any(t < 0):
        raise InvalidJobError(
            f"remaining_s and critical_s must be >= 0, got {r.tolist()}, {t.tolist()}"
        )
    if not (np.isfinite(capacity) and capacity > 0):
        raise InvalidJobError(f"capacity must be > 0, got {capacity!r}")
    n = r.size
    if n == 0:
        return np.zeros(0)
    rank = np.argsort(np.argsort(r, kind="stable"), kind="stable")
    drain_s = float(r.sum()) / float(capacity)
    critical = t >= CRITICAL_SHARE * drain_s
    return 1.0 + COMPLETION_ALPHA * (1.0 - rank / n) + CRITICAL_BOOST * critical


def dorm_policy(
    demand: ArrayLike,
    capacity: ArrayLike,
    weight: ArrayLike | None = None,
    current: ArrayLike | None = None,
    *,
    max_changes: int = DEFAULT_MAX_CHANGES,
    bsp_workers: ArrayLike | None = None,
    remaining_s: ArrayLike | None = None,
    critical_s: ArrayLike | None = None,
    fairness_bound: float = DEFAULT_FAIRNESS_BOUND,
) -> PartitionDecision:
    """The partitions fanfit runs: Dorm's optimizer, then a completion pass within its bounds.

    The one policy of the partition table (:func:`fanfit.jobs.sharing.recompute`) and of
    benchmarks/sharing.py's simulation.

    1. Dorm's utilization-fairness optimizer (:func:`dorm_partitions`): utilization ``U*``,
       fairness loss ``F*``.
    2. Where every job gave its remaining work and critical path: the same MILP again, its
       utilization term weighted by :func:`completion_values` (shortest remaining work first, the
       makespan's critical path before all), subject to ``U >= U*`` (no fewer working slots than
       Dorm hands out: work-conserving), ``F <= max(fairness_bound, F*)`` (Dorm's bound on the
       fairness loss, Sun et al. 2017; never tighter than what pass 1 reached) and the same
       adjustment bound ``max_changes``. Pass 1's partitions satisfy all three, so pass 2 always
       has a solution; it keeps the ``beta`` fairness penalty, so within the bound it still
       prefers fairer partitions of equal value. Moving a slot from job ``j`` (at its fair share)
       to job ``i`` pays only when ``v_i - v_j > 2 beta`` (1 at the default): with ``alpha`` = 1
       the ranks move slots only between jobs far apart in remaining work, while the
       critical-path boost (3) moves them up to the bound.

    Without ``remaining_s`` (or ``critical_s``) pass 1 is the answer: Dorm as in the paper.

    Parameters
    ----------
    demand, capacity, weight, current, max_changes, bsp_workers
        As :func:`dorm_partitions`.
    remaining_s : array_like of float, shape (n_jobs,), optional
        Slot-seconds of work each job has left (an estimate: its units left times a unit's
        seconds; a train job: its worker steps left times a step's seconds).
    critical_s : array_like of float, shape (n_jobs,), optional
        Seconds each job needs at least, at its whole demand (a train job: rounds left times a
        round's seconds; an estimate: one unit's seconds).
    fairness_bound : float
        The bound on ``F`` in pass 2 (default :data:`DEFAULT_FAIRNESS_BOUND`, 0.24: in
        benchmarks/sharing.py's simulation it kept the time-averaged fairness loss at 0.27-0.29
        of static partitions', under issue 15's 0.30; 0.25 reached 0.30-0.31).

    Returns
    -------
    PartitionDecision
        Pass 2's partitions (pass 1's without completion figures); ``solve_s`` covers both passes;
        ``utilization``, ``fairness_loss`` and ``objective`` are Dorm's own measures
        (unweighted).

    Raises
    ------
    InvalidJobError
        As :func:`dorm_partitions` and :func:`completion_values`.
    """
    first = dorm_partitions(
        demand, capacity, weight, current, max_changes=max_changes, bsp_workers=bsp_workers
    )
    if remaining_s is None or critical_s is None or first.partitions.shape[0] == 0:
        return first
    cap = np.atleast_1d(np.asarray(capacity, dtype=float))
    value = completion_values(remaining_s, critical_s, max(float(cap[0]), 1.0))
    # pass 1's partitions meet both rows; the slack covers the solver's feasibility tolerance
    second = dorm_partitions(
        demand,
        capacity,
        weight,
        current,
        max_changes=max_changes,
        bsp_workers=bsp_workers,
        value=value,
        fairness_bound=max(float(fairness_bound), first.fairness_loss) + 1e-7,
        min_utilization=first.utilization - 1e-7,
    )
    return replace(
        second, bounded=second.bounded and first.bounded, solve_s=first.solve_s + second.solve_s
    )
