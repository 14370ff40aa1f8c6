r"""Orthogonal signals of heterogeneous treatment effects, from stored out-of-fold predictions.

The best linear predictor (BLP) of the conditional average treatment effect (CATE) and the policy
tree regress or classify an *orthogonal signal* on a basis or on features (Semenova and
Chernozhukov 2021, "Debiased machine learning of conditional average treatment effects and other
causal functions", The Econometrics Journal 24(2); Athey and Wager 2021, "Policy learning with
observational data", Econometrica 89(1); DoubleML user guide, "Heterogeneous treatment effects").
The signals are computed here, in numpy, from the predictions a job stored, as DoubleML 0.11.4
computes them from its own (``DoubleMLIRM.cate``: ``psi_b`` of the ATE score;
``DoubleMLPLR._partial_out``): no learner is fitted again. The regressions themselves are
DoubleML's (``DoubleMLBLP``, ``DoubleMLPolicyTree``; :mod:`fanfit.client.doubleml.heterogeneity`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fanfit.dml.scores.plm_irm import clip_propensity, irm_score_elements
from fanfit.errors import InvalidJobError

__all__ = ["irm_orthogonal_signal", "plr_partialled_out"]


def _per_rep(preds: Mapping[str, np.ndarray], keys: tuple[str, ...], n_obs: int) -> int:
    """The number of repetitions of ``preds[keys]``, each checked to be ``(n_obs, n_rep)``."""
    shapes = set()
    for key in keys:
        if key not in preds:
            raise InvalidJobError(
                f"The out-of-fold predictions have no {key!r}; the orthogonal signal needs "
                f"{', '.join(keys)}."
            )
        arr = np.asarray(preds[key])
        if arr.ndim != 2 or arr.shape[0] != n_obs:
            raise InvalidJobError(
                f"Predictions {key!r} have shape {arr.shape}; expected (n_obs={n_obs}, n_rep)."
            )
        shapes.add(arr.shape)
    if len(shapes) != 1:
        raise InvalidJobError(f"Predictions {', '.join(keys)} differ in shape: {sorted(shapes)}.")
    return int(next(iter(shapes))[1])


def irm_orthogonal_signal(
    y: np.ndarray,
    d: np.ndarray,
    preds: Mapping[str, np.ndarray],
    trimming_threshold: float,
    normalize_ipw: bool = False,
) -> np.ndarray:
    r"""The doubly robust signal of the IRM's ATE score, per repetition.

    .. math::

        \tilde Y_i = \hat g(1, X_i) - \hat g(0, X_i)
                     + \frac{D_i\,(Y_i - \hat g(1, X_i))}{\hat m(X_i)}
                     - \frac{(1 - D_i)\,(Y_i - \hat g(0, X_i))}{1 - \hat m(X_i)},

    with :math:`\hat m` clipped to ``[trimming_threshold, 1 - trimming_threshold]`` (and
    normalized when ``normalize_ipw``): :math:`\psi_b` of the ATE score
    (:func:`fanfit.dml.scores.plm_irm.irm_score_elements`), whose conditional mean given :math:`X` is the
    CATE (Semenova and Chernozhukov 2021, Section 2; DoubleML ``DoubleMLIRM.cate``, which takes
    ``psi_elements['psi_b']``).

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
        Outcome and binary treatment.
    preds : mapping of str to numpy.ndarray of shape (n_obs, n_rep)
        Out-of-fold ``ml_g0``, ``ml_g1`` and ``ml_m`` (propensities before clipping) of one treatment.
    trimming_threshold : float
        Clipping threshold of the propensities, in (0, 0.5).
    normalize_ipw : bool
        Normalize the inverse probability weights (:func:`fanfit.dml.scores.plm_irm.normalize_ipw_weights`).

    Returns
    -------
    numpy.ndarray, shape (n_obs, n_rep)

    Raises
    ------
    InvalidJobError
        A prediction missing or of the wrong shape.
    """
    y = np.asarray(y, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    n_rep = _per_rep(preds, ("ml_g0", "ml_g1", "ml_m"), y.shape[0])
    signal = np.full((y.shape[0], n_rep), np.nan)
    for i_rep in range(n_rep):
        m_hat = clip_propensity(np.asarray(preds["ml_m"])[:, i_rep], trimming_threshold)
        _, signal[:, i_rep] = irm_score_elements(
            y,
            d,
            np.asarray(preds["ml_g0"])[:, i_rep],
            np.asarray(preds["ml_g1"])[:, i_rep],
            m_hat,
            "ATE",
            normalize_ipw,
        )
    return signal


def plr_partialled_out(
    y: np.ndarray,
    d: np.ndarray,
    preds: Mapping[str, np.ndarray],
    score: str,
    theta: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""The PLR's residuals :math:`\tilde Y` and :math:`\tilde D`, per repetition.

    ``'partialling out'``: :math:`\tilde Y = Y - \hat\ell(X)`; ``'IV-type'``:
    :math:`\tilde Y = Y - \hat\theta_r \hat m(X) - \hat g(X)`; both: :math:`\tilde D = D - \hat m(X)`.
    The BLP of the CATE :math:`\theta(X) \approx b(X)^\top\beta` regresses :math:`\tilde Y` on
    :math:`b(X)\,\tilde D` (Semenova and Chernozhukov 2021, Section 3, partially linear model;
    DoubleML ``DoubleMLPLR._partial_out`` and ``cate``).

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
        Outcome and treatment.
    preds : mapping of str to numpy.ndarray of shape (n_obs, n_rep)
        Out-of-fold ``ml_l`` and ``ml_m`` (``'partialling out'``) or ``ml_m`` and ``ml_g``
        (``'IV-type'``) of one treatment.
    score : str
        ``'partialling out'`` or ``'IV-type'``.
    theta : numpy.ndarray of shape (n_rep,), or None
        The estimate per repetition (``all_coef[i_treat]``); needed by ``'IV-type'``.

    Returns
    -------
    y_tilde, d_tilde : numpy.ndarray, shape (n_obs, n_rep)

    Raises
    ------
    InvalidJobError
        An unknown score, ``theta`` missing for ``'IV-type'``, or a prediction missing or of the
        wrong shape.
    """
    y_col = np.asarray(y, dtype=np.float64).reshape(-1, 1)
    d_col = np.asarray(d, dtype=np.float64).reshape(-1, 1)
    n_obs = y_col.shape[0]
    if score == "partialling out":
        _per_rep(preds, ("ml_l", "ml_m"), n_obs)
        y_tilde = y_col - np.asarray(preds["ml_l"])
    elif score == "IV-type":
        n_rep = _per_rep(preds, ("ml_m", "ml_g"), n_obs)
        if theta is None or np.shape(theta) != (n_rep,):
            raise InvalidJobError(
                f"The IV-type score's residual needs theta, the estimate per repetition, of shape "
                f"({n_rep},); got {None if theta is None else np.shape(theta)}."
            )
        y_tilde = y_col - np.asarray(theta) * np.asarray(preds["ml_m"]) - np.asarray(preds["ml_g"])
    else:
        raise InvalidJobError(
            f"Invalid PLR score {score!r}; choose 'partialling out' or 'IV-type'."
        )
    d_tilde = d_col - np.asarray(preds["ml_m"])
    return y_tilde, d_tilde
