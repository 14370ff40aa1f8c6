"""Parity of fanfit.dml.scores.did with DoubleML 0.11.4's DoubleMLDID and DoubleMLDIDCS at 1e-12.

Each case fits DoubleML on fixed folds with linear learners, feeds its stored out-of-fold
predictions to fanfit's score functions, and compares the score elements, the score, the
per-repetition and aggregated estimates and standard errors.
"""

from __future__ import annotations

import warnings

import doubleml as dml
import numpy as np
import pytest
from doubleml.did.datasets import make_did_SZ2020
from sklearn.linear_model import LinearRegression, LogisticRegression

from fanfit.dml import draw_folds, folds_to_smpls
from fanfit.dml.scores.did import (
    DID_CS_LEARNERS,
    DID_LEARNERS,
    did_cs_learners,
    did_cs_score_elements,
    did_learners,
    did_score_elements,
)
from fanfit.dml.scores.plm_irm import aggregate_coefs_and_ses, est_coef, var_est
from fanfit.errors import InvalidJobError

pytestmark = pytest.mark.filterwarnings(
    "ignore:DoubleMLDIDData is deprecated:FutureWarning",
    "ignore:DoubleMLDID.* is deprecated:DeprecationWarning",
)

TOL = 1e-12
N_OBS, N_FOLDS, N_REP = 300, 3, 2
CASES = [(s, n) for s in ("observational", "experimental") for n in (True, False)]


def _fit_doubleml(cls, data, score, normalization):
    # GIVEN DoubleML's DID model on fixed folds (two repetitions) with linear learners
    ml_m = LogisticRegression() if score == "observational" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        obj = cls(
            data,
            LinearRegression(),
            ml_m,
            n_folds=N_FOLDS,
            n_rep=N_REP,
            score=score,
            in_sample_normalization=normalization,
            draw_sample_splitting=False,
        )
    obj.set_sample_splitting(folds_to_smpls(draw_folds(data.n_obs, N_FOLDS, N_REP, seed=3)))
    return obj.fit(store_predictions=True)


def _assert_parity(obj, psi_a_b_of_rep):
    # THEN every repetition's elements, score, coef and se equal DoubleML's, and so do the aggregates
    all_coef, all_se = np.empty((1, N_REP)), np.empty((1, N_REP))
    for i_rep in range(N_REP):
        psi_a, psi_b = psi_a_b_of_rep(i_rep)
        np.testing.assert_allclose(
            psi_a, obj.psi_elements["psi_a"][:, i_rep, 0], rtol=TOL, atol=TOL
        )
        np.testing.assert_allclose(
            psi_b, obj.psi_elements["psi_b"][:, i_rep, 0], rtol=TOL, atol=TOL
        )
        coef = est_coef(psi_a, psi_b)
        psi = psi_a * coef + psi_b
        np.testing.assert_allclose(psi, obj.psi[:, i_rep, 0], rtol=TOL, atol=TOL)
        all_coef[0, i_rep], all_se[0, i_rep] = coef, np.sqrt(var_est(psi, psi_a))
    np.testing.assert_allclose(all_coef, obj.all_coef, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(all_se, obj.all_se, rtol=TOL, atol=TOL)
    coef, se = aggregate_coefs_and_ses(all_coef, all_se)
    np.testing.assert_allclose(coef, obj.coef, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(se, obj.se, rtol=TOL, atol=TOL)


@pytest.mark.parametrize(("score", "normalization"), CASES)
def test_did_panel_matches_doubleml(score: str, normalization: bool) -> None:
    np.random.seed(16)
    data = make_did_SZ2020(n_obs=N_OBS, dgp_type=1)
    obj = _fit_doubleml(dml.DoubleMLDID, data, score, normalization)
    y, d = data.y, data.d
    pred = obj.predictions

    # WHEN fanfit computes the score elements from DoubleML's out-of-fold predictions
    def elements(i_rep: int) -> tuple[np.ndarray, np.ndarray]:
        m_hat = pred["ml_m"][:, i_rep, 0] if score == "observational" else None
        return did_score_elements(
            y,
            d,
            pred["ml_g0"][:, i_rep, 0],
            pred["ml_g1"][:, i_rep, 0],
            m_hat,
            score=score,
            in_sample_normalization=normalization,
        )

    _assert_parity(obj, elements)
    # AND the learners described are DoubleML's, fitted on the rows DoubleML fits them on
    assert [lrn.name for lrn in did_learners(score)] == list(obj.params_names)
    rows = {lrn.name: lrn.rows({"d": d}) for lrn in DID_LEARNERS[score]}
    np.testing.assert_array_equal(rows["ml_g0"], d == 0)
    np.testing.assert_array_equal(rows["ml_g1"], d == 1)


@pytest.mark.parametrize(("score", "normalization"), CASES)
def test_did_cs_matches_doubleml(score: str, normalization: bool) -> None:
    np.random.seed(17)
    data = make_did_SZ2020(n_obs=N_OBS, dgp_type=1, cross_sectional_data=True)
    obj = _fit_doubleml(dml.DoubleMLDIDCS, data, score, normalization)
    y, d, t = data.y, data.d, data.t
    pred = obj.predictions
    names = [f"ml_g_d{a}_t{b}" for a, b in ((0, 0), (0, 1), (1, 0), (1, 1))]

    def elements(i_rep: int) -> tuple[np.ndarray, np.ndarray]:
        g = [pred[name][:, i_rep, 0] for name in names]
        m_hat = pred["ml_m"][:, i_rep, 0] if score == "observational" else None
        return did_cs_score_elements(
            y, d, t, *g, m_hat, score=score, in_sample_normalization=normalization
        )

    _assert_parity(obj, elements)
    assert [lrn.name for lrn in did_cs_learners(score)] == list(obj.params_names)
    for lrn in DID_CS_LEARNERS[score][:4]:
        a, b = int(lrn.name[6]), int(lrn.name[9])
        np.testing.assert_array_equal(lrn.rows({"d": d, "t": t}), (d == a) & (t == b))


def test_did_targets_are_doubleml_targets() -> None:
    # GIVEN a fitted panel DID; WHEN each learner's rows select its target; THEN they are
    # DoubleML's nuisance targets (NaN outside the learner's rows)
    np.random.seed(18)
    data = make_did_SZ2020(n_obs=120)
    obj = _fit_doubleml(dml.DoubleMLDID, data, "observational", True)
    arrays = {"y": data.y, "d": data.d}
    for lrn in did_learners("observational"):
        expected = np.where(lrn.rows(arrays), arrays[lrn.target], np.nan)
        np.testing.assert_array_equal(expected, obj.nuisance_targets[lrn.name][:, 0, 0])


def test_did_bad_score_and_missing_predictions_are_named() -> None:
    ones = np.ones(4)
    d = np.array([0.0, 1.0, 0.0, 1.0])
    with pytest.raises(InvalidJobError, match="score"):
        did_learners("panel")
    with pytest.raises(InvalidJobError, match="m_hat"):
        did_score_elements(ones, d, ones, ones, None, score="observational")
    with pytest.raises(InvalidJobError, match="g_hat1"):
        did_score_elements(ones, d, ones, None, None, score="experimental")
    with pytest.raises(InvalidJobError, match="m_hat"):
        did_cs_score_elements(ones, d, d, ones, ones, ones, ones, None)
