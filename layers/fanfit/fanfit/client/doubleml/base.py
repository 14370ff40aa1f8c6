"""What fanfit's DoubleML classes share: :meth:`_OnStack.fit` on a stack, and their helpers.

:class:`_OnStack` is the mixin every class of :mod:`fanfit.client.doubleml` puts before DoubleML's
own class: its :meth:`~_OnStack.fit` sends the data, DoubleML's sample splitting and the learners
(as allow-listed specs) to an estimate job, hands the job's out-of-fold predictions to DoubleML's
``fit(external_predictions=...)`` and checks that coef and se equal the job's (relative
:data:`RTOL`). Also here: :func:`default_client`, the learner and data helpers the constructors
use and :class:`_PropensityOptions` (clipping, ``normalize_ipw``) of the IPW models. The ``fit``
of the multi-part classes is :mod:`fanfit.client.doubleml.parts`'s; ``tune`` and
``tune_ml_models`` are :mod:`fanfit.client.doubleml.tune_methods`'s.

Importing this module imports DoubleML (a client extra: ``pip install 'fanfit[doubleml]'``);
without it, :class:`fanfit.dml.interop.MissingDependencyError` gives the pip command.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Set
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.client.doubleml.tune_methods import _Tuning
from fanfit.dml.folds import smpls_to_folds, validate_cluster_folds
from fanfit.dml.interop import import_doubleml
from fanfit.dml.units import fit_units, learner_name, n_stages
from fanfit.learners import LearnerSpec, as_learner_spec
from fanfit.learners.allowlist import json_value

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra
from doubleml.utils import DMLDummyClassifier, DMLDummyRegressor  # noqa: E402

__all__ = ["JOB_OPTIONS", "RTOL", "default_client"]

#: Relative tolerance of the check that DoubleML's coef and se equal the job's.
RTOL = 1e-9
#: Options of the estimate job that ``fit`` passes on (they do not change the numbers).
JOB_OPTIONS = ("max_concurrency", "sharding", "units_per_shard", "weight")


#: Whether :func:`_submit` has warned of a float32 DoubleML frame in this process.
_warned_float32 = False


def _submit(client: Any, frame: pd.DataFrame, options: Mapping[str, Any]) -> Any:
    """Check and start one job of a DoubleML class in the dtypes DoubleML computes ``frame`` in.

    fanfit computes in float64 (:func:`fanfit.client.check.check_estimate`) except here: a
    DoubleML class must equal DoubleML's own ``fit()``, which keeps float32 columns float32
    (:func:`fanfit.client.check.check_doubleml_estimate`). The first such job in a process warns
    (:class:`fanfit.errors.Float32DataWarning`) how to cast.

    Parameters
    ----------
    client : fanfit.client.Client
    frame : DataFrame
        ``DoubleMLData.data`` (with a part's columns: :meth:`_SideBySide._fanfit_parts`).
    options : mapping
        The job's options (:meth:`_OnStack.fanfit_options` and :data:`JOB_OPTIONS`).

    Returns
    -------
    fanfit.client.EstimateJob

    Raises
    ------
    As :meth:`fanfit.client.Client.submit_estimate`.
    """
    given, checked = _check(frame, options)
    return client.submit_estimate(checked, options=given)


def _check(frame: pd.DataFrame, options: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(EstimateOptions, CheckedEstimate)`` of one job or part of a DoubleML class, in
    DoubleML's dtypes; the first float32 one in a process warns (:func:`_submit`)."""
    global _warned_float32
    from fanfit.client.check import check_doubleml_estimate
    from fanfit.client.options import EstimateOptions

    given = EstimateOptions.from_keywords(data=frame, **options)
    checked = check_doubleml_estimate(frame, given)
    if checked.spec.dtypes and not _warned_float32:
        _warned_float32 = True
        roles = ", ".join(sorted(checked.spec.dtypes))
        warnings.warn(
            f"the DoubleMLData holds float32 columns ({roles}): DoubleML computes in float32 "
            "there, and so does this fit, to equal DoubleML's; on large-valued columns that loses "
            "digits (the 401(k) PLR with linear learners moves by 32 %). Build the DoubleMLData "
            'from df.astype("float64") for float64 results.',
            errors.Float32DataWarning,
            stacklevel=4,
        )
    return given, checked


def default_client() -> Any:
    """The client ``fit()`` uses when it is given none.

    The stack named by the ``FANFIT_STACK`` environment variable (``fanfit.Client(stack=...)``,
    a stack deployed with ``sam deploy``); else the local stack, started (``fanfit local up``)
    when none is running, and left running for the next fit (one line on stderr says how to
    stop it: ``fanfit local down``).

    Returns
    -------
    fanfit.client.Client

    Raises
    ------
    fanfit.errors.StackError
        The stack cannot be reached, started or read.
    """
    from fanfit.client.client import Client

    name = os.environ.get("FANFIT_STACK")
    if name:
        return Client(stack=name)
    from fanfit.local import stack as local_stack

    if not local_stack.status().get("running"):
        started = local_stack.up() or {}
        endpoint = started.get("endpoint", "this host")
        print(local_stack.KEPT_RUNNING.format(endpoint=endpoint), file=sys.stderr)
    return Client.local_stack()


def _learner_spec(name: str, learner: Any) -> LearnerSpec:
    """The allow-listed spec of learner ``name`` (:func:`fanfit.learners.as_learner_spec`).

    Estimator objects of the allow-list, ``Pipeline``, ``GridSearchCV``/``RandomizedSearchCV``
    and LightGBM's become specs (parameters that differ from the class's defaults, so an unset
    ``random_state`` is left to the job's seed); strings and specs are parsed.

    Raises
    ------
    fanfit.errors.InvalidLearnerError
        The class, a step or a parameter value is outside the allow-list (the message names
        ``name`` and says what is allowed).
    """
    return as_learner_spec(learner, name)


def _estimator(name: str, learner: Any) -> Any:
    """A learner as DoubleML takes it: spec strings and specs built (unfitted), objects as given."""
    if learner is None or not isinstance(learner, str | LearnerSpec):
        return learner
    return _learner_spec(name, learner).build()


def _placeholder(learner: Any) -> bool:
    """Whether ``learner`` is DoubleML's ``DMLDummyRegressor`` or ``DMLDummyClassifier``: no
    learner, but the place of one whose predictions ``fit(external_predictions=...)`` gives."""
    return isinstance(learner, DMLDummyRegressor | DMLDummyClassifier)


def _given_predictions(external_predictions: Any) -> dict[tuple[str, str], np.ndarray]:
    """DoubleML's ``external_predictions`` (``{treatment column: {key: array (n_obs, n_rep)}}``,
    checked by DoubleML's own ``_check_fit``) by ``(key, treatment column)``; None entries left out."""
    out: dict[tuple[str, str], np.ndarray] = {}
    for d_col, by_key in (external_predictions or {}).items():
        for key, values in by_key.items():
            if values is not None:
                out[(str(key), str(d_col))] = np.asarray(values, dtype=np.float64)
    return out


def _dml_data(
    obj_dml_data: Any, y_col: Any, d_cols: Any, x_cols: Any, z_cols: Any, cluster_cols: Any
) -> Any:
    """``obj_dml_data`` as a DoubleMLData: one given, or built from a DataFrame and the columns.

    Raises
    ------
    fanfit.errors.InvalidDataError
        A DataFrame without ``y_col`` or ``d_cols``, columns given next to a DoubleMLData, or
        something else.
    """
    columns = {"y_col": y_col, "d_cols": d_cols, "x_cols": x_cols, "z_cols": z_cols,
               "cluster_cols": cluster_cols}  # fmt: skip
    given = [k for k, v in columns.items() if v is not None]
    if isinstance(obj_dml_data, pd.DataFrame):
        if y_col is None or d_cols is None:
            raise errors.InvalidDataError(
                "obj_dml_data is a DataFrame: name its columns with y_col and d_cols (and x_cols, "
                "z_cols, cluster_cols as DoubleMLData takes them)"
            )
        return _doubleml.DoubleMLData(obj_dml_data, **columns)
    if isinstance(obj_dml_data, _doubleml.DoubleMLData):
        if given:
            raise errors.InvalidDataError(
                f"{', '.join(given)} given with a DoubleMLData, which names its columns itself; "
                "give them with a DataFrame only"
            )
        return obj_dml_data
    raise errors.InvalidDataError(
        "obj_dml_data must be a doubleml.DoubleMLData (or DoubleMLClusterData) or a pandas "
        f"DataFrame with y_col and d_cols, got {type(obj_dml_data).__name__}"
    )


def _unsupported(argument: str, instead: str) -> errors.UnsupportedArgumentError:
    return errors.UnsupportedArgumentError(
        f"{argument} is not supported on a fanfit stack; {instead}"
    )


def _check_arguments(data: Any, score: Any) -> None:
    """Refuse, before anything runs, what a stack cannot honour.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
    """
    if callable(score):
        raise _unsupported("a callable score", "give one of DoubleML's score names")
    if not data.use_other_treat_as_covariate:
        raise _unsupported(
            "use_other_treat_as_covariate=False",
            "fanfit uses the other treatments as covariates, as DoubleML's default",
        )


def _check_fit_options(store_models: Any, store_predictions: Any, job_options: Any) -> None:
    """Refuse, before anything is submitted, the ``fit()`` arguments a stack cannot honour.

    Raises
    ------
    fanfit.errors.InvalidJobError
        ``store_models`` or ``store_predictions`` not a bool, or a job option outside
        :data:`JOB_OPTIONS`.
    """
    if not isinstance(store_models, bool):
        raise errors.InvalidJobError(f"store_models must be True or False, got {store_models!r}")
    if not isinstance(store_predictions, bool):
        raise errors.InvalidJobError(
            f"store_predictions must be True or False, got {store_predictions!r}"
        )
    unknown = sorted(set(job_options) - set(JOB_OPTIONS))
    if unknown:
        raise errors.InvalidJobError(
            f"fit() takes no option {', '.join(unknown)}; job options: {', '.join(JOB_OPTIONS)}"
        )


def _search_submit(client: Any, job_options: Mapping[str, Any]) -> Any:
    """``(frame, options) -> EstimateJob`` of the searches of ``tune`` and ``tune_ml_models``:
    checks and submits one search job with ``job_options`` (refused by name here, before any
    job, unless in :data:`JOB_OPTIONS`); the default client is started on the first job."""
    _check_fit_options(False, False, job_options)
    clients = [client]

    def submit(frame: pd.DataFrame, options: dict[str, Any]) -> Any:
        if clients[0] is None:
            clients[0] = default_client()
        given, checked = _check(frame, {**options, **job_options})
        return clients[0].submit_estimate(checked, options=given)

    return submit


class _OnStack(_Tuning):
    """What fanfit's DoubleML classes add to DoubleML's: :meth:`fit` on a stack.

    Attributes
    ----------
    fanfit_job : fanfit.client.EstimateJob or None
        The job of the last fit.
    fanfit_result : fanfit.client.EstimateResult or None
        Its result (timings, cost, execution ARN).
    """

    _fanfit_model = ""
    #: Whether DoubleML's class takes ``external_predictions`` (its
    #: ``_external_predictions_implemented``, which fanfit's SSM and CVaR set for the job's own).
    _fanfit_doubleml_external = True
    #: Whether DoubleML's ``_nuisance_est`` keeps the targets (and so the loss) of an external
    #: prediction (DID, DIDCS, APO), or leaves them empty (PLR, PLIV, IRM, IIVM, PLPR).
    _fanfit_external_targets = False
    _predictions: Any  # DoubleML's, set by its fit
    _nuisance_targets: Any
    fanfit_job: Any = None
    fanfit_result: Any = None

    def _fanfit_check_learners(self) -> None:
        for name, learner in self._learner.items():  # type: ignore[attr-defined]
            if not _placeholder(learner):  # its predictions come with fit()
                _learner_spec(name, learner)

    def _fanfit_model_options(self) -> dict[str, Any]:
        return {}

    def _fanfit_fits_nothing(self, spec: Any) -> bool:
        """Whether the job would fit nothing (every prediction given): then DoubleML's own
        ``fit`` runs on the given predictions and no job is submitted."""
        return not any(fit_units(spec, stage) for stage in range(n_stages(spec)))

    def _fanfit_check_external(self) -> None:
        """Refuse the user's external predictions where the class cannot take them: where
        DoubleML's own class takes none (:attr:`_fanfit_doubleml_external`), as DoubleML does.

        Raises
        ------
        NotImplementedError
            DoubleML's message (DoubleMLSSM, DoubleMLCVAR).
        """
        if not self._fanfit_doubleml_external:
            raise NotImplementedError(
                f"External predictions not implemented for {type(self).__name__}."
            )

    def _fanfit_frame(self) -> pd.DataFrame:
        """The data the job runs on: DoubleML's data frame (APO adds its weight columns)."""
        return self._dml_data.data  # type: ignore[attr-defined,no-any-return]

    def fanfit_options(
        self,
        seed: int = 0,
        external: Set[tuple[str, str]] | Mapping[tuple[str, str], Any] = frozenset(),
    ) -> dict[str, Any]:
        """The estimate job's options (:class:`fanfit.client.EstimateOptions`) of this model.

        Parameters
        ----------
        seed : int
            The job's seed (learners without a ``random_state``).
        external : set of (key, treatment column)
            The nuisances whose predictions ``fit(external_predictions=...)`` gives: a learner
            that is DoubleML's ``DMLDummyRegressor``/``DMLDummyClassifier`` (a placeholder) is
            sent as scikit-learn's ``DummyRegressor``/``DummyClassifier``, which no unit fits,
            when every nuisance it stands for is among them.

        Returns
        -------
        dict
            model, score, y, d, x, z, the learners as specs, n_folds, n_rep, seed, folds
            (:func:`fanfit.dml.smpls_to_folds` of ``smpls``) and the model's own options
            (trimming_threshold, normalize_ipw, subgroups); on clustered data also
            ``cluster_cols``, with ``n_folds`` per cluster variable (DoubleML's
            ``n_folds_per_cluster``) and the cartesian-product fold index of
            :mod:`fanfit.dml.folds`.

        Raises
        ------
        fanfit.errors.InvalidFoldsError
            No sample splitting drawn or set, or one that is not K-fold cross-fitting.
        fanfit.errors.InvalidLearnerError
            A learner outside the allow-list; a placeholder whose predictions are not all given.
        """
        data: Any = self._dml_data  # type: ignore[attr-defined]
        if self._smpls is None:  # type: ignore[attr-defined]
            raise errors.InvalidFoldsError(
                "no sample splitting: construct with draw_sample_splitting=True or call "
                "set_sample_splitting(all_smpls) before fit()"
            )
        options: dict[str, Any] = {
            "model": self._fanfit_model,
            "score": self.score,  # type: ignore[attr-defined]
            "y": data.y_col,
            "d": list(data.d_cols),
            "x": list(data.x_cols),
            "z": list(data.z_cols) if data.z_cols else None,
            "n_folds": self.n_folds,  # type: ignore[attr-defined]
            "n_rep": self.n_rep,  # type: ignore[attr-defined]
            "seed": seed,
        }
        if getattr(data, "is_cluster_data", False):
            options.update(self._fanfit_cluster_folds(data))
        else:
            options["folds"] = smpls_to_folds(self._smpls, data.n_obs)  # type: ignore[attr-defined]
        for name, learner in self._learner.items():  # type: ignore[attr-defined]
            if _placeholder(learner):
                options[name] = self._fanfit_placeholder(name, learner, set(external))
            else:
                options[name] = _learner_spec(name, learner)
        options.update(self._fanfit_model_options())
        learner_params = self._fanfit_learner_params()
        if learner_params:
            options["learner_params"] = learner_params
        return options

    def _fanfit_placeholder(
        self, name: str, learner: Any, external: Set[tuple[str, str]]
    ) -> LearnerSpec:
        """scikit-learn's dummy in the place of DoubleML's placeholder ``learner``, when the
        predictions of every nuisance it stands for are given (:meth:`fanfit_options`).

        Raises
        ------
        fanfit.errors.InvalidLearnerError
            Naming the nuisances and treatments whose predictions are missing.
        """
        keys = [k for k in self.params_names if learner_name(k) == name]  # type: ignore[attr-defined]
        missing = [f"{k} ({d})" for k in keys for d in self._dml_data.d_cols  # type: ignore[attr-defined]
                   if (k, d) not in external]  # fmt: skip
        if missing:
            raise errors.InvalidLearnerError(
                f"learner {name} is DoubleML's {type(learner).__name__}, a placeholder for "
                f"predictions given with fit(external_predictions=...); give those of "
                f"{', '.join(missing)} there, or a learner"
            )
        dummy = "DummyClassifier" if isinstance(learner, DMLDummyClassifier) else "DummyRegressor"
        return LearnerSpec(dummy, {})

    def _fanfit_with_external(
        self,
        frame: pd.DataFrame,
        options: dict[str, Any],
        given: Mapping[tuple[str, str], np.ndarray],
    ) -> tuple[pd.DataFrame, dict[str, Any]]:
        """The frame with one column per given prediction and repetition, and the options naming
        them (``external_predictions_cols``, :mod:`fanfit.dml.external`)."""
        columns: dict[str, np.ndarray] = {}
        named: dict[str, dict[str, list[str]]] = {}
        d_cols = list(self._dml_data.d_cols)  # type: ignore[attr-defined]
        for (key, d_col), values in given.items():
            names = [
                f"__fanfit_external_{key}_{d_cols.index(d_col)}_r{r}"
                for r in range(values.shape[1])
            ]
            named.setdefault(key, {})[d_col] = names
            columns.update({c: values[:, r] for r, c in enumerate(names)})
        extended = pd.concat([frame, pd.DataFrame(columns, index=frame.index)], axis=1)
        return extended, {**options, "external_predictions_cols": named}

    def _fanfit_learner_params(self) -> dict[str, Any]:
        """DoubleML's nuisance parameters as the job's ``learner_params``.

        DoubleML keeps what ``set_ml_nuisance_params`` and ``tune`` set in ``_params``: per
        nuisance (``params_names``) and treatment column, ``[None] * n_rep`` or ``n_rep`` lists
        of ``n_folds`` dicts. Each set entry travels as one dict when every repetition and fold
        has the same (the usual case, and the form clustered data's ``n_folds ** m`` folds
        take), else as DoubleML's lists (:mod:`fanfit.dml.nuisance_params`).

        Returns
        -------
        dict
            ``{nuisance: {treatment column: dict or list}}``; empty when none are set.

        Raises
        ------
        fanfit.errors.InvalidLearnerError
            A value that is not plain JSON (an estimator, a callable, an array), naming the
            nuisance and the parameter.
        """
        n_folds = int(self.n_folds)  # type: ignore[attr-defined]
        out: dict[str, Any] = {}
        for key, by_treat in (getattr(self, "_params", None) or {}).items():
            for d_col, value in by_treat.items():
                if value is None or all(rep is None for rep in value):
                    continue
                where = f"{key} ({d_col})"
                reps = [
                    [
                        {str(k): json_value(where, str(k), v) for k, v in (p or {}).items()}
                        for p in (rep if rep is not None else [None] * n_folds)
                    ]
                    for rep in value
                ]
                first = reps[0][0]
                if all(p == first for rep in reps for p in rep):
                    if first:
                        out.setdefault(key, {})[str(d_col)] = first
                else:
                    out.setdefault(key, {})[str(d_col)] = reps
        return out

    def _fanfit_cluster_folds(self, data: Any) -> dict[str, Any]:
        """``cluster_cols``, ``n_folds`` (per cluster variable) and the folds of clustered data.

        DoubleML's cluster ``smpls`` (``DoubleMLClusterResampling``) hold ``n_folds ** m`` test
        sets per repetition in the order of the cartesian product of the ``m`` cluster variables'
        folds, first variable slowest: the fold index is the encoding of
        :mod:`fanfit.dml.folds` (:func:`~fanfit.dml.cluster_fold_digits`). Their training sets
        leave out every row sharing a cluster with the test rows, so they are not complements.

        Raises
        ------
        fanfit.errors.InvalidFoldsError
            A cluster split over two folds of its variable (:func:`~fanfit.dml.validate_cluster_folds`).
        """
        cluster_cols = list(data.cluster_cols)
        n_folds = int(self._n_folds_per_cluster)  # type: ignore[attr-defined]
        folds = smpls_to_folds(self._smpls, data.n_obs, check_train=False)  # type: ignore[attr-defined]
        cluster_vars = data.data[cluster_cols].to_numpy()
        folds = validate_cluster_folds(folds, cluster_vars, n_folds, self.n_rep)  # type: ignore[attr-defined]
        return {"cluster_cols": cluster_cols, "n_folds": n_folds, "folds": folds}

    def fit(
        self,
        client: Any = None,
        n_jobs_cv: int | None = None,
        store_predictions: bool = True,
        external_predictions: Any = None,
        store_models: bool = False,
        *,
        seed: int = 0,
        timeout: float = 3600.0,
        progress: bool | str | Any = False,
        **job_options: Any,
    ) -> Any:
        """Estimate the model on a stack, then hand the out-of-fold predictions to DoubleML.

        Parameters
        ----------
        client : fanfit.client.Client, optional
            The stack to run on; default :func:`default_client` (``FANFIT_STACK``, else the local
            stack, started if needed).
        n_jobs_cv : int or None
            Accepted for DoubleML's signature; the stack decides its own parallelism.
        store_predictions : bool
            Keep ``predictions`` and ``nuisance_targets`` (``evaluate_learners`` needs them).
        external_predictions : dict or None
            DoubleML's: ``{treatment column: {key: array (n_obs, n_rep)}}`` of out-of-fold
            predictions that replace those nuisances' fits (learners given as DoubleML's
            ``DMLDummyRegressor``/``DMLDummyClassifier`` where every nuisance of theirs is
            given). The job fits the others only (:mod:`fanfit.dml.external`); when every
            prediction is given no job runs and DoubleML's own ``fit`` computes the estimate.
            Of the models whose fits nest inside the folds DoubleMLPQ and DoubleMLLPQ take them
            as DoubleML 0.11.4 does (:mod:`fanfit.client.doubleml.quantile`); LPLR and SSM's
            nonignorable score take none (:class:`fanfit.errors.InvalidJobError`), DoubleMLSSM
            and DoubleMLCVAR none at all (``NotImplementedError``, as DoubleML).
        store_models : bool
            Keep every fit's estimator: the job stores them beside its predictions (skops, no
            pickle: :mod:`fanfit.learners.persist`) and ``models`` is DoubleML's
            ``{key: {treatment column: [[model of each fold] per repetition]}}``. Not for models
            whose fits nest inside the folds, nor Torch learners (``InvalidJobError``).
        seed : int
            The job's seed: ``random_state`` of the learners that have none (the splitting is
            ``smpls``, DoubleML's, and the bootstrap runs afterwards on the client).
        timeout : float
            Seconds to wait for the job.
        progress : bool or str
            Live progress on stderr, as :meth:`fanfit.client.EstimateJob.wait`.
        **job_options
            ``max_concurrency``, ``sharding``, ``units_per_shard``, ``weight``
            (:class:`fanfit.client.EstimateOptions`).

        Returns
        -------
        self

        Raises
        ------
        TypeError, ValueError, NotImplementedError
            DoubleML's own checks of ``n_jobs_cv`` and ``external_predictions``.
        fanfit.errors.InvalidJobError (or a subclass)
            An option, column, learner or the sample splitting is wrong (before any upload), or
            the job was rejected.
        fanfit.errors.JobFailedError
            The job failed or did not end within ``timeout``.
        fanfit.errors.ParityError
            DoubleML's coef or se differ from the job's (a bug).
        """
        _check_fit_options(store_models, store_predictions, job_options)
        # DoubleML's own check of n_jobs_cv and of the form of external_predictions (a model
        # without them, SSM, raises NotImplementedError as DoubleML does)
        self._check_fit(n_jobs_cv, store_predictions, external_predictions, store_models)  # type: ignore[attr-defined]
        given = _given_predictions(external_predictions)
        if given:
            self._fanfit_check_external()
        frame, options = self._fanfit_frame(), self.fanfit_options(seed, given)
        if given:
            frame, options = self._fanfit_with_external(frame, options, given)
        if store_models:
            options["store_models"] = True
        checked_options, checked = _check(frame, {**options, **job_options})
        spec = checked.spec
        if self._fanfit_fits_nothing(spec):
            # every prediction is given: nothing to fit, DoubleML's own fit
            super().fit(  # type: ignore[misc]
                store_predictions=store_predictions,
                external_predictions=external_predictions,
                store_models=store_models,
            )
            self.fanfit_job = self.fanfit_result = None
            return self
        if client is None:
            client = default_client()
        job = client.submit_estimate(checked, options=checked_options)
        result = job.result(timeout=timeout, progress=progress)
        super().fit(  # type: ignore[misc]
            store_predictions=True, external_predictions=job.predictions()
        )
        self._fanfit_nuisance_loss(set(given))
        self._fanfit_check_parity(result)
        if store_models:
            self._fanfit_store_models(job.models(), spec)
        if not store_predictions:
            self._predictions = None
            self._nuisance_targets = None
        self.fanfit_job, self.fanfit_result = job, result
        return self

    def _fanfit_search_submit(self, client: Any, job_options: Mapping[str, Any]) -> Any:
        """:func:`_search_submit` (``tune``, ``tune_ml_models``)."""
        return _search_submit(client, job_options)

    def _fanfit_store_models(self, models: Mapping[str, Any], spec: Any) -> None:
        """DoubleML's ``models`` from the job's fitted estimators (:meth:`fanfit.client.
        EstimateJob.models`): ``{key: {treatment column: [[model of each fold] per repetition]}}``,
        None where DoubleML keeps none (a nuisance whose predictions were given)."""
        d_cols = list(self._dml_data.d_cols)  # type: ignore[attr-defined]
        n_rep = int(self.n_rep)  # type: ignore[attr-defined]
        out: dict[str, dict[str, list[Any]]] = {
            key: {d: [None] * n_rep for d in d_cols}
            for key in self.params_names  # type: ignore[attr-defined]
        }
        for stage in range(n_stages(spec)):
            for unit in fit_units(spec, stage):
                reps = out.setdefault(unit.learner, {d: [None] * n_rep for d in d_cols})
                per_fold = reps[d_cols[unit.i_treat]]
                if per_fold[unit.i_rep] is None:
                    per_fold[unit.i_rep] = [None] * spec.n_cross_folds
                per_fold[unit.i_rep][unit.i_fold] = models[unit.key]
        self._models = out

    def _fanfit_check_parity(self, result: Any) -> None:
        d_cols = list(self._dml_data.d_cols)  # type: ignore[attr-defined]
        order = [list(result.d_cols).index(d) for d in d_cols]
        for name in ("coef", "se"):
            ours = np.asarray(getattr(result, name))[order]
            theirs = np.asarray(getattr(self, name))
            if not np.allclose(theirs, ours, rtol=RTOL, atol=0.0):
                raise errors.ParityError(
                    f"DoubleML's {name} {theirs} differs from job {result.execution_arn}'s {ours} "
                    f"(relative tolerance {RTOL}) on the same data, folds and predictions"
                )

    # ---------------------------------------------------------------- nuisance losses
    def _fanfit_targets(
        self, y: np.ndarray, d: np.ndarray, z: np.ndarray | None, preds: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _fanfit_nuisance_loss(self, given: Set[tuple[str, str]] = frozenset()) -> None:
        """DoubleML's ``nuisance_targets`` and ``nuisance_loss`` of the external predictions.

        DoubleML leaves both empty (NaN) for external predictions; they are filled here with the
        targets DoubleML's ``_nuisance_est`` of each model uses (the outcome, the treatment, the
        instrument, restricted to the treatment or instrument group for IRM's ``ml_g0``/``ml_g1``
        and IIVM's ``ml_g*``/``ml_r*``), and the loss by DoubleML's own ``_calc_nuisance_loss``
        (RMSE for regressions, log loss for classifiers), per repetition and treatment; for the
        ``(key, treatment column)`` pairs in ``given``, the user's own external predictions, only
        where DoubleML's fit with them keeps them (:attr:`_fanfit_external_targets`), else NaN.
        """
        data: Any = self._dml_data  # type: ignore[attr-defined]
        frame = data.data
        y = frame[data.y_col].to_numpy(dtype=float)
        z = frame[list(data.z_cols)].to_numpy(dtype=float) if data.z_cols else None
        predictions: dict[str, np.ndarray] = self._predictions
        targets = {k: np.full_like(v, np.nan) for k, v in predictions.items()}
        for i_treat, d_col in enumerate(data.d_cols):
            d = frame[d_col].to_numpy(dtype=float)
            for i_rep in range(self.n_rep):  # type: ignore[attr-defined]
                self._i_rep, self._i_treat = i_rep, i_treat
                preds = {k: v[:, i_rep, i_treat] for k, v in predictions.items()}
                rep_targets: dict[str, Any] = dict(self._fanfit_targets(y, d, z, preds))
                for k in rep_targets:
                    if (k, d_col) in given and not self._fanfit_external_targets:
                        rep_targets[k] = None  # DoubleML's target of an external prediction
                self._calc_nuisance_loss(preds, rep_targets)  # type: ignore[attr-defined]
                for k, t in rep_targets.items():
                    targets[k][:, i_rep, i_treat] = np.nan if t is None else t
        self._nuisance_targets = targets

    def __str__(self) -> str:
        text = super().__str__()
        if self.fanfit_result is None:
            return text
        r = self.fanfit_result
        t = r.timings
        return (
            f"{text}\n\n------------------ fanfit            ------------------\n"
            f"Job: {self.fanfit_job.job_id}\nExecution: {r.execution_arn}\n"
            f"Wall time: prepare {t.get('prepare_s', 0):.2f} s, cross-fitting "
            f"{t.get('crossfit_s', 0):.2f} s, aggregate {t.get('aggregate_s', 0):.2f} s"
        )


def _where(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = values.astype(float)
    out[~keep] = np.nan
    return out


class _PropensityOptions:
    """IRM's and IIVM's options on the stack: clipping, normalize_ipw (and IIVM's subgroups)."""

    def _fanfit_check_ps(self, weights: Any, normalize_ipw: Any, ps_processor_config: Any) -> None:
        if weights is not None:
            raise _unsupported("weights", "fanfit's IRM scores weight every observation equally")
        if ps_processor_config is not None and ps_processor_config.calibration_method is not None:
            raise _unsupported(
                "a propensity calibration (ps_processor_config.calibration_method)",
                "fanfit clips the propensities at clipping_threshold only",
            )

    def _fanfit_model_options(self) -> dict[str, Any]:
        return {
            "trimming_threshold": float(self.ps_processor_config.clipping_threshold),  # type: ignore[attr-defined]
            "normalize_ipw": bool(self.normalize_ipw),  # type: ignore[attr-defined]
        }
