"""Hyperparameter searches as DoubleML's ``tune()`` runs them, from out-of-fold predictions.

DoubleML 0.11.4 tunes each nuisance learner with scikit-learn's ``GridSearchCV`` or
``RandomizedSearchCV`` (``doubleml.utils._estimation._dml_tune``): on each training set, the
candidates (``ParameterGrid`` of the grid, or ``n_iter`` draws of ``ParameterSampler``), then
``KFold(n_folds_tune, shuffle=True)`` over the training rows, every (candidate, search fold) fit
scored on the fold's test rows, and the candidate of the best mean test score chosen. Here that
search is cut in two:

- :func:`draw_search` draws the candidates and the search folds with scikit-learn's own classes
  and the global NumPy random state, in the search's order (candidates first, then the one
  shuffle of ``KFold.split``), so a run after the same ``np.random.seed`` draws what DoubleML's
  search draws;
- :func:`search_result` scores each candidate's out-of-fold predictions on each search fold with
  the search's scorer (``scoring=None``: the learner's own ``score``, R² or accuracy) and
  aggregates them as ``BaseSearchCV`` does (mean and standard deviation over the folds, rank
  ``'min'`` of the means, best = the first of rank 1).

The fits between them are tuning units (DESIGN.md): one (candidate, search fold) fit each,
anywhere; :mod:`fanfit.client.doubleml.tune` runs them on a stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fanfit.errors import InvalidJobError

__all__ = ["SEARCH_MODES", "Search", "SearchResult", "draw_search", "search_result"]

#: DoubleML's ``search_mode`` values.
SEARCH_MODES = ("grid_search", "randomized_search")


@dataclass(frozen=True)
class Search:
    """One drawn search: its candidates and its folds over the training rows.

    Attributes
    ----------
    candidates : tuple of dict
        The parameter settings, in the search's order (``cv_results_['params']``).
    folds : numpy.ndarray of int, shape (n_rows,)
        The search fold (0 to ``n_folds - 1``) of each training row, from ``KFold`` 's test sets.
    n_folds : int
    """

    candidates: tuple[dict[str, Any], ...]
    folds: np.ndarray
    n_folds: int


def draw_search(
    param_grid: Any, n_rows: int, n_folds: int, search_mode: str, n_iter: int
) -> Search:
    """The candidates and the folds of one search, drawn as DoubleML's ``_dml_tune`` does.

    ``grid_search``: ``list(ParameterGrid(param_grid))`` (no draws); ``randomized_search``:
    ``list(ParameterSampler(param_grid, n_iter))`` from the global random state (as
    ``RandomizedSearchCV`` with ``random_state=None`` lists them before it splits); then the
    test sets of ``KFold(n_folds, shuffle=True).split`` over ``n_rows`` rows (one
    ``shuffle`` of the global state).

    Parameters
    ----------
    param_grid : dict or list of dict
        scikit-learn's grid (lists of values) or distributions (``rvs`` objects or lists).
    n_rows : int
        The training set's rows.
    n_folds : int
        DoubleML's ``n_folds_tune``.
    search_mode : {'grid_search', 'randomized_search'}
    n_iter : int
        DoubleML's ``n_iter_randomized_search``.

    Returns
    -------
    Search

    Raises
    ------
    InvalidJobError
        An unknown ``search_mode``, or fewer rows than folds.
    """
    from sklearn.model_selection import KFold, ParameterGrid, ParameterSampler

    if search_mode == "grid_search":
        candidates = list(ParameterGrid(param_grid))
    elif search_mode == "randomized_search":
        candidates = list(ParameterSampler(param_grid, n_iter))
    else:
        raise InvalidJobError(
            f"search_mode must be one of {', '.join(SEARCH_MODES)}, got {search_mode!r}"
        )
    if n_rows < n_folds:
        raise InvalidJobError(
            f"a search over {n_rows} rows cannot have n_folds_tune={n_folds} folds"
        )
    folds = np.full(n_rows, -1, dtype=np.int64)
    placeholder = np.zeros((n_rows, 1))
    for k, (_, test) in enumerate(KFold(n_splits=n_folds, shuffle=True).split(placeholder)):
        folds[test] = k
    return Search(tuple(dict(c) for c in candidates), folds, n_folds)


@dataclass
class SearchResult:
    """A finished search with the attributes of a fitted ``GridSearchCV`` that DoubleML reads.

    Attributes
    ----------
    cv_results_ : dict
        ``params``, ``param_<name>`` (masked arrays), ``split<k>_test_score``,
        ``mean_test_score``, ``std_test_score`` and ``rank_test_score``, as scikit-learn lays
        them out (no fit times: the fits ran elsewhere).
    best_index_ : int
    best_params_ : dict
    best_score_ : float
    n_splits_ : int
    refit : callable or None
        ``() -> estimator``: the learner with the best parameters fitted on the training rows,
        built when :attr:`best_estimator_` or :meth:`predict` is first used (DoubleML's PLR and
        PLIV ``'IV-type'`` tuning predict with it); None when the search cannot refit.
    """

    cv_results_: dict[str, Any]
    best_index_: int
    best_params_: dict[str, Any]
    best_score_: float
    n_splits_: int
    refit: Any = None
    _best_estimator: Any = field(default=None, repr=False)

    @property
    def best_estimator_(self) -> Any:
        """The learner with :attr:`best_params_` fitted on the search's training rows (fitted
        here, once, on first use)."""
        if self._best_estimator is None:
            if self.refit is None:
                raise AttributeError("this search result holds no refitted estimator")
            self._best_estimator = self.refit()
        return self._best_estimator

    def predict(self, x: Any) -> Any:
        """``best_estimator_.predict(x)``."""
        return self.best_estimator_.predict(x)

    def predict_proba(self, x: Any) -> Any:
        """``best_estimator_.predict_proba(x)``."""
        return self.best_estimator_.predict_proba(x)


def _given_estimator(predictions: np.ndarray, classifier: bool) -> Any:
    """A scikit-learn estimator that answers with given predictions: ``X[:, 0]`` holds row
    positions into ``predictions`` (a classifier's: the probability of class 1)."""
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

    class _GivenRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]
        def fit(self, x: Any, y: Any) -> Any:  # an estimator to scikit-learn; never fitted
            raise NotImplementedError

        def predict(self, x: np.ndarray) -> np.ndarray:
            return predictions[np.asarray(x[:, 0], dtype=np.int64)]

    class _GivenClassifier(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
        classes_ = np.array([0.0, 1.0])

        def fit(self, x: Any, y: Any) -> Any:  # an estimator to scikit-learn; never fitted
            raise NotImplementedError

        def predict_proba(self, x: np.ndarray) -> np.ndarray:
            p = predictions[np.asarray(x[:, 0], dtype=np.int64)]
            return np.column_stack([1.0 - p, p])

        def predict(self, x: np.ndarray) -> np.ndarray:
            # argmax of predict_proba, the first class on a tie (scikit-learn's classifiers)
            return self.classes_[(self.predict_proba(x)[:, 1] > 0.5).astype(np.int64)]

    return _GivenClassifier() if classifier else _GivenRegressor()


def search_result(
    search: Search,
    target: np.ndarray,
    predictions: np.ndarray,
    scoring: Any,
    classifier: bool,
    refit: Any = None,
) -> SearchResult:
    """Score every candidate's out-of-fold predictions and choose the best, as ``BaseSearchCV``.

    The test score of candidate ``c`` on fold ``k`` is ``scorer(estimator, X_k, y_k)`` with the
    search's scorer (``sklearn.metrics.check_scoring(learner, scoring)``: ``None`` is the
    learner's ``score``) on an estimator that answers with the candidate's predictions of the
    fold's rows; ``mean_test_score`` and ``std_test_score`` are ``np.average`` over the folds
    (unweighted), ``rank_test_score`` is ``rankdata(-mean, 'min')`` (NaN last) and
    ``best_index_`` the first of rank 1 (scikit-learn 1.7 ``BaseSearchCV._format_results``).

    Parameters
    ----------
    search : Search
    target : numpy.ndarray, shape (n_rows,)
        The training rows' target.
    predictions : numpy.ndarray, shape (n_rows, n_candidates)
        Each candidate's out-of-fold predictions (a classifier's: probabilities of class 1).
    scoring : str, callable or None
        The search's ``scoring``.
    classifier : bool
        Whether the learner is a classifier.
    refit : callable, optional
        ``() -> fitted estimator`` with the best parameters (:attr:`SearchResult.refit`).

    Returns
    -------
    SearchResult

    Raises
    ------
    InvalidJobError
        Predictions of another shape than ``(n_rows, n_candidates)``.
    """
    from scipy.stats import rankdata
    from sklearn.metrics import check_scoring

    n_rows, n_cand = len(search.folds), len(search.candidates)
    predictions = np.asarray(predictions, dtype=float)
    if predictions.shape != (n_rows, n_cand):
        raise InvalidJobError(
            f"a search of {n_cand} candidates over {n_rows} rows needs predictions of shape "
            f"({n_rows}, {n_cand}), got {predictions.shape}"
        )
    target = np.asarray(target)
    scores = np.empty((n_cand, search.n_folds))
    for c in range(n_cand):
        estimator = _given_estimator(predictions[:, c], classifier)
        scorer = check_scoring(estimator, scoring)
        for k in range(search.n_folds):
            rows = np.flatnonzero(search.folds == k)
            scores[c, k] = scorer(estimator, rows.reshape(-1, 1).astype(float), target[rows])
    means = np.average(scores, axis=1)
    stds = np.sqrt(np.average((scores - means[:, np.newaxis]) ** 2, axis=1))
    ranks: np.ndarray
    if np.isnan(means).all():
        ranks = np.ones(n_cand, dtype=np.int32)
    else:
        filled = np.where(np.isnan(means), np.nanmin(means) - 1, means)
        ranks = np.asarray(rankdata(-filled, method="min"), dtype=np.int32)
    results: dict[str, Any] = {"params": [dict(c) for c in search.candidates]}
    results.update(_param_columns(search.candidates))
    for k in range(search.n_folds):
        results[f"split{k}_test_score"] = scores[:, k]
    results.update(mean_test_score=means, std_test_score=stds, rank_test_score=ranks)
    best = int(ranks.argmin())
    return SearchResult(
        cv_results_=results,
        best_index_=best,
        best_params_=dict(search.candidates[best]),
        best_score_=float(means[best]),
        n_splits_=search.n_folds,
        refit=refit,
    )


def _param_columns(candidates: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """scikit-learn's ``param_<name>`` columns: masked where a candidate lacks the name."""
    names = sorted({name for c in candidates for name in c})
    out = {}
    for name in names:
        column: np.ma.MaskedArray = np.ma.MaskedArray(
            np.empty(len(candidates), dtype=object), mask=True
        )
        for i, c in enumerate(candidates):
            if name in c:
                column[i] = c[name]
        out[f"param_{name}"] = column
    return out
