"""DoubleML's ``tune_ml_models()`` (Optuna) on a fanfit stack: each trial's cross-validation fits
are tuning units of a job, the study stays on the client.

DoubleML 0.11.4's ``tune_ml_models`` (``double_ml.py``) checks its arguments and calls the class's
``_nuisance_tuning_optuna``, which gives each nuisance its target and rows and runs one Optuna
study per nuisance through ``doubleml.utils._tune_optuna._dml_tune_optuna``: ``study.optimize``
of an objective that samples the trial's parameters with the user's search-space callable and
returns ``np.nanmean(cross_val_score(clone(learner).set_params(**params), x, y, cv, scoring))``.
fanfit's classes run DoubleML's own ``tune_ml_models`` (its checks, every class's targets and
rows, ``set_as_params``, ``return_tune_res``) with that one function replaced in the class's
module, in the two passes of :mod:`fanfit.client.doubleml.tune`:

1. *record*: each study's inputs are checked as DoubleML checks them (its own
   ``_resolve_optuna_scoring``, ``_check_tuning_inputs`` and ``_get_optuna_settings``), the
   learner against the allow-list and the ``cv`` as a partition of the rows, and the call is
   answered with a stand-in; a study whose tuned estimator the class needs before it can go on
   (PLR's ``'IV-type'`` ``ml_g``, LPLR's ``ml_t``) ends the pass;
2. the recorded studies run, Optuna's ask-and-tell on the client: each wave asks
   ``n_jobs_optuna`` trials (1 when unset: DoubleML's sequential ``optimize``; -1: the client's
   CPU count, as Optuna), calls the search-space callable of each here (nothing leaves the
   client but the parameters it returns, as plain JSON), fits every (trial, cv fold) of the wave
   as one ``plr`` search job (:mod:`fanfit.client.doubleml.tune`'s), scores each fold with the
   study's scorer (:func:`fanfit.dml.tuning.search_result`) and tells the study the trial's
   ``np.nanmean``. Studies that share no sampler or study object run side by side (one job
   each per wave); those that share one run in DoubleML's order, so that a seeded sampler
   draws what it draws in DoubleML;
3. *replay*: ``tune_ml_models`` runs again and each study it asks for is answered with its
   ``DMLOptunaResult``; a study not recorded runs then.

``optimize``'s settings are honoured as ``Study.optimize`` honours them: ``n_trials``,
``timeout`` (checked before each wave), ``catch``, ``callbacks`` (after each trial, with the
study and the frozen trial), ``gc_after_trial``, ``show_progress_bar`` (fanfit's job progress);
``optimize_kwargs`` outside these is refused by name, as ``Study.optimize`` refuses it.

What differs from DoubleML: with ``n_jobs_optuna`` > 1 Optuna runs trials in threads as each
ends, here a wave's trials are asked together and told after the wave's job; an untuned
nuisance's ``best_estimator`` (DoubleML fits it on the whole sample) is fitted here on first
use; the learners' ``random_state`` as in ``fit()`` (a learner without one draws from the job's
seed).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import gc
import hashlib
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.client.doubleml.tune import (
    _chunks,
    _NeedsResult,
    _patched,
    _predictions,
    _tuning_module,
    record_and_replay,
)
from fanfit.dml.tuning import Search, search_result
from fanfit.learners import as_learner_spec

__all__ = ["ON_STACK", "tune_ml_models_on_stack"]

#: True while a ``tune_ml_models`` runs its studies on the stack (a multi-part model's parts,
#: fanfit classes themselves, then run DoubleML's own, whose studies are the outer one's).
ON_STACK: contextvars.ContextVar[bool] = contextvars.ContextVar("fanfit_on_stack", default=False)

#: ``Study.optimize`` keywords that ``optimize_kwargs`` may set (Optuna 4 and 5).
OPTIMIZE_KWARGS = frozenset(
    {"n_trials", "timeout", "n_jobs", "catch", "callbacks", "gc_after_trial", "show_progress_bar"}
)


@dataclass
class _Study:
    """One ``_dml_tune_optuna`` call: a nuisance's study and its inputs."""

    learner: Any
    param_fn: Callable[[Any], Any]
    scoring: Any
    cv: Any
    settings: dict[str, Any]
    x: np.ndarray
    y: np.ndarray
    learner_name: str
    params_name: str
    key: str
    study: Any = None
    asked: int = 0
    started: float = field(default_factory=time.monotonic)


def _module() -> Any:
    from doubleml.utils import _tune_optuna

    return _tune_optuna


