"""fanfit's DoubleML classes on DoubleML objects with float32 columns (the 401(k) Stata file as
pandas reads it).

DoubleML computes in its frame's dtypes (``DoubleMLData.y``/``.x`` float32); fanfit's data travel
as float64, and the jobs of fanfit's DoubleML classes record the dtypes DoubleML would compute in
(:func:`fanfit.client.check.check_doubleml_estimate`, :attr:`fanfit.dml.DMLSpec.dtypes`), which
:func:`fanfit.dml.validate_data` casts them back to, so learners, start values, searches and
scores see DoubleML's arrays. Every other input computes in float64 (test_input_dtypes.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import doubleml
import numpy as np
import pandas as pd
import pytest
from doubleml.plm.datasets import make_plr_CCDDHNR2018
from doubleml_helpers import PartsOnFake, submitted
from sklearn.linear_model import LinearRegression, LogisticRegression

import fanfit
from fanfit.client import EstimateOptions
from fanfit.client.check import check_doubleml_estimate
from fanfit.client.data import doubleml_dtypes
from fanfit.client.doubleml import base as doubleml_base
from fanfit.dml import DMLSpec, draw_folds, estimate_in_process, folds_to_smpls, validate_data
from fanfit.dml.interop import (
    external_predictions,
    predictions_from_arrays,
    predictions_to_arrays,
)
from fanfit.errors import Float32DataWarning, InvalidJobError

TOL = 1e-12
DATA = Path(__file__).resolve().parents[2] / "examples" / "data" / "sipp1991.dta"
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def _doubleml_arrays(data: doubleml.DoubleMLData) -> dict[str, list[np.dtype]]:
    """The dtypes of DoubleML's own arrays, per role (x and d once per treatment)."""
    found: dict[str, list[np.dtype]] = {"y": [data.y.dtype], "d": [], "x": []}
    for col in data.d_cols:
        data.set_x_d(col)
        found["d"].append(data.d.dtype)
        found["x"].append(data.x.dtype)
    if data.z_cols:
        found["z"] = [data.z.dtype]
    for role in ("t", "s"):
        if getattr(data, f"{role}_col", None) is not None:
            found[role] = [getattr(data, role).dtype]
    return found


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 40
    return pd.DataFrame(
        {
            "y32": rng.normal(size=n).astype(np.float32),
            "y64": rng.normal(size=n),
            "yint": rng.integers(0, 9, size=n),
            "d8": rng.integers(0, 2, size=n).astype(np.int8),
            "d32": rng.integers(0, 2, size=n).astype(np.float32),
            "d64": rng.integers(0, 2, size=n).astype(np.float64),
            "x32a": rng.normal(size=n).astype(np.float32),
            "x32b": rng.normal(size=n).astype(np.float32),
            "x64": rng.normal(size=n),
            "x8": rng.integers(0, 50, size=n).astype(np.int8),
            "x16": rng.integers(0, 50, size=n).astype(np.int16),
            "xi32": rng.integers(0, 50, size=n).astype(np.int32),
            "xbool": rng.integers(0, 2, size=n).astype(bool),
            "z32": rng.integers(0, 2, size=n).astype(np.float32),
            "s32": rng.integers(0, 2, size=n).astype(np.float32),
            "t64": rng.integers(0, 2, size=n).astype(np.float64),
        }
    )


