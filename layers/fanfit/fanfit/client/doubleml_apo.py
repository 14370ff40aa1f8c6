"""DoubleML's average potential outcome models on a fanfit stack: DoubleMLAPO and DoubleMLAPOS.

:class:`DoubleMLAPO` fits one treatment level with one ``apo`` job (model ``apo`` of
:mod:`fanfit.dml.models`); :class:`DoubleMLAPOS` submits one such job per level, all before
waiting for any, and hands their predictions to DoubleML's own ``DoubleMLAPOS.fit``. Both are
re-exported by :mod:`fanfit.client.doubleml`, whose docstring says how a fit works.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fanfit import errors
from fanfit.client.doubleml_base import (
    _check_arguments,
    _dml_data,
    _estimator,
    _OnStack,
    _PropensityOptions,
    _SideBySide,
    _where,
)
from fanfit.dml.interop import import_doubleml

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = ["DoubleMLAPO", "DoubleMLAPOS"]


class DoubleMLAPO(_PropensityOptions, _OnStack, _doubleml.DoubleMLAPO):  # type: ignore[misc]
    """DoubleML's average potential outcome model at one treatment level, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLAPO`` (0.11): ``obj_dml_data, ml_g, ml_m, treatment_level,
    n_folds=5, n_rep=1, score='APO', weights=None, normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``, and the
    DataFrame columns (``y_col``, ``d_cols``, ``x_cols``, ``z_cols``, ``cluster_cols``, by
    keyword) as :class:`~fanfit.client.doubleml.DoubleMLPLR`. The job fits ``ml_g`` on the rows
    at the level (``ml_g_d_lvl1``) and off it (``ml_g_d_lvl0``, on the treatment and the
    covariates) and ``ml_m`` on ``1{d == treatment_level}`` (model ``apo`` of
    :mod:`fanfit.dml.models`).

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`~fanfit.client.doubleml.DoubleMLIRM`.
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

    def _fanfit_parts(self, seed: int) -> list[tuple[str, pd.DataFrame, dict[str, Any]]]:
        frame = self._dml_data.data
        return [(f"treatment level {level}", frame, options)
                for level, options in zip(self.treatment_levels, self.fanfit_options(seed))]  # fmt: skip

    def _fanfit_external(self, jobs: list[Any]) -> dict[Any, Any]:
        d_col = self._dml_data.d_cols[0]
        return {level: job.predictions()[d_col] for level, job in zip(self.treatment_levels, jobs)}
