"""DoubleMLAPO's ``weights`` on fanfit: the score, the spec and data, and the client classes.

GIVEN DoubleML's discrete-treatment data with weights (an array, or DoubleML's dict of
``weights`` and one ``weights_bar`` column per repetition) WHEN fanfit's APO score, aggregate and
in-process fit run on the spec's weight columns, and fanfit.DoubleMLAPO / DoubleMLAPOS are fitted
on the fake stack, THEN the score elements and the aggregate equal DoubleML 0.11.4's at 1e-12;
weights of the wrong type, shape or sign, and weight columns on another model, are refused by name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_irm_data_discrete_treatments  # noqa: E402
from doubleml_helpers import assert_registry_model_is_doublemls, fit_on_folds, ipw_kwargs  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.dml import DMLSpec, validate_data  # noqa: E402
from fanfit.dml.scores.plm_irm import apo_score_elements  # noqa: E402

X_COLS = [f"x{i}" for i in range(5)]
N_REP = 2


def _frame(n_obs: int = 300, seed: int = 3) -> pd.DataFrame:
    raw = make_irm_data_discrete_treatments(n_obs=n_obs, n_levels=3, random_state=seed)
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(raw["x"], columns=X_COLS).assign(y=raw["y"], d=raw["d"])
    df["w"] = rng.uniform(0.2, 2.0, n_obs)
    for r in range(N_REP):
        df[f"wb{r}"] = rng.uniform(0.0, 3.0, n_obs)
    return df


def _spec(bar: bool, **kwargs) -> DMLSpec:
    spec = DMLSpec(
        model="apo", score="APO", y_col="y", d_cols=("d",), x_cols=tuple(X_COLS), n_folds=3,
        n_rep=N_REP, seed=7, treatment_level=1.0, weights_col="w",
        weights_bar_cols=tuple(f"wb{r}" for r in range(N_REP)) if bar else None,
        learners={"ml_g": "LinearRegression", "ml_m": "LogisticRegression"}, **kwargs,
    )  # fmt: skip
    spec.validate()
    return spec


def _doubleml_weights(spec: DMLSpec, df: pd.DataFrame):
    w = df["w"].to_numpy()
    if spec.weights_bar_cols is None:
        return w
    return {"weights": w, "weights_bar": df[list(spec.weights_bar_cols)].to_numpy()}


def _doubleml(spec: DMLSpec, df: pd.DataFrame, folds: np.ndarray):
    obj = dml.DoubleMLAPO(
        dml.DoubleMLData(df, "y", "d", x_cols=X_COLS), spec.learners["ml_g"].build(),
        spec.learners["ml_m"].build(), treatment_level=spec.treatment_level,
        weights=_doubleml_weights(spec, df), **ipw_kwargs(spec),
    )  # fmt: skip
    return fit_on_folds(obj, folds)


@pytest.mark.parametrize(
    ("bar", "normalize_ipw"), [(False, False), (True, False), (True, True)],
    ids=["array", "dict", "dict-normalized"],
)  # fmt: skip
def test_weighted_apo_scores_and_estimate_equal_doublemls(bar, normalize_ipw) -> None:
    # GIVEN a weighted APO spec (weights_col, and weights_bar_cols per repetition for the dict)
    spec = _spec(bar, normalize_ipw=normalize_ipw)
    # WHEN fanfit's score elements and aggregate run on DoubleML's predictions, and fanfit fits
    # THEN they are DoubleML's with the same weights: scores and aggregate at 1e-12
    assert_registry_model_is_doublemls(spec, _frame(), _doubleml)


def test_the_score_without_weights_is_the_unweighted_one() -> None:
    # GIVEN predictions WHEN the score runs with all-ones weights and without THEN bit-for-bit equal
    rng = np.random.default_rng(1)
    y, t = rng.normal(size=50), rng.integers(0, 2, 50).astype(float)
    g, m = rng.normal(size=50), rng.uniform(0.2, 0.8, 50)
    ones = np.ones(50)
    for a, b in zip(apo_score_elements(y, t, g, m), apo_score_elements(y, t, g, m, False, ones)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"model": "irm", "score": "ATE", "treatment_level": None,
       "learners": {"ml_g": "LinearRegression", "ml_m": "LogisticRegression"}},
      "options of model 'apo' only"),
     ({"weights_col": None}, "weights_bar_cols needs it"),
     ({"weights_bar_cols": ("wb0",)}, "one column per repetition: give n_rep=2"),
     ({"weights_bar_cols": ("wb0", "wb0")}, "names a column twice"),
     ({"weights_bar_cols": ("w", "wb1")}, "both weights_col and weights_bar_cols")],
    ids=["other-model", "bar-without-weights", "bar-count", "bar-twice", "same-column"],
)  # fmt: skip
def test_bad_weight_columns_are_named_in_the_spec(changes, message) -> None:
    # GIVEN a spec with weight columns that do not fit WHEN validated THEN the error names them
    base = dict(model="apo", score="APO", y_col="y", d_cols=("d",), x_cols=tuple(X_COLS),
                n_folds=3, n_rep=N_REP, treatment_level=1.0, weights_col="w",
                weights_bar_cols=("wb0", "wb1"),
                learners={"ml_g": "LinearRegression", "ml_m": "LogisticRegression"})  # fmt: skip
    with pytest.raises(errors.InvalidJobError, match="weights") as info:
        DMLSpec(**(base | changes)).validate()
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [("w", -1.0, "Weights column w has 1 negative value"),
     ("wb1", 0.0, "Weights column weights_bar_cols (wb0, wb1) is all zero")],
)  # fmt: skip
def test_bad_weight_values_are_named_in_the_data(column, value, message) -> None:
    # GIVEN a weights column with a negative value, or all-zero weights_bar WHEN the data is
    # validated THEN the error names the column
    df = _frame()
    if value < 0:
        df.loc[3, column] = value
    else:
        df[["wb0", "wb1"]] = 0.0
    with pytest.raises(errors.InvalidDataError) as info:
        validate_data(_spec(True), list(df.columns), df.to_numpy())
    assert message in str(info.value)


def _dml_data(df: pd.DataFrame):
    return dml.DoubleMLData(df[[*X_COLS, "y", "d"]], "y", "d", x_cols=X_COLS)


@pytest.mark.parametrize("bar", [False, True], ids=["array", "dict"])
def test_weighted_doublemlapo_on_the_fake_stack_is_doublemls(bar) -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLAPO with the same weights, data, learners and seed
    df = _frame()
    weights = _doubleml_weights(_spec(bar), df)
    args = (_dml_data(df), LinearRegression(), LogisticRegression())
    np.random.seed(5)
    ours = fanfit.DoubleMLAPO(*args, treatment_level=1, n_folds=3, n_rep=N_REP, weights=weights)
    np.random.seed(5)
    theirs = dml.DoubleMLAPO(*args, treatment_level=1, n_folds=3, n_rep=N_REP, weights=weights)
    client = FakeClient()
    # WHEN fanfit's is fitted on the fake stack (the job's aggregate) and DoubleML's in-process
    ours.fit(client=client)
    theirs.fit()
    # THEN the job got the weights as columns, and its estimate is DoubleML's at 1e-12
    sent = client.submitted[0]
    assert sent["weights_col"] == "_fanfit_weights"
    assert sent["weights_bar_cols"] == (
        ["_fanfit_weights_bar_0", "_fanfit_weights_bar_1"] if bar else None
    )
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=1e-12)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=1e-12)
    np.testing.assert_allclose(ours.fanfit_job.res.coef, theirs.coef, rtol=1e-12)


def test_weighted_doublemlapos_on_the_fake_stack_is_doublemls() -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLAPOS with DoubleML's dict of weights
    df = _frame()
    weights = _doubleml_weights(_spec(True), df)
    args = (_dml_data(df), LinearRegression(), LogisticRegression(), [0, 1, 2])
    np.random.seed(9)
    ours = fanfit.DoubleMLAPOS(*args, n_folds=3, n_rep=N_REP, weights=weights)
    np.random.seed(9)
    theirs = dml.DoubleMLAPOS(*args, n_folds=3, n_rep=N_REP, weights=weights)
    client = FakeClient()
    # WHEN both are fitted
    ours.fit(client=client)
    theirs.fit()
    # THEN every level's job carried the weights, and coef, se and the contrasts are DoubleML's
    assert all(o["weights_col"] == "_fanfit_weights" for o in client.submitted)
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=1e-12)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=1e-12)
    np.testing.assert_allclose(
        ours.causal_contrast(0).ses, theirs.causal_contrast(0).ses, rtol=1e-12
    )


@pytest.mark.parametrize(
    ("weights", "message"),
    [([1.0] * 300, "weights must be a numpy array of shape (300,) or a dict"),
     (np.ones(299), "weights must be a numpy array of shape (300,) (n_obs=300, n_rep=2), got (299,)"),
     (np.ones((300, 1)), "got (300, 1)"),
     ({"weights": np.ones(300)}, "exactly the keys 'weights' and 'weights_bar'"),
     ({"weights": np.ones(300), "weights_bar": np.ones((300, 3))},
      "weights['weights_bar'] must be a numpy array of shape (300, 2)"),
     ({"weights": np.ones(300), "weights_bar": np.ones(300)},
      "weights['weights_bar'] must be a numpy array of shape (300, 2)"),
     (-np.ones(300), "weights must be finite and greater or equal 0"),
     (np.zeros(300), "weights is all zero")],
    ids=["list", "short", "2d", "dict-key", "bar-reps", "bar-1d", "negative", "zero"],
)  # fmt: skip
def test_bad_weights_are_refused_by_name(weights, message) -> None:
    # GIVEN weights of the wrong type, shape or sign WHEN fanfit.DoubleMLAPO or DoubleMLAPOS is
    # built THEN an InvalidJobError names them and the shape expected, before DoubleML sees them
    args = (_dml_data(_frame()), LinearRegression(), LogisticRegression())
    with pytest.raises(errors.InvalidJobError) as info:
        fanfit.DoubleMLAPO(*args, treatment_level=1, n_rep=N_REP, weights=weights)
    assert message in str(info.value)
    with pytest.raises(errors.InvalidJobError):
        fanfit.DoubleMLAPOS(*args, treatment_levels=[0, 1], n_rep=N_REP, weights=weights)


def test_a_data_column_named_like_the_weights_is_refused() -> None:
    # GIVEN data that already has fanfit's weights column WHEN fitted with weights THEN named
    df = _frame()
    data = dml.DoubleMLData(df.assign(_fanfit_weights=1.0), "y", "d", x_cols=X_COLS)
    ours = fanfit.DoubleMLAPO(data, LinearRegression(), LogisticRegression(), treatment_level=1,
                              n_folds=3, weights=np.ones(len(df)))  # fmt: skip
    with pytest.raises(errors.InvalidDataError, match="'_fanfit_weights'"):
        ours.fit(client=FakeClient())


@pytest.mark.parametrize("bar", [False, True], ids=["array", "dict"])
def test_to_doubleml_hands_the_weights_to_doubleml(bar) -> None:
    # GIVEN a weighted APO job's spec, data, folds and predictions (fitted in-process)
    from fanfit.dml import draw_folds, estimate_in_process
    from fanfit.dml.interop import to_doubleml

    spec, df = _spec(bar), _frame()
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(data.n_obs, spec.n_folds, spec.n_rep, spec.seed)
    res = estimate_in_process(spec, data, folds)
    # WHEN handed to DoubleML THEN DoubleML's object has the weights and the job's estimate
    obj = to_doubleml(spec, data, folds, res.predictions, bootstrap=False)
    np.testing.assert_array_equal(obj.weights["weights"], df["w"].to_numpy())  # DoubleML's dict
    assert ("weights_bar" in obj.weights) == bar
    np.testing.assert_allclose(obj.coef, res.coef, rtol=1e-12)
    np.testing.assert_allclose(obj.se, res.se, rtol=1e-12)
