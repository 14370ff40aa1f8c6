r"""Difference-in-differences scores: DoubleMLDID (panel) and DoubleMLDIDCS (repeated cross-sections).

Both scores are linear in the average treatment effect on the treated (ATTE) :math:`\theta`,
:math:`\psi = \psi_a\,\theta + \psi_b`, so :func:`fanfit.dml.scores.plm_irm.est_coef` and
:func:`fanfit.dml.scores.plm_irm.var_est` solve them. The formulas are the doubly robust DID estimators
of Sant'Anna and Zhao (2020), "Doubly robust difference-in-differences estimators", Journal of
Econometrics 219(1), eqs. (3.1) (panel) and (3.4) (repeated cross-sections), in the
"in-sample normalization" (Hajek) and unnormalized forms, as DoubleML 0.11.4 writes them
(``did/did.py`` and ``did/did_cs.py``, ``_score_elements``). The order of the floating point
operations is DoubleML's so that the numbers agree bit for bit.

This module also holds :class:`NuisanceLearner`, the declarative description of one nuisance
fit that the model registry reads (used by :mod:`~fanfit.dml.scores.ssm` and :mod:`~fanfit.dml.scores.quantile` too).
All arrays are 1-d of shape ``(n_obs,)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from fanfit.errors import InvalidJobError

__all__ = [
    "DID_CS_LEARNERS",
    "DID_LEARNERS",
    "DID_SCORES",
    "NuisanceLearner",
    "all_rows",
    "did_cs_learners",
    "did_cs_score_elements",
    "did_learners",
    "did_score_elements",
    "rows_where",
]

#: DoubleML's scores of DoubleMLDID and DoubleMLDIDCS.
DID_SCORES = ("observational", "experimental")

#: The arrays a row mask or a target reads: ``"y"``, ``"d"`` (binary treatment), ``"t"`` (time,
#: DIDCS), ``"s"`` (selection, SSM), ``"z"`` (instrument, SSM nonignorable and LPQ).
Arrays = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class NuisanceLearner:
    """One nuisance learner of a model, as a registry reads it.

    Attributes
    ----------
    name : str
        DoubleML's name of the nuisance, the key of ``predictions`` (e.g. ``'ml_g_d0_t1'``).
    learner : str
        The constructor argument whose learner is cloned for it (``'ml_g'``, ``'ml_m'``, ...).
    classifier : bool or None
        True: a classifier, predictions are ``predict_proba(x)[:, 1]``; False: a regressor
        (``predict``); None: as the user's learner is (a classifier is allowed only for a binary
        outcome, DoubleML's ``_check_learner(..., regressor=True, classifier=True)``).
    rows : callable
        ``rows(arrays) -> numpy.ndarray`` of bool, shape (n_obs,): the rows it may be fitted on. The
        fit of a fold uses the fold's training rows where the mask is True (DoubleML's
        ``_get_cond_smpls``: ``intersect1d(where(mask), train)``) and predicts on the whole test fold.
    target : str
        The array it is fitted to (a key of ``arrays``), or a description of a derived target.
    subsample : str
        Which training rows of an outer fold it uses before ``rows`` applies: ``'train'`` (all of
        them, plain cross-fitting) or a nested split the model's docstring describes.
    after : tuple of str
        The learners whose predictions this fit needs first (its target is derived from them);
        empty for a fit that can run in the first stage.
    features : str
        Its covariates, comma-separated: ``'x'`` (the model's covariates), or with ``d``, ``z`` or
        another learner's predictions appended as columns in that order (e.g. ``'x, d, z'``,
        ``'x, ml_pi'``).
    """

    name: str
    learner: str
    classifier: bool | None
    rows: Callable[[Arrays], np.ndarray]
    target: str
    subsample: str = "train"
    after: tuple[str, ...] = ()
    features: str = "x"


def all_rows(arrays: Arrays) -> np.ndarray:
    """The row mask of a learner fitted on every training row: all True, shape (n_obs,)."""
    return np.ones(np.shape(arrays["d"]), dtype=bool)


def rows_where(**conditions: int) -> Callable[[Arrays], np.ndarray]:
    """The row mask ``arrays[k] == v`` for every ``k=v`` given, e.g. ``rows_where(d=0, t=1)``.

    Parameters
    ----------
    **conditions : int
        Array name (``d``, ``t``, ``s``, ``z``) and the value its rows must have.

    Returns
    -------
    callable
        ``rows(arrays) -> numpy.ndarray`` of bool, shape (n_obs,).
    """

    def rows(arrays: Arrays) -> np.ndarray:
        mask = np.ones(np.shape(arrays["d"]), dtype=bool)
        for key, value in conditions.items():
            mask &= np.asarray(arrays[key]) == value
        return mask

    return rows


def _check_score(score: str) -> None:
    if score not in DID_SCORES:
        raise InvalidJobError(f"score must be one of {DID_SCORES} for a DID model, got {score!r}")


def did_learners(score: str = "observational") -> tuple[NuisanceLearner, ...]:
    r"""The nuisance learners of DoubleMLDID (panel data, two periods).

    ``ml_g0`` and ``ml_g1`` are clones of ``ml_g`` fitted to the outcome (for DoubleMLDID the
    outcome column already is the difference :math:`Y_1 - Y_0`) on the training rows with
    :math:`D = 0` and :math:`D = 1`; ``ml_m`` (observational score only) is the propensity
    classifier of :math:`D` on all training rows. DoubleML fits ``ml_g1`` for both scores although
    the observational score does not read it (``did/did.py``, ``_nuisance_est``).

    Parameters
    ----------
    score : str
        ``'observational'`` or ``'experimental'``.

    Returns
    -------
    tuple of NuisanceLearner

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``score`` is not one of :data:`DID_SCORES`.
    """
    _check_score(score)
    learners = [
        NuisanceLearner("ml_g0", "ml_g", None, rows_where(d=0), "y"),
        NuisanceLearner("ml_g1", "ml_g", None, rows_where(d=1), "y"),
    ]
    if score == "observational":
        learners.append(NuisanceLearner("ml_m", "ml_m", True, all_rows, "d"))
    return tuple(learners)


def did_cs_learners(score: str = "observational") -> tuple[NuisanceLearner, ...]:
    r"""The nuisance learners of DoubleMLDIDCS (repeated cross-sections, two periods).

    ``ml_g_d{a}_t{b}`` is a clone of ``ml_g`` fitted to :math:`Y` on the training rows with
    :math:`D = a, T = b` (``_get_cond_smpls_2d``); ``ml_m`` (observational only) is the propensity
    classifier of :math:`D` on all training rows (``did/did_cs.py``, ``_nuisance_est``).

    Parameters
    ----------
    score : str
        ``'observational'`` or ``'experimental'``.

    Returns
    -------
    tuple of NuisanceLearner

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``score`` is not one of :data:`DID_SCORES`.
    """
    _check_score(score)
    learners = [
        NuisanceLearner(f"ml_g_d{a}_t{b}", "ml_g", None, rows_where(d=a, t=b), "y")
        for a, b in ((0, 0), (0, 1), (1, 0), (1, 1))
    ]
    if score == "observational":
        learners.append(NuisanceLearner("ml_m", "ml_m", True, all_rows, "d"))
    return tuple(learners)


#: The learners of each DID score, by score.
DID_LEARNERS = {score: did_learners(score) for score in DID_SCORES}
DID_CS_LEARNERS = {score: did_cs_learners(score) for score in DID_SCORES}


def did_score_elements(
    y: np.ndarray,
    d: np.ndarray,
    g_hat0: np.ndarray,
    g_hat1: np.ndarray | None,
    m_hat: np.ndarray | None,
    score: str = "observational",
    in_sample_normalization: bool = True,
    clipping_threshold: float = 1e-2,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of DoubleMLDID, the doubly robust DID estimator for panel data.

    With :math:`\Delta Y` the outcome difference (``y``), :math:`\hat g_0, \hat g_1` the
    out-of-fold predictions of :math:`E[\Delta Y | D = d, X]`, :math:`\hat m` the clipped
    propensity and :math:`\hat p = \bar D`:

    observational, in-sample normalization (Sant'Anna and Zhao 2020, eq. 3.1 with Hajek weights):

    .. math::

        \psi_a = -\frac{D}{\bar D}, \qquad
        \psi_b = \Bigl(\frac{D}{\bar D} - \frac{w}{\bar w}\Bigr)(\Delta Y - \hat g_0),
        \quad w = (1 - D)\frac{\hat m}{1 - \hat m};

    observational, unnormalized:

    .. math::

        \psi_a = -\frac{D}{\hat p}, \qquad
        \psi_b = \frac{D - \hat m}{\hat p (1 - \hat m)}(\Delta Y - \hat g_0);

    experimental (:math:`\hat m` unused; :math:`\hat p` replaced by :math:`\bar D` when normalized,
    where also :math:`(D - \hat p)/(\hat p(1 - \hat p))` becomes :math:`D/\bar D - (1 - D)/\overline{1 - D}`):

    .. math::

        \psi_a = -1, \qquad
        \psi_b = \Bigl(\frac{D}{\hat p} - 1\Bigr)\hat g_0 + \Bigl(1 - \frac{D}{\hat p}\Bigr)\hat g_1
        + \frac{D - \hat p}{\hat p (1 - \hat p)}(\Delta Y - \hat g_0).

    Source: DoubleML 0.11.4 ``did/did.py`` (``DoubleMLDID._score_elements``; ``m_hat`` clipped to
    ``[c, 1 - c]`` in ``_nuisance_est``, done here too: clipping twice changes nothing).

    Parameters
    ----------
    y : numpy.ndarray, shape (n_obs,)
        Outcome difference :math:`Y_1 - Y_0`.
    d : numpy.ndarray, shape (n_obs,)
        Binary treatment (0/1).
    g_hat0, g_hat1 : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_g0`` and ``ml_g1`` (``g_hat1`` unused by the
        observational score, may be None there).
    m_hat : numpy.ndarray, shape (n_obs,) or None
        Out-of-fold propensities of ``ml_m`` (observational only; None for experimental).
    score : str
        ``'observational'`` or ``'experimental'``.
    in_sample_normalization : bool
        Hajek-normalized weights (DoubleML's default True).
    clipping_threshold : float
        :math:`c`, the propensity clipping threshold (DoubleML's default 0.01).

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``score`` is unknown or a prediction the score needs is None.
    """
    _check_score(score)
    p_hat = np.full_like(d, d.mean(), dtype="float64")
    resid_d0 = y - g_hat0
    if score == "observational":
        if m_hat is None:
            raise InvalidJobError(
                "m_hat (ml_m's predictions) is required for score='observational'"
            )
        m_hat = np.clip(m_hat, clipping_threshold, 1 - clipping_threshold)
        if in_sample_normalization:
            weight_psi_a = np.divide(d, np.mean(d))
            propensity_weight = np.multiply(1.0 - d, np.divide(m_hat, 1.0 - m_hat))
            weight_resid_d0 = np.divide(d, np.mean(d)) - np.divide(
                propensity_weight, np.mean(propensity_weight)
            )
        else:
            weight_psi_a = np.divide(d, p_hat)
            weight_resid_d0 = np.divide(d - m_hat, np.multiply(p_hat, 1.0 - m_hat))
        psi_b_1 = np.zeros_like(y)
    else:
        if g_hat1 is None:
            raise InvalidJobError(
                "g_hat1 (ml_g1's predictions) is required for score='experimental'"
            )
        if in_sample_normalization:
            weight_psi_a = np.ones_like(y)
            weight_g0 = np.divide(d, np.mean(d)) - 1.0
            weight_g1 = 1.0 - np.divide(d, np.mean(d))
            weight_resid_d0 = np.divide(d, np.mean(d)) - np.divide(1.0 - d, np.mean(1.0 - d))
        else:
            weight_psi_a = np.ones_like(y)
            weight_g0 = np.divide(d, p_hat) - 1.0
            weight_g1 = 1.0 - np.divide(d, p_hat)
            weight_resid_d0 = np.divide(d - p_hat, np.multiply(p_hat, 1.0 - p_hat))
        psi_b_1 = np.multiply(weight_g0, g_hat0) + np.multiply(weight_g1, g_hat1)
    psi_a = -1.0 * weight_psi_a
    psi_b = psi_b_1 + np.multiply(weight_resid_d0, resid_d0)
    return psi_a, psi_b


