"""validate_data and DMLData: each bad input is refused with the column or option named."""

from __future__ import annotations

import doubleml as dml
import numpy as np
import pytest

from fanfit.dml import DMLSpec, check_columns, validate_data
from fanfit.errors import InvalidDataError, InvalidLearnerError

X_COLS = ("x0", "x1", "x2", "x3", "x4")


def _spec(model="plr", **kw) -> DMLSpec:
    learners = {
        "plr": {"ml_l": "LinearRegression", "ml_m": "LinearRegression"},
        "irm": {"ml_g": "LinearRegression", "ml_m": "LogisticRegression"},
        "pliv": {
            "ml_l": "LinearRegression",
            "ml_m": "LinearRegression",
            "ml_r": "LinearRegression",
        },
        "iivm": {
            "ml_g": "LinearRegression",
            "ml_m": "LogisticRegression",
            "ml_r": "LogisticRegression",
        },
    }[model]
    args = {
        "model": model,
        "score": {
            "plr": "partialling out",
            "irm": "ATE",
            "pliv": "partialling out",
            "iivm": "LATE",
        }[model],
        "y_col": "y",
        "d_cols": ("d",),
        "x_cols": X_COLS,
        "z_cols": ("z",) if model in ("pliv", "iivm") else (),
        "learners": learners,
    }
    args.update(kw)
    spec = DMLSpec(**args)
    spec.validate()
    return spec


def test_valid_data_gives_float64_arrays_in_spec_order(make_frame) -> None:
    # GIVEN a table whose columns are in another order than the spec's
    df = make_frame("pliv", n_obs=30, n_instr=2)
    spec = _spec("pliv", z_cols=("z2", "z1"), x_cols=("x3", "x0"))
    cols = list(df.columns)[::-1]
    # WHEN validated
    data = validate_data(spec, cols, df[cols].to_numpy())
    # THEN y, d, x, z are float64 (n_obs, k) arrays in the spec's column order
    assert data.n_obs == 30 and data.n_treat == 1
    np.testing.assert_array_equal(data.y, df["y"].to_numpy())
    np.testing.assert_array_equal(data.x, df[["x3", "x0"]].to_numpy())
    np.testing.assert_array_equal(data.z, df[["z2", "z1"]].to_numpy())
    assert data.d.shape == (30, 1) and data.d.dtype == np.float64 and data.x.flags["C_CONTIGUOUS"]


def test_xd_appends_the_other_treatments_as_doubleml_set_x_d(make_frame) -> None:
    # GIVEN three treatments
    df = make_frame("plr", n_obs=20, n_treat=3)
    spec = _spec(d_cols=("d1", "d2", "d3"))
    data = validate_data(spec, list(df.columns), df.to_numpy())
    obj = dml.DoubleMLData(df, "y", ["d1", "d2", "d3"], x_cols=list(X_COLS))
    for j, name in enumerate(spec.d_cols):
        # WHEN DoubleML sets the active treatment
        obj.set_x_d(name)
        # THEN fanfit's covariates for that treatment are DoubleML's x
        np.testing.assert_array_equal(data.xd(j), obj.x)
        np.testing.assert_array_equal(data.d[:, j], obj.d)


def test_missing_column_is_named_with_its_role(make_frame) -> None:
    df = make_frame("plr", n_obs=20)
    spec = _spec(x_cols=("x0", "age"))
    with pytest.raises(InvalidDataError, match=r"Column 'age' \(x_cols\) is not in the data.*'x0'"):
        validate_data(spec, list(df.columns), df.to_numpy())
    with pytest.raises(InvalidDataError, match="'age'"):
        check_columns(spec, list(df.columns))


def test_duplicate_column_names_are_refused() -> None:
    with pytest.raises(InvalidDataError, match="two columns named 'x0'"):
        check_columns(_spec(), ["y", "d", "x0", "x0", "x1", "x2", "x3", "x4"])


