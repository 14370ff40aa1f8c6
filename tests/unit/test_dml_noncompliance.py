"""IIVM subgroups and one-sided noncompliance (DoubleML's 401(k) design: p401 instrumented by e401).

Without always takers nobody with ``z == 0`` is treated, so ``ml_r`` on the ``z == 0`` rows sees
one class only: DoubleML fails there unless ``subgroups={'always_takers': False}``. fanfit names
that option before anything is uploaded, and with it set equals DoubleML.
"""

from __future__ import annotations

import warnings

import doubleml as dml
import numpy as np
import pandas as pd
import pytest
from doubleml.utils import PSProcessorConfig

from fanfit.dml import (
    DMLSpec,
    draw_folds,
    estimate_in_process,
    folds_to_smpls,
    prediction_keys,
    validate_data,
)
from fanfit.dml.interop import external_predictions
from fanfit.errors import InvalidJobError, OneSidedNoncomplianceError

X_COLS = ["x0", "x1", "x2"]
LEARNERS = dict(ml_g="LinearRegression", ml_m="LogisticRegression", ml_r="LogisticRegression")


def _one_sided_frame(n_obs: int = 600, seed: int = 4, never_takers: bool = True) -> pd.DataFrame:
    """401(k)-like data: eligibility e (z), participation p (d) only when eligible."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, 3))
    e = (rng.uniform(size=n_obs) < 1 / (1 + np.exp(-0.5 * x[:, 0]))).astype(float)
    takes = (0.5 * x[:, 1] + rng.normal(size=n_obs) > 0.0) if never_takers else np.ones(n_obs)
    p = e * takes.astype(float)
    y = 2.0 * p + x[:, 1] + rng.normal(size=n_obs)
    if not never_takers:  # the mirror case: everybody eligible participates, some others too
        p = np.where(e == 1, 1.0, (x[:, 2] + rng.normal(size=n_obs) > 0.5).astype(float))
    return pd.DataFrame(
        {"y": y, "p401": p, "e401": e, **{c: x[:, i] for i, c in enumerate(X_COLS)}}
    )


def _spec(subgroups: dict | None) -> DMLSpec:
    spec = DMLSpec(
        model="iivm", score="LATE", y_col="y", d_cols=("p401",), x_cols=tuple(X_COLS),
        z_cols=("e401",), n_folds=3, seed=2, learners=LEARNERS, subgroups=subgroups,
    )  # fmt: skip
    spec.validate()
    return spec


def test_one_sided_noncompliance_is_refused_naming_the_option() -> None:
    # GIVEN 401(k)-like data without always takers and the default subgroups
    df = _one_sided_frame()
    # WHEN the data are checked (the client's check and Prepare both call validate_data)
    # THEN a named error says which option to set
    with pytest.raises(OneSidedNoncomplianceError, match=r"subgroups=\{'always_takers': False\}"):
        validate_data(_spec(None), list(df.columns), df.to_numpy())


def test_doubleml_itself_fails_there_without_subgroups() -> None:
    # GIVEN the same data in DoubleML with its default subgroups
    df = _one_sided_frame()
    obj = dml.DoubleMLIIVM(
        dml.DoubleMLData(df, "y", "p401", x_cols=X_COLS, z_cols="e401"),
        **{k: _spec(None).learners[k].build() for k in LEARNERS},
        n_folds=3,
    )
    # WHEN / THEN its ml_r fit fails on one class: the failure fanfit's check prevents
    with pytest.raises(ValueError, match="class"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj.fit()


def test_with_subgroups_set_the_example_runs_and_equals_doubleml() -> None:
    # GIVEN subgroups={'always_takers': False} and shared folds
    df = _one_sided_frame()
    subgroups = {"always_takers": False, "never_takers": True}
    spec = _spec(subgroups)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(len(df), 3, 1, 2)
    # WHEN fanfit and DoubleML estimate
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = estimate_in_process(spec, data, folds)
        obj = dml.DoubleMLIIVM(
            dml.DoubleMLData(df, "y", "p401", x_cols=X_COLS, z_cols="e401"),
            **{k: spec.learners[k].build() for k in LEARNERS},
            n_folds=3,
            subgroups=subgroups,
            ps_processor_config=PSProcessorConfig(clipping_threshold=0.01),
        )
        obj.set_sample_splitting(folds_to_smpls(folds))
        obj.fit()
    # THEN ml_r0 is not fitted and the estimate is DoubleML's
    assert "ml_r0" not in prediction_keys(spec)
    np.testing.assert_allclose(result.coef, obj.coef, rtol=1e-9, atol=0)
    np.testing.assert_allclose(result.se, obj.se, rtol=1e-9, atol=0)


def test_missing_never_takers_are_named_too() -> None:
    # GIVEN data where everybody with z == 1 is treated
    df = _one_sided_frame(never_takers=False)
    # WHEN / THEN the error names never_takers
    with pytest.raises(OneSidedNoncomplianceError, match=r"subgroups=\{'never_takers': False\}"):
        validate_data(_spec(None), list(df.columns), df.to_numpy())
    validate_data(
        _spec({"always_takers": True, "never_takers": False}), list(df.columns), df.to_numpy()
    )


@pytest.mark.parametrize(
    ("model", "subgroups", "message"),
    [
        ("plr", {"always_takers": False, "never_takers": True}, "subgroups is an option of model 'iivm' only"),
        ("iivm", {"always_takers": False}, "exactly the keys always_takers and never_takers"),
        ("iivm", {"always_takers": 0, "never_takers": True}, r"subgroups\['always_takers'\] must be true or false"),
    ],
    ids=["plr", "missing-key", "not-bool"],
)  # fmt: skip
def test_bad_subgroups_are_named_errors(model: str, subgroups: dict, message: str) -> None:
    # GIVEN a spec with subgroups that DoubleML would refuse
    learners = (
        LEARNERS if model == "iivm" else dict(ml_l="LinearRegression", ml_m="LinearRegression")
    )
    spec = DMLSpec(
        model=model, score="LATE" if model == "iivm" else "partialling out", y_col="y",
        d_cols=("p401",), x_cols=tuple(X_COLS), z_cols=("e401",) if model == "iivm" else (),
        learners=learners, subgroups=subgroups,
    )  # fmt: skip
    # WHEN / THEN validation names the option
    with pytest.raises(InvalidJobError, match=message):
        spec.validate()


def test_doublemls_401k_iivm_example_runs_with_subgroups_and_equals_doubleml() -> None:
    # GIVEN DoubleML's 401(k) IIVM example: p401 instrumented by e401 on the SIPP 1991 data
    from pathlib import Path

    from fanfit.client.check import check_estimate

    path = Path(__file__).resolve().parents[2] / "examples" / "data" / "sipp1991.dta"
    x_cols = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]
    # (the classifiers on standardised covariates: on the raw ones lbfgs needs its 1,000 iterations)
    logit = ('Pipeline:{"steps": [["scale", {"name": "StandardScaler"}], '
             '["logit", {"name": "LogisticRegression"}]]}')  # fmt: skip
    learners = dict(ml_g="LinearRegression", ml_m=logit, ml_r=logit)
    opts = dict(model="iivm", y="net_tfa", d="p401", z="e401", x=x_cols, n_folds=3, seed=4)
    # WHEN the client checks it as DoubleML's default subgroups would run it
    # THEN it is refused before upload, naming the option
    with pytest.raises(OneSidedNoncomplianceError, match="always_takers"):
        check_estimate(path, **opts, **learners)
    # WHEN subgroups={'always_takers': False} is set
    subgroups = {"always_takers": False, "never_takers": True}
    checked = check_estimate(path, **opts, **learners, subgroups=subgroups)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = estimate_in_process(checked.spec, checked.data)
        # (DoubleML on the file's data in float64: a job from a file computes in float64,
        # whatever the file's float32 columns, as R's DoubleML does)
        df = pd.read_stata(path).astype("float64")
        fitted = []
        for preds in (None, external_predictions(checked.spec, result.predictions)):
            obj = dml.DoubleMLIIVM(
                dml.DoubleMLData(df, "net_tfa", "p401", x_cols=x_cols, z_cols="e401"),
                **{k: checked.spec.learners[k].build() for k in learners},
                n_folds=3,
                subgroups=subgroups,
            )
            obj.set_sample_splitting(folds_to_smpls(draw_folds(len(df), 3, 1, 4)))
            fitted.append(obj.fit(store_predictions=True, external_predictions=preds))
    own, ext = fitted
    # THEN the example runs in float64: the learners' predictions are those of DoubleML's own
    # fit, and the estimate is DoubleML's on them (external_predictions) at 1e-9
    assert checked.spec.dtypes is None and checked.data.y.dtype == np.float64
    for key in ("ml_g0", "ml_g1", "ml_m"):
        np.testing.assert_allclose(result.predictions[key], own.predictions[key], rtol=1e-12)
    np.testing.assert_allclose(result.coef, ext.coef, rtol=1e-9, atol=0)
    np.testing.assert_allclose(result.se, ext.se, rtol=1e-9, atol=0)
    # AND its own fit's at 1e-9
    np.testing.assert_allclose(result.coef, own.coef, rtol=1e-9, atol=0)


def test_to_doubleml_keeps_the_subgroups() -> None:
    # GIVEN fanfit's fit of one-sided data with always_takers=False
    from fanfit.dml.interop import to_doubleml

    df = _one_sided_frame()
    spec = _spec({"always_takers": False, "never_takers": True})
    data = validate_data(spec, list(df.columns), df.to_numpy())
    folds = draw_folds(len(df), 3, 1, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = estimate_in_process(spec, data, folds)
        # WHEN it is handed to DoubleML
        obj = to_doubleml(spec, data, folds, result.predictions)
    # THEN DoubleML has the same subgroups and fanfit's estimate
    assert obj.subgroups == {"always_takers": False, "never_takers": True}
    np.testing.assert_allclose(obj.coef, result.coef, rtol=1e-9, atol=0)
    np.testing.assert_allclose(obj.se, result.se, rtol=1e-9, atol=0)
