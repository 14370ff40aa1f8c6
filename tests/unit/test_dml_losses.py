"""Nuisance losses (fanfit.dml.losses) against DoubleML 0.11's ``nuisance_loss``.

Each case fits DoubleML with the same learners on fanfit's folds (``set_sample_splitting``) and
runs fanfit's units in process; the losses fanfit computes from its out-of-fold predictions must
equal DoubleML's ``nuisance_loss`` to 1e-12.
"""

from __future__ import annotations

import warnings

import doubleml as dml
import numpy as np
import pytest
from doubleml.utils import PSProcessorConfig
from doubleml_helpers import (
    DOUBLEML,
    LIN,
    LOGIT,
    PROPENSITY_MODELS,
    RF_CLF,
    RF_REG,
    X_COLS,
    numbered_cols,
)

from fanfit.dml import DMLSpec, draw_folds, estimate_in_process, folds_to_smpls, validate_data
from fanfit.dml.losses import (
    LOG_LOSS,
    RMSE,
    log_loss,
    loss_metrics,
    nuisance_loss,
    nuisance_targets,
    rmse,
)
from fanfit.errors import InvalidJobError

ATOL = 1e-12

# id, model, score, learners, make_frame options, spec options
CASES = [
    ("plr-po-2treat-rep2", "plr", "partialling out", dict(ml_l=LIN, ml_m=RF_REG),
     dict(n_treat=2), dict(n_rep=2)),
    ("plr-po-clf-m", "plr", "partialling out", dict(ml_l=LIN, ml_m=LOGIT),
     dict(binary_d=True), {}),
    ("plr-iv-rep2", "plr", "IV-type", dict(ml_l=LIN, ml_m=LIN, ml_g=RF_REG),
     {}, dict(n_rep=2)),
    ("irm-ate-rep2-trim", "irm", "ATE", dict(ml_g=RF_REG, ml_m=RF_CLF),
     {}, dict(n_rep=2, trimming_threshold=0.1)),
    ("irm-atte-binary-y", "irm", "ATTE", dict(ml_g=LOGIT, ml_m=LOGIT),
     dict(binary_y=True), {}),
    ("pliv-po", "pliv", "partialling out", dict(ml_l=LIN, ml_m=LIN, ml_r=LIN), {}, {}),
    ("pliv-po-2instr", "pliv", "partialling out", dict(ml_l=LIN, ml_m=LIN, ml_r=LIN),
     dict(n_instr=2), {}),
    ("pliv-iv-rep2", "pliv", "IV-type", dict(ml_l=LIN, ml_m=LIN, ml_r=LIN, ml_g=LIN),
     {}, dict(n_rep=2)),
    ("iivm-late-rep2", "iivm", "LATE", dict(ml_g=LIN, ml_m=LOGIT, ml_r=RF_CLF),
     dict(n_obs=400), dict(n_rep=2)),
]  # fmt: skip


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def fitted(request, make_frame):
    # GIVEN a synthetic data set, fanfit's folds and one spec for both libraries
    _, model, score, learners, frame_opts, spec_opts = request.param
    df = make_frame(model, seed=3, **frame_opts)
    spec = DMLSpec(
        model=model,
        score=score,
        y_col="y",
        d_cols=numbered_cols(df.columns, "d"),
        x_cols=X_COLS,
        z_cols=numbered_cols(df.columns, "z"),
        n_folds=4,
        seed=5,
        learners=learners,
        **spec_opts,
    )
    spec.validate()
    folds = draw_folds(len(df), spec.n_folds, spec.n_rep, spec.seed)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    obj_data = dml.DoubleMLData(
        df, "y", list(spec.d_cols), x_cols=X_COLS, z_cols=list(spec.z_cols) or None
    )
    options = {"n_folds": spec.n_folds, "n_rep": spec.n_rep, "score": score}
    if model in PROPENSITY_MODELS:
        options["ps_processor_config"] = PSProcessorConfig(
            clipping_threshold=spec.trimming_threshold
        )
    obj = DOUBLEML[model](obj_data, **{k: v.build() for k, v in spec.learners.items()}, **options)
    obj.set_sample_splitting(folds_to_smpls(folds))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # WHEN DoubleML fits on the shared folds and fanfit runs every unit in process
        obj.fit(store_predictions=True)
        result = estimate_in_process(spec, data, folds)
    return spec, data, obj, result


