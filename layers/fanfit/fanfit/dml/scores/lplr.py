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
from fanfit.dml.model_checks import DMLData, DMLSpec, _one_treatment, given_predictions
from fanfit.errors import InvalidDataError, InvalidJobError

if TYPE_CHECKING:
    from fanfit.dml.model_types import Build

__all__ = [
    "BETA",
    "LPLR_KEYS",
    "LPLR_SCORES",
    "LPLRFold",
    "check_lplr_spec",
    "lplr_final",
    "lplr_fold",
    "lplr_inner_keys",
    "lplr_instrument_weights",
    "lplr_prelim",
    "lplr_root",
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


def _lplr_first_fits(
    x: np.ndarray, y: np.ndarray, d: np.ndarray, train: np.ndarray, test: np.ndarray,
    inner: Sequence[tuple[np.ndarray, np.ndarray]], n_folds: int,
    build_M: Callable[[int], Any], build_t: Callable[[], Any],  # noqa: N803 - DoubleML's name
    build_a: Callable[[int], Any], a_proba: bool, given: Mapping[str, np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], float]:  # fmt: skip
    """One outer fold's fits before ``ml_m`` (:func:`lplr_fold`): the outer predictions of
    ``ml_a``, ``ml_t``, ``ml_M`` and the fold's :math:`\\beta_k`; a key of ``given`` is not
    fitted (its outer predictions, and for ``ml_M`` and ``ml_a`` the fold's inner ones
    ``<key>_inner``, are the given ones: DoubleML 0.11.4's external predictions)."""
    from scipy.special import logit

    given = given or {}
    for key in ("ml_M_inner", "ml_a_inner"):
        if key in given and not np.isfinite(given[key][train]).all():
            raise InvalidDataError(
                f"The given inner predictions {key}_<fold> are not finite on every training row "
                "of their outer fold (DoubleML's inner predictions cover those rows)."
            )
    xd = np.hstack((d.reshape(-1, 1), x))
    if "ml_M" in given:
        m_inner, m_outer = given["ml_M_inner"], given["ml_M"][test]
    else:
        m_inner, m_outer = _double_cv(build_M, xd, y, inner, test, n_folds, proba=True)
    if "ml_a" in given:
        a_inner, a_outer = given["ml_a_inner"], given["ml_a"][test]
    else:
        a_inner, a_outer = _double_cv(build_a, x, d, inner, test, n_folds, proba=a_proba)
    m_iteration = np.clip(m_inner[train], _M_CLIP, 1 - _M_CLIP)
    w = logit(m_iteration)
    d_tilde = (d - a_inner)[train]
    beta = np.sum(d_tilde * w) / np.sum(d_tilde**2)
    if "ml_t" in given:
        t_hat = given["ml_t"][test]
    else:
        t_model = build_t().fit(x[train], w)
        t_hat = np.asarray(t_model.predict(x[test]), dtype=np.float64)
    return {"ml_a": a_outer, "ml_t": t_hat, "ml_M": m_outer}, float(beta)


def _lplr_m_fit(
    x: np.ndarray, y: np.ndarray, d: np.ndarray, train: np.ndarray, test: np.ndarray,
    score: str, build_m: Callable[[], Any], m_proba: bool, m_weights: np.ndarray | None,
    m_given: np.ndarray | None = None,
) -> np.ndarray:  # fmt: skip
    """One outer fold's ``ml_m`` (:func:`lplr_fold`): fitted to :math:`D` on ``train`` (score
    ``'nuisance_space'``: its rows with :math:`Y = 0`; ``'instrument'``: every row, weighted by
    ``m_weights[train]``), predicting ``test``; ``m_given`` (its given predictions) instead."""
    if m_given is not None:
        return np.asarray(m_given[test], dtype=np.float64)
    m_target = _encoded(d) if m_proba else d
    if score == "instrument":
        if m_weights is None:
            raise InvalidJobError(
                "Score 'instrument' fits ml_m with weights M_hat * (1 - M_hat) from every outer "
                "fold's ml_M predictions (m_weights), which one fold cannot compute."
            )
        model = build_m().fit(x[train], m_target[train], sample_weight=m_weights[train])
    else:
        rows = train[y[train] == 0]
        model = build_m().fit(x[rows], m_target[rows])
    return _predict(model, x[test], m_proba)


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
    m_weights: np.ndarray | None = None,
    given: Mapping[str, np.ndarray] | None = None,
) -> LPLRFold:
    r"""One outer fold's nested fits of DoubleMLLPLR (module docstring), as DoubleML 0.11.4's
    ``DoubleMLLPLR._nuisance_est`` computes them for that fold.

    ``ml_M`` is fitted to the label-encoded :math:`Y` on :math:`(D, X)` (``np.hstack``, the
    treatment first) and ``ml_a`` to :math:`D` on :math:`X` on each inner fold's training rows;
    each predicts its inner test rows and the outer test rows (``predict_proba[:, 1]`` for a
    classifier, else ``predict``); :math:`\beta_k` from the inner predictions on ``train``;
    ``ml_t`` fitted to :math:`W` on ``train``; ``ml_m`` fitted to :math:`D` on ``train`` (score
    ``'nuisance_space'``: its rows with :math:`Y = 0`, in increasing order; ``'instrument'``:
    every row with ``sample_weight=m_weights[train]``). Every fit uses a new estimator from its
    builder (DoubleML clones one learner per fit).

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
        ``'nuisance_space'`` or ``'instrument'``.
    build_M, build_a : callable
        ``(k) -> estimator``: a new unfitted ``ml_M`` (classifier) / ``ml_a`` for inner fold
        ``k`` (DoubleML's ``_double_dml_cv_predict`` sets the parameters of outer fold ``k``
        there: :mod:`fanfit.dml.nuisance_params`).
    build_t, build_m : callable
        ``() -> estimator``: new unfitted ``ml_t`` (regressor) and ``ml_m`` estimators.
    m_proba, a_proba : bool
        Whether ``ml_m`` / ``ml_a`` are classifiers (``predict_proba``), as DoubleML decides
        (a classifier on a binary treatment).
    m_weights : numpy.ndarray of shape (n_obs,), or None
        Score ``'instrument'``: ``ml_m``'s sample weights, :math:`\hat M (1 - \hat M)` of the
        out-of-fold ``ml_M`` predictions of *every* fold (:func:`lplr_instrument_weights`), which
        one fold cannot compute: the pipeline runs this score in two stages (:func:`lplr_prelim`,
        :func:`lplr_final`).
    given : mapping of str to numpy.ndarray of shape (n_obs,), optional
        DoubleML's external predictions of the fold's repetition: a key among ``ml_m``,
        ``ml_a``, ``ml_t``, ``ml_M`` is not fitted; ``ml_M`` and ``ml_a`` come with this fold's
        inner predictions as ``ml_M_inner``, ``ml_a_inner`` (DoubleML's ``ml_M_inner_<k>``),
        from which :math:`\beta_k` is computed as from fitted ones.

    Returns
    -------
    LPLRFold

    Raises
    ------
    fanfit.errors.InvalidJobError
        An unknown score, or ``'instrument'`` without ``m_weights``.
    """
    _check_score(score)
    given = given or {}
    if score == "instrument" and m_weights is None and "ml_m" not in given:
        raise InvalidJobError(
            "Score 'instrument' fits ml_m with weights M_hat * (1 - M_hat) from every outer "
            "fold's ml_M predictions (m_weights), which one fold cannot compute."
        )
    preds, beta = _lplr_first_fits(x, y, d, train, test, inner, n_folds, build_M, build_t,
                                   build_a, a_proba, given)  # fmt: skip
    preds["ml_m"] = _lplr_m_fit(x, y, d, train, test, score, build_m, m_proba, m_weights,
                                given.get("ml_m"))  # fmt: skip
    return LPLRFold(preds={k: preds[k] for k in LPLR_KEYS}, beta=beta)


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
def _check_external(spec: DMLSpec) -> None:
    """DoubleML 0.11.4's rules for LPLR's external predictions: a given ``ml_M`` or ``ml_a``
    comes with its inner predictions of every inner fold (DoubleML's ValueError), which
    DoubleML reads for ``k < n_folds_inner`` and uses for ``k < n_folds``, while its
    ``params_names`` hold them for ``k < n_folds`` only: so it takes them with
    ``n_folds_inner == n_folds`` only; an inner key without its outer one is not used."""
    given = spec.external_predictions_cols or {}
    for key in ("ml_M", "ml_a"):
        inner = [k for k in given if k.startswith(f"{key}_inner_")]
        if key not in given:
            if inner:
                raise InvalidJobError(
                    f"external_predictions_cols gives {', '.join(sorted(inner))} but not {key}: "
                    f"inner predictions come with the outer ones of {key}."
                )
            continue
        n_inner = spec.n_folds_inner or DEFAULT_N_FOLDS_INNER
        if n_inner != spec.n_folds:
            raise InvalidJobError(
                f"External predictions of {key} need n_folds_inner == n_folds (DoubleML 0.11.4 "
                f"reads their inner predictions for n_folds_inner = {n_inner} inner folds and "
                f"uses them for n_folds = {spec.n_folds} outer folds)."
            )
        missing = [str(k) for k in range(n_inner) if f"{key}_inner_{k}" not in given]
        if missing:
            raise InvalidJobError(
                f"When providing external predictions for {key}, also inner predictions for all "
                f"inner folds have to be provided (missing: {', '.join(missing)})."
            )


