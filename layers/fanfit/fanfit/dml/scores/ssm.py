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

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fanfit.dml.model_checks import DMLData, DMLSpec, column
from fanfit.dml.quantile_search import _proba_or_predict, split_halves
from fanfit.dml.scores.did import NuisanceLearner, all_rows, rows_where
from fanfit.dml.scores.plm_irm import clip_propensity, est_coef
from fanfit.errors import InvalidJobError

__all__ = [
    "SSM_KEYS",
    "SSM_SCORES",
    "ssm_learners",
    "ssm_nonignorable_fold",
    "ssm_nonignorable_run",
    "ssm_score_elements",
    "ssm_solve",
]

#: DoubleMLSSM's prediction keys, in its ``params_names`` order.
SSM_KEYS = ("ml_g_d0", "ml_g_d1", "ml_pi", "ml_m")

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


def ssm_nonignorable_fold(
    x: np.ndarray,
    y: np.ndarray,
    d: np.ndarray,
    s: np.ndarray,
    z: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    build_pi: Callable[[], Any],
    build_m: Callable[[], Any],
    build_g: Callable[[str], Any],
) -> dict[str, np.ndarray]:
    r"""One outer fold's nested fits of DoubleMLSSM's ``'nonignorable'`` score (module docstring).

    As DoubleML 0.11.4 ``irm/ssm.py`` ``DoubleMLSSM._nuisance_est`` (nonignorable branch), fold
    by fold: the training rows are split in halves (:func:`fanfit.dml.quantile_search.split_halves`,
    strata :math:`D + 2S`, ``random_state=42``); ``ml_pi`` is fitted to :math:`S` on the first
    half with covariates :math:`(X, D, Z)` and predicts every row (``predict_proba[:, 1]``, or
    ``predict`` when the half holds one class: DoubleML's ``_predict_zero_one_propensity``);
    with covariates :math:`(X, \hat\Pi)` on the second half, ``ml_m`` is fitted to :math:`D` on
    all its rows and ``ml_g`` to :math:`Y` on its rows with :math:`D = 1, S = 1` (``ml_g_d1``)
    and :math:`D = 0, S = 1` (``ml_g_d0``), rows in increasing order (DoubleML's
    ``np.intersect1d``), each predicting the test rows (``ml_g`` with ``predict``, as DoubleML
    does here even for a classifier). Every fit uses a fresh estimator from its builder (DoubleML
    clones one learner per fit). ``ml_m`` is returned unclipped.

    Parameters
    ----------
    x : numpy.ndarray, shape (n_obs, n_x)
        Covariates.
    y, d, s : numpy.ndarray, shape (n_obs,)
        Outcome, binary treatment, binary selection indicator.
    z : numpy.ndarray, shape (n_obs,) or (n_obs, 1)
        The instrument for selection.
    train, test : numpy.ndarray of int
        The outer fold's training and test rows (DoubleML's ``smpls[i_fold]``).
    build_pi, build_m : callable
        ``() -> estimator``: new unfitted ``ml_pi`` and ``ml_m`` (classifiers).
    build_g : callable
        ``(key) -> estimator``: a new unfitted ``ml_g`` for nuisance ``key`` (``'ml_g_d1'``,
        ``'ml_g_d0'``: DoubleML builds one model per nuisance and fold, with its parameters).

    Returns
    -------
    dict of str to numpy.ndarray, shape (n_test,)
        ``ml_g_d0``, ``ml_g_d1``, ``ml_pi``, ``ml_m`` (:data:`SSM_KEYS`): predictions for ``test``,
        in its order.
    """
    strata = d + 2 * s
    train_1, train_2 = split_halves(np.asarray(train), strata)
    dxz = np.column_stack((x, d, z))
    pi_all = _proba_or_predict(build_pi().fit(dxz[train_1], s[train_1]), dxz)
    xpi = np.column_stack((x, pi_all))
    out = {
        "ml_pi": pi_all[test],
        "ml_m": _proba_or_predict(build_m().fit(xpi[train_2], d[train_2]), xpi[test]),
    }
    for level in (1, 0):
        rows = np.intersect1d(np.where(d == level)[0], np.intersect1d(np.where(s == 1)[0], train_2))
        fitted = build_g(f"ml_g_d{level}").fit(xpi[rows], y[rows])
        out[f"ml_g_d{level}"] = np.asarray(fitted.predict(xpi[test]), dtype=np.float64)
    return {k: out[k] for k in SSM_KEYS}


def ssm_nonignorable_run(
    spec: DMLSpec,
    data: DMLData,
    train: np.ndarray,
    test: np.ndarray,
    i_treat: int,
    build: Callable[[str], Any],
    start: float,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """The ``run`` of SSM's ``'nonignorable'`` fold procedure (:class:`fanfit.dml.models.FoldProcedure`):
    :func:`ssm_nonignorable_fold` on the spec's columns; no fold scalars, ``start`` unused.

    Raises
    ------
    fanfit.errors.InvalidDataError
        Data without the selection column or the instrument.
    """
    s, z = column(spec, data, "s", i_treat), column(spec, data, "z", i_treat)
    preds = ssm_nonignorable_fold(
        data.xd(i_treat), data.y, data.d[:, i_treat], s, z, train, test,
        lambda: build("ml_pi"), lambda: build("ml_m"), build,
    )  # fmt: skip
    return preds, {}


def ssm_start(spec: DMLSpec, data: DMLData, i_treat: int) -> float:
    """The ``start`` of SSM's fold procedure: 0.0 (its score is linear; nothing is searched)."""
    return 0.0


def ssm_solve(
    spec: DMLSpec, data: DMLData, p: Mapping[str, np.ndarray], i_treat: int,
    means: Mapping[str, float],
) -> tuple[float, np.ndarray, np.ndarray]:  # fmt: skip
    r"""The ``solve`` of SSM's fold procedure: the linear score's
    :math:`\hat\theta = -\bar\psi_b / \bar\psi_a` (:func:`ssm_score_elements`,
    :func:`fanfit.dml.scores.plm_irm.est_coef`), :math:`\psi = \psi_a\hat\theta + \psi_b` and
    :math:`\psi_a`, as DoubleML's ``_est_causal_pars`` (``means`` unused).

    Returns
    -------
    coef : float
    psi, psi_deriv : numpy.ndarray, shape (n_obs,)
    """
    s = column(spec, data, "s", i_treat)
    psi_a, psi_b = ssm_score_elements(
        data.y, data.d[:, i_treat], s, p["ml_g_d0"], p["ml_g_d1"], p["ml_pi"], p["ml_m"],
        spec.normalize_ipw, spec.trimming_threshold,
    )  # fmt: skip
    coef = est_coef(psi_a, psi_b)
    return coef, psi_a * coef + psi_b, psi_a


def ssm_targets(
    spec: DMLSpec, data: DMLData, p: Mapping[str, np.ndarray], i_treat: int
) -> dict[str, np.ndarray]:
    """The ``targets`` of SSM's fold procedure: none (no SSM target depends on a fold scalar)."""
    return {}
