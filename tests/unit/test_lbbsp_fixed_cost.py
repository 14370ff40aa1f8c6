"""LB-BSP with a per-round fixed cost: t_i(b) = a_i + b / v_i, batches b_i = v_i (T - a_i) with one
finish time T (closed form), the round-cost estimator (weighted least squares, pooled prior, level
shift), and how fast the batches follow a worker whose CPU is cut (simulated rounds)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanfit.errors import InvalidJobError
from fanfit.sched.lbbsp import (
    RoundCostFit,
    RoundCostModel,
    finish_time,
    lbbsp_batches,
    rounds_to_follow,
)
from fanfit.split import even_batches


def test_batches_equalise_finish_times_in_closed_form() -> None:
    # GIVEN four workers with fixed costs 1, 0.5, 0 and 2 s and speeds 10, 20, 40 and 10 samples/s,
    # and the global batch they clear together at T = 5 s: 40 + 90 + 200 + 30 = 360
    a, v = [1.0, 0.5, 0.0, 2.0], [10.0, 20.0, 40.0, 10.0]
    # WHEN LB-BSP sizes 360 samples with the fixed costs
    b = lbbsp_batches(360, v, fixed_s=a)
    # THEN T = (B + sum v a) / sum v = (360 + 40) / 80 = 5 s and b_i = v_i (T - a_i) exactly
    assert finish_time(360, a, v, [1] * 4, [np.inf] * 4) == pytest.approx(5.0, rel=1e-15)
    np.testing.assert_array_equal(b, [40, 90, 200, 30])
    np.testing.assert_allclose(np.asarray(a) + b / np.asarray(v), 5.0)
    # AND proportional batches (45, 90, 180, 45) would leave the barrier waiting 6.5 s for worker 3
    prop = lbbsp_batches(360, v)
    assert (np.asarray(a) + prop / np.asarray(v)).max() == pytest.approx(2 + 45 / 10)
    # AND zero fixed costs give the proportional split
    np.testing.assert_array_equal(lbbsp_batches(360, v, fixed_s=[0.0] * 4), prop)


def test_a_worker_whose_fixed_cost_reaches_the_finish_time_gets_the_minimum() -> None:
    # GIVEN two workers without fixed cost and one that needs 10 s before its first sample
    a, v = [0.0, 0.0, 10.0], [10.0, 10.0, 10.0]
    # WHEN 101 samples are shared (T = 5 s for the other two: a_2 >= T)
    # THEN it gets min_batch (1) and the others 50 each; with min_batch 0 it sits the round out
    np.testing.assert_array_equal(lbbsp_batches(101, v, fixed_s=a), [50, 50, 1])
    np.testing.assert_array_equal(lbbsp_batches(101, v, fixed_s=a, min_batch=0), [51, 50, 0])
    # AND a memory bound caps a worker, the rest share the excess at one finish time
    np.testing.assert_array_equal(
        lbbsp_batches(100, [10.0, 10.0], max_batch=[20, 1000], fixed_s=[1.0, 1.0]), [20, 80]
    )


@pytest.mark.parametrize("fixed", [[1.0], [1.0, -0.1], [1.0, np.nan], [[1.0, 1.0]]])
def test_bad_fixed_costs_are_refused(fixed) -> None:
    # GIVEN fixed costs of the wrong shape, negative or not finite THEN a named error
    with pytest.raises(InvalidJobError, match="fixed_s"):
        lbbsp_batches(10, [1.0, 1.0], fixed_s=fixed)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    n=st.integers(min_value=1, max_value=12),
    B=st.integers(min_value=12, max_value=50_000),
)
def test_fixed_cost_batches_conserve_B_and_respect_bounds(data, n, B) -> None:
    v = np.array(data.draw(st.lists(st.floats(0.5, 1e4), min_size=n, max_size=n)))
    a = np.array(data.draw(st.lists(st.floats(0.0, 50.0), min_size=n, max_size=n)))
    bounded = data.draw(st.booleans())
    hi = (
        np.full(n, B)
        if not bounded
        else np.array(data.draw(st.lists(st.integers(1, B), min_size=n, max_size=n)))
    )
    if hi.sum() < B:
        hi[0] += B - hi.sum()
    # WHEN batches are sized with fixed costs
    b = lbbsp_batches(B, v, max_batch=hi if bounded else None, fixed_s=a)
    # THEN they are integers summing to B exactly, within [1, bound]
    assert b.dtype == np.int64 and int(b.sum()) == B
    assert np.all(b >= 1) and np.all(b <= hi)
    # AND each is within one sample of its real share clip(v (T - a), 1, bound)
    T = finish_time(B, a, v, np.ones(n), hi if bounded else np.full(n, np.inf))
    share = np.clip(v * (T - a), 1, hi if bounded else np.inf)
    assert share.sum() == pytest.approx(B, rel=1e-9)
    assert np.all(np.abs(b - share) < 1 + 1e-6)


def test_the_fit_recovers_fixed_cost_and_speed_from_noise_free_rounds() -> None:
    # GIVEN a worker with a = 0.3 s and v = 5,000 samples/s, measured on three batches
    fit = RoundCostFit()
    for b in (10_000, 4_000, 7_000):
        fit = fit.add(b, 0.3 + b / 5_000)
    # THEN its weighted least squares give both back (whatever the forgetting)
    assert fit.identified
    a, v = fit.fit()
    assert a == pytest.approx(0.3, rel=1e-9) and v == pytest.approx(5_000, rel=1e-9)
    assert fit.seconds(2_000) == pytest.approx(0.7, rel=1e-9)
    # AND the state survives a JSON round trip
    assert RoundCostFit.from_dict(fit.to_dict()) == fit


def test_one_round_or_equal_batches_borrow_the_pooled_fixed_cost() -> None:
    # GIVEN one round of 2,000 samples in 1.4 s (truly a = 1 s, v = 5,000: k = a v = 5,000)
    fit = RoundCostFit().add(2_000, 1.4)
    # THEN it is not identified: with the pooled k it gives v = (k + b) / t, a = k / v exactly
    assert not fit.identified
    a, v = fit.fit(5_000.0)
    assert a == pytest.approx(1.0) and v == pytest.approx(5_000.0)
    # AND without a prior the round is all per-sample time (the proportional model)
    assert fit.fit() == (0.0, pytest.approx(2_000 / 1.4))
    # AND batches within 20 % of one another are not enough to split the time
    fit = fit.add(2_100, 1.42)
    assert not fit.identified
    # AND a noisy slope that would give a negative fixed cost is floored at 0
    fit = RoundCostFit().add(1_000, 1.0).add(3_000, 3.3)
    assert fit.identified and fit.fit()[0] == 0.0
    with pytest.raises(InvalidJobError, match="at least one round"):
        RoundCostFit().fit()
    with pytest.raises(InvalidJobError, match="compute seconds"):
        RoundCostFit().add(10, 0.0)
    with pytest.raises(InvalidJobError, match="forget"):
        RoundCostFit().add(10, 1.0, forget=0.0)
    with pytest.raises(InvalidJobError, match="fixed_samples"):
        fit.fit(-1.0)


def test_a_level_shift_restarts_the_fit_and_the_pooled_prior_sizes_the_next_round() -> None:
    # GIVEN workers with fixed work worth k = 1,500 samples (a_i v_i), worker 3 at half speed,
    # measured on batches that vary enough for their own fits
    v = np.array([5_000.0, 5_000.0, 5_000.0, 2_500.0])
    model = RoundCostModel()
    for batches in ([10_000, 10_000, 10_000, 10_000], [12_000, 12_000, 12_000, 4_000]):
        for i, b in enumerate(batches):
            assert not model.observe(i, b, (1_500 + b) / v[i])
    assert model.pool() == pytest.approx(1_500.0)
    # WHEN worker 0 loses 90 % of its CPU (both its fixed and per-sample work slow ten-fold)
    assert model.observe(0, 12_000, (1_500 + 12_000) / 500.0)
    # THEN its fit restarts from that round, and the pooled prior gives its a and v exactly
    assert model.fits[0].n == 1
    fitted = model.costs(4)
    assert fitted is not None
    a, rate = fitted
    assert a[0] == pytest.approx(3.0) and rate[0] == pytest.approx(500.0)
    # AND a model without every worker measured gives nothing; the state round-trips
    assert RoundCostModel().costs(1) is None
    again = RoundCostModel.from_dict(model.to_dict())
    assert again == model and RoundCostModel.from_dict(None) == RoundCostModel()
    with pytest.raises(InvalidJobError, match="round-cost"):
        RoundCostModel.from_dict({"fits": {"0": {"w": 1.0}}})


def _fold_round(
    model: RoundCostModel, b: np.ndarray, t: np.ndarray, batch_shares: list, speed_shares: list
) -> np.ndarray:
    """Fold a round's (batch, seconds) of every worker into ``model``, record worker 0's batch
    share and measured throughput share, and return the round's samples/s."""
    for i in range(b.size):
        model.observe(i, int(b[i]), float(t[i]))
    model.pool()
    rate = b / t
    batch_shares.append(b[0] / b.sum())
    speed_shares.append(rate[0] / rate.sum())
    return rate


