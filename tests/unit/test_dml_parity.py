"""Parity of fanfit.dml with DoubleML 0.11.4 on shared sample splits.

Every case fits the same learners on the same folds in two ways: DoubleML's own ``fit()`` after
``set_sample_splitting(folds_to_smpls(folds))``, and fanfit's unit-by-unit
:func:`estimate_in_process`. Then fanfit's :func:`aggregate` is fed DoubleML's stored predictions,
which is what DoubleML's ``fit(external_predictions=...)`` does. Estimates, standard errors,
per-repetition values, summaries and the predictions themselves must agree.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import doubleml as dml
import numpy as np
import pandas as pd
import pytest
from doubleml.utils import PSProcessorConfig
from doubleml_helpers import (
    DOUBLEML,
    LIN,
    LOGIT,
    PROPENSITY_MODELS,
    RF_CLF,
    RF_REG,
    RTOL,
    X_COLS,
    assert_same_estimate,
    numbered_cols,
)

from fanfit.dml import (
    DMLSpec,
    aggregate,
    draw_folds,
    estimate_in_process,
    fit_predict,
    fit_units,
    folds_to_smpls,
    n_stages,
    prediction_keys,
    stage_inputs,
    validate_data,
)

LASSO = 'LassoCV:{"cv": 5, "alphas": 10}'
LASSO_DEFAULT = 'LassoCV:{"cv": 5}'


@dataclass(frozen=True)
class Case:
    """One row of :data:`TABLE`: a model, a score, its nuisance learners and the data's shape."""

    id: str
    model: str
    score: str
    learners: dict
    n_rep: int = 1
    n_treat: int = 1
    n_instr: int = 1
    binary_d: bool = False
    binary_y: bool = False
    n_obs: int = 250
    trimming_threshold: float = 0.01
    normalize_ipw: bool = False
    subgroups: dict | None = None


# One row per case: id, model, score, nuisance learners (the same for fanfit and DoubleML), and
# what differs from Case's defaults (n_rep 1, one treatment, one instrument, continuous d and y,
# 250 rows, trimming 0.01, no IPW normalisation). Every score DoubleML offers for PLR, IRM, PLIV
# and IIVM is here, with linear, penalised, forest and classifier learners.
TABLE: list[tuple[str, str, str, dict[str, str], dict[str, Any]]] = [
    # id                        model   score              learners
    #                           options
    ("plr-po-lin",              "plr",  "partialling out", dict(ml_l=LIN, ml_m=LIN),
                                {}),
    ("plr-po-2treat-rep3",      "plr",  "partialling out", dict(ml_l=LASSO, ml_m=RF_REG),
                                dict(n_rep=3, n_treat=2)),
    ("plr-po-clf-m-rep3",       "plr",  "partialling out", dict(ml_l=LIN, ml_m=LOGIT),
                                dict(n_rep=3, binary_d=True)),
    ("plr-po-clf-l-binary-y",   "plr",  "partialling out", dict(ml_l=LOGIT, ml_m=LIN),
                                dict(binary_y=True)),
    ("plr-iv-lin-lasso",        "plr",  "IV-type",         dict(ml_l=LIN, ml_m=LIN, ml_g=LASSO_DEFAULT),
                                {}),
    ("plr-iv-2treat-rep3",      "plr",  "IV-type",         dict(ml_l=RF_REG, ml_m=LIN, ml_g=LASSO),
                                dict(n_rep=3, n_treat=2)),
    ("irm-ate-lin",             "irm",  "ATE",             dict(ml_g=LIN, ml_m=LOGIT),
                                {}),
    ("irm-ate-rf-rep3",         "irm",  "ATE",             dict(ml_g=RF_REG, ml_m=RF_CLF),
                                dict(n_rep=3)),
    ("irm-atte-lin",            "irm",  "ATTE",            dict(ml_g=LIN, ml_m=LOGIT),
                                {}),
    ("irm-atte-rep3-normalized", "irm", "ATTE",            dict(ml_g=LASSO, ml_m=LOGIT),
                                dict(n_rep=3, normalize_ipw=True)),
    ("irm-ate-binary-y-trim",   "irm",  "ATE",             dict(ml_g=LOGIT, ml_m=RF_CLF),
                                dict(binary_y=True, trimming_threshold=0.05, normalize_ipw=True)),
    ("pliv-po-lin",             "pliv", "partialling out", dict(ml_l=LIN, ml_m=LIN, ml_r=LIN),
                                {}),
    ("pliv-po-2treat-rep3",     "pliv", "partialling out", dict(ml_l=LASSO, ml_m=LIN, ml_r=RF_REG),
                                dict(n_rep=3, n_treat=2)),
    ("pliv-po-2instr-rep2",     "pliv", "partialling out", dict(ml_l=LIN, ml_m=LASSO, ml_r=LIN),
                                dict(n_rep=2, n_instr=2)),
    ("pliv-iv-rep2",            "pliv", "IV-type",         dict(ml_l=LIN, ml_m=LIN, ml_r=LIN, ml_g=RF_REG),
                                dict(n_rep=2)),
    ("iivm-late-lin",           "iivm", "LATE",            dict(ml_g=LIN, ml_m=LOGIT, ml_r=LOGIT),
                                dict(n_obs=400)),
    ("iivm-late-rf-rep3",       "iivm", "LATE",            dict(ml_g=RF_REG, ml_m=LOGIT, ml_r=RF_CLF),
                                dict(n_rep=3, n_obs=400, normalize_ipw=True)),
    ("iivm-late-no-always-takers", "iivm", "LATE",         dict(ml_g=LIN, ml_m=LOGIT, ml_r=LOGIT),
                                dict(n_obs=400, subgroups={"always_takers": False, "never_takers": True})),
    ("iivm-late-no-never-takers-rep2", "iivm", "LATE",     dict(ml_g=LASSO, ml_m=LOGIT, ml_r=RF_CLF),
                                dict(n_rep=2, n_obs=400, normalize_ipw=True,
                                     subgroups={"always_takers": True, "never_takers": False})),
    ("iivm-late-no-subgroups",  "iivm", "LATE",            dict(ml_g=LIN, ml_m=LOGIT, ml_r=LOGIT),
                                dict(n_obs=400, subgroups={"always_takers": False, "never_takers": False})),
]  # fmt: skip
CASES = [
    Case(id_, model, score, learners, **options) for id_, model, score, learners, options in TABLE
]


