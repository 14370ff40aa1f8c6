"""PQ on a float32 outcome (the 401(k) Stata file as pandas reads it) equals DoubleML 0.11.4.

DoubleML starts PQ's preliminary IPW searches from ``np.quantile`` of the outcome and widens their
brackets from its minimum and maximum in the outcome's own dtype; fanfit's data travel as float64,
so the spec records the dtype (``DMLSpec.y_dtype``) and the fold procedures compute in it.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import doubleml as dml
import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from fanfit.client import check_estimate
from fanfit.dml import DMLSpec, draw_folds, estimate_in_process, folds_to_smpls, validate_data
from fanfit.errors import InvalidJobError

DATA = Path(__file__).resolve().parents[2] / "examples" / "data" / "sipp1991.dta"
X_COLS = ("age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown")
N_REP = 3


def _spec(**kw) -> DMLSpec:
    return DMLSpec(
        model="pq", score="PQ", y_col="net_tfa", d_cols=("e401",), x_cols=X_COLS, n_folds=5,
        n_rep=N_REP, seed=42, normalize_ipw=True, treatment=1, quantile=0.8,
        learners={"ml_g": "LogisticRegression", "ml_m": "LogisticRegression"}, **kw,
    )  # fmt: skip


def test_pq_on_a_float32_outcome_equals_doubleml_in_every_repetition() -> None:
    # GIVEN the 401(k) data as pandas reads the Stata file (net_tfa float32), fixed folds and
    # DoubleML's PQ at the 0.8 quantile over 3 repetitions (each starts from the last one's mean)
    frame = pd.read_stata(DATA)
    assert frame["net_tfa"].dtype == np.float32
    folds = draw_folds(len(frame), 5, N_REP, 42)
    data = dml.DoubleMLData(frame, y_col="net_tfa", d_cols="e401", x_cols=list(X_COLS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs on the unscaled covariates, as in DoubleML
        obj = dml.DoubleMLPQ(
            data, LogisticRegression(), LogisticRegression(), treatment=1, quantile=0.8,
            n_folds=5, n_rep=N_REP, draw_sample_splitting=False, normalize_ipw=True,
        )  # fmt: skip
        obj.set_sample_splitting(folds_to_smpls(folds))
        obj.fit()
        cols = ["net_tfa", "e401", *X_COLS]
        values = frame[cols].to_numpy(dtype=np.float64)
        # WHEN fanfit runs it with the outcome's dtype recorded, and without
        spec32, spec64 = _spec(y_dtype="float32"), _spec()
        res32 = estimate_in_process(spec32, validate_data(spec32, cols, values), folds)
        res64 = estimate_in_process(spec64, validate_data(spec64, cols, values), folds)
    # THEN in float32 every repetition is DoubleML's
    np.testing.assert_allclose(res32.all_coef, obj.all_coef, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res32.all_se, obj.all_se, rtol=1e-9, atol=1e-9)
    # AND in float64 the chain of start values drifts by the third repetition (what y_dtype fixes)
    assert not np.allclose(res64.all_coef, obj.all_coef, rtol=1e-9, atol=1e-9)


def test_the_client_records_a_float32_outcome_for_the_quantile_models_only() -> None:
    # GIVEN a frame whose outcome is float32
    frame = pd.read_stata(DATA).sample(400, random_state=0)
    common = dict(y="net_tfa", d="e401", x=list(X_COLS), n_folds=2, seed=1)
    # WHEN a PQ job and a PLR job are checked on it
    pq = check_estimate(
        frame, model="pq", treatment=1, quantiles=0.5, ml_g="LogisticRegression",
        ml_m="LogisticRegression", **common,
    )  # fmt: skip
    plr = check_estimate(
        frame, model="plr", ml_l="LinearRegression", ml_m="LinearRegression", **common
    )
    # THEN PQ's spec says float32 (and keeps it through the job document), PLR's says nothing
    assert pq.spec.y_dtype == "float32"
    assert DMLSpec.from_dict(pq.spec.to_dict()).y_dtype == "float32"
    assert plr.spec.y_dtype is None and "y_dtype" not in plr.spec.to_dict()


def test_an_unknown_outcome_dtype_is_refused_by_name() -> None:
    # GIVEN a spec naming an outcome dtype fanfit does not compute in
    # WHEN it is validated THEN the error names y_dtype
    with pytest.raises(InvalidJobError, match="y_dtype"):
        _spec(y_dtype="float16").validate()