def _simulate(fixed_cost: bool, noise: float = 0.0, rounds: int = 8, cut: int = 3) -> dict:
    """Rounds of 4 workers (true a_i = k / v_i, k = 1,000 samples), worker 0's CPU cut to 0.1 from
    round ``cut``; batches: even in round 0, then LB-BSP from the measured rounds, with the
    round-cost model (``fixed_cost``) or proportional to the last measured samples/s."""
    rng = np.random.default_rng(7)
    B, k = 40_000, 1_000.0
    speed = np.array([5_000.0, 5_000.0, 5_000.0, 2_000.0])
    model, last = RoundCostModel(), None
    batch_shares, speed_shares = [], []
    for r in range(rounds):
        v = speed * np.where((np.arange(4) == 0) & (r >= cut), 0.1, 1.0)
        if r == 0:
            b = even_batches(B, 4)
        elif fixed_cost:
            fitted = model.costs(4)
            assert fitted is not None
            b = lbbsp_batches(B, fitted[1], fixed_s=fitted[0])
        else:
            b = lbbsp_batches(B, last)
        t = (k / v + b / v) * (1 + noise * rng.uniform(-1, 1, 4))
        last = _fold_round(model, b, t, batch_shares, speed_shares)
    return {
        "follow": rounds_to_follow(batch_shares, speed_shares, cut),
        "batch": batch_shares,
        "speed": speed_shares,
    }