def _doubleml(case: Case, spec: DMLSpec, df: pd.DataFrame, folds: np.ndarray):
    """An unfitted DoubleML model with the same learners, options and folds."""
    learners = {k: v.build() for k, v in spec.learners.items()}
    obj_data = dml.DoubleMLData(
        df,
        spec.y_col,
        list(spec.d_cols),
        x_cols=list(spec.x_cols),
        z_cols=list(spec.z_cols) or None,
    )
    common = {"n_folds": spec.n_folds, "n_rep": spec.n_rep, "score": spec.score}
    cls = DOUBLEML[case.model]  # the learners are passed by name (ml_l, ml_m, ml_g, ml_r)
    if case.model in PROPENSITY_MODELS:
        common["normalize_ipw"] = spec.normalize_ipw
        common["ps_processor_config"] = PSProcessorConfig(
            clipping_threshold=spec.trimming_threshold
        )
    if case.subgroups is not None:
        common["subgroups"] = case.subgroups
    obj = cls(obj_data, **learners, **common)
    obj.set_sample_splitting(folds_to_smpls(folds))
    return obj


@dataclass
class Fitted:
    case: Case
    spec: DMLSpec
    df: pd.DataFrame
    folds: np.ndarray
    dml_obj: object
    result: object


@pytest.fixture(scope="module", params=CASES, ids=[c.id for c in CASES])
def fitted(request, make_frame) -> Fitted:
    # GIVEN a synthetic data set for the case's model, fanfit folds, and one spec for both libraries
    case: Case = request.param
    df = make_frame(
        case.model,
        n_obs=case.n_obs,
        n_treat=case.n_treat,
        n_instr=case.n_instr,
        binary_d=case.binary_d,
        binary_y=case.binary_y,
        seed=11,
    )
    spec = DMLSpec(
        model=case.model,
        score=case.score,
        y_col="y",
        d_cols=numbered_cols(df.columns, "d"),
        x_cols=X_COLS,
        z_cols=numbered_cols(df.columns, "z"),
        n_folds=5,
        n_rep=case.n_rep,
        seed=7,
        learners=case.learners,
        trimming_threshold=case.trimming_threshold,
        normalize_ipw=case.normalize_ipw,
        subgroups=case.subgroups,
    )
    spec.validate()
    folds = draw_folds(len(df), spec.n_folds, spec.n_rep, spec.seed)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # WHEN DoubleML fits on the shared splits and fanfit runs every unit in process
        dml_obj = _doubleml(case, spec, df, folds).fit(store_predictions=True)
        result = estimate_in_process(spec, data, folds)
    return Fitted(case, spec, df, folds, dml_obj, result)


