"""Dorm's utilization-fairness partitioning (fanfit.sched.partition), with property tests.

GIVEN running jobs with demands, weights and current partitions, WHEN the optimizer recomputes them,
THEN capacity and demand are respected, at most ``max_changes`` running jobs change, the same input
gives the same answer, the objective is at least that of static equal partitions and of FCFS
whenever those are feasible for it, and it equals the best found by enumerating every feasible
partition of small instances, with and without bulk synchronous jobs (whose Lambda partitions must
be sizes ``ceil(W / k)`` and count ``W / ceil(W / x)`` working slots).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanfit.errors import InvalidJobError
from fanfit.sched.partition import (
    bsp_sizes,
    dorm_partitions,
    effective_slots,
    fair_shares,
    fairness_loss,
    fcfs_partitions,
    objective,
    static_partitions,
    utilization,
)

SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def cluster(draw):
    """(demand, capacity, weight, current, max_changes); current fits the capacity."""
    n = draw(st.integers(1, 7))
    cap = np.array([draw(st.integers(0, 64)), draw(st.integers(0, 8))])
    demand = np.array(
        [[draw(st.integers(0, 80)), draw(st.integers(0, 6))] for _ in range(n)], dtype=np.int64
    )
    weight = np.array([draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for _ in range(n)])
    held = np.array(
        [[draw(st.integers(0, int(d))) for d in row] for row in demand], dtype=np.int64
    ).reshape(n, 2)
    current = fcfs_partitions(held, cap)
    new = np.array([draw(st.booleans()) for _ in range(n)])
    current[new] = -1
    return demand, cap, weight, current, draw(st.integers(0, n))


@SETTINGS
@given(cluster())
def test_partitions_respect_capacity_demand_and_the_adjustment_bound(case):
    demand, cap, weight, current, theta = case
    # WHEN the optimizer runs
    out = dorm_partitions(demand, cap, weight, current, max_changes=theta)
    x = out.partitions
    # THEN no resource is over capacity and no job above its demand
    assert x.dtype == np.int64 and x.shape == demand.shape
    assert np.all(x.sum(axis=0) <= cap)
    assert np.all((x >= 0) & (x <= demand))
    # ... and at most theta running jobs (not new) changed partition
    running = np.all(current >= 0, axis=1)
    assert out.bounded
    assert int((np.any(x != current, axis=1) & running).sum()) <= theta
    # ... and the reported scores are the module's own measures
    assert out.utilization == pytest.approx(utilization(x, cap))
    assert out.fairness_loss == pytest.approx(fairness_loss(x, out.fair, cap))


@SETTINGS
@given(cluster())
def test_the_same_input_gives_the_same_partitions(case):
    demand, cap, weight, current, theta = case
    a = dorm_partitions(demand, cap, weight, current, max_changes=theta)
    b = dorm_partitions(demand.copy(), cap.copy(), weight.copy(), current.copy(), max_changes=theta)
    np.testing.assert_array_equal(a.partitions, b.partitions)
    assert a.objective == b.objective


@SETTINGS
@given(cluster())
def test_objective_at_least_static_and_fcfs_when_they_are_feasible(case):
    demand, cap, weight, _, _ = case
    fair = fair_shares(demand, cap, weight)
    # GIVEN only new jobs (every partition is free to set)
    out = dorm_partitions(demand, cap, weight, None)
    for baseline in (static_partitions(demand, cap), fcfs_partitions(demand, cap)):
        # THEN Dorm's objective is at least the baseline's, and so is its utilization or fairness
        assert out.objective >= objective(baseline, fair, cap) - 1e-9
        assert (
            out.utilization >= utilization(baseline, cap) - 1e-9
            or out.fairness_loss <= fairness_loss(baseline, fair, cap) + 1e-9
        )
    # GIVEN the jobs hold static partitions now and theta = 0 THEN nothing is worse than static
    static = static_partitions(demand, cap)
    held = dorm_partitions(demand, cap, weight, static, max_changes=0)
    np.testing.assert_array_equal(held.partitions, static)
    some = dorm_partitions(demand, cap, weight, static, max_changes=1)
    assert some.objective >= objective(static, fair, cap) - 1e-9


@SETTINGS
@given(cluster())
def test_fair_shares_are_work_conserving_and_capped(case):
    demand, cap, weight, _, _ = case
    fair = fair_shares(demand, cap, weight)
    assert np.all(fair <= demand + 1e-9) and np.all(fair >= -1e-12)
    np.testing.assert_allclose(fair.sum(axis=0), np.minimum(cap, demand.sum(axis=0)), atol=1e-9)


def test_fair_shares_follow_weights_until_demand_caps():
    # GIVEN 60 slots, three jobs with weights 1, 1, 2 and one small demand
    fair = fair_shares([[100], [10], [100]], [60], [1, 1, 2])
    # THEN the small job gets its 10, the rest is shared 1:2
    np.testing.assert_allclose(fair[:, 0], [50 / 3, 10, 100 / 3])


def test_an_arriving_job_takes_capacity_from_at_most_theta_running_jobs():
    # GIVEN three jobs sharing 60 slots and a fourth arriving with a large demand
    demand = [[40], [40], [40], [40]]
    current = [[20], [20], [20], [-1]]
    # WHEN only one running job may change
    out = dorm_partitions(demand, [60], None, current, max_changes=1)
    # THEN one job shrank, and the newcomer got what it gave up
    x = out.partitions[:, 0]
    assert int((x[:3] != 20).sum()) == 1 and x.sum() == 60 and x[3] > 0
    # WHEN all may change THEN every job is at its fair share of 15
    np.testing.assert_array_equal(
        dorm_partitions(demand, [60], None, current, max_changes=3).partitions[:, 0], [15] * 4
    )


def test_idle_capacity_goes_to_jobs_that_can_use_it():
    # GIVEN one small job and one large one WHEN partitioned THEN the large takes what the small leaves
    out = dorm_partitions([[5, 0], [100, 3]], [64, 4])
    np.testing.assert_array_equal(out.partitions, [[5, 0], [59, 3]])
    assert out.utilization == pytest.approx((64 / 64 + 3 / 4) / 2)
    assert out.fairness_loss == pytest.approx(0.0)


def test_partitions_that_no_longer_fit_drop_the_bound():
    # GIVEN running partitions larger than the (shrunk) capacity WHEN theta = 0 THEN the bound goes
    out = dorm_partitions([[30], [30]], [20], None, [[20], [20]], max_changes=0)
    assert not out.bounded and out.partitions.sum() == 20


@pytest.mark.parametrize(
    "kwargs",
    [
        {"demand": [[1, 2]], "capacity": [3]},
        {"demand": [[-1]], "capacity": [3]},
        {"demand": [[1.5]], "capacity": [3]},
        {"demand": [[1]], "capacity": [float("nan")]},
        {"demand": [[1]], "capacity": [3], "weight": [0]},
    ],
)
def test_bad_inputs_raise_a_named_error(kwargs):
    with pytest.raises(InvalidJobError):
        dorm_partitions(**kwargs)


def test_baselines():
    demand = [[50], [10], [100], [5]]
    np.testing.assert_array_equal(static_partitions(demand, [64], 2)[:, 0], [32, 10, 0, 0])
    np.testing.assert_array_equal(static_partitions(demand, [64])[:, 0], [16, 10, 16, 5])
    np.testing.assert_array_equal(fcfs_partitions(demand, [64])[:, 0], [50, 10, 4, 0])


# --- exactness against brute force, with and without bulk synchronous jobs ----------------------


def _brute_force(demand, cap, weight, current, theta, bsp=None, beta=0.5, gamma=1e-6):
    """The best objective over every partition in the feasible set, by enumeration (vectorised)."""
    demand, cap, current = np.asarray(demand), np.asarray(cap), np.asarray(current)
    n, n_res = demand.shape
    bsp = np.zeros(n, dtype=np.int64) if bsp is None else np.asarray(bsp)
    fair = fair_shares(demand, cap, weight)
    counted = np.all(current >= 0, axis=1) & np.all(current <= demand, axis=1)
    choices = []
    for i in range(n):
        cols = []
        for r in range(n_res):
            if cap[r] == 0:
                cols.append([0])
            elif r == 0 and bsp[i] > 0:
                sizes = [0, *bsp_sizes(int(bsp[i]), int(demand[i, 0])).tolist()]
                counted[i] &= int(current[i, 0]) in sizes
                cols.append(sizes)
            else:
                cols.append(list(range(int(demand[i, r]) + 1)))
        choices.append(np.array(list(itertools.product(*cols))))  # (k_i, n_res)
    grid = np.stack(
        [c[idx] for c, idx in zip(choices, np.indices([len(c) for c in choices]).reshape(n, -1))],
        axis=1,
    )  # (K, n, n_res): every combination
    fits = np.all(grid.sum(axis=1) <= cap, axis=1)
    n_changed = (np.any(grid != current, axis=2) & counted).sum(axis=1)
    grid = grid[fits & (n_changed <= theta)]
    n_changed = n_changed[fits & (n_changed <= theta)]
    live = cap > 0
    used = grid.astype(float)
    if bsp.any() and live[0]:
        w = np.broadcast_to(bsp.astype(float), used.shape[:2])
        on = (w > 0) & (used[:, :, 0] > 0)
        waves = np.ceil(np.where(on, w, 1.0) / np.where(on, used[:, :, 0], 1.0))
        used[:, :, 0] = np.where(on, w / waves, used[:, :, 0])
    if not live.any():
        return 0.0
    util = np.mean(used[:, :, live].sum(axis=1) / cap[live], axis=1)
    loss = np.mean(np.abs(grid - fair)[:, :, live].sum(axis=1) / cap[live], axis=1)
    return float(np.max(util - beta * loss - gamma * n_changed))


@st.composite
def small_cluster(draw, bsp: bool):
    """A small instance (at most a few thousand partitions) and, if ``bsp``, workers per job."""
    n = draw(st.integers(1, 3))
    cap = np.array([draw(st.integers(0, 12)), draw(st.integers(0, 2))])
    workers = np.array([draw(st.integers(0, 12)) if bsp else 0 for _ in range(n)], dtype=np.int64)
    demand = np.array(
        [
            [w if w and draw(st.booleans()) else draw(st.integers(0, 9)), draw(st.integers(0, 1))]
            for w in workers
        ],
        dtype=np.int64,
    )
    weight = np.array([draw(st.sampled_from([0.5, 1.0, 2.0])) for _ in range(n)])
    held = np.array(
        [[draw(st.integers(0, int(d))) for d in row] for row in demand], dtype=np.int64
    ).reshape(n, 2)
    current = fcfs_partitions(held, cap)
    current[[draw(st.booleans()) for _ in range(n)]] = -1
    return demand, cap, weight, current, draw(st.integers(0, n)), workers


@SETTINGS
@given(small_cluster(bsp=False))
def test_the_milp_finds_the_brute_force_optimum(case):
    demand, cap, weight, current, theta, _ = case
    # WHEN the optimizer runs THEN its objective is the best of every feasible partition
    out = dorm_partitions(demand, cap, weight, current, max_changes=theta)
    assert out.objective == pytest.approx(
        _brute_force(demand, cap, weight, current, theta), abs=1e-9
    )


@SETTINGS
@given(small_cluster(bsp=True))
def test_bsp_jobs_get_sizes_that_waste_nothing_and_the_milp_stays_exact(case):
    demand, cap, weight, current, theta, workers = case
    # WHEN the optimizer runs with bulk synchronous jobs of W workers
    out = dorm_partitions(demand, cap, weight, current, max_changes=theta, bsp_workers=workers)
    x = out.partitions
    # THEN every BSP job's Lambda partition is 0 or some ceil(W / k), within demand and capacity
    for xi, w, d in zip(x[:, 0], workers, demand[:, 0]):
        if w > 0:
            assert xi == 0 or xi in bsp_sizes(int(w), int(d))
    assert np.all(x.sum(axis=0) <= cap) and np.all((x >= 0) & (x <= demand))
    # ... the reported utilization counts their working slots W / ceil(W / x)
    assert out.utilization == pytest.approx(utilization(x, cap, workers))
    assert out.fairness_loss == pytest.approx(fairness_loss(x, out.fair, cap))
    # ... and the objective is the brute-force optimum over those sizes
    assert out.objective == pytest.approx(
        _brute_force(demand, cap, weight, current, theta, workers), abs=1e-9
    )


def test_a_bsp_job_gets_a_size_without_idle_waves():
    # GIVEN a train job of 32 workers and an estimate with 100 units left sharing 40 slots
    demand, workers = [[32], [100]], [32, 0]
    # WHEN every slot counts THEN both get their fair share of 20: the train job's rounds run in
    # ceil(32 / 20) = 2 waves, so only 16 of its 20 slots work
    plain = dorm_partitions(demand, [40])
    np.testing.assert_array_equal(plain.partitions[:, 0], [20, 20])
    assert utilization(plain.partitions, [40], workers) == pytest.approx(36 / 40)
    # WHEN the train job is bulk synchronous THEN it gets 16 (the same 2 waves) and the estimate 24
    out = dorm_partitions(demand, [40], bsp_workers=workers)
    np.testing.assert_array_equal(out.partitions[:, 0], [16, 24])
    assert out.utilization == pytest.approx(1.0)


def test_a_bsp_job_holding_a_wasteful_size_is_resized_outside_the_bound():
    # GIVEN a train job of 32 workers holding 20 slots and an estimate holding 20, theta = 0
    out = dorm_partitions(
        [[32], [100]], [40], None, [[20], [20]], max_changes=0, bsp_workers=[32, 0]
    )
    # THEN the train job must move to a size without idle waves; the estimate, counted, stays
    assert out.bounded and out.partitions[0, 0] in bsp_sizes(32) and out.partitions[1, 0] == 20


def test_bsp_sizes_and_effective_slots():
    np.testing.assert_array_equal(bsp_sizes(32), [1, 2, 3, 4, 5, 6, 7, 8, 11, 16, 32])
    np.testing.assert_array_equal(bsp_sizes(32, demand=10), [1, 2, 3, 4, 5, 6, 7, 8])
    assert bsp_sizes(0).size == 0
    np.testing.assert_allclose(
        effective_slots([0, 11, 20, 32, 40, 5], [32, 32, 32, 32, 32, 0]),
        [0, 32 / 3, 16, 32, 32, 5],
    )
    # without BSP jobs, utilization and the objective are unchanged
    assert utilization([[20, 1]], [40, 2], [0]) == utilization([[20, 1]], [40, 2])


@pytest.mark.parametrize("workers", [[-1, 0], [1.5, 0], [1], [float("nan"), 0]])
def test_bad_bsp_workers_raise_a_named_error(workers):
    with pytest.raises(InvalidJobError):
        dorm_partitions([[4], [4]], [8], bsp_workers=workers)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"value": [1.0, 0.0]}, "value"),
        ({"value": [1.0]}, "value"),
        ({"fairness_bound": float("nan")}, "fairness_bound"),
        ({"min_utilization": float("inf")}, "min_utilization"),
    ],
)
def test_bad_pass_inputs_raise_a_named_error(kwargs, field):
    with pytest.raises(InvalidJobError, match=field):
        dorm_partitions([[4], [4]], [8], **kwargs)
