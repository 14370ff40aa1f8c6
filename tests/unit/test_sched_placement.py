"""Placement of stages on Lambda and Batch GPU (HeterPS, Liu et al. 2023): exact solvers, baselines."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fanfit.errors import InfeasiblePlacementError, InvalidJobError
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.placement import (
    BASELINES,
    EC2_MIN_BILLED_S,
    LAMBDA_TIMEOUT_S,
    ResourceProfile,
    StageChoice,
    StageProfile,
    _solve_brute_force,
    _solve_dp,
    _solve_greedy,
    _solve_milp,
    compare_placements,
    evaluate_choice,
    resource_kind,
    solve_placement,
    stage_options,
)

CPU, CPU2, GPU = "lambda-1769", "lambda-3538", "gpu:g4dn.xlarge"
REL = 1e-9


def _stage(name: str, n: int, cpu: float, gpu: float | None = None, gpu_start: float = 60.0):
    resources = {CPU: ResourceProfile(cpu, startup_s=1.0, data_in_mb=10.0, data_out_mb=1.0)}
    if gpu is not None:
        resources[GPU] = ResourceProfile(gpu, startup_s=gpu_start, data_in_mb=10.0)
    return StageProfile(name, n, resources)


# --- the cost and time model ------------------------------------------------------------------


def test_lambda_choice_bills_every_worker_at_its_memory() -> None:
    # GIVEN 1000 samples at 100 samples/s per Lambda worker, 1 s start-up, 10 MB in (every worker),
    # 1 MB out (split), 50 MB/s
    stage = _stage("ml_l", 1000, 100.0)
    # WHEN it runs on 4 workers
    c = evaluate_choice(stage, CPU, 4)
    # THEN a worker takes 1 + (10 + 0.25) / 50 + 250 / 100 s, and the bill is 4 such start-ups plus
    # all 10 s of compute at 1769 MB, 4 requests, 4 GETs and 4 PUTs
    per_worker = 1.0 + 10.25 / 50.0 + 2.5
    assert c.seconds == pytest.approx(per_worker)
    billed = 4 * (1.0 + 10.25 / 50.0) + 10.0
    assert c.billed_s == pytest.approx(billed)
    expected = DEFAULT_PRICES.lambda_cost_usd(1769, billed, invocations=4) + 4 * (
        DEFAULT_PRICES.s3_get_usd + DEFAULT_PRICES.s3_put_usd
    )
    assert c.cost_usd == pytest.approx(expected, rel=1e-12)


def test_batch_choice_bills_at_least_a_minute_per_instance_and_the_slowest_worker_sets_time() -> (
    None
):
    # GIVEN a GPU profile: 7 samples on 2 instances at 1 sample/s, 5 s start-up, no data
    stage = StageProfile("s", 7, {GPU: ResourceProfile(1.0, startup_s=5.0)})
    # WHEN it runs on 2 workers
    c = evaluate_choice(stage, GPU, 2)
    # THEN the stage takes 5 + 4 s (ceil(7/2)) and each instance is billed EC2's 60 s minimum
    assert c.seconds == pytest.approx(9.0)
    assert c.billed_s == pytest.approx(2 * EC2_MIN_BILLED_S)
    hourly = DEFAULT_PRICES.gpu_instance_hour_usd["g4dn.xlarge"]
    assert c.cost_usd == pytest.approx(
        120.0 / 3600 * hourly + 2 * (DEFAULT_PRICES.s3_get_usd + DEFAULT_PRICES.s3_put_usd)
    )


def test_options_drop_lambda_workers_past_the_timeout_and_respect_the_cap() -> None:
    # GIVEN a stage that takes 2000 s on one Lambda worker
    stage = _stage("s", 2000, 1.0)
    # WHEN its options are listed under a cap of 5
    opts = stage_options(stage, max_workers=5)
    # THEN 1 and 2 workers (> 900 s) are not options; 3..5 are
    assert [o.workers for o in opts] == [3, 4, 5]
    assert all(o.seconds <= LAMBDA_TIMEOUT_S for o in opts)
    # AND a per-kind cap applies to its kind
    assert [o.workers for o in stage_options(stage, max_workers={"lambda": 3})] == [3]


def test_resource_names_are_checked() -> None:
    # THEN Lambda and Batch GPU names parse; anything else is a named error
    assert resource_kind("lambda-1769") == "lambda"
    assert resource_kind("gpu:g5.xlarge") == "gpu"
    for bad in ("lambda-64", "lambda-20000", "gpu", "gpu:"):
        with pytest.raises(InvalidJobError):
            resource_kind(bad)
    with pytest.raises(InvalidJobError, match="no price"):
        evaluate_choice(
            StageProfile("s", 10, {"gpu:x9.huge": ResourceProfile(1.0)}),
            "gpu:x9.huge",
            1,
        )


# --- exact solvers ----------------------------------------------------------------------------


def test_a_tight_deadline_moves_the_heavy_stage_to_the_gpu() -> None:
    # GIVEN a light stage and a heavy one that the GPU runs 50x faster
    stages = [_stage("ml_l", 1000, 500.0, gpu=600.0), _stage("ml_m", 200_000, 20.0, gpu=1000.0)]
    # WHEN there is no deadline
    loose = solve_placement(stages, max_workers=20)
    # THEN each stage takes its cheapest option
    assert loose.meets_deadline
    # WHEN the deadline is 150 s
    tight = solve_placement(stages, deadline_s=150.0, max_workers=20)
    # THEN the plan meets it and costs at least as much as the unconstrained one
    assert tight.total_s <= 150.0
    assert tight.cost_usd >= loose.cost_usd
    assert [s.stage for s in tight.stages] == ["ml_l", "ml_m"]


def test_an_infeasible_deadline_raises_a_named_error_with_the_fastest_time() -> None:
    # GIVEN a stage whose fastest option takes more than 10 s
    stages = [_stage("ml_l", 100_000, 100.0, gpu=1000.0)]
    # THEN every exact method raises InfeasiblePlacementError (an InvalidJobError) naming the fastest
    for method in ("milp", "dp", "brute-force"):
        with pytest.raises(InfeasiblePlacementError, match="fastest takes"):
            solve_placement(stages, deadline_s=10.0, max_workers=4, method=method)
    assert issubclass(InfeasiblePlacementError, InvalidJobError)


def test_all_gpu_without_a_gpu_profile_raises_and_compare_reports_none() -> None:
    # GIVEN a stage with a Lambda profile only
    stages = [_stage("ml_l", 1000, 100.0)]
    # THEN the all-GPU baseline has no plan
    with pytest.raises(InfeasiblePlacementError, match="no admissible option"):
        solve_placement(stages, method="all-gpu")
    out = compare_placements(stages, deadline_s=100.0, max_workers=8)
    assert out["all-gpu"] is None and out["milp"] is not None


def test_a_throughput_floor_filters_slow_stage_options() -> None:
    # GIVEN a stage of 10,000 samples at 100 samples/s per Lambda worker
    stages = [_stage("s", 10_000, 100.0)]
    # WHEN every stage must run at >= 1,000 samples/s
    plan = solve_placement(stages, min_throughput=1000.0, max_workers=40)
    # THEN the plan's throughput meets the floor
    assert 10_000 / plan.stages[0].seconds >= 1000.0
    assert plan.meets_deadline


def test_invalid_options_are_named_errors() -> None:
    stages = [_stage("s", 100, 10.0)]
    with pytest.raises(InvalidJobError, match="method"):
        solve_placement(stages, method="rl")
    with pytest.raises(InvalidJobError, match="deadline_s"):
        solve_placement(stages, deadline_s=-1.0)
    with pytest.raises(InvalidJobError, match="max_workers"):
        solve_placement(stages, max_workers=0)
    with pytest.raises(InvalidJobError, match="unique"):
        solve_placement([stages[0], stages[0]])
    with pytest.raises(InvalidJobError, match="n_samples"):
        StageProfile("s", 0, {CPU: ResourceProfile(1.0)})
    with pytest.raises(InvalidJobError, match="samples_per_s"):
        ResourceProfile(0.0)


# --- property tests against brute force -------------------------------------------------------


@st.composite
def instances(draw):
    """1-3 stages on up to 3 resources, a cap of 1-5 workers, and a deadline."""
    n_stages = draw(st.integers(1, 3))
    stages = []
    for j in range(n_stages):
        resources = {}
        for name, lo, hi, start in (
            (CPU, 1, 200, (0, 3)),
            (CPU2, 1, 400, (0, 3)),
            (GPU, 50, 5000, (10, 200)),
        ):
            if draw(st.booleans()) or (name == CPU and not resources):
                resources[name] = ResourceProfile(
                    draw(st.floats(lo, hi)),
                    startup_s=draw(st.floats(*start)),
                    data_in_mb=draw(st.floats(0, 100)),
                    data_out_mb=draw(st.floats(0, 10)),
                )
        if not resources:
            resources[GPU] = ResourceProfile(draw(st.floats(50, 5000)), startup_s=30.0)
        stages.append(
            StageProfile(
                f"s{j}", draw(st.integers(1, 50_000)), resources, split_input=draw(st.booleans())
            )
        )
    cap = draw(st.integers(1, 5))
    deadline = draw(st.floats(1.0, 3000.0))
    return stages, cap, deadline


def _brute(stages, cap, deadline):
    try:
        return solve_placement(stages, deadline_s=deadline, max_workers=cap, method="brute-force")
    except InfeasiblePlacementError:
        return None


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(instances())
def test_exact_solvers_equal_brute_force(instance) -> None:
    # GIVEN a random small instance and its brute-force optimum
    stages, cap, deadline = instance
    reference = _brute(stages, cap, deadline)
    for method in ("milp", "dp"):
        # WHEN an exact solver runs
        if reference is None:
            # THEN it raises the named error exactly when no plan meets the deadline
            with pytest.raises(InfeasiblePlacementError):
                solve_placement(stages, deadline_s=deadline, max_workers=cap, method=method)
            continue
        plan = solve_placement(stages, deadline_s=deadline, max_workers=cap, method=method)
        # THEN its cost equals the optimum and it meets the deadline
        assert plan.cost_usd == pytest.approx(reference.cost_usd, rel=REL, abs=0)
        assert plan.total_s <= deadline
        assert plan.meets_deadline
        assert all(1 <= c.workers <= cap for c in plan.stages)


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(instances())
def test_baselines_never_beat_the_optimum_when_they_meet_the_deadline(instance) -> None:
    # GIVEN a random small instance
    stages, cap, deadline = instance
    reference = _brute(stages, cap, deadline)
    for method in BASELINES:
        # WHEN a baseline plans it
        try:
            plan = solve_placement(stages, deadline_s=deadline, max_workers=cap, method=method)
        except InfeasiblePlacementError:
            continue  # e.g. all-gpu with a stage that has no GPU profile
        # THEN meets_deadline says the truth, and a plan that meets it costs no less than the optimum
        assert plan.meets_deadline == (plan.total_s <= deadline)
        if plan.meets_deadline:
            assert reference is not None
            assert plan.cost_usd >= reference.cost_usd * (1 - REL)


def test_the_greedy_baseline_can_cost_more_than_the_optimum() -> None:
    # GIVEN two stages whose best seconds-per-USD upgrade is too small to meet the deadline alone:
    # a: 10 s for $0, or 9 s for $0.1 (10 s/$); b: 10 s for $0, or 0 s for $1.5 (6.7 s/$)
    def opt(stage, seconds, cost):
        return StageChoice(stage, CPU, 1, seconds, cost, seconds)

    options = [[opt("a", 10.0, 0.0), opt("a", 9.0, 0.1)], [opt("b", 10.0, 0.0), opt("b", 0.0, 1.5)]]
    # WHEN the greedy upgrades towards a deadline of 10 s
    plan = _solve_greedy(options, 10.0)
    # THEN it takes a's upgrade first and then must take b's as well: $1.6, against the optimum's $1.5
    assert sum(c.cost_usd for c in plan) == pytest.approx(1.6)
    best = _solve_brute_force(options, 10.0)
    assert best is not None and sum(c.cost_usd for c in best) == pytest.approx(1.5)
    assert _solve_milp(options, 10.0) == best == _solve_dp(options, 10.0)


def test_milp_scales_to_a_thousand_workers_per_resource() -> None:
    # GIVEN four stages, three resources and a cap of 1000 (3000 options per stage)
    stages = [
        StageProfile(
            f"s{j}",
            2_000_000,
            {
                CPU: ResourceProfile(50.0 + 10 * j, startup_s=1.0, data_in_mb=5.0),
                CPU2: ResourceProfile(90.0 + 10 * j, startup_s=1.0, data_in_mb=5.0),
                GPU: ResourceProfile(3000.0, startup_s=90.0, data_in_mb=5.0),
            },
        )
        for j in range(4)
    ]
    # WHEN the MILP solves it under a deadline
    plan = solve_placement(stages, deadline_s=400.0, max_workers=1000)
    # THEN it returns a plan within the deadline
    assert plan.total_s <= 400.0 and math.isfinite(plan.cost_usd)


def test_prices_change_the_plan() -> None:
    # GIVEN a stage the GPU runs 10x faster, priced by default and with a free GPU
    stages = [_stage("s", 100_000, 100.0, gpu=1000.0)]
    free_gpu = PriceTable.from_dict({"gpu_instance_hour_usd": {"g4dn.xlarge": 0.0}})
    # THEN with a free GPU instance the plan uses it
    plan = solve_placement(stages, deadline_s=900.0, max_workers=10, prices=free_gpu)
    assert plan.stages[0].resource == GPU
    # AND the placement serialises to plain JSON types
    d = plan.to_dict()
    assert d["stages"][0]["resource"] == GPU and isinstance(d["cost_usd"], float)
