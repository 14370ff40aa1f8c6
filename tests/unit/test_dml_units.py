"""Fit units: plan (stages, units, keys), seeds, stage inputs, fit_predict, prediction checks."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fanfit.dml import (
    DMLSpec,
    FitUnit,
    aggregate,
    check_preds,
    draw_folds,
    estimate_in_process,
    fit_predict,
    fit_units,
    init_preds,
    n_stages,
    prediction_keys,
    put_predictions,
    stage_inputs,
    unit_seed,
    validate_data,
)
from fanfit.dml.scores.plm_irm import plr_theta_initial
from fanfit.errors import InvalidFoldsError, InvalidJobError

X_COLS = ("x0", "x1", "x2", "x3", "x4")


def _spec(model="plr", score=None, **kw) -> DMLSpec:
    learners = {
        ("plr", "partialling out"): {"ml_l": "LinearRegression", "ml_m": "LinearRegression"},
        ("plr", "IV-type"): {
            "ml_l": "LinearRegression",
            "ml_m": "LinearRegression",
            "ml_g": "LinearRegression",
        },
        ("irm", "ATE"): {"ml_g": "LinearRegression", "ml_m": "LogisticRegression"},
        ("pliv", "partialling out"): {"ml_l": "Ridge", "ml_m": "Ridge", "ml_r": "Ridge"},
        ("iivm", "LATE"): {
            "ml_g": "Ridge",
            "ml_m": "LogisticRegression",
            "ml_r": "LogisticRegression",
        },
    }
    score = (
        score
        or {"plr": "partialling out", "irm": "ATE", "pliv": "partialling out", "iivm": "LATE"}[
            model
        ]
    )
    args = {
        "model": model,
        "score": score,
        "y_col": "y",
        "d_cols": ("d",),
        "x_cols": X_COLS,
        "z_cols": ("z",) if model in ("pliv", "iivm") else (),
        "learners": learners[(model, score)],
    }
    args.update(kw)
    spec = DMLSpec(**args)
    spec.validate()
    return spec


def test_stages_and_prediction_keys_follow_doubleml_params_names() -> None:
    # THEN each model's keys are DoubleML's external_predictions keys, and only IV-type has a second stage
    assert prediction_keys(_spec()) == ("ml_l", "ml_m")
    iv = _spec(score="IV-type")
    assert (
        n_stages(iv) == 2
        and prediction_keys(iv, 0) == ("ml_l", "ml_m")
        and prediction_keys(iv, 1) == ("ml_g",)
    )
    assert prediction_keys(_spec("irm")) == ("ml_g0", "ml_g1", "ml_m")
    assert prediction_keys(_spec("iivm")) == ("ml_g0", "ml_g1", "ml_m", "ml_r0", "ml_r1")
    assert prediction_keys(_spec("pliv", z_cols=("z1", "z2"))) == (
        "ml_l",
        "ml_r",
        "ml_m_z1",
        "ml_m_z2",
    )
    assert n_stages(_spec("pliv")) == 1 and n_stages(_spec("irm")) == 1


def test_fit_units_cover_every_combination_once_in_a_fixed_order() -> None:
    # GIVEN two treatments, three repetitions, four folds
    spec = _spec(d_cols=("d1", "d2"), n_rep=3, n_folds=4)
    # WHEN the stage-0 units are listed twice
    units = fit_units(spec, 0)
    # THEN they are every (treatment, repetition, learner, fold) once, with unique keys, deterministically
    assert units == fit_units(spec, 0)
    assert len(units) == 2 * 3 * 2 * 4 == len({u.key for u in units})
    assert units[0] == FitUnit(0, 0, 0, 0, "ml_l") and units[-1] == FitUnit(0, 1, 2, 3, "ml_m")
    with pytest.raises(InvalidJobError, match="Stage 1 does not exist"):
        fit_units(spec, 1)


def test_fit_unit_serializes_and_has_a_readable_key() -> None:
    unit = FitUnit(stage=0, i_treat=0, i_rep=1, i_fold=3, learner="ml_l")
    assert unit.key == "s0-t0-r1-f3-ml_l"
    assert FitUnit.from_key(unit.key) == unit
    assert FitUnit.from_dict(json.loads(json.dumps(unit.to_dict()))) == unit
    assert FitUnit.from_key("s1-t2-r0-f4-ml_m_z1").learner == "ml_m_z1"
    with pytest.raises(InvalidJobError):
        FitUnit.from_key("t0-r1")
    with pytest.raises(InvalidJobError):
        FitUnit.from_dict({"stage": 0})


def test_unit_seed_is_deterministic_distinct_and_in_range() -> None:
    # GIVEN all units of a spec
    units = fit_units(_spec("iivm", n_rep=3), 0)
    seeds = [unit_seed(42, u) for u in units]
    # THEN the seeds are reproducible, pairwise distinct, valid random_state values, and depend on the job seed
    assert seeds == [unit_seed(42, u) for u in units]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**32 for s in seeds)
    assert unit_seed(43, units[0]) != seeds[0]
    assert unit_seed(0, FitUnit(0, 0, 0, 0, "ml_l")) != unit_seed(0, FitUnit(0, 0, 0, 0, "ml_m"))


def test_learner_without_random_state_gets_the_unit_seed(make_frame) -> None:
    # GIVEN a random forest with no random_state in its params
    df = make_frame("plr", n_obs=80)
    spec = _spec(
        learners={"ml_l": 'RandomForestRegressor:{"n_estimators": 4}', "ml_m": "LinearRegression"}
    )
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(80, 5, 1, seed=0)
    unit_a, unit_b = FitUnit(0, 0, 0, 0, "ml_l"), FitUnit(0, 0, 0, 1, "ml_l")
    # WHEN a unit is fitted twice, and equals a forest seeded with unit_seed by hand
    first = fit_predict(spec, unit_a, data, folds)
    again = fit_predict(spec, unit_a, data, folds)
    forest = spec.learners["ml_l"].build(random_state=unit_seed(spec.seed, unit_a))
    train, test = folds[:, 0] != 0, folds[:, 0] == 0
    by_hand = forest.fit(data.x[train], data.y[train]).predict(data.x[test])
    # THEN the fits are reproducible and use the derived seed
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, by_hand)
    assert forest.random_state == unit_seed(spec.seed, unit_a) != unit_seed(spec.seed, unit_b)


def test_irm_g0_is_fitted_on_untreated_training_rows_only(make_frame) -> None:
    # GIVEN an IRM and its ml_g0 unit
    df = make_frame("irm", n_obs=120)
    spec = _spec("irm")
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(120, 5, 1, seed=2)
    unit = FitUnit(0, 0, 0, 2, "ml_g0")
    # WHEN fitted
    got = fit_predict(spec, unit, data, folds)
    # THEN it is a linear regression on the d == 0 rows outside fold 2, predicting all of fold 2
    from sklearn.linear_model import LinearRegression

    train = (folds[:, 0] != 2) & (data.d[:, 0] == 0)
    test = folds[:, 0] == 2
    expected = LinearRegression().fit(data.x[train], data.y[train]).predict(data.x[test])
    np.testing.assert_array_equal(got, expected)
    assert got.shape == (int(test.sum()),)


def test_no_training_rows_is_a_folds_error(make_frame) -> None:
    # GIVEN an IRM where all untreated rows sit in fold 0
    df = make_frame("irm", n_obs=60)
    spec = _spec("irm", n_folds=2)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = (data.d[:, 0] == 1).astype(np.int64).reshape(-1, 1)
    # THEN ml_g0 of fold 0 has no untreated training rows left to learn from
    with pytest.raises(InvalidFoldsError, match="no training rows outside fold 0"):
        fit_predict(spec, FitUnit(0, 0, 0, 0, "ml_g0"), data, folds)


def test_stage_inputs_give_theta_initial_as_json(make_frame) -> None:
    # GIVEN the stage-0 predictions of an IV-type PLR with two repetitions
    df = make_frame("plr", n_obs=100)
    spec = _spec(score="IV-type", n_rep=2)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(100, 5, 2, seed=1)
    preds = init_preds(spec, 100, stage=0)
    for unit in fit_units(spec, 0):
        put_predictions(preds, unit, folds, fit_predict(spec, unit, data, folds))
    # WHEN stage inputs are computed
    assert stage_inputs(spec, 0, data, folds, preds) == {}
    inputs = stage_inputs(spec, 1, data, folds, preds)
    # THEN they are JSON-safe floats per treatment and repetition, the partialling-out estimates
    assert json.loads(json.dumps(inputs)) == inputs
    expected = plr_theta_initial(
        data.y, data.d[:, 0], preds["ml_l"][:, 1, 0], preds["ml_m"][:, 1, 0]
    )
    assert inputs["theta_initial"][0][1] == expected
    # and a stage-1 unit refuses to run without them
    with pytest.raises(InvalidJobError, match="theta_initial"):
        fit_predict(spec, FitUnit(1, 0, 0, 0, "ml_g"), data, folds, {})


def test_aggregate_refuses_missing_or_non_finite_predictions(make_frame) -> None:
    df = make_frame("plr", n_obs=50)
    spec = _spec()
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(50, 5, 1, seed=0)
    preds = init_preds(spec, 50)
    # WHEN predictions are missing a key, or a unit never ran
    with pytest.raises(InvalidJobError, match="'ml_m' are missing"):
        aggregate(spec, data, folds, {"ml_l": preds["ml_l"]})
    units = fit_units(spec, 0)
    for unit in units[:-1]:
        put_predictions(preds, unit, folds, fit_predict(spec, unit, data, folds))
    # THEN the error names the learner, the treatment and the repetition
    with pytest.raises(
        InvalidJobError, match=r"'ml_m' are not finite.*treatment 'd', repetition 0"
    ):
        check_preds(spec, 50, preds)
    with pytest.raises(InvalidJobError, match="shape"):
        check_preds(spec, 50, {"ml_l": np.zeros((50, 2, 1)), "ml_m": np.zeros((50, 1, 1))})
    with pytest.raises(InvalidJobError, match="predictions for"):
        put_predictions(preds, units[0], folds, np.zeros(3))


def test_estimate_in_process_draws_folds_from_the_seed_when_none_given(make_frame) -> None:
    # GIVEN no folds
    df = make_frame("plr", n_obs=60)
    spec = _spec(seed=11)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    # WHEN estimating with and without the explicitly drawn folds
    implicit = estimate_in_process(spec, data)
    explicit = estimate_in_process(spec, data, draw_folds(60, 5, 1, seed=11))
    # THEN the results are identical and the effect is near its true value 0.5
    np.testing.assert_array_equal(implicit.coef, explicit.coef)
    assert abs(implicit.coef[0] - 0.5) < 4 * implicit.se[0]


def test_library_runs_without_pandas_and_doubleml(tmp_path) -> None:
    # GIVEN an interpreter where pandas, pyarrow, statsmodels and doubleml cannot be imported (as on Lambda)
    script = tmp_path / "no_pandas.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys

            class Block:
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] in ("pandas", "pyarrow", "statsmodels", "doubleml"):
                        raise ModuleNotFoundError(name)

            sys.meta_path.insert(0, Block())
            import numpy as np
            from fanfit.dml import DMLSpec, estimate_in_process, validate_data

            v = np.random.default_rng(0).normal(size=(60, 4))
            v[:, 1] = v[:, 1] > 0
            spec = DMLSpec("irm", "ATE", "y", ("d",), ("x0", "x1"), n_folds=3, boot_method="wild", n_rep_boot=10,
                           learners={"ml_g": "LinearRegression", "ml_m": "LogisticRegression"})
            out = estimate_in_process(spec, validate_data(spec, ["y", "d", "x0", "x1"], v)).to_dict()
            assert set(out["ci_joint_95"]) == {"d"}
            assert not [m for m in sys.modules if m.split(".")[0] in ("pandas", "doubleml")]
            print("ok")
            """
        )
    )
    # WHEN an estimate runs there
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    # THEN it succeeds without importing them
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