@pytest.mark.parametrize(
    ("y", "d", "x", "z", "expected"),
    [
        ("y32", ["d32"], ["x32a", "x32b"], None, {"y": "float32", "d": "float32", "x": "float32"}),
        # the 401(k) file: float32 outcome, int8 treatment, float32 and int8 covariates
        ("y32", ["d8"], ["x32a", "x8"], None, {"y": "float32", "x": "float32"}),
        ("y32", ["d8"], ["x32a", "x16"], ["z32"], {"y": "float32", "x": "float32", "z": "float32"}),
        # mixed float32 / float64 covariates: DoubleML's x is float64
        ("y64", ["d8"], ["x32a", "x64"], None, {}),
        # float32 with int32, or with a bool (pandas: object, scikit-learn: float64)
        ("y64", ["d64"], ["x32a", "xi32"], None, {}),
        ("y64", ["d64"], ["x32a", "xbool"], None, {}),
        # ints only (exact in float64)
        ("yint", ["d8"], ["x8", "x16"], None, {}),
        # two treatments: x is float32 for each (the other treatment among the covariates)
        ("y64", ["d32", "d8"], ["x32a"], None, {"x": "float32"}),
        # ... but not when one treatment is float64 (DoubleML's x for the other is float64)
        ("y64", ["d32", "d64"], ["x32a"], None, {}),
    ],
)
def test_the_dtype_rule_is_doublemls_arrays(y, d, x, z, expected) -> None:
    # GIVEN frames of float32, mixed and int columns, and DoubleML's data object on each
    frame = _frame()
    data = doubleml.DoubleMLData(frame, y_col=y, d_cols=d, x_cols=x, z_cols=z)
    spec = DMLSpec(model="plr", score="partialling out", y_col=y, d_cols=d, x_cols=x, z_cols=z)
    # WHEN fanfit's client derives the dtypes
    dtypes = doubleml_dtypes(frame, spec)
    # THEN it records the roles whose DoubleML arrays are float32 (for every treatment), only
    assert dtypes == expected
    for role, found in _doubleml_arrays(data).items():
        is32 = all(t == np.float32 for t in found)
        assert (dtypes.get(role) == "float32") == is32, (role, found)


def test_the_dtype_rule_covers_the_selection_and_time_columns() -> None:
    # GIVEN SSM data with a float32 selection column, DIDCS data with a float64 time column
    frame = _frame()
    ssm = doubleml.DoubleMLSSMData(frame, y_col="y32", d_cols="d8", x_cols=["x64"], s_col="s32")
    did = doubleml.DoubleMLDIDData(frame, y_col="y32", d_cols="d8", x_cols=["x32a"], t_col="t64")
    ssm_spec = DMLSpec(model="ssm", score="missing-at-random", y_col="y32", d_cols=("d8",),
                       x_cols=("x64",), s_col="s32")  # fmt: skip
    did_spec = DMLSpec(model="didcs", score="observational", y_col="y32", d_cols=("d8",),
                       x_cols=("x32a",), t_col="t64")  # fmt: skip
    # WHEN the dtypes are derived THEN s is float32 as DoubleML's s, t float64 as its t
    assert ssm.s.dtype == np.float32 and did.t.dtype == np.float64
    assert doubleml_dtypes(frame, ssm_spec) == {"y": "float32", "s": "float32"}
    assert doubleml_dtypes(frame, did_spec) == {"y": "float32", "x": "float32"}


def _plr_spec(**kw) -> DMLSpec:
    base = dict(
        model="plr", score="partialling out", y_col="y", d_cols=("d",), x_cols=("X1", "X2"),
        learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression"},
    )  # fmt: skip
    return DMLSpec(**{**base, **kw})


@pytest.mark.parametrize(
    ("dtypes", "match"),
    [
        ({"w": "float32"}, "dtypes names role 'w'"),
        ({"z": "float32"}, "dtypes names role 'z'"),  # the spec has no instrument
        ({"y": "float16"}, r"dtypes\['y'\] must be 'float32' or 'float64'"),
        (["y"], "dtypes must be an object"),
    ],
)
def test_dtypes_are_validated_by_name(dtypes, match: str) -> None:
    # GIVEN a spec naming a role it has no data for, or a dtype fanfit does not compute in
    # WHEN it is validated THEN the error names dtypes
    with pytest.raises(InvalidJobError, match=match):
        _plr_spec(dtypes=dtypes).validate()


def test_dtypes_travel_in_the_spec_and_old_specs_stay_float64() -> None:
    # GIVEN a spec with float32 roles, and a spec dict written before dtypes existed
    spec = _plr_spec(dtypes={"x": "float32", "y": "float32"})
    old = _plr_spec().to_dict()
    # WHEN they go through the job document's dict
    again = DMLSpec.from_dict(spec.to_dict())
    # THEN the dtypes come back; the old one has none (float64), and writes none
    assert again.dtypes == {"x": "float32", "y": "float32"} and again.dtype("d") == "float64"
    assert "dtypes" not in old and DMLSpec.from_dict(old).dtypes is None


