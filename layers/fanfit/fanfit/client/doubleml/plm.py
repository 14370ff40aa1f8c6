"""DoubleML's partially linear models on a fanfit stack: DoubleMLPLR and DoubleMLPLIV.

Subclasses of DoubleML 0.11's classes of the same names, with their constructors; re-exported by
:mod:`fanfit.client.doubleml`, whose docstring says how a fit works.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fanfit.client.doubleml.base import _check_arguments, _dml_data, _estimator, _OnStack
from fanfit.client.doubleml.heterogeneity import HeterogeneityMethods
from fanfit.dml.interop import import_doubleml

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = ["DoubleMLPLIV", "DoubleMLPLR"]


def _theta_initial(psi_a: np.ndarray, psi_b: np.ndarray) -> float:
    """The partialling-out estimate DoubleML fits ``ml_g`` of the IV-type score against."""
    return float(-np.nanmean(psi_b) / np.nanmean(psi_a))


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
