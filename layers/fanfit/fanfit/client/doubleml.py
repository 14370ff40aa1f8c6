"""DoubleML's classes on a fanfit stack: a DoubleML script runs with only its class names changed.

>>> import fanfit                                                      # doctest: +SKIP
>>> dml_plr = fanfit.DoubleMLPLR(obj_dml_data, ml_l, ml_m, n_folds=3)  # DoubleML 0.11's signature
>>> dml_plr.fit()                  # on the stack: FANFIT_STACK, else the local stack
>>> dml_plr.summary, dml_plr.confint(), dml_plr.bootstrap(), dml_plr.sensitivity_analysis()

:class:`DoubleMLPLR`, :class:`DoubleMLIRM`, :class:`DoubleMLPLIV` and :class:`DoubleMLIIVM` are
subclasses of DoubleML 0.11's classes of the same names, with their constructors (plus
``y_col``/``d_cols``/``x_cols``/``z_cols`` when ``obj_dml_data`` is a DataFrame). Only
:meth:`~_OnStack.fit` differs: it sends the data, DoubleML's sample splitting (``smpls``, drawn at
construction as DoubleML draws it, or given with ``set_sample_splitting``) and the learners (as
allow-listed specs, never pickles) to an estimate job on the stack; the job's out-of-fold
predictions then go to DoubleML's own ``fit(external_predictions=...)`` (DoubleML user guide,
"External predictions"; Bach et al. 2022, JMLR 23), so that coef, se, summary, confint, bootstrap,
sensitivity_analysis, evaluate_learners and nuisance_loss are DoubleML's numbers by construction.
The fit checks that coef and se also equal the job's own result (relative 1e-9) and raises
:class:`fanfit.errors.ParityError` otherwise. ``cate``, ``gate`` and (IRM) ``policy_tree`` come
from :mod:`fanfit.client.heterogeneity`: DoubleML's results, from the stored predictions, with
fanfit's named errors.

Importing this module imports DoubleML (a client extra: ``pip install 'fanfit[doubleml]'``);
without it, :class:`fanfit.dml.interop.MissingDependencyError` gives the pip command.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.client.heterogeneity import HeterogeneityMethods, PolicyTreeMethod
from fanfit.dml.folds import smpls_to_folds, validate_cluster_folds
from fanfit.dml.interop import import_doubleml
from fanfit.learners import LearnerSpec, as_learner_spec

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = [
    "DoubleMLAPO",
    "DoubleMLAPOS",
    "DoubleMLDID",
    "DoubleMLDIDCS",
    "DoubleMLDIDMulti",
    "DoubleMLIIVM",
    "DoubleMLIRM",
    "DoubleMLPLIV",
    "DoubleMLPLR",
    "DoubleMLSSM",
    "default_client",
    "from_doubleml",
]

#: Relative tolerance of the check that DoubleML's coef and se equal the job's.
RTOL = 1e-9
#: Options of the estimate job that ``fit`` passes on (they do not change the numbers).
JOB_OPTIONS = ("max_concurrency", "sharding", "units_per_shard", "weight")


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


class _OnStack:
    """What fanfit's DoubleML classes add to DoubleML's: :meth:`fit` on a stack.

    Attributes
    ----------
    fanfit_job : fanfit.client.EstimateJob or None
        The job of the last fit.
    fanfit_result : fanfit.client.EstimateResult or None
        Its result (timings, cost, execution ARN).
    """

    _fanfit_model = ""
    _predictions: Any  # DoubleML's, set by its fit
    _nuisance_targets: Any
    fanfit_job: Any = None
    fanfit_result: Any = None

    def _fanfit_check_learners(self) -> None:
        for name, learner in self._learner.items():  # type: ignore[attr-defined]
            _learner_spec(name, learner)

    def _fanfit_model_options(self) -> dict[str, Any]:
        return {}

    def fanfit_options(self, seed: int = 0) -> dict[str, Any]:
        """The estimate job's options (:class:`fanfit.client.EstimateOptions`) of this model.

        Parameters
        ----------
        seed : int
            The job's seed (learners without a ``random_state``).

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
            A learner outside the allow-list.
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
            options[name] = _learner_spec(name, learner)
        options.update(self._fanfit_model_options())
        return options

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
        external_predictions, store_models
            Not supported on a stack (:class:`fanfit.errors.UnsupportedArgumentError`): use
            DoubleML's own class, which takes them in-process.
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
        fanfit.errors.UnsupportedArgumentError
            ``external_predictions`` or ``store_models=True``.
        fanfit.errors.InvalidJobError (or a subclass)
            An option, column, learner or the sample splitting is wrong (before any upload), or
            the job was rejected.
        fanfit.errors.JobFailedError
            The job failed or did not end within ``timeout``.
        fanfit.errors.ParityError
            DoubleML's coef or se differ from the job's (a bug).
        """
        if external_predictions is not None:
            raise _unsupported("external_predictions", "the stack computes the predictions")
        if store_models:
            raise _unsupported("store_models=True", "the fitted models stay on the stack")
        if not isinstance(store_predictions, bool):
            raise errors.InvalidJobError(
                f"store_predictions must be True or False, got {store_predictions!r}"
            )
        unknown = sorted(set(job_options) - set(JOB_OPTIONS))
        if unknown:
            raise errors.InvalidJobError(
                f"fit() takes no option {', '.join(unknown)}; job options: {', '.join(JOB_OPTIONS)}"
            )
        options = self.fanfit_options(seed)
        if client is None:
            client = default_client()
        job = client.submit_estimate(self._dml_data.data, **options, **job_options)  # type: ignore[attr-defined]
        result = job.result(timeout=timeout, progress=progress)
        super().fit(  # type: ignore[misc]
            store_predictions=True, external_predictions=job.predictions()
        )
        self._fanfit_nuisance_loss()
        self._fanfit_check_parity(result)
        if not store_predictions:
            self._predictions = None
            self._nuisance_targets = None
        self.fanfit_job, self.fanfit_result = job, result
        return self

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

    def _fanfit_nuisance_loss(self) -> None:
        """DoubleML's ``nuisance_targets`` and ``nuisance_loss`` of the external predictions.

        DoubleML leaves both empty (NaN) for external predictions; they are filled here with the
        targets DoubleML's ``_nuisance_est`` of each model uses (the outcome, the treatment, the
        instrument, restricted to the treatment or instrument group for IRM's ``ml_g0``/``ml_g1``
        and IIVM's ``ml_g*``/``ml_r*``), and the loss by DoubleML's own ``_calc_nuisance_loss``
        (RMSE for regressions, log loss for classifiers), per repetition and treatment.
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
                rep_targets = self._fanfit_targets(y, d, z, preds)
                self._calc_nuisance_loss(preds, rep_targets)  # type: ignore[attr-defined]
                for k, t in rep_targets.items():
                    targets[k][:, i_rep, i_treat] = t
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