def test_plr_on_a_float32_frame_equals_doubleml() -> None:
    # GIVEN a float32 frame from DoubleML's PLR generator, linear learners (which fit in float32
    # on float32 data) and fixed folds, DoubleML fitted on that frame
    np.random.seed(11)
    frame = make_plr_CCDDHNR2018(n_obs=300, dim_x=4, alpha=0.5, return_type="DataFrame")
    frame = frame.astype(np.float32)
    x_cols = [f"X{i}" for i in range(1, 5)]
    folds = draw_folds(len(frame), 3, 2, seed=5)
    data = doubleml.DoubleMLData(frame, y_col="y", d_cols="d", x_cols=x_cols)
    obj = doubleml.DoubleMLPLR(data, LinearRegression(), LinearRegression(), n_folds=3,
                               n_rep=2, draw_sample_splitting=False)  # fmt: skip
    obj.set_sample_splitting(folds_to_smpls(folds))
    obj.fit(store_predictions=True)
    # WHEN fanfit's DoubleML classes check the job on DoubleML's frame and fanfit runs it
    options = EstimateOptions.from_keywords(data=frame, y="y", d="d", x=x_cols, n_folds=3,
                                            n_rep=2, folds=folds, ml_l="LinearRegression",
                                            ml_m="LinearRegression")  # fmt: skip
    checked = check_doubleml_estimate(frame, options)
    res = estimate_in_process(checked.spec, checked.data, checked.folds)
    # THEN the spec records float32 for every role, the uploaded values stay float64
    assert checked.spec.dtypes == {"y": "float32", "d": "float32", "x": "float32"}
    assert checked.values.dtype == np.float64 and checked.data.x.dtype == np.float32
    # AND the learners' predictions are DoubleML's at 1e-12 (fitted on the same float32 arrays)
    for key in ("ml_l", "ml_m"):
        np.testing.assert_allclose(res.predictions[key], obj.predictions[key], rtol=TOL, atol=TOL)
    # AND estimates and standard errors are DoubleML's on these predictions at 1e-12 (its
    # external_predictions, which it scores in float64, as fanfit stores predictions) ...
    ext = doubleml.DoubleMLPLR(data, LinearRegression(), LinearRegression(), n_folds=3, n_rep=2,
                               draw_sample_splitting=False)  # fmt: skip
    ext.set_sample_splitting(folds_to_smpls(folds))
    ext.fit(external_predictions=external_predictions(checked.spec, res.predictions))
    np.testing.assert_allclose(res.all_coef, ext.all_coef, rtol=TOL, atol=0)
    np.testing.assert_allclose(res.all_se, ext.all_se, rtol=TOL, atol=0)
    # ... and its own fit's within float32 precision (1e-6): that one scores LinearRegression's float32 predictions
    # as cross_val_predict returns them, in float32 arithmetic (DoubleML's two paths differ so)
    np.testing.assert_allclose(res.all_coef, obj.all_coef, rtol=1e-6, atol=0)
    # AND on float64 arrays (fanfit before) the predictions differ (the float32 fits differ)
    spec64 = _plr_spec(x_cols=tuple(x_cols), n_folds=3, n_rep=2)
    values = frame[["y", "d", *x_cols]].to_numpy(dtype=np.float64)
    res64 = estimate_in_process(spec64, validate_data(spec64, ["y", "d", *x_cols], values), folds)
    assert not np.allclose(res64.predictions["ml_l"], obj.predictions["ml_l"], rtol=TOL, atol=0)


def _pq_models(frame: pd.DataFrame, folds: np.ndarray, n_rep: int) -> tuple:
    data = doubleml.DoubleMLData(frame, y_col="net_tfa", d_cols="e401", x_cols=X_COLS)
    kw = dict(treatment=1, quantile=0.8, n_folds=3, n_rep=n_rep, normalize_ipw=True)
    ours = fanfit.DoubleMLPQ(data, LogisticRegression(), LogisticRegression(), **kw)
    theirs = doubleml.DoubleMLPQ(data, LogisticRegression(), LogisticRegression(),
                                 draw_sample_splitting=False, **kw)  # fmt: skip
    theirs.set_sample_splitting(folds_to_smpls(folds))
    ours.set_sample_splitting(folds_to_smpls(folds))
    return ours, theirs


