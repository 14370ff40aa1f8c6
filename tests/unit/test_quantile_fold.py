"""The fold procedure of PQ and CVaR (fanfit.dml.scores.quantile.pq_fold) against DoubleML 0.11.4 at 1e-12.

One call per outer fold runs the whole nested procedure; its outer-fold predictions of ``ml_g``
and ``ml_m`` must be DoubleML's stored predictions for the same folds.
"""

from __future__ import annotations

import doubleml as dml
import numpy as np
import pytest
from doubleml.irm.datasets import make_iivm_data, make_irm_data
from sklearn.base import clone
from sklearn.linear_model import LinearRegression, LogisticRegression

from fanfit.dml import (
    DMLSpec,
    draw_folds,
    estimate_in_process,
    fit_units,
    folds_to_smpls,
    init_preds,
    n_stages,
    put_predictions,
    validate_data,
)
from fanfit.dml.scores.lpq import LPQ_KEYS, lpq_fold
from fanfit.dml.scores.quantile import cvar_coef_start, pq_coef_start, pq_fold
from fanfit.errors import InvalidJobError

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


def _spec(model: str, **kw) -> DMLSpec:
    base = dict(
        model=model, score="PQ" if model == "pq" else "CVaR", y_col="y", d_cols=("d",),
        x_cols=tuple(f"X{i}" for i in range(1, 5)), n_folds=2, n_rep=3, seed=1,
        learners={
            "ml_g": "LogisticRegression" if model == "pq" else "LinearRegression",
            "ml_m": "LogisticRegression",
        },
        normalize_ipw=True, treatment=1, quantile=0.4,
    )  # fmt: skip
    return DMLSpec(**{**base, **kw})


@pytest.mark.parametrize(("model", "treatment"), [("pq", 0), ("pq", 1), ("cvar", 1)])
def test_estimate_in_process_equals_doubleml(model: str, treatment: int) -> None:
    # GIVEN data from make_irm_data, fixed folds (2 folds x 3 repetitions) and DoubleML's fit
    np.random.seed(3)
    data = make_irm_data(n_obs=N_OBS, dim_x=4, theta=0.5, return_type="DoubleMLData")
    spec = _spec(model, treatment=treatment)
    spec.validate()
    fdata = validate_data(spec, list(data.data.columns), data.data.to_numpy())
    folds = draw_folds(N_OBS, 2, 3, seed=7)
    cls, ml_g = (
        (dml.DoubleMLPQ, LogisticRegression())
        if model == "pq"
        else (dml.DoubleMLCVAR, LinearRegression())
    )
    obj = cls(
        data, ml_g, LogisticRegression(), treatment=treatment, quantile=0.4, n_folds=2,
        n_rep=3, draw_sample_splitting=False,
    )  # fmt: skip
    obj.set_sample_splitting(folds_to_smpls(folds))
    obj.fit()
    # WHEN fanfit runs every fold unit (PQ: two stages, the chained start values in between)
    res = estimate_in_process(spec, fdata, folds)
    # THEN estimates, standard errors, scores and nuisance losses are DoubleML's
    np.testing.assert_allclose(res.all_coef, obj.all_coef, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.all_se, obj.all_se, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.psi, obj.psi, rtol=1e-9, atol=1e-9)
    for key in ("ml_g", "ml_m"):
        np.testing.assert_allclose(res.nuisance_loss[key], obj.nuisance_loss[key], atol=1e-9)
    # AND PQ runs two stages whatever n_rep is, CVaR one, each stage with one unit per fold and
    # repetition (PQ: ml_m's fits in stage 0, ml_g's in stage 1)
    assert n_stages(spec) == (2 if model == "pq" else 1)
    assert len(fit_units(spec, 0)) == 6
    if model == "pq":
        assert {u.learner for u in fit_units(spec, 0)} == {"ml_m"}
        assert {(u.i_rep, u.i_fold) for u in fit_units(spec, 1)} == {
            (r, f) for r in range(3) for f in range(2)
        }


def test_put_predictions_unpacks_a_fold_unit_and_its_scalar() -> None:
    # GIVEN a PQ spec (2 repetitions: two stages) and the packed values of fold 1 of repetition
    # 0: stage 0 (ml_m), stage 1 (ml_g, then theta_ipw)
    spec = _spec("pq", n_rep=2)
    folds = np.array([[0, 1], [1, 0], [1, 0], [0, 1]])
    preds = init_preds(spec, 4)
    unit_0, unit_1 = fit_units(spec, 0)[1], fit_units(spec, 1)[1]
    # WHEN they are put
    put_predictions(preds, unit_0, folds, np.array([0.7, 0.8]), spec)
    put_predictions(preds, unit_1, folds, np.array([0.1, 0.2, 1.5]), spec)
    # THEN each key gets the fold's test rows and the scalar is stored on them
    np.testing.assert_array_equal(preds["ml_g"][[1, 2], 0, 0], [0.1, 0.2])
    np.testing.assert_array_equal(preds["ml_m"][[1, 2], 0, 0], [0.7, 0.8])
    np.testing.assert_array_equal(preds["theta_ipw"][[1, 2], 0, 0], [1.5, 1.5])
    assert np.isnan(preds["theta_ipw"][0, 0, 0])
    # AND a wrong length is refused by name (stage 0 carries no scalar)
    with pytest.raises(InvalidJobError, match="packed values"):
        put_predictions(preds, unit_0, folds, np.array([0.1, 0.2, 1.5]), spec)
    with pytest.raises(InvalidJobError, match="packed values"):
        put_predictions(preds, unit_1, folds, np.array([0.1, 0.2]), spec)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"quantile": None}, "needs quantile"),
        ({"quantile": 1.0}, r"quantile must be a number in \(0, 1\)"),
        ({"treatment": 2}, "needs treatment, 0 or 1"),
        ({"cluster_cols": ("cl",)}, "does not take cluster_cols"),
    ],
)
def test_quantile_options_are_validated_by_name(kw: dict, match: str) -> None:
    # GIVEN a PQ spec with one bad option WHEN validated THEN a named InvalidJobError
    with pytest.raises(InvalidJobError, match=match):
        _spec("pq", **kw).validate()


