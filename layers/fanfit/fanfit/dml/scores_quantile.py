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
from :func:`cvar_coef_start`. So for exact parity the preliminary estimates of a PQ/LPQ model are
computed repetition after repetition.

Propensities are clipped to ``[c, 1 - c]`` (DoubleML's default ``PSProcessorConfig``: no
calibration) and optionally Hajek-normalised. All arrays are 1-d of shape ``(n_obs,)`` unless stated.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fanfit.dml.scores import clip_propensity, normalize_ipw_weights
from fanfit.dml.scores_did import NuisanceLearner, all_rows, rows_where
from fanfit.errors import InvalidJobError

__all__ = [
    "NonlinearSolution",
    "QTEResult",
    "cvar_coef_start",
    "cvar_g_target",
    "cvar_learners",
    "cvar_score_elements",
    "get_bracket_guess",
    "kde_at_zero",
    "lpq_comp_prob",
    "lpq_ipw_estimate",
    "lpq_learners",
    "lpq_solve",
    "nested_split",
    "pq_coef_start",
    "pq_ipw_estimate",
    "pq_learners",
    "pq_solve",
    "qte_aggregate",
    "solve_bounded_root",
    "solve_ipw_score",
    "split_halves",
]

#: Where the preliminary fits of a nested split run (NuisanceLearner.subsample).
INNER_CV = "train_1, cross-fitted over StratifiedKFold(n_folds) inner folds"
HALF_1 = "train_1"
HALF_2 = "train_2"

ScoreFn = Callable[[float], float]


@dataclass(frozen=True)
class NonlinearSolution:
    """The solution of one repetition of a nonlinear score.

    Attributes
    ----------
    coef : float
        :math:`\\hat\\theta`, the root of the mean score.
    psi : numpy.ndarray, shape (n_obs,)
        :math:`\\psi(W_i; \\hat\\theta, \\hat\\eta)`.
    psi_deriv : numpy.ndarray, shape (n_obs,)
        The score's derivative in :math:`\\theta` at :math:`\\hat\\theta` (for PQ and LPQ one kernel
        density value, repeated: DoubleML stores it so).
    """

    coef: float
    psi: np.ndarray
    psi_deriv: np.ndarray


def _check_quantile_options(quantile: float, treatment: int) -> None:
    if not 0.0 < float(quantile) < 1.0:
        raise InvalidJobError(f"quantile must lie in (0, 1), got {quantile!r}")
    if treatment not in (0, 1):
        raise InvalidJobError(f"treatment must be 0 or 1, got {treatment!r}")


# ----------------------------------------------------------------------------------------------
# The nested split and the searches DoubleML runs (utils/_estimation.py)
# ----------------------------------------------------------------------------------------------


