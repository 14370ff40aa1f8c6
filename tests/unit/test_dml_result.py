"""DMLResult: multiplier bootstrap and joint intervals against DoubleML, confint, serialization."""

from __future__ import annotations

import json
import warnings

import doubleml as dml
import numpy as np
import pytest
from sklearn.linear_model import LinearRegression

from fanfit.dml import (
    DMLResult,
    DMLSpec,
    draw_folds,
    estimate_in_process,
    folds_to_smpls,
    validate_data,
)
from fanfit.errors import InvalidJobError

X_COLS = [f"x{i}" for i in range(5)]


@pytest.fixture(scope="module")
def pair(make_frame):
    # GIVEN a PLR with two treatments and three repetitions, fitted by fanfit and by DoubleML on shared folds
    df = make_frame("plr", n_obs=200, n_treat=2, seed=3)
    spec = DMLSpec(
        model="plr",
        score="partialling out",
        y_col="y",
        d_cols=("d1", "d2"),
        x_cols=tuple(X_COLS),
        n_rep=3,
        seed=5,
        learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression"},
    )
    folds = draw_folds(len(df), spec.n_folds, spec.n_rep, spec.seed)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    result = estimate_in_process(spec, data, folds)
    obj = dml.DoubleMLPLR(
        dml.DoubleMLData(df, "y", ["d1", "d2"], x_cols=X_COLS),
        LinearRegression(),
        LinearRegression(),
        n_rep=3,
    )
    obj.set_sample_splitting(folds_to_smpls(folds))
    obj.fit()
    return spec, data, folds, result, obj


