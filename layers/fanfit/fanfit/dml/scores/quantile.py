r"""Quantile models: DoubleMLPQ, DoubleMLLPQ, DoubleMLCVAR and DoubleMLQTE, as DoubleML 0.11.4 computes them.

Potential quantiles (PQ, Kallus, Mao and Uehara 2019, "Localized debiased machine learning:
efficient inference on quantile treatment effects and beyond", arXiv:1912.12945, Section 3) and
local potential quantiles (LPQ, same paper, Section 4, the compliers' quantile with a binary
instrument) solve a score that is *not* linear in the quantile :math:`\theta`:

.. math::

    \psi_{PQ}(W; \theta, \eta) = \frac{1\{D = d\}}{\hat m_d(X)}\bigl(1\{Y \le \theta\} - \hat g(X)\bigr)
    + \hat g(X) - \tau,

where :math:`\hat g(X)` estimates :math:`P(Y \le \theta_{\mathrm{ipw}} | D = d, X)` at a
preliminary inverse-probability-weighted (IPW) quantile :math:`\theta_{\mathrm{ipw}}` ("localized"
nuisance). The conditional value at risk (CVaR, same paper, Section 5) is linear in its parameter.

**Nested fits (what the pipeline must fan out).** For each outer fold :math:`k` with training rows
:math:`I_k` (DoubleML ``irm/pq.py``, ``irm/lpq.py``, ``irm/cvar.py``, ``_nuisance_est``):

1. :func:`nested_split`: :math:`I_k` is split in halves :math:`I_k^1, I_k^2` by scikit-learn's
   ``train_test_split(test_size=0.5, random_state=42, stratify=strata)`` (strata :math:`D`; for LPQ
   :math:`D + 2Z`), and :math:`I_k^1` into ``n_folds`` inner folds by ``StratifiedKFold(n_folds)``
   (no shuffling).
2. Preliminary propensities on :math:`I_k^1`: PQ and CVaR cross-fit ``ml_m`` over the inner folds
   (``n_folds`` fits, each predicting its inner test rows); LPQ cross-fits ``ml_m_z`` the same way
   and fits ``ml_m_d_z0`` (rows :math:`Z = 0`) and ``ml_m_d_z1`` (:math:`Z = 1`) once on
   :math:`I_k^1`, predicting all of :math:`I_k^1` in-sample.
3. :func:`pq_ipw_estimate` / :func:`lpq_ipw_estimate`: the fold's preliminary IPW quantile
   :math:`\theta^{(k)}_{\mathrm{ipw}}` from those propensities, a bracket search from a start value
   and Brent's minimisation of the absolute IPW score.
4. On :math:`I_k^2`: ``ml_g`` fitted to :math:`1\{Y \le \theta^{(k)}_{\mathrm{ipw}}\}` (PQ, rows
   :math:`D = d`), to :func:`cvar_g_target` (CVaR, rows :math:`D = d`), or ``ml_g_du_z0``/``ml_g_du_z1``
   to :math:`1\{D = d\}1\{Y \le \theta^{(k)}_{\mathrm{ipw}}\}` on rows :math:`Z = 0` / :math:`Z = 1` (LPQ);
   each predicts the outer test fold.
5. On all of :math:`I_k`: ``ml_m`` (PQ, CVaR) or ``ml_m_z``, ``ml_m_d_z0``, ``ml_m_d_z1`` (LPQ),
   predicting the outer test fold. These do not depend on steps 1-4.

**Start values.** The preliminary IPW search of repetition :math:`r` starts from
:func:`pq_coef_start` (the ``quantile`` of :math:`Y` among :math:`D = d`) for :math:`r = 0` and, for
PQ and LPQ, from the mean of repetition :math:`r-1`'s fold estimates :math:`\theta^{(k)}_{\mathrm{ipw}}`
afterwards (DoubleML overwrites ``_coef_start_val`` after each repetition); the final root search of
repetition :math:`r` starts from the mean of its own fold estimates. CVaR always starts its IPW search
from :func:`cvar_coef_start`. This matters: the IPW score is a step function with flat
stretches, and the bracket search from another start lands elsewhere. Measured on
``make_irm_data`` (300 rows, 3 folds, 2 repetitions; 6 seeds x quantiles 0.2-0.8 x both
treatment levels, 52 models): starting the second repetition from :func:`pq_coef_start` instead of
the first repetition's mean moved fold IPW quantiles by up to 0.57 and the second repetition's
coefficient by up to 0.15 (more than 1e-10 in 23 of the 52).

Only steps 3 and 4 depend on the start value, and step 3 is cheap arithmetic once step 2's
preliminary propensities are known. So the pipeline runs a PQ or LPQ model in **two stages for
any** ``n_rep > 1`` (:attr:`fanfit.dml.models.FoldProcedure.split`): stage 0, one unit per
(treatment, repetition, outer fold), runs steps 1, 2 and 5 (:func:`pq_fold_prelim`,
:func:`~fanfit.dml.scores.lpq.lpq_fold_prelim`) and keeps the fold's preliminary propensities on
:math:`I_k^1`; between the stages, Prepare runs the chain of step 3 exactly as DoubleML does,
repetition after repetition (:func:`pq_fold_root`, :func:`~fanfit.dml.scores.lpq.lpq_fold_root`;
:func:`fanfit.dml.unit_fits.stage_inputs`); stage 1, again one unit per fold, runs step 4 from the
fold's :math:`\theta^{(k)}_{\mathrm{ipw}}` (:func:`pq_fold_final`,
:func:`~fanfit.dml.scores.lpq.lpq_fold_final`). :func:`pq_fold` and
:func:`~fanfit.dml.scores.lpq.lpq_fold` are the three parts composed, one fold in one call;
with ``n_rep = 1`` there is no chain and each fold's unit runs them in one stage. CVaR, which
never chains, runs :func:`pq_fold` (``cvar=True``) in one stage.

**External predictions** (DoubleMLPQ's ``fit(external_predictions=...)``, DoubleML 0.11.4
``irm/pq.py`` ``_nuisance_est``): a given ``ml_m`` replaces steps 2 and 5 (no ``ml_m`` fit; the
preliminary propensities are the given array as DoubleML indexes it, :func:`pq_fold_prelim`), a
given ``ml_g`` replaces step 4; step 3 and the chain of start values run as long as one key is
fitted (:mod:`fanfit.dml.external`).

Propensities are clipped to ``[c, 1 - c]`` (DoubleML's default ``PSProcessorConfig``: no
calibration) and optionally Hajek-normalised. All arrays are 1-d of shape ``(n_obs,)`` unless stated.

This module holds PQ and CVaR (QTE's effects, differences of its parts' frameworks:
:func:`fanfit.dml.combined.qte_combined`); it re-exports LPQ's functions (:mod:`fanfit.dml.scores.lpq`)
and the nested split, the searches and the kernel density (:mod:`fanfit.dml.quantile_search`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fanfit.dml.quantile_search import (
    HALF_2,
    INNER_CV,
    NonlinearSolution,
    _check_prelim_length,
    _check_quantile_options,
    _ipw_root,
    _level_propensity,
    _proba_or_predict,
    _solve_localized,
    get_bracket_guess,
    kde_at_zero,
    localized_outcome,
    nested_split,
    solve_bounded_root,
    solve_ipw_score,
    split_halves,
)
from fanfit.dml.scores.did import NuisanceLearner, all_rows, rows_where
from fanfit.dml.scores.lpq import (
    lpq_comp_prob,
    lpq_fold_final,
    lpq_fold_prelim,
    lpq_fold_root,
    lpq_ipw_estimate,
    lpq_learners,
    lpq_solve,
)

__all__ = [
    "NonlinearSolution",
    "PQPrelim",
    "QuantileFold",
    "cvar_coef_start",
    "cvar_g_target",
    "cvar_learners",
    "cvar_score_elements",
    "get_bracket_guess",
    "kde_at_zero",
    "lpq_comp_prob",
    "lpq_fold_final",
    "lpq_fold_prelim",
    "lpq_fold_root",
    "lpq_ipw_estimate",
    "lpq_learners",
    "lpq_solve",
    "nested_split",
    "pq_coef_start",
    "pq_fold",
    "pq_fold_final",
    "pq_fold_prelim",
    "pq_fold_root",
    "pq_ipw_estimate",
    "pq_learners",
    "pq_solve",
    "solve_bounded_root",
    "solve_ipw_score",
    "split_halves",
]


# ----------------------------------------------------------------------------------------------
# PQ
# ----------------------------------------------------------------------------------------------


def pq_coef_start(y: np.ndarray, d: np.ndarray, treatment: int, quantile: float) -> Any:
    """The first start value of PQ and LPQ: ``np.quantile(y[d == treatment], quantile)`` (DoubleML ``__init__``).

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
    treatment : int
    quantile : float

    Returns
    -------
    numpy.floating
        In ``y``'s dtype, as DoubleML keeps it (its bracket search then widens in that dtype).
    """
    return np.quantile(y[d == treatment], quantile)


def pq_ipw_estimate(
    y1: np.ndarray,
    d1: np.ndarray,
    m_hat_prelim: np.ndarray,
    treatment: int,
    quantile: float,
    coef_start_val: float,
    coef_bounds: tuple[float, float],
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
) -> float:
    r"""The preliminary IPW quantile of one outer fold (PQ and CVaR; step 3 of the module docstring).

    .. math::

        \theta_{\mathrm{ipw}} = \arg\min_\theta \Bigl|\frac{1}{n_1}\sum_{i \in I^1}
        \frac{1\{D_i = d\}}{\tilde m_d(X_i)} 1\{Y_i \le \theta\} - \tau\Bigr|

    with :math:`\tilde m_1 = \hat m`, :math:`\tilde m_0 = 1 - \hat m` (clipped, normalised if asked)
    (DoubleML ``irm/pq.py``, ``_nuisance_est`` and ``_compute_ipw_score``).

    Parameters
    ----------
    y1, d1 : numpy.ndarray, shape (n_train_1,)
        Outcome and treatment of the first half, in ``train_inds_1`` order.
    m_hat_prelim : numpy.ndarray, shape (n_train_1,)
        Inner cross-fitted propensities of ``ml_m`` on the first half.
    treatment : int
        0 or 1.
    quantile : float
    coef_start_val : float
        The start value (see the module docstring).
    coef_bounds : (float, float)
        ``(y.min(), y.max())`` over the whole sample.
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
    m = _level_propensity(m_hat_prelim, d1, treatment, normalize_ipw, clipping_threshold)

    def ipw_score(theta: float) -> float:
        return float(np.mean((d1 == treatment) / m * (y1 <= theta) - quantile))

    return _ipw_root(ipw_score, coef_start_val, coef_bounds)


