"""DoubleMLSSM (missing at random) through the model registry against DoubleML 0.11.4.

Data from DoubleML's own generator (``make_ssm_data(mar=True)``: outcome ``y`` set to 0 where the
selection indicator ``s`` is 0). DoubleML fits on fanfit's folds; fanfit's scores from DoubleML's
stored predictions must equal DoubleML's ``psi_elements`` at 1e-12, and fanfit's unit-by-unit fit
(the registry's rows, ``d == k`` and ``s == 1`` for ``ml_g_d{k}``, and features, ``(x, d)`` for
``ml_pi``) must give DoubleML's predictions, estimate and losses.
"""

from __future__ import annotations

import warnings

import doubleml as dml
import numpy as np
import pandas as pd
import pytest
from doubleml.irm.datasets import make_ssm_data
from doubleml_helpers import assert_registry_model_is_doublemls, fit_on_folds, ipw_kwargs

from fanfit.dml import (
    DMLSpec,
    draw_folds,
    estimate_in_process,
    fit_units,
    n_stages,
    validate_data,
)
from fanfit.dml.interop import to_doubleml
from fanfit.dml.models import REGISTRY
from fanfit.errors import InvalidDataError, InvalidJobError

X_COLS = [f"X{i}" for i in range(1, 5)]
LEARNERS = {"ml_g": "LinearRegression", "ml_pi": "LogisticRegression", "ml_m": "LogisticRegression"}


def _frame(n_obs: int = 300, seed: int = 3, mar: bool = True) -> pd.DataFrame:
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_ssm_data(n_obs=n_obs, dim_x=len(X_COLS), mar=mar, return_type="DataFrame")


def _spec(**kwargs) -> DMLSpec:
    options = {
        "model": "ssm",
        "score": "missing-at-random",
        "y_col": "y",
        "d_cols": ("d",),
        "x_cols": tuple(X_COLS),
        "s_col": "s",
        "n_folds": 3,
        "n_rep": 2,
        "seed": 7,
        "learners": dict(LEARNERS),
    }
    spec = DMLSpec(**(options | kwargs))
    spec.validate()
    return spec


def _doubleml(spec: DMLSpec, df: pd.DataFrame, folds: np.ndarray):
    z_cols = list(spec.z_cols) or None
    obj = dml.DoubleMLSSM(
        dml.DoubleMLSSMData(df, "y", "d", x_cols=X_COLS, z_cols=z_cols, s_col="s"),
        *(spec.learners[k].build() for k in ("ml_g", "ml_pi", "ml_m")),
        score=spec.score,
        **ipw_kwargs(spec),
    )
    return fit_on_folds(obj, folds)


@pytest.mark.parametrize(
    ("normalize_ipw", "trim"), [(False, 0.01), (True, 0.05)], ids=["plain", "normalized-trim"]
)
def test_ssm_scores_and_estimate_equal_doubleml(normalize_ipw, trim) -> None:
    # GIVEN DoubleML's MAR selection data and one SSM spec, fitted by DoubleML on fanfit folds
    spec = _spec(normalize_ipw=normalize_ipw, trimming_threshold=trim)
    # WHEN fanfit computes the score elements from DoubleML's predictions, aggregates them and
    # fits unit by unit (ml_g_d* on the selected rows of each arm, ml_pi on (x, d))
    # THEN scores and aggregate are DoubleML's at 1e-12, its own fits, estimate and losses at 1e-9
    assert_registry_model_is_doublemls(spec, _frame(), _doubleml)


@pytest.mark.parametrize(
    ("normalize_ipw", "trim"), [(False, 0.01), (True, 0.05)], ids=["plain", "normalized-trim"]
)
def test_ssm_nonignorable_fold_procedure_equals_doubleml(normalize_ipw, trim) -> None:
    # GIVEN DoubleML's nonignorable selection data (instrument z) and an SSM 'nonignorable' spec
    spec = _spec(score="nonignorable", z_cols=("z",), normalize_ipw=normalize_ipw,
                 trimming_threshold=trim)  # fmt: skip
    # WHEN fanfit scores DoubleML's predictions and runs its fold procedure unit by unit (one
    # unit per fold: ml_pi on one half of its training rows, ml_m and ml_g_d* on the other)
    # THEN scores and aggregate are DoubleML's at 1e-12, its own fits, estimate and losses at 1e-9
    assert_registry_model_is_doublemls(spec, _frame(mar=False), _doubleml)
    # AND it is one unit per (repetition, fold), in one stage
    units = fit_units(spec, 0)
    assert n_stages(spec) == 1 and len(units) == spec.n_rep * spec.n_folds
    assert {u.learner for u in units} == {"ml_g_d0"}


