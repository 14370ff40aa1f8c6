"""Parity of fanfit.dml.scores.quantile with DoubleML 0.11.4's PQ, CVaR, LPQ and QTE at 1e-12.

The nested fits of a quantile model are redone here, step by step as the module docstring
describes them (nested split, inner cross-fitted propensities, preliminary IPW quantile, the
localized ``ml_g`` fit on the second half): their predictions must equal DoubleML's stored ones,
and the solution from DoubleML's predictions must equal its estimates.
"""

from __future__ import annotations

import doubleml as dml
import numpy as np
import pytest
from doubleml.irm.datasets import make_iivm_data, make_irm_data
from sklearn.base import clone
from sklearn.linear_model import LinearRegression, LogisticRegression

from fanfit.dml import draw_folds, folds_to_smpls
from fanfit.dml.scores.plm_irm import est_coef, var_est
from fanfit.dml.scores.quantile import (
    cvar_coef_start,
    cvar_g_target,
    cvar_learners,
    cvar_score_elements,
    kde_at_zero,
    lpq_ipw_estimate,
    lpq_learners,
    lpq_solve,
    nested_split,
    pq_coef_start,
    pq_ipw_estimate,
    pq_learners,
    pq_solve,
)
from fanfit.errors import InvalidJobError

TOL = 1e-12
N_OBS, N_FOLDS, N_REP = 300, 3, 2
LOGIT = LogisticRegression()


def _close(actual, desired, name):
    np.testing.assert_allclose(actual, desired, rtol=TOL, atol=TOL, err_msg=name)


def _irm_data(seed: int) -> dml.DoubleMLData:
    np.random.seed(seed)
    return make_irm_data(n_obs=N_OBS, dim_x=4, theta=0.5, return_type="DoubleMLData")


def _fit(obj, n_obs: int, seed: int = 5, n_folds: int = N_FOLDS):
    obj.set_sample_splitting(folds_to_smpls(draw_folds(n_obs, n_folds, N_REP, seed=seed)))
    return obj.fit(store_predictions=True)


def _cross_fit(learner, x, target, smpls):
    """Out-of-fold ``predict_proba[:, 1]`` of ``learner`` over ``smpls`` (positions in x)."""
    preds = np.full(len(target), np.nan)
    for train, test in smpls:
        preds[test] = clone(learner).fit(x[train], target[train]).predict_proba(x[test])[:, 1]
    return preds


def _pq_prelim(obj, i_rep, start, *, cvar=False):
    """Redo DoubleML's nested fits of one repetition; return the fold IPW estimates and ml_g's predictions."""
    x, y, d = obj._dml_data.x, obj._dml_data.y, obj._dml_data.d
    t, q = obj.treatment, obj.quantile
    ipw_vec, g_pred = np.full(N_FOLDS, np.nan), np.full(len(y), np.nan)
    for k, (train, test) in enumerate(obj.smpls[i_rep]):
        tr1, tr2, inner = nested_split(train, d, N_FOLDS)
        m_prelim = _cross_fit(LOGIT, x[tr1], d[tr1], inner)
        ipw_vec[k] = pq_ipw_estimate(y[tr1], d[tr1], m_prelim, t, q, start, (y.min(), y.max()))
        rows = tr2[d[tr2] == t]
        if cvar:
            target = cvar_g_target(y, ipw_vec[k], q)
            g_pred[test] = LinearRegression().fit(x[rows], target[rows]).predict(x[test])
        else:
            fitted = clone(LOGIT).fit(x[rows], y[rows] <= ipw_vec[k])
            g_pred[test] = fitted.predict_proba(x[test])[:, 1]
    return ipw_vec, g_pred