def _digest(learner: Any, param_fn: Any, scoring: Any, x: np.ndarray, y: np.ndarray,
            names: tuple[str, str]) -> str:  # fmt: skip
    h = hashlib.sha256()
    h.update(repr((id(learner), repr(learner), id(param_fn), repr(scoring), names)).encode())
    for array in (x, y):
        a = np.ascontiguousarray(array)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def partition(cv: Any, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The search fold of each row of one ``cross_val_score(cv=cv)``: ``cv.split(x, y)`` (or the
    listed ``(train, test)`` pairs) as the fold (0 to n_splits - 1) of each row.

    Parameters
    ----------
    cv : cross-validation splitter or list of (train, test) index pairs
        As DoubleML's ``resolve_optuna_cv`` returns it.
    x : numpy.ndarray, shape (n_rows, n_features)
    y : numpy.ndarray, shape (n_rows,)

    Returns
    -------
    numpy.ndarray of int64, shape (n_rows,)

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        Splits that are not a partition (each row in one test set, each trained on all other
        rows), as a ``TimeSeriesSplit`` or ``ShuffleSplit`` gives: the stack fits K-fold.
    """
    n = len(y)
    splits = list(cv.split(x, y)) if callable(getattr(cv, "split", None)) else list(cv)
    folds = np.full(n, -1, dtype=np.int64)
    for k, (train, test) in enumerate(splits):
        train, test = np.asarray(train, dtype=np.int64), np.asarray(test, dtype=np.int64)
        in_train = np.zeros(n, dtype=bool)
        in_train[train] = True
        if (folds[test] != -1).any() or in_train[test].any() or in_train.sum() + len(test) != n:
            folds[:] = -2
            break
        folds[test] = k
    if len(splits) < 2 or (folds < 0).any():
        raise errors.UnsupportedArgumentError(
            f"tune_ml_models: cv {type(cv).__name__} does not split the rows into K folds (each "
            "row tested once, trained on all other rows); on the stack a study's "
            "cross-validation is K-fold: pass an int, a KFold or StratifiedKFold, or such splits"
        )
    return folds


def _settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``Study.optimize``'s keywords as DoubleML's ``_dml_tune_optuna`` builds them.

    Raises
    ------
    TypeError
        An ``optimize_kwargs`` key ``Study.optimize`` does not take, or ``catch`` not a tuple.
    """
    kwargs = {
        "n_trials": settings["n_trials"], "timeout": settings["timeout"],
        "callbacks": settings["callbacks"], "catch": settings["catch"],
        "show_progress_bar": settings["show_progress_bar"],
        "gc_after_trial": settings["gc_after_trial"], "n_jobs": settings["n_jobs_optuna"],
    }  # fmt: skip
    extra = sorted(set(settings.get("optimize_kwargs", {})) - OPTIMIZE_KWARGS)
    if extra:
        raise TypeError(f"optimize_kwargs: Study.optimize() takes no {', '.join(extra)}")
    kwargs.update(settings.get("optimize_kwargs", {}))
    if not isinstance(kwargs["catch"], tuple):
        raise TypeError(f"catch must be a tuple, got {type(kwargs['catch']).__name__}")
    n_jobs = kwargs["n_jobs"]
    kwargs["n_jobs"] = (os.cpu_count() or 1) if n_jobs == -1 else max(int(n_jobs or 1), 1)
    return kwargs


class _StandIn:
    """The record pass's answer: no parameters to set, nothing else to read."""

    best_params: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _NeedsResult(name)


def _untuned(learner: Any, x: np.ndarray, y: np.ndarray, scoring: Any,
             names: tuple[str, str]) -> Any:  # fmt: skip
    """DoubleML's result of a nuisance without a search space, its ``best_estimator`` (the
    learner fitted on ``x``, ``y``) fitted on first use."""
    from doubleml.utils._tune_optuna import DMLOptunaResult
    from sklearn.base import clone

    class _Untuned(DMLOptunaResult):  # type: ignore[misc]
        def __getattr__(self, name: str) -> Any:
            if name != "best_estimator":
                raise AttributeError(name)
            self.best_estimator = clone(learner).fit(x, y)
            return self.best_estimator

    result = _Untuned(
        learner_name=names[0], params_name=names[1], best_estimator=None,
        best_params=clone(learner).get_params(deep=True), best_score=np.nan,
        scoring_method=scoring, study=None, tuned=False,
    )  # fmt: skip
    del result.best_estimator
    return result


def _dml_tune_optuna_with(answer: Callable[[_Study], Any]) -> Callable[..., Any]:
    """A stand-in for DoubleML 0.11.4's ``_dml_tune_optuna`` (same signature) that checks the
    study's inputs as DoubleML does and hands the study to ``answer``."""
    dml = _module()
    seen: dict[str, int] = {}  # studies of equal inputs (a QTE's quantiles) are distinct studies

    def _dml_tune_optuna(
        y: Any, x: Any, learner: Any, param_grid_func: Any, scoring_method: Any, cv: Any,
        optuna_settings: Any, learner_name: str, params_name: str,
    ) -> Any:  # fmt: skip
        scoring, _ = dml._resolve_optuna_scoring(scoring_method, learner, params_name)
        splitter = dml._check_tuning_inputs(
            y, x, learner, param_grid_func, scoring, cv, params_name=params_name
        )
        xs, ys = np.asarray(x), np.asarray(y)
        if param_grid_func is None:
            return _untuned(learner, xs, ys, scoring, (learner_name, params_name))
        settings = dml._get_optuna_settings(optuna_settings, params_name)
        _settings(settings)  # refused here, before any job
        as_learner_spec(learner, params_name)
        partition(splitter, xs, ys)
        digest = _digest(learner, param_grid_func, scoring, xs, ys, (learner_name, params_name))
        seen[digest] = seen.get(digest, -1) + 1
        key = f"{digest}:{seen[digest]}"
        return answer(_Study(learner, param_grid_func, scoring, splitter, settings, xs, ys,
                             learner_name, params_name, key))  # fmt: skip

    return _dml_tune_optuna


def _group(study: _Study) -> int:
    """Studies of one group share a study or a sampler object and run one after another."""
    shared = study.settings.get("study") or study.settings.get("sampler")
    return id(shared) if shared is not None else id(study)


@contextlib.contextmanager
def _in_loop(study: Any) -> Iterator[None]:
    """Inside ``optimize``, for Optuna: ``study.stop()`` from the search space or a callback."""
    study._thread_local.in_optimize_loop = True
    try:
        yield
    finally:
        study._thread_local.in_optimize_loop = False


def _ask(s: _Study) -> list[tuple[Any, dict[str, Any], np.ndarray]]:
    """The next wave of ``s``: (trial, parameters, folds) of up to ``n_jobs`` trials; none when
    the study is done (``n_trials``, ``timeout`` or ``study.stop()``). A trial whose search
    space raises is told (failed or pruned) here and raised unless ``catch`` names it."""
    import optuna

    kw = _settings(s.settings)
    if s.study is None:
        if s.settings.get("verbosity") is not None:
            optuna.logging.set_verbosity(s.settings["verbosity"])
        s.study = _module()._create_study(s.settings, s.params_name)
        s.study._stop_flag = False
        s.started = time.monotonic()
    wave: list[tuple[Any, dict[str, Any], np.ndarray]] = []
    while len(wave) < kw["n_jobs"]:
        if s.study._stop_flag or (kw["n_trials"] is not None and s.asked >= kw["n_trials"]):
            break
        if kw["timeout"] is not None and time.monotonic() - s.started >= kw["timeout"]:
            break
        s.asked += 1
        trial = s.study.ask()
        try:
            with _in_loop(s.study):
                params = s.param_fn(trial)
            if not isinstance(params, dict):
                raise TypeError(f"param function must return a dict. Got {type(params).__name__}.")
        except optuna.TrialPruned:
            _told(s, trial, None, optuna.trial.TrialState.PRUNED, kw)
            continue
        except Exception as exc:
            _told(s, trial, None, optuna.trial.TrialState.FAIL, kw)
            if not isinstance(exc, kw["catch"]):
                raise
            continue
        wave.append((trial, params, partition(s.cv, s.x, s.y)))
    return wave


def _told(s: _Study, trial: Any, value: float | None, state: Any, kw: dict[str, Any]) -> None:
    """``study.tell`` of one trial, then what ``optimize`` does after each trial."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a NaN value fails the trial, as in optimize
        frozen = s.study.tell(trial, value, state=state, skip_if_finished=True)
    if kw["gc_after_trial"]:
        gc.collect()
    with _in_loop(s.study):
        for callback in kw["callbacks"] or ():
            callback(s.study, copy.deepcopy(frozen))


def _value(s: _Study, folds: np.ndarray, predictions: np.ndarray, params: dict[str, Any]) -> float:
    """``np.nanmean`` of the trial's per-fold test scores, as DoubleML's objective."""
    from sklearn.base import is_classifier

    one = Search((params,), folds, int(folds.max()) + 1)
    result = search_result(
        one, s.y, predictions[:, np.newaxis], s.scoring, is_classifier(s.learner)
    )
    scores = [result.cv_results_[f"split{k}_test_score"][0] for k in range(one.n_folds)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all NaN: NaN, which fails the trial
        return float(np.nanmean(scores))


def _result(s: _Study) -> Any:
    import optuna
    from doubleml.utils._tune_optuna import DMLOptunaResult
    from sklearn.base import clone

    complete = optuna.trial.TrialState.COMPLETE
    if not s.study.trials or all(t.state != complete for t in s.study.trials):
        raise RuntimeError("Optuna optimization failed to produce any complete trials.")
    best_params = dict(s.study.best_trial.params)
    return DMLOptunaResult(
        learner_name=s.learner_name, params_name=s.params_name,
        best_estimator=clone(s.learner).set_params(**best_params), best_params=best_params,
        best_score=s.study.best_value, scoring_method=s.scoring, study=s.study, tuned=True,
    )  # fmt: skip


def _run_studies(
    studies: list[_Study], submit: Callable[[pd.DataFrame, dict[str, Any]], Any], seed: int,
    timeout: float, progress: bool,
) -> dict[str, Any]:  # fmt: skip
    """Every study of ``studies`` to its end, wave by wave (module docstring): each wave, one
    job per running study, all submitted before any is awaited.

    Raises
    ------
    fanfit.errors.InvalidJobError (or a subclass)
        A trial's parameters a job refuses (not plain JSON), before its wave's upload.
    fanfit.errors.JobFailedError
        A job failed or did not end within ``timeout``.
    RuntimeError
        A study without a complete trial (as DoubleML).
    """
    import optuna

    queues: dict[int, list[_Study]] = {}
    for s in {s.key: s for s in studies}.values():
        queues.setdefault(_group(s), []).append(s)
    out: dict[str, Any] = {}
    while queues:
        waves = []
        for group, queue in list(queues.items()):
            while queue:
                wave = _ask(queue[0])
                if wave:
                    waves.append((queue[0], wave))
                    break
                done = queue.pop(0)
                out[done.key] = _result(done)
            if not queue:
                del queues[group]
        inputs = [
            (s, wave, _chunks(s.learner, s.x, s.y, tuple(p for _, p, _ in wave),
                              np.column_stack([f for _, _, f in wave]), seed))
            for s, wave in waves
        ]  # fmt: skip
        jobs = [
            (s, wave, [submit(*job_input) for job_input in chunks]) for s, wave, chunks in inputs
        ]
        for s, wave, submitted in jobs:
            kw = _settings(s.settings)
            predictions = _predictions(submitted, timeout, progress or kw["show_progress_bar"])
            for c, (trial, params, folds) in enumerate(wave):
                value = _value(s, folds, predictions[:, c], params)
                _told(s, trial, value, optuna.trial.TrialState.COMPLETE, kw)
    return out


def tune_ml_models_on_stack(
    model: Any,
    doubleml_tune_ml_models: Callable[..., Any],
    arguments: Mapping[str, Any],
    submit: Callable[[pd.DataFrame, dict[str, Any]], Any],
    *,
    seed: int = 0,
    timeout: float = 3600.0,
    progress: bool = False,
) -> Any:
    """Run DoubleML's ``tune_ml_models()`` of ``model`` with its trials' fits on the stack
    (module docstring).

    Parameters
    ----------
    model : fanfit's DoubleML class instance
    doubleml_tune_ml_models : callable
        DoubleML's own ``tune_ml_models`` bound to ``model``.
    arguments : mapping
        Its keyword arguments (``ml_param_space``, ``scoring_methods``, ``cv``, ...).
    submit : callable
        ``(frame, options) -> EstimateJob``: checks and submits one wave's search job.
    seed : int
        The jobs' seed (``random_state`` of learners that have none).
    timeout, progress
        As :meth:`fanfit.client.EstimateJob.result`, per job.

    Returns
    -------
    What DoubleML's ``tune_ml_models`` returns: ``model``, or with ``return_tune_res`` a list
    (per treatment) of ``{params name: DMLOptunaResult}``.

    Raises
    ------
    ValueError, TypeError
        DoubleML's own checks of the arguments and settings (before any job).
    fanfit.errors.UnsupportedArgumentError
        A ``cv`` that is not K-fold (:func:`partition`), or a DoubleML other than 0.11's.
    fanfit.errors.InvalidLearnerError, fanfit.errors.InvalidJobError, fanfit.errors.JobFailedError
        As ``fit()``.
    RuntimeError
        A study without a complete trial (as DoubleML).
    """
    parts = list(getattr(model, "modellist", None) or [model])  # a multi-part model's models
    modules = {id(m): m for m in (_tuning_module(p, "_nuisance_tuning_optuna",
                                                 "_dml_tune_optuna") for p in parts)}  # fmt: skip

    def patched(answer: Callable[[_Study], Any]) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        for module in modules.values():
            stack.enter_context(_patched(module, _dml_tune_optuna_with(answer), "_dml_tune_optuna"))
        return stack

    token = ON_STACK.set(True)
    try:
        return record_and_replay(
            parts, patched, lambda study: _StandIn(),
            lambda studies: _run_studies(studies, submit, seed, timeout, progress),
            doubleml_tune_ml_models, arguments,
        )  # fmt: skip
    finally:
        ON_STACK.reset(token)