def did_cs_score_elements(
    y: np.ndarray,
    d: np.ndarray,
    t: np.ndarray,
    g_hat_d0_t0: np.ndarray,
    g_hat_d0_t1: np.ndarray,
    g_hat_d1_t0: np.ndarray,
    g_hat_d1_t1: np.ndarray,
    m_hat: np.ndarray | None,
    score: str = "observational",
    in_sample_normalization: bool = True,
    clipping_threshold: float = 1e-2,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of DoubleMLDIDCS, the doubly robust DID estimator for repeated cross-sections.

    With :math:`\hat g_{dt}` the out-of-fold predictions of :math:`E[Y | D = d, T = t, X]`,
    :math:`\hat p = \bar D`, :math:`\hat\lambda = \bar T` and the residuals
    :math:`r_{dt} = Y - \hat g_{dt}`:

    .. math::

        \psi_a = -w_a, \qquad
        \psi_b = w_a(\hat g_{11} - \hat g_{10} - \hat g_{01} + \hat g_{00})
        + w_{11} r_{11} - w_{10} r_{10} - w_{01} r_{01} + w_{00} r_{00},

    observational: :math:`w_a = D/\hat p`, :math:`w_{1t} = D 1\{T=t\}/(\hat p\,\lambda_t)`,
    :math:`w_{0t} = (1 - D) 1\{T=t\}\,\hat m/(1 - \hat m)/(\hat p\,\lambda_t)` with
    :math:`\lambda_1 = \hat\lambda, \lambda_0 = 1 - \hat\lambda`;
    experimental: :math:`w_a = 1`, :math:`w_{dt} = 1\{D=d, T=t\}/(P(D=d)\lambda_t)`.
    With in-sample normalization each :math:`w_{dt}` is divided by its own mean instead and
    :math:`w_a = D/\bar D` (observational) (Sant'Anna and Zhao 2020, eq. 3.4 and Section 3.2).

    Source: DoubleML 0.11.4 ``did/did_cs.py`` (``DoubleMLDIDCS._score_elements``; ``m_hat`` is
    clipped to ``[c, 1 - c]`` as in ``_nuisance_est``).

    Parameters
    ----------
    y, d, t : numpy.ndarray, shape (n_obs,)
        Outcome, binary treatment group and binary period (0 pre, 1 post).
    g_hat_d0_t0, g_hat_d0_t1, g_hat_d1_t0, g_hat_d1_t1 : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_g_d0_t0`` ... ``ml_g_d1_t1``.
    m_hat : numpy.ndarray, shape (n_obs,) or None
        Out-of-fold propensities of ``ml_m`` (observational only).
    score : str
        ``'observational'`` or ``'experimental'``.
    in_sample_normalization : bool
        Hajek-normalized weights (default True).
    clipping_threshold : float
        :math:`c` (default 0.01).

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``score`` is unknown or ``m_hat`` is None for the observational score.
    """
    _check_score(score)
    p_hat = np.full_like(d, d.mean(), dtype="float64")
    lambda_hat = np.full_like(t, t.mean(), dtype="float64")
    resid_d0_t0 = y - g_hat_d0_t0
    resid_d0_t1 = y - g_hat_d0_t1
    resid_d1_t0 = y - g_hat_d1_t0
    resid_d1_t1 = y - g_hat_d1_t1

    d1t1 = np.multiply(d, t)
    d1t0 = np.multiply(d, 1.0 - t)
    d0t1 = np.multiply(1.0 - d, t)
    d0t0 = np.multiply(1.0 - d, 1.0 - t)

    if score == "observational":
        if m_hat is None:
            raise InvalidJobError(
                "m_hat (ml_m's predictions) is required for score='observational'"
            )
        m_hat = np.clip(m_hat, clipping_threshold, 1 - clipping_threshold)
        prop_weighting = np.divide(m_hat, 1.0 - m_hat)
        if in_sample_normalization:
            weight_psi_a = np.divide(d, np.mean(d))
            weight_resid_d1_t1 = np.divide(d1t1, np.mean(d1t1))
            weight_resid_d1_t0 = -1.0 * np.divide(d1t0, np.mean(d1t0))
            unscaled_d0_t1 = np.multiply(d0t1, prop_weighting)
            weight_resid_d0_t1 = -1.0 * np.divide(unscaled_d0_t1, np.mean(unscaled_d0_t1))
            unscaled_d0_t0 = np.multiply(d0t0, prop_weighting)
            weight_resid_d0_t0 = np.divide(unscaled_d0_t0, np.mean(unscaled_d0_t0))
        else:
            weight_psi_a = np.divide(d, p_hat)
            weight_resid_d1_t1 = np.divide(d1t1, np.multiply(p_hat, lambda_hat))
            weight_resid_d1_t0 = -1.0 * np.divide(d1t0, np.multiply(p_hat, 1.0 - lambda_hat))
            weight_resid_d0_t1 = -1.0 * np.multiply(
                np.divide(d0t1, np.multiply(p_hat, lambda_hat)), prop_weighting
            )
            weight_resid_d0_t0 = np.multiply(
                np.divide(d0t0, np.multiply(p_hat, 1.0 - lambda_hat)), prop_weighting
            )
    else:
        weight_psi_a = np.ones_like(y)
        if in_sample_normalization:
            weight_resid_d1_t1 = np.divide(d1t1, np.mean(d1t1))
            weight_resid_d1_t0 = -1.0 * np.divide(d1t0, np.mean(d1t0))
            weight_resid_d0_t1 = -1.0 * np.divide(d0t1, np.mean(d0t1))
            weight_resid_d0_t0 = np.divide(d0t0, np.mean(d0t0))
        else:
            weight_resid_d1_t1 = np.divide(d1t1, np.multiply(p_hat, lambda_hat))
            weight_resid_d1_t0 = -1.0 * np.divide(d1t0, np.multiply(p_hat, 1.0 - lambda_hat))
            weight_resid_d0_t1 = -1.0 * np.divide(d0t1, np.multiply(1.0 - p_hat, lambda_hat))
            weight_resid_d0_t0 = np.divide(d0t0, np.multiply(1.0 - p_hat, 1.0 - lambda_hat))
    weight_g_d1_t1 = weight_psi_a
    weight_g_d1_t0 = -1.0 * weight_psi_a
    weight_g_d0_t1 = -1.0 * weight_psi_a
    weight_g_d0_t0 = weight_psi_a

    psi_a = -1.0 * weight_psi_a
    psi_b_1 = (
        np.multiply(weight_g_d1_t1, g_hat_d1_t1)
        + np.multiply(weight_g_d1_t0, g_hat_d1_t0)
        + np.multiply(weight_g_d0_t0, g_hat_d0_t0)
        + np.multiply(weight_g_d0_t1, g_hat_d0_t1)
    )
    psi_b_2 = (
        np.multiply(weight_resid_d1_t1, resid_d1_t1)
        + np.multiply(weight_resid_d1_t0, resid_d1_t0)
        + np.multiply(weight_resid_d0_t0, resid_d0_t0)
        + np.multiply(weight_resid_d0_t1, resid_d0_t1)
    )
    psi_b = psi_b_1 + psi_b_2
    return psi_a, psi_b