@pytest.mark.parametrize(("bad", "word"), [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")])
def test_non_finite_values_name_column_and_count(make_frame, bad, word) -> None:
    # GIVEN three non-finite values in x2
    df = make_frame("plr", n_obs=20)
    values = df.to_numpy().copy()
    j = list(df.columns).index("x2")
    values[[4, 9, 11], j] = bad
    # THEN the error names the column, the count, the kind and the first row
    with pytest.raises(
        InvalidDataError, match=rf"Column 'x2' has 3 non-finite.*{word}.*first at row 4"
    ):
        validate_data(_spec(), list(df.columns), values)


def test_non_finite_in_an_unused_column_is_ignored(make_frame) -> None:
    df = make_frame("plr", n_obs=20)
    values = df.to_numpy().copy()
    values[0, list(df.columns).index("x4")] = np.nan
    data = validate_data(_spec(x_cols=("x0", "x1")), list(df.columns), values)
    assert np.isfinite(data.x).all()


@pytest.mark.parametrize("model", ["irm", "iivm"])
def test_non_binary_treatment_is_refused_for_irm_and_iivm(make_frame, model) -> None:
    df = make_frame(model, n_obs=40)
    df.loc[5, "d"] = 0.5
    with pytest.raises(
        InvalidDataError, match=rf"Column 'd' must be binary.*'{model}'.*row 5 has 0.5 "
    ):
        validate_data(_spec(model), list(df.columns), df.to_numpy())


def test_constant_treatment_is_refused_for_irm(make_frame) -> None:
    df = make_frame("irm", n_obs=40)
    df["d"] = 1.0
    with pytest.raises(InvalidDataError, match="Column 'd' must take both values 0 and 1"):
        validate_data(_spec("irm"), list(df.columns), df.to_numpy())


def test_non_binary_instrument_is_refused_for_iivm(make_frame) -> None:
    df = make_frame("iivm", n_obs=40)
    df.loc[2, "z"] = 2.0
    with pytest.raises(
        InvalidDataError, match=r"Column 'z' must be binary.*instrument.*row 2 has 2 "
    ):
        validate_data(_spec("iivm"), list(df.columns), df.to_numpy())


def test_classifier_ml_m_needs_binary_treatment_in_plr(make_frame) -> None:
    # GIVEN a continuous treatment and a classifier for E[D|X]
    df = make_frame("plr", n_obs=40)
    spec = _spec(learners={"ml_l": "LinearRegression", "ml_m": "LogisticRegression"})
    # THEN the treatment column and the learner are named
    with pytest.raises(
        InvalidLearnerError,
        match=r"Column 'd' must be binary.*ml_m is a classifier \(LogisticRegression\)",
    ):
        validate_data(spec, list(df.columns), df.to_numpy())


@pytest.mark.parametrize("model", ["plr", "irm"])
def test_classifier_outcome_learner_needs_binary_outcome(make_frame, model) -> None:
    df = make_frame(model, n_obs=40)
    name = "ml_l" if model == "plr" else "ml_g"
    learners = dict(_spec(model).learners)
    learners[name] = "LogisticRegression"
    with pytest.raises(
        InvalidLearnerError, match=rf"Column 'y' must be binary.*{name} is a classifier"
    ):
        validate_data(_spec(model, learners=learners), list(df.columns), df.to_numpy())


def test_iv_type_refuses_binary_outcome(make_frame) -> None:
    df = make_frame("plr", n_obs=40, binary_y=True)
    spec = _spec(score="IV-type", learners={"ml_l": "Lasso", "ml_m": "Lasso", "ml_g": "Lasso"})
    with pytest.raises(InvalidDataError, match="'y' is binary.*'IV-type'"):
        validate_data(spec, list(df.columns), df.to_numpy())


def test_more_folds_than_rows_is_refused_naming_n_folds(make_frame) -> None:
    df = make_frame("plr", n_obs=4)
    with pytest.raises(
        InvalidDataError, match=r"n_folds=5 is larger than the number of rows \(4\)"
    ):
        validate_data(_spec(), list(df.columns), df.to_numpy())


def test_shape_mismatch_is_refused(make_frame) -> None:
    df = make_frame("plr", n_obs=10)
    with pytest.raises(InvalidDataError, match="shape"):
        validate_data(_spec(), list(df.columns), df.to_numpy()[:, :-1])