def _theta_initial(psi_a: np.ndarray, psi_b: np.ndarray) -> float:
    """The partialling-out estimate DoubleML fits ``ml_g`` of the IV-type score against."""
    return float(-np.nanmean(psi_b) / np.nanmean(psi_a))


def _where(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    out = values.astype(float)
    out[~keep] = np.nan
    return out


class DoubleMLPLR(HeterogeneityMethods, _OnStack, _doubleml.DoubleMLPLR):  # type: ignore[misc]
    """DoubleML's partially linear regression model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLPLR`` (0.11): ``obj_dml_data, ml_l, ml_m, ml_g=None,
    n_folds=5, n_rep=1, score='partialling out', draw_sample_splitting=True``; learners are
    scikit-learn estimators of the allow-list (:mod:`fanfit.learners`) or ``'NAME:{json}'``
    strings. With a DataFrame as ``obj_dml_data``, name its columns with ``y_col``, ``d_cols``,
    ``x_cols`` (default: all others), ``z_cols``, ``cluster_cols``.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A callable score or ``use_other_treat_as_covariate=False``.
    fanfit.errors.InvalidLearnerError, InvalidDataError
        A learner outside the allow-list; ``obj_dml_data`` of the wrong kind.
    """

    _fanfit_model = "plr"

    def __init__(
        self, obj_dml_data: Any, ml_l: Any, ml_m: Any, ml_g: Any = None, n_folds: int = 5,
        n_rep: int = 1, score: Any = "partialling out", draw_sample_splitting: bool = True, *,
        y_col: Any = None, d_cols: Any = None, x_cols: Any = None, z_cols: Any = None,
        cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        super().__init__(
            data, _estimator("ml_l", ml_l), _estimator("ml_m", ml_m), _estimator("ml_g", ml_g),
            n_folds, n_rep, score, draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        targets = {"ml_l": y, "ml_m": d}
        if "ml_g" in preds:
            v_hat = d - preds["ml_m"]
            theta = _theta_initial(-v_hat * v_hat, v_hat * (y - preds["ml_l"]))
            targets["ml_g"] = y - theta * d
        return targets


class DoubleMLPLIV(_OnStack, _doubleml.DoubleMLPLIV):  # type: ignore[misc]
    """DoubleML's partially linear IV regression model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLPLIV`` (0.11): ``obj_dml_data, ml_l, ml_m, ml_r, ml_g=None,
    n_folds=5, n_rep=1, score='partialling out', draw_sample_splitting=True``, and the DataFrame
    columns as :class:`DoubleMLPLR`. Raises as :class:`DoubleMLPLR`.
    """

    _fanfit_model = "pliv"

    def __init__(
        self, obj_dml_data: Any, ml_l: Any, ml_m: Any, ml_r: Any, ml_g: Any = None,
        n_folds: int = 5, n_rep: int = 1, score: Any = "partialling out",
        draw_sample_splitting: bool = True, *, y_col: Any = None, d_cols: Any = None,
        x_cols: Any = None, z_cols: Any = None, cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        super().__init__(
            data, _estimator("ml_l", ml_l), _estimator("ml_m", ml_m), _estimator("ml_r", ml_r),
            _estimator("ml_g", ml_g), n_folds, n_rep, score, draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        z_cols = list(self._dml_data.z_cols)
        targets = {"ml_l": y, "ml_r": d}
        if len(z_cols) == 1:
            targets["ml_m"] = z[:, 0]
        else:
            targets.update({f"ml_m_{c}": z[:, j] for j, c in enumerate(z_cols)})
        if "ml_g" in preds:
            z1 = z[:, 0] - preds["ml_m"]
            theta = _theta_initial(-(d - preds["ml_r"]) * z1, z1 * (y - preds["ml_l"]))
            targets["ml_g"] = y - theta * d
        return targets


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


class DoubleMLIRM(  # type: ignore[misc]
    HeterogeneityMethods, PolicyTreeMethod, _PropensityOptions, _OnStack, _doubleml.DoubleMLIRM
):
    """DoubleML's interactive regression model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLIRM`` (0.11): ``obj_dml_data, ml_g, ml_m, n_folds=5, n_rep=1,
    score='ATE', weights=None, normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``, and the
    DataFrame columns as :class:`DoubleMLPLR`.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`DoubleMLPLR`; also ``weights`` or a propensity calibration.
    """

    _fanfit_model = "irm"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, n_folds: int = 5, n_rep: int = 1,
        score: Any = "ATE", weights: Any = None, normalize_ipw: bool = False,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, *, y_col: Any = None,
        d_cols: Any = None, x_cols: Any = None, z_cols: Any = None, cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        self._fanfit_check_ps(weights, normalize_ipw, ps_processor_config)
        super().__init__(
            data, _estimator("ml_g", ml_g), _estimator("ml_m", ml_m), n_folds, n_rep, score,
            weights, normalize_ipw, trimming_rule, trimming_threshold, ps_processor_config,
            draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        return {"ml_g0": _where(y, d == 0), "ml_g1": _where(y, d == 1), "ml_m": d}


class DoubleMLIIVM(_PropensityOptions, _OnStack, _doubleml.DoubleMLIIVM):  # type: ignore[misc]
    """DoubleML's interactive IV model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLIIVM`` (0.11): ``obj_dml_data, ml_g, ml_m, ml_r, n_folds=5,
    n_rep=1, score='LATE', subgroups=None, normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``, and the
    DataFrame columns as :class:`DoubleMLPLR`.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`DoubleMLIRM`.
    """

    _fanfit_model = "iivm"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, ml_r: Any, n_folds: int = 5,
        n_rep: int = 1, score: Any = "LATE", subgroups: Any = None, normalize_ipw: bool = False,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, *, y_col: Any = None,
        d_cols: Any = None, x_cols: Any = None, z_cols: Any = None, cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        self._fanfit_check_ps(None, normalize_ipw, ps_processor_config)
        super().__init__(
            data, _estimator("ml_g", ml_g), _estimator("ml_m", ml_m), _estimator("ml_r", ml_r),
            n_folds, n_rep, score, subgroups, normalize_ipw, trimming_rule, trimming_threshold,
            ps_processor_config, draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_model_options(self) -> dict[str, Any]:
        options = super()._fanfit_model_options()
        options["subgroups"] = dict(self.subgroups)
        return options

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        z0, z1 = z[:, 0] == 0, z[:, 0] == 1
        r0 = d if self.subgroups["always_takers"] else np.zeros_like(d)
        r1 = d if self.subgroups["never_takers"] else np.ones_like(d)
        return {"ml_g0": _where(y, z0), "ml_g1": _where(y, z1), "ml_m": z[:, 0],
                "ml_r0": _where(r0, z0), "ml_r1": _where(r1, z1)}  # fmt: skip


class DoubleMLAPO(_PropensityOptions, _OnStack, _doubleml.DoubleMLAPO):  # type: ignore[misc]
    """DoubleML's average potential outcome model at one treatment level, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLAPO`` (0.11): ``obj_dml_data, ml_g, ml_m, treatment_level,
    n_folds=5, n_rep=1, score='APO', weights=None, normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``, and the
    DataFrame columns (``y_col``, ``d_cols``, ``x_cols``, ``z_cols``, ``cluster_cols``, by
    keyword) as :class:`DoubleMLPLR`. The job fits ``ml_g`` on the rows at the level
    (``ml_g_d_lvl1``) and off it (``ml_g_d_lvl0``, on the treatment and the covariates) and
    ``ml_m`` on ``1{d == treatment_level}`` (model ``apo`` of
    :mod:`fanfit.dml.models`).

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`DoubleMLIRM`.
    """

    _fanfit_model = "apo"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, treatment_level: Any, n_folds: int = 5,
        n_rep: int = 1, score: Any = "APO", weights: Any = None, normalize_ipw: bool = False,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, **columns: Any,
    ) -> None:  # fmt: skip
        unknown = sorted(set(columns) - {"y_col", "d_cols", "x_cols", "z_cols", "cluster_cols"})
        if unknown:
            raise TypeError(f"DoubleMLAPO() got unexpected keyword argument(s) {unknown}")
        cols = [columns.get(k) for k in ("y_col", "d_cols", "x_cols", "z_cols", "cluster_cols")]
        data = _dml_data(obj_dml_data, *cols)
        _check_arguments(data, score)
        self._fanfit_check_ps(weights, normalize_ipw, ps_processor_config)
        learners = (_estimator("ml_g", ml_g), _estimator("ml_m", ml_m))
        ps = (normalize_ipw, trimming_rule, trimming_threshold, ps_processor_config)
        super().__init__(
            data, *learners, treatment_level, n_folds, n_rep, score, weights, *ps,
            draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_model_options(self) -> dict[str, Any]:
        options = super()._fanfit_model_options()
        options["treatment_level"] = float(self.treatment_level)
        return options

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        treated = (d == self.treatment_level).astype(float)
        return {"ml_g_d_lvl0": _where(y, treated == 0), "ml_g_d_lvl1": _where(y, treated == 1),
                "ml_m": treated}  # fmt: skip


def _did_data(obj_dml_data: Any, t_required: bool, **columns: Any) -> Any:
    """``obj_dml_data`` as a DoubleMLDIDData: one given, or built from a DataFrame and the columns
    (``y_col``, ``d_cols``, ``x_cols``, and ``t_col`` for repeated cross-sections).

    Raises
    ------
    fanfit.errors.InvalidDataError
        A DataFrame without ``y_col``, ``d_cols`` (or ``t_col`` where needed), columns given next
        to a DoubleMLDIDData, data without ``t_col`` where needed, or something else.
    """
    given = [k for k, v in columns.items() if v is not None]
    if isinstance(obj_dml_data, pd.DataFrame):
        needed = ("y_col", "d_cols", "t_col") if t_required else ("y_col", "d_cols")
        if any(columns.get(k) is None for k in needed):
            raise errors.InvalidDataError(
                f"obj_dml_data is a DataFrame: name its columns with {', '.join(needed)} (and "
                "x_cols), as DoubleMLDIDData takes them"
            )
        data = _doubleml.DoubleMLDIDData(obj_dml_data, **columns)
    elif isinstance(obj_dml_data, _doubleml.DoubleMLDIDData):
        if given:
            raise errors.InvalidDataError(
                f"{', '.join(given)} given with a DoubleMLDIDData, which names its columns "
                "itself; give them with a DataFrame only"
            )
        data = obj_dml_data
    else:
        raise errors.InvalidDataError(
            "obj_dml_data must be a doubleml.DoubleMLDIDData or a pandas DataFrame with y_col and "
            f"d_cols, got {type(obj_dml_data).__name__}"
        )
    if t_required and data.t_col is None:
        raise errors.InvalidDataError(
            "DoubleMLDIDCS needs the time column: a DoubleMLDIDData with t_col (repeated "
            "cross-sections)"
        )
    return data


class _DIDOptions:
    """DoubleMLDID's and DoubleMLDIDCS's construction and options on the stack: clipping and
    normalization."""

    def _fanfit_build(self, data: Any, ml_g: Any, ml_m: Any, *args: Any) -> None:
        """DoubleML's constructor on checked data and learners; ``args`` from ``n_folds`` on."""
        _check_arguments(data, args[2])
        super().__init__(data, _estimator("ml_g", ml_g), _estimator("ml_m", ml_m), *args)  # type: ignore[call-arg]
        self._fanfit_check_learners()  # type: ignore[attr-defined]

    def _fanfit_model_options(self) -> dict[str, Any]:
        return {
            "trimming_threshold": float(self.clipping_threshold),  # type: ignore[attr-defined]
            "in_sample_normalization": bool(self.in_sample_normalization),  # type: ignore[attr-defined]
        }


class DoubleMLDID(_DIDOptions, _OnStack, _doubleml.DoubleMLDID):  # type: ignore[misc]
    """DoubleML's difference-in-differences model for panel data, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLDID`` (0.11): ``obj_dml_data, ml_g, ml_m=None, n_folds=5,
    n_rep=1, score='observational', in_sample_normalization=True, clipping_threshold=1e-2,
    draw_sample_splitting=True``; ``obj_dml_data`` a ``DoubleMLDIDData`` whose outcome is the
    difference :math:`Y_1 - Y_0` (as ``make_did_SZ2020`` returns it), or a DataFrame with
    ``y_col``, ``d_cols`` and ``x_cols`` by keyword. The job fits ``ml_g`` on the untreated and the
    treated rows (``ml_g0``, ``ml_g1``) and, for the observational score, ``ml_m`` (model ``did`` of
    :mod:`fanfit.dml.models`).

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A callable score.
    fanfit.errors.InvalidDataError
        ``obj_dml_data`` is neither a DoubleMLDIDData nor a DataFrame with its columns.
    """

    _fanfit_model = "did"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any = None, n_folds: int = 5, n_rep: int = 1,
        score: Any = "observational", in_sample_normalization: bool = True,
        clipping_threshold: float = 1e-2, draw_sample_splitting: bool = True, *,
        y_col: Any = None, d_cols: Any = None, x_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _did_data(obj_dml_data, False, y_col=y_col, d_cols=d_cols, x_cols=x_cols)
        self._fanfit_build(data, ml_g, ml_m, n_folds, n_rep, score, in_sample_normalization,
                           clipping_threshold, draw_sample_splitting)  # fmt: skip

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        out = {"ml_g0": _where(y, d == 0), "ml_g1": _where(y, d == 1)}
        return out | ({"ml_m": d} if "ml_m" in preds else {})


class DoubleMLDIDCS(_DIDOptions, _OnStack, _doubleml.DoubleMLDIDCS):  # type: ignore[misc]
    """DoubleML's difference-in-differences model for repeated cross-sections, on a fanfit stack.

    Parameters as ``doubleml.DoubleMLDIDCS`` (0.11): ``obj_dml_data, ml_g, ml_m=None, n_folds=5,
    n_rep=1, score='observational', in_sample_normalization=True, clipping_threshold=1e-2,
    draw_sample_splitting=True``; ``obj_dml_data`` a ``DoubleMLDIDData`` with ``t_col`` (the
    binary period), or a DataFrame with ``y_col``, ``d_cols``, ``x_cols`` and ``t_col`` by
    keyword. The job fits ``ml_g`` on each group and period (``ml_g_d0_t0`` ... ``ml_g_d1_t1``)
    and, for the observational score, ``ml_m`` (model ``didcs`` of :mod:`fanfit.dml.models`).

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A callable score.
    fanfit.errors.InvalidDataError
        ``obj_dml_data`` is neither a DoubleMLDIDData with ``t_col`` nor a DataFrame with its
        columns.
    """

    _fanfit_model = "didcs"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any = None, n_folds: int = 5, n_rep: int = 1,
        score: Any = "observational", in_sample_normalization: bool = True,
        clipping_threshold: float = 1e-2, draw_sample_splitting: bool = True, *,
        y_col: Any = None, d_cols: Any = None, x_cols: Any = None, t_col: Any = None,
    ) -> None:  # fmt: skip
        columns = {"y_col": y_col, "d_cols": d_cols, "x_cols": x_cols, "t_col": t_col}
        data = _did_data(obj_dml_data, True, **columns)
        self._fanfit_build(data, ml_g, ml_m, n_folds, n_rep, score, in_sample_normalization,
                           clipping_threshold, draw_sample_splitting)  # fmt: skip

    def _fanfit_model_options(self) -> dict[str, Any]:
        return super()._fanfit_model_options() | {"t": self._dml_data.t_col}

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        t = self._dml_data.data[self._dml_data.t_col].to_numpy(dtype=float)
        out = {f"ml_g_d{a}_t{b}": _where(y, (d == a) & (t == b)) for a in (0, 1) for b in (0, 1)}
        return out | ({"ml_m": d} if "ml_m" in preds else {})


class DoubleMLAPOS(_doubleml.DoubleMLAPOS):  # type: ignore[misc]
    """DoubleML's average potential outcomes of several treatment levels, on a fanfit stack.

    Parameters as ``doubleml.DoubleMLAPOS`` (0.11): ``obj_dml_data, ml_g, ml_m,
    treatment_levels, n_folds=5, n_rep=1, score='APO', weights=None, normalize_ipw=False,
    trimming_rule='truncate', trimming_threshold=1e-2, ps_processor_config=None,
    draw_sample_splitting=True``. :meth:`fit` submits one ``apo`` job per level, all before
    waiting for any, so that the levels' fits run side by side on the stack, on DoubleML's one
    sample splitting; DoubleML's own ``fit(external_predictions=...)`` then builds the per-level
    models, so coef, se, summary, confint, bootstrap and ``causal_contrast(reference_levels)`` are
    DoubleML's.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        ``weights``, a propensity calibration, or a callable score.
    """

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, treatment_levels: Any, n_folds: int = 5,
        n_rep: int = 1, score: Any = "APO", weights: Any = None, normalize_ipw: bool = False,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True,
    ) -> None:  # fmt: skip
        _PropensityOptions._fanfit_check_ps(self, weights, normalize_ipw, ps_processor_config)  # type: ignore[arg-type]
        _check_arguments(obj_dml_data, score)
        ml_g, ml_m = _estimator("ml_g", ml_g), _estimator("ml_m", ml_m)
        super().__init__(
            obj_dml_data, ml_g, ml_m, treatment_levels, n_folds, n_rep, score, weights,
            normalize_ipw, trimming_rule, trimming_threshold, ps_processor_config,
            draw_sample_splitting,
        )  # fmt: skip
        self.fanfit_jobs: list[Any] = []
        self.fanfit_results: list[Any] = []

    def fanfit_options(self, seed: int = 0) -> list[dict[str, Any]]:
        """The options of the ``apo`` job of each level (:meth:`DoubleMLAPO.fanfit_options`).

        Raises
        ------
        fanfit.errors.InvalidFoldsError, InvalidLearnerError
            As :meth:`DoubleMLAPO.fanfit_options`.
        """
        if self._smpls is None:
            raise errors.InvalidFoldsError(
                "no sample splitting: construct with draw_sample_splitting=True or call "
                "set_sample_splitting(all_smpls) before fit()"
            )
        out = []
        for level in self.treatment_levels:
            one = DoubleMLAPO(
                self._dml_data, self._learner["ml_g"], self._learner["ml_m"], level,
                self.n_folds, self.n_rep, self.score, None, self.normalize_ipw,
                ps_processor_config=self.ps_processor_config, draw_sample_splitting=False,
            )  # fmt: skip
            one.set_sample_splitting(self.smpls)
            out.append(one.fanfit_options(seed))
        return out

    def fit(
        self,
        client: Any = None,
        n_jobs_models: int | None = None,
        n_jobs_cv: int | None = None,
        store_predictions: bool = True,
        store_models: bool = False,
        external_predictions: Any = None,
        *,
        seed: int = 0,
        timeout: float = 3600.0,
        progress: bool | str | Any = False,
        **job_options: Any,
    ) -> Any:
        """Estimate every level's APO on a stack, side by side, then hand the predictions to DoubleML.

        Parameters as :meth:`DoubleMLAPO.fit`; ``n_jobs_models`` and ``n_jobs_cv`` are accepted
        for DoubleML's signature (the stack decides its own parallelism).

        Returns
        -------
        self

        Raises
        ------
        As :meth:`DoubleMLAPO.fit`, for any level's job.
        """
        if external_predictions is not None:
            raise _unsupported("external_predictions", "the stack computes the predictions")
        if store_models:
            raise _unsupported("store_models=True", "the fitted models stay on the stack")
        unknown = sorted(set(job_options) - set(JOB_OPTIONS))
        if unknown:
            raise errors.InvalidJobError(
                f"fit() takes no option {', '.join(unknown)}; job options: {', '.join(JOB_OPTIONS)}"
            )
        all_options = self.fanfit_options(seed)
        if client is None:
            client = default_client()
        frame = self._dml_data.data
        jobs = [client.submit_estimate(frame, **o, **job_options) for o in all_options]
        results = [job.result(timeout=timeout, progress=progress) for job in jobs]
        d_col = self._dml_data.d_cols[0]
        external = {
            level: job.predictions()[d_col] for level, job in zip(self.treatment_levels, jobs)
        }
        super().fit(store_predictions=store_predictions, external_predictions=external)
        for level, model, result in zip(self.treatment_levels, self.modellist, results):
            for name in ("coef", "se"):
                theirs, ours = np.asarray(getattr(model, name)), np.asarray(getattr(result, name))
                if not np.allclose(theirs, ours, rtol=RTOL, atol=0.0):
                    raise errors.ParityError(
                        f"DoubleML's {name} {theirs} of treatment level {level} differs from job "
                        f"{result.execution_arn}'s {ours} (relative tolerance {RTOL})"
                    )
        self.fanfit_jobs, self.fanfit_results = jobs, results
        return self


_SSM_COLUMNS = ("y_col", "d_cols", "x_cols", "z_cols", "s_col", "cluster_cols")


def _ssm_data(obj_dml_data: Any, columns: Mapping[str, Any]) -> Any:
    """``obj_dml_data`` as a DoubleMLSSMData: one given, or built from a DataFrame and the columns.

    Raises
    ------
    fanfit.errors.InvalidDataError
        A DataFrame without ``y_col``, ``d_cols`` or ``s_col``, columns given next to a
        DoubleMLSSMData, or something else (a plain DoubleMLData has no selection column).
    TypeError
        An unknown keyword, as DoubleML's constructor.
    """
    unknown = sorted(set(columns) - set(_SSM_COLUMNS))
    if unknown:
        raise TypeError(f"DoubleMLSSM() got unexpected keyword argument(s) {unknown}")
    given = {k: v for k, v in columns.items() if v is not None}
    if isinstance(obj_dml_data, pd.DataFrame):
        missing = [k for k in ("y_col", "d_cols", "s_col") if k not in given]
        if missing:
            raise errors.InvalidDataError(
                f"obj_dml_data is a DataFrame: name its columns with y_col, d_cols and s_col "
                f"(the selection column); missing: {', '.join(missing)}"
            )
        return _doubleml.DoubleMLSSMData(obj_dml_data, **given)
    if isinstance(obj_dml_data, _doubleml.DoubleMLSSMData):
        if given:
            raise errors.InvalidDataError(
                f"{', '.join(given)} given with a DoubleMLSSMData, which names its columns "
                "itself; give them with a DataFrame only"
            )
        return obj_dml_data
    raise errors.InvalidDataError(
        "obj_dml_data must be a doubleml.DoubleMLSSMData (with s_col, the selection column) or a "
        f"pandas DataFrame with y_col, d_cols and s_col, got {type(obj_dml_data).__name__}"
    )


class DoubleMLSSM(_PropensityOptions, _OnStack, _doubleml.DoubleMLSSM):  # type: ignore[misc]
    """DoubleML's sample selection model (missing at random), fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLSSM`` (0.11): ``obj_dml_data, ml_g, ml_pi, ml_m, n_folds=5,
    n_rep=1, score='missing-at-random', normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``; the data a
    ``DoubleMLSSMData`` (``s_col`` the selection indicator), or a DataFrame with ``y_col``,
    ``d_cols``, ``x_cols`` and ``s_col`` by keyword. The job fits ``ml_g`` on the selected rows of
    each treatment arm (``ml_g_d0``, ``ml_g_d1``), ``ml_pi`` of ``s`` on ``(x, d)`` and ``ml_m``
    of ``d`` on ``x`` (model ``ssm`` of :mod:`fanfit.dml.models`).

    DoubleML 0.11.4's DoubleMLSSM takes no external predictions; this class lets it take the
    job's: its ``_nuisance_est`` hands them to DoubleML's own propensity processing
    (``ps_processor.adjust_ps``) and ``_score_elements``, so coef, se, summary, confint,
    bootstrap and nuisance_loss are still DoubleML's numbers.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`DoubleMLIRM`; also score ``'nonignorable'`` (its nested fits inside each fold
        do not run on the pipeline yet) and clustered data.
    """

    _fanfit_model = "ssm"
    _PREDICTION_KEYS = ("ml_g_d0", "ml_g_d1", "ml_pi", "ml_m")

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_pi: Any, ml_m: Any, n_folds: int = 5,
        n_rep: int = 1, score: Any = "missing-at-random", normalize_ipw: bool = False,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, **columns: Any,
    ) -> None:  # fmt: skip
        data = _ssm_data(obj_dml_data, columns)
        _check_arguments(data, score)
        if score == "nonignorable":
            raise _unsupported(
                "score='nonignorable'",
                "its nested fits (ml_pi on half of each fold's training rows, its predictions a "
                "covariate of ml_m and ml_g) do not run on the pipeline yet; use "
                "doubleml.DoubleMLSSM in-process, or score='missing-at-random'",
            )
        if getattr(data, "is_cluster_data", False):
            raise _unsupported("clustered data", "fanfit's SSM runs on unclustered data")
        self._fanfit_check_ps(None, normalize_ipw, ps_processor_config)
        learners = (_estimator("ml_g", ml_g), _estimator("ml_pi", ml_pi), _estimator("ml_m", ml_m))
        super().__init__(
            data, *learners, n_folds, n_rep, score, normalize_ipw, trimming_rule,
            trimming_threshold, ps_processor_config, draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()
        self._external_predictions_implemented = True  # the job's, through _nuisance_est

    def _fanfit_model_options(self) -> dict[str, Any]:
        options = super()._fanfit_model_options()
        # missing at random: DoubleML ignores instruments (with a warning), the job takes none
        options.update(s=self._dml_data.s_col, z=None)
        return options

    def _fanfit_nuisance_loss(self) -> None:
        """Nothing to add: :meth:`_nuisance_est` returns DoubleML's targets with the predictions,
        so DoubleML's fit already computed ``nuisance_targets`` and ``nuisance_loss``."""

    def _nuisance_est(
        self, smpls: Any, n_jobs_cv: Any, external_predictions: Any, return_models: bool = False
    ) -> Any:
        """DoubleML's score elements and predictions from the job's out-of-fold predictions.

        As the tail of DoubleML 0.11.4's ``DoubleMLSSM._nuisance_est`` (missing at random): the
        propensity ``ml_m`` adjusted by ``ps_processor.adjust_ps`` (clipped to
        ``[trimming_threshold, 1 - trimming_threshold]``), then ``_score_elements``; the targets
        DoubleML records (``y`` for ``ml_g_d0``/``ml_g_d1`` on every row, ``s`` for ``ml_pi``,
        ``d`` for ``ml_m``). Without external predictions (an in-process fit) DoubleML's own
        ``_nuisance_est`` runs.
        """
        given = {k: (external_predictions or {}).get(k) for k in self._PREDICTION_KEYS}
        if any(v is None for v in given.values()):
            return super()._nuisance_est(smpls, n_jobs_cv, external_predictions, return_models)
        data: Any = self._dml_data
        y, d, s = (np.asarray(v, dtype=float) for v in (data.y, data.d, data.s))
        preds = {k: np.asarray(v, dtype=float) for k, v in given.items()}
        preds["ml_m"] = self._ps_processor.adjust_ps(preds["ml_m"], d, cv=smpls)
        psi_a, psi_b = self._score_elements(
            d == 1, d == 0, preds["ml_g_d1"], preds["ml_g_d0"], preds["ml_pi"], preds["ml_m"], s, y
        )
        targets = {"ml_g_d0": y, "ml_g_d1": y, "ml_pi": s, "ml_m": d}
        return {"psi_a": psi_a, "psi_b": psi_b}, {
            "predictions": preds,
            "targets": {k: v.copy() for k, v in targets.items()},
            "models": dict.fromkeys(self._PREDICTION_KEYS),
        }


#: fanfit's class of each DoubleML class.
_CLASSES: dict[type, type] = {
    _doubleml.DoubleMLPLR: DoubleMLPLR,
    _doubleml.DoubleMLIRM: DoubleMLIRM,
    _doubleml.DoubleMLPLIV: DoubleMLPLIV,
    _doubleml.DoubleMLIIVM: DoubleMLIIVM,
    _doubleml.DoubleMLAPO: DoubleMLAPO,
    _doubleml.DoubleMLDID: DoubleMLDID,
    _doubleml.DoubleMLDIDCS: DoubleMLDIDCS,
    _doubleml.DoubleMLSSM: DoubleMLSSM,
}


def from_doubleml(model: Any, client: Any = None, **fit_options: Any) -> Any:
    """Run an unfitted DoubleML model on a stack and return its fitted fanfit counterpart.

    The counterpart (:class:`DoubleMLPLR`, :class:`DoubleMLIRM`, :class:`DoubleMLPLIV` or
    :class:`DoubleMLIIVM`) takes the model's data, learners (its ``learner`` dict), n_folds,
    n_rep, score and model options, and its sample splitting when it has one (``smpls``); it is
    then fitted with :meth:`_OnStack.fit`.

    Parameters
    ----------
    model : doubleml.DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV or DoubleMLIIVM
    client : fanfit.client.Client, optional
        As :meth:`_OnStack.fit`.
    **fit_options
        Further arguments of :meth:`_OnStack.fit` (``seed``, ``timeout``, job options).

    Returns
    -------
    DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV or DoubleMLIIVM
        Fitted.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A model of another class, or with an argument a stack cannot honour.
    fanfit.errors.InvalidLearnerError
        A learner outside the allow-list.
    """
    if isinstance(model, _OnStack):
        return model.fit(client, **fit_options)
    cls = _CLASSES.get(type(model))
    if cls is None:
        raise _unsupported(
            f"a {type(model).__name__}",
            "fanfit runs DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV, DoubleMLIIVM, DoubleMLAPO, "
            "DoubleMLDID, DoubleMLDIDCS and DoubleMLSSM",
        )
    kwargs: dict[str, Any] = dict(model.learner)
    cluster = bool(getattr(model._dml_data, "is_cluster_data", False))
    n_folds = model._n_folds_per_cluster if cluster else model.n_folds  # per cluster variable
    kwargs.update(n_folds=n_folds, n_rep=model.n_rep, score=model.score,
                  draw_sample_splitting=False)  # fmt: skip
    ipw = _doubleml.DoubleMLIRM | _doubleml.DoubleMLIIVM | _doubleml.DoubleMLAPO
    if isinstance(model, ipw | _doubleml.DoubleMLSSM):
        kwargs.update(
            normalize_ipw=model.normalize_ipw, ps_processor_config=model.ps_processor_config
        )
    if isinstance(model, _doubleml.DoubleMLAPO):
        kwargs["treatment_level"] = model.treatment_level
    weighted = _doubleml.DoubleMLIRM | _doubleml.DoubleMLAPO
    if isinstance(model, weighted) and not np.all(model._weights["weights"] == 1.0):
        raise _unsupported("weights", "fanfit's IRM scores weight every observation equally")
    if isinstance(model, _doubleml.DoubleMLIIVM):
        kwargs["subgroups"] = dict(model.subgroups)
    if isinstance(model, _doubleml.DoubleMLDID | _doubleml.DoubleMLDIDCS):
        kwargs.update(
            in_sample_normalization=model.in_sample_normalization,
            clipping_threshold=model.clipping_threshold,
        )
    ours = cls(model._dml_data, **kwargs)
    if model._smpls is not None and cluster:
        ours.set_sample_splitting(model.smpls, model.smpls_cluster)
    elif model._smpls is not None:
        ours.set_sample_splitting(model.smpls)
    return ours.fit(client, **fit_options)


def _did_multi_data(obj_dml_data: Any) -> Any:
    """``obj_dml_data`` checked to be a DoubleMLPanelData.

    Raises
    ------
    fanfit.errors.InvalidDataError
        Anything else (a DataFrame, a DoubleMLData, a DoubleMLDIDData).
    """
    if not isinstance(obj_dml_data, _doubleml.data.DoubleMLPanelData):
        raise errors.InvalidDataError(
            "DoubleMLDIDMulti needs obj_dml_data as a doubleml.data.DoubleMLPanelData (panel data "
            f"in long format with y_col, d_cols, t_col, id_col), got {type(obj_dml_data).__name__}"
        )
    return obj_dml_data


class DoubleMLDIDMulti(_doubleml.did.DoubleMLDIDMulti):  # type: ignore[misc]
    """DoubleML's staggered-adoption DID (group-time ATTs and their aggregations), on a fanfit stack.

    Parameters as ``doubleml.did.DoubleMLDIDMulti`` (0.11): ``obj_dml_data, ml_g, ml_m=None,
    gt_combinations='standard', control_group='never_treated', anticipation_periods=0,
    n_folds=5, n_rep=1, score='observational', panel=True, in_sample_normalization=True,
    trimming_rule='truncate', trimming_threshold=1e-2, ps_processor_config=None,
    draw_sample_splitting=True, print_periods=False``; ``obj_dml_data`` a
    ``doubleml.data.DoubleMLPanelData``. DoubleML builds one ``DoubleMLDIDBinary`` per
    group-time combination :math:`(g, t_{pre}, t_{eval})` at construction: the units observed in
    both periods that are in group :math:`g` or in the control group, in wide format, with the
    outcome difference :math:`Y_{t_{eval}} - Y_{t_{pre}}` (``y_diff``), the group indicator
    (``G_indicator``) and its own sample splitting (``smpls``, stratified by the indicator).

    :meth:`fit` submits one ``did`` job per combination on exactly that subset, with that
    combination's folds, all before waiting for any, so that the combinations' fits run side by
    side on the stack; the jobs' predictions, placed at the units' positions (DoubleML's
    ``id_positions``), then go to DoubleML's own ``fit(external_predictions=...)``, so coef, se,
    summary, confint, bootstrap, ``aggregate('eventstudy'|'group'|'time')`` and the plots are
    DoubleML's (Callaway and Sant'Anna 2021, J. Econometrics 225; DoubleML user guide, "Panel
    data with multiple periods").

    Raises
    ------
    fanfit.errors.InvalidDataError
        ``obj_dml_data`` is not a DoubleMLPanelData.
    fanfit.errors.UnsupportedArgumentError
        ``panel=False`` (repeated cross-sections), a propensity calibration, or a callable
        score.
    fanfit.errors.InvalidLearnerError
        A learner outside the allow-list.
    """

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any = None, gt_combinations: Any = "standard",
        control_group: str = "never_treated", anticipation_periods: int = 0, n_folds: int = 5,
        n_rep: int = 1, score: Any = "observational", panel: bool = True,
        in_sample_normalization: bool = True, trimming_rule: str = "truncate",
        trimming_threshold: float = 1e-2, ps_processor_config: Any = None,
        draw_sample_splitting: bool = True, print_periods: bool = False,
    ) -> None:  # fmt: skip
        data = _did_multi_data(obj_dml_data)
        if callable(score):
            raise _unsupported("a callable score", "give 'observational' or 'experimental'")
        if panel is not True:
            raise _unsupported(
                f"panel={panel!r}",
                "fanfit runs DoubleMLDIDMulti on panel data (panel=True); repeated "
                "cross-sections (DoubleMLDIDCSBinary's subsets) are not on the stack yet",
            )
        _PropensityOptions._fanfit_check_ps(self, None, False, ps_processor_config)  # type: ignore[arg-type]
        for name, learner in (("ml_g", ml_g), ("ml_m", ml_m)):
            if learner is not None:
                _learner_spec(name, learner)
        ml_g, ml_m = _estimator("ml_g", ml_g), _estimator("ml_m", ml_m)
        super().__init__(
            data, ml_g, ml_m, gt_combinations, control_group, anticipation_periods, n_folds,
            n_rep, score, panel, in_sample_normalization, trimming_rule, trimming_threshold,
            ps_processor_config, draw_sample_splitting, print_periods,
        )  # fmt: skip
        self.fanfit_jobs: list[Any] = []
        self.fanfit_results: list[Any] = []

    def _fanfit_did(self, binary: Any) -> DoubleMLDID:
        """Fanfit's DoubleMLDID on one combination's subset, with its folds and options."""
        x_cols = list(self._dml_data.x_cols)
        frame = binary.data_subset[[*x_cols, "G_indicator", "y_diff"]].reset_index(drop=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", category=DeprecationWarning)
            warnings.simplefilter("ignore", category=FutureWarning)
            data = _doubleml.DoubleMLDIDData(frame, "y_diff", "G_indicator", x_cols=x_cols)
            one = DoubleMLDID(
                data, self._learner["ml_g"], self._learner["ml_m"], self.n_folds, self.n_rep,
                self.score, self.in_sample_normalization, self.trimming_threshold,
                draw_sample_splitting=False,
            )  # fmt: skip
        one.set_sample_splitting(binary.smpls)
        return one

    def fanfit_options(self, seed: int = 0) -> list[tuple[pd.DataFrame, dict[str, Any]]]:
        """The data and options of the ``did`` job of each group-time combination.

        Parameters
        ----------
        seed : int
            The jobs' seed (learners without a ``random_state``).

        Returns
        -------
        list of (DataFrame, dict)
            Per combination, in ``gt_labels`` order: the subset (``x_cols``, ``G_indicator``,
            ``y_diff``; one row per unit in DoubleML's ``data_subset`` order) and the options of
            :meth:`DoubleMLDID.fanfit_options` (its folds are the combination's ``smpls``).

        Raises
        ------
        fanfit.errors.InvalidFoldsError, InvalidLearnerError
            As :meth:`DoubleMLDID.fanfit_options`.
        """
        out = []
        for binary in self.modellist:
            one = self._fanfit_did(binary)
            out.append((one._dml_data.data, one.fanfit_options(seed)))
        return out

    def fit(
        self,
        client: Any = None,
        n_jobs_models: int | None = None,
        n_jobs_cv: int | None = None,
        store_predictions: bool = True,
        store_models: bool = False,
        external_predictions: Any = None,
        *,
        seed: int = 0,
        timeout: float = 3600.0,
        progress: bool | str | Any = False,
        **job_options: Any,
    ) -> Any:
        """Estimate every group-time ATT on a stack, side by side, then hand the predictions to
        DoubleML.

        Parameters as :meth:`DoubleMLAPOS.fit`; ``n_jobs_models`` and ``n_jobs_cv`` are accepted
        for DoubleML's signature (the stack decides its own parallelism).

        Returns
        -------
        self

        Raises
        ------
        fanfit.errors.UnsupportedArgumentError
            ``external_predictions`` or ``store_models=True``.
        fanfit.errors.InvalidJobError (or a subclass)
            An option or a learner is wrong, or a job was rejected.
        fanfit.errors.JobFailedError
            A job failed or did not end within ``timeout``.
        fanfit.errors.ParityError
            A combination's DoubleML coef or se differ from its job's (a bug).
        """
        if external_predictions is not None:
            raise _unsupported("external_predictions", "the stack computes the predictions")
        if store_models:
            raise _unsupported("store_models=True", "the fitted models stay on the stack")
        unknown = sorted(set(job_options) - set(JOB_OPTIONS))
        if unknown:
            raise errors.InvalidJobError(
                f"fit() takes no option {', '.join(unknown)}; job options: {', '.join(JOB_OPTIONS)}"
            )
        all_options = self.fanfit_options(seed)
        if client is None:
            client = default_client()
        jobs = [client.submit_estimate(frame, **o, **job_options) for frame, o in all_options]
        results = [job.result(timeout=timeout, progress=progress) for job in jobs]
        n_ids = self._dml_data.n_ids
        external: dict[str, dict[str, np.ndarray]] = {}
        for label, binary, job in zip(self.gt_labels, self.modellist, jobs):
            predictions = job.predictions()["G_indicator"]
            external[label] = {}
            for name, values in predictions.items():
                full = np.full((n_ids, self.n_rep), np.nan)
                full[binary.id_positions] = np.asarray(values).reshape(-1, self.n_rep)
                external[label][name] = full
        super().fit(store_predictions=store_predictions, external_predictions=external)
        for label, model, result in zip(self.gt_labels, self.modellist, results):
            for name in ("coef", "se"):
                theirs, ours = np.asarray(getattr(model, name)), np.asarray(getattr(result, name))
                if not np.allclose(theirs, ours, rtol=RTOL, atol=0.0):
                    raise errors.ParityError(
                        f"DoubleML's {name} {theirs} of {label} differs from job "
                        f"{result.execution_arn}'s {ours} (relative tolerance {RTOL})"
                    )
        self.fanfit_jobs, self.fanfit_results = jobs, results
        return self
