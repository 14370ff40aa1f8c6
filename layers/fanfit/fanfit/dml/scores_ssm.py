r"""Sample selection: DoubleMLSSM's score, missing at random and nonignorable, as DoubleML 0.11.4 computes it.

The outcome :math:`Y` is observed only where :math:`S = 1`. The average treatment effect
:math:`\theta = E[Y(1) - Y(0)]` solves a score linear in :math:`\theta` (Bia, Huber and Lafférs
2024, "Double machine learning for sample selection models", Journal of Business & Economic
Statistics 42(3), Theorems 1 and 3; DoubleML ``irm/ssm.py``), with the nuisances

- :math:`\pi(D, X) = P(S = 1 | D, X)` (missing at random) or :math:`\pi(D, X, Z) = P(S = 1 | D, X, Z)`
  (nonignorable, :math:`Z` an instrument for selection): ``ml_pi``;
- :math:`m = P(D = 1 | X)` (MAR) or :math:`P(D = 1 | X, \Pi)` (nonignorable): ``ml_m``;
- :math:`g_d = E[Y | D = d, S = 1, X]` (MAR) or :math:`E[Y | D = d, S = 1, X, \Pi]`: ``ml_g_d0``, ``ml_g_d1``.

**Which fits run on which rows.** Missing at random: plain cross-fitting, each learner on the
outer fold's training rows (``ml_g_d{d}`` only on those with :math:`D = d, S = 1`), predicting the
test fold; ``ml_pi`` takes the covariates :math:`(X, D)`, the others :math:`X`.

Nonignorable (two steps inside each outer fold :math:`k`, ``_nuisance_est``):

1. The training rows :math:`I_k` are split in halves :math:`I_k^1, I_k^2` by
   :func:`fanfit.dml.quantile_search.split_halves` with strata :math:`D + 2S`.
2. ``ml_pi`` is fitted to :math:`S` on :math:`I_k^1` with covariates :math:`(X, D, Z)` and predicts
   **every** row: :math:`\hat\Pi^{(k)}`. Its test-fold predictions are the score's :math:`\hat\pi`.
3. On :math:`I_k^2`, with covariates :math:`(X, \hat\Pi^{(k)})`: ``ml_m`` is fitted to :math:`D` on all
   rows of the half, ``ml_g_d1``/``ml_g_d0`` to :math:`Y` on its rows with :math:`D = 1, S = 1` /
   :math:`D = 0, S = 1`; each predicts the test fold from :math:`(X, \hat\Pi^{(k)})`.

So a pipeline runs ``ml_pi`` first (one fit per outer fold, predicting all ``n_obs`` rows) and then
the three fits of step 3. :func:`ssm_learners` says the same declaratively.
All arrays are 1-d of shape ``(n_obs,)``.
"""

from __future__ import annotations

import numpy as np

from fanfit.dml.scores import clip_propensity
from fanfit.dml.scores_did import NuisanceLearner, all_rows, rows_where
from fanfit.errors import InvalidJobError

__all__ = ["SSM_SCORES", "ssm_learners", "ssm_score_elements"]

#: DoubleML's scores of DoubleMLSSM.
SSM_SCORES = ("missing-at-random", "nonignorable")


def _check_score(score: str) -> None:
    if score not in SSM_SCORES:
        raise InvalidJobError(f"score must be one of {SSM_SCORES} for DoubleMLSSM, got {score!r}")