def _fits_with_sample_weight(spec: DMLSpec, name: str) -> bool:
    """Whether learner ``name``'s ``fit`` takes ``sample_weight`` (DoubleML's test,
    ``inspect.signature(learner.fit).parameters``)."""
    import inspect

    cls = spec.learners[name].estimator_class
    return "sample_weight" in inspect.signature(cls.fit).parameters


def check_lplr_spec(spec: DMLSpec) -> None:
    """The rules of ``lplr``: one treatment, no instruments, no clusters; given predictions of
    ``ml_M`` or ``ml_a`` with their inner ones (:func:`_check_external`); score
    ``'instrument'`` needs learners whose ``fit`` takes ``sample_weight``: ``ml_a``, as
    DoubleML 0.11.4's ``DoubleMLLPLR.__init__`` checks, and ``ml_m``, which the score fits
    weighted (DoubleML would fail in its fit).

    Raises
    ------
    fanfit.errors.InvalidJobError
        Naming the option, column or learner that is wrong.
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
    _check_external(spec)
    if spec.score == "instrument":
        for name in ("ml_a", "ml_m"):
            if name in spec.learners and not _fits_with_sample_weight(spec, name):
                raise InvalidJobError(
                    f'Learner "{name}" who supports sample_weight is required for score type '
                    f'"instrument" (it fits ml_m weighted by M_hat * (1 - M_hat)); '
                    f"{spec.learners[name].name}.fit takes no sample_weight."
                )


def lplr_inner_keys(spec: DMLSpec) -> tuple[str, ...]:
    """The inner predictions DoubleML 0.11.4 takes with a given ``ml_M`` or ``ml_a``
    (``params_names``: ``ml_M_inner_<k>``, ``ml_a_inner_<k>`` for every outer fold ``k``)."""
    return tuple(f"{key}_inner_{k}" for key in ("ml_M", "ml_a") for k in range(spec.n_folds))


def _fold_inputs(
    spec: DMLSpec, data: DMLData, train: np.ndarray
) -> Sequence[tuple[np.ndarray, np.ndarray]]:
    """The unit's inner folds (``data.inner_folds``, the unit's own column)."""
    if data.inner_folds is None:
        raise InvalidJobError("Model 'lplr' needs the unit's inner folds (data.inner_folds).")
    n_inner = spec.n_folds_inner or DEFAULT_N_FOLDS_INNER
    return ids_to_inner_smpls(data.inner_folds[:, 0], np.asarray(train), n_inner)


def lplr_run(
    spec: DMLSpec,
    data: DMLData,
    train: np.ndarray,
    test: np.ndarray,
    i_treat: int,
    build: Build,
    start: float,
) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """The ``run`` of LPLR's fold procedure (:class:`fanfit.dml.models.FoldProcedure`), score
    ``'nuisance_space'``: :func:`lplr_fold` on the spec's columns and the unit's inner folds
    (``data.inner_folds``, the unit's own column: :func:`fanfit.dml.unit_fits.fit_predict`);
    the fold scalar :data:`BETA`; ``start`` unused.

    Raises
    ------
    fanfit.errors.InvalidJobError
        No inner folds in ``data``; score ``'instrument'`` (it runs in two stages:
        :func:`lplr_prelim`, :func:`lplr_final`).
    fanfit.errors.InvalidFoldsError
        Inner folds that do not partition the training rows.
    """
    inner = _fold_inputs(spec, data, train)
    fold = lplr_fold(
        data.xd(i_treat), data.y, data.d[:, i_treat], train, test, inner, spec.n_folds,
        spec.score, lambda k: build("ml_M", k), lambda: build("ml_t"), lambda: build("ml_m"),
        lambda k: build("ml_a", k), spec.learners["ml_m"].is_classifier,
        spec.learners["ml_a"].is_classifier, given=given_predictions(data, i_treat),
    )  # fmt: skip
    return fold.preds, {BETA: fold.beta}


def lplr_prelim(
    spec: DMLSpec, data: DMLData, train: np.ndarray, test: np.ndarray, i_treat: int,
    build: Build,
) -> tuple[dict[str, np.ndarray], np.ndarray]:  # fmt: skip
    """Stage 0 of score ``'instrument'`` (the ``prelim`` of LPLR's
    :class:`~fanfit.dml.models.FoldSplit`): the fold's ``ml_a``, ``ml_t`` and ``ml_M`` as
    :func:`lplr_fold` fits them; the auxiliary array is ``[beta_k]``, shape (1,).

    Raises
    ------
    fanfit.errors.InvalidJobError
        No inner folds in ``data``.
    """
    inner = _fold_inputs(spec, data, train)
    preds, beta = _lplr_first_fits(
        data.xd(i_treat), data.y, data.d[:, i_treat], train, test, inner, spec.n_folds,
        lambda k: build("ml_M", k), lambda: build("ml_t"), lambda k: build("ml_a", k),
        spec.learners["ml_a"].is_classifier, given_predictions(data, i_treat),
    )  # fmt: skip
    return preds, np.array([beta], dtype=np.float64)


def lplr_root(
    spec: DMLSpec, data: DMLData, train: np.ndarray, i_treat: int, aux: np.ndarray,
    start: float,
) -> dict[str, float]:  # fmt: skip
    """The ``root`` of LPLR's split: the fold's :data:`BETA`, from its stage-0 ``aux``
    (nothing to search; ``start`` unused)."""
    return {BETA: float(np.asarray(aux, dtype=np.float64).reshape(-1)[0])}


def lplr_instrument_weights(
    spec: DMLSpec, data: DMLData, p: Mapping[str, np.ndarray], i_treat: int
) -> np.ndarray:
    r"""``ml_m``'s sample weights under score ``'instrument'``, :math:`\hat M (1 - \hat M)` of
    one repetition's out-of-fold ``ml_M`` predictions (DoubleML 0.11.4 ``DoubleMLLPLR.
    _nuisance_est``: ``weights = M_hat["preds"] * (1 - M_hat["preds"])``).

    Returns
    -------
    numpy.ndarray, shape (n_obs,)

    Raises
    ------
    fanfit.errors.InvalidJobError
        A negative weight: an outer ``ml_M`` prediction above 1, which happens with
        ``n_folds_inner > n_folds`` (DoubleML divides the inner models' sum by ``n_folds``;
        its own fit then fails in scikit-learn's ``sample_weight`` check).
    """
    m_hat = np.asarray(p["ml_M"], dtype=np.float64)
    weights = m_hat * (1 - m_hat)
    if np.any(weights < 0):
        raise InvalidJobError(
            f"Score 'instrument': {int(np.sum(weights < 0))} of ml_m's weights M_hat * (1 - "
            f"M_hat) are negative (ml_M's outer predictions reach {float(np.max(m_hat)):.4g}: "
            "DoubleML divides the inner models' sum by n_folds, so with n_folds_inner = "
            f"{spec.n_folds_inner} > n_folds = {spec.n_folds} they can exceed 1; DoubleML's "
            "fit fails on them too). Use n_folds_inner <= n_folds."
        )
    return weights


def lplr_final(
    spec: DMLSpec, data: DMLData, train: np.ndarray, test: np.ndarray, i_treat: int,
    build: Build, scalars: Mapping[str, float],
) -> dict[str, np.ndarray]:  # fmt: skip
    """Stage 1 of score ``'instrument'`` (the ``final`` of LPLR's split): the fold's ``ml_m``,
    fitted to :math:`D` on every training row with ``sample_weight`` the repetition's
    :func:`lplr_instrument_weights` (``data.stage_weights``, set by the unit).

    Raises
    ------
    fanfit.errors.InvalidJobError
        No weights in ``data``.
    """
    d = data.d[:, i_treat]
    m_hat = _lplr_m_fit(
        data.xd(i_treat), data.y, d, train, test, spec.score, lambda: build("ml_m"),
        spec.learners["ml_m"].is_classifier, data.stage_weights,
        given_predictions(data, i_treat).get("ml_m"),
    )  # fmt: skip
    return {"ml_m": m_hat}


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
