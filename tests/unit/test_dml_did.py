"""DoubleMLDID and DoubleMLDIDCS through the model registry, against DoubleML 0.11.4.

Data from DoubleML's own generator (``make_did_SZ2020``: panel, the outcome is the difference
:math:`Y_1 - Y_0`; ``cross_sectional_data=True``: repeated cross-sections with the time column
``t``). DoubleML fits on fanfit's folds; fanfit's scores from DoubleML's stored predictions must
equal DoubleML's ``psi_elements`` at 1e-12, and fanfit's unit-by-unit fit must equal DoubleML's.
"""

from __future__ import annotations

import warnings

import doubleml as dml
import numpy as np
import pandas as pd
import pytest
from doubleml.did.datasets import make_did_SZ2020

from fanfit.dml import (
    DMLSpec,
    aggregate,
    draw_folds,
    estimate_in_process,
    folds_to_smpls,
    prediction_keys,
    score_elements,
    validate_data,
)
from fanfit.dml.interop import to_doubleml
from fanfit.dml.models import REGISTRY
from fanfit.dml.overlap import propensity_overlap
from fanfit.errors import InvalidDataError, InvalidJobError

pytestmark = pytest.mark.filterwarnings(
    "ignore:DoubleMLDIDData is deprecated:FutureWarning",
    "ignore:DoubleMLDIDData is deprecated:DeprecationWarning",
    "ignore:DoubleMLDID.* is deprecated:DeprecationWarning",
)

X_COLS = ["Z1", "Z2", "Z3", "Z4"]
CASES = [(s, n) for s in ("observational", "experimental") for n in (True, False)]


def _frame(model: str, n_obs: int = 300, seed: int = 5, dgp_type: int = 1) -> pd.DataFrame:
    np.random.seed(seed)  # make_did_SZ2020 draws from the global state
    cs = model == "didcs"
    return make_did_SZ2020(
        n_obs=n_obs, dgp_type=dgp_type, cross_sectional_data=cs, return_type="DataFrame"
    )


def _spec(model: str, score: str = "observational", **kwargs) -> DMLSpec:
    learners = {"ml_g": "LinearRegression"}
    if score == "observational":
        learners["ml_m"] = "LogisticRegression"
    options = {
        "model": model,
        "score": score,
        "y_col": "y",
        "d_cols": ("d",),
        "x_cols": tuple(X_COLS),
        "n_folds": 3,
        "n_rep": 2,
        "seed": 7,
        "learners": learners,
    } | ({"t_col": "t"} if model == "didcs" else {})
    spec = DMLSpec(**(options | kwargs))
    spec.validate()
    return spec


def _doubleml(spec: DMLSpec, df: pd.DataFrame, folds: np.ndarray):
    t_col = {"t_col": "t"} if spec.model == "didcs" else {}
    cls = dml.DoubleMLDIDCS if spec.model == "didcs" else dml.DoubleMLDID
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = cls(
            dml.DoubleMLDIDData(df, "y", "d", x_cols=X_COLS, **t_col),
            spec.learners["ml_g"].build(),
            spec.learners["ml_m"].build() if "ml_m" in spec.learners else None,
            n_folds=spec.n_folds,
            n_rep=spec.n_rep,
            score=spec.score,
            in_sample_normalization=spec.in_sample_normalization is not False,
            clipping_threshold=spec.trimming_threshold,
            draw_sample_splitting=False,
        )
        obj.set_sample_splitting(folds_to_smpls(folds))
        obj.fit(store_predictions=True)
    return obj


def _assert_estimates(result, obj, rtol: float) -> None:
    """coef, se and the per-repetition ones of a fanfit result equal the DoubleML object's."""
    for name in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(getattr(result, name), getattr(obj, name), rtol=rtol, atol=0)


