r"""What the quantile scores share: the nested split, DoubleML's searches and the kernel density.

:func:`split_halves` and :func:`nested_split` draw the halves and the inner folds of an outer
fold's training rows; :func:`get_bracket_guess`, :func:`solve_ipw_score` and
:func:`solve_bounded_root` are DoubleML 0.11.4's searches (``utils/_estimation.py``,
``NonLinearScoreMixin._est_coef``), :func:`kde_at_zero` the score derivative of PQ and LPQ. Also
here: :class:`NonlinearSolution`, the clipped propensity of a treatment level and the labels of
the nested fits' samples. The models are in :mod:`fanfit.dml.scores.quantile` (PQ, CVaR, QTE; its
docstring says how the nested fits run) and :mod:`fanfit.dml.scores.lpq` (LPQ);
:mod:`fanfit.dml.scores.quantile` re-exports this module's public names and LPQ's.

scikit-learn and SciPy's optimiser are imported when a function needs them. All arrays are 1-d of
shape ``(n_obs,)`` unless stated.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fanfit.dml.scores.plm_irm import clip_propensity, normalize_ipw_weights
from fanfit.errors import InvalidJobError

__all__ = [
    "NonlinearSolution",
    "get_bracket_guess",
    "kde_at_zero",
    "localized_outcome",
    "nested_split",
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


def _check_prelim_length(prelim: np.ndarray, n_train_1: int) -> None:
    """A fold's stored preliminary propensities must cover its first half (one value per row)."""
    if prelim.shape[-1] != n_train_1:
        raise InvalidJobError(
            f"The fold's preliminary propensities have {prelim.shape[-1]} values, but its first "
            f"half has {n_train_1} rows; they belong to another fold or another data set."
        )


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
    # a numpy float64, as DoubleML keeps it: compared with a float32 outcome (``y <= theta``) it
    # stays float64, where a Python float would be rounded to float32 first (NumPy's NEP 50)
    return np.float64(res.x)


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


def _proba_or_predict(estimator: Any, x: np.ndarray) -> np.ndarray:
    """DoubleML's ``_predict_zero_one_propensity``: ``predict_proba[:, 1]``, or ``predict`` when the
    fit saw one class only."""
    proba = estimator.predict_proba(x)
    if proba.shape[1] == 2:
        return np.asarray(proba[:, 1], dtype=np.float64)
    return np.asarray(estimator.predict(x), dtype=np.float64)


def _ipw_root(ipw_score: ScoreFn, coef_start_val: float, coef_bounds: tuple[float, float]) -> float:
    _, bracket_guess = get_bracket_guess(ipw_score, coef_start_val, coef_bounds)
    return solve_ipw_score(ipw_score, bracket_guess)


def localized_outcome(y: np.ndarray) -> tuple[np.ndarray, tuple[Any, Any]]:
    """The outcome and the bounds of a final root search, as DoubleML's NonLinearScoreMixin has them.

    DoubleML stores its score elements, the outcome among them, in float64 arrays
    (``psi_elements['y']``), while its ``_coef_bounds`` are ``(y.min(), y.max())`` of the data's
    outcome, in the outcome's dtype (float32 for a Stata ``float`` column); the bracket search
    of the root computes in that dtype.

    Parameters
    ----------
    y : numpy.ndarray, shape (n_obs,)
        The outcome as the data hold it (:attr:`fanfit.dml.DMLSpec.dtypes`).

    Returns
    -------
    y64 : numpy.ndarray of float64, shape (n_obs,)
    coef_bounds : (numpy.floating, numpy.floating)
        In ``y``'s dtype.
    """
    return np.asarray(y, dtype=np.float64), (y.min(), y.max())


def _solve_localized(
    y: np.ndarray,
    psi_of: Callable[[float], np.ndarray],
    coef_start_val: float,
    deriv_weights: np.ndarray,
    coef_bounds: tuple[Any, Any],
) -> NonlinearSolution:
    """Root of the mean of ``psi_of`` in ``coef_bounds`` (DoubleML's ``_coef_bounds``: the
    outcome's minimum and maximum in its own dtype, :func:`localized_outcome`), with the KDE
    derivative at the root; ``y`` float64 as DoubleML's ``psi_elements['y']``."""

    def score(theta: float) -> float:
        return float(np.mean(psi_of(theta)))

    coef = solve_bounded_root(score, coef_start_val, coef_bounds)
    deriv = kde_at_zero(y - coef, deriv_weights)
    return NonlinearSolution(coef, psi_of(coef), np.full(len(y), deriv))
