"""Proteus within an estimate wave (issue 14, item 3): the units of a learner that both Lambda and
the GPU worker can run are split between the two queues by drift-plus-penalty on their backlogs
(sched.lyapunov.split_wave), and the split is recorded in the placement decision."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fanfit import dml
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.estimate import (
    EstimatePlan,
    EstimatePrediction,
    PlacementInput,
    WaveDecision,
    WaveEntry,
)
from fanfit.jobs.estimate.data import unit_signature
from fanfit.jobs.estimate.wave import dispatch_units, plan_job
from fanfit.prices import DEFAULT_PRICES
from fanfit.progress.renderers import placement_lines
from fanfit.sched.lyapunov import split_wave
from fanfit.sched.profiles import WorkGroup
from fanfit.sched.throughput import EwmaThroughput, ThroughputEntry

L1, L2, GPU = "lambda-1769", "lambda-3538", "gpu:g4dn.xlarge"
EVEN = {"lambda": 1e-4, "gpu": 1e-4}


@pytest.fixture(autouse=True)
def _gpu_type(monkeypatch):
    monkeypatch.setenv("FANFIT_GPU_INSTANCE_TYPE", "g4dn.xlarge")


# ------------------------------------------------------------------------------ the pure rule


def test_equal_backlogs_and_prices_split_by_throughput() -> None:
    # GIVEN 300 units, Lambda serving 20 units/s and the GPU 10, the same price per unit
    rates = {"lambda": 20.0, "gpu": 10.0}
    usd = {"lambda": 20e-4, "gpu": 10e-4}
    # WHEN split with no backlog on either queue
    split = split_wave(300, rates, usd, {"lambda": 0.0, "gpu": 0.0})
    # THEN every unit is placed, 2:1 as the throughputs (to a fragment), and both end together
    assert sum(split.units) == 300 and split.n_fragments == 200
    assert split.units_of("lambda") == pytest.approx(200, abs=2)
    assert split.finish_s[0] == pytest.approx(split.finish_s[1], abs=0.2)


def test_a_queue_with_a_backlog_gets_fewer_units_so_both_end_even() -> None:
    # GIVEN the GPU worker 4 s behind (its start-up), both at 10 units/s
    rates = {"lambda": 10.0, "gpu": 10.0}
    split = split_wave(200, rates, {"lambda": 1e-3, "gpu": 1e-3}, {"lambda": 0.0, "gpu": 4.0})
    # THEN it is given 40 units fewer than Lambda (4 s x 10 units/s): both end at about 12 s
    assert split.units_of("lambda") - split.units_of("gpu") == pytest.approx(40, abs=2)
    assert split.finish_s == pytest.approx((12.0, 12.0), abs=0.2)


def test_a_backlog_longer_than_the_whole_run_leaves_that_queue_idle() -> None:
    # GIVEN the GPU worker's prior start-up (120 s) against a 5 s wave on Lambda
    split = split_wave(
        50, {"lambda": 10.0, "gpu": 5.0}, {"lambda": 3e-4, "gpu": 1.5e-4},
        {"lambda": 1.0, "gpu": 120.0},
    )  # fmt: skip
    # THEN every unit goes to Lambda
    assert split.units == (50, 0) and split.fragments == (50, 0)
    assert split.finish_s == (6.0, 120.0)


def test_the_cheaper_queue_takes_more_by_at_most_the_slack() -> None:
    # GIVEN the same throughput on both queues, the GPU worker 3x cheaper per unit
    rates = {"lambda": 10.0, "gpu": 10.0}
    cheap_gpu = {"lambda": 3e-3, "gpu": 1e-3}
    # WHEN split with the default slack, and with none
    split = split_wave(1000, rates, cheap_gpu, {"lambda": 0.0, "gpu": 0.0})
    none = split_wave(1000, rates, cheap_gpu, {"lambda": 0.0, "gpu": 0.0}, slack=0.0)
    # THEN without slack the split is even; with it the GPU worker takes more, and ends at most
    # about the slack (5%) of the wave's 50 s later than the even split's end
    assert none.units_of("gpu") == pytest.approx(500, abs=5) and none.V == 0.0
    assert split.units_of("gpu") > none.units_of("gpu") and split.V > 0
    assert max(split.finish_s) <= 50.0 * 1.05 + 0.5


def test_no_units_split_into_nothing() -> None:
    split = split_wave(0, {"lambda": 1.0, "gpu": 1.0}, EVEN, {"lambda": 0.0, "gpu": 0.0})
    assert split.units == (0, 0) and split.n_fragments == 0


@pytest.mark.parametrize(
    ("n", "rates", "backlog", "match"),
    [(-1, {"lambda": 1.0, "gpu": 1.0}, {"lambda": 0.0, "gpu": 0.0}, "n_units"),
     (5, {"lambda": 0.0, "gpu": 1.0}, {"lambda": 0.0, "gpu": 0.0}, "units_per_s of lambda"),
     (5, {"lambda": 1.0}, {"lambda": 0.0, "gpu": 0.0}, r"units_per_s has no figure .*'gpu'"),
     (5, {"lambda": 1.0, "gpu": 1.0}, {"lambda": 0.0, "gpu": -2.0}, "backlog_s of gpu")],
)  # fmt: skip
def test_bad_inputs_are_named_errors(n, rates, backlog, match) -> None:
    with pytest.raises(InvalidJobError, match=match):
        split_wave(n, rates, EVEN, backlog)


# ------------------------------------------------------------------------------ the wave


def _units(learner: str, n: int) -> list[dml.FitUnit]:
    return [dml.FitUnit(stage=0, i_treat=0, i_rep=0, i_fold=i, learner=learner) for i in range(n)]


def _input(stage: str, resource: str, rows: float, startup: float, source: str = "measured"):
    return PlacementInput(
        stage=stage, resource=resource, rows_per_s=rows, startup_s=startup, source=source
    )


def _torch_and_linear(n_torch: int, n_linear: int, rows: float) -> dict[str, Any]:
    """Learner groups of a wave: ml_l a Torch learner (GPU only), ml_m a linear one."""
    return {
        "ml_l": (WorkGroup("ml_l", "t", n_torch, rows, lambda_ok=False), _units("ml_l", n_torch)),
        "ml_m": (WorkGroup("ml_m", "s", n_linear, rows), _units("ml_m", n_linear)),
    }


def test_a_learner_both_can_run_is_split_and_a_torch_learner_loads_the_gpu_queue() -> None:
    # GIVEN a wave of a Torch learner (GPU only, 40 units) and a linear one (60 units), both at
    # 1,000 rows per unit, the solver having put the linear one at 1,769 MB
    groups = _torch_and_linear(40, 60, 1_000.0)
    inputs = [
        _input("ml_l", GPU, 10_000.0, 2.0),
        _input("ml_m", L1, 2_000.0, 0.5),
        _input("ml_m", GPU, 4_000.0, 2.0),
    ]
    # WHEN dispatched with 4 Lambda workers
    on_gpu, by_resource, dispatch = dispatch_units(
        groups, {"ml_l": GPU, "ml_m": L1}, inputs, job_concurrency=4
    )
    # THEN the Torch units all run on the GPU worker; the linear ones are split, the GPU worker's
    # backlog counting its start-up and the Torch work (40 units x 0.1 s)
    (split,) = dispatch
    lam, gpu = split.queues
    assert split.stage == "ml_m" and split.n_units == 60
    assert (lam.resource, gpu.resource) == (L1, GPU)
    assert gpu.backlog_s == pytest.approx(2.0 + 4.0) and lam.backlog_s == pytest.approx(0.5)
    assert lam.units_per_s == pytest.approx(8.0) and gpu.units_per_s == pytest.approx(4.0)
    assert lam.units + gpu.units == 60 and gpu.units > 0 and lam.units > gpu.units
    # ... every unit is placed once, on the resource the split names
    assert [u.key for u in by_resource[L1]] == [u.key for u in _units("ml_m", 60)[: lam.units]]
    keys = [u.key for u in on_gpu]
    assert len(keys) == 40 + gpu.units and len(set(keys)) == len(keys)
    # ... and both queues end within a fragment's time of each other
    assert abs(lam.finish_s - gpu.finish_s) < 0.5


def test_a_learner_the_solver_put_on_the_gpu_splits_with_the_cheapest_lambda_size() -> None:
    # GIVEN a one-thread learner: as fast at 3,538 MB as at 1,769 MB, placed on the GPU worker
    groups = {"ml_m": (WorkGroup("ml_m", "s", 20, 100.0), _units("ml_m", 20))}
    inputs = [
        _input("ml_m", L1, 1_000.0, 0.5),
        _input("ml_m", L2, 1_000.0, 0.5, "scaled"),
        _input("ml_m", GPU, 1_000.0, 0.5),
    ]
    _, by_resource, (split,) = dispatch_units(groups, {"ml_m": GPU}, inputs, job_concurrency=1)
    # THEN its Lambda part runs at 1,769 MB (the least USD per unit)
    assert split.queues[0].resource == L1 and set(by_resource) <= {L1}
    assert split.queues[0].usd_per_unit == pytest.approx(
        DEFAULT_PRICES.lambda_cost_usd(1769, 1.0, 0) / 10.0
    )


def test_an_unmeasured_gpu_start_up_takes_the_one_measured_for_the_wave() -> None:
    # GIVEN the GPU worker measured for the Torch learner (3 s) and only the prior for the other
    groups = _torch_and_linear(4, 4, 100.0)
    inputs = [
        _input("ml_l", GPU, 1_000.0, 3.0),
        _input("ml_m", L1, 1_000.0, 0.5),
        _input("ml_m", GPU, 1_000.0, 120.0, "prior"),
    ]
    _, _, (split,) = dispatch_units(groups, {"ml_l": GPU, "ml_m": L1}, inputs, job_concurrency=2)
    # THEN the GPU queue's backlog is the measured 3 s plus the Torch work, not the 120 s prior
    assert split.queues[1].backlog_s == pytest.approx(3.0 + 0.4)


def test_without_the_gpu_worker_nothing_is_dispatched() -> None:
    groups = {"ml_m": (WorkGroup("ml_m", "s", 4, 100.0), _units("ml_m", 4))}
    on_gpu, by_resource, dispatch = dispatch_units(
        groups, {"ml_m": L1}, [_input("ml_m", L1, 1_000.0, 0.5)], job_concurrency=2
    )
    assert on_gpu == [] and dispatch == [] and len(by_resource[L1]) == 4


# ------------------------------------------------------------------------------ plan and record


def _plan() -> tuple[EstimatePlan, np.ndarray]:
    spec = dml.DMLSpec(model="plr", score="partialling out", y_col="y", d_cols=("d",),
                       x_cols=("x1", "x2"), n_folds=5, n_rep=4, seed=3,
                       learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression"})  # fmt: skip
    folds = dml.draw_folds(2000, 5, 4, seed=3)
    plan = EstimatePlan(job_id="dispatch", dml=spec, data_key="", folds_key="", n_obs=2000,
                        n_stages=dml.n_stages(spec), max_concurrency=2, sharding="auto",
                        spec_sha256="")  # fmt: skip
    return plan, folds


def _predict(gpu_enabled: bool = True) -> EstimatePrediction:
    """The plan of :func:`_plan`'s job with both learners measured at 400 rows/s on Lambda (0.3 s
    start-up) and on the GPU worker (1 s start-up)."""
    plan, folds = _plan()
    sigs = {unit_signature(plan.dml, u, 2000, 2) for u in dml.fit_units(plan.dml, 0)}
    history = EwmaThroughput(
        entries=[
            ThroughputEntry(s, r, 400.0, io, 3) for s in sigs for r, io in ((L1, 0.3), (GPU, 1.0))
        ]
    )
    return plan_job(plan, folds, history, stack="s", memory_sizes=[1769],
                    gpu_enabled=gpu_enabled, account_concurrency=10)  # fmt: skip


def test_a_planned_stage_runs_a_learner_on_both_queues_and_records_the_split() -> None:
    # GIVEN both learners measured on Lambda and on the GPU worker (slow enough that the GPU's
    # 1 s start-up is worth paying)
    # WHEN the job is planned on a stack with the GPU worker
    (stage,) = _predict().stages
    # THEN each learner's 20 fits are split between lambda-1769 and the GPU worker, and the
    # decision says how (the fits, the backlogs, V)
    dispatch = stage.placement.dispatch
    assert dispatch is not None and {d.stage for d in dispatch} == {"ml_l", "ml_m"}
    for d in dispatch:
        assert sum(q.units for q in d.queues) == d.n_units == 20
    assert sum(q.units for d in dispatch for q in d.queues if q.name == "gpu") > 0
    assert {s.resource for s in stage.shards} == {L1, GPU}
    # ... the stage's predicted wall covers the GPU queue's end
    ends = [q.finish_s for d in dispatch for q in d.queues if q.name == "gpu" and q.units]
    assert stage.predicted_wall_s >= max(ends)
    # ... and fanfit status shows it
    lines = placement_lines(stage.placement)
    assert any(line.startswith("    dispatch ml_m (drift-plus-penalty, V ") for line in lines)


def test_the_split_travels_in_the_wave_entry_and_an_old_entry_has_none() -> None:
    decision = _predict().stages[0].placement
    entry = WaveEntry(
        stage=0, wave=0, decision=WaveDecision(policy="auto", n_shards=1, max_concurrency=1),
        resource=L1, predicted_samples_per_s={}, startup_s=2.0, map_runs_prefix="p",
        started_at=0.0, ended_at=1.0, memory_mb=1024, peak_rss_mb=100.0, n_gpu_shards=1,
        shards=[], placement=decision,
    )  # fmt: skip
    # WHEN written and read back THEN the split is kept, in the job record's summary too
    again = WaveEntry.parse(entry.to_json_dict())
    assert again == entry and entry.summary().placement == decision
    assert len(entry.to_json_dict()["placement"]["dispatch"]) == 2
    # ... and a decision without one writes no "dispatch"
    no_gpu = _predict(gpu_enabled=False).stages[0].placement
    assert no_gpu.dispatch is None and "dispatch" not in no_gpu.to_json_dict()


# ------------------------------------------------------------------------------ the job's cap


@pytest.mark.parametrize(
    ("cap", "n_units", "shares"),
    [(1, [30, 10], [1, 0]), (2, [30, 10], [1, 1]), (4, [30, 10], [3, 1]), (3, [5, 5, 5, 5], [1, 1, 1, 0]),
     (10, [1], [10]), (5, [10, 20], [2, 3])],
)  # fmt: skip
def test_the_jobs_concurrency_is_shared_between_resources_never_past_it(cap, n_units, shares):
    from fanfit.sched.shards import share_concurrency

    # GIVEN a wave's units on several memory sizes and the job's cap THEN the shares sum to the
    # cap exactly, the resources with the most units first, the rest by largest remainder
    assert share_concurrency(n_units, cap) == shares
    with pytest.raises(InvalidJobError, match="max_concurrency"):
        share_concurrency(n_units, 0)
    with pytest.raises(InvalidJobError, match="at least one unit"):
        share_concurrency([3, 0], 2)


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_a_wave_on_two_memory_sizes_runs_within_the_jobs_cap(cap) -> None:
    from fanfit.jobs.estimate.data import StageContext
    from fanfit.jobs.estimate.wave import Placement, size_placed

    # GIVEN a stage whose ml_l fits the placement put at 1,769 MB and ml_m at 3,538 MB (20 each),
    # both measured, and a job cap (or Dorm partition) of `cap`
    plan, folds = _plan()
    units = dml.fit_units(plan.dml, 0)
    sigs = {u.key: unit_signature(plan.dml, u, 2000, 2) for u in units}
    ctx = StageContext(job_id="cap", stage=0, plan=plan, folds=folds, n_obs=2000, n_features=2,
                       units=units, signatures=sigs)  # fmt: skip
    history = EwmaThroughput(
        entries=[ThroughputEntry(s, r, 400.0, 0.3, 3) for s in set(sigs.values()) for r in (L1, L2)]
    )
    by_resource = {L1: [u for u in units if u.learner == "ml_l"],
                   L2: [u for u in units if u.learner == "ml_m"]}  # fmt: skip
    placement = Placement(gpu_shards=[], lambda_units=units, job_concurrency=cap, partition=None,
                          lambda_resource=L1, by_resource=by_resource)  # fmt: skip
    # WHEN the wave is sized
    sizings = size_placed(ctx, placement, history, account_concurrency=10)
    # THEN its Map runs at most `cap` shards at once over both sizes (before: at least one each,
    # so 2 under a cap of 1); with a cap of 1 the second size's units wait for the next wave
    assert sum(s.decision.max_concurrency for s in sizings) <= cap
    run = {u.key for s in sizings for shard in s.shards for u in shard}
    if cap == 1:
        assert [s.resource for s in sizings] == [L1] and run == {u.key for u in by_resource[L1]}
    else:
        assert {s.resource for s in sizings} == {L1, L2} and run == {u.key for u in units}
