"""The fold procedure of PQ and CVaR (fanfit.dml.scores_quantile.pq_fold) against DoubleML 0.11.4 at 1e-12.

One call per outer fold runs the whole nested procedure; its outer-fold predictions of ``ml_g``
and ``ml_m`` must be DoubleML's stored predictions for the same folds.
"""

from __future__ import annotations

import doubleml as dml
import numpy as np
import pytest
from doubleml.irm.datasets import make_irm_data
from sklearn.base import clone
from sklearn.linear_model import LinearRegression, LogisticRegression

from fanfit.dml import draw_folds, folds_to_smpls
from fanfit.dml.scores_quantile import cvar_coef_start, pq_coef_start, pq_fold

TOL = 1e-12
N_OBS, N_FOLDS = 300, 3


@pytest.mark.parametrize(
    ("cls", "ml_g", "treatment", "quantile"),
    [
        (dml.DoubleMLPQ, LogisticRegression(), 1, 0.4),
        (dml.DoubleMLPQ, LogisticRegression(), 0, 0.6),
        (dml.DoubleMLCVAR, LinearRegression(), 1, 0.5),
    ],
)
def test_fold_procedure_equals_doubleml(cls, ml_g, treatment: int, quantile: float) -> None:
    # GIVEN DoubleML's PQ / CVaR fitted on fixed folds (one repetition)
    np.random.seed(31)
    data = make_irm_data(n_obs=N_OBS, dim_x=4, theta=0.5, return_type="DoubleMLData")
    obj = cls(
        data, ml_g, LogisticRegression(), treatment=treatment, quantile=quantile,
        n_folds=N_FOLDS, n_rep=1, draw_sample_splitting=False,
    )  # fmt: skip
    folds = draw_folds(N_OBS, N_FOLDS, 1, seed=4)
    obj.set_sample_splitting(folds_to_smpls(folds))
    obj.fit(store_predictions=True)
    y, d, x = data.y, data.d, data.x
    is_cvar = cls is dml.DoubleMLCVAR
    start = (cvar_coef_start if is_cvar else pq_coef_start)(y, d, treatment, quantile)
    # WHEN each outer fold runs its nested procedure in one call
    g_hat, m_hat = np.full(N_OBS, np.nan), np.full(N_OBS, np.nan)
    thetas = []
    for train, test in obj.smpls[0]:
        out = pq_fold(
            x, y, d, train, test, treatment, quantile, start, N_FOLDS,
            lambda: clone(ml_g), lambda: LogisticRegression(), cvar=is_cvar,
        )  # fmt: skip
        g_hat[test], m_hat[test] = out.g_hat, out.m_hat
        thetas.append(out.theta_ipw)
    # THEN the outer-fold predictions are DoubleML's
    np.testing.assert_allclose(g_hat, obj.predictions["ml_g"][:, 0, 0], rtol=TOL, atol=TOL)
    # (DoubleML stores ml_m's propensities clipped to [0.01, 0.99]; pq_fold returns them raw)
    clipped = np.clip(m_hat, 0.01, 0.99)
    np.testing.assert_allclose(clipped, obj.predictions["ml_m"][:, 0, 0], rtol=TOL, atol=TOL)
    # AND (PQ) DoubleML's next start value is the mean of the fold IPW quantiles
    if not is_cvar:
        assert obj._coef_start_val == pytest.approx(np.mean(thetas), abs=TOL)
