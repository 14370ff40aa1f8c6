r"""Logistic partially linear regression (DoubleMLLPLR), as DoubleML 0.11.4 computes it.

The model (Liu, Zhang and Zhou 2021, "Double/debiased machine learning for logistic partially
linear model", The Econometrics Journal 24(3); DoubleML ``plm/lplr.py``) is

.. math::

    P(Y = 1 | D, X) = \operatorname{expit}(D\theta_0 + r_0(X)),

with a binary outcome :math:`Y`. Its nuisances are :math:`M_0(D, X) = P(Y = 1 | D, X)` (``ml_M``,
a classifier), :math:`m_0(X) = E[D | X]` (``ml_m``; score ``'nuisance_space'``: on the rows with
:math:`Y = 0`), :math:`a_0(X) = E[D | X]` (``ml_a``, by default a clone of ``ml_m``) and
:math:`t_0(X) = E[\operatorname{logit} M_0(D, X) | X]` (``ml_t``, a regressor).

**Which fits run on which rows** (DoubleML's ``_nuisance_est`` with its double sample splitting):
in each outer fold :math:`k` with training rows :math:`I_k`, the rows :math:`I_k` are split again
in ``n_folds_inner`` inner folds (``smpls_inner``). ``ml_M`` (on :math:`(D, X)`) and ``ml_a`` (on
:math:`X`) are cross-fitted on these inner folds, which gives inner predictions on every row of
:math:`I_k`; each inner model also predicts the outer test rows, and the outer prediction is the
sum of those ``n_folds_inner`` predictions divided by ``n_folds`` (DoubleML's
``_double_dml_cv_predict`` divides by the number of *outer* folds, so with
``n_folds_inner != n_folds`` its ``ml_M`` and ``ml_a`` are that multiple of the inner models'
mean; fanfit computes what DoubleML computes). From the inner predictions on :math:`I_k`,
:math:`W = \operatorname{logit}(\operatorname{clip}(\hat M, 10^{-8}, 1 - 10^{-8}))` and
:math:`\tilde D = D - \hat a`, the fold's preliminary slope is
:math:`\beta_k = \sum_{I_k} \tilde D W / \sum_{I_k} \tilde D^2`; ``ml_t`` is fitted to :math:`W`
on :math:`I_k` and predicts the test rows; ``ml_m`` is fitted to :math:`D` on :math:`I_k`
(``'nuisance_space'``: only its rows with :math:`Y = 0`). On the test rows,
:math:`\hat r = \hat t - \beta_k \hat a`. So every fit of a fold depends on that fold's rows only:
one fit unit per outer fold runs them all (:func:`lplr_fold`).

**Score and solution.** With :math:`\tilde D = D - \hat m(X)`, score ``'nuisance_space'`` is

.. math::

    \psi(W; \theta, \eta) = \operatorname{expit}(-\hat r)\,\bigl(Y e^{-\theta D} \tilde D
    - \tilde D (1 - Y) e^{\hat r}\bigr),

and ``'instrument'`` is :math:`\psi = (Y - \operatorname{expit}(\theta D + \hat r))\,\tilde D`;
both are nonlinear in :math:`\theta`, which solves :math:`\frac1N\sum_i\psi_i(\theta) = 0` by
Newton's method (``scipy.optimize.root_scalar``) from the mean of :math:`\beta_k` over all rows
(DoubleML's ``NonLinearScoreMixin._est_coef`` with ``_coef_start_val = np.average(beta)``); the
variance is :func:`fanfit.dml.scores.plm_irm.var_est` of :math:`\psi` and
:math:`\partial\psi/\partial\theta`. The order of the floating point operations is DoubleML's,
so that the numbers agree bit for bit. All arrays are 1-d of shape ``(n_obs,)`` unless stated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fanfit.dml.folds import DEFAULT_N_FOLDS_INNER, ids_to_inner_smpls
from fanfit.dml.model_checks import DMLData, DMLSpec, _one_treatment
from fanfit.errors import InvalidJobError

if TYPE_CHECKING:
    from fanfit.dml.model_types import Build

__all__ = [
    "BETA",
    "LPLR_KEYS",
    "LPLR_SCORES",
    "LPLRFold",
    "check_lplr_spec",
    "lplr_fold",
    "lplr_run",
    "lplr_score",
    "lplr_score_deriv",
    "lplr_solve",
    "lplr_solve_fold_means",
    "lplr_start",
    "lplr_targets",
]

#: The scores of DoubleMLLPLR (the first is DoubleML's default).
LPLR_SCORES = ("nuisance_space", "instrument")

#: The outer-fold predictions one fold's unit returns, in DoubleML's ``params_names`` order less
#: the inner ones: ``ml_m``, ``ml_a``, ``ml_t``, ``ml_M``.
LPLR_KEYS = ("ml_m", "ml_a", "ml_t", "ml_M")

#: The fold scalar a fold's unit returns: its preliminary slope :math:`\beta_k`.
BETA = "beta"

#: DoubleML clips the inner ``ml_M`` predictions to ``[1e-8, 1 - 1e-8]`` before the logit.
_M_CLIP = 1e-8


def _check_score(score: str) -> None:
    if score not in LPLR_SCORES:
        raise InvalidJobError(
            f"Invalid score {score!r} for model 'lplr'; valid scores: "
            + ", ".join(repr(s) for s in LPLR_SCORES)
            + "."
        )


@dataclass(frozen=True)
class LPLRFold:
    """One outer fold's results (:func:`lplr_fold`).

    Attributes
    ----------
    preds : dict of str to numpy.ndarray, shape (n_test,)
        ``ml_m``, ``ml_a``, ``ml_t``, ``ml_M`` (:data:`LPLR_KEYS`): the outer predictions of the
        fold's test rows, in their order.
    beta : float
        The fold's preliminary slope :math:`\\beta_k`.
    """

    preds: dict[str, np.ndarray]
    beta: float


def _encoded(target: np.ndarray) -> np.ndarray:
    """Class labels as scikit-learn's ``LabelEncoder`` gives them (0, 1, ... in sorted order)."""
    return np.searchsorted(np.unique(target), target)


