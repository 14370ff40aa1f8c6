"""Dorm's utilization-fairness partitioning (fanfit.sched.partition), with property tests.

GIVEN running jobs with demands, weights and current partitions, WHEN the optimizer recomputes them,
THEN capacity and demand are respected, at most ``max_changes`` running jobs change, the same input
gives the same answer, and the objective is at least that of static equal partitions and of FCFS
whenever those are feasible for it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanfit.errors import InvalidJobError
from fanfit.sched.partition import (
    dorm_partitions,
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
