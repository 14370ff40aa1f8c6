"""DoubleML's average potential outcome models on a fanfit stack: DoubleMLAPO and DoubleMLAPOS.

:class:`DoubleMLAPO` fits one treatment level with one ``apo`` job (model ``apo`` of
:mod:`fanfit.dml.models`); :class:`DoubleMLAPOS` submits one such job per level, all before
waiting for any, and hands their predictions to DoubleML's own ``DoubleMLAPOS.fit``. Both are
re-exported by :mod:`fanfit.client.doubleml`, whose docstring says how a fit works.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.client.doubleml.base import (
    _check_arguments,
    _dml_data,
    _estimator,
    _OnStack,
    _PropensityOptions,
    _where,
)
from fanfit.client.doubleml.parts import _SideBySide
from fanfit.dml.interop import import_doubleml

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = ["WEIGHTS_BAR_PREFIX", "WEIGHTS_COL", "DoubleMLAPO", "DoubleMLAPOS"]

#: The column that carries DoubleMLAPO's ``weights`` to the job (``weights_col``).
WEIGHTS_COL = "_fanfit_weights"
#: The columns of ``weights_bar``, one per repetition: ``_fanfit_weights_bar_0``, ...
WEIGHTS_BAR_PREFIX = "_fanfit_weights_bar_"


def _check_weights(weights: Any, n_obs: int, n_rep: int) -> None:
    """DoubleMLAPO's ``weights``, checked by name before DoubleML sees them (DoubleML 0.11.4
    ``utils/_checks._check_weights`` with score ``'ATE'``).

    Raises
    ------
    fanfit.errors.InvalidJobError
        Not an array or dict; a dict without exactly the keys ``weights`` and ``weights_bar``;
        ``weights`` not of shape (n_obs,) or ``weights_bar`` not (n_obs, n_rep); a negative or
        non-finite value; all zero.
    """
    if weights is None:
        return
    if isinstance(weights, dict):
        keys = set(weights)
        if keys != {"weights", "weights_bar"}:
            raise errors.InvalidJobError(
                f"weights as a dict must have exactly the keys 'weights' and 'weights_bar', got "
                f"{sorted(map(str, keys))}"
            )
        parts = [("weights['weights']", weights["weights"], (n_obs,)),
                 ("weights['weights_bar']", weights["weights_bar"], (n_obs, n_rep))]  # fmt: skip
    elif isinstance(weights, np.ndarray):
        parts = [("weights", weights, (n_obs,))]
    else:
        raise errors.InvalidJobError(
            f"weights must be a numpy array of shape ({n_obs},) or a dict of 'weights' "
            f"({n_obs},) and 'weights_bar' ({n_obs}, {n_rep}), got {type(weights).__name__}"
        )
    for name, value, shape in parts:
        if not isinstance(value, np.ndarray) or value.shape != shape:
            got = value.shape if isinstance(value, np.ndarray) else type(value).__name__
            raise errors.InvalidJobError(
                f"{name} must be a numpy array of shape {shape} (n_obs={n_obs}, n_rep={n_rep}), "
                f"got {got}"
            )
        values = value.astype(float)
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise errors.InvalidJobError(f"{name} must be finite and greater or equal 0")
        if values.sum() == 0:
            raise errors.InvalidJobError(f"{name} is all zero; at least one must be non-zero")


def _weight_columns(weights: Any, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The columns that carry ``weights`` (checked) to the job: :data:`WEIGHTS_COL` and, for a
    dict, one :data:`WEIGHTS_BAR_PREFIX` column per repetition.

    Raises
    ------
    fanfit.errors.InvalidDataError
        The data already has a column of that name.
    """
    if weights is None:
        return {}
    if isinstance(weights, dict):
        bar = np.asarray(weights["weights_bar"], dtype=float)
        cols = {WEIGHTS_COL: np.asarray(weights["weights"], dtype=float)}
        cols.update({f"{WEIGHTS_BAR_PREFIX}{r}": bar[:, r] for r in range(bar.shape[1])})
    else:
        cols = {WEIGHTS_COL: np.asarray(weights, dtype=float)}
    taken = sorted(set(cols) & {str(c) for c in frame.columns})
    if taken:
        raise errors.InvalidDataError(
            f"the data has a column {taken[0]!r}, the name fanfit gives the weights; rename it"
        )
    return cols