def pq_solve(
    y: np.ndarray,
    d: np.ndarray,
    g_hat: np.ndarray,
    m_hat: np.ndarray,
    treatment: int,
    quantile: float,
    coef_start_val: float,
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
) -> NonlinearSolution:
    r"""Solve one repetition of DoubleMLPQ: the potential quantile, its score and score derivative.

    .. math::

        \psi = \frac{1\{D = d\}}{\tilde m_d}\bigl(1\{Y \le \theta\} - \hat g\bigr) + \hat g - \tau,
        \qquad
        \partial_\theta \psi \approx \hat f_{w}(0), \; u = Y - \hat\theta, \; w = 1\{D = d\}/\tilde m_d

    (Kallus, Mao and Uehara 2019, eq. 3.2; :math:`\hat f_w` is :func:`kde_at_zero`). The root is
    searched in :math:`[\min Y, \max Y]` from ``coef_start_val`` by :func:`solve_bounded_root`
    (DoubleML ``irm/pq.py`` ``_compute_score``/``_compute_score_deriv`` and
    ``NonLinearScoreMixin._est_coef``). The standard error follows from
    :func:`fanfit.dml.scores.plm_irm.var_est` (``psi``, ``psi_deriv``).

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
    g_hat : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_g``.
    m_hat : numpy.ndarray, shape (n_obs,)
        Out-of-fold propensities :math:`P(D = 1|X)` of ``ml_m`` (raw or clipped).
    treatment : int
        0 or 1.
    quantile : float
        :math:`\tau` in (0, 1).
    coef_start_val : float
        The mean of this repetition's fold IPW estimates (:func:`pq_ipw_estimate`).
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
    m = _level_propensity(m_hat, d, treatment, normalize_ipw, clipping_threshold)
    ind_d = d == treatment
    y, bounds = localized_outcome(y)

    def psi_of(coef: float) -> np.ndarray:
        return ind_d * ((y <= coef) - g_hat) / m + g_hat - quantile

    return _solve_localized(y, psi_of, coef_start_val, ind_d / m, bounds)


def pq_learners(treatment: int = 1) -> tuple[NuisanceLearner, ...]:
    """The fits of DoubleMLPQ for one treatment level (see the module docstring's steps).

    Parameters
    ----------
    treatment : int
        0 or 1.

    Returns
    -------
    tuple of NuisanceLearner
        ``ml_m_prelim`` (inner, step 2), ``ml_g`` (step 4) and ``ml_m`` (step 5).
    """
    return _localized_learners(treatment, True, "1{y <= theta_ipw_k}")


def _localized_learners(
    treatment: int, g_classifier: bool, g_target: str
) -> tuple[NuisanceLearner, ...]:
    """PQ's and CVaR's fits: ``ml_m`` inner on half 1, ``ml_g`` on half 2 (rows ``d == treatment``), ``ml_m``."""
    _check_quantile_options(0.5, treatment)
    return (
        NuisanceLearner("ml_m_prelim", "ml_m", True, all_rows, "d", INNER_CV),
        NuisanceLearner(
            "ml_g",
            "ml_g",
            g_classifier,
            rows_where(d=treatment),
            g_target,
            HALF_2,
            ("ml_m_prelim",),
        ),
        NuisanceLearner("ml_m", "ml_m", True, all_rows, "d"),
    )


@dataclass(frozen=True)
class QuantileFold:
    """What one outer fold's nested procedure (:func:`pq_fold`) returns.

    Attributes
    ----------
    g_hat, m_hat : numpy.ndarray, shape (n_test,)
        ``ml_g``'s and ``ml_m``'s predictions of the outer test rows (raw propensities).
    theta_ipw : float
        The fold's preliminary IPW quantile :math:`\theta^{(k)}_{\\mathrm{ipw}}`.
    """

    g_hat: np.ndarray
    m_hat: np.ndarray
    theta_ipw: float


def pq_fold(
    x: np.ndarray,
    y: np.ndarray,
    d: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    treatment: int,
    quantile: float,
    coef_start_val: float,
    n_folds: int,
    build_g: Callable[[], Any],
    build_m: Callable[[], Any],
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
    cvar: bool = False,
    m_given: np.ndarray | None = None,
    g_given: np.ndarray | None = None,
) -> QuantileFold:
    r"""The whole nested procedure of one outer fold of DoubleMLPQ (or DoubleMLCVAR), in one call.

    Steps 1-5 of the module docstring (DoubleML 0.11.4 ``irm/pq.py`` and ``irm/cvar.py``,
    ``_nuisance_est``, the body of the loop over folds): the halves and inner folds of ``train``
    (:func:`nested_split`, strata :math:`D`); ``ml_m`` cross-fitted over the inner folds of the first
    half (``predict_proba[:, 1]``); the fold's IPW quantile (:func:`pq_ipw_estimate`, searched in
    ``[min Y, max Y]`` from ``coef_start_val``); ``ml_g`` fitted on the second half's rows with
    :math:`D = d` to :math:`1\{Y \le \theta_{\mathrm{ipw}}\}` (PQ, a classifier) or to
    :func:`cvar_g_target` (CVaR, a regressor); ``ml_m`` fitted on all of ``train``. Each fit gets a
    fresh estimator from its builder, as DoubleML clones one learner for every fit. It is
    :func:`pq_fold_prelim` (steps 1, 2, 5), :func:`pq_fold_root` (step 3) and
    :func:`pq_fold_final` (step 4) composed; the pipeline runs them apart (module docstring).

    Parameters
    ----------
    x : numpy.ndarray, shape (n_obs, n_x)
    y, d : numpy.ndarray, shape (n_obs,)
    train, test : numpy.ndarray of int
        The outer fold's training and test rows (sorted, as DoubleML's ``smpls``).
    treatment : int
        0 or 1.
    quantile : float
        In (0, 1).
    coef_start_val : float
        Start of the IPW search (PQ: :func:`pq_coef_start` or the previous repetition's mean;
        CVaR: :func:`cvar_coef_start`).
    n_folds : int
        Number of inner folds (the model's ``n_folds``).
    build_g, build_m : callable
        ``() -> estimator``: a new unfitted ``ml_g`` / ``ml_m``.
    normalize_ipw : bool
    clipping_threshold : float
    cvar : bool
        CVaR's ``ml_g`` (a regressor of :func:`cvar_g_target`) instead of PQ's.
    m_given, g_given : numpy.ndarray of shape (n_obs,), optional
        The given out-of-fold predictions of ``ml_m`` / ``ml_g`` of this repetition (DoubleML's
        ``external_predictions``, DoubleMLPQ only): their fits are skipped
        (:func:`pq_fold_prelim`, :func:`pq_fold_final`).

    Returns
    -------
    QuantileFold

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``quantile`` is outside (0, 1) or ``treatment`` is not 0 or 1.
    """
    _check_quantile_options(quantile, treatment)
    prelim = pq_fold_prelim(x, d, train, test, n_folds, build_m, m_given)
    theta_ipw = pq_fold_root(
        y, d, train, prelim.m_prelim, treatment, quantile, coef_start_val, normalize_ipw,
        clipping_threshold,
    )  # fmt: skip
    g_hat = pq_fold_final(
        x, y, d, train, test, treatment, quantile, theta_ipw, build_g, cvar, g_given
    )
    return QuantileFold(g_hat, prelim.m_hat, theta_ipw)


@dataclass(frozen=True)
class PQPrelim:
    """What the start-independent part of a PQ/CVaR fold (:func:`pq_fold_prelim`) returns.

    Attributes
    ----------
    m_hat : numpy.ndarray, shape (n_test,)
        ``ml_m`` fitted on all of ``train``: its raw propensities of the outer test rows (step 5).
    m_prelim : numpy.ndarray, shape (n_train_1,)
        The inner cross-fitted propensities of the first half :math:`I_k^1`, in ``train_inds_1``
        order (step 2).
    """

    m_hat: np.ndarray
    m_prelim: np.ndarray


def pq_fold_prelim(
    x: np.ndarray,
    d: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    n_folds: int,
    build_m: Callable[[], Any],
    m_given: np.ndarray | None = None,
) -> PQPrelim:
    """Steps 1, 2 and 5 of a PQ/CVaR outer fold: the parts that do not depend on the start value.

    :func:`nested_split` of ``train`` (strata :math:`D`), ``ml_m`` cross-fitted over the inner
    folds of the first half (``predict_proba[:, 1]``), and ``ml_m`` fitted on all of ``train``
    predicting ``test`` (DoubleML 0.11.4 ``irm/pq.py`` ``_nuisance_est``).

    With ``ml_m``'s predictions given (``m_given``, DoubleMLPQ's ``external_predictions``) no
    ``ml_m`` is fitted: ``m_hat`` is ``m_given[test]`` and the preliminary propensities are
    DoubleML's ``m_hat["preds"][np.concatenate([test for _, test in smpls_prelim])]`` (same
    file and function), i.e. ``m_given`` at the inner folds' test *positions within*
    :math:`I_k^1` taken as row numbers of the whole sample (rows ``0 .. n_train_1 - 1`` in the
    inner folds' order, not the rows of :math:`I_k^1`), replicated as DoubleML 0.11.4 indexes.

    Parameters
    ----------
    x : numpy.ndarray, shape (n_obs, n_x)
    d : numpy.ndarray, shape (n_obs,)
    train, test : numpy.ndarray of int
        The outer fold's training and test rows (sorted).
    n_folds : int
        Number of inner folds.
    build_m : callable
        ``() -> estimator``: a new unfitted ``ml_m`` (not called with ``m_given``).
    m_given : numpy.ndarray of shape (n_obs,), optional
        ``ml_m``'s given out-of-fold predictions of this repetition.

    Returns
    -------
    PQPrelim
    """
    train_1, _, inner = nested_split(train, d, n_folds)
    if m_given is not None:
        given = np.asarray(m_given, dtype=np.float64)
        prelim_rows = np.concatenate([in_test for _, in_test in inner])
        return PQPrelim(given[test].copy(), given[prelim_rows])
    x1, d1 = x[train_1], d[train_1]
    m_prelim = np.full(train_1.size, np.nan)
    for in_train, in_test in inner:
        fitted = build_m().fit(x1[in_train], d1[in_train])
        m_prelim[in_test] = _proba_or_predict(fitted, x1[in_test])
    m_hat = _proba_or_predict(build_m().fit(x[train], d[train]), x[test])
    return PQPrelim(m_hat, m_prelim)


def pq_fold_root(
    y: np.ndarray,
    d: np.ndarray,
    train: np.ndarray,
    m_prelim: np.ndarray,
    treatment: int,
    quantile: float,
    coef_start_val: float,
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
) -> float:
    r"""Step 3 of a PQ/CVaR outer fold: its IPW quantile from the stored preliminary propensities.

    Redraws the fold's first half (:func:`split_halves`, deterministic) and runs
    :func:`pq_ipw_estimate` on it, searched in ``[min Y, max Y]`` over the whole sample.

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
    train : numpy.ndarray of int
        The outer fold's training rows (sorted).
    m_prelim : numpy.ndarray, shape (n_train_1,)
        :attr:`PQPrelim.m_prelim` of the same fold.
    treatment : int
    quantile : float
    coef_start_val : float
        Start of the search (see the module docstring's "Start values").
    normalize_ipw : bool
    clipping_threshold : float

    Returns
    -------
    float
        :math:`\theta^{(k)}_{\mathrm{ipw}}`.

    Raises
    ------
    fanfit.errors.InvalidJobError
        A bad ``quantile``/``treatment``, or ``m_prelim`` not of the first half's length.
    """
    train_1, _ = split_halves(train, d)
    _check_prelim_length(m_prelim, train_1.size)
    return pq_ipw_estimate(
        y[train_1], d[train_1], m_prelim, treatment, quantile, coef_start_val,
        (y.min(), y.max()), normalize_ipw, clipping_threshold,
    )  # fmt: skip


def pq_fold_final(
    x: np.ndarray,
    y: np.ndarray,
    d: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    treatment: int,
    quantile: float,
    theta_ipw: float,
    build_g: Callable[[], Any],
    cvar: bool = False,
    g_given: np.ndarray | None = None,
) -> np.ndarray:
    r"""Step 4 of a PQ/CVaR outer fold: ``ml_g`` on the second half's rows with :math:`D = d`.

    Fitted to :math:`1\{Y \le \theta_{\mathrm{ipw}}\}` (PQ, a classifier: ``predict_proba[:, 1]``)
    or to :func:`cvar_g_target` (CVaR, a regressor), predicting ``test``; the second half is
    redrawn by :func:`split_halves` (deterministic). With ``ml_g``'s predictions given
    (``g_given``, DoubleMLPQ's ``external_predictions``: DoubleML 0.11.4 ``irm/pq.py``
    ``_nuisance_est`` skips the fit) they are returned on ``test``, nothing fitted.

    Parameters
    ----------
    x : numpy.ndarray, shape (n_obs, n_x)
    y, d : numpy.ndarray, shape (n_obs,)
    train, test : numpy.ndarray of int
    treatment : int
    quantile : float
    theta_ipw : float
        The fold's IPW quantile (:func:`pq_fold_root`).
    build_g : callable
        ``() -> estimator``: a new unfitted ``ml_g`` (not called with ``g_given``).
    cvar : bool
    g_given : numpy.ndarray of shape (n_obs,), optional
        ``ml_g``'s given out-of-fold predictions of this repetition.

    Returns
    -------
    numpy.ndarray, shape (n_test,)
    """
    if g_given is not None:
        return np.asarray(g_given, dtype=np.float64)[test].copy()
    _, train_2 = split_halves(train, d)
    rows = train_2[d[train_2] == treatment]
    if cvar:
        target = cvar_g_target(y, theta_ipw, quantile)
        g_hat = build_g().fit(x[rows], target[rows]).predict(x[test])
    else:
        g_hat = _proba_or_predict(build_g().fit(x[rows], y[rows] <= theta_ipw), x[test])
    return np.asarray(g_hat, dtype=np.float64).reshape(test.size)


# ----------------------------------------------------------------------------------------------
# CVaR
# ----------------------------------------------------------------------------------------------


def cvar_coef_start(y: np.ndarray, d: np.ndarray, treatment: int, quantile: float) -> Any:
    r"""CVaR's start value of every preliminary IPW search: the mean of :math:`Y` above its ``quantile`` among :math:`D = d`.

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
    treatment : int
    quantile : float

    Returns
    -------
    numpy.floating
        In ``y``'s dtype, as DoubleML keeps it.
    """
    y_treat = y[d == treatment]
    return np.mean(y_treat[y_treat >= np.quantile(y_treat, quantile)])


def cvar_g_target(y: np.ndarray, q: float, quantile: float) -> np.ndarray:
    r"""CVaR's nuisance target :math:`\max\bigl(q, (Y - \tau q)/(1 - \tau)\bigr)` (Kallus et al. 2019, Section 5).

    ``ml_g`` of fold :math:`k` is fitted to it with :math:`q = \theta^{(k)}_{\mathrm{ipw}}`; the
    score uses :math:`q` = the mean of the fold estimates.

    Parameters
    ----------
    y : numpy.ndarray, shape (n_obs,)
    q : float
    quantile : float

    Returns
    -------
    numpy.ndarray, shape (n_obs,)
    """
    g_target_1 = np.ones_like(y) * q
    g_target_2 = (y - quantile * q) / (1 - quantile)
    return np.max(np.column_stack((g_target_1, g_target_2)), 1)


def cvar_score_elements(
    y: np.ndarray,
    d: np.ndarray,
    g_hat: np.ndarray,
    m_hat: np.ndarray,
    pq_est: float,
    treatment: int,
    quantile: float,
    normalize_ipw: bool = True,
    clipping_threshold: float = 1e-2,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of DoubleMLCVAR (linear in the CVaR :math:`\theta`).

    .. math::

        \psi_a = -1, \qquad
        \psi_b = \frac{1\{D = d\}}{\tilde m_d}\bigl(G - \hat g\bigr) + \hat g, \quad
        G = \max\Bigl(\hat q, \frac{Y - \tau \hat q}{1 - \tau}\Bigr)

    with :math:`\hat q` the mean of the fold IPW quantiles (Kallus, Mao and Uehara 2019, Section 5;
    DoubleML ``irm/cvar.py`` ``_score_elements``).

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
    g_hat, m_hat : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_g`` and propensities of ``ml_m``.
    pq_est : float
        :math:`\hat q`.
    treatment : int
    quantile : float
    normalize_ipw : bool
    clipping_threshold : float

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``quantile`` is outside (0, 1) or ``treatment`` is not 0 or 1.
    """
    _check_quantile_options(quantile, treatment)
    m = _level_propensity(m_hat, d, treatment, normalize_ipw, clipping_threshold)
    g_target = cvar_g_target(y, pq_est, quantile)
    psi_b = (d == treatment) * (g_target - g_hat) / m + g_hat
    psi_a = np.full_like(m, -1.0)
    return psi_a, psi_b


def cvar_learners(treatment: int = 1) -> tuple[NuisanceLearner, ...]:
    """The fits of DoubleMLCVAR for one treatment level: as PQ's, ``ml_g`` a regressor of :func:`cvar_g_target`.

    Parameters
    ----------
    treatment : int

    Returns
    -------
    tuple of NuisanceLearner
    """
    return _localized_learners(
        treatment, False, "max(theta_ipw_k, (y - quantile * theta_ipw_k) / (1 - quantile))"
    )
