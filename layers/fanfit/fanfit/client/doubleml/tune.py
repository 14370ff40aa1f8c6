"""DoubleML's ``tune()`` on a fanfit stack: every search's fits are tuning units of a job.

DoubleML 0.11.4's ``tune()`` (``double_ml.py``) checks its arguments, loops over the
treatments (and, with ``tune_on_folds``, the repetitions) and calls the class's
``_nuisance_tuning``, which gives each nuisance its target and rows and runs its search through
``doubleml.utils._estimation._dml_tune``: per training set, ``GridSearchCV`` or
``RandomizedSearchCV`` with ``KFold(n_folds_tune, shuffle=True)``. fanfit's classes run
DoubleML's own ``tune()`` (its checks, loops, every class's targets and row subsets,
``set_as_params``, ``return_tune_res``) with that one function replaced in the class's module,
in two passes that keep DoubleML's use of the global NumPy random state:

1. *record*: each search is drawn (:func:`fanfit.dml.tuning.draw_search`: the candidates, then
   the search folds, as scikit-learn's search draws them) and recorded, and answered with a
   stand-in; a search whose result the class needs before it can go on (PLR's and PLIV's
   ``'IV-type'``: ``ml_g``'s target comes from the tuned ``ml_l``'s predictions) ends the pass;
2. the recorded searches run on the stack, all submitted at once: one estimate job per search
   (and per 100 candidates), whose units are the search's (candidate, search fold) fits
   (below), sized and placed by the scheduler like any fit;
3. *replay*: the random state is put back and ``tune()`` runs again; each search it asks for is
   drawn again and must match the record (the same learner, grid, rows, target and draws), and
   is answered with the stack's :class:`fanfit.dml.tuning.SearchResult`; a search not recorded
   (the ``'IV-type'`` ``ml_g``) runs on the stack then.

The search job: a ``plr`` job on the training rows whose ``ml_l`` is the tuned learner, on the
search's target, with one repetition per candidate (its ``learner_params``) over the search folds
(the job's folds), and whose ``ml_m`` is given (a column of zeros, ``external_predictions_cols``)
so that nothing else is fitted; its out-of-fold ``ml_l`` predictions are every candidate's, and
:func:`fanfit.dml.tuning.search_result` scores them here with the search's scorer. The job's own
coef (the mean out-of-fold residual) is not used.

What differs from DoubleML: the refit of the best candidate on the training rows is done here,
lazily, only where DoubleML's class uses it (``best_estimator_``, ``predict``); a learner whose
``random_state`` is unset draws its seeds from the job's seed, not from the global state, as
in ``fit()``, so its choices can differ from DoubleML's (set ``random_state`` for equal ones).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.dml.spec import MAX_N_REP
from fanfit.dml.tuning import Search, SearchResult, draw_search, search_result
from fanfit.learners import LearnerSpec, as_learner_spec
from fanfit.learners.allowlist import json_value

__all__ = ["tune_on_stack"]

_TARGET, _D, _M = "__fanfit_target", "__fanfit_d", "__fanfit_m"


class _NeedsResult(Exception):
    """The record pass met a search whose result the class reads before it can go on."""


@dataclass
class _Call:
    """One search DoubleML asks for: one training set of one ``_dml_tune`` call."""

    learner: Any
    scoring: Any
    x: np.ndarray
    target: np.ndarray
    search: Search
    key: str


class _StandIn:
    """The record pass's answer: the first candidate's parameters, no predictions."""

    def __init__(self, call: _Call) -> None:
        self.best_params_ = dict(call.search.candidates[0])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _NeedsResult(name)


def _digest(learner: Any, grid: Any, scoring: Any, x: np.ndarray, target: np.ndarray,
            search: Search) -> str:  # fmt: skip
    h = hashlib.sha256()
    h.update(repr((id(learner), repr(learner), repr(grid), repr(scoring))).encode())
    h.update(repr(search.candidates).encode())
    for array in (x, target, search.folds):
        a = np.ascontiguousarray(array)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _dml_tune_with(answer: Callable[[_Call], Any]) -> Callable[..., list[Any]]:
    """A stand-in for DoubleML 0.11.4's ``_dml_tune`` (same signature) that draws each
    training set's search and hands it to ``answer``."""

    def _dml_tune(
        y: Any, x: Any, train_inds: Any, learner: Any, param_grid: Any, scoring_method: Any,
        n_folds_tune: int, n_jobs_cv: Any, search_mode: str, n_iter_randomized_search: int,
        fold_specific_target: bool = False,
    ) -> list[Any]:  # fmt: skip
        out = []
        for i, train_index in enumerate(train_inds):
            rows = np.asarray(train_index)
            target = np.asarray(y[i] if fold_specific_target else y[rows])
            xs = np.asarray(x[rows, :])
            search = draw_search(
                param_grid, len(rows), n_folds_tune, search_mode, n_iter_randomized_search
            )
            key = _digest(learner, param_grid, scoring_method, xs, target, search)
            out.append(answer(_Call(learner, scoring_method, xs, target, search, key)))
        return out

    return _dml_tune


