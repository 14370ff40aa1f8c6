"""Given predictions on a spec (:mod:`fanfit.dml.external`): DMLSpec.external_predictions_cols,
the units left out, and the given columns read into the predictions before any stage."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from fanfit.dml import DMLSpec, estimate_in_process, fit_units, n_stages, validate_data
from fanfit.dml.folds import draw_folds
from fanfit.errors import InvalidJobError

X = ("x0", "x1")


def _spec(given=None, **overrides) -> DMLSpec:
    base = {
        "model": "plr", "score": "IV-type", "y_col": "y", "d_cols": ("d",), "x_cols": X,
        "learners": {"ml_l": "LinearRegression", "ml_m": "DummyRegressor", "ml_g": "Ridge"},
        "n_folds": 3, "n_rep": 2, "external_predictions_cols": given,
    }  # fmt: skip
    base.update(overrides)
    return DMLSpec(**base)


def test_the_given_nuisances_units_are_left_out_and_their_columns_read() -> None:
    spec = _spec({"ml_m": {"d": ["m0", "m1"]}})
    spec.validate()
    # stage 0 fits ml_l only; stage 1 (ml_g) is untouched
    assert {u.learner for u in fit_units(spec, 0)} == {"ml_l"}
    assert len(fit_units(spec, 1)) == 3 * 2
    assert spec.used_cols[-2:] == ("m0", "m1")
    again = DMLSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again.external_predictions_cols == spec.external_predictions_cols


def test_the_estimate_uses_the_given_predictions(make_plr_frame) -> None:
    # GIVEN ml_m's out-of-fold predictions from a fit of it, as columns
    frame = make_plr_frame(300, seed=4)
    x_cols = ("x1", "x2", "x3")
    plain = _spec(x_cols=x_cols, learners={"ml_l": "LinearRegression", "ml_m": "Ridge",
                                           "ml_g": "Ridge"})  # fmt: skip
    data = validate_data(plain, list(frame.columns), frame.to_numpy())
    folds = draw_folds(300, 3, 2, 0)
    full = estimate_in_process(plain, data, folds)
    for r in range(2):
        frame[f"m{r}"] = full.predictions["ml_m"][:, r, 0]
    given = _spec({"ml_m": {"d": ["m0", "m1"]}}, x_cols=x_cols)
    # WHEN the spec with them is estimated THEN the estimate is the full fit's
    res = estimate_in_process(
        given, validate_data(given, list(frame.columns), frame.to_numpy()), folds
    )
    np.testing.assert_allclose(res.coef, full.coef, rtol=1e-12)
    np.testing.assert_allclose(res.se, full.se, rtol=1e-12)
    assert sum(len(fit_units(given, s)) for s in range(n_stages(given))) == 12


@pytest.mark.parametrize(
    ("given", "match"),
    [
        ({"ml_x": {"d": ["a", "b"]}}, r"names 'ml_x'; model 'plr'.*predicts ml_l, ml_m, ml_g"),
        ({"ml_m": {"t": ["a", "b"]}}, r"names treatment 't'"),
        ({"ml_m": {"d": ["a"]}}, r"n_rep=2 column names"),
        ({"ml_m": {"d": "ab"}}, r"n_rep=2 column names"),
        ({"ml_m": {"d": ["x0", "b"]}}, r"names column\(s\) x0, which the job also reads"),
        ({"ml_m": {}}, r"non-empty object"),
        (["ml_m"], r"must be an object"),
    ],
)
def test_malformed_external_predictions_are_named(given, match) -> None:
    with pytest.raises(InvalidJobError, match=match):
        _spec(given).validate()


def test_a_fold_procedure_whose_doubleml_class_takes_none_takes_none() -> None:
    # CVaR (DoubleMLCVAR takes none); PQ and LPQ take them (test_quantile_external_predictions.py)
    spec = DMLSpec(model="cvar", score="CVaR", y_col="y", d_cols=("d",), x_cols=X, treatment=1,
                   quantile=0.5, learners={"ml_g": "LinearRegression",
                                           "ml_m": "LogisticRegression"},
                   external_predictions_cols={"ml_m": {"d": ["a"]}})  # fmt: skip
    with pytest.raises(InvalidJobError, match="takes no external predictions"):
        spec.validate()


def _iv_type_plr_fit(seed: int, folds_seed: int):
    """DoubleML's IV-type PLR on 200 rows of its generator, linear learners, 3 x 2 given folds,
    fitted: ``(data frame, DoubleMLData, folds, smpls, the fitted model)``."""
    doubleml = pytest.importorskip("doubleml")
    from doubleml.plm.datasets import make_plr_CCDDHNR2018
    from sklearn.linear_model import LinearRegression

    from fanfit import dml

    np.random.seed(seed)
    data = make_plr_CCDDHNR2018(n_obs=200, dim_x=4, return_type="DataFrame")
    obj = doubleml.DoubleMLData(data, "y", "d")
    folds = draw_folds(200, 3, 2, folds_seed)
    smpls = dml.folds_to_smpls(folds)
    lin = LinearRegression()
    first = doubleml.DoubleMLPLR(obj, lin, lin, lin, n_folds=3, n_rep=2, score="IV-type",
                                 draw_sample_splitting=False)  # fmt: skip
    first.set_sample_splitting(smpls)
    first.fit(store_predictions=True)
    return data, obj, folds, smpls, first


def test_the_steps_on_moto_fit_only_the_others_and_equal_doublemls_refit(moto_stack) -> None:
    # GIVEN DoubleML's IV-type PLR, its ml_m predictions, and its refit with them
    doubleml = pytest.importorskip("doubleml")
    from doubleml.utils import DMLDummyRegressor
    from pipeline_steps import run_estimate
    from sklearn.linear_model import LinearRegression

    data, obj, folds, smpls, first = _iv_type_plr_fit(5, 9)
    lin = LinearRegression()
    given = first.predictions["ml_m"][:, :, 0]
    refit = doubleml.DoubleMLPLR(obj, lin, DMLDummyRegressor(), lin, n_folds=3, n_rep=2,
                                 score="IV-type", draw_sample_splitting=False)  # fmt: skip
    refit.set_sample_splitting(smpls)
    refit.fit(external_predictions={"d": {"ml_m": given}})
    frame = data.assign(m0=given[:, 0], m1=given[:, 1])
    spec = _spec({"ml_m": {"d": ["m0", "m1"]}}, x_cols=tuple(obj.x_cols),
                 learners={"ml_l": "LinearRegression", "ml_m": "DummyRegressor",
                           "ml_g": "LinearRegression"})  # fmt: skip
    with moto_stack():
        # WHEN Prepare, Schedule, CrossFit and Aggregate run it
        _, planned, result = run_estimate(list(frame.columns), frame.to_numpy(), spec, folds, "ext")
    # THEN stage 0 fitted ml_l only, stage 1 ml_g, and the estimate is DoubleML's refit
    assert [p.n_units for p in planned] == [6, 6]
    np.testing.assert_allclose(result["all_coef"]["d"], refit.all_coef[0], rtol=1e-9)
    np.testing.assert_allclose(result["all_se"]["d"], refit.all_se[0], rtol=1e-9)


def test_a_stage_without_units_records_an_empty_schedule_and_the_job_ends(moto_stack) -> None:
    # GIVEN DoubleML's IV-type PLR with both of stage 0's nuisances given (ml_l and ml_m): stage 0
    # has no unit to fit, stage 1 fits ml_g
    doubleml = pytest.importorskip("doubleml")
    import boto3
    from doubleml.utils import DMLDummyRegressor
    from pipeline_steps import run_estimate
    from sklearn.linear_model import LinearRegression

    from fanfit import storage
    from fanfit.progress import ProgressTracker

    data, obj, folds, smpls, first = _iv_type_plr_fit(6, 11)
    lin = LinearRegression()
    ml_l, ml_m = first.predictions["ml_l"][:, :, 0], first.predictions["ml_m"][:, :, 0]
    refit = doubleml.DoubleMLPLR(obj, DMLDummyRegressor(), DMLDummyRegressor(), lin, n_folds=3,
                                 n_rep=2, score="IV-type", draw_sample_splitting=False)  # fmt: skip
    refit.set_sample_splitting(smpls)
    refit.fit(external_predictions={"d": {"ml_l": ml_l, "ml_m": ml_m}})
    frame = data.assign(l0=ml_l[:, 0], l1=ml_l[:, 1], m0=ml_m[:, 0], m1=ml_m[:, 1])
    spec = _spec({"ml_l": {"d": ["l0", "l1"]}, "ml_m": {"d": ["m0", "m1"]}},
                 x_cols=tuple(obj.x_cols),
                 learners={"ml_l": "DummyRegressor", "ml_m": "DummyRegressor",
                           "ml_g": "LinearRegression"})  # fmt: skip
    with moto_stack():
        # WHEN Prepare, Schedule, CrossFit and Aggregate run it
        store, planned, result = run_estimate(
            list(frame.columns), frame.to_numpy(), spec, folds, "ext-empty"
        )
        record = storage.JobRecords("fanfit-jobs", boto3.client("dynamodb")).get("ext-empty")
        schedules = [store.get_json(storage.schedule_key("ext-empty", s)) for s in range(2)]
        # (the progress reader reads every stage's schedule, the empty one too)
        sfn = SimpleNamespace(get_execution_history=lambda **_: {"events": []})
        job = SimpleNamespace(client=SimpleNamespace(store=store, sfn=sfn), job_id="ext-empty",
                              execution_arn="arn:x")  # fmt: skip
        progress = ProgressTracker(job, "estimate").snapshot({"status": "RUNNING"})
    # THEN the job ended, stage 0 had no unit (an empty schedule) and stage 1 its ml_g units
    assert record["status"] == "SUCCEEDED"
    assert [p.n_units for p in planned] == [0, 6]
    assert schedules[0]["waves"] == []
    units = [u for w in schedules[1]["waves"] for sh in w["shards"] for u in sh["units"]]
    assert len(units) == 6 and all("ml_g" in u for u in units)
    n_shards = sum(len(w["shards"]) for w in schedules[1]["waves"])
    assert (progress.shards_done, progress.shards_total) == (n_shards, n_shards)
    assert (progress.fits_done, progress.fits_total) == (6, 6)
    # AND the estimate is DoubleML's refit with the given predictions
    np.testing.assert_allclose(result["all_coef"]["d"], refit.all_coef[0], rtol=1e-9)
    np.testing.assert_allclose(result["all_se"]["d"], refit.all_se[0], rtol=1e-9)