def ssm_learners(score: str = "missing-at-random") -> tuple[NuisanceLearner, ...]:
    """The nuisance fits of DoubleMLSSM, by score (see the module docstring).

    Parameters
    ----------
    score : str
        ``'missing-at-random'`` or ``'nonignorable'``.

    Returns
    -------
    tuple of NuisanceLearner
        ``ml_pi``, ``ml_m``, ``ml_g_d0``, ``ml_g_d1`` (``ml_g_d*`` are clones of ``ml_g``).

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``score`` is not one of :data:`SSM_SCORES`.
    """
    _check_score(score)
    g_rows = {d: rows_where(d=d, s=1) for d in (0, 1)}
    if score == "missing-at-random":
        return (
            NuisanceLearner("ml_pi", "ml_pi", True, all_rows, "s", features="x, d"),
            NuisanceLearner("ml_m", "ml_m", True, all_rows, "d"),
            NuisanceLearner("ml_g_d0", "ml_g", None, g_rows[0], "y"),
            NuisanceLearner("ml_g_d1", "ml_g", None, g_rows[1], "y"),
        )
    after = ("ml_pi",)
    half_2 = "train_2"
    return (
        NuisanceLearner("ml_pi", "ml_pi", True, all_rows, "s", "train_1", features="x, d, z"),
        NuisanceLearner("ml_m", "ml_m", True, all_rows, "d", half_2, after, "x, ml_pi"),
        NuisanceLearner("ml_g_d0", "ml_g", None, g_rows[0], "y", half_2, after, "x, ml_pi"),
        NuisanceLearner("ml_g_d1", "ml_g", None, g_rows[1], "y", half_2, after, "x, ml_pi"),
    )


def ssm_score_elements(
    y: np.ndarray,
    d: np.ndarray,
    s: np.ndarray,
    g_hat_d0: np.ndarray,
    g_hat_d1: np.ndarray,
    pi_hat: np.ndarray,
    m_hat: np.ndarray,
    normalize_ipw: bool = False,
    clipping_threshold: float = 1e-2,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Score elements of DoubleMLSSM (both scores share them; they differ in the nuisances' fits).

    .. math::

        \psi_a = -1, \qquad
        \psi_b = w_1\frac{D S (Y - \hat g_1)}{\hat m \hat\pi} + \hat g_1
        - w_0\frac{(1 - D) S (Y - \hat g_0)}{(1 - \hat m)\hat\pi} - \hat g_0

    (Bia, Huber and Lafférs 2024, eq. (6) and Theorem 3), with :math:`w_1 = w_0 = 1`, or with
    ``normalize_ipw`` the Hajek weights :math:`w_1 = \sum D / \sum \frac{D S}{\hat\pi\hat m}` and
    :math:`w_0 = \sum (1 - D) / \sum \frac{(1 - D) S}{\hat\pi (1 - \hat m)}`. :math:`\hat m` is clipped
    to ``[c, 1 - c]``; :math:`\hat\pi` is not (DoubleML ``irm/ssm.py`` ``_score_elements``; DoubleML
    sums with Python's ``sum``, here ``numpy.sum``: the same to a few ulp).

    Parameters
    ----------
    y, d, s : numpy.ndarray, shape (n_obs,)
        Outcome (any value where ``s == 0``), binary treatment and binary selection indicator.
    g_hat_d0, g_hat_d1, pi_hat, m_hat : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions of ``ml_g_d0``, ``ml_g_d1``, ``ml_pi`` and ``ml_m``.
    normalize_ipw : bool
        Hajek weights (DoubleML's default False for SSM).
    clipping_threshold : float
        :math:`c` (default 0.01).

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)
    """
    m = clip_propensity(m_hat, clipping_threshold)
    dtreat = d == 1
    dcontrol = d == 0
    if normalize_ipw:
        weight_treat = np.sum(dtreat) / np.sum((dtreat * s) / (pi_hat * m))
        weight_control = np.sum(dcontrol) / np.sum((dcontrol * s) / (pi_hat * (1 - m)))
        psi_b1 = weight_treat * ((dtreat * s * (y - g_hat_d1)) / (m * pi_hat)) + g_hat_d1
        psi_b0 = weight_control * ((dcontrol * s * (y - g_hat_d0)) / ((1 - m) * pi_hat)) + g_hat_d0
    else:
        psi_b1 = (dtreat * s * (y - g_hat_d1)) / (m * pi_hat) + g_hat_d1
        psi_b0 = (dcontrol * s * (y - g_hat_d0)) / ((1 - m) * pi_hat) + g_hat_d0
    psi_b = psi_b1 - psi_b0
    return np.full(len(y), -1.0), psi_b
