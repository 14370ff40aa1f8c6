"""LB-BSP batch sizing (Chen et al. 2021), uniform BSP batches, the idle fraction of a round, and how
the batches follow a worker whose speed changes in a step (level shift, rounds to follow)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fanfit.errors import InvalidJobError
from fanfit.jobs.train.schedule import _update_own
from fanfit.sched.lbbsp import (
    SHIFT_RATIO,
    idle_fraction,
    is_level_shift,
    lbbsp_batches,
    round_times,
    rounds_to_follow,
)
from fanfit.sched.throughput import EwmaThroughput, ShardObservation
from fanfit.split import even_batches

speeds = st.lists(st.floats(min_value=0.1, max_value=1e4), min_size=1, max_size=40)


def test_uniform_splits_as_evenly_as_possible() -> None:
    # THEN the remainder goes to the first workers
    np.testing.assert_array_equal(even_batches(10, 3), [4, 3, 3])
    np.testing.assert_array_equal(even_batches(8, 4), [2, 2, 2, 2])
    with pytest.raises(InvalidJobError):
        even_batches(3, 4)


def test_batches_follow_throughput_and_equalise_times() -> None:
    # GIVEN workers at 1, 2, 3 and 4 samples/s and a global batch of 100
    b = lbbsp_batches(100, [1.0, 2.0, 3.0, 4.0])
    # THEN batches are proportional, and every worker computes for the same 10 s
    np.testing.assert_array_equal(b, [10, 20, 30, 40])
    np.testing.assert_allclose(round_times(b, [1, 2, 3, 4]), 10.0)
    assert idle_fraction(round_times(b, [1, 2, 3, 4])) == 0.0
    # AND the uniform split of the same batch leaves most of the slow workers' peers idle
    assert idle_fraction(round_times(even_batches(100, 4), [1, 2, 3, 4])) == pytest.approx(
        1 - np.mean([25, 12.5, 25 / 3, 6.25]) / 25
    )


def test_a_memory_bound_moves_the_excess_to_the_others_proportionally() -> None:
    # GIVEN a very fast worker whose memory holds only 20 samples
    b = lbbsp_batches(100, [1.0, 2.0, 3.0, 40.0], max_batch=[50, 50, 50, 20])
    # THEN it is capped and the other 80 are shared 1 : 2 : 3 (13.3, 26.7, 40 rounded)
    np.testing.assert_array_equal(b, [13, 27, 40, 20])
    # AND bounds that cannot hold the batch are refused
    with pytest.raises(InvalidJobError, match="memory bounds"):
        lbbsp_batches(100, [1.0, 1.0], max_batch=[40, 40])


def test_every_worker_gets_at_least_min_batch() -> None:
    # GIVEN a nearly stopped worker
    b = lbbsp_batches(10, [1e-3, 1.0, 1.0])
    # THEN it still gets one sample; with min_batch=0 it may get none
    np.testing.assert_array_equal(b, [1, 5, 4])
    np.testing.assert_array_equal(lbbsp_batches(10, [1e-3, 1.0, 1.0], min_batch=0), [0, 5, 5])
    # AND fewer samples than workers (at one each) is refused
    with pytest.raises(InvalidJobError):
        lbbsp_batches(2, [1.0, 1.0, 1.0])


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((10, []), {}),
        ((10, [1.0, 0.0]), {}),
        ((10, [1.0, np.inf]), {}),
        ((10, [1.0, 1.0]), {"max_batch": [5.5, 5]}),
        ((10, [1.0, 1.0]), {"max_batch": [0, 20]}),
        ((10, [1.0, 1.0]), {"min_batch": -1}),
    ],
)
def test_bad_arguments_are_refused(args, kwargs) -> None:
    with pytest.raises(InvalidJobError):
        lbbsp_batches(*args, **kwargs)


@settings(max_examples=200, deadline=None)
@given(v=speeds, B=st.integers(min_value=1, max_value=100_000), min_batch=st.sampled_from([0, 1]))
def test_unbounded_batches_sum_to_B_and_are_proportional_within_rounding(v, B, min_batch) -> None:
    share = B * np.asarray(v) / np.sum(v)
    assume(len(v) * min_batch <= B and (min_batch == 0 or share.min() >= 1))
    # WHEN batches are sized without memory bounds
    b = lbbsp_batches(B, v, min_batch=min_batch)
    # THEN they sum to B exactly and each is within one sample of its proportional share
    assert b.dtype == np.int64 and b.sum() == B and np.all(b >= min_batch)
    assert np.all(np.abs(b - share) < 1)
    # AND the same arguments give the same batches
    np.testing.assert_array_equal(lbbsp_batches(B, list(v), min_batch=min_batch), b)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), v=speeds)
def test_bounded_batches_sum_to_B_and_respect_bounds(data, v) -> None:
    n = len(v)
    bounds = np.array(data.draw(st.lists(st.integers(1, 500), min_size=n, max_size=n)))
    B = data.draw(st.integers(min_value=n, max_value=int(bounds.sum())))
    # WHEN batches are sized under memory bounds
    b = lbbsp_batches(B, v, max_batch=bounds)
    # THEN they sum to B and stay within [1, bound]
    assert b.sum() == B and np.all(b >= 1) and np.all(b <= bounds)
    # AND among workers that are not at a bound, a faster one never gets fewer samples but for
    # rounding: b_i / v_i differs between unsaturated workers by less than one sample's time
    free = (b > 1) & (b < bounds)
    if free.sum() >= 2:
        vf, bf = np.asarray(v)[free], b[free]
        assert np.ptp(bf / vf) < 2 / vf.min() + 1e-9


@settings(max_examples=100, deadline=None)
@given(t=st.lists(st.floats(min_value=0.0, max_value=1e3), min_size=1, max_size=30))
def test_idle_fraction_is_in_unit_interval(t) -> None:
    assume(max(t) > 0)
    # THEN it is 1 - mean/max, in [0, 1), and exactly zero when all times are equal
    f = idle_fraction(t)
    assert 0.0 <= f < 1.0
    assert f == pytest.approx(1 - np.mean(t) / max(t), abs=1e-12)
    assert idle_fraction([max(t)] * len(t)) == 0.0


def test_a_step_beyond_the_shift_ratio_is_a_level_shift_and_noise_is_not() -> None:
    # GIVEN an estimate of 100 samples/s
    # THEN a measurement within a factor 1.5 either way is noise, beyond it a new level
    assert SHIFT_RATIO == 1.5
    assert not is_level_shift(100.0, 140.0) and not is_level_shift(100.0, 70.0)
    assert is_level_shift(100.0, 151.0) and is_level_shift(100.0, 25.0)
    # AND without an estimate nothing is a shift
    assert not is_level_shift(None, 1.0)
    # AND bad input is refused, naming the argument
    with pytest.raises(InvalidJobError, match="ratio"):
        is_level_shift(100.0, 50.0, ratio=1.0)
    with pytest.raises(InvalidJobError, match="observed"):
        is_level_shift(100.0, 0.0)
    with pytest.raises(InvalidJobError, match="estimate"):
        is_level_shift(float("nan"), 10.0)


def _observation(samples_per_s: float, worker: int = 0) -> ShardObservation:
    return ShardObservation(samples=int(samples_per_s), compute_s=1.0, io_s=0.1, memory_mb=1769,
                            resource=f"worker-{worker}", cold_start=False, signature="sig")  # fmt: skip


def test_the_job_estimate_restarts_on_a_level_shift_so_batches_follow_in_one_round() -> None:
    # GIVEN four workers at 200, 200, 200 and 100 samples/s, five rounds observed
    own = EwmaThroughput()
    speeds = [200.0, 200.0, 200.0, 100.0]
    for _ in range(5):
        for worker, v in enumerate(speeds):
            own = _update_own(own, _observation(v, worker))
    # WHEN worker 0 loses three quarters of its CPU (50 samples/s) in one round
    own = _update_own(own, _observation(50.0, 0))
    for worker, v in enumerate(speeds[1:], start=1):
        own = _update_own(own, _observation(v, worker))
    # THEN its estimate is the new speed at once (the EWMA alone would still say 155)
    assert own.predict("sig", "worker-0") == pytest.approx(50.0)
    # AND the next round's batches give it its new throughput share, 50 / 550
    v = [own.predict("sig", f"worker-{i}") for i in range(4)]
    b = lbbsp_batches(1100, v)
    assert b[0] == 100
    # AND a small change is still averaged (weight 0.3)
    own = _update_own(own, _observation(60.0, 0))
    assert own.predict("sig", "worker-0") == pytest.approx(0.3 * 60 + 0.7 * 50)


def test_rounds_to_follow_counts_from_the_interference_round() -> None:
    # GIVEN a worker's batch shares per round, cut in round 3 to a throughput share of 0.1
    shares = [0.28, 0.28, 0.28, 0.28, 0.105, 0.1, 0.098]
    # THEN its batch share is within 10 % of 0.1 one round after the cut
    assert rounds_to_follow(shares, 0.1, 3) == 1
    # AND an EWMA-like slow approach takes longer, and never reaching it is None
    assert rounds_to_follow([0.28, 0.28, 0.2, 0.15, 0.12, 0.109], 0.1, 2) == 3
    assert rounds_to_follow([0.28, 0.28, 0.2], 0.1, 1) is None
    # AND a share already right in the cut round counts 0
    assert rounds_to_follow([0.1, 0.1], 0.1, 0) == 0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([0.1, 0.2], 0.0, 0), "target_share"),
        (([0.1, 0.2], 0.1, 2), "from_round"),
        (([0.1, 0.2], 0.1, -1), "from_round"),
        (([[0.1], [0.2]], 0.1, 0), "batch_shares"),
    ],
)
def test_rounds_to_follow_refuses_bad_arguments(args, match) -> None:
    # GIVEN arguments out of range THEN a named error
    with pytest.raises(InvalidJobError, match=match):
        rounds_to_follow(*args)
    with pytest.raises(InvalidJobError, match="tolerance"):
        rounds_to_follow([0.1], 0.1, 0, tolerance=-0.1)