class DoubleMLAPO(_PropensityOptions, _OnStack, _doubleml.DoubleMLAPO):  # type: ignore[misc]
    """DoubleML's average potential outcome model at one treatment level, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLAPO`` (0.11): ``obj_dml_data, ml_g, ml_m, treatment_level,
    n_folds=5, n_rep=1, score='APO', weights=None, normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``, and the
    DataFrame columns (``y_col``, ``d_cols``, ``x_cols``, ``z_cols``, ``cluster_cols``, by
    keyword) as :class:`~fanfit.client.doubleml.DoubleMLPLR`. The job fits ``ml_g`` on the rows
    at the level (``ml_g_d_lvl1``) and off it (``ml_g_d_lvl0``, on the treatment and the
    covariates) and ``ml_m`` on ``1{d == treatment_level}`` (model ``apo`` of
    :mod:`fanfit.dml.models`). ``weights`` (an array of shape (n_obs,), or a dict of
    ``weights`` (n_obs,) and ``weights_bar`` (n_obs, n_rep)) travel to the job as data columns
    (:data:`WEIGHTS_COL`, ``weights_col``; :data:`WEIGHTS_BAR_PREFIX` ``<r>``,
    ``weights_bar_cols``) and enter its score as DoubleML's (:func:`fanfit.dml.scores.plm_irm.apo_score_elements`).

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`~fanfit.client.doubleml.DoubleMLIRM` (a propensity calibration, a callable
        score).
    fanfit.errors.InvalidJobError
        ``weights`` of the wrong type or shape, negative, non-finite or all zero (naming
        ``weights`` or the dict's key and the expected shape).
    """

    _fanfit_model = "apo"
    _fanfit_external_targets = True  # DoubleML keeps an external prediction's targets

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
        self._fanfit_check_ps(None, normalize_ipw, ps_processor_config)
        _check_weights(weights, data.n_obs, n_rep)
        self._fanfit_weights = weights
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
        columns = list(_weight_columns(self._fanfit_weights, self._dml_data.data))
        if columns:
            options["weights_col"] = columns[0]
            options["weights_bar_cols"] = columns[1:] or None
        return options

    def _fanfit_frame(self) -> pd.DataFrame:
        cols = _weight_columns(self._fanfit_weights, self._dml_data.data)
        frame = self._dml_data.data
        return frame.assign(**cols) if cols else frame

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        treated = (d == self.treatment_level).astype(float)
        return {"ml_g_d_lvl0": _where(y, treated == 0), "ml_g_d_lvl1": _where(y, treated == 1),
                "ml_m": treated}  # fmt: skip


class DoubleMLAPOS(_SideBySide, _doubleml.DoubleMLAPOS):  # type: ignore[misc]
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
        A propensity calibration, or a callable score.
    fanfit.errors.InvalidJobError
        ``weights`` as :class:`DoubleMLAPO` refuses them (every level's job takes them).
    """

    _fanfit_parts_model = "apos"  # one job of several parts

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, treatment_levels: Any, n_folds: int = 5,
        n_rep: int = 1, score: Any = "APO", weights: Any = None, normalize_ipw: bool = False,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True,
    ) -> None:  # fmt: skip
        _PropensityOptions._fanfit_check_ps(self, None, normalize_ipw, ps_processor_config)  # type: ignore[arg-type]
        _check_arguments(obj_dml_data, score)
        _check_weights(weights, obj_dml_data.n_obs, n_rep)
        self._fanfit_weights = weights
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
        return [one.fanfit_options(seed) for one in self._fanfit_levels()]

    def _fanfit_levels(self) -> list[DoubleMLAPO]:
        """One fanfit DoubleMLAPO per level, on this model's sample splitting and weights, with
        the nuisance parameters set on its ``modellist`` model (``set_ml_nuisance_params``,
        ``tune_ml_models``)."""
        out = []
        for level, model in zip(self.treatment_levels, self.modellist, strict=True):
            one = DoubleMLAPO(
                self._dml_data, self._learner["ml_g"], self._learner["ml_m"], level,
                self.n_folds, self.n_rep, self.score, self._fanfit_weights, self.normalize_ipw,
                ps_processor_config=self.ps_processor_config, draw_sample_splitting=False,
            )  # fmt: skip
            one.set_sample_splitting(self.smpls)
            one._params = copy.deepcopy(model._params)
            out.append(one)
        return out

    def _fanfit_parts(self, seed: int) -> list[tuple[str, pd.DataFrame, dict[str, Any]]]:
        options = self.fanfit_options(seed)
        return [(f"treatment level {level}", one._fanfit_frame(), o)
                for level, one, o in zip(self.treatment_levels, self._fanfit_levels(), options)]  # fmt: skip

    def _fanfit_external(self, jobs: list[Any]) -> dict[Any, Any]:
        d_col = self._dml_data.d_cols[0]
        return {level: job.predictions()[d_col] for level, job in zip(self.treatment_levels, jobs)}