@pytest.mark.parametrize("treatment", [0, 1])
def test_pq_nested_fits_and_solution_match_doubleml(treatment: int) -> None:
    # GIVEN DoubleML's PQ fitted on fixed folds, two repetitions, logistic learners
    data = _irm_data(21)
    obj = _fit(
        dml.DoubleMLPQ(
            data,
            LOGIT,
            LOGIT,
            treatment=treatment,
            quantile=0.4,
            n_folds=N_FOLDS,
            n_rep=N_REP,
            draw_sample_splitting=False,
        ),
        data.n_obs,
    )
    y, d = data.y, data.d
    start = pq_coef_start(y, d, treatment, 0.4)
    for i_rep in range(N_REP):
        # WHEN the nested fits are redone from the described steps (start value chained over reps)
        ipw_vec, g_pred = _pq_prelim(obj, i_rep, start)
        # THEN ml_g's localized predictions are DoubleML's
        _close(g_pred, obj.predictions["ml_g"][:, i_rep, 0], "ml_g")
        # AND the solution from DoubleML's predictions is DoubleML's
        sol = pq_solve(
            y,
            d,
            obj.predictions["ml_g"][:, i_rep, 0],
            obj.predictions["ml_m"][:, i_rep, 0],
            treatment,
            0.4,
            float(np.mean(ipw_vec)),
        )
        _close(sol.coef, obj.all_coef[0, i_rep], "coef")
        _close(sol.psi, obj.psi[:, i_rep, 0], "psi")
        _close(sol.psi_deriv, obj.psi_deriv[:, i_rep, 0], "psi_deriv")
        _close(np.sqrt(var_est(sol.psi, sol.psi_deriv)), obj.all_se[0, i_rep], "se")
        start = float(np.mean(ipw_vec))
    assert [lrn.name for lrn in pq_learners(treatment)][1:] == list(obj.params_names)


def test_cvar_matches_doubleml() -> None:
    # GIVEN DoubleML's CVaR (linear score) with a linear ml_g on fixed folds
    data = _irm_data(22)
    obj = _fit(
        dml.DoubleMLCVAR(
            data,
            LinearRegression(),
            LOGIT,
            treatment=1,
            quantile=0.6,
            n_folds=N_FOLDS,
            n_rep=N_REP,
            draw_sample_splitting=False,
        ),
        data.n_obs,
    )
    y, d = data.y, data.d
    start = cvar_coef_start(y, d, 1, 0.6)
    for i_rep in range(N_REP):
        # WHEN the nested fits are redone (CVaR's IPW search always starts from its own start value)
        ipw_vec, g_pred = _pq_prelim(obj, i_rep, start, cvar=True)
        _close(g_pred, obj.predictions["ml_g"][:, i_rep, 0], "ml_g")
        psi_a, psi_b = cvar_score_elements(
            y,
            d,
            obj.predictions["ml_g"][:, i_rep, 0],
            obj.predictions["ml_m"][:, i_rep, 0],
            float(np.mean(ipw_vec)),
            1,
            0.6,
        )
        # THEN score elements, coef and se are DoubleML's
        _close(psi_a, obj.psi_elements["psi_a"][:, i_rep, 0], "psi_a")
        _close(psi_b, obj.psi_elements["psi_b"][:, i_rep, 0], "psi_b")
        coef = est_coef(psi_a, psi_b)
        _close(coef, obj.all_coef[0, i_rep], "coef")
        _close(np.sqrt(var_est(psi_a * coef + psi_b, psi_a)), obj.all_se[0, i_rep], "se")
    assert cvar_learners(1)[1].classifier is False


def test_qte_models_solve_from_their_start_values_as_doubleml() -> None:
    # GIVEN DoubleML's PQ QTE over two quantiles, two folds, two repetitions (its effects:
    # test_combined.py)
    data = _irm_data(23)
    obj = dml.DoubleMLQTE(data, LOGIT, LOGIT, quantiles=[0.3, 0.7], n_folds=2, n_rep=N_REP,
                          score="PQ", draw_sample_splitting=False)  # fmt: skip
    _fit(obj, data.n_obs, n_folds=2)
    models = {0: obj.modellist_0, 1: obj.modellist_1}
    # WHEN fanfit solves each model's last repetition from its stored start value
    # THEN the estimate is DoubleML's
    for t in (0, 1):
        for m in models[t]:
            sol = pq_solve(
                data.y,
                data.d,
                m.predictions["ml_g"][:, -1, 0],
                m.predictions["ml_m"][:, -1, 0],
                t,
                m.quantile,
                m._coef_start_val,
            )
            _close(sol.coef, m.all_coef[0, -1], "coef")


