"""The drift-plus-penalty dispatcher (Proteus, Xiang et al.; Neely 2010) on synthetic traces."""

from __future__ import annotations

import numpy as np
import pytest

from fanfit.errors import InvalidJobError
from fanfit.prices import DEFAULT_PRICES
from fanfit.sched.lyapunov import (
    LyapunovDispatcher,
    QueueSpec,
    backlog_bound,
    dispatch_fragments,
    penalty_weight,
    poisson_trace,
    queue_specs_from_prices,
    simulate,
)

SEED = 20240917
N_SLOTS = 20_000
SHARD = 50.0  # samples per shard


@pytest.fixture(scope="module")
def queues() -> tuple[QueueSpec, QueueSpec]:
    # 4 Lambda workers at 1769 MB (100 samples/s each) and one g4dn.xlarge (800 samples/s), 1 s slots
    return queue_specs_from_prices(1769, 100.0, 4, 800.0, 1, slot_s=1.0, shard_samples=SHARD)


@pytest.fixture(scope="module")
def trace(queues) -> list[np.ndarray]:
    # A seeded Poisson trace of 50-sample shards at 90 % of the total service (1,200 samples/slot)
    mu = sum(q.service_per_slot for q in queues)
    return poisson_trace(N_SLOTS, 0.9 * mu / SHARD, SHARD, seed=SEED)


def test_queue_specs_follow_the_price_table(queues) -> None:
    # THEN the service is workers x throughput x slot, and the per-sample costs come from the prices
    lam, gpu = queues
    assert lam.service_per_slot == 400.0 and gpu.service_per_slot == 800.0
    assert lam.cost_per_sample_usd == pytest.approx(
        1769 / 1024 * DEFAULT_PRICES.lambda_gb_second_usd / 100.0
        + DEFAULT_PRICES.lambda_request_usd / SHARD
    )
    assert gpu.cost_per_sample_usd == pytest.approx(0.526 / 3600 / 800.0)


def test_dispatch_minimises_v_cost_plus_backlog() -> None:
    # GIVEN a cheap and a dear queue
    cheap, dear = QueueSpec("lambda", 10.0, 1.0), QueueSpec("gpu", 10.0, 2.0)
    # THEN with V = 0 and equal backlogs the tie goes to the first queue
    assert LyapunovDispatcher([dear, cheap], V=0.0).dispatch(5.0) == "gpu"
    # AND with V > 0 a shard goes to the cheap queue until its backlog exceeds V * (2 - 1)
    d = LyapunovDispatcher([cheap, dear], V=25.0)
    names, arrivals, cost = d.step([20.0])
    assert names == ["lambda"] and cost == 20.0
    np.testing.assert_array_equal(arrivals, [20.0, 0.0])
    d.step([30.0])  # Q = max(20 - 10, 0) + 30 = 40 > 25: the next slot spills
    assert d.backlog == {"lambda": 40.0, "gpu": 0.0}
    assert d.dispatch(1.0) == "gpu"
    # AND every shard of a slot sees the backlog at the start of the slot
    names, _, _ = d.step([1.0, 1.0, 1.0])
    assert names == ["gpu"] * 3


def test_invalid_options_are_named_errors() -> None:
    q = QueueSpec("lambda", 1.0, 1.0)
    with pytest.raises(InvalidJobError, match="V"):
        LyapunovDispatcher([q], V=-1.0)
    with pytest.raises(InvalidJobError, match="unique"):
        LyapunovDispatcher([q, q], V=1.0)
    with pytest.raises(InvalidJobError, match="service_per_slot"):
        QueueSpec("gpu", 0.0, 1.0)
    with pytest.raises(InvalidJobError, match="total service"):
        backlog_bound([q], 1.0, mean_arrival=1.0, mean_sq_arrival=1.0)


@pytest.mark.parametrize("V", [0.0, 1e9, 1e10, 1e11])
def test_queues_stay_bounded_at_90_percent_load(queues, trace, V: float) -> None:
    # GIVEN the 90 %-load trace and its empirical E[A] and E[A^2] (samples per slot)
    a = np.array([slot.sum() for slot in trace])
    bound = backlog_bound(queues, V, float(a.mean()), float((a**2).mean()))
    # WHEN the dispatcher runs over it
    result = simulate(trace, queues, V)
    total = result.backlog.sum(axis=1)
    half = len(total) // 2
    # THEN the time-average backlog is below Neely's drift-plus-penalty bound
    assert result.time_average_backlog <= bound
    # AND it does not grow: the second half's average is within 10 % of the first half's
    assert total[half:].mean() <= 1.1 * total[:half].mean() + 2 * SHARD
    # AND every shard was dispatched
    assert result.arrivals.sum() == pytest.approx(a.sum())


