"""Parity of fanfit.dml.scores.ssm with DoubleML 0.11.4's DoubleMLSSM at 1e-12.

Missing at random: DoubleML's stored out-of-fold predictions go into fanfit's score. Nonignorable:
the two-step fits inside each fold are redone as the module docstring (and ``ssm_learners``)
describe them, and their predictions must be DoubleML's.
"""

from __future__ import annotations

import doubleml as dml
import numpy as np
import pytest
from doubleml.irm.datasets import make_ssm_data
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression

from fanfit.dml import draw_folds, folds_to_smpls
from fanfit.dml.scores.plm_irm import aggregate_coefs_and_ses, est_coef, var_est
from fanfit.dml.scores.ssm import (
    SSM_KEYS,
    ssm_learners,
    ssm_nonignorable_fold,
    ssm_score_elements,
)
from fanfit.errors import InvalidJobError

TOL = 1e-12
N_OBS, N_FOLDS, N_REP = 400, 3, 2


def _close(actual, desired, name):
    np.testing.assert_allclose(actual, desired, rtol=TOL, atol=TOL, err_msg=name)


def _fit_ssm(score: str, normalize_ipw: bool, seed: int):
    np.random.seed(seed)
    data = make_ssm_data(n_obs=N_OBS, dim_x=4, mar=score == "missing-at-random")
    obj = dml.DoubleMLSSM(
        data,
        LinearRegression(),
        LogisticRegression(),
        LogisticRegression(),
        n_folds=N_FOLDS,
        n_rep=N_REP,
        score=score,
        normalize_ipw=normalize_ipw,
        draw_sample_splitting=False,
    )
    obj.set_sample_splitting(folds_to_smpls(draw_folds(data.n_obs, N_FOLDS, N_REP, seed=4)))
    return data, obj.fit(store_predictions=True)


def _assert_estimates(data, obj, normalize_ipw):
    pred = obj.predictions
    all_coef, all_se = np.empty((1, N_REP)), np.empty((1, N_REP))
    for i_rep in range(N_REP):
        psi_a, psi_b = ssm_score_elements(
            data.y,
            data.d,
            data.s,
            *(pred[n][:, i_rep, 0] for n in ("ml_g_d0", "ml_g_d1", "ml_pi", "ml_m")),
            normalize_ipw=normalize_ipw,
        )
        _close(psi_a, obj.psi_elements["psi_a"][:, i_rep, 0], "psi_a")
        _close(psi_b, obj.psi_elements["psi_b"][:, i_rep, 0], "psi_b")
        coef = est_coef(psi_a, psi_b)
        psi = psi_a * coef + psi_b
        _close(psi, obj.psi[:, i_rep, 0], "psi")
        all_coef[0, i_rep], all_se[0, i_rep] = coef, np.sqrt(var_est(psi, psi_a))
    _close(all_coef, obj.all_coef, "all_coef")
    _close(all_se, obj.all_se, "all_se")
    coef, se = aggregate_coefs_and_ses(all_coef, all_se)
    _close(coef, obj.coef, "coef")
    _close(se, obj.se, "se")


@pytest.mark.parametrize("normalize_ipw", [False, True])
def test_ssm_missing_at_random_matches_doubleml(normalize_ipw: bool) -> None:
    # GIVEN DoubleML's SSM (MAR) on fixed folds WHEN fanfit scores its predictions
    # THEN elements, score, coef and se equal DoubleML's
    data, obj = _fit_ssm("missing-at-random", normalize_ipw, seed=31)
    _assert_estimates(data, obj, normalize_ipw)
    # AND the learners described are DoubleML's
    assert sorted(lrn.name for lrn in ssm_learners("missing-at-random")) == sorted(obj.params_names)


@pytest.mark.parametrize("normalize_ipw", [False, True])
def test_ssm_nonignorable_two_step_fits_match_doubleml(normalize_ipw: bool) -> None:
    # GIVEN DoubleML's SSM (nonignorable, instrument z) on fixed folds
    data, obj = _fit_ssm("nonignorable", normalize_ipw, seed=32)
    x, y, d, s, z = data.x, data.y, data.d, data.s, np.ravel(data.z)
    for i_rep in range(N_REP):
        preds = {name: np.full(len(y), np.nan) for name in SSM_KEYS}
        for train, test in obj.smpls[i_rep]:
            # WHEN fanfit runs each outer fold's nested fits
            fold = ssm_nonignorable_fold(
                x, y, d, s, z, train, test, LogisticRegression, LogisticRegression,
                lambda _key: LinearRegression(),
            )  # fmt: skip
            for name in SSM_KEYS:
                preds[name][test] = fold[name]
        # THEN every prediction is DoubleML's (ml_m as clipped before storing)
        for name, values in preds.items():
            if name == "ml_m":
                values = np.clip(values, 0.01, 0.99)
            _close(values, obj.predictions[name][:, i_rep, 0], name)
    # AND the estimates from DoubleML's predictions are DoubleML's
    _assert_estimates(data, obj, normalize_ipw)
    assert sorted(lrn.name for lrn in ssm_learners("nonignorable")) == sorted(obj.params_names)


def test_ssm_nonignorable_fold_uses_each_learners_random_state() -> None:
    # GIVEN DoubleML's nonignorable SSM with random forests of a fixed random_state on given folds
    np.random.seed(33)
    data = make_ssm_data(n_obs=300, dim_x=4, mar=False)
    forest = {"n_estimators": 5, "max_depth": 3, "random_state": 7}
    obj = dml.DoubleMLSSM(
        data, RandomForestRegressor(**forest), RandomForestClassifier(**forest),
        RandomForestClassifier(**forest), n_folds=2, score="nonignorable",
        draw_sample_splitting=False,
    )  # fmt: skip
    obj.set_sample_splitting(folds_to_smpls(draw_folds(data.n_obs, 2, 1, seed=5)))
    obj.fit(store_predictions=True)
    x, z = data.x, np.ravel(data.z)
    for train, test in obj.smpls[0]:
        # WHEN fanfit's fold builds each learner with that random_state
        fold = ssm_nonignorable_fold(
            x, data.y, data.d, data.s, z, train, test,
            lambda: RandomForestClassifier(**forest), lambda: RandomForestClassifier(**forest),
            lambda _key: RandomForestRegressor(**forest),
        )  # fmt: skip
        # THEN its test-row predictions are DoubleML's
        for name in SSM_KEYS:
            values = np.clip(fold[name], 0.01, 0.99) if name == "ml_m" else fold[name]
            _close(values, obj.predictions[name][test, 0, 0], name)


def test_ssm_bad_score_is_named() -> None:
    with pytest.raises(InvalidJobError, match="score"):
        ssm_learners("mar")