def test_ssm_registry_entry_declares_doublemls_nuisances() -> None:
    # GIVEN the registry WHEN SSM's entry is read THEN its fits are DoubleML's (MAR): ml_g on the
    # selected rows of each treatment arm, ml_pi of s on (x, d), ml_m of d on x
    mdef = REGISTRY["ssm"]
    fits = {n.key: n for n in mdef.nuisances(_spec())}
    assert list(fits) == ["ml_g_d0", "ml_g_d1", "ml_pi", "ml_m"]
    assert (fits["ml_g_d0"].rows, fits["ml_g_d0"].also) == (("d", 0.0), (("s", 1.0),))
    assert (fits["ml_g_d1"].rows, fits["ml_g_d1"].also) == (("d", 1.0), (("s", 1.0),))
    assert (fits["ml_pi"].target, fits["ml_pi"].features) == ("s", "xd")
    assert mdef.doubleml_class == "DoubleMLSSM" and mdef.default_score == "missing-at-random"


def test_ssm_needs_s_col_and_other_models_refuse_one() -> None:
    # GIVEN an SSM spec without s_col WHEN validated THEN the error names the option
    with pytest.raises(InvalidJobError, match="needs s_col"):
        _spec(s_col=None)
    # AND instruments under missing at random are refused, naming z_cols
    with pytest.raises(InvalidJobError, match="takes no instruments, but z_cols"):
        _spec(z_cols=("X4",), x_cols=tuple(X_COLS[:3]))
    # AND nonignorable needs exactly one instrument, named by z_cols
    with pytest.raises(InvalidJobError, match="'nonignorable' needs exactly one instrument"):
        _spec(score="nonignorable")
    with pytest.raises(InvalidJobError, match="'nonignorable' needs exactly one instrument"):
        _spec(score="nonignorable", z_cols=("X3", "X4"), x_cols=tuple(X_COLS[:2]))
    # AND refuses cluster columns by name
    with pytest.raises(InvalidJobError, match="'ssm' does not take cluster_cols"):
        _spec(score="nonignorable", z_cols=("X4",), x_cols=tuple(X_COLS[:2]), cluster_cols=("X3",))
    # AND s_col given twice a role is refused
    with pytest.raises(InvalidJobError, match="both x_cols and s_col"):
        _spec(x_cols=(*X_COLS, "s"))
    # AND an IRM spec with s_col is refused naming the option and its model
    with pytest.raises(InvalidJobError, match="s_col is an option of model 'ssm' only"):
        _spec(model="irm", score="ATE", learners={"ml_g": "Ridge", "ml_m": "LogisticRegression"})


def test_ssm_refuses_a_selection_column_that_is_not_binary() -> None:
    # GIVEN data whose selection column holds a 2 WHEN validated THEN the error names s and the row
    df = _frame(n_obs=100)
    df.loc[5, "s"] = 2.0
    with pytest.raises(InvalidDataError, match=r"Column 's' must be binary .* row 5"):
        validate_data(_spec(), list(df.columns), df.to_numpy())
    # AND a missing selection column is named with its role
    with pytest.raises(InvalidDataError, match=r"Column 's' \(s_col\) is not in the data"):
        validate_data(_spec(), list(df.columns[:-1]), df.to_numpy()[:, :-1])


def test_to_doubleml_refuses_ssm_naming_fanfits_class() -> None:
    # GIVEN an SSM job's spec, data, folds and predictions (fanfit's own in-process estimate)
    spec = _spec(n_rep=1)
    df = _frame(n_obs=100)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(data.n_obs, spec.n_folds, spec.n_rep, spec.seed)
    result = estimate_in_process(spec, data, folds)
    # WHEN it is handed to DoubleML, whose DoubleMLSSM takes no external predictions
    # THEN the error says so and names fanfit.DoubleMLSSM
    with pytest.raises(
        InvalidJobError, match=r"takes no external predictions.*fanfit\.DoubleMLSSM"
    ):
        to_doubleml(spec, data, folds, result.predictions)
