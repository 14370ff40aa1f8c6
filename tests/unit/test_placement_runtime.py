"""Placement at run time (issue 14, item 1): profiles from the throughput table, the objective
(deadline, budget, the default 5%), the Torch-to-GPU outcome, the documents, the options and the
status lines."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import numpy as np
import pytest

from fanfit import cli, dml
from fanfit.cli import main
from fanfit.client.options import EstimateOptions, check_budget, check_deadline
from fanfit.errors import InvalidDocumentError, InvalidJobError
from fanfit.jobs.documents.estimate import (
    EstimatePlan,
    EstimatePrediction,
    EstimateSpec,
    PlacementDecision,
    WaveDecision,
    WaveEntry,
)
from fanfit.jobs.estimate.data import unit_signature
from fanfit.jobs.estimate.wave import plan_job, plan_placement
from fanfit.progress.renderers import placement_lines
from fanfit.sched.placement import ResourceProfile, StageProfile, evaluate_choice
from fanfit.sched.profiles import (
    GPU_STARTUP_PRIOR_S,
    PRIOR_ROWS_PER_S,
    Objective,
    WorkGroup,
    choose_placement,
    wave_profiles,
)
from fanfit.sched.resources import crossfit_memory_sizes
from fanfit.sched.throughput import EwmaThroughput, ThroughputEntry

L1, L2, L6, GPU = "lambda-1769", "lambda-3538", "lambda-10240", "gpu:g4dn.xlarge"


@pytest.fixture(autouse=True)
def _gpu_type(monkeypatch):
    monkeypatch.setenv("FANFIT_GPU_INSTANCE_TYPE", "g4dn.xlarge")


def _history(*entries: tuple[str, str, float, float]) -> EwmaThroughput:
    return EwmaThroughput(entries=[ThroughputEntry(s, r, x, io, 3) for s, r, x, io in entries])


# ------------------------------------------------------------------------------ profiles


def test_profiles_take_measured_figures_then_scaled_ones_then_the_prior() -> None:
    # GIVEN a table with ml_l measured at 1,769 MB (20,000 rows/s, 0.5 s overhead), ml_m unmeasured
    history = _history(("sig-l", L1, 20_000.0, 0.5))
    known = {(e.signature, e.resource) for e in history.entries}
    groups = [WorkGroup("ml_l", "sig-l", 10, 1_000.0), WorkGroup("ml_m", "sig-m", 10, 500.0)]
    # WHEN the wave's profiles are built on two sizes and the GPU worker
    profiles, inputs = wave_profiles(
        groups, [L1, L2, GPU], history.predict, history.predict_io, lambda_startup_s=2.0,
        measured=lambda s, r: (s, r) in known,
    )  # fmt: skip
    got = {(i.stage, i.resource): i for i in inputs}
    # THEN ml_l at 1,769 MB is the measurement, in units/s (rows/s over rows per unit) ...
    assert got["ml_l", L1].source == "measured" and got["ml_l", L1].startup_s == 0.5
    assert profiles[0].resources[L1] == ResourceProfile(20.0, startup_s=0.5)
    # ... at 3,538 MB scaled from it (one thread: no faster), with the overhead measured at
    # 1,769 MB (not the default 2 s: an unmeasured size must not look faster)
    assert got["ml_l", L2].source == "scaled" and got["ml_l", L2].rows_per_s == 20_000.0
    assert got["ml_l", L2].startup_s == 0.5
    assert got["ml_m", L2].startup_s == 2.0
    # ... on the GPU worker the 1-vCPU figure with the GPU's prior start-up
    assert got["ml_l", GPU].source == "prior" and got["ml_l", GPU].rows_per_s == 20_000.0
    assert got["ml_l", GPU].startup_s == GPU_STARTUP_PRIOR_S
    # ... and ml_m, never measured, the prior everywhere
    assert {got["ml_m", r].source for r in (L1, L2, GPU)} == {"prior"}
    assert profiles[1].resources[L1].samples_per_s == PRIOR_ROWS_PER_S / 500.0
    assert [p.n_samples for p in profiles] == [10, 10]


def test_a_learner_that_cannot_run_on_lambda_has_no_lambda_profile() -> None:
    groups = [WorkGroup("ml_l", "sig-t", 4, 800.0, lambda_ok=False)]
    history = EwmaThroughput()
    # GIVEN a Torch learner WHEN the GPU worker is offered THEN its only profile is the GPU's
    profiles, _ = wave_profiles(
        groups, [L1, GPU], history.predict, history.predict_io, lambda_startup_s=2.0
    )
    assert set(profiles[0].resources) == {GPU}
    # WHEN it is not THEN no placement exists, and the error says how to get one
    with pytest.raises(InvalidJobError, match="ml_l cannot run on Lambda.*EnableGpuWorker=true"):
        wave_profiles(groups, [L1], history.predict, history.predict_io, lambda_startup_s=2.0)


# ------------------------------------------------------------------------------ objective


def _stage(l2: float = 5.8, l1: float = 1.0) -> StageProfile:
    """8 fits on one worker, 1 s start-up: ``l1`` fits/s at 1,769 MB, ``l2`` at 3,538 MB and 6 at
    10,240 MB (the fastest)."""
    return StageProfile("ml_l", 8, {
        L1: ResourceProfile(l1, startup_s=1.0),
        L2: ResourceProfile(l2, startup_s=1.0),
        L6: ResourceProfile(6.0, startup_s=1.0),
    })  # fmt: skip


#: Costs rise with speed: 1,769 MB at 2 fits/s (5 s), 3,538 MB at 3 (3.7 s), 10,240 MB (2.3 s).
RISING = {"l1": 2.0, "l2": 3.0}


def _choose(objective: Objective, **speeds: float) -> tuple[str, bool]:
    chosen = choose_placement([_stage(**speeds)], objective, max_workers=1)
    return chosen.placement.stages[0].resource, chosen.met


def test_the_default_is_the_least_cost_within_5_percent_of_the_fastest_plan() -> None:
    t = {r: evaluate_choice(_stage(), r, 1).seconds for r in (L1, L2, L6)}
    assert t[L6] < t[L2] <= 1.05 * t[L6] < t[L1]
    # GIVEN 3,538 MB 2% slower than 10,240 MB and cheaper THEN the default takes it ...
    assert _choose(Objective()) == (L2, True)
    # ... and with no slack the fastest
    assert _choose(Objective(slack=0.0)) == (L6, True)


def test_a_deadline_takes_the_least_cost_that_meets_it() -> None:
    cost = {r: evaluate_choice(_stage(**RISING), r, 1).cost_usd for r in (L1, L2, L6)}
    assert cost[L1] < cost[L2] < cost[L6]
    # GIVEN a deadline every plan meets THEN the cheapest (1,769 MB, 5 s)
    assert _choose(Objective(deadline_s=6.0), **RISING) == (L1, True)
    # GIVEN one only the faster sizes meet THEN the cheaper of them
    assert _choose(Objective(deadline_s=4.0), **RISING) == (L2, True)
    # GIVEN one no plan meets THEN the fastest, flagged
    assert _choose(Objective(deadline_s=1.0), **RISING) == (L6, False)


def test_a_budget_takes_the_least_time_within_it() -> None:
    cost = {r: evaluate_choice(_stage(**RISING), r, 1).cost_usd for r in (L1, L2, L6)}
    # GIVEN a budget that buys the fastest THEN the fastest
    assert _choose(Objective(budget_usd=cost[L6] * 1.01), **RISING) == (L6, True)
    # GIVEN one that does not THEN the fastest plan it buys
    assert _choose(Objective(budget_usd=cost[L2]), **RISING) == (L2, True)
    # GIVEN one below every plan THEN the cheapest, flagged
    assert _choose(Objective(budget_usd=cost[L1] / 2), **RISING) == (L1, False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"deadline_s": 10.0, "budget_usd": 1.0}, "not both"), ({"deadline_s": -1.0}, "deadline"),
     ({"budget_usd": float("nan")}, "budget")],
)  # fmt: skip
def test_an_objective_refuses_bad_bounds(kwargs, match) -> None:
    with pytest.raises(InvalidJobError, match=match):
        Objective(**kwargs)


# ------------------------------------------------------------------------------ Schedule's plan


def test_torch_goes_to_the_gpu_because_lambda_is_infeasible_and_sklearn_to_the_cheapest_size():
    # GIVEN a wave with a Torch learner (no Lambda profile) and a scikit-learn one, nothing measured
    groups = [
        WorkGroup("ml_l", "sig-torch", 4, 800.0, lambda_ok=False),
        WorkGroup("ml_m", "sig-lin", 4, 800.0),
    ]
    # WHEN Schedule's planning places it on three sizes and the GPU worker
    choice, decision = plan_placement(
        groups, EwmaThroughput(), memory_sizes=[1769, 3538, 10240], gpu_enabled=True,
        job_concurrency=8,
    )  # fmt: skip
    placed = {s.stage: s.resource for s in choice.placement.stages}
    # THEN the Torch learner runs on the GPU worker, the linear one at 1,769 MB (one thread: more
    # memory is no faster, only dearer)
    assert placed == {"ml_l": GPU, "ml_m": L1}
    # ... and the decision records the objective, the inputs and the prediction
    assert decision.objective == "default" and decision.met
    assert decision.resources == [L1, L2, "lambda-10240", GPU]
    assert {(i.stage, i.resource) for i in decision.inputs} >= {("ml_l", GPU), ("ml_m", L2)}
    assert not any(i.stage == "ml_l" and i.resource.startswith("lambda") for i in decision.inputs)
    assert decision.predicted_wall_s == pytest.approx(choice.placement.total_s)
    assert decision.predicted_cost_usd > 0


def test_a_batched_torch_learner_is_planned_at_the_batch_it_will_run_in() -> None:
    # GIVEN a Torch learner measured on the GPU worker at 100 fits to a batch: 80,000 rows/s
    history = EwmaThroughput(
        entries=[ThroughputEntry("sig-torch", GPU, 80_000.0, 5.0, 3, fits_per_batch=100.0)]
    )
    rates = {}
    for n_units in (10, 100, 500):
        group = WorkGroup("ml_l", "sig-torch", n_units, 800.0, lambda_ok=False, batched=True)
        # WHEN a wave of 10, 100 or 500 of its units is planned
        choice, decision = plan_placement(
            [group], history, memory_sizes=[1769], gpu_enabled=True, job_concurrency=8
        )
        (gpu_input,) = [i for i in decision.inputs if i.resource == GPU]
        rates[n_units] = gpu_input.rows_per_s
        # THEN the GPU stage takes the start-up plus the units' rows at that rate
        (stage,) = choice.placement.stages
        assert stage.resource == GPU
        assert stage.seconds == pytest.approx(5.0 + n_units * 800.0 / rates[n_units])
    # AND the rate is the batch's: a tenth at 10 fits (one batch of 10 takes a batch's time),
    # the measured one at 100 and at 500 (no faster than measured)
    assert rates == {10: pytest.approx(8_000.0), 100: 80_000.0, 500: 80_000.0}
    # AND an unbatched group's figure is the table's as it stands
    _, plain = plan_placement(
        [WorkGroup("ml_l", "sig-torch", 10, 800.0, lambda_ok=False)], history,
        memory_sizes=[1769], gpu_enabled=True, job_concurrency=8,
    )  # fmt: skip
    assert [i.rows_per_s for i in plain.inputs if i.resource == GPU] == [80_000.0]


def test_a_measured_size_is_kept_when_the_others_would_be_no_faster() -> None:
    # GIVEN a one-thread learner measured at 1,769 MB with a 4 s overhead per shard (a cold local
    # stack), nothing at the other sizes
    history = _history(("sig", L1, 2_000.0, 4.0))
    choice, _ = plan_placement(
        [WorkGroup("ml_l", "sig", 4, 100.0)], history, memory_sizes=[1769, 3538, 10240],
        gpu_enabled=False, job_concurrency=4,
    )  # fmt: skip
    # THEN it stays at 1,769 MB (a larger size would be as fast and dearer)
    assert choice.placement.stages[0].resource == L1


def test_measured_figures_change_the_plan() -> None:
    # GIVEN a multi-threaded learner measured 5x faster at 10,240 MB than at 1,769 MB
    history = _history(("sig", L1, 1_000.0, 0.2), ("sig", "lambda-10240", 5_000.0, 0.2))
    groups = [WorkGroup("ml_l", "sig", 20, 1_000.0)]
    choice, decision = plan_placement(
        groups, history, memory_sizes=[1769, 10240], gpu_enabled=False, job_concurrency=2
    )
    # THEN the default objective takes 10,240 MB (1,769 MB would be 5x slower)
    assert choice.placement.stages[0].resource == "lambda-10240"
    assert {i.source for i in decision.inputs} == {"measured"}


def test_the_stack_sizes_come_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("FANFIT_CROSSFIT_MEMORY_SIZES", "1769,3538,3538")
    assert crossfit_memory_sizes() == [1769, 3538]
    monkeypatch.delenv("FANFIT_CROSSFIT_MEMORY_SIZES")
    assert crossfit_memory_sizes(default_mb=2048) == [2048]
    with pytest.raises(InvalidJobError, match="CrossFitMemorySizes"):
        crossfit_memory_sizes("1769,99999")


# ------------------------------------------------------------------------------ documents


def _decision() -> PlacementDecision:
    _, decision = plan_placement(
        [WorkGroup("ml_l", "s", 2, 100.0)], EwmaThroughput(), memory_sizes=[1769],
        gpu_enabled=False, job_concurrency=2, objective=Objective(deadline_s=600.0),
    )  # fmt: skip
    return decision


def test_the_decision_travels_in_the_wave_entry_and_its_summary() -> None:
    entry = WaveEntry(
        stage=0, wave=0, decision=WaveDecision(policy="auto", n_shards=1, max_concurrency=1),
        resource=L1, predicted_samples_per_s={}, startup_s=2.0, map_runs_prefix="p",
        started_at=0.0, ended_at=1.0, memory_mb=1024, peak_rss_mb=100.0, n_gpu_shards=0,
        shards=[], placement=_decision(),
    )  # fmt: skip
    # WHEN written and read back THEN it is the same, and the job record's summary holds it
    again = WaveEntry.parse(entry.to_json_dict())
    assert again == entry and entry.summary().placement == entry.placement
    assert entry.to_json_dict()["placement"]["deadline_s"] == 600.0
    assert "budget_usd" not in entry.to_json_dict()["placement"]
    # ... and an entry written before placement has none, and writes none
    old = {k: v for k, v in entry.to_json_dict().items() if k != "placement"}
    assert (
        WaveEntry.parse(old).placement is None
        and "placement" not in WaveEntry.parse(old).to_json_dict()
    )


@pytest.mark.parametrize("field", ["deadline_s", "budget_usd"])
@pytest.mark.parametrize("value", [0, -1, "inf"])
def test_the_spec_refuses_a_bad_deadline_or_budget(field, value) -> None:
    with pytest.raises(InvalidDocumentError, match=field):
        EstimateSpec.parse({"dml": {}, "data_key": "data/" + "a" * 64 + ".npz", field: value})


def test_status_lines_show_the_decision() -> None:
    lines = placement_lines(_decision())
    assert lines[0].startswith("placement (least cost within a deadline of 600 s): predicted ")
    assert "offered lambda-1769" in lines[0]
    assert lines[1].startswith("    ml_l on lambda-1769: ")
    assert lines[2].startswith("    input ml_l lambda-1769: 10,000 rows/s, start-up 2.00 s (prior)")


# ------------------------------------------------------------------------------ options


def test_the_options_check_deadline_and_budget() -> None:
    base = dict(
        data="x.csv", y="y", d="d", x=["x"], ml_l="LinearRegression", ml_m="LinearRegression"
    )
    EstimateOptions(deadline=60, **base).check()
    with pytest.raises(InvalidJobError, match="^deadline must be a finite number > 0"):
        EstimateOptions(deadline=0, **base).check()
    with pytest.raises(InvalidJobError, match="^budget must be a number of US dollars"):
        EstimateOptions(budget="cheap", **base).check()
    with pytest.raises(InvalidJobError, match="give one of them, not both"):
        EstimateOptions(deadline=60, budget=1, **base).check()
    assert check_deadline("90", "--deadline") == 90.0 and check_budget(None) is None


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--deadline", "-5"], "--deadline must be a finite number > 0"),
     (["--budget", "nan"], "--budget must be a finite number > 0"),
     (["--deadline", "60", "--budget", "1"], "--deadline and --budget")],
)  # fmt: skip
def test_the_cli_names_a_bad_deadline_or_budget(flags, message, no_aws, capsys) -> None:
    argv = ["estimate", "--data", "x.csv", "--y", "y", "--d", "d", "--x", "x",
            "--ml-l", "LinearRegression", "--ml-m", "LinearRegression", *flags, "--dry-run"]  # fmt: skip
    assert main(argv) == 2
    assert f"InvalidJobError: {message}" in capsys.readouterr().err


# ------------------------------------------------------------------------------ --plan-only


def _plan(sharding: str = "auto", **extra: Any) -> tuple[EstimatePlan, np.ndarray]:
    spec = dml.DMLSpec(model="plr", score="partialling out", y_col="y", d_cols=("d",),
                       x_cols=("x1", "x2"), n_folds=2, n_rep=2, seed=3,
                       learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression"})  # fmt: skip
    folds = dml.draw_folds(200, 2, 2, seed=3)
    plan = EstimatePlan(job_id="plan-only", dml=spec, data_key="", folds_key="", n_obs=200,
                        n_stages=dml.n_stages(spec), max_concurrency=4, sharding=sharding,
                        spec_sha256="", **extra)  # fmt: skip
    return plan, folds


def _predict(history: EwmaThroughput, **extra: Any) -> EstimatePrediction:
    plan, folds = _plan(**extra)
    return plan_job(plan, folds, history, stack="s", memory_sizes=[1769, 3538],
                    gpu_enabled=False, account_concurrency=10)  # fmt: skip


def test_plan_only_is_schedules_own_plan_of_every_stage() -> None:
    # GIVEN no history WHEN a PLR job is planned THEN its 8 fits are placed at 1,769 MB, the
    # first wave a probe, with a predicted time and cost
    cold = _predict(EwmaThroughput())
    (stage,) = cold.stages
    assert stage.n_units == 8 and {s.resource for s in stage.placement.stages} == {L1}
    assert [s.resource for s in stage.shards] == [L1] and stage.shards[0].probe
    assert cold.predicted_wall_s == stage.placement.predicted_wall_s > 0
    assert cold.predicted_cost_usd == stage.placement.predicted_cost_usd > 0
    # GIVEN the learners measured (the signatures Schedule would look up) THEN no probe, and the
    # measured figures are the inputs
    plan, folds = _plan()
    n_features = 2
    sigs = {unit_signature(plan.dml, u, 200, n_features) for u in dml.fit_units(plan.dml, 0)}
    warm = _predict(_history(*((s, L1, 5_000.0, 0.3) for s in sigs)))
    assert not warm.stages[0].shards[0].probe
    # ... and the predicted wall is the sizing's makespan of the shards as cut
    makespan = warm.stages[0].shards[0].predicted_makespan_s
    assert (
        makespan is not None
        and warm.predicted_wall_s == warm.stages[0].predicted_wall_s == makespan
    )
    assert {i.source for i in warm.stages[0].placement.inputs if i.resource == L1} == {"measured"}
    # ... and a deadline is carried into the decision
    assert _predict(EwmaThroughput(), deadline_s=60.0).stages[0].placement.objective == "deadline"


def test_plan_only_prints_lines_or_json(monkeypatch, capsys) -> None:
    prediction = _predict(EwmaThroughput())

    class _Client:
        def plan_estimate(self, data: Any, *, options: Any) -> EstimatePrediction:
            assert options.deadline == 90.0
            return prediction

    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(_Client()))
    argv = ["estimate", "--data", "x.csv", "--y", "y", "--d", "d", "--x", "x",
            "--ml-l", "LinearRegression", "--ml-m", "LinearRegression", "--deadline", "90",
            "--plan-only"]  # fmt: skip
    # WHEN --plan-only runs THEN it prints the placement, the shards and the two predictions
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("plan on stack s: CrossFit sizes 1769, 3538 MB, GPU worker off")
    assert any(line.startswith("        ml_l on lambda-1769: ") for line in out)
    assert any(line.startswith("    shards on lambda-1769: ") for line in out)
    assert out[-2] == f"predicted_wall_s: {prediction.predicted_wall_s:.2f}"
    assert out[-1] == f"predicted_cost_usd: {prediction.predicted_cost_usd:.6f}"
    # ... and with --output json the document
    assert main([*argv, "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert EstimatePrediction.parse(doc) == prediction
    assert set(doc) >= {"predicted_wall_s", "predicted_cost_usd", "stages"}
