"""Shard sizing for estimate jobs: makespan, caps, Lambda timeout, probes, DoubleML-Serverless layouts."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanfit.dml import FitUnit
from fanfit.errors import InvalidJobError
from fanfit.sched.shards import n_shards_for
from fanfit.sched.sizing import ShardingDecision, plan_shards, split_units


def test_small_stage_runs_one_unit_per_shard_in_one_wave() -> None:
    # GIVEN 200 units of 5 s, 2 s start-up, the default account cap of 1000
    d = plan_shards(200, 5.0, 2.0)
    # THEN every unit gets its own invocation: one wave of 7 s
    assert (d.units_per_shard, d.n_shards, d.max_concurrency) == (1, 200, 200)
    assert d.predicted_makespan_s == pytest.approx(7.0) and not d.probe


def test_many_short_units_are_packed_to_amortise_start_up() -> None:
    # GIVEN 100,000 units of 0.1 s and a 2 s start-up, without slack
    d = plan_shards(100_000, 0.1, 2.0, makespan_slack=0.0)
    # THEN 100 units per shard fill the 1000 concurrent slots once: 2 + 10 s
    assert (d.units_per_shard, d.n_shards, d.max_concurrency) == (100, 1000, 1000)
    assert d.predicted_makespan_s == pytest.approx(12.0)
    # WHEN 5 % slack is allowed THEN fewer, longer shards are taken within 5 % of that
    e = plan_shards(100_000, 0.1, 2.0, makespan_slack=0.05)
    assert e.n_shards < d.n_shards and e.predicted_makespan_s <= 12.0 * 1.05


def test_job_cap_and_timeout_shape_the_plan() -> None:
    # GIVEN 1000 units of 60 s with a job cap of 50 and the default safety (half of 900 s)
    d = plan_shards(1000, 60.0, 3.0, job_concurrency=50)
    # THEN at most 50 run at once and no shard is predicted over 450 s
    assert d.max_concurrency == 50
    assert 3.0 + d.units_per_shard * 60.0 <= 450.0
    assert d.predicted_makespan_s == pytest.approx(
        math.ceil(d.n_shards / 50) * (3.0 + d.units_per_shard * 60.0)
    )
    # AND a limit that the units fill exactly (450 / 0.1, rounded) still gets a plan under it
    e = plan_shards(100_000, 0.1, 0.0, account_concurrency=1)
    assert e.units_per_shard * 0.1 <= 450.0 and e.max_concurrency == 1
    # AND a single unit over the limit is refused with a hint
    with pytest.raises(InvalidJobError, match="Batch"):
        plan_shards(10, 500.0, 2.0)


def test_doubleml_serverless_layouts_are_special_cases() -> None:
    # GIVEN a stage of 2 repetitions x 2 learners x 5 folds (fit_units order: fold innermost)
    units = [
        FitUnit(0, 0, r, f, key) for r in range(2) for key in ("ml_l", "ml_m") for f in range(5)
    ]
    # WHEN per-fold (Kurz 2021: n_lambdas_cv='n_folds * n_rep', one call per learner, fold, rep)
    per_fold = plan_shards(len(units), 3.0, 1.0, policy="per-fold")
    shards = split_units(units, per_fold)
    # THEN every unit is its own shard
    assert (per_fold.units_per_shard, per_fold.n_shards) == (1, 20)
    assert [s[0] for s in shards] == units
    # WHEN per-repetition (n_lambdas_cv='n_rep': one call per learner and repetition)
    per_rep = plan_shards(len(units), 3.0, 1.0, policy="per-repetition", n_folds=5)
    shards = split_units(units, per_rep)
    # THEN each shard holds all folds of one (repetition, learner)
    assert (per_rep.units_per_shard, per_rep.n_shards, per_rep.max_concurrency) == (5, 4, 4)
    assert per_rep.predicted_makespan_s == pytest.approx(16.0)
    for shard in shards:
        assert sorted(u.i_fold for u in shard) == list(range(5))
        assert len({(u.i_rep, u.learner) for u in shard}) == 1
    # AND per-repetition needs n_folds dividing the units, and must fit the timeout
    with pytest.raises(InvalidJobError):
        plan_shards(20, 3.0, policy="per-repetition", n_folds=3)
    with pytest.raises(InvalidJobError, match="timeout"):
        plan_shards(20, 100.0, policy="per-repetition", n_folds=5)


def test_without_history_a_probe_wave_then_sizing_from_its_measurements() -> None:
    # GIVEN no prediction for a stage of 120 units under a job cap of 3
    probe = plan_shards(120, None, job_concurrency=3)
    # THEN a wave of 3 single-unit shards is planned, with no makespan claimed
    assert probe.probe and (probe.units_per_shard, probe.n_shards, probe.max_concurrency) == (
        1,
        3,
        3,
    )
    assert probe.predicted_makespan_s is None
    assert split_units(list(range(120)), probe) == [[0], [1], [2]]
    # WHEN the probe measured 8 s per unit THEN the remaining 117 units are sized from it
    rest = plan_shards(120 - probe.n_shards, 8.0, 2.0, job_concurrency=3)
    assert not rest.probe and rest.max_concurrency == 3
    assert 2.0 + rest.units_per_shard * 8.0 <= 450.0
    # AND fixed policies need no probe
    assert not plan_shards(120, None, policy="per-fold").probe


def test_decision_round_trips_through_a_flat_record() -> None:
    # GIVEN decisions with and without optional inputs
    for d in (plan_shards(40, 2.5, 1.0, job_concurrency=8), plan_shards(40, None)):
        record = d.to_dict()
        # THEN the record is flat (no None, no nesting) and reads back equal, also from str numbers
        assert all(isinstance(v, str | int | float | bool) for v in record.values())
        assert ShardingDecision.from_dict(json.loads(json.dumps(record))) == d
        assert ShardingDecision.from_dict({k: str(v) for k, v in record.items()}) == d
    with pytest.raises(InvalidJobError):
        ShardingDecision.from_dict({"policy": "auto"})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_units": 0},
        {"policy": "per-learner"},
        {"seconds_per_unit": -1.0},
        {"startup_s": float("nan")},
        {"safety": 1.5},
        {"job_concurrency": 0},
    ],
)
def test_bad_arguments_are_refused(kwargs) -> None:
    # WHEN an argument is out of range THEN InvalidJobError names it
    with pytest.raises(InvalidJobError):
        plan_shards(**{"n_units": 10, "seconds_per_unit": 1.0, **kwargs})


@settings(max_examples=150, deadline=None)
@given(
    n_units=st.integers(min_value=1, max_value=3000),
    t=st.floats(min_value=0.01, max_value=300.0),
    s=st.floats(min_value=0.0, max_value=20.0),
    account=st.integers(min_value=1, max_value=1000),
    job=st.none() | st.integers(min_value=1, max_value=1000),
    timeout=st.floats(min_value=60.0, max_value=900.0),
    safety=st.floats(min_value=0.1, max_value=1.0),
)
def test_auto_respects_caps_and_timeout_and_beats_fixed_layouts(
    n_units, t, s, account, job, timeout, safety
) -> None:
    kw = {"account_concurrency": account, "job_concurrency": job, "timeout_s": timeout}
    kw["safety"] = safety
    if s + t > safety * timeout:
        # THEN a unit that cannot fit the timeout is refused
        with pytest.raises(InvalidJobError):
            plan_shards(n_units, t, s, **kw)
        return
    d = plan_shards(n_units, t, s, **kw)
    cap = account if job is None else min(account, job)
    # THEN the Map's concurrency respects the caps and no shard is planned over the limit
    assert 1 <= d.max_concurrency == min(d.n_shards, cap)
    assert s + d.units_per_shard * t <= safety * timeout * (1 + 1e-12)
    # AND the shards cover the units as deal() cuts them (consistent with shards.n_shards_for)
    assert d.n_shards == n_shards_for(n_units, cap, d.units_per_shard)
    assert (d.n_shards - 1) * d.units_per_shard < n_units <= d.n_shards * d.units_per_shard
    assert max(len(x) for x in split_units(list(range(n_units)), d)) == d.units_per_shard
    # AND its makespan is within the slack of DoubleML-Serverless's layouts where they fit
    per_fold = plan_shards(n_units, t, s, policy="per-fold", **kw)
    assert d.predicted_makespan_s <= per_fold.predicted_makespan_s * 1.05 * (1 + 1e-12)
    if n_units % 5 == 0 and s + 5 * t <= safety * timeout:
        per_rep = plan_shards(n_units, t, s, policy="per-repetition", n_folds=5, **kw)
        assert d.predicted_makespan_s <= per_rep.predicted_makespan_s * 1.05 * (1 + 1e-12)