def test_a_larger_v_lowers_the_cost_towards_the_optimum(queues, trace) -> None:
    # GIVEN the same trace run with increasing V
    costs = [simulate(trace, queues, V).time_average_cost_usd for V in (0.0, 1e9, 1e10, 1e11)]
    # THEN the time-average cost never rises with V, and drops clearly from V = 0 to V = 1e11
    assert all(b <= a * (1 + 1e-9) for a, b in zip(costs, costs[1:]))
    assert costs[-1] < 0.97 * costs[0]
    # AND with the largest V it is within 1 % of the optimum of the fluid problem:
    # fill the cheaper queue to its service, send the rest to the other
    a = np.array([slot.sum() for slot in trace])
    cheap, dear = sorted(queues, key=lambda q: q.cost_per_sample_usd)
    rate = float(a.mean())
    optimum = (
        min(rate, cheap.service_per_slot) * cheap.cost_per_sample_usd
        + max(rate - cheap.service_per_slot, 0.0) * dear.cost_per_sample_usd
    )
    assert costs[-1] == pytest.approx(optimum, rel=0.01)


def test_the_trace_is_seeded() -> None:
    # THEN the same seed gives the same trace
    t1, t2 = poisson_trace(100, 3.0, 10.0, seed=1), poisson_trace(100, 3.0, 10.0, seed=1)
    assert all(np.array_equal(x, y) for x, y in zip(t1, t2))


def test_fragments_split_by_service_when_v_is_zero() -> None:
    # GIVEN two queues, the second serving three times as many samples per slot, at equal cost
    qs = [QueueSpec("lambda", 2.5, 1e-6), QueueSpec("gpu", 7.5, 1e-6)]
    # WHEN 1,000 samples arrive as 100 fragments of 10 (one per slot, the queues' joint service)
    out = dispatch_fragments(1000, 100, qs, V=0.0)
    # THEN every sample is placed and the shares track the service, within two fragments
    assert sum(out.samples) == 1000 and sum(out.fragments) == 100
    assert out.fragment_samples == (10,) * 100 and len(out.assignment) == 100
    assert abs(out.samples_of("gpu") - 750) <= 20
    assert out.initial_backlog == (0.0, 0.0)


def test_a_penalty_shifts_fragments_to_the_cheaper_queue_by_about_its_backlog() -> None:
    # GIVEN equal queues, the GPU twice as dear per sample
    qs = [QueueSpec("lambda", 5.0, 1e-6), QueueSpec("gpu", 5.0, 2e-6)]
    # WHEN V lets the cheaper queue build 100 samples of backlog
    weight = penalty_weight(qs, 100.0)
    out = dispatch_fragments(1000, 100, qs, weight)
    # THEN V is backlog / cost spread, and Lambda takes more than half, by about that backlog
    assert weight == pytest.approx(100.0 / 1e-6)
    assert 550 <= out.samples_of("lambda") <= 720
    # ... and equal costs give V = 0
    assert penalty_weight([QueueSpec("a", 1, 1e-6), QueueSpec("b", 2, 1e-6)], 50.0) == 0.0


def test_a_queue_that_starts_with_a_backlog_gets_less_so_both_end_even() -> None:
    # GIVEN equal queues, the GPU starting with 200 samples of backlog (it finished late)
    qs = [QueueSpec("lambda", 5.0, 1e-6), QueueSpec("gpu", 5.0, 1e-6)]
    # WHEN 1,000 samples are dispatched
    even = dispatch_fragments(1000, 100, qs, 0.0)
    late = dispatch_fragments(1000, 100, qs, 0.0, initial_backlog={"gpu": 200.0})
    # THEN the GPU's new samples plus its backlog about equal Lambda's: 100 fewer than without it
    assert late.initial_backlog == (0.0, 200.0)
    assert late.samples_of("gpu") + 200 == pytest.approx(late.samples_of("lambda"), abs=20)
    assert even.samples_of("gpu") - late.samples_of("gpu") == pytest.approx(100, abs=20)


def test_fragment_dispatch_rejects_bad_counts_and_backlogs() -> None:
    # GIVEN two queues WHEN the counts or backlogs are out of range THEN a named error
    qs = [QueueSpec("lambda", 5.0, 1e-6), QueueSpec("gpu", 5.0, 1e-6)]
    with pytest.raises(InvalidJobError, match="n_fragments must be in 1..10"):
        dispatch_fragments(10, 11, qs, 0.0)
    with pytest.raises(InvalidJobError, match="total_samples"):
        dispatch_fragments(-1, 1, qs, 0.0)
    with pytest.raises(InvalidJobError, match="initial_backlog names 'tpu'"):
        dispatch_fragments(10, 2, qs, 0.0, initial_backlog={"tpu": 1.0})
    with pytest.raises(InvalidJobError, match="initial backlog of gpu"):
        dispatch_fragments(10, 2, qs, 0.0, initial_backlog={"gpu": -1.0})
    with pytest.raises(InvalidJobError, match="backlog_samples"):
        penalty_weight(qs, -1.0)
