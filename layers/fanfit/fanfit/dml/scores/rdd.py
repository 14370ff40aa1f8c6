r"""Regression discontinuity with flexible covariate adjustment (DoubleML's RDFlex), as DoubleML 0.11.4 computes it.

The estimator (Noack, Olma and Rothe 2024, "Flexible covariate adjustments in regression
discontinuity designs", arXiv:2107.07942; DoubleML ``rdd/rdd.py``) adjusts a local linear RD
estimate by :math:`\eta(X) = (g^{+}(X) + g^{-}(X)) / 2`, with :math:`g^{\pm}(X) =
E[Y | \text{score} = \text{cutoff}^{\pm}, X]` (``ml_g``; a fuzzy design also :math:`m^{\pm}(X)
= E[D | \ldots]`, ``ml_m``). For each repetition it iterates ``n_iterations`` times: cross-fit
``ml_g`` (and ``ml_m``) on :math:`(Z, X)` with kernel sample weights :math:`w_i = K(S_i / h)`
of the centred score :math:`S = \text{score} - \text{cutoff}`, predict every test row at both
sides of the cutoff (:math:`Z` set to :math:`Z^-` and :math:`Z^+`), take the residuals
:math:`Y - \hat\eta_Y` (and :math:`D - \hat\eta_D`), then run ``rdrobust`` on them: between the
iterations for a new bandwidth :math:`h` (and so new weights), after the last for the estimate.

**Where it runs.** The cross-fitting is fanfit's (one stage per iteration, every repetition and
fold side by side; :func:`rd_fit_predict` is one fold's fit). ``rdrobust`` (GPL-3.0; it needs
pandas, plotnine and matplotlib, far more than the Lambda layers' budget holds) runs on the
client, as DoubleML's RDFlex needs it there too: the execution waits for the client's kernel
weights before each stage and for its estimate before Aggregate
(:attr:`fanfit.dml.models.ModelDef.client_inputs`; :class:`fanfit.client.doubleml.rdd.RDFlex`).

**The first stage's design** :math:`Z` (DoubleML's ``fs_specification``, :func:`rd_design`):
``'cutoff'``: :math:`Z = 1\{S \ge 0\}`; ``'cutoff and score'``: :math:`(1\{S \ge 0\}, S)`;
``'interacted cutoff and score'``: :math:`(1\{S \ge 0\}, 1\{S \ge 0\} S, S)`. At the cutoff
:math:`Z^- = 0` and :math:`Z^+ = (1, 0, \ldots)`. The client sends :math:`Z` as the job's
``z_cols`` (the learners' features are :math:`(Z, X)`, ``np.column_stack`` as DoubleML's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fanfit.dml.model_checks import DMLSpec, _one_treatment
from fanfit.errors import InvalidJobError

__all__ = [
    "DEFAULT_N_ITERATIONS",
    "FS_SPECIFICATIONS",
    "RDFLEX_SCORES",
    "check_rdflex_spec",
    "iteration_keys",
    "n_iterations",
    "rd_design",
    "rd_fit_predict",
]

#: DoubleML's ``fs_specification`` values, in its order (the first its default).
FS_SPECIFICATIONS = ("cutoff", "cutoff and score", "interacted cutoff and score")

#: The designs, as the job's scores: a sharp design fits ``ml_g`` only, a fuzzy one also
#: ``ml_m`` (DoubleML's ``fuzzy``).
RDFLEX_SCORES = ("sharp", "fuzzy")

#: DoubleML's default of ``RDFlex.fit(n_iterations=...)``.
DEFAULT_N_ITERATIONS = 2


def n_iterations(spec: DMLSpec) -> int:
    """The spec's iterations (``spec.n_iterations``, default :data:`DEFAULT_N_ITERATIONS`)."""
    return int(spec.n_iterations) if spec.n_iterations is not None else DEFAULT_N_ITERATIONS


def iteration_keys(spec: DMLSpec, iteration: int) -> tuple[str, ...]:
    """The prediction keys of one iteration (its stage): ``ml_g_iter<i>`` and, fuzzy,
    ``ml_m_iter<i>`` (DoubleML keeps no predictions of RDFlex; fanfit names them so)."""
    keys = [f"ml_g_iter{iteration}"]
    if spec.score == "fuzzy":
        keys.append(f"ml_m_iter{iteration}")
    return tuple(keys)


