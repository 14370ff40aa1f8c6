"""Partitions of the account's shared capacity between running jobs (Dorm, Sun et al. 2017).

Several jobs share one account's Lambda concurrency and one Batch compute environment's GPUs. Each
running job holds a *partition*: how many concurrent invocations (and GPUs) it may use. Dorm (Sun, Wen,
Duong and Yan, "Towards Distributed Machine Learning in Shared Clusters: A Dynamically-Partitioned
Approach", IEEE SMARTCOMP 2017, arXiv:1704.06738) resizes partitions whenever an application arrives or
ends with a *utilization-fairness optimizer*: maximise the cluster's resource utilization, minimise the
*fairness loss* against each application's fair share, and bound the *adjustment overhead* (how many
running applications are resized at once, since each resize costs the application a pause). fanfit
resizes a job at its next barrier (a round's end, a wave's end) without restarting it.

Formulation (one MILP, solved exactly by HiGHS through :func:`scipy.optimize.milp`). Jobs
``i = 1..n``, resource types ``r = 1..R`` (here Lambda concurrency and GPUs) with capacity ``C_r``;
job ``i`` has demand ``d_ir`` (the most it can use: units left, workers, GPUs), weight ``w_i`` and, if it
was already running, the partition ``x0_ir`` it holds now. Its fair share ``e_ir`` is the weighted,
demand-capped max-min share of ``C_r`` (water-filling, :func:`fair_shares`), Dorm's weighted fair share
for a single-resource partition. Decision variables: the new partition ``x_ir`` (integer), the
deviation ``u_ir >= |x_ir - e_ir|`` and ``y_i`` (binary: job ``i``'s partition changes).

.. math::

    \\max_{x, u, y} \\; U(x) - \\beta F(u) - \\gamma \\textstyle\\sum_i y_i, \\qquad
    U = \\frac{1}{R} \\sum_r \\frac{\\sum_i x_{ir}}{C_r}, \\quad
    F = \\frac{1}{R} \\sum_r \\frac{\\sum_i u_{ir}}{C_r}

subject to

.. math::

    \\textstyle\\sum_i x_{ir} \\le C_r, \\quad 0 \\le x_{ir} \\le d_{ir}, \\quad
    -u_{ir} \\le x_{ir} - e_{ir} \\le u_{ir}, \\quad
    -d_{ir} y_i \\le x_{ir} - x0_{ir} \\le d_{ir} y_i, \\quad
    \\textstyle\\sum_{i \\in \\mathcal{A}} y_i \\le \\theta.

``U`` is the paper's resource utilization, ``F`` its fairness loss (the sum of the absolute gaps between
each job's share and its fair share, normalised by capacity) and ``theta`` its bound on the
adjustment overhead: at most ``theta`` of the running jobs ``A`` (those whose current partition is
still within their demand) change partition. A job that just arrived (no current partition) or whose
demand fell below its partition must be (re)sized anyway and does not count. The paper trades the two
objectives off in one weighted objective; ``beta`` (default 0.5) is that weight: with ``beta < 1``
filling idle capacity is worth more than the fairness it costs, and moving a unit from a job above its
fair share to one below it is always worth it. ``gamma`` (tiny) prefers fewer changes among equally
good solutions (the paper's third objective, the adjustment overhead itself).

Bulk synchronous (BSP) jobs. A train job's round runs its ``W`` Lambda workers and waits for all of
them at the barrier (the end of the round's Map). Given a partition of ``x < W`` concurrent slots, the
Map runs the ``W`` equal worker steps in ``ceil(W / x)`` waves, so the round takes ``ceil(W / x)``
steps and only

.. math::

    \\mathrm{eff}_W(x) = \\frac{W}{\\lceil W / x \\rceil}

of the ``x`` slots do work on average; the rest idle until the barrier. This is the wave arithmetic
of a BSP round under a concurrency cap: the round's time is set by its slowest (here: last) wave, the
straggler effect that LB-BSP (Chen et al., IEEE TCC 2021) balances between workers of unequal speed.
Every ``x`` between ``ceil(W / k)`` and ``ceil(W / (k - 1)) - 1`` gives the same ``k`` waves, so only
the smallest of each run is worth handing out: a BSP job's Lambda partition is restricted to

.. math::

    x_{i1} \\in S_i = \\{0\\} \\cup \\{\\lceil W_i / k \\rceil : k = 1..W_i,\\;\\lceil W_i / k \\rceil \\le d_{i1}\\}

(about ``2 sqrt(W)`` sizes; for ``W = 32``: 1-8, 11, 16, 32), chosen by binary selection variables
``z_is`` (``sum_s z_is <= 1``, ``x_i1 = sum_s s z_is``), and the utilization term counts its effective
slots ``sum_s eff_W(s) z_is`` instead of ``x_i1``. The fairness term stays on the allotted ``x_i1``,
against the same fair shares. Where the caller says nothing (``bsp_workers=None``, or ``W_i = 0``)
every allotted unit is independent (an estimate's fits) and counts in full, as in the paper.

Completion pass: :mod:`fanfit.sched.completion` (:func:`~fanfit.sched.completion.dorm_policy`,
what the partition table and benchmarks/sharing.py run) solves this MILP a second time, its
utilization term weighted toward the jobs that finish first, within the ``value``,
``fairness_bound`` and ``min_utilization`` arguments of :func:`dorm_partitions`.

Baselines: :func:`static_partitions` (the capacity cut into equal fixed partitions, one job each) and
:func:`fcfs_partitions` (first come, first served: each job in arrival order takes its whole demand
from what is left).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidJobError

if (
    TYPE_CHECKING
):  # scipy is imported by dorm_partitions: a Lambda that only reads partitions skips it
    from scipy.sparse import coo_array

__all__ = [
    "DEFAULT_BETA",
    "DEFAULT_GAMMA",
    "DEFAULT_MAX_CHANGES",
    "RESOURCES",
    "PartitionDecision",
    "bsp_sizes",
    "dorm_partitions",
    "effective_slots",
    "fair_shares",
    "fairness_loss",
    "fcfs_partitions",
    "objective",
    "static_partitions",
    "utilization",
]

#: The resource types partitioned, in column order: Lambda concurrency, Batch GPUs.
RESOURCES = ("lambda_concurrency", "gpus")
#: Weight of the fairness loss against utilization (the paper's trade-off between its two objectives).
DEFAULT_BETA = 0.5
#: Cost of one changed partition: only breaks ties between otherwise equal solutions.
DEFAULT_GAMMA = 1e-6
#: Dorm's adjustment bound ``theta``: running jobs whose partition may change at once.
DEFAULT_MAX_CHANGES = 3


@dataclass(frozen=True)
class PartitionDecision:
    """New partitions and what they score.

    Attributes
    ----------
    partitions : numpy.ndarray of int64, shape (n_jobs, n_resources)
        ``x_ir``: job ``i``'s share of resource ``r`` (invocations, GPUs).
    fair : numpy.ndarray of float, shape (n_jobs, n_resources)
        ``e_ir``: the weighted, demand-capped fair shares they were measured against.
    utilization, fairness_loss, objective : float
        ``U``, ``F`` and ``U - beta F - gamma * n_changed`` (see the module docstring).
    changed : numpy.ndarray of bool, shape (n_jobs,)
        Which jobs' partitions differ from their current ones (new jobs count as changed).
    bounded : bool
        False where the adjustment bound had to be dropped: the running jobs' current partitions
        no longer fit the capacity, so more than ``max_changes`` of them must shrink.
    solve_s : float
        Wall time of the solve, seconds.
    """

    partitions: np.ndarray
    fair: np.ndarray
    utilization: float
    fairness_loss: float
    objective: float
    changed: np.ndarray
    bounded: bool
    solve_s: float


def _as_inputs(
    demand: ArrayLike, capacity: ArrayLike, weight: ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = np.asarray(demand, dtype=float)
    if d.ndim == 1:
        d = d[:, None]
    if d.ndim != 2:
        raise InvalidJobError(f"demand must have shape (n_jobs, n_resources), got {d.shape}")
    cap = np.atleast_1d(np.asarray(capacity, dtype=float))
    if cap.shape != (d.shape[1],):
        raise InvalidJobError(
            f"capacity must have one entry per resource ({d.shape[1]}), got shape {cap.shape}"
        )
    for name, arr in (("demand", d), ("capacity", cap)):
        if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.round(arr)):
            raise InvalidJobError(f"{name} must be non-negative integers, got {arr.tolist()}")
    w = np.ones(d.shape[0]) if weight is None else np.asarray(weight, dtype=float).reshape(-1)
    if w.shape != (d.shape[0],) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise InvalidJobError(f"weight must be one positive number per job, got {w.tolist()}")
    return d, cap, w


def _as_bsp(bsp_workers: ArrayLike | None, n_jobs: int) -> np.ndarray:
    if bsp_workers is None:
        return np.zeros(n_jobs, dtype=np.int64)
    w = np.asarray(bsp_workers, dtype=float).reshape(-1)
    if (
        w.shape != (n_jobs,)
        or not np.all(np.isfinite(w))
        or np.any(w < 0)
        or np.any(w != np.round(w))
    ):
        raise InvalidJobError(
            "bsp_workers must be one non-negative integer per job (its Lambda workers W for a bulk "
            f"synchronous train job, 0 for a job of independent units), got {w.tolist()}"
        )
    return w.astype(np.int64)


def bsp_sizes(workers: int, demand: int | None = None) -> np.ndarray:
    """The Lambda partitions of a bulk synchronous job that waste no slot: ``ceil(W / k)``.

    A round of ``W`` equal worker steps on ``x`` slots runs in ``ceil(W / x)`` waves; every ``x`` from
    ``ceil(W / k)`` up to ``ceil(W / (k - 1)) - 1`` gives the same ``k`` waves, so only the smallest
    one, ``ceil(W / k)``, is worth allotting (see the module docstring; LB-BSP, Chen et al., IEEE TCC
    2021, for the BSP round's barrier).

    Parameters
    ----------
    workers : int
        ``W >= 0``, the job's Lambda workers per round.
    demand : int, optional
        Leave out sizes above it (the job's demand ``d``).

    Returns
    -------
    numpy.ndarray of int64, shape (n_sizes,)
        The distinct ``ceil(W / k)``, ``k = 1..W``, ascending, 0 left out (about ``2 sqrt(W)`` of
        them; empty for ``W = 0``). For ``W = 32``: 1, 2, 3, 4, 5, 6, 7, 8, 11, 16, 32.

    Raises
    ------
    InvalidJobError
        On a negative ``workers``.
    """
    w = int(workers)
    if w < 0:
        raise InvalidJobError(f"workers must be >= 0, got {workers}")
    sizes = np.unique(-(-w // np.arange(1, w + 1, dtype=np.int64)))
    if demand is not None:
        sizes = sizes[sizes <= int(demand)]
    return sizes.astype(np.int64)


def effective_slots(partitions: ArrayLike, bsp_workers: ArrayLike | None = None) -> np.ndarray:
    """Slots of a Lambda partition that do work: ``W / ceil(W / x)`` for a bulk synchronous job.

    A BSP round of ``W`` equal worker steps on ``x`` slots takes ``ceil(W / x)`` waves, so it does
    ``W`` steps' work in ``ceil(W / x)`` steps' time (the module docstring; LB-BSP, Chen et al., IEEE
    TCC 2021). A job of independent units (``W = 0``) uses all ``x``.

    Parameters
    ----------
    partitions : array_like, shape (n_jobs,)
        ``x_i``, Lambda slots (concurrent invocations) allotted.
    bsp_workers : array_like of int, shape (n_jobs,), optional
        ``W_i`` for a BSP job, 0 for a job of independent units; default all 0.

    Returns
    -------
    numpy.ndarray of float, shape (n_jobs,)
        ``W_i / ceil(W_i / x_i)`` where ``W_i > 0`` and ``x_i > 0`` (at most ``min(x_i, W_i)``),
        else ``x_i``; in slots.

    Raises
    ------
    InvalidJobError
        On ``bsp_workers`` of the wrong length, negative or not integers.
    """
    x = np.asarray(partitions, dtype=float).reshape(-1).copy()
    w = _as_bsp(bsp_workers, x.size).astype(float)
    bsp = (w > 0) & (x > 0)
    x[bsp] = w[bsp] / np.ceil(w[bsp] / x[bsp])
    return x


def fair_shares(
    demand: ArrayLike, capacity: ArrayLike, weight: ArrayLike | None = None
) -> np.ndarray:
    """Weighted max-min fair shares, capped at demand (water-filling), per resource.

    Every job gets capacity in proportion to its weight; a job whose demand is below that share gets
    its demand, and what it leaves is shared out again among the others. The shares add up to
    ``min(C_r, sum_i d_ir)``. This is Dorm's weighted fair share of a single resource (Sun et al. 2017;
    weighted max-min fairness, which DRF reduces to for one resource type).

    Parameters
    ----------
    demand : array_like of int, shape (n_jobs, n_resources) or (n_jobs,)
        ``d_ir``, most of resource ``r`` job ``i`` can use.
    capacity : array_like of int, shape (n_resources,)
        ``C_r``.
    weight : array_like of float, shape (n_jobs,), optional
        ``w_i`` (> 0), default all 1.

    Returns
    -------
    numpy.ndarray of float, shape (n_jobs, n_resources)
        ``e_ir`` (real-valued).

    Raises
    ------
    InvalidJobError
        On shapes that do not match, negative or non-integer demand or capacity, non-positive weights.
    """
    d, cap, w = _as_inputs(demand, capacity, weight)
    fair = np.zeros_like(d)
    for r in range(d.shape[1]):
        left, active = cap[r], d[:, r] > 0
        # at most n rounds: each round either satisfies a job's demand or shares out the rest
        for _ in range(d.shape[0] + 1):
            if left <= 1e-12 or not active.any():
                break
            share = left * w[active] / w[active].sum()
            need = d[active, r] - fair[active, r]
            idx = np.flatnonzero(active)
            capped = need <= share
            if not capped.any():
                fair[idx, r] += share
                break
            fair[idx[capped], r] = d[idx[capped], r]
            left -= need[capped].sum()
            active[idx[capped]] = False
    return fair


def utilization(
    partitions: ArrayLike, capacity: ArrayLike, bsp_workers: ArrayLike | None = None
) -> float:
    """Dorm's resource utilization: the share of each resource allotted, averaged over resources.

    Parameters
    ----------
    partitions : array_like, shape (n_jobs, n_resources)
    capacity : array_like, shape (n_resources,)
        Resources of capacity 0 are left out of the average.
    bsp_workers : array_like of int, shape (n_jobs,), optional
        ``W_i`` of bulk synchronous jobs (0 for others): their Lambda slots (the first column)
        count as :func:`effective_slots`, ``W / ceil(W / x)``. Default: every slot counts.

    Returns
    -------
    float
        ``U`` in [0, 1] where the partitions fit the capacity.

    Raises
    ------
    InvalidJobError
        On ``bsp_workers`` of the wrong length, negative or not integers.
    """
    x = np.asarray(partitions, dtype=float).reshape(-1, np.size(capacity))
    if bsp_workers is not None and x.shape[1]:
        x = x.copy()
        x[:, 0] = effective_slots(x[:, 0], bsp_workers)
    cap = np.asarray(capacity, dtype=float).reshape(-1)
    live = cap > 0
    if not live.any():
        return 0.0
    return float(np.mean(x[:, live].sum(axis=0) / cap[live]))


def fairness_loss(partitions: ArrayLike, fair: ArrayLike, capacity: ArrayLike) -> float:
    """Dorm's fairness loss: the summed absolute gap between each job's share and its fair share.

    Parameters
    ----------
    partitions, fair : array_like, shape (n_jobs, n_resources)
        ``x_ir`` and ``e_ir`` (:func:`fair_shares`).
    capacity : array_like, shape (n_resources,)
        Gaps are normalised by ``C_r`` and averaged over resources of positive capacity.

    Returns
    -------
    float
        ``F >= 0`` (0: every job at its fair share; at most 2).
    """
    cap = np.asarray(capacity, dtype=float).reshape(-1)
    x = np.asarray(partitions, dtype=float).reshape(-1, cap.size)
    e = np.asarray(fair, dtype=float).reshape(-1, cap.size)
    live = cap > 0
    if not live.any():
        return 0.0
    return float(np.mean(np.abs(x - e)[:, live].sum(axis=0) / cap[live]))


def objective(
    partitions: ArrayLike,
    fair: ArrayLike,
    capacity: ArrayLike,
    n_changed: int = 0,
    beta: float = DEFAULT_BETA,
    gamma: float = DEFAULT_GAMMA,
    bsp_workers: ArrayLike | None = None,
) -> float:
    """The utilization-fairness objective ``U - beta F - gamma n_changed`` (larger is better).

    Parameters
    ----------
    partitions, fair : array_like, shape (n_jobs, n_resources)
    capacity : array_like, shape (n_resources,)
    n_changed : int
        Running jobs whose partition changed.
    beta, gamma : float
        See the module docstring.
    bsp_workers : array_like of int, shape (n_jobs,), optional
        ``W_i`` of bulk synchronous jobs, 0 for others (:func:`utilization`).

    Returns
    -------
    float
    """
    return (
        utilization(partitions, capacity, bsp_workers)
        - beta * fairness_loss(partitions, fair, capacity)
        - gamma * n_changed
    )


#: The MILP's objective is multiplied by this before HiGHS solves it: HiGHS stops at an absolute gap
#: of 1e-6 (``mip_abs_gap``, which scipy's ``milp`` does not expose) as well as at the relative gap
#: (0 here), and 1e-6 is the size of the change penalty ``gamma``'s tie-breaks; scaled, the
#: absolute gap is 1e-10 of the true objective, so the solution is the optimum the brute force finds.
_OBJECTIVE_SCALE = 1e4


def dorm_partitions(
    demand: ArrayLike,
    capacity: ArrayLike,
    weight: ArrayLike | None = None,
    current: ArrayLike | None = None,
    *,
    max_changes: int = DEFAULT_MAX_CHANGES,
    beta: float = DEFAULT_BETA,
    gamma: float = DEFAULT_GAMMA,
    time_limit_s: float = 10.0,
    bsp_workers: ArrayLike | None = None,
    value: ArrayLike | None = None,
    fairness_bound: float | None = None,
    min_utilization: float | None = None,
) -> PartitionDecision:
    """Dorm's utilization-fairness optimizer: new partitions for the running jobs, solved as a MILP.

    Parameters
    ----------
    demand : array_like of int, shape (n_jobs, n_resources)
        ``d_ir``: the most of each resource a job can use now (Lambda: units or workers left to run
        at once; GPUs). Columns follow :data:`RESOURCES`.
    capacity : array_like of int, shape (n_resources,)
        ``C_r``: the account's concurrency (or the share of it fanfit may use), the GPUs of the Batch
        compute environment.
    weight : array_like of float, shape (n_jobs,), optional
        ``w_i > 0``, default all 1.
    current : array_like of int, shape (n_jobs, n_resources), optional
        ``x0_ir``: the partitions the jobs hold now; a row of -1 (or ``current=None`` for all) marks a
        job that has just arrived and holds nothing.
    max_changes : int
        ``theta``: most running jobs (with a current partition within their demand) whose partition
        may change.
    beta : float
        Weight of the fairness loss (``0 < beta``; below 1 idle capacity is always handed out).
    gamma : float
        Cost of a change, a tie-break.
    time_limit_s : float
        HiGHS's time limit, seconds.
    bsp_workers : array_like of int, shape (n_jobs,), optional
        ``W_i``: for a bulk synchronous (train) job, its Lambda workers per round; 0 for a job whose
        units are independent (an estimate). A BSP job's Lambda partition is one of
        :func:`bsp_sizes` ``(W_i, d_i1)`` or 0, and counts as ``W_i / ceil(W_i / x_i1)`` slots in
        the utilization (module docstring). A BSP job whose current partition is not one of those
        sizes must be resized and, like a job whose demand fell below its partition, does not count
        against ``max_changes``. Default: no BSP job (every slot counts, as in the paper).
    value : array_like of float, shape (n_jobs,), optional
        ``v_i > 0``: what one (effective) slot of job ``i`` is worth in the utilization term,
        ``U_v = (1/R) sum_r sum_i v_i x_ir / C_r`` (BSP jobs: ``v_i eff_W(x_i1)``); default all 1
        (the paper's ``U``). :func:`fanfit.sched.completion.dorm_policy` sets it from
        :func:`fanfit.sched.completion.completion_values`.
    fairness_bound : float, optional
        A hard bound ``F <= fairness_bound`` on the fairness loss (Dorm's bound on it; Sun et al.
        2017); default none (only the ``beta`` penalty). A bound no partition meets raises.
    min_utilization : float, optional
        A floor ``U >= min_utilization`` on the (unweighted, effective-slot) utilization, so a
        pass that re-weights ``U`` hands out no fewer working slots (work-conserving); default none.

    Returns
    -------
    PartitionDecision
        With ``bsp_workers``, its ``utilization`` and ``objective`` count the BSP jobs' effective
        slots.

    Raises
    ------
    InvalidJobError
        On inputs of the wrong shape or sign (``value``: one positive number per job;
        ``fairness_bound``, ``min_utilization``: finite), or if the solver returns no solution.

    Notes
    -----
    Sun, Wen, Duong and Yan, "Towards Distributed Machine Learning in Shared Clusters: A
    Dynamically-Partitioned Approach", SMARTCOMP 2017, Section IV (utilization-fairness optimizer).
    The BSP restriction and effective slots follow from the waves of a round under a concurrency cap
    (``ceil(W / x)`` waves of a BSP round, the barrier LB-BSP, Chen et al., IEEE TCC 2021, balances).
    The MILP is solved to optimality (relative gap 0); HiGHS is deterministic, so the same input
    gives the same partitions.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array, vstack

    started = time.perf_counter()
    d, cap, _w = _as_inputs(demand, capacity, weight)
    n, n_res = d.shape
    bsp = _as_bsp(bsp_workers, n)
    if not (np.isfinite(beta) and beta > 0 and np.isfinite(gamma) and gamma >= 0):
        raise InvalidJobError(f"beta must be > 0 and gamma >= 0, got beta={beta}, gamma={gamma}")
    if int(max_changes) < 0:
        raise InvalidJobError(f"max_changes must be >= 0, got {max_changes}")
    if current is None:
        x0 = np.full((n, n_res), -1.0)
    else:
        x0 = np.asarray(current, dtype=float).reshape(n, n_res)
        if not np.all(np.isfinite(x0)) or np.any(x0 != np.round(x0)):
            raise InvalidJobError(f"current must be integers (-1: new job), got {x0.tolist()}")
    val = np.ones(n) if value is None else np.asarray(value, dtype=float).reshape(-1)
    if val.shape != (n,) or not np.all(np.isfinite(val)) or np.any(val <= 0):
        raise InvalidJobError(f"value must be one positive number per job, got {val.tolist()}")
    for name, bound in (("fairness_bound", fairness_bound), ("min_utilization", min_utilization)):
        if bound is not None and not np.isfinite(bound):
            raise InvalidJobError(f"{name} must be a finite number, got {bound!r}")
    fair = fair_shares(d, cap, weight)
    if n == 0:
        empty = np.zeros((0, n_res), dtype=np.int64)
        return PartitionDecision(empty, fair, 0.0, 0.0, 0.0, np.zeros(0, bool), True, 0.0)

    live = cap > 0
    n_live = max(int(live.sum()), 1)
    scale = np.where(live, 1.0 / (n_live * np.where(live, cap, 1.0)), 0.0)  # 1 / (R C_r)
    # BSP jobs on a live Lambda column: their allowed sizes S_i (without 0) and effective slots
    bsp_jobs = np.flatnonzero(bsp > 0) if n_res and live[0] else np.zeros(0, dtype=np.int64)
    sizes = {int(i): bsp_sizes(int(bsp[i]), int(d[i, 0])) for i in bsp_jobs}

    is_new = np.any(x0 < 0, axis=1)
    counted = ~is_new & np.all(x0 <= d, axis=1)  # A: running jobs whose partition still fits
    for i, s in sizes.items():  # ... and, for a BSP job, is one of its sizes
        if x0[i, 0] != 0 and not np.isin(x0[i, 0], s):
            counted[i] = False

    # variables: x (n*R), u (n*R), y (n), z (one per BSP job and size); x[i, r] = i*R + r
    nx = n * n_res
    nz = sum(s.size for s in sizes.values())
    nv = 2 * nx + n + nz
    # a BSP job's Lambda entry is priced through its z (a multiple-choice formulation: utilization,
    # deviation and change are known per size), the tightest form, which HiGHS closes fast
    by_z = np.zeros(nx, dtype=bool)
    by_z[[i * n_res for i in sizes]] = True
    c_z = np.zeros(nz)
    integrality = np.concatenate([np.ones(nx), np.zeros(nx), np.ones(n), np.ones(nz)])
    lb = np.zeros(nv)
    ub = np.concatenate(
        [d.reshape(-1), np.where(by_z, 0.0, np.inf), counted.astype(float), np.ones(nz)]
    )
    ub[:nx] = np.where(np.tile(live, n), ub[:nx], 0.0)

    rows: list[coo_array] = []
    lo: list[np.ndarray] = []
    hi: list[np.ndarray] = []
    ix = np.arange(nx)
    # capacity: sum_i x_ir <= C_r
    rows.append(coo_array((np.ones(nx), (ix % n_res, ix)), shape=(n_res, nv)))
    lo.append(np.full(n_res, -np.inf))
    hi.append(cap)
    # deviation: x - u <= e and -x - u <= -e
    dx = ix[~by_z]
    eye = coo_array((np.ones(dx.size), (np.arange(dx.size), dx)), shape=(dx.size, nv))
    dev = coo_array((np.ones(dx.size), (np.arange(dx.size), nx + dx)), shape=(dx.size, nv))
    rows += [eye - dev, -eye - dev]
    lo += [np.full(dx.size, -np.inf)] * 2
    hi += [fair.reshape(-1)[dx], -fair.reshape(-1)[dx]]
    # change indicator, counted jobs only: |x - x0| <= d y
    cix = np.flatnonzero(np.repeat(counted, n_res) & ~by_z)
    if cix.size:
        sel = coo_array((np.ones(cix.size), (np.arange(cix.size), cix)), shape=(cix.size, nv))
        big = coo_array(
            (d.reshape(-1)[cix], (np.arange(cix.size), 2 * nx + cix // n_res)),
            shape=(cix.size, nv),
        )
        rows += [sel - big, -sel - big]
        lo += [np.full(cix.size, -np.inf)] * 2
        hi += [x0.reshape(-1)[cix], -x0.reshape(-1)[cix]]
    # BSP: x_i1 = sum_s s z_is and sum_s z_is <= 1. The objective counts each size's effective slots
    # eff_W(s) and its deviation |s - e_i1| (less |0 - e_i1|, a constant); a counted job changes
    # unless it keeps its size: y_i >= 1 - z_i,x0 (x0 > 0) or y_i >= sum_s z_is (x0 = 0).
    if nz:
        r_: list[int] = []
        c_: list[int] = []
        v_: list[float] = []
        lo_z: list[float] = []
        hi_z: list[float] = []
        at = 0  # the job's first z, counted from the start of the z block
        for i, s in sizes.items():
            zi = 2 * nx + n + at + np.arange(s.size)
            e = fair[i, 0]
            c_z[at : at + s.size] = scale[0] * (
                beta * (np.abs(s - e) - e) - val[i] * bsp[i] / np.ceil(bsp[i] / s)
            )
            row = len(lo_z)
            r_ += [row] * (1 + s.size) + [row + 1] * s.size
            c_ += [i * n_res, *zi, *zi]
            v_ += [1.0, *(-s.astype(float)), *np.ones(s.size)]
            lo_z += [0.0, -np.inf]
            hi_z += [0.0, 1.0]
            if counted[i] and x0[i, 0] > 0:
                r_ += [row + 2] * 2
                c_ += [int(zi[np.searchsorted(s, x0[i, 0])]), 2 * nx + i]
                v_ += [-1.0, -1.0]
                lo_z.append(-np.inf)
                hi_z.append(-1.0)
            elif counted[i]:
                r_ += [row + 2] * (s.size + 1)
                c_ += [*zi, 2 * nx + i]
                v_ += [*np.ones(s.size), -1.0]
                lo_z.append(-np.inf)
                hi_z.append(0.0)
            at += s.size
        rows.append(coo_array((v_, (r_, c_)), shape=(len(lo_z), nv)))
        lo.append(np.array(lo_z))
        hi.append(np.array(hi_z))
    c_x = np.where(by_z, 0.0, -np.tile(scale, n) * np.repeat(val, n_res))
    c_u = np.where(by_z, 0.0, beta * np.tile(scale, n))
    c = np.concatenate([c_x, c_u, gamma * counted.astype(float), c_z])
    if fairness_bound is not None or min_utilization is not None:
        # F = sum scale u (not BSP) + sum_BSP scale (e + sum_s z_s (|s - e| - e)) and
        # U = sum scale x (not BSP) + sum_BSP scale sum_s z_s eff_W(s), as linear rows
        f_row, u_row, f_const = np.zeros(nv), np.zeros(nv), 0.0
        f_row[nx : 2 * nx] = np.where(by_z, 0.0, np.tile(scale, n))
        u_row[:nx] = np.where(by_z, 0.0, np.tile(scale, n))
        at = 2 * nx + n
        for i, s in sizes.items():
            e = fair[i, 0]
            f_row[at : at + s.size] = scale[0] * (np.abs(s - e) - e)
            u_row[at : at + s.size] = scale[0] * bsp[i] / np.ceil(bsp[i] / s)
            f_const += scale[0] * e
            at += s.size
        if fairness_bound is not None:
            rows.append(coo_array(f_row[None, :]))
            lo.append(np.array([-np.inf]))
            hi.append(np.array([float(fairness_bound) - f_const]))
        if min_utilization is not None:
            rows.append(coo_array(u_row[None, :]))
            lo.append(np.array([float(min_utilization)]))
            hi.append(np.array([np.inf]))
    matrix = vstack(rows).tocsr()
    lower, upper = np.concatenate(lo), np.concatenate(hi)

    def solve(theta: float | None):
        a, lo_, hi_ = matrix, lower, upper
        if theta is not None and counted.any():
            budget = coo_array(
                (
                    np.ones(int(counted.sum())),
                    (np.zeros(int(counted.sum())), 2 * nx + np.flatnonzero(counted)),
                ),
                shape=(1, nv),
            )
            a = vstack([matrix, budget]).tocsr()
            lo_, hi_ = np.append(lower, -np.inf), np.append(upper, float(theta))
        return milp(
            c * _OBJECTIVE_SCALE,
            integrality=integrality,
            bounds=Bounds(lb, ub),
            constraints=LinearConstraint(a, lo_, hi_),
            options={"time_limit": float(time_limit_s), "mip_rel_gap": 0.0, "presolve": True},
        )

    res = solve(float(int(max_changes)))
    bounded = True
    if res.x is None:  # only when the running jobs' partitions no longer fit the capacity
        res, bounded = solve(None), False
    if res.x is None:
        raise InvalidJobError(f"the partition MILP found no solution: {res.message}")
    x = np.rint(res.x[:nx]).astype(np.int64).reshape(n, n_res)
    changed = is_new | np.any(x != x0, axis=1)
    n_changed = int((changed & counted).sum())
    return PartitionDecision(
        partitions=x,
        fair=fair,
        utilization=utilization(x, cap, bsp),
        fairness_loss=fairness_loss(x, fair, cap),
        objective=objective(x, fair, cap, n_changed, beta, gamma, bsp),
        changed=changed,
        bounded=bounded,
        solve_s=time.perf_counter() - started,
    )


def static_partitions(
    demand: ArrayLike, capacity: ArrayLike, n_partitions: int | None = None
) -> np.ndarray:
    """Static equal partitions: the capacity cut into ``n_partitions`` equal, fixed parts.

    The first ``n_partitions`` jobs (in the order given: arrival order) hold one part each and use up
    to their demand of it; later jobs wait with nothing. Dorm's baseline of statically partitioned
    clusters (Sun et al. 2017, Section II).

    Parameters
    ----------
    demand : array_like of int, shape (n_jobs, n_resources)
    capacity : array_like of int, shape (n_resources,)
    n_partitions : int, optional
        Parts to cut; default one per job (``n_jobs``).

    Returns
    -------
    numpy.ndarray of int64, shape (n_jobs, n_resources)
        ``min(d_ir, floor(C_r / n_partitions))`` for the first ``n_partitions`` jobs, 0 after.

    Raises
    ------
    InvalidJobError
        On bad shapes or ``n_partitions < 1``.
    """
    d, cap, _ = _as_inputs(demand, capacity)
    k = d.shape[0] if n_partitions is None else int(n_partitions)
    if k < 1:
        return np.zeros(d.shape, dtype=np.int64)
    part = np.floor(cap / k)
    x = np.minimum(d, part[None, :])
    x[k:] = 0
    return x.astype(np.int64)


def fcfs_partitions(demand: ArrayLike, capacity: ArrayLike) -> np.ndarray:
    """First come, first served: each job in order takes its whole demand from what is left.

    Parameters
    ----------
    demand : array_like of int, shape (n_jobs, n_resources)
        Rows in arrival order.
    capacity : array_like of int, shape (n_resources,)

    Returns
    -------
    numpy.ndarray of int64, shape (n_jobs, n_resources)

    Raises
    ------
    InvalidJobError
        On bad shapes.
    """
    d, cap, _ = _as_inputs(demand, capacity)
    left = cap.copy()
    x = np.zeros_like(d)
    for i in range(d.shape[0]):
        x[i] = np.minimum(d[i], left)
        left -= x[i]
    return x.astype(np.int64)