def _predict(model: Any, x: np.ndarray, proba: bool) -> np.ndarray:
    if proba:
        return np.asarray(model.predict_proba(x)[:, 1], dtype=np.float64)
    return np.asarray(model.predict(x), dtype=np.float64)


def _double_cv(
    build: Callable[[int], Any], x: np.ndarray, target: np.ndarray,
    inner: Sequence[tuple[Any, Any]], test: np.ndarray, n_folds: int, proba: bool,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """DoubleML's ``_double_dml_cv_predict`` for one outer fold: the inner cross-fitted
    predictions (every row, NaN outside the inner test rows) and the outer test rows' predictions
    (the inner models' sum over ``n_folds``); inner fit ``k`` is ``build(k)``."""
    fit_target = _encoded(target) if proba else target
    models = [build(k).fit(x[tr], fit_target[tr]) for k, (tr, _) in enumerate(inner)]
    inner_preds = np.full(target.shape[0], np.nan)
    for model, (_, te) in zip(models, inner, strict=True):
        inner_preds[te] = _predict(model, x[te], proba)
    outer = np.zeros(test.size, dtype=float)
    for model in models:
        outer += _predict(model, x[test], proba)
    return inner_preds, outer / n_folds


def lplr_fold(
    x: np.ndarray,
    y: np.ndarray,
    d: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    inner: Sequence[tuple[np.ndarray, np.ndarray]],
    n_folds: int,
    score: str,
    build_M: Callable[[int], Any],  # noqa: N803 - DoubleML's name
    build_t: Callable[[], Any],
    build_m: Callable[[], Any],
    build_a: Callable[[int], Any],
    m_proba: bool,
    a_proba: bool,
) -> LPLRFold:
    r"""One outer fold's nested fits of DoubleMLLPLR (module docstring), as DoubleML 0.11.4's
    ``DoubleMLLPLR._nuisance_est`` computes them for that fold.

    ``ml_M`` is fitted to the label-encoded :math:`Y` on :math:`(D, X)` (``np.hstack``, the
    treatment first) and ``ml_a`` to :math:`D` on :math:`X` on each inner fold's training rows;
    each predicts its inner test rows and the outer test rows (``predict_proba[:, 1]`` for a
    classifier, else ``predict``); :math:`\beta_k` from the inner predictions on ``train``;
    ``ml_t`` fitted to :math:`W` on ``train``; ``ml_m`` fitted to :math:`D` on ``train`` (score
    ``'nuisance_space'``: its rows with :math:`Y = 0`, in increasing order). Every fit uses a
    new estimator from its builder (DoubleML clones one learner per fit).

    Parameters
    ----------
    x : numpy.ndarray, shape (n_obs, n_x)
        Covariates.
    y, d : numpy.ndarray, shape (n_obs,)
        Binary outcome (0/1) and the treatment.
    train, test : numpy.ndarray of int
        The outer fold's training and test rows, sorted (DoubleML's ``smpls[i_fold]``).
    inner : sequence of (train_inner, test_inner)
        The fold's inner folds (DoubleML's ``smpls_inner[i_fold]``), row indices into the data
        partitioning ``train``.
    n_folds : int
        The number of outer folds (DoubleML divides the outer predictions by it).
    score : str
        ``'nuisance_space'``; ``'instrument'`` fits ``ml_m`` with weights from *every* fold's
        ``ml_M``, which one fold cannot compute: :class:`~fanfit.errors.InvalidJobError`.
    build_M, build_a : callable
        ``(k) -> estimator``: a new unfitted ``ml_M`` (classifier) / ``ml_a`` for inner fold
        ``k`` (DoubleML's ``_double_dml_cv_predict`` sets the parameters of outer fold ``k``
        there: :mod:`fanfit.dml.nuisance_params`).
    build_t, build_m : callable
        ``() -> estimator``: new unfitted ``ml_t`` (regressor) and ``ml_m`` estimators.
    m_proba, a_proba : bool
        Whether ``ml_m`` / ``ml_a`` are classifiers (``predict_proba``), as DoubleML decides
        (a classifier on a binary treatment).

    Returns
    -------
    LPLRFold

    Raises
    ------
    fanfit.errors.InvalidJobError
        An unknown score, or ``'instrument'``.
    """
    from scipy.special import logit

    _check_score(score)
    if score != "nuisance_space":
        raise InvalidJobError(
            "Model 'lplr' runs score 'nuisance_space' only: 'instrument' weights ml_m's fit by "
            "every fold's ml_M predictions (DoubleML's M_hat * (1 - M_hat)), which a fold's unit "
            "cannot compute."
        )
    xd = np.hstack((d.reshape(-1, 1), x))
    m_inner, m_outer = _double_cv(build_M, xd, y, inner, test, n_folds, proba=True)
    a_inner, a_outer = _double_cv(build_a, x, d, inner, test, n_folds, proba=a_proba)
    m_iteration = np.clip(m_inner[train], _M_CLIP, 1 - _M_CLIP)
    w = logit(m_iteration)
    d_tilde = (d - a_inner)[train]
    beta = np.sum(d_tilde * w) / np.sum(d_tilde**2)
    t_model = build_t().fit(x[train], w)
    t_hat = np.asarray(t_model.predict(x[test]), dtype=np.float64)
    rows = train[y[train] == 0]
    m_target = _encoded(d) if m_proba else d
    m_hat = _predict(build_m().fit(x[rows], m_target[rows]), x[test], m_proba)
    preds = {"ml_m": m_hat, "ml_a": a_outer, "ml_t": t_hat, "ml_M": m_outer}
    return LPLRFold(preds={k: preds[k] for k in LPLR_KEYS}, beta=float(beta))


def _elements(
    y: np.ndarray, d: np.ndarray, m_hat: np.ndarray, r_hat: np.ndarray
) -> dict[str, np.ndarray]:
    """DoubleML's ``DoubleMLLPLR._score_elements``."""
    from scipy.special import expit

    d_tilde = d - m_hat
    return {
        "y": y,
        "d": d,
        "d_tilde": d_tilde,
        "r_hat": r_hat,
        "psi_hat": expit(-r_hat),
        "score_const": d_tilde * (1 - y) * np.exp(r_hat),
    }


def lplr_score(elements: dict[str, np.ndarray], coef: float, score: str) -> np.ndarray:
    r"""The score :math:`\psi(W; \theta, \eta)` at ``coef`` (module docstring; DoubleML's
    ``_compute_score``), from :func:`_elements`' arrays.

    Returns
    -------
    numpy.ndarray, shape (n_obs,)
    """
    from scipy.special import expit

    e = elements
    if score == "nuisance_space":
        score_1 = e["y"] * np.exp(-coef * e["d"]) * e["d_tilde"]
        return e["psi_hat"] * (score_1 - e["score_const"])
    return (e["y"] - expit(coef * e["d"] + e["r_hat"])) * e["d_tilde"]


def lplr_score_deriv(elements: dict[str, np.ndarray], coef: float, score: str) -> np.ndarray:
    r""":math:`\partial\psi/\partial\theta` at ``coef`` (DoubleML's ``_compute_score_deriv``).

    Returns
    -------
    numpy.ndarray, shape (n_obs,)
    """
    from scipy.special import expit

    e = elements
    if score == "nuisance_space":
        deriv_1 = -e["y"] * np.exp(-coef * e["d"]) * e["d"]
        return e["psi_hat"] * e["d_tilde"] * deriv_1
    p = expit(coef * e["d"] + e["r_hat"])
    return -e["d"] * p * (1 - p) * e["d_tilde"]


def lplr_solve(
    y: np.ndarray,
    d: np.ndarray,
    m_hat: np.ndarray,
    a_hat: np.ndarray,
    t_hat: np.ndarray,
    beta: np.ndarray,
    score: str,
) -> tuple[float, np.ndarray, np.ndarray]:
    r"""One repetition's estimate: :math:`\hat r = \hat t - \beta\hat a`, the score elements, and
    Newton's root of the mean score from ``np.average(beta)`` (DoubleML 0.11.4
    ``NonLinearScoreMixin._est_coef``: ``root_scalar(..., method='newton')``; it warns, as DoubleML
    does, when the search does not converge).

    Parameters
    ----------
    y, d : numpy.ndarray, shape (n_obs,)
        Binary outcome and treatment.
    m_hat, a_hat, t_hat : numpy.ndarray, shape (n_obs,)
        The out-of-fold predictions of ``ml_m``, ``ml_a``, ``ml_t``.
    beta : numpy.ndarray, shape (n_obs,)
        Each fold's :math:`\beta_k` on its test rows.
    score : str
        ``'nuisance_space'`` or ``'instrument'``.

    Returns
    -------
    coef : float
    psi, psi_deriv : numpy.ndarray, shape (n_obs,)
        The score and its derivative at ``coef`` (for :func:`fanfit.dml.scores.plm_irm.var_est`).

    Raises
    ------
    fanfit.errors.InvalidJobError
        An unknown score.
    """
    import warnings

    from scipy.optimize import root_scalar

    _check_score(score)
    r_hat = t_hat - beta * a_hat
    elements = _elements(y, d, m_hat, r_hat)
    start = np.average(beta)
    res = root_scalar(
        lambda theta: np.mean(lplr_score(elements, theta, score)),
        x0=start,
        fprime=lambda theta: np.mean(lplr_score_deriv(elements, theta, score)),
        method="newton",
    )
    coef = res.root
    if not res.converged:
        warnings.warn(
            f"Could not find a root of the LPLR score (flag: {res.flag}); theta = {coef}.",
            stacklevel=2,
        )
    return (
        float(coef),
        lplr_score(elements, coef, score),
        lplr_score_deriv(elements, coef, score),
    )


# --------------------------------------------------------------------------- the registry's entry
def check_lplr_spec(spec: DMLSpec) -> None:
    """The rules of ``lplr``: one treatment, no instruments, no clusters, score
    ``'nuisance_space'`` (``'instrument'`` weights ``ml_m`` by every fold's ``ml_M``: see
    :func:`lplr_fold`).

    Raises
    ------
    fanfit.errors.InvalidJobError
        Naming the option or column that is wrong.
    """
    _one_treatment(spec, "")
    if spec.z_cols:
        raise InvalidJobError(
            f"Model 'lplr' takes no instruments, but z_cols is {list(spec.z_cols)}; leave it empty."
        )
    if spec.cluster_cols:
        raise InvalidJobError(
            "Model 'lplr' does not take cluster_cols (DoubleML's DoubleMLLPLR has no "
            "cluster-robust version); leave cluster_cols empty."
        )
    if spec.score == "instrument":
        raise InvalidJobError(
            "Model 'lplr' runs score 'nuisance_space' only: score 'instrument' fits ml_m with "
            "weights M_hat * (1 - M_hat) from every outer fold's ml_M predictions, which one "
            "fold's fit unit cannot compute."
        )


def lplr_run(
    spec: DMLSpec,
    data: DMLData,
    train: np.ndarray,
    test: np.ndarray,
    i_treat: int,
    build: Build,
    start: float,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """The ``run`` of LPLR's fold procedure (:class:`fanfit.dml.models.FoldProcedure`):
    :func:`lplr_fold` on the spec's columns and the unit's inner folds (``data.inner_folds``, the
    unit's own column: :func:`fanfit.dml.unit_fits.fit_predict`); the fold scalar :data:`BETA`;
    ``start`` unused.

    Raises
    ------
    fanfit.errors.InvalidJobError
        No inner folds in ``data``.
    fanfit.errors.InvalidFoldsError
        Inner folds that do not partition the training rows.
    """
    if data.inner_folds is None:
        raise InvalidJobError("Model 'lplr' needs the unit's inner folds (data.inner_folds).")
    n_inner = spec.n_folds_inner or DEFAULT_N_FOLDS_INNER
    inner = ids_to_inner_smpls(data.inner_folds[:, 0], np.asarray(train), n_inner)
    fold = lplr_fold(
        data.xd(i_treat), data.y, data.d[:, i_treat], train, test, inner, spec.n_folds,
        spec.score, lambda k: build("ml_M", k), lambda: build("ml_t"), lambda: build("ml_m"),
        lambda k: build("ml_a", k), spec.learners["ml_m"].is_classifier,
        spec.learners["ml_a"].is_classifier,
    )  # fmt: skip
    return fold.preds, {BETA: fold.beta}


def lplr_start(spec: DMLSpec, data: DMLData, i_treat: int) -> float:
    """The ``start`` of LPLR's fold procedure: 0.0 (unused; the root search starts from the mean
    of the folds' :data:`BETA`, in :func:`lplr_solve_fold_means`)."""
    return 0.0


def lplr_solve_fold_means(
    spec: DMLSpec, data: DMLData, p: Mapping[str, np.ndarray], i_treat: int,
    means: Mapping[str, float],
) -> tuple[float, np.ndarray, np.ndarray]:  # fmt: skip
    """The ``solve`` of LPLR's fold procedure: :func:`lplr_solve` of one repetition's predictions
    and its :data:`BETA` array (each fold's value on its test rows; ``means`` unused: DoubleML
    starts from ``np.average`` over the rows).

    Returns
    -------
    coef : float
    psi, psi_deriv : numpy.ndarray, shape (n_obs,)
    """
    return lplr_solve(
        data.y, data.d[:, i_treat], p["ml_m"], p["ml_a"], p["ml_t"], p[BETA], spec.score
    )


def lplr_targets(
    spec: DMLSpec, data: DMLData, p: Mapping[str, np.ndarray], i_treat: int
) -> dict[str, np.ndarray]:
    """The ``targets`` of LPLR's fold procedure: ``ml_t``'s target is the inner logit of each
    fold's training rows, which DoubleML does not record (its ``nuisance_targets['ml_t']`` is
    None): all NaN, so no loss."""
    return {"ml_t": np.full(data.n_obs, np.nan)}