@pytest.mark.parametrize("n_rep", [1, 3])
def test_pq_on_the_401k_stata_frame_equals_doubleml(n_rep: int) -> None:
    # GIVEN 2,000 rows of the 401(k) data as pandas reads the Stata file (net_tfa and inc float32,
    # the rest int8), fixed folds, DoubleML's PQ at the 0.8 quantile and fanfit's DoubleMLPQ
    frame = pd.read_stata(DATA).sample(2000, random_state=3).reset_index(drop=True)
    folds = draw_folds(len(frame), 3, n_rep, 42)
    ours, theirs = _pq_models(frame, folds, n_rep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs on the unscaled covariates, as in DoubleML
        theirs.fit(store_predictions=True)
        # WHEN the DoubleML-style class's job is checked on its frame and run in process (one
        # stage per fold with one repetition, two stages and the chain of start values with 3)
        frame = ours._dml_data.data
        options = EstimateOptions.from_keywords(data=frame, **ours.fanfit_options())
        checked = check_doubleml_estimate(frame, options)
        res = estimate_in_process(checked.spec, checked.data, checked.folds)
    # THEN the spec says DoubleML's arrays are float32 for y and x
    assert checked.spec.dtypes == {"y": "float32", "x": "float32"}
    # AND every repetition, standard error and prediction is DoubleML's at 1e-12
    np.testing.assert_allclose(res.all_coef, theirs.all_coef, rtol=TOL, atol=0)
    np.testing.assert_allclose(res.all_se, theirs.all_se, rtol=TOL, atol=0)
    g, m = res.predictions["ml_g"], np.clip(res.predictions["ml_m"], 0.01, 0.99)
    np.testing.assert_allclose(g, theirs.predictions["ml_g"], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(m, theirs.predictions["ml_m"], rtol=TOL, atol=TOL)


def test_the_doubleml_class_on_a_float32_frame_fits_on_doublemls_arrays(monkeypatch) -> None:
    # GIVEN fanfit's DoubleMLPLR and DoubleML's on one float32 frame, linear learners (which
    # predict in float32 there) and the same sample splitting
    np.random.seed(12)
    frame = make_plr_CCDDHNR2018(n_obs=200, dim_x=3, alpha=0.5, return_type="DataFrame")
    data = doubleml.DoubleMLData(frame.astype(np.float32), y_col="y", d_cols="d")
    ours = fanfit.DoubleMLPLR(data, LinearRegression(), LinearRegression(), n_folds=3, n_rep=2)
    theirs = doubleml.DoubleMLPLR(data, LinearRegression(), LinearRegression(), n_folds=3,
                                  n_rep=2, draw_sample_splitting=False)  # fmt: skip
    theirs.set_sample_splitting(ours.smpls)
    # WHEN fanfit's is fitted "on the stack" (the fake one: the job in-process, its predictions
    # stored and read back as the stack does) and DoubleML's in-process, its own way
    monkeypatch.setattr(doubleml_base, "_warned_float32", False)
    with pytest.warns(
        Float32DataWarning, match=r'float32 columns \(d, x, y\).*astype\("float64"\)'
    ):
        ours.fit(client=_FakeClient())
    theirs.fit()
    # AND fitted again, it does not warn again (once per process)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Float32DataWarning)
        ours.fit(client=_FakeClient())
    # THEN the class's check against DoubleML on the job's predictions passed (no ParityError),
    # the job computed in float32 like DoubleML, and the predictions are DoubleML's own at 1e-12
    assert ours.fanfit_job.checked.spec.dtypes == {"y": "float32", "d": "float32", "x": "float32"}
    for key in ("ml_l", "ml_m"):
        np.testing.assert_allclose(ours.predictions[key], theirs.predictions[key], rtol=TOL)
    # AND the estimate is DoubleML's own fit's within 1e-6 (that one scores the float32
    # predictions in float32, its external_predictions in float64)
    np.testing.assert_allclose(ours.all_coef, theirs.all_coef, rtol=1e-6, atol=0)


class _FakeJob:
    """A job run here (fanfit's in-process estimate); its predictions written and read back as
    the stack's Aggregate and the client do (fanfit.dml.interop)."""

    def __init__(self, checked) -> None:
        self.checked = checked
        self.res = estimate_in_process(checked.spec, checked.data, checked.folds)

    def result(self, timeout=None, progress=False):
        r = self.res
        return SimpleNamespace(coef=r.coef, se=r.se, d_cols=list(r.d_cols), execution_arn="arn:f")

    def predictions(self):
        stored = predictions_to_arrays(self.checked.spec.d_cols, self.res.predictions)
        return predictions_from_arrays(stored)


class _FakeClient(PartsOnFake):
    def submit_estimate(self, data, options=None, **keywords):
        return _FakeJob(submitted(data, options, **keywords)[0])