def test_estimate_in_process_equals_doubleml(fitted: Fitted) -> None:
    # THEN coefficients and standard errors, aggregated and per repetition, equal DoubleML's
    res, obj = fitted.result, fitted.dml_obj
    assert_same_estimate(res, obj)
    np.testing.assert_allclose(res.t_stat, obj.t_stat, rtol=RTOL, atol=0)
    np.testing.assert_allclose(res.pval, obj.pval, rtol=1e-7, atol=1e-300)
    assert res.all_coef.shape == (fitted.spec.n_treat, fitted.spec.n_rep)


def test_summary_matches_doubleml_layout_and_values(fitted: Fitted) -> None:
    # THEN the summary has DoubleML's columns, index and values
    ours, theirs = fitted.result.summary, fitted.dml_obj.summary
    assert list(ours.columns) == ["coef", "std err", "t", "P>|t|", "2.5 %", "97.5 %"]
    assert list(ours.columns) == list(theirs.columns)
    assert list(ours.index) == list(theirs.index) == list(fitted.spec.d_cols)
    pd.testing.assert_frame_equal(ours, theirs, rtol=1e-7, check_exact=False)


def test_aggregate_of_doubleml_predictions_equals_doubleml(fitted: Fitted) -> None:
    # GIVEN DoubleML's stored out-of-fold predictions, keyed as its external_predictions
    spec, obj = fitted.spec, fitted.dml_obj
    keys = prediction_keys(spec)
    # DoubleML keeps ml_r0 / ml_r1 (as zeros / ones) when a subgroup is switched off; fanfit fits no unit
    skipped = {"ml_r0"} if spec.model == "iivm" and not spec.always_takers else set()
    skipped |= {"ml_r1"} if spec.model == "iivm" and not spec.never_takers else set()
    assert set(keys) == set(obj.params_names) - skipped
    preds = {k: obj.predictions[k] for k in keys}
    data = validate_data(spec, list(fitted.df.columns), fitted.df.to_numpy())
    # WHEN fanfit aggregates them
    res = aggregate(spec, data, fitted.folds, preds)
    # THEN the estimate is DoubleML's (what fit(external_predictions=...) would give)
    assert_same_estimate(res, obj)


def test_unit_predictions_equal_doubleml_predictions_bit_for_bit(fitted: Fitted) -> None:
    # GIVEN the predictions of every unit of every stage, run one by one by estimate_in_process
    spec, obj = fitted.spec, fitted.dml_obj
    preds = fitted.result.predictions
    assert set(preds) == set(prediction_keys(spec))
    # THEN each prediction array is exactly DoubleML's (propensities compared after DoubleML's clipping)
    for key in prediction_keys(spec):
        ours = preds[key]
        if key == "ml_m" and spec.model in ("irm", "iivm"):
            t = spec.trimming_threshold
            ours = np.clip(ours, t, 1 - t)
        np.testing.assert_array_equal(ours, obj.predictions[key], err_msg=key)


def test_fit_predict_of_one_unit_is_the_fold_slice(fitted: Fitted) -> None:
    # GIVEN the last unit of the last stage, run on its own with the stage inputs
    spec, folds = fitted.spec, fitted.folds
    data = validate_data(spec, list(fitted.df.columns), fitted.df.to_numpy())
    stage = n_stages(spec) - 1
    inputs = stage_inputs(spec, stage, data, folds, fitted.result.predictions)
    unit = fit_units(spec, stage)[-1]
    # WHEN it is fitted alone
    values = fit_predict(spec, unit, data, folds, inputs)
    # THEN it returns exactly the test rows of its fold, in row order, as in the full run
    test = np.flatnonzero(folds[:, unit.i_rep] == unit.i_fold)
    np.testing.assert_array_equal(
        values, fitted.result.predictions[unit.learner][test, unit.i_rep, unit.i_treat]
    )


def test_doubleml_with_fanfit_predictions_as_external_equals_fanfit(fitted: Fitted) -> None:
    # GIVEN fanfit's unit predictions handed to DoubleML as external predictions
    case, spec, folds = fitted.case, fitted.spec, fitted.folds
    preds = fitted.result.predictions
    external = {t: {k: preds[k][:, :, j] for k in preds} for j, t in enumerate(spec.d_cols)}
    # WHEN DoubleML fits with them (no learner is fitted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = _doubleml(case, spec, fitted.df, folds).fit(external_predictions=external)
    # THEN its estimate equals fanfit's own
    assert_same_estimate(fitted.result, obj)