def test_lpq_nested_fits_and_solution_match_doubleml() -> None:
    # GIVEN DoubleML's LPQ (binary instrument) on fixed folds, logistic learners
    np.random.seed(24)
    data = make_iivm_data(n_obs=400, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData")
    treatment, quantile = 1, 0.5
    obj = _fit(
        dml.DoubleMLLPQ(
            data,
            LOGIT,
            LOGIT,
            treatment=treatment,
            quantile=quantile,
            n_folds=N_FOLDS,
            n_rep=N_REP,
            draw_sample_splitting=False,
        ),
        data.n_obs,
    )
    x, y, d, z = data.x, data.y, data.d, np.ravel(data.z)
    strata = d + 2 * z
    start = pq_coef_start(y, d, treatment, quantile)
    pred = obj.predictions
    for i_rep in range(N_REP):
        ipw_vec = np.full(N_FOLDS, np.nan)
        g_pred = {0: np.full(len(y), np.nan), 1: np.full(len(y), np.nan)}
        for k, (train, test) in enumerate(obj.smpls[i_rep]):
            # WHEN the described nested fits are redone
            tr1, tr2, inner = nested_split(train, strata, N_FOLDS)
            m_z = _cross_fit(LOGIT, x[tr1], z[tr1], inner)
            m_d = {
                v: clone(LOGIT)
                .fit(x[tr1][z[tr1] == v], d[tr1][z[tr1] == v])
                .predict_proba(x[tr1])[:, 1]
                for v in (0, 1)
            }
            ipw_vec[k] = lpq_ipw_estimate(
                y[tr1],
                d[tr1],
                z[tr1],
                m_z,
                m_d[0],
                m_d[1],
                treatment,
                quantile,
                start,
                (y.min(), y.max()),
            )
            for v in (0, 1):
                rows = tr2[z[tr2] == v]
                target = (d[rows] == treatment) * (y[rows] <= ipw_vec[k])
                fitted = clone(LOGIT).fit(x[rows], target)
                g_pred[v][test] = fitted.predict_proba(x[test])[:, 1]
        # THEN the localized predictions are DoubleML's
        _close(g_pred[0], pred["ml_g_du_z0"][:, i_rep, 0], "ml_g_du_z0")
        _close(g_pred[1], pred["ml_g_du_z1"][:, i_rep, 0], "ml_g_du_z1")
        sol = lpq_solve(
            y,
            d,
            z,
            *(
                pred[n][:, i_rep, 0]
                for n in ("ml_m_z", "ml_m_d_z0", "ml_m_d_z1", "ml_g_du_z0", "ml_g_du_z1")
            ),
            treatment,
            quantile,
            float(np.mean(ipw_vec)),
        )
        _close(sol.coef, obj.all_coef[0, i_rep], "coef")
        _close(sol.psi, obj.psi[:, i_rep, 0], "psi")
        _close(sol.psi_deriv, obj.psi_deriv[:, i_rep, 0], "psi_deriv")
        _close(np.sqrt(var_est(sol.psi, sol.psi_deriv)), obj.all_se[0, i_rep], "se")
        start = float(np.mean(ipw_vec))
    final = [lrn.name for lrn in lpq_learners(treatment) if not lrn.name.endswith("_prelim")]
    assert sorted(final) == sorted(obj.params_names)


def test_kde_matches_statsmodels_with_negative_weights() -> None:
    # GIVEN weights of both signs (LPQ's) WHEN the density at 0 is computed THEN it is statsmodels'
    from doubleml.utils._estimation import _default_kde

    rng = np.random.default_rng(7)
    u = rng.normal(size=101)
    w = rng.normal(loc=0.5, size=101)
    _close(kde_at_zero(u, w), _default_kde(u.reshape(-1, 1), w)[0], "kde")


def test_bad_quantile_and_treatment_are_named() -> None:
    y = np.arange(6.0)
    d = np.array([0, 1, 0, 1, 0, 1])
    with pytest.raises(InvalidJobError, match="quantile"):
        pq_solve(y, d, y, np.full(6, 0.5), 1, 1.5, 2.0)
    with pytest.raises(InvalidJobError, match="treatment"):
        pq_learners(2)


def test_quantile_module_imports_no_heavy_library() -> None:
    # GIVEN a fresh interpreter WHEN the score modules are imported THEN no scipy.optimize/sklearn
    import subprocess
    import sys

    code = (
        "import sys, fanfit.dml.scores.quantile, fanfit.dml.scores.did, fanfit.dml.scores.ssm\n"
        "print([m for m in ('sklearn', 'scipy.optimize', 'statsmodels') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
