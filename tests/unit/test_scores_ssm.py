"""Parity of fanfit.dml.scores_ssm with DoubleML 0.11.4's DoubleMLSSM at 1e-12.

Missing at random: DoubleML's stored out-of-fold predictions go into fanfit's score. Nonignorable:
the two-step fits inside each fold are redone as the module docstring (and ``ssm_learners``)
describe them, and their predictions must be DoubleML's.
"""

from __future__ import annotations

import doubleml as dml
import numpy as np
import pytest
from doubleml.irm.datasets import make_ssm_data
from sklearn.linear_model import LinearRegression, LogisticRegression

from fanfit.dml import draw_folds, folds_to_smpls
from fanfit.dml.scores import aggregate_coefs_and_ses, est_coef, var_est
from fanfit.dml.scores_quantile import split_halves
from fanfit.dml.scores_ssm import ssm_learners, ssm_score_elements
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
    learners = {lrn.name: lrn for lrn in ssm_learners("nonignorable")}
    arrays = {"y": y, "d": d, "s": s, "z": z}
    for i_rep in range(N_REP):
        preds = {name: np.full(len(y), np.nan) for name in learners}
        for train, test in obj.smpls[i_rep]:
            # WHEN the described steps are redone: ml_pi on half 1 with (x, d, z), predicting all rows
            tr1, tr2 = split_halves(train, d + 2 * s)
            dxz = np.column_stack((x, d, z))
            pi_all = LogisticRegression().fit(dxz[tr1], s[tr1]).predict_proba(dxz)[:, 1]
            preds["ml_pi"][test] = pi_all[test]
            # then ml_m and ml_g_d* on half 2 with (x, pi), on their rows
            xpi = np.column_stack((x, pi_all))
            for name in ("ml_m", "ml_g_d0", "ml_g_d1"):
                lrn = learners[name]
                rows = tr2[lrn.rows(arrays)[tr2]]
                target = arrays[lrn.target]
                if lrn.classifier:
                    fitted = LogisticRegression().fit(xpi[rows], target[rows])
                    preds[name][test] = fitted.predict_proba(xpi[test])[:, 1]
                else:
                    fitted = LinearRegression().fit(xpi[rows], target[rows])
                    preds[name][test] = fitted.predict(xpi[test])
        # THEN every prediction is DoubleML's (ml_m as clipped before storing)
        for name, values in preds.items():
            if name == "ml_m":
                values = np.clip(values, 0.01, 0.99)
            _close(values, obj.predictions[name][:, i_rep, 0], name)
    # AND the estimates from DoubleML's predictions are DoubleML's
    _assert_estimates(data, obj, normalize_ipw)


def test_ssm_bad_score_is_named() -> None:
    with pytest.raises(InvalidJobError, match="score"):
        ssm_learners("mar")