def _tuning_module(model: Any, method: str = "_nuisance_tuning", search: str = "_dml_tune") -> Any:
    """The DoubleML module whose ``method`` the model's class runs, and which runs its searches
    through the function ``search``.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        The module has no ``search`` (a DoubleML other than 0.11's).
    """
    for cls in type(model).__mro__:
        if method in vars(cls) and cls.__module__.startswith("doubleml."):
            module = sys.modules[cls.__module__]
            if callable(getattr(module, search, None)):
                return module
            break
    raise errors.UnsupportedArgumentError(
        f"tuning {type(model).__name__}: this DoubleML runs its searches otherwise than "
        f"0.11's {search}; use DoubleML's own class to tune, then set_ml_nuisance_params"
    )


@contextlib.contextmanager
def _patched(module: Any, fn: Callable[..., Any], name: str = "_dml_tune") -> Iterator[None]:
    """``module.<name>`` replaced by ``fn`` inside the block."""
    original = getattr(module, name)
    setattr(module, name, fn)
    try:
        yield
    finally:
        setattr(module, name, original)


def _job_input(
    learner: Any, x: np.ndarray, target: np.ndarray, candidates: tuple[dict[str, Any], ...],
    folds: np.ndarray, seed: int,
) -> tuple[pd.DataFrame, dict[str, Any]]:  # fmt: skip
    """The frame and options of the ``plr`` job that fits ``candidates`` of a search (module
    docstring): ``folds[:, c]`` (shape (n_rows, n_candidates)) are candidate ``c`` 's search
    folds, 0 to n_folds - 1.

    Raises
    ------
    fanfit.errors.InvalidLearnerError
        The learner outside the allow-list, a candidate value that is not plain JSON, or a
        parameter the learner does not have or refuses (:meth:`LearnerSpec.with_params`).
    """
    x_cols = [f"x{j}" for j in range(x.shape[1])]
    frame = pd.DataFrame(x, columns=x_cols)
    frame[_TARGET] = target
    frame[_D] = 1.0
    frame[_M] = 0.0
    n_rep, n_folds = len(candidates), int(folds.max()) + 1
    where = f"tune: {type(learner).__name__}"
    params = [{str(k): json_value(where, str(k), v) for k, v in c.items()} for c in candidates]
    spec = as_learner_spec(learner, "ml_l")
    for candidate in params:  # names and values the learner takes, before anything is uploaded
        spec.with_params(candidate)
    options = {
        "model": "plr", "score": "partialling out", "y": _TARGET, "d": [_D], "x": x_cols,
        "n_folds": n_folds, "n_rep": n_rep, "seed": seed, "folds": folds,
        "ml_l": spec, "ml_m": LearnerSpec("DummyRegressor", {}),
        "learner_params": {"ml_l": {_D: [[p] * n_folds for p in params]}},
        "external_predictions_cols": {"ml_m": {_D: [_M] * n_rep}},
    }  # fmt: skip
    return frame, options


def _chunks(
    learner: Any, x: np.ndarray, target: np.ndarray, candidates: tuple[dict[str, Any], ...],
    folds: np.ndarray, seed: int,
) -> list[tuple[pd.DataFrame, dict[str, Any]]]:  # fmt: skip
    """:func:`_job_input` of every :data:`~fanfit.dml.spec.MAX_N_REP` candidates."""
    return [
        _job_input(learner, x, target, candidates[start : start + MAX_N_REP],
                   folds[:, start : start + MAX_N_REP], seed)
        for start in range(0, len(candidates), MAX_N_REP)
    ]  # fmt: skip


def _predictions(jobs: list[Any], timeout: float, progress: bool) -> np.ndarray:
    """Every candidate's out-of-fold predictions of ``jobs`` (shape (n_rows, n_candidates))."""
    columns = []
    for job in jobs:
        job.result(timeout=timeout, progress=progress)
        columns.append(np.asarray(job.predictions()[_D]["ml_l"], dtype=float))
    return np.column_stack(columns)