@pytest.mark.parametrize("method", ["normal", "Bayes", "wild"])
def test_bootstrap_and_joint_ci_equal_doubleml_with_same_seed(pair, method) -> None:
    spec, _, _, result, obj = pair
    # WHEN both bootstrap with the same RandomState seed
    np.random.seed(1234)
    obj.bootstrap(method=method, n_rep_boot=300)
    result.bootstrap(method, 300, seed=1234)
    # THEN the bootstrapped t-statistics and the joint intervals are DoubleML's
    np.testing.assert_allclose(result.boot_t_stat, obj.boot_t_stat, rtol=1e-12, atol=1e-15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = obj.confint(joint=True, level=0.9).to_numpy()
    np.testing.assert_allclose(result.confint(joint=True, level=0.9), theirs, rtol=1e-12)
    assert result.boot_method == method and result.n_rep_boot == 300


def test_spec_boot_method_bootstraps_in_aggregate_with_spec_seed(pair, make_frame) -> None:
    spec, data, folds, _, obj = pair
    # GIVEN the same spec asking for a Bayes bootstrap
    spec_boot = DMLSpec.from_dict({**spec.to_dict(), "boot_method": "Bayes", "n_rep_boot": 200})
    # WHEN fanfit estimates, and DoubleML bootstraps after np.random.seed(spec.seed)
    result = estimate_in_process(spec_boot, data, folds)
    np.random.seed(spec.seed)
    obj.bootstrap(method="Bayes", n_rep_boot=200)
    # THEN the joint 95% intervals agree and appear in the JSON result
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = obj.confint(joint=True).to_numpy()
    np.testing.assert_allclose(result.confint(joint=True), theirs, rtol=1e-12)
    out = result.to_dict()
    assert out["boot_method"] == "Bayes" and out["n_rep_boot"] == 200
    np.testing.assert_allclose(out["ci_joint_95"]["d2"], theirs[1], rtol=1e-12)


def test_joint_ci_is_wider_than_pointwise(pair) -> None:
    _, _, _, result, _ = pair
    # WHEN a joint interval is computed for two coefficients
    result.bootstrap("normal", 500, seed=0)
    joint, pointwise = result.confint(joint=True), result.confint()
    # THEN it covers the pointwise one (the max-|t| critical value exceeds 1.96 with two coefficients)
    assert np.all(joint[:, 0] < pointwise[:, 0]) and np.all(joint[:, 1] > pointwise[:, 1])


def test_pointwise_confint_equals_doubleml_for_levels(pair) -> None:
    _, _, _, result, obj = pair
    for level in (0.9, 0.95, 0.99):
        # WHEN/THEN the pointwise interval is DoubleML's at every level
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = obj.confint(level=level).to_numpy()
        np.testing.assert_allclose(result.confint(level=level), theirs, rtol=1e-12)


def test_joint_ci_without_bootstrap_raises(make_frame) -> None:
    # GIVEN a fresh result without bootstrap
    df = make_frame("plr", n_obs=60)
    spec = DMLSpec(
        "plr",
        "partialling out",
        "y",
        ("d",),
        tuple(X_COLS),
        n_folds=3,
        learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression"},
    )
    result = estimate_in_process(spec, validate_data(spec, list(df.columns), df.to_numpy()))
    # WHEN/THEN a joint interval is refused with a hint, and so are bad levels and methods
    with pytest.raises(InvalidJobError, match="bootstrap"):
        result.confint(joint=True)
    with pytest.raises(InvalidJobError, match="level"):
        result.confint(level=1.5)
    with pytest.raises(InvalidJobError, match="method"):
        result.bootstrap("poisson")
    with pytest.raises(InvalidJobError, match="n_rep_boot"):
        result.bootstrap("normal", 0)


def test_to_dict_is_json_and_round_trips(pair) -> None:
    _, _, _, result, obj = pair
    result.bootstrap("wild", 100, seed=9)
    # WHEN the result is written as JSON and read back
    out = result.to_dict()
    text = json.dumps(out, allow_nan=False)
    back = DMLResult.from_dict(json.loads(text))
    # THEN it has the documented keys, per-treatment maps, and the same numbers
    for key in ("coef", "se", "t_stat", "pval", "ci_95", "all_coef", "all_se", "ci_joint_95"):
        assert list(out[key]) == ["d1", "d2"], key
    assert out["n_obs"] == 200 and out["n_folds"] == 5 and out["n_rep"] == 3
    assert (
        out["model"] == "plr" and out["score"] == "partialling out" and out["boot_method"] == "wild"
    )
    assert len(out["all_coef"]["d1"]) == 3
    np.testing.assert_array_equal(back.coef, result.coef)
    np.testing.assert_array_equal(back.all_se, result.all_se)
    np.testing.assert_array_equal(back.confint(), result.confint())
    np.testing.assert_array_equal(back.confint(joint=True), result.confint(joint=True))
    assert back.to_dict() == out
    np.testing.assert_allclose(out["coef"]["d1"], obj.coef[0], rtol=1e-12)
    # a result read from JSON has no score values to bootstrap again
    with pytest.raises(InvalidJobError, match="psi"):
        back.bootstrap("normal", 10, seed=0)


def test_from_dict_rejects_malformed() -> None:
    with pytest.raises(InvalidJobError, match="Not a DML result"):
        DMLResult.from_dict({"coef": {"d": 1.0}})


def test_nuisance_loss_round_trips_through_json(pair) -> None:
    _, _, _, result, _ = pair
    # GIVEN a result with losses, one of them NaN (a learner without target rows)
    result.nuisance_loss = {"ml_l": np.array([[0.5, 0.25]] * 3), "ml_m": np.full((3, 2), np.nan)}
    result.nuisance_metric = {"ml_l": "RMSE", "ml_m": "Log Loss"}
    # WHEN it is written as strict JSON and read back
    out = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    back = DMLResult.from_dict(out)
    # THEN the losses keep DoubleML's (n_rep, n_coefs) layout, NaN as null in the JSON
    assert out["nuisance_loss"]["ml_l"] == [[0.5, 0.25]] * 3
    assert out["nuisance_loss"]["ml_m"] == [[None, None]] * 3
    assert back.nuisance_loss is not None and back.nuisance_loss["ml_l"].shape == (3, 2)
    assert np.isnan(back.nuisance_loss["ml_m"]).all()
    assert back.nuisance_metric == {"ml_l": "RMSE", "ml_m": "Log Loss"}
    # ... and a result written before losses existed reads without them
    old = {k: v for k, v in out.items() if not k.startswith("nuisance")}
    assert DMLResult.from_dict(old).nuisance_loss is None
    result.nuisance_loss = result.nuisance_metric = None