@pytest.mark.parametrize("noise", [0.0, 0.03])
def test_batches_follow_a_cpu_cut_within_two_rounds_with_the_fixed_cost(noise) -> None:
    # GIVEN simulated rounds in which worker 0's CPU is cut to 0.1 in round 3
    # WHEN the batches come from the round-cost model
    out = _simulate(fixed_cost=True, noise=noise)
    # THEN its batch share equals its measured throughput share (the round is balanced) within
    # 10 % two rounds after the cut at most, and stays so
    assert out["follow"] is not None and 1 <= out["follow"] <= 2
    late = np.array(out["batch"][3 + out["follow"] :])
    assert np.all(np.abs(late - out["speed"][3 + out["follow"] :]) <= 0.1 * late)


def test_proportional_batches_chase_a_share_that_moves_with_the_batch() -> None:
    # GIVEN the same rounds, batches proportional to the last measured samples/s
    out = _simulate(fixed_cost=False)
    # THEN the cut worker's measured share falls with its batch round after round, and its batch
    # share is not within 10 % of it two rounds after the cut
    assert out["speed"][4] < 0.9 * out["speed"][3] and out["speed"][5] < out["speed"][4]
    assert out["follow"] is None or out["follow"] > 2


def test_rounds_to_follow_compares_each_round_with_its_own_throughput_share() -> None:
    # GIVEN batch shares and each round's measured throughput share
    batch = [0.3, 0.3, 0.3, 0.3, 0.1, 0.05, 0.05]
    speed = [0.3, 0.3, 0.3, 0.1, 0.07, 0.052, 0.049]
    # THEN round 5 is the first balanced one after the cut in round 3
    assert rounds_to_follow(batch, speed, 3) == 2
    # AND the per-round shares must match the rounds, and be in (0, 1] from the cut on
    with pytest.raises(InvalidJobError, match="one per round"):
        rounds_to_follow(batch, speed[:-1], 3)
    with pytest.raises(InvalidJobError, match="target_share"):
        rounds_to_follow(batch, [0.0] * 7, 3)