def _run_searches(
    calls: list[_Call], submit: Callable[[pd.DataFrame, dict[str, Any]], Any], seed: int,
    timeout: float, progress: bool,
) -> dict[str, SearchResult]:  # fmt: skip
    """Every search of ``calls`` on the stack (``submit(frame, options) -> EstimateJob``), all
    submitted before any is awaited.

    Raises
    ------
    fanfit.errors.InvalidJobError (or a subclass)
        A job refused before upload (a learner, a parameter).
    fanfit.errors.JobFailedError
        A job failed or did not end within ``timeout``.
    """
    if not calls:
        return {}
    # every job's input built (learners and candidates checked) before the first is submitted
    inputs = []
    for call in {c.key: c for c in calls}.values():
        folds = np.repeat(call.search.folds[:, np.newaxis], len(call.search.candidates), axis=1)
        inputs.append(
            (call, _chunks(call.learner, call.x, call.target, call.search.candidates, folds, seed))
        )
    submitted = [(call, [submit(*job_input) for job_input in chunks]) for call, chunks in inputs]
    return {
        call.key: _result(call, _predictions(jobs, timeout, progress)) for call, jobs in submitted
    }


def _result(call: _Call, predictions: np.ndarray) -> SearchResult:
    from sklearn.base import clone, is_classifier

    def refit() -> Any:
        best = call.search.candidates[result.best_index_]
        return clone(call.learner).set_params(**best).fit(call.x, call.target)

    result = search_result(
        call.search, call.target, predictions, call.scoring, is_classifier(call.learner), refit
    )
    return result


def tune_on_stack(
    model: Any,
    doubleml_tune: Callable[..., Any],
    arguments: Mapping[str, Any],
    submit: Callable[[pd.DataFrame, dict[str, Any]], Any],
    *,
    seed: int = 0,
    timeout: float = 3600.0,
    progress: bool = False,
) -> Any:
    """Run DoubleML's ``tune()`` of ``model`` with its searches on the stack (module docstring).

    Parameters
    ----------
    model : fanfit's DoubleML class instance
    doubleml_tune : callable
        DoubleML's own ``tune`` bound to ``model``.
    arguments : mapping
        Its keyword arguments (``param_grids``, ``tune_on_folds``, ...).
    submit : callable
        ``(frame, options) -> EstimateJob``: checks and submits one search's job (the class's
        ``tune`` adds the client and the job options); called only when a search runs.
    seed : int
        The jobs' seed (``random_state`` of learners that have none).
    timeout, progress
        As :meth:`fanfit.client.EstimateJob.result`, per job.

    Returns
    -------
    What DoubleML's ``tune`` returns: ``model``, or with ``return_tune_res`` its results, whose
    searches are :class:`fanfit.dml.tuning.SearchResult` s.

    Raises
    ------
    ValueError, TypeError
        DoubleML's own checks of the arguments (before anything runs).
    fanfit.errors.UnsupportedArgumentError
        A DoubleML whose searches do not run through ``_dml_tune``.
    fanfit.errors.InvalidLearnerError, fanfit.errors.InvalidJobError, fanfit.errors.JobFailedError
        As ``fit()``.
    """
    module = _tuning_module(model)
    return record_and_replay(
        [model], lambda answer: _patched(module, _dml_tune_with(answer)), _StandIn,
        lambda calls: _run_searches(calls, submit, seed, timeout, progress),
        doubleml_tune, arguments,
    )  # fmt: skip


def record_and_replay(
    parts: list[Any],
    patched: Callable[[Callable[[Any], Any]], contextlib.AbstractContextManager[Any]],
    stand_in: Callable[[Any], Any],
    run: Callable[[list[Any]], dict[str, Any]],
    doubleml_method: Callable[..., Any],
    arguments: Mapping[str, Any],
) -> Any:
    """DoubleML's own tuning method in the two passes of the module docstring, for ``tune`` and
    ``tune_ml_models`` (:mod:`fanfit.client.doubleml.tune_optuna`).

    Parameters
    ----------
    parts : list
        The DoubleML models whose ``_params`` the record pass must leave as they were (the
        model, or a multi-part model's parts).
    patched : callable
        ``answer -> context manager`` in which DoubleML's search function answers each search
        (an item with a ``key``) with ``answer(item)``.
    stand_in : callable
        The record pass's answer to an item.
    run : callable
        ``items -> {key: result}``: the items' searches on the stack.
    doubleml_method, arguments
        DoubleML's bound method and its keyword arguments.

    Returns
    -------
    What the replay of ``doubleml_method`` returns.
    """
    state = np.random.get_state()
    params = [copy.deepcopy(getattr(p, "_params", None)) for p in parts]
    recorded: list[Any] = []

    def record(item: Any) -> Any:
        recorded.append(item)
        return stand_in(item)

    try:
        with warnings.catch_warnings(), patched(record):
            warnings.simplefilter("ignore")  # the replay warns as DoubleML does
            with contextlib.suppress(_NeedsResult):  # the rest runs in the replay
                doubleml_method(**arguments)
    finally:
        for part, kept in zip(parts, params, strict=True):
            part._params = kept  # the stand-ins' parameters are not kept
    results = run(recorded)

    def replay(item: Any) -> Any:
        if item.key not in results:
            results.update(run([item]))
        return results[item.key]

    np.random.set_state(state)
    with patched(replay):
        return doubleml_method(**arguments)