def test_quantile_options_belong_to_pq_and_cvar_only() -> None:
    # GIVEN an IRM spec with a quantile WHEN validated THEN the option is refused, naming its models
    spec = DMLSpec("irm", "ATE", "y", ("d",), ("X1",), learners={"ml_g": "LinearRegression",
                   "ml_m": "LogisticRegression"}, quantile=0.5)  # fmt: skip
    with pytest.raises(InvalidJobError, match="quantile is an option of model 'pq' or 'cvar'"):
        spec.validate()


def test_lpq_fold_procedure_equals_doubleml() -> None:
    # GIVEN DoubleML's LPQ (binary instrument) fitted on fixed folds (one repetition)
    np.random.seed(24)
    data = make_iivm_data(n_obs=400, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData")
    obj = dml.DoubleMLLPQ(
        data, LogisticRegression(), LogisticRegression(), treatment=1, quantile=0.5,
        n_folds=N_FOLDS, n_rep=1, draw_sample_splitting=False,
    )  # fmt: skip
    obj.set_sample_splitting(folds_to_smpls(draw_folds(400, N_FOLDS, 1, seed=4)))
    obj.fit(store_predictions=True)
    x, y, d, z = data.x, data.y, data.d, np.ravel(data.z)
    start = pq_coef_start(y, d, 1, 0.5)
    # WHEN each outer fold runs its nested procedure in one call
    got = {k: np.full(400, np.nan) for k in LPQ_KEYS}
    thetas = []
    for train, test in obj.smpls[0]:
        out = lpq_fold(x, y, d, z, train, test, 1, 0.5, start, N_FOLDS,
                       lambda _k: LogisticRegression(), lambda _k: LogisticRegression())  # fmt: skip
        for k in LPQ_KEYS:
            got[k][test] = out.preds[k]
        thetas.append(out.theta_ipw)
    # THEN every outer-fold prediction is DoubleML's (ml_m_z stored clipped) and so is the start
    got["ml_m_z"] = np.clip(got["ml_m_z"], 0.01, 0.99)
    for k in LPQ_KEYS:
        np.testing.assert_allclose(
            got[k], obj.predictions[k][:, 0, 0], rtol=TOL, atol=TOL, err_msg=k
        )
    assert obj._coef_start_val == pytest.approx(np.mean(thetas), abs=TOL)


def test_lpq_estimate_in_process_equals_doubleml() -> None:
    # GIVEN IIVM data (binary instrument), fixed folds (2 folds x 2 repetitions), DoubleML's LPQ
    np.random.seed(24)
    data = make_iivm_data(n_obs=400, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData")
    spec = _spec("lpq", score="LPQ", z_cols=("z",), n_rep=2, quantile=0.5,
                 learners={"ml_g": "LogisticRegression", "ml_m": "LogisticRegression"})  # fmt: skip
    spec.validate()
    fdata = validate_data(spec, list(data.data.columns), data.data.to_numpy())
    folds = draw_folds(400, 2, 2, seed=7)
    obj = dml.DoubleMLLPQ(
        data, LogisticRegression(), LogisticRegression(), treatment=1, quantile=0.5, n_folds=2,
        n_rep=2, draw_sample_splitting=False,
    )  # fmt: skip
    obj.set_sample_splitting(folds_to_smpls(folds))
    obj.fit()
    # WHEN fanfit runs its fold units, repetition r as stage r
    res = estimate_in_process(spec, fdata, folds)
    # THEN estimates, standard errors, scores and nuisance losses are DoubleML's
    np.testing.assert_allclose(res.all_coef, obj.all_coef, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.all_se, obj.all_se, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(res.psi, obj.psi, rtol=1e-9, atol=1e-9)
    for key, loss in obj.nuisance_loss.items():
        np.testing.assert_allclose(res.nuisance_loss[key], loss, atol=1e-9, err_msg=key)
    assert n_stages(spec) == 2


def test_lpq_needs_one_instrument() -> None:
    # GIVEN an LPQ spec without an instrument WHEN validated THEN a named error
    with pytest.raises(InvalidJobError, match="'lpq' needs exactly one binary instrument"):
        _spec("lpq", score="LPQ", learners={"ml_g": "LogisticRegression",
              "ml_m": "LogisticRegression"}).validate()  # fmt: skip