def split_halves(train_inds: np.ndarray, strata: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split an outer fold's training rows in two stratified halves, as DoubleML's nested models do.

    ``train_test_split(train_inds, test_size=0.5, random_state=42, stratify=strata[train_inds])``
    (DoubleML ``irm/pq.py``, ``irm/lpq.py``, ``irm/cvar.py``, ``irm/ssm.py``; scikit-learn is
    imported when called).

    Parameters
    ----------
    train_inds : numpy.ndarray of int, shape (n_train,)
        The outer fold's training rows.
    strata : numpy.ndarray, shape (n_obs,)
        :math:`D` (PQ, CVaR), :math:`D + 2Z` (LPQ) or :math:`D + 2S` (SSM nonignorable).

    Returns
    -------
    train_inds_1, train_inds_2 : numpy.ndarray of int
        Row indices of the two halves, in the order the fits see them.
    """
    from sklearn.model_selection import train_test_split

    train_inds_1, train_inds_2 = train_test_split(
        train_inds, test_size=0.5, random_state=42, stratify=strata[train_inds]
    )
    return train_inds_1, train_inds_2


def nested_split(
    train_inds: np.ndarray, strata: np.ndarray, n_folds: int
) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Split an outer fold's training rows in two halves (:func:`split_halves`) and the first half in inner folds.

    The inner folds are ``StratifiedKFold(n_splits=n_folds).split(X=train_inds_1,
    y=strata[train_inds_1])``, as DoubleML's PQ, LPQ and CVaR draw them.

    Parameters
    ----------
    train_inds : numpy.ndarray of int, shape (n_train,)
        The outer fold's training rows.
    strata : numpy.ndarray, shape (n_obs,)
        :math:`D` (PQ, CVaR) or :math:`D + 2Z` (LPQ).
    n_folds : int
        The number of inner folds (DoubleML uses the model's ``n_folds``).

    Returns
    -------
    train_inds_1, train_inds_2 : numpy.ndarray of int
        Row indices of the two halves (``train_inds_1`` in the order the inner fits see them).
    smpls_prelim : list of (train, test)
        Inner folds as positions within ``train_inds_1``.
    """
    from sklearn.model_selection import StratifiedKFold

    train_inds_1, train_inds_2 = split_halves(train_inds, strata)
    smpls_prelim = list(
        StratifiedKFold(n_splits=n_folds).split(X=train_inds_1, y=strata[train_inds_1])
    )
    return train_inds_1, train_inds_2, smpls_prelim


def get_bracket_guess(
    score: ScoreFn, coef_start: float, coef_bounds: tuple[float, float]
) -> tuple[bool, tuple[float, float]]:
    """Widen a bracket around ``coef_start`` until the score changes sign (DoubleML ``_get_bracket_guess``).

    The bracket is ``start -/+ delta * (upper - lower) / 2`` clipped to the bounds, for
    ``delta = 0.1, 0.2, ..., 1.0``.

    Parameters
    ----------
    score : callable
        ``score(theta) -> float``.
    coef_start : float
    coef_bounds : (float, float)

    Returns
    -------
    signs_different : bool
    bracket : (float, float)
    """
    if isinstance(coef_start, np.ndarray):
        coef_start = coef_start.item()
    max_bracket_length = coef_bounds[1] - coef_bounds[0]
    b_guess = coef_bounds
    delta = 0.1
    s_different = False
    while (not s_different) & (delta <= 1.0):
        a = np.maximum(coef_start - delta * max_bracket_length / 2, coef_bounds[0])
        b = np.minimum(coef_start + delta * max_bracket_length / 2, coef_bounds[1])
        b_guess = (float(a), float(b))
        f_a = score(b_guess[0])
        f_b = score(b_guess[1])
        s_different = bool(np.sign(f_a) != np.sign(f_b))
        delta += 0.1
    return s_different, b_guess


def solve_ipw_score(ipw_score: ScoreFn, bracket_guess: tuple[float, float]) -> float:
    """The preliminary IPW estimate: Brent's minimisation of ``|ipw_score|`` from a bracket (DoubleML ``_solve_ipw_score``).

    Parameters
    ----------
    ipw_score : callable
    bracket_guess : (float, float)

    Returns
    -------
    float
    """
    from scipy.optimize import minimize_scalar

    def abs_ipw_score(theta: float) -> float:
        return abs(ipw_score(theta))

    res = minimize_scalar(abs_ipw_score, bracket=bracket_guess, method="brent")
    return float(res.x)


def solve_bounded_root(
    score: ScoreFn, coef_start_val: float, coef_bounds: tuple[float, float]
) -> float:
    """Root of a mean score within finite bounds (DoubleML ``NonLinearScoreMixin._est_coef``, bounded branch).

    Brent's root search (``brentq``) in the bracket of :func:`get_bracket_guess`; where no sign
    change is found, a new start from L-BFGS-B on the squared score, and failing that the
    bounded minimum of the score (or of its negative) with a warning, as DoubleML does.

    Parameters
    ----------
    score : callable
        ``score(theta) -> float``, the mean score.
    coef_start_val : float
    coef_bounds : (float, float)

    Returns
    -------
    float
    """
    from scipy.optimize import fmin_l_bfgs_b, root_scalar

    signs_different, bracket_guess = get_bracket_guess(score, coef_start_val, coef_bounds)
    if signs_different:
        return float(root_scalar(score, bracket=bracket_guess, method="brentq").root)

    def score_squared(theta: float) -> float:
        return float(np.power(score(theta), 2))

    alt_coef_start, _, _ = fmin_l_bfgs_b(
        score_squared, coef_start_val, approx_grad=True, bounds=[coef_bounds]
    )
    signs_different, bracket_guess = get_bracket_guess(score, alt_coef_start, coef_bounds)
    if signs_different:
        return float(root_scalar(score, bracket=bracket_guess, method="brentq").root)
    if np.sign(score(alt_coef_start)) > 0:
        theta_hat_array, score_val, _ = fmin_l_bfgs_b(
            score, coef_start_val, approx_grad=True, bounds=[coef_bounds]
        )
        warnings.warn(
            f"Could not find a root of the score function; minimum score value {score_val} "
            f"at theta = {theta_hat_array.item()}.",
            stacklevel=2,
        )
        return float(theta_hat_array.item())

    def neg_score(theta: float) -> float:
        return -score(theta)

    theta_hat_array, neg_score_val, _ = fmin_l_bfgs_b(
        neg_score, coef_start_val, approx_grad=True, bounds=[coef_bounds]
    )
    warnings.warn(
        f"Could not find a root of the score function; maximum score value {-1 * neg_score_val} "
        f"at theta = {theta_hat_array.item()}.",
        stacklevel=2,
    )
    return float(theta_hat_array.item())


def kde_at_zero(u: np.ndarray, weights: np.ndarray) -> float:
    r"""Weighted Gaussian kernel density of ``u`` at 0 with Silverman's bandwidth.

    .. math::

        \hat f(0) = \frac{1}{h} \sum_i \tilde w_i\, \varphi(u_i / h), \quad
        \tilde w_i = \frac{w_i}{\sum_j w_j}, \quad
        h = 0.9 \min\bigl(s_u, \mathrm{IQR}_u / 1.349\bigr)\, n^{-1/5}

    (:math:`s_u` with ``ddof=1``; the IQR term only when positive; Silverman 1986, eq. 3.31). This is
    what DoubleML's ``_default_kde`` gets from statsmodels' ``KDEUnivariate.fit(kernel='gau',
    bw='silverman', weights=w, fft=False).evaluate(0)``, written in numpy (statsmodels is not in
    the Lambda layer). The bandwidth ignores the weights, as statsmodels' does.

    Parameters
    ----------
    u : numpy.ndarray, shape (n_obs,)
        :math:`Y - \hat\theta`.
    weights : numpy.ndarray, shape (n_obs,)
        Score weights (may be negative, e.g. LPQ's).

    Returns
    -------
    float
    """
    x = np.asarray(u, dtype=float).ravel()
    n = len(x)
    sorted_x = np.sort(x)
    iqr = (_score_at_percentile(sorted_x, 75) - _score_at_percentile(sorted_x, 25)) / 1.349
    std_dev = np.std(x, axis=0, ddof=1)
    sigma = np.minimum(std_dev, iqr) if iqr > 0 else std_dev
    bw = 0.9 * sigma * n ** (-0.2)
    w = np.asarray(weights, dtype=float)
    w = w / w.sum()
    k = 0.3989422804014327 * np.exp(-(((x[:, None] - 0) / bw) ** 2) / 2.0)
    return float((1 / bw * np.sum(k.T * w, axis=1))[0])


def _score_at_percentile(sorted_x: np.ndarray, per: float) -> float:
    """scipy.stats.scoreatpercentile(x, per) ('fraction' interpolation) of a sorted 1-d array."""
    idx = per / 100.0 * (sorted_x.shape[0] - 1)
    i = int(idx)
    if i == idx:
        return float(sorted_x[i])
    weights = np.array([(i + 1 - idx), (idx - i)], float)
    return float(np.add.reduce(sorted_x[i : i + 2] * weights) / weights.sum())


def _adjusted_propensity(
    m_hat: np.ndarray, d: np.ndarray, normalize_ipw: bool, clipping_threshold: float
) -> np.ndarray:
    m = clip_propensity(m_hat, clipping_threshold)
    if normalize_ipw:
        m = normalize_ipw_weights(m, d)
    return m


def _level_propensity(
    m_hat: np.ndarray, d: np.ndarray, treatment: int, normalize_ipw: bool, clipping_threshold: float
) -> np.ndarray:
    """:math:`\tilde m_d`: the clipped (and normalised) propensity of treatment level ``treatment``."""
    m = _adjusted_propensity(m_hat, d, normalize_ipw, clipping_threshold)
    return 1 - m if treatment == 0 else m


def _ipw_root(ipw_score: ScoreFn, coef_start_val: float, coef_bounds: tuple[float, float]) -> float:
    _, bracket_guess = get_bracket_guess(ipw_score, coef_start_val, coef_bounds)
    return solve_ipw_score(ipw_score, bracket_guess)


def _solve_localized(
    y: np.ndarray,
    psi_of: Callable[[float], np.ndarray],
    coef_start_val: float,
    deriv_weights: np.ndarray,
) -> NonlinearSolution:
    """Root of the mean of ``psi_of`` in ``[min y, max y]``, with the KDE derivative at the root."""

    def score(theta: float) -> float:
        return float(np.mean(psi_of(theta)))

    coef = solve_bounded_root(score, coef_start_val, (y.min(), y.max()))
    deriv = kde_at_zero(y - coef, deriv_weights)
    return NonlinearSolution(coef, psi_of(coef), np.full(len(y), deriv))


# ----------------------------------------------------------------------------------------------
# PQ
# ----------------------------------------------------------------------------------------------


def pq_coef_start(y: np.ndarray, d: np.ndarray, treatment: int, quantile: float) -> float:
    """The first start value of PQ and LPQ: ``np.quantile(y[d == treatment], quantile)`` (DoubleML ``__init__``).

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
    treatment : int
    quantile : float

    Returns
    -------
    float
    """
    return float(np.quantile(y[d == treatment], quantile))


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
    :func:`fanfit.dml.scores.var_est` (``psi``, ``psi_deriv``).

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

    def psi_of(coef: float) -> np.ndarray:
        return ind_d * ((y <= coef) - g_hat) / m + g_hat - quantile

    return _solve_localized(y, psi_of, coef_start_val, ind_d / m)


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


# ----------------------------------------------------------------------------------------------
# CVaR
# ----------------------------------------------------------------------------------------------


def cvar_coef_start(y: np.ndarray, d: np.ndarray, treatment: int, quantile: float) -> float:
    r"""CVaR's start value of every preliminary IPW search: the mean of :math:`Y` above its ``quantile`` among :math:`D = d`.

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
    treatment : int
    quantile : float

    Returns
    -------
    float
    """
    y_treat = y[d == treatment]
    return float(np.mean(y_treat[y_treat >= np.quantile(y_treat, quantile)]))


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


# ----------------------------------------------------------------------------------------------
# LPQ
# ----------------------------------------------------------------------------------------------


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

    def psi_of(coef: float) -> np.ndarray:
        score1 = g_du_z1_hat - g_du_z0_hat
        score2 = (z / m_z) * (ind_d * (y <= coef) - g_du_z1_hat)
        score3 = (1 - z) / (1 - m_z) * (ind_d * (y <= coef) - g_du_z0_hat)
        return sign * (score1 + score2 - score3) / comp_prob - quantile

    score_weights = sign * ((z / m_z) - (1 - z) / (1 - m_z)) * ind_d / comp_prob
    return _solve_localized(y, psi_of, coef_start_val, score_weights)


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


# ----------------------------------------------------------------------------------------------
# QTE
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QTEResult:
    """Quantile treatment effects over quantiles and repetitions.

    Attributes
    ----------
    all_coef, all_se : numpy.ndarray, shape (n_quantiles, n_rep)
    coef, se : numpy.ndarray, shape (n_quantiles,)
    scaled_psi : numpy.ndarray, shape (n_obs, n_quantiles, n_rep)
    """

    all_coef: np.ndarray
    all_se: np.ndarray
    coef: np.ndarray
    se: np.ndarray
    scaled_psi: np.ndarray


def qte_aggregate(
    all_coef_0: np.ndarray,
    all_coef_1: np.ndarray,
    psi_0: np.ndarray,
    psi_1: np.ndarray,
    psi_deriv_0: np.ndarray,
    psi_deriv_1: np.ndarray,
) -> QTEResult:
    r"""DoubleMLQTE's effects: treated minus control per quantile, with the difference's standard error.

    Each quantile's two models (treatment 1 and 0; PQ, LPQ or CVaR, fitted on the same folds) give
    :math:`\hat\theta_{d,r}` and the scaled scores :math:`\tilde\psi_{d,r} = \psi_{d,r} / \overline{\partial\psi_{d,r}}`.
    Per repetition :math:`r`:

    .. math::

        \hat\Delta_r = \hat\theta_{1,r} - \hat\theta_{0,r}, \qquad
        \hat\sigma_r^2 = \frac{1}{N} \overline{(\tilde\psi_{1,r} - \tilde\psi_{0,r})^2},

    then the median aggregation over repetitions of
    :func:`fanfit.dml.scores.aggregate_coefs_and_ses` (DoubleML ``irm/qte.py`` ``fit`` and
    ``DoubleMLFramework.__sub__``; Chernozhukov et al. 2018, Section 3.4).

    Parameters
    ----------
    all_coef_0, all_coef_1 : numpy.ndarray, shape (n_quantiles, n_rep)
        Per-repetition estimates of the control (0) and treated (1) models.
    psi_0, psi_1, psi_deriv_0, psi_deriv_1 : numpy.ndarray, shape (n_obs, n_quantiles, n_rep)
        Their scores and score derivatives (for CVaR, :math:`\psi_a` is the derivative).

    Returns
    -------
    QTEResult
    """
    from fanfit.dml.scores import aggregate_coefs_and_ses

    scaled_1 = np.divide(psi_1, np.mean(psi_deriv_1, axis=0))
    scaled_0 = np.divide(psi_0, np.mean(psi_deriv_0, axis=0))
    scaled_psi = scaled_1 - scaled_0
    all_coef = all_coef_1 - all_coef_0
    n_obs = scaled_psi.shape[0]
    all_se = np.sqrt(np.divide(np.mean(np.square(scaled_psi), axis=0), n_obs))
    coef, se = aggregate_coefs_and_ses(all_coef, all_se)
    return QTEResult(all_coef, all_se, coef, se, scaled_psi)