# The straggler benchmark's interference phase (benchmarks/straggler.py): 4 workers (three 1,769 MB,
# one 885 MB straggler), B = 40,000 rows, 7 rounds, worker 0 cut to 0.1 of its CPU from round 3;
# speeds about those its uniform job measures on this machine (6,000 and 2,450 samples/s). Its
# per-worker times (``interference_workers``, ``lbbsp_workers``) show a throttled worker computing
# about twice as fast once the others have reached the barrier as while they run: the cut worker
# 1,366 samples/s in the cut round against 645-753 in the rounds after (1,489 against 665-1,067 in
# another run), the straggler 2,013 in a round it ended 0.9 s after the others against 1,509-1,615
# in balanced ones; its samples/s in balanced rounds does not grow with its batch (1,509-1,615 over
# 3,403-4,639 rows), so this is not a per-round fixed cost. The environments share two cores; a
# throttled one has a small CPU weight.
BENCH_SPEED = np.array([6_000.0, 6_000.0, 6_000.0, 2_450.0])
ALONE_GAIN = 2.0


def _contended(batches: np.ndarray, speed: np.ndarray, gain: float) -> np.ndarray:
    """Compute seconds when the last worker running speeds up ``gain``-fold once the others are done."""
    t = batches / speed
    last = int(np.argmax(t))
    others = float(np.delete(t, last).max())
    t[last] = others + (batches[last] - speed[last] * others) / (gain * speed[last])
    return t


def _bench_interference(seed: int, noise: float, gain: float = ALONE_GAIN) -> dict:
    """One simulated interference job; ``follow`` as benchmarks/straggler.py defines it."""
    rng = np.random.default_rng(seed)
    B, cut = 40_000, 3
    # round 0 from the throughput table: the uniform job's samples/s, where the straggler runs
    # alone once the others are done
    table = 10_000 / _contended(np.full(4, 10_000.0), BENCH_SPEED, gain)
    model = RoundCostModel()
    batch_shares, speed_shares = [], []
    for r in range(7):
        v = BENCH_SPEED * np.where((np.arange(4) == 0) & (r >= cut), 0.1, 1.0)
        if r == 0:
            b = lbbsp_batches(B, table)
        else:
            fitted = model.costs(4)
            assert fitted is not None
            b = lbbsp_batches(B, fitted[1], fixed_s=fitted[0])
        t = _contended(b.astype(np.float64), v, gain) * np.exp(noise * rng.normal(size=4))
        _fold_round(model, b, t, batch_shares, speed_shares)
    return {
        "follow": rounds_to_follow(batch_shares, speed_shares, cut),
        "error": np.abs(np.subtract(batch_shares, speed_shares)) / speed_shares,
    }


def test_the_cut_round_overstates_the_cut_workers_speed_when_it_ends_alone() -> None:
    # GIVEN the benchmark's interference job, without noise, the cut worker twice as fast once
    # the others have reached the barrier
    out = _bench_interference(seed=0, noise=0.0)
    # THEN round 4, sized from the cut round (in which it ran alone for most of its time), gives
    # it a third more than a balanced round would: the miss no estimator fed only the cut round
    # avoids; round 5, sized by the line through its two rounds at the new level, is within 10 %,
    # but only just (9.5 %: that line bends the speed-up into a fixed cost), so 5 % noise per
    # worker and round tips it past 10 % in about half the seeds (below)
    assert out["error"][4] > 0.3
    assert out["follow"] == 2 and 0.09 < out["error"][5] < 0.1
    # AND without the speed-up when alone the round after the cut is balanced: 1 round
    assert _bench_interference(seed=0, noise=0.0, gain=1.0)["follow"] == 1


@pytest.mark.xfail(
    strict=True,
    reason="same-round definition with the cut worker twice as fast alone: with 5 % noise per "
    "worker and round the round-cost model follows the cut within 2 rounds in 22 of these 50 "
    "seeds (3 rounds in 22, never in 6); benchmarks/straggler.py's rounds_to_follow compares "
    "with the settled share since session 13 (tests/unit/test_bench_straggler.py)",
)
def test_the_benchmarks_cut_is_followed_in_two_rounds_with_measured_noise() -> None:
    # GIVEN the benchmark's interference job with 5 % lognormal noise on every compute time
    follow = [_bench_interference(seed, noise=0.05)["follow"] for seed in range(50)]
    # THEN (the target) at least 90 % of the seeds follow within 2 rounds
    assert np.mean([f is not None and f <= 2 for f in follow]) >= 0.9
