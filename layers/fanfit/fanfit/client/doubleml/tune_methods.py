"""``tune()`` and ``tune_ml_models()`` of fanfit's DoubleML classes: DoubleML's own methods, their
searches' and trials' fits on the stack (:mod:`fanfit.client.doubleml.tune`,
:mod:`fanfit.client.doubleml.tune_optuna`).

The classes that use them give ``_fanfit_search_submit(client, job_options)``: the
``(frame, options) -> EstimateJob`` that checks and submits one search job
(:func:`fanfit.client.doubleml.base._search_submit`).
"""

from __future__ import annotations

from typing import Any

from fanfit.client.doubleml.tune import tune_on_stack
from fanfit.client.doubleml.tune_optuna import ON_STACK, tune_ml_models_on_stack

__all__: list[str] = []


class _TunesModels:
    """``tune_ml_models()`` of fanfit's DoubleML classes, the multi-part ones included (a base
    of :class:`fanfit.client.doubleml.base._OnStack` and
    :class:`fanfit.client.doubleml.parts._SideBySide`): DoubleML's own, the trials' fits on the
    stack. Inside another model's (a DoubleMLQTE's parts), DoubleML's own runs: the outer one's
    studies are the stack's."""

    def _fanfit_search_submit(self, client: Any, job_options: Any) -> Any:
        """``(frame, options) -> EstimateJob`` of the searches (the class's)."""
        raise NotImplementedError

    def tune_ml_models(
        self,
        ml_param_space: Any,
        scoring_methods: Any = None,
        cv: Any = 5,
        set_as_params: Any = True,
        return_tune_res: Any = False,
        optuna_settings: Any = None,
        *,
        client: Any = None,
        seed: int = 0,
        timeout: float = 3600.0,
        progress: bool = False,
        **job_options: Any,
    ) -> Any:
        """DoubleML's ``tune_ml_models()`` (Optuna), each trial's cross-validation fits on the
        stack (:mod:`fanfit.client.doubleml.tune_optuna`): DoubleML's signature and semantics,
        the study on the client (ask-and-tell), ``n_jobs_optuna`` trials per wave.

        Parameters
        ----------
        ml_param_space, scoring_methods, cv, set_as_params, return_tune_res, optuna_settings
            As DoubleML's; the search-space callables run here, the parameters they return
            must be plain JSON; ``cv`` must be K-fold.
        client, seed, timeout, progress, **job_options
            As :meth:`fit`; one job per study and wave.

        Returns
        -------
        self, or with ``return_tune_res`` DoubleML's list of ``{params name: DMLOptunaResult}``.

        Raises
        ------
        ValueError, TypeError
            DoubleML's own checks of the arguments and settings, before anything runs.
        fanfit.errors.UnsupportedArgumentError
            A ``cv`` that is not K-fold.
        fanfit.errors.InvalidJobError (or a subclass)
            A job option outside :data:`JOB_OPTIONS`, a learner or a trial's parameters a job
            refuses.
        fanfit.errors.JobFailedError
            A trial's job failed or did not end within ``timeout``.
        """
        arguments = {
            "ml_param_space": ml_param_space, "scoring_methods": scoring_methods, "cv": cv,
            "set_as_params": set_as_params, "return_tune_res": return_tune_res,
            "optuna_settings": optuna_settings,
        }  # fmt: skip
        if ON_STACK.get():  # a part of a model whose tune_ml_models is on the stack
            return super().tune_ml_models(**arguments)  # type: ignore[misc]
        return tune_ml_models_on_stack(
            self, super().tune_ml_models, arguments,  # type: ignore[misc]
            self._fanfit_search_submit(client, job_options), seed=seed, timeout=timeout, progress=progress,
        )  # fmt: skip


class _Tuning(_TunesModels):
    """``tune()`` and ``tune_ml_models()`` of fanfit's single DoubleML classes (a base of
    :class:`fanfit.client.doubleml.base._OnStack`): DoubleML's own, their fits on the stack."""

    def tune(
        self,
        param_grids: Any,
        tune_on_folds: Any = False,
        scoring_methods: Any = None,
        n_folds_tune: Any = 5,
        search_mode: Any = "grid_search",
        n_iter_randomized_search: Any = 100,
        n_jobs_cv: Any = None,
        set_as_params: Any = True,
        return_tune_res: Any = False,
        *,
        client: Any = None,
        seed: int = 0,
        timeout: float = 3600.0,
        progress: bool = False,
        **job_options: Any,
    ) -> Any:
        """DoubleML's ``tune()``, its searches' fits on the stack (:mod:`fanfit.client.
        doubleml.tune`): DoubleML's signature and semantics, the same candidates and search
        folds after the same ``np.random.seed``, and the chosen parameters set for :meth:`fit`
        with ``set_as_params``.

        Parameters
        ----------
        param_grids, tune_on_folds, scoring_methods, n_folds_tune, search_mode,
        n_iter_randomized_search, n_jobs_cv, set_as_params, return_tune_res
            As DoubleML's (``n_jobs_cv`` is checked and otherwise unused: the stack sizes the
            work). Grid values must be plain JSON; randomized search's distributions are
            sampled here.
        client, seed, timeout, progress, **job_options
            As :meth:`fit`; one job per search.

        Returns
        -------
        self, or with ``return_tune_res`` DoubleML's results, whose searches are
        :class:`fanfit.dml.tuning.SearchResult` s (``cv_results_``, ``best_params_``,
        ``best_score_``, ``best_index_``; ``best_estimator_`` refitted here on first use).

        Raises
        ------
        ValueError, TypeError
            DoubleML's own checks of the arguments, before anything runs.
        fanfit.errors.InvalidJobError (or a subclass)
            A job option outside :data:`JOB_OPTIONS`, a learner or a candidate a job refuses.
        fanfit.errors.JobFailedError
            A search's job failed or did not end within ``timeout``.
        """
        arguments = {
            "param_grids": param_grids, "tune_on_folds": tune_on_folds,
            "scoring_methods": scoring_methods, "n_folds_tune": n_folds_tune,
            "search_mode": search_mode, "n_iter_randomized_search": n_iter_randomized_search,
            "n_jobs_cv": n_jobs_cv, "set_as_params": set_as_params,
            "return_tune_res": return_tune_res,
        }  # fmt: skip
        return tune_on_stack(
            self, super().tune, arguments, self._fanfit_search_submit(client, job_options),  # type: ignore[misc]
            seed=seed, timeout=timeout, progress=progress,
        )  # fmt: skip