def rd_design(score: np.ndarray, fs_specification: str) -> np.ndarray:
    """The first stage's design :math:`Z` of DoubleML 0.11.4's ``RDFlex._fit_nuisance_model``
    (module docstring), in float64 (DoubleML's ``np.column_stack`` with ``X`` gives the same
    values: its boolean indicator becomes 0.0 and 1.0).

    Parameters
    ----------
    score : numpy.ndarray, shape (n_obs,)
        The centred score :math:`S = \\text{score} - \\text{cutoff}` (DoubleML's ``_score``).
    fs_specification : str
        One of :data:`FS_SPECIFICATIONS`.

    Returns
    -------
    numpy.ndarray of float64, shape (n_obs, 1), (n_obs, 2) or (n_obs, 3)

    Raises
    ------
    ValueError
        An unknown ``fs_specification`` (DoubleML's message).
    """
    s = np.asarray(score, dtype=np.float64)
    intended = s >= 0
    if fs_specification == "cutoff":
        z = intended[:, None]
    elif fs_specification == "cutoff and score":
        z = np.column_stack((intended, s))
    elif fs_specification == "interacted cutoff and score":
        z = np.column_stack((intended, intended * s, s))
    else:
        raise ValueError(
            f"Invalid fs_specification '{fs_specification}'. Valid specifications are "
            f"{list(FS_SPECIFICATIONS)}."
        )
    return np.ascontiguousarray(z, dtype=np.float64)


def _predict(model: Any, x: np.ndarray, proba: bool) -> np.ndarray:
    if proba:
        return np.asarray(model.predict_proba(x)[:, 1], dtype=np.float64)
    return np.asarray(model.predict(x), dtype=np.float64)


def rd_fit_predict(
    estimator: Any,
    zx: np.ndarray,
    target: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    weights: np.ndarray,
    n_design: int,
    proba: bool,
) -> np.ndarray:
    r"""One fold's fit of DoubleML 0.11.4's ``RDFlex._fit_nuisance_model``: ``estimator`` fitted
    to ``target`` on :math:`(Z, X)` of the training rows with ``sample_weight=weights[train]``,
    then :math:`(\hat\mu^-(X) + \hat\mu^+(X)) / 2` of the test rows, :math:`\hat\mu^\pm` its
    predictions (``predict_proba[:, 1]`` for a classifier) with :math:`Z` set to :math:`Z^- = 0`
    and :math:`Z^+ = (1, 0, \ldots)`.

    Parameters
    ----------
    estimator : scikit-learn estimator
        A new unfitted one (DoubleML clones its learner per fold).
    zx : numpy.ndarray, shape (n_obs, n_design + n_x)
        :math:`(Z, X)`, the design first.
    target : numpy.ndarray, shape (n_obs,)
        :math:`Y` (``ml_g``) or :math:`D` (``ml_m``), as DoubleML passes it (not label-encoded).
    train, test : numpy.ndarray of int
        The fold's training and test rows.
    weights : numpy.ndarray, shape (n_obs,)
        The repetition's kernel weights of this iteration.
    n_design : int
        The columns of :math:`Z` (1 to 3).
    proba : bool
        Whether the estimator is a classifier.

    Returns
    -------
    numpy.ndarray of float64, shape (n_test,)
    """
    estimator.fit(zx[train], target[train], sample_weight=weights[train])
    left = np.array(zx[test], copy=True)
    left[:, :n_design] = 0
    right = np.array(left, copy=True)
    right[:, 0] = 1
    return (_predict(estimator, left, proba) + _predict(estimator, right, proba)) / 2


def check_rdflex_spec(spec: DMLSpec) -> None:
    """The rules of ``rdflex``: one binary treatment, the design's 1 to 3 columns as
    ``z_cols`` (:func:`rd_design`), no clusters (DoubleML's RDFlex refuses clustered data),
    ``n_iterations`` a positive integer, and learners whose ``fit`` takes ``sample_weight``
    (DoubleML's ``_check_supports_sample_weights``; also a Pipeline, whose ``fit`` takes
    ``**params`` but refuses ``sample_weight``).

    Raises
    ------
    fanfit.errors.InvalidJobError
        Naming the option, column or learner that is wrong.
    """
    import inspect

    _one_treatment(spec, "")
    if not 1 <= len(spec.z_cols) <= 3:
        raise InvalidJobError(
            "Model 'rdflex' needs its first stage's design as z_cols: 1 to 3 columns "
            f"(fanfit.dml.scores.rdd.rd_design), got {list(spec.z_cols)}."
        )
    if spec.cluster_cols:
        raise InvalidJobError(
            "Model 'rdflex' does not take cluster_cols (DoubleML's RDFlex: 'Clustered data is "
            "not supported for RDFlex yet.'); leave cluster_cols empty."
        )
    k = spec.n_iterations
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise InvalidJobError(
            "The number of iterations for the iterative bandwidth fitting has to be a positive "
            f"integer (n_iterations); got {k!r}."
        )
    for name in ("ml_g", "ml_m") if spec.score == "fuzzy" else ("ml_g",):
        lspec = spec.learners.get(name)
        if lspec is None:
            continue
        params = inspect.signature(lspec.estimator_class.fit).parameters
        takes = "sample_weight" in params or any(
            p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values()
        )
        if not takes or lspec.name == "Pipeline":
            raise InvalidJobError(
                f"The {name} learner {lspec.name} does not support sample weights (RDFlex fits "
                "it with the kernel weights). Please choose a learner that supports sample "
                "weights."
            )
