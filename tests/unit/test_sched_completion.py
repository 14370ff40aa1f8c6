"""Dorm's completion pass (fanfit.sched.completion), with property tests.

GIVEN running jobs with their remaining work and remaining critical path, WHEN the completion pass
re-solves Dorm's MILP with each job's slots weighted by :func:`completion_values`, THEN the jobs
with the least work left and the one on the makespan's critical path gain slots, within Dorm's
fairness-loss bound, never below Dorm's utilization, and with at most ``max_changes`` running jobs
resized; without completion figures the policy is Dorm's optimizer.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_sched_partition import SETTINGS, cluster

from fanfit.errors import InvalidJobError
from fanfit.sched.completion import (
    COMPLETION_ALPHA,
    CRITICAL_BOOST,
    DEFAULT_FAIRNESS_BOUND,
    completion_values,
    dorm_policy,
)
from fanfit.sched.partition import bsp_sizes, dorm_partitions


def test_completion_values_rank_by_remaining_work_and_lift_the_critical_path():
    # GIVEN three jobs with 1, 50 and 100 slot-s left on 12 slots (drain 151 / 12 = 12.6 s), the
    # last one needing 100 s even at its whole demand
    v = completion_values([1, 50, 100], [1, 1, 100], 12)
    # THEN the least work left is worth 1 + alpha, each later rank alpha / n less, and the job on
    # the critical path (100 >= 0.9 x 12.6) gets the boost on top
    alpha, boost = COMPLETION_ALPHA, CRITICAL_BOOST
    np.testing.assert_allclose(v, [1 + alpha, 1 + alpha * 2 / 3, 1 + alpha / 3 + boost])
    # ... ties keep the order given, and no job is critical below 0.9 of the drain time (1 s)
    np.testing.assert_allclose(
        completion_values([5, 5], [0.5, 0.5], 10), [1 + alpha, 1 + alpha / 2]
    )


def test_without_completion_figures_the_policy_is_dorms_optimizer():
    demand, cap = np.array([[12, 0]] * 3), [12, 0]
    a = dorm_policy(demand, cap, max_changes=2, bsp_workers=[0, 12, 0])
    b = dorm_partitions(demand, cap, max_changes=2, bsp_workers=[0, 12, 0])
    np.testing.assert_array_equal(a.partitions, b.partitions)


def test_the_completion_pass_favours_the_critical_path_within_the_fairness_bound():
    # GIVEN three estimates of demand 12 on 12 slots: fair shares 4, 4, 4
    demand, cap = np.array([[12, 0]] * 3), [12, 0]
    assert dorm_policy(demand, cap).partitions[:, 0].tolist() == [4, 4, 4]
    # WHEN the third is on the critical path and the second has more work left than the first
    out = dorm_policy(demand, cap, remaining_s=[1, 50, 100], critical_s=[1, 1, 100])
    # THEN the pass moves slots from the second to the third only as far as F <= 0.24 allows
    # (|5 - 4| + |3 - 4| = 2 slots of 12: F = 0.167; one more would make it 0.33), all 12 in use
    assert out.partitions[:, 0].tolist() == [4, 3, 5]
    assert out.fairness_loss == pytest.approx(2 / 12) and out.utilization == pytest.approx(1.0)
    # ... and a looser bound lets it move more: |7 - 4| + |1 - 4| = 6 slots, F = 0.5
    loose = dorm_policy(
        demand, cap, remaining_s=[1, 50, 100], critical_s=[1, 1, 100], fairness_bound=0.5
    )
    assert loose.partitions[:, 0].tolist() == [4, 1, 7]


@st.composite
def cluster_with_figures(draw):
    demand, cap, weight, current, theta = draw(cluster())
    n = demand.shape[0]
    remaining = [draw(st.floats(0, 500)) for _ in range(n)]
    critical = [draw(st.floats(0, 30)) for _ in range(n)]
    workers = [draw(st.sampled_from([0, 0, 4, 16, 32])) for _ in range(n)]
    return demand, cap, weight, current, theta, remaining, critical, workers


@SETTINGS
@given(cluster_with_figures())
def test_the_completion_pass_keeps_dorms_utilization_bounds_and_adjustment_limit(case):
    demand, cap, weight, current, theta, remaining, critical, workers = case
    # GIVEN any jobs with completion figures; WHEN the policy runs with and without them
    first = dorm_partitions(demand, cap, weight, current, max_changes=theta, bsp_workers=workers)
    out = dorm_policy(
        demand, cap, weight, current, max_changes=theta, bsp_workers=workers,
        remaining_s=remaining, critical_s=critical,
    )  # fmt: skip
    x = out.partitions
    # THEN capacity and demand hold, no fewer working slots than Dorm's optimizer hands out, the
    # fairness loss within max(bound, Dorm's), and at most theta running jobs resized
    assert np.all(x.sum(axis=0) <= cap) and np.all((x >= 0) & (x <= demand))
    assert out.utilization >= first.utilization - 1e-6
    assert out.fairness_loss <= max(DEFAULT_FAIRNESS_BOUND, first.fairness_loss) + 1e-6
    if first.bounded:
        running = np.all(current >= 0, axis=1) & np.all(current <= demand, axis=1)
        running &= [w == 0 or c[0] == 0 or c[0] in bsp_sizes(w) for w, c in zip(workers, current)]
        assert int((np.any(x != current, axis=1) & running).sum()) <= theta
    # ... and the same input gives the same partitions
    again = dorm_policy(
        demand, cap, weight, current, max_changes=theta, bsp_workers=workers,
        remaining_s=remaining, critical_s=critical,
    )  # fmt: skip
    np.testing.assert_array_equal(again.partitions, x)


@pytest.mark.parametrize(
    ("remaining", "critical"),
    [([1.0, -1.0], [1.0, 1.0]), ([1.0], [1.0, 1.0]), ([1.0, 1.0], [1.0, float("nan")])],
)
def test_bad_completion_figures_raise_a_named_error(remaining, critical):
    with pytest.raises(InvalidJobError, match="remaining_s and critical_s"):
        dorm_policy([[4], [4]], [8], remaining_s=remaining, critical_s=critical)
