"""The AWS account simulation of a planned job (issue 14, item 2: the projection for AWS):
the concurrency bound, cold starts, the Distributed Map's child start rate, the cost arithmetic,
monotonicity, and the projection of Schedule's own plan."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fanfit import dml
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.estimate import EstimatePlan
from fanfit.jobs.estimate.data import unit_signature
from fanfit.jobs.estimate.projection import project_prediction, simulated_stages
from fanfit.jobs.estimate.wave import plan_job
from fanfit.prices import DEFAULT_PRICES
from fanfit.sched.simulate import (
    AccountModel,
    SimShard,
    SimStage,
    cold_start_s,
    simulate_job,
    simulate_stage,
)
from fanfit.sched.throughput import EwmaThroughput, ThroughputEntry

L1, L2 = "lambda-1769", "lambda-3538"
#: An account with no overheads at all: only the work, the concurrency and the start rate count.
BARE = dict(cold_share=0.0, transition_s=0.0, s3_round_trip_s=0.0, child_start_rate_per_s=1e9)


def _stage(n: int, work_s: float, concurrency: int, resource: str = L1) -> SimStage:
    return SimStage(shards=[SimShard(resource, work_s)] * n, concurrency=concurrency)


def test_the_concurrency_bounds_the_wall_time() -> None:
    # GIVEN 25 shards of 10 s, no overheads, and a job concurrency of 10 (account 1,000)
    account = AccountModel(**BARE)
    # WHEN simulated THEN they run in ceil(25 / 10) = 3 rounds of 10 s
    got = simulate_stage(_stage(25, 10.0, 10), account)
    assert got.wall_s == pytest.approx(30.0) and got.environments == 10
    # ... and the account's concurrency caps a larger job concurrency the same way
    capped = simulate_stage(_stage(25, 10.0, 500), AccountModel(lambda_concurrency=10, **BARE))
    assert capped.wall_s == pytest.approx(30.0) and capped.environments == 10
    # ... and with enough concurrency, one round
    assert simulate_stage(_stage(25, 10.0, 25), account).wall_s == pytest.approx(10.0)


def test_cold_starts_hit_each_new_environment_once() -> None:
    # GIVEN 20 shards of 5 s on 10 environments, every environment cold
    account = AccountModel(**{**BARE, "cold_share": 1.0}, cold_init_s=1.0, cold_sandbox_s=0.5)
    got = simulate_stage(_stage(20, 5.0, 10), account)
    # THEN each environment's first shard starts cold (10 cold starts of 1.5 s), the second warm
    assert got.n_cold == 10
    assert got.wall_s == pytest.approx(1.5 + 5.0 + 5.0)
    assert got.billed_s == pytest.approx(20 * 5.0 + 10 * 1.5)
    # GIVEN half the environments warm THEN half the cold starts, the same critical path
    half = simulate_stage(_stage(20, 5.0, 10), AccountModel(**{**BARE, "cold_share": 0.5},
                                                             cold_init_s=1.0, cold_sandbox_s=0.5))  # fmt: skip
    assert half.n_cold == 5 and half.wall_s == pytest.approx(11.5)
    # ... and a warm environment of another function starts cold on this one
    mixed = SimStage([SimShard(L1, 5.0), SimShard(L2, 5.0)], concurrency=1)
    assert simulate_stage(mixed, account).n_cold == 2
    # ... and INIT runs on one thread: below 1,769 MB it is slower in proportion, above no faster
    assert cold_start_s(account, 884) == pytest.approx(0.5 + 1.0 * 1769 / 884)
    assert cold_start_s(account, 10240) == cold_start_s(account, 1769) == pytest.approx(1.5)


def test_the_child_start_rate_dominates_for_many_tiny_shards() -> None:
    # GIVEN 10,000 shards of 10 ms, 1,000 concurrency, and the default start rate (300/s)
    account = AccountModel(**{**BARE, "child_start_rate_per_s": 300.0})
    got = simulate_stage(_stage(10_000, 0.01, 1000), account)
    # THEN the starts take (10,000 - 1) / 300 = 33.3 s: the wall is that plus the last shard,
    # while the concurrency alone would allow 10 rounds of 10 ms
    concurrency_bound = math.ceil(10_000 / 1000) * 0.01
    assert got.start_bound_s == pytest.approx(9_999 / 300)
    assert got.wall_s == pytest.approx(9_999 / 300 + 0.01)
    assert got.wall_s > 100 * concurrency_bound
    # ... and for a few long shards the rate hardly matters
    long = simulate_stage(_stage(10, 60.0, 1000), account)
    assert long.wall_s == pytest.approx(9 / 300 + 60.0)


def test_the_cost_is_the_hand_computation() -> None:
    # GIVEN 3 shards of 2 s at 1,769 MB on 2 environments, both cold, with every overhead on
    account = AccountModel(lambda_concurrency=2, child_start_rate_per_s=100.0, cold_init_s=1.0,
                           cold_sandbox_s=0.25, cold_share=1.0, transition_s=0.05,
                           child_transitions=3, stage_transitions=4, s3_round_trip_s=0.1,
                           shard_s3_round_trips=4, stage_s3_round_trips=4)  # fmt: skip
    got = simulate_stage(_stage(3, 2.0, 2), account)
    p = DEFAULT_PRICES
    # THEN billed: 2 cold shards of 1.25 + 0.4 + 2 s and one warm of 0.4 + 2 s
    billed = 2 * (1.25 + 0.4 + 2.0) + (0.4 + 2.0)
    assert got.billed_s == pytest.approx(billed) and got.n_cold == 2
    usd = (
        1769 / 1024 * billed * p.lambda_gb_second_usd
        + 3 * p.lambda_request_usd
        + 3 * 2 * (p.s3_get_usd + p.s3_put_usd)
        + (3 * 3 + 4) * p.sfn_transition_usd
    )
    assert got.cost_usd == pytest.approx(usd, rel=1e-12)
    # ... and the wall: Schedule (4 x 0.05 + 4 x 0.1 s), then shard 3 starts on the first
    # environment free (0 + 0.15 + 3.65 s) and runs warm (0.15 + 2.4 s)
    assert got.wall_s == pytest.approx(0.6 + (0.15 + 3.65) + (0.15 + 2.4))
    # ... and a job is the sum of its stages
    job = simulate_job([_stage(3, 2.0, 2), _stage(3, 2.0, 2)], account)
    assert job.wall_s == pytest.approx(2 * got.wall_s)
    assert job.cost_usd == pytest.approx(2 * got.cost_usd)
    assert job.to_dict()["account"]["lambda_concurrency"] == 2


def test_the_projection_is_monotone() -> None:
    base = AccountModel()
    wall = simulate_stage(_stage(400, 3.0, 100), base)
    # more work, more shards: never faster, never cheaper
    more = simulate_stage(_stage(400, 4.0, 100), base)
    assert more.wall_s > wall.wall_s and more.cost_usd > wall.cost_usd
    assert simulate_stage(_stage(500, 3.0, 100), base).wall_s >= wall.wall_s
    # more concurrency, a faster start rate, fewer cold starts: never slower
    walls = [simulate_stage(_stage(400, 3.0, c), base).wall_s for c in (10, 50, 100, 400)]
    assert walls == sorted(walls, reverse=True)
    rates = [AccountModel(child_start_rate_per_s=r) for r in (10.0, 100.0, 1000.0)]
    walls = [simulate_stage(_stage(400, 3.0, 400), a).wall_s for a in rates]
    assert walls == sorted(walls, reverse=True)
    colds = [AccountModel(cold_share=s) for s in (1.0, 0.5, 0.0)]
    got = [simulate_stage(_stage(400, 3.0, 100), a) for a in colds]
    assert [g.wall_s for g in got] == sorted((g.wall_s for g in got), reverse=True)
    assert [g.cost_usd for g in got] == sorted((g.cost_usd for g in got), reverse=True)


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"lambda_concurrency": 0}, "lambda_concurrency must be >= 1"),
     ({"child_start_rate_per_s": 0.0}, "child_start_rate_per_s must be a finite number > 0"),
     ({"cold_share": 1.5}, "cold_share must be in 0..1"),
     ({"s3_round_trip_s": float("nan")}, "s3_round_trip_s must be a finite number >= 0"),
     ({"child_transitions": -1}, "child_transitions must be an integer >= 0")],
)  # fmt: skip
def test_a_bad_account_model_is_named(fields, message) -> None:
    with pytest.raises(InvalidJobError, match=message):
        AccountModel(**fields)


def test_a_gpu_shard_is_not_a_lambda_shard_and_the_gpu_lane_runs_beside() -> None:
    with pytest.raises(InvalidJobError, match="runs on Lambda"):
        SimShard("gpu:g4dn.xlarge", 1.0)
    # GIVEN a GPU lane longer than the Map THEN the stage waits for it and pays for it
    stage = SimStage([SimShard(L1, 1.0)], concurrency=1, gpu_s=100.0, gpu_cost_usd=0.5)
    got = simulate_stage(stage, AccountModel(**BARE))
    assert got.wall_s == pytest.approx(100.0) and got.cost_usd > 0.5


# ------------------------------------------------------------------------------ projection


SPEC = dml.DMLSpec(model="plr", score="partialling out", y_col="y", d_cols=("d",),
                   x_cols=("x1", "x2"), n_folds=5, n_rep=20, seed=3,
                   learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression"})  # fmt: skip


def _prediction(units_per_shard: int | None = None, ml_m_rows_per_s: float = 400.0):
    spec = SPEC
    folds = dml.draw_folds(500, 5, 20, seed=3)
    plan = EstimatePlan(job_id="plan-only", dml=spec, data_key="", folds_key="", n_obs=500,
                        n_stages=dml.n_stages(spec), max_concurrency=1000,
                        units_per_shard=units_per_shard, sharding="auto", spec_sha256="")  # fmt: skip
    rate = {"ml_l": 400.0, "ml_m": ml_m_rows_per_s}
    sigs = {unit_signature(spec, u, 500, 2): rate[u.learner] for u in dml.fit_units(spec, 0)}
    history = EwmaThroughput(entries=[ThroughputEntry(s, L1, x, 0.3, 3) for s, x in sigs.items()])
    return plan_job(plan, folds, history, stack="aws", memory_sizes=[1769],
                    gpu_enabled=False, account_concurrency=1000)  # fmt: skip


def test_the_projection_simulates_schedules_own_plan() -> None:
    # GIVEN Schedule's plan of 200 measured fits (400 train rows at 400 rows/s: 1 s each)
    prediction = _prediction()
    (stage,) = prediction.stages
    (planned,) = stage.shards
    # WHEN turned into the simulation's stages THEN the plan's shards carry the fits' work
    (sim,) = simulated_stages(prediction, SPEC)
    assert len(sim.shards) == planned.n_shards
    assert sum(s.work_s for s in sim.shards) == pytest.approx(200 * 1.0)
    assert sim.concurrency == prediction.job_concurrency
    # WHEN projected THEN the prediction's figures are the simulation's, recorded with the account
    projected, projection = project_prediction(prediction, SPEC)
    assert projected.predicted_wall_s == projection.wall_s == projected.stages[0].predicted_wall_s
    assert projected.predicted_cost_usd == projection.cost_usd
    assert projected.simulation is not None
    assert projected.simulation["account"]["lambda_concurrency"] == 1000
    assert projected.stages[0].placement == stage.placement  # the plan itself is unchanged
    # ... and the wall is at least one fit plus a cold start, the cost at least the fits'
    assert projection.wall_s > 1.0 + cold_start_s(AccountModel(), 1769)
    assert projection.cost_usd > 1769 / 1024 * 200 * DEFAULT_PRICES.lambda_gb_second_usd
    # ... and a fixed shard size (fewer, longer shards) changes the projection, not the work
    fixed = simulated_stages(_prediction(units_per_shard=50), SPEC)[0]
    assert len(fixed.shards) == 4
    assert sum(s.work_s for s in fixed.shards) == pytest.approx(200 * 1.0)
    assert np.isclose(fixed.shards[0].work_s, 50.0)
    # ... and learners of different cost keep their own fits' seconds: with ml_m 4x slower, the
    # plan's one-fit shards are 1 s (ml_l) and 4 s (ml_m), the wall follows the slower
    uneven = _prediction(ml_m_rows_per_s=100.0)
    works = sorted({round(s.work_s, 6) for s in simulated_stages(uneven, SPEC)[0].shards})
    assert uneven.stages[0].shards[0].max_units_per_shard == 1 and works == [1.0, 4.0]
    assert sum(s.work_s for s in simulated_stages(uneven, SPEC)[0].shards) == pytest.approx(500.0)
    assert project_prediction(uneven, SPEC)[1].wall_s > projection.wall_s + 2.9


def test_a_job_of_several_parts_is_simulated_with_every_parts_units() -> None:
    # GIVEN the plan of a job of three parts (the same model three times, as a QTE's parts share
    # their learners), each part 100 fits of 1 s (400 train rows at 400 rows/s)
    from fanfit.jobs.documents.estimate import PlanPart

    folds = dml.draw_folds(500, 5, 20, seed=3)
    parts = [PlanPart(label=f"part {k}", dml=SPEC) for k in range(3)]
    plan = EstimatePlan(job_id="plan-only", dml=SPEC, data_key="", folds_key="", n_obs=500,
                        n_stages=1, max_concurrency=1000, sharding="auto", spec_sha256="",
                        model="apos", parts=parts)  # fmt: skip
    units = plan.units(0)
    assert len(units) == 3 * len(dml.fit_units(SPEC, 0)) == 600
    sigs = {unit_signature(SPEC, u, 500, 2) for u in units}
    history = EwmaThroughput(entries=[ThroughputEntry(s, L1, 400.0, 0.3, 3) for s in sigs])
    prediction = plan_job(plan, folds, history, stack="aws", memory_sizes=[1769],
                          gpu_enabled=False, account_concurrency=1000)  # fmt: skip
    # WHEN simulated from its plan THEN the shards carry the work of every part's units
    (sim,) = simulated_stages(prediction, plan)
    assert sum(s.work_s for s in sim.shards) == pytest.approx(600 * 1.0)
    assert project_prediction(prediction, plan)[1].cost_usd > 3 * 0.99 * (
        project_prediction(_prediction(), SPEC)[1].cost_usd
    )


def test_plan_only_says_the_figures_are_a_simulation(capsys) -> None:
    from fanfit.cli.estimate import print_prediction

    # GIVEN a projected prediction WHEN printed THEN a line says it is simulated, then the figures
    projected, _ = project_prediction(_prediction(), SPEC)
    print_prediction(projected)
    out = capsys.readouterr().out.splitlines()
    assert out[-3].startswith("predicted by a simulation of the AWS account, not measured")
    assert "concurrency 1000, child starts 300/s, cold starts 1.35 s" in out[-3]
    assert out[-2] == f"predicted_wall_s: {projected.predicted_wall_s:.2f}"
    # ... and the local model's prediction has no such line
    print_prediction(_prediction())
    assert not any("simulation" in line for line in capsys.readouterr().out.splitlines())


@pytest.mark.parametrize("local", [True, False])
def test_plan_estimate_simulates_the_account_off_the_local_stack(monkeypatch, local) -> None:
    import types

    import pandas as pd

    from fanfit.client.estimate import plan as client_estimate

    # GIVEN a stack (local or not) whose outputs offer one CrossFit size and no throughput table
    monkeypatch.setattr(
        client_estimate, "_stack_outputs", lambda c: {"CrossFitFunctionMemorySizes": "1769"}
    )
    monkeypatch.setattr(client_estimate, "_account_concurrency", lambda c: 1000)
    client = types.SimpleNamespace(local=local, s3=None, stack=types.SimpleNamespace(name="s"))
    rng = np.random.default_rng(5)
    frame = pd.DataFrame(rng.normal(size=(120, 4)), columns=["y", "d", "x1", "x2"])
    # WHEN the job is planned
    got = client_estimate.plan_estimate(
        client, frame, y="y", d="d", x=["x1", "x2"], ml_l="LinearRegression",
        ml_m="LinearRegression", n_folds=2, n_rep=2,
    )  # fmt: skip
    # THEN the local stack keeps the local model; another stack gets the account simulation
    if local:
        assert got.simulation is None
    else:
        assert (
            got.simulation is not None and got.simulation["account"]["lambda_concurrency"] == 1000
        )
        assert got.predicted_wall_s == pytest.approx(got.simulation["wall_s"])
        assert got.predicted_cost_usd == pytest.approx(got.simulation["cost_usd"])