def test_nuisance_loss_equals_doubleml(fitted) -> None:
    spec, data, obj, result = fitted
    # WHEN fanfit computes the losses from its own out-of-fold predictions
    ours = nuisance_loss(spec, data, result.predictions)
    # THEN every learner's loss, per repetition and treatment, is DoubleML's
    assert set(ours) == set(obj.nuisance_loss)
    for key, theirs in obj.nuisance_loss.items():
        assert ours[key].shape == theirs.shape == (spec.n_rep, spec.n_treat)
        assert np.all(np.isfinite(ours[key])), key
        np.testing.assert_allclose(ours[key], theirs, rtol=0, atol=ATOL, err_msg=key)


def test_nuisance_targets_equal_doubleml(fitted) -> None:
    spec, data, obj, result = fitted
    # WHEN fanfit builds the targets of every learner
    ours = nuisance_targets(spec, data, result.predictions)
    # THEN they are DoubleML's, NaN on the same rows (e.g. ml_g0 only on d == 0 rows)
    for key, theirs in obj.nuisance_targets.items():
        np.testing.assert_allclose(ours[key], theirs, rtol=0, atol=ATOL, err_msg=key)
        np.testing.assert_array_equal(np.isnan(ours[key]), np.isnan(theirs), err_msg=key)


def test_loss_metrics_follow_learner_kind(fitted) -> None:
    spec, _, obj, _ = fitted
    # THEN classifiers are scored by log loss and regressors by RMSE, as DoubleML does
    metrics = loss_metrics(spec)
    for key, is_clf in obj._is_classifier.items():
        assert metrics[key] == (LOG_LOSS if is_clf else RMSE), key


def test_rmse_and_log_loss_by_hand() -> None:
    # GIVEN targets with a missing row and predictions
    targets = np.array([1.0, 0.0, np.nan, 1.0])
    preds = np.array([0.5, 0.25, 0.9, 1.0])
    # WHEN the losses are computed
    # THEN they ignore the NaN row and clip probabilities at 1e-15
    assert rmse(targets, preds) == pytest.approx(np.sqrt((0.25 + 0.0625 + 0.0) / 3), abs=1e-15)
    expected = -(np.log(0.5) + np.log(0.75) + np.log(1 - 1e-15)) / 3
    assert log_loss(targets, preds) == pytest.approx(expected, abs=1e-15)
    # AND no row with a target gives NaN, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(rmse(np.full(3, np.nan), np.zeros(3)))


def test_nuisance_loss_names_missing_predictions(make_frame) -> None:
    # GIVEN a PLR spec and predictions lacking ml_m
    df = make_frame("plr", n_obs=40, seed=1)
    spec = DMLSpec(model="plr", score="partialling out", y_col="y", d_cols=("d",),
                   x_cols=tuple(X_COLS), learners=dict(ml_l=LIN, ml_m=LIN))  # fmt: skip
    data = validate_data(spec, list(df.columns), df.to_numpy())
    # WHEN / THEN the losses are refused with the missing key named
    with pytest.raises(InvalidJobError, match="ml_m"):
        nuisance_loss(spec, data, {"ml_l": np.zeros((40, 1, 1))})


def test_propensity_overlap_counts_every_row_of_each_group(fitted) -> None:
    from fanfit.dml.overlap import N_BINS, propensity_overlap

    spec, data, _, result = fitted
    # WHEN the overlap histogram is computed from the out-of-fold predictions
    ov = propensity_overlap(spec, data, result.predictions)
    # THEN PLR and PLIV have none, IRM groups by the treatment and IIVM by the instrument
    if spec.model in ("plr", "pliv"):
        assert ov is None
        return
    group = data.d[:, 0] if spec.model == "irm" else data.z[:, 0]
    assert ov["variable"] == (spec.d_cols[0] if spec.model == "irm" else spec.z_cols[0])
    assert (
        len(ov["bin_edges"]) == N_BINS + 1 and ov["trimming_threshold"] == spec.trimming_threshold
    )
    m_hat = result.predictions["ml_m"]
    for level in (0, 1):
        counts = np.array(ov["counts"][str(level)])
        assert counts.shape == (spec.n_rep, N_BINS)
        # ... every row of the group once per repetition, in the bin of its unclipped m_hat
        assert (counts.sum(axis=1) == (group == level).sum()).all()
        first = np.histogram(m_hat[group == level, 0, 0], bins=np.linspace(0, 1, N_BINS + 1))[0]
        np.testing.assert_array_equal(counts[0], first)
