"""DoubleML's interactive regression models on a fanfit stack: DoubleMLIRM and DoubleMLIIVM.

Subclasses of DoubleML 0.11's classes of the same names, with their constructors; re-exported by
:mod:`fanfit.client.doubleml`, whose docstring says how a fit works.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fanfit.client.doubleml.base import (
    _check_arguments,
    _dml_data,
    _estimator,
    _OnStack,
    _PropensityOptions,
    _where,
)
from fanfit.client.doubleml.heterogeneity import HeterogeneityMethods, PolicyTreeMethod
from fanfit.dml.interop import import_doubleml

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = ["DoubleMLIIVM", "DoubleMLIRM"]


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