@pytest.mark.parametrize("model", ["did", "didcs"])
@pytest.mark.parametrize(("score", "normalization"), CASES)
def test_did_scores_and_estimate_equal_doubleml(model, score, normalization) -> None:
    # GIVEN DoubleML's DID data, fanfit folds and one DID spec fitted by DoubleML
    df = _frame(model)
    spec = _spec(model, score, in_sample_normalization=normalization, trimming_threshold=0.05)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(data.n_obs, spec.n_folds, spec.n_rep, spec.seed)
    obj = _doubleml(spec, df, folds)
    preds = {k: np.asarray(obj.predictions[k], dtype=np.float64) for k in prediction_keys(spec)}
    # WHEN fanfit computes the score elements from DoubleML's predictions and aggregates them
    psi = [score_elements(spec, data, preds, i_rep, 0) for i_rep in range(spec.n_rep)]
    # THEN they are DoubleML's at 1e-12 (psi_elements: (n_obs, n_rep, n_treat))
    for j, name in enumerate(("psi_a", "psi_b")):
        ours_psi = np.stack([p[j] for p in psi], axis=1)
        np.testing.assert_allclose(ours_psi, obj.psi_elements[name][:, :, 0], rtol=1e-12)
    _assert_estimates(aggregate(spec, data, folds, preds), obj, 1e-12)
    # AND fanfit's own fits (unit by unit) give DoubleML's predictions (DoubleML stores the
    # propensities clipped) and estimate
    own = estimate_in_process(spec, data, folds)
    clip = {"ml_m": (spec.trimming_threshold, 1 - spec.trimming_threshold)}
    for key in prediction_keys(spec):
        ours = np.clip(own.predictions[key], *clip.get(key, (-np.inf, np.inf)))
        np.testing.assert_allclose(ours, obj.predictions[key], rtol=1e-9, atol=1e-12, err_msg=key)
    _assert_estimates(own, obj, 1e-9)
    # AND the overlap report has the propensity of the observational score only
    overlap = propensity_overlap(spec, data, own.predictions)
    assert (overlap is None) == (score == "experimental")
    # AND DoubleML refitted on fanfit's predictions (to_doubleml) agrees
    back = to_doubleml(spec, data, folds, own.predictions)
    np.testing.assert_allclose(back.coef, own.coef, rtol=1e-12)
    np.testing.assert_allclose(back.se, own.se, rtol=1e-12)


def test_did_registry_entries_declare_doublemls_nuisances() -> None:
    # GIVEN the registry WHEN the DID entries are read THEN their fits are DoubleML's
    did = {n.key: n for n in REGISTRY["did"].nuisances(_spec("did"))}
    assert list(did) == ["ml_g0", "ml_g1", "ml_m"]
    assert (did["ml_g0"].rows, did["ml_g1"].rows, did["ml_m"].rows) == (
        ("d", 0.0),
        ("d", 1.0),
        None,
    )
    exp = REGISTRY["didcs"].nuisances(_spec("didcs", "experimental"))
    assert [n.key for n in exp] == ["ml_g_d0_t0", "ml_g_d0_t1", "ml_g_d1_t0", "ml_g_d1_t1"]
    assert [(n.rows, n.also) for n in exp][1] == (("d", 0.0), (("t", 1.0),))


def test_didcs_needs_a_time_column_and_other_models_refuse_did_options() -> None:
    # GIVEN a DIDCS spec without t_col WHEN validated THEN the error names the option
    with pytest.raises(InvalidJobError, match="needs t_col"):
        _spec("didcs", t_col=None)
    # AND a DID (panel) or IRM spec with t_col is refused naming the option and its model
    with pytest.raises(InvalidJobError, match="t_col is an option of model 'didcs' only"):
        _spec("did", t_col="t")
    with pytest.raises(InvalidJobError, match="in_sample_normalization is an option of model"):
        _spec("irm", score="ATE", in_sample_normalization=False)
    with pytest.raises(InvalidJobError, match="in_sample_normalization must be true or false"):
        _spec("did", in_sample_normalization="yes")
    # AND the time column may not also be a covariate
    with pytest.raises(InvalidJobError, match="both x_cols and t_col"):
        _spec("didcs", x_cols=("Z1", "t"))


def test_did_data_checks_name_the_column() -> None:
    # GIVEN DIDCS data with a non-binary time column WHEN validated THEN the error names it
    df = _frame("didcs", n_obs=100)
    df["t"] = df["t"] * 2.0
    with pytest.raises(InvalidDataError, match="Column 't' must be binary"):
        validate_data(_spec("didcs"), list(df.columns), df.to_numpy())
    # AND data missing the time column names the option
    with pytest.raises(InvalidDataError, match="Column 't' \\(t_col\\) is not in the data"):
        validate_data(_spec("didcs"), list(df.columns[:-1]), df.to_numpy()[:, :-1])
    # AND a treated group without a post period names the cell
    df = _frame("didcs", n_obs=100)
    df.loc[df["d"] == 1, "t"] = 0.0
    with pytest.raises(InvalidDataError, match="d == 1 and t == 1"):
        validate_data(_spec("didcs"), list(df.columns), df.to_numpy())
    # AND a DID panel with a non-binary treatment is refused
    df = _frame("did", n_obs=100)
    df.loc[0, "d"] = 2.0
    with pytest.raises(InvalidDataError, match="Column 'd' must be binary"):
        validate_data(_spec("did"), list(df.columns), df.to_numpy())
