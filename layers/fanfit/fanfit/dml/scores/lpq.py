r"""Local potential quantiles (DoubleMLLPQ), as DoubleML 0.11.4 computes them.

The compliers' potential quantile with a binary instrument (Kallus, Mao and Uehara 2019,
arXiv:1912.12945, Section 4). Its nested fits are those of the docstring of
:mod:`fanfit.dml.scores.quantile` (which re-exports this module's names), with strata
:math:`D + 2Z` and the preliminary propensities ``ml_m_z``, ``ml_m_d_z0`` and ``ml_m_d_z1``; the
searches and the kernel density are :mod:`fanfit.dml.quantile_search`'s. All arrays are 1-d of
shape ``(n_obs,)`` unless stated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fanfit.dml.quantile_search import (
    HALF_1,
    HALF_2,
    INNER_CV,
    NonlinearSolution,
    _adjusted_propensity,
    _check_prelim_length,
    _check_quantile_options,
    _ipw_root,
    _proba_or_predict,
    _solve_localized,
    localized_outcome,
    nested_split,
    split_halves,
)
from fanfit.dml.scores.did import NuisanceLearner, all_rows, rows_where
from fanfit.errors import InvalidJobError

__all__ = [
    "LPQFold",
    "lpq_comp_prob",
    "lpq_fold",
    "lpq_fold_final",
    "lpq_fold_prelim",
    "lpq_fold_root",
    "lpq_ipw_estimate",
    "lpq_learners",
    "lpq_solve",
]

#: LPQ's outer-fold predictions, in DoubleML's ``params_names`` order.
LPQ_KEYS = ("ml_m_z", "ml_m_d_z0", "ml_m_d_z1", "ml_g_du_z0", "ml_g_du_z1")


def lpq_comp_prob(
    d: np.ndarray, z: np.ndarray, m_z: np.ndarray, m_d_z0: np.ndarray, m_d_z1: np.ndarray
) -> float:
    r"""The compliers' share :math:`P(D_1 > D_0)`, doubly robust (DoubleML ``irm/lpq.py``).

    .. math::

        \hat\pi_c = \overline{\hat m_{d|1} - \hat m_{d|0} + \frac{Z}{\tilde m_z}(D - \hat m_{d|1})
        - \frac{1 - Z}{1 - \tilde m_z}(D - \hat m_{d|0})}

    Parameters
    ----------
    d, z : numpy.ndarray, shape (n,)
    m_z : numpy.ndarray, shape (n,)
        Adjusted (clipped, normalised) instrument propensities.
    m_d_z0, m_d_z1 : numpy.ndarray, shape (n,)
        :math:`P(D = 1 | Z = 0, X)` and :math:`P(D = 1 | Z = 1, X)`.

    Returns
    -------
    float
    """
    return float(
        np.mean(m_d_z1 - m_d_z0 + z / m_z * (d - m_d_z1) - (1 - z) / (1 - m_z) * (d - m_d_z0))
    )


def lpq_ipw_estimate(
    y1: np.ndarray,
    d1: np.ndarray,
    z1: np.ndarray,
    m_z_prelim: np.ndarray,
    m_d_z0_prelim: np.ndarray,
    m_d_z1_prelim: np.ndarray,
    treatment: int,
    quantile: float,
    coef_start_val: float,
    coef_bounds: tuple[float, float],
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
) -> float:
    r"""The preliminary IPW local quantile of one outer fold (LPQ; step 3 of the module docstring).

    .. math::

        \theta_{\mathrm{ipw}} = \arg\min_\theta \Bigl|\overline{\frac{s}{\hat\pi_c}
        \Bigl(\frac{Z}{\tilde m_z} - \frac{1 - Z}{1 - \tilde m_z}\Bigr) 1\{D = d\} 1\{Y \le \theta\}} - \tau\Bigr|,
        \quad s = 2d - 1

    Parameters
    ----------
    y1, d1, z1 : numpy.ndarray, shape (n_train_1,)
        The first half, in ``train_inds_1`` order.
    m_z_prelim : numpy.ndarray, shape (n_train_1,)
        Inner cross-fitted ``ml_m_z`` propensities (raw).
    m_d_z0_prelim, m_d_z1_prelim : numpy.ndarray, shape (n_train_1,)
        In-sample predictions of ``ml_m_d_z0``/``ml_m_d_z1`` fitted on the first half's rows
        with :math:`Z = 0` / :math:`Z = 1`.
    treatment : int
    quantile : float
    coef_start_val : float
    coef_bounds : (float, float)
    normalize_ipw : bool
    clipping_threshold : float

    Returns
    -------
    float

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``quantile`` is outside (0, 1) or ``treatment`` is not 0 or 1.
    """
    _check_quantile_options(quantile, treatment)
    m_z = _adjusted_propensity(m_z_prelim, z1, normalize_ipw, clipping_threshold)
    comp_prob = lpq_comp_prob(d1, z1, m_z, m_d_z0_prelim, m_d_z1_prelim)
    sign = 2 * treatment - 1.0

    def ipw_score(theta: float) -> float:
        weights = sign * (z1 / m_z - (1 - z1) / (1 - m_z)) / comp_prob
        u = (d1 == treatment) * (y1 <= theta)
        return float(np.mean(weights * u + -1.0 * quantile))

    return _ipw_root(ipw_score, coef_start_val, coef_bounds)


def lpq_solve(
    y: np.ndarray,
    d: np.ndarray,
    z: np.ndarray,
    m_z_hat: np.ndarray,
    m_d_z0_hat: np.ndarray,
    m_d_z1_hat: np.ndarray,
    g_du_z0_hat: np.ndarray,
    g_du_z1_hat: np.ndarray,
    treatment: int,
    quantile: float,
    coef_start_val: float,
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
) -> NonlinearSolution:
    r"""Solve one repetition of DoubleMLLPQ: the compliers' potential quantile.

    .. math::

        \psi = \frac{s}{\hat\pi_c}\Bigl(\hat g_{1} - \hat g_{0}
        + \frac{Z}{\tilde m_z}\bigl(1\{D = d\}1\{Y \le \theta\} - \hat g_{1}\bigr)
        - \frac{1 - Z}{1 - \tilde m_z}\bigl(1\{D = d\}1\{Y \le \theta\} - \hat g_{0}\bigr)\Bigr) - \tau

    with :math:`s = 2d - 1`, :math:`\hat g_z` the predictions of ``ml_g_du_z{z}`` and
    :math:`\hat\pi_c` from :func:`lpq_comp_prob`; the derivative is :func:`kde_at_zero` of
    :math:`Y - \hat\theta` with weights :math:`s(Z/\tilde m_z - (1 - Z)/(1 - \tilde m_z))1\{D = d\}/\hat\pi_c`
    (Kallus, Mao and Uehara 2019, Section 4; DoubleML ``irm/lpq.py``).

    Parameters
    ----------
    y, d, z : numpy.ndarray, shape (n_obs,)
        Outcome, binary treatment and binary instrument.
    m_z_hat, m_d_z0_hat, m_d_z1_hat, g_du_z0_hat, g_du_z1_hat : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_m_z``, ``ml_m_d_z0``, ``ml_m_d_z1``, ``ml_g_du_z0``,
        ``ml_g_du_z1``.
    treatment : int
    quantile : float
    coef_start_val : float
        The mean of this repetition's fold IPW estimates (:func:`lpq_ipw_estimate`).
    normalize_ipw : bool
    clipping_threshold : float

    Returns
    -------
    NonlinearSolution

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``quantile`` is outside (0, 1) or ``treatment`` is not 0 or 1.
    """
    _check_quantile_options(quantile, treatment)
    m_z = _adjusted_propensity(m_z_hat, z, normalize_ipw, clipping_threshold)
    comp_prob = lpq_comp_prob(d, z, m_z, m_d_z0_hat, m_d_z1_hat)
    sign = 2 * treatment - 1.0
    ind_d = d == treatment
    y, bounds = localized_outcome(y)

    def psi_of(coef: float) -> np.ndarray:
        score1 = g_du_z1_hat - g_du_z0_hat
        score2 = (z / m_z) * (ind_d * (y <= coef) - g_du_z1_hat)
        score3 = (1 - z) / (1 - m_z) * (ind_d * (y <= coef) - g_du_z0_hat)
        return sign * (score1 + score2 - score3) / comp_prob - quantile

    score_weights = sign * ((z / m_z) - (1 - z) / (1 - m_z)) * ind_d / comp_prob
    return _solve_localized(y, psi_of, coef_start_val, score_weights, bounds)


def lpq_learners(treatment: int = 1) -> tuple[NuisanceLearner, ...]:
    """The fits of DoubleMLLPQ for one treatment level (see the module docstring's steps).

    Every learner is a clone of ``ml_m`` (propensities) or ``ml_g`` (``ml_g_du_z*``), all
    classifiers. Nested split strata: :math:`D + 2Z`.

    Parameters
    ----------
    treatment : int

    Returns
    -------
    tuple of NuisanceLearner
    """
    _check_quantile_options(0.5, treatment)
    prelim = ("ml_m_z_prelim", "ml_m_d_z0_prelim", "ml_m_d_z1_prelim")
    target_du = "1{d == treatment} * 1{y <= theta_ipw_k}"
    return (
        NuisanceLearner("ml_m_z_prelim", "ml_m", True, all_rows, "z", INNER_CV),
        NuisanceLearner("ml_m_d_z0_prelim", "ml_m", True, rows_where(z=0), "d", HALF_1),
        NuisanceLearner("ml_m_d_z1_prelim", "ml_m", True, rows_where(z=1), "d", HALF_1),
        NuisanceLearner("ml_g_du_z0", "ml_g", True, rows_where(z=0), target_du, HALF_2, prelim),
        NuisanceLearner("ml_g_du_z1", "ml_g", True, rows_where(z=1), target_du, HALF_2, prelim),
        NuisanceLearner("ml_m_z", "ml_m", True, all_rows, "z"),
        NuisanceLearner("ml_m_d_z0", "ml_m", True, rows_where(z=0), "d"),
        NuisanceLearner("ml_m_d_z1", "ml_m", True, rows_where(z=1), "d"),
    )


@dataclass(frozen=True)
class LPQFold:
    """What one outer fold's nested procedure of LPQ (:func:`lpq_fold`) returns.

    Attributes
    ----------
    preds : dict of str to numpy.ndarray, shape (n_test,)
        The outer test rows' predictions of every key of :data:`LPQ_KEYS` (raw propensities).
    theta_ipw : float
        The fold's preliminary IPW local quantile.
    """

    preds: dict[str, np.ndarray]
    theta_ipw: float


def lpq_fold(
    x: np.ndarray,
    y: np.ndarray,
    d: np.ndarray,
    z: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    treatment: int,
    quantile: float,
    coef_start_val: float,
    n_folds: int,
    build_g: Callable[[str], Any],
    build_m: Callable[[str], Any],
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
) -> LPQFold:
    r"""The whole nested procedure of one outer fold of DoubleMLLPQ, in one call.

    As DoubleML 0.11.4 ``irm/lpq.py`` ``_nuisance_est`` (the body of its loop over folds): the
    halves and inner folds of ``train`` with strata :math:`D + 2Z` (:func:`nested_split`);
    ``ml_m_z`` cross-fitted over the inner folds of the first half; ``ml_m_d_z0`` / ``ml_m_d_z1``
    fitted on the first half's rows with :math:`Z = 0` / :math:`Z = 1` and predicting all of it;
    the fold's IPW local quantile (:func:`lpq_ipw_estimate`, searched in ``[min Y, max Y]`` from
    ``coef_start_val``); ``ml_g_du_z0`` / ``ml_g_du_z1`` fitted on the second half's rows with
    :math:`Z = 0` / :math:`Z = 1` to :math:`1\{D = d\}1\{Y \le \theta_{\mathrm{ipw}}\}`; then
    ``ml_m_z``, ``ml_m_d_z0`` and ``ml_m_d_z1`` refitted on all of ``train`` (the latter two on its
    rows with :math:`Z = 0` / :math:`Z = 1`). Every fit gets a new estimator from its builder.
    It is :func:`lpq_fold_prelim` (steps 1, 2, 5), :func:`lpq_fold_root` (step 3) and
    :func:`lpq_fold_final` (step 4) composed; the pipeline runs them apart.

    Parameters
    ----------
    x : numpy.ndarray, shape (n_obs, n_x)
    y, d, z : numpy.ndarray, shape (n_obs,)
        Outcome, binary treatment and binary instrument.
    train, test : numpy.ndarray of int
        The outer fold's training and test rows (sorted).
    treatment : int
        0 or 1.
    quantile : float
        In (0, 1).
    coef_start_val : float
        Start of the IPW search (:func:`fanfit.dml.scores.quantile.pq_coef_start`, or the previous
        repetition's mean).
    n_folds : int
        Number of inner folds.
    build_g, build_m : callable
        ``(key) -> estimator``: a new unfitted ``ml_g`` / ``ml_m`` (classifiers) for nuisance
        ``key`` (``'ml_m_z'``, ``'ml_m_d_z0'``, ..., ``'ml_g_du_z1'``: DoubleML builds one model
        per nuisance and fold, with its parameters).
    normalize_ipw : bool
    clipping_threshold : float

    Returns
    -------
    LPQFold

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``quantile`` is outside (0, 1) or ``treatment`` is not 0 or 1.
    """
    _check_quantile_options(quantile, treatment)
    preds, prelim = lpq_fold_prelim(x, d, z, train, test, n_folds, build_m)
    theta_ipw = lpq_fold_root(
        y, d, z, train, prelim, treatment, quantile, coef_start_val, normalize_ipw,
        clipping_threshold,
    )  # fmt: skip
    preds.update(lpq_fold_final(x, y, d, z, train, test, treatment, theta_ipw, build_g))
    return LPQFold({k: preds[k] for k in LPQ_KEYS}, theta_ipw)


def lpq_fold_prelim(
    x: np.ndarray,
    d: np.ndarray,
    z: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    n_folds: int,
    build_m: Callable[[str], Any],
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    r"""Steps 1, 2 and 5 of an LPQ outer fold: the parts that do not depend on the start value.

    The halves and inner folds of ``train`` (strata :math:`D + 2Z`); ``ml_m_z`` cross-fitted over
    the inner folds of the first half; ``ml_m_d_z0``/``ml_m_d_z1`` fitted on the first half's rows
    with :math:`Z = 0`/:math:`Z = 1`, predicting all of it; then ``ml_m_z``, ``ml_m_d_z0`` and
    ``ml_m_d_z1`` fitted on all of ``train`` (the latter two on its rows with :math:`Z = 0` /
    :math:`Z = 1`), predicting ``test`` (DoubleML 0.11.4 ``irm/lpq.py`` ``_nuisance_est``).

    Parameters
    ----------
    x : numpy.ndarray, shape (n_obs, n_x)
    d, z : numpy.ndarray, shape (n_obs,)
    train, test : numpy.ndarray of int
        The outer fold's training and test rows (sorted).
    n_folds : int
        Number of inner folds.
    build_m : callable
        ``(key) -> estimator``: a new unfitted ``ml_m`` (a classifier) for nuisance ``key``
        (``'ml_m_z'``, ``'ml_m_d_z0'``, ``'ml_m_d_z1'``), also for its preliminary fits.

    Returns
    -------
    preds : dict of str to numpy.ndarray, shape (n_test,)
        ``ml_m_z``, ``ml_m_d_z0``, ``ml_m_d_z1`` of the outer test rows (raw propensities).
    prelim : numpy.ndarray, shape (3, n_train_1)
        The first half's preliminary ``ml_m_z`` (cross-fitted), ``ml_m_d_z0`` and ``ml_m_d_z1``
        (in-sample) propensities, in ``train_inds_1`` order.
    """
    train_1, _, inner = nested_split(train, d + 2 * z, n_folds)
    x1, d1, z1 = x[train_1], d[train_1], z[train_1]
    m_z_prelim = np.full(train_1.size, np.nan)
    for in_train, in_test in inner:
        fitted = build_m("ml_m_z").fit(x1[in_train], z1[in_train])
        m_z_prelim[in_test] = _proba_or_predict(fitted, x1[in_test])
    m_d_prelim = [
        _proba_or_predict(build_m(f"ml_m_d_z{v}").fit(x1[z1 == v], d1[z1 == v]), x1) for v in (0, 1)
    ]
    preds = {"ml_m_z": _proba_or_predict(build_m("ml_m_z").fit(x[train], z[train]), x[test])}
    for v in (0, 1):
        rows = train[z[train] == v]
        model = build_m(f"ml_m_d_z{v}").fit(x[rows], d[rows])
        preds[f"ml_m_d_z{v}"] = _proba_or_predict(model, x[test])
    return preds, np.vstack([m_z_prelim, *m_d_prelim])


def lpq_fold_root(
    y: np.ndarray,
    d: np.ndarray,
    z: np.ndarray,
    train: np.ndarray,
    prelim: np.ndarray,
    treatment: int,
    quantile: float,
    coef_start_val: float,
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
) -> float:
    r"""Step 3 of an LPQ outer fold: its IPW local quantile from the stored preliminary propensities.

    Redraws the fold's first half (:func:`~fanfit.dml.quantile_search.split_halves`, strata
    :math:`D + 2Z`, deterministic) and runs :func:`lpq_ipw_estimate` on it, searched in
    ``[min Y, max Y]`` over the whole sample.

    Parameters
    ----------
    y, d, z : numpy.ndarray, shape (n_obs,)
    train : numpy.ndarray of int
        The outer fold's training rows (sorted).
    prelim : numpy.ndarray, shape (3, n_train_1)
        :func:`lpq_fold_prelim`'s second output for the same fold.
    treatment : int
    quantile : float
    coef_start_val : float
    normalize_ipw : bool
    clipping_threshold : float

    Returns
    -------
    float
        :math:`\theta^{(k)}_{\mathrm{ipw}}`.

    Raises
    ------
    fanfit.errors.InvalidJobError
        A bad ``quantile``/``treatment``, or ``prelim`` not of shape (3, n_train_1).
    """
    train_1, _ = split_halves(train, d + 2 * z)
    prelim = np.asarray(prelim, dtype=np.float64)
    _check_prelim_length(prelim, train_1.size)
    if prelim.shape[0] != 3:
        raise InvalidJobError(
            f"LPQ's preliminary propensities need 3 rows (ml_m_z, ml_m_d_z0, ml_m_d_z1), got "
            f"shape {prelim.shape}."
        )
    return lpq_ipw_estimate(
        y[train_1], d[train_1], z[train_1], prelim[0], prelim[1], prelim[2], treatment, quantile,
        coef_start_val, (y.min(), y.max()), normalize_ipw, clipping_threshold,
    )  # fmt: skip


def lpq_fold_final(
    x: np.ndarray,
    y: np.ndarray,
    d: np.ndarray,
    z: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    treatment: int,
    theta_ipw: float,
    build_g: Callable[[str], Any],
) -> dict[str, np.ndarray]:
    r"""Step 4 of an LPQ outer fold: ``ml_g_du_z0``/``ml_g_du_z1`` on the second half.

    Each fitted on the second half's rows with :math:`Z = 0` / :math:`Z = 1` to
    :math:`1\{D = d\}1\{Y \le \theta_{\mathrm{ipw}}\}`, predicting ``test``; the second half is
    redrawn by :func:`~fanfit.dml.quantile_search.split_halves` (deterministic).

    Parameters
    ----------
    x : numpy.ndarray, shape (n_obs, n_x)
    y, d, z : numpy.ndarray, shape (n_obs,)
    train, test : numpy.ndarray of int
    treatment : int
    theta_ipw : float
        The fold's IPW local quantile (:func:`lpq_fold_root`).
    build_g : callable
        ``(key) -> estimator``: a new unfitted ``ml_g`` (a classifier) for nuisance ``key``
        (``'ml_g_du_z0'``, ``'ml_g_du_z1'``).

    Returns
    -------
    dict of str to numpy.ndarray, shape (n_test,)
        ``ml_g_du_z0``, ``ml_g_du_z1``.
    """
    _, train_2 = split_halves(train, d + 2 * z)
    preds = {}
    for v in (0, 1):
        rows = train_2[z[train_2] == v]
        target = (d[rows] == treatment) * (y[rows] <= theta_ipw)
        model = build_g(f"ml_g_du_z{v}").fit(x[rows], target)
        preds[f"ml_g_du_z{v}"] = _proba_or_predict(model, x[test])
    return preds
