"""DoubleML's partially linear models on a fanfit stack: DoubleMLPLR, DoubleMLPLIV and DoubleMLLPLR.

Subclasses of DoubleML 0.11's classes of the same names, with their constructors; re-exported by
:mod:`fanfit.client.doubleml`, whose docstring says how a fit works.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

import numpy as np
import pandas as pd

from fanfit.client.doubleml.base import (
    _check_arguments,
    _dml_data,
    _estimator,
    _OnStack,
    _unsupported,
)
from fanfit.client.doubleml.heterogeneity import HeterogeneityMethods
from fanfit.dml.folds import inner_smpls_to_ids
from fanfit.dml.interop import import_doubleml
from fanfit.dml.scores.lplr import BETA, LPLR_KEYS

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra
from sklearn.utils import check_X_y  # noqa: E402 - DoubleML's dependency, as DoubleML reads x, y, d

__all__ = ["INNER_FOLDS_PREFIX", "DoubleMLLPLR", "DoubleMLPLIV", "DoubleMLPLR"]

#: Prefix of the columns that carry DoubleMLLPLR's inner folds to the job (``i_rep``, ``i_fold``).
INNER_FOLDS_PREFIX = "_fanfit_inner_folds_"


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


class _TakeBeta:
    """Between :class:`_OnStack` and DoubleML's class: takes the folds' ``beta`` out of the job's
    predictions (DoubleML would refuse an unknown key) and keeps it for ``_nuisance_est``; the
    user's own external predictions (no ``beta``: every key given, no job) pass as they are."""

    _fanfit_beta: np.ndarray | None = None

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        external = kwargs.get("external_predictions")
        self._fanfit_beta = None
        if external:
            d_col = next(iter(external))
            preds = dict(external[d_col])
            beta = preds.pop(BETA, None)
            if beta is not None:
                self._fanfit_beta = np.asarray(beta, dtype=float)
                kwargs["external_predictions"] = {d_col: preds}
        return super().fit(*args, **kwargs)  # type: ignore[misc]


class DoubleMLLPLR(_OnStack, _TakeBeta, _doubleml.DoubleMLLPLR):  # type: ignore[misc]
    """DoubleML's logistic partially linear regression model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLLPLR`` (0.11.4): ``obj_dml_data, ml_M, ml_t, ml_m,
    ml_a=None, n_folds=5, n_folds_inner=5, n_rep=1, score='nuisance_space',
    draw_sample_splitting=True, error_on_convergence_failure=False``, and the DataFrame columns as
    :class:`DoubleMLPLR`. The outcome must be binary 0/1.

    The job (model ``lplr`` of :mod:`fanfit.dml.models`) gets DoubleML's outer folds (``smpls``)
    and its inner folds (``smpls_inner``, as columns of fold ids); one fit unit per outer fold
    runs DoubleML's nested fits (:func:`fanfit.dml.scores.lplr.lplr_fold`) and returns the
    outer-fold predictions of ``ml_m``, ``ml_a``, ``ml_t``, ``ml_M`` and the fold's slope
    ``beta``. Score ``'instrument'`` runs in two stages: ``ml_a``, ``ml_t``, ``ml_M`` first,
    then ``ml_m`` weighted by :math:`\\hat M (1 - \\hat M)` of every fold's ``ml_M``
    (:func:`fanfit.dml.scores.lplr.lplr_final`). DoubleML 0.11.4 takes external predictions for LPLR only with every inner
    prediction (``ml_M_inner_i``, ``ml_a_inner_i``, read for ``i < n_folds_inner`` but used for
    ``i < n_folds``), which the job does not return; so this class's ``_nuisance_est`` builds
    DoubleML's score elements from the job's predictions itself (:math:`\\hat r = \\hat t -
    \\beta\\hat a`, the start value ``np.average(beta)``, then DoubleML's own
    ``_score_elements``), for any ``n_folds_inner``; DoubleML's root search, standard errors,
    summary, confint and bootstrap run on them unchanged. The inner predictions stay NaN in
    ``predictions``.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`DoubleMLPLR`; also clustered data.
    """

    _fanfit_model = "lplr"

    def __init__(
        self, obj_dml_data: Any, ml_M: Any, ml_t: Any, ml_m: Any, ml_a: Any = None,  # noqa: N803
        n_folds: int = 5, n_folds_inner: int = 5, n_rep: int = 1, score: Any = "nuisance_space",
        draw_sample_splitting: bool = True, error_on_convergence_failure: bool = False, *,
        y_col: Any = None, d_cols: Any = None, x_cols: Any = None, z_cols: Any = None,
        cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        if getattr(data, "is_cluster_data", False):
            raise _unsupported("clustered data", "fanfit's DoubleMLLPLR runs on unclustered data")
        super().__init__(
            data, _estimator("ml_M", ml_M), _estimator("ml_t", ml_t), _estimator("ml_m", ml_m),
            _estimator("ml_a", ml_a), n_folds, n_folds_inner, n_rep, score,
            draw_sample_splitting, error_on_convergence_failure,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_inner_columns(self) -> dict[str, np.ndarray]:
        """DoubleML's inner folds as fold ids (:func:`fanfit.dml.folds.inner_smpls_to_ids`), one
        column per repetition and outer fold, ``i_rep * n_folds + i_fold`` in order."""
        n_obs = int(self._dml_data.n_obs)
        return {
            f"{INNER_FOLDS_PREFIX}{i_rep}_{i_fold}": inner_smpls_to_ids(inner, n_obs).astype(float)
            for i_rep in range(self.n_rep)
            for i_fold, inner in enumerate(self.smpls_inner[i_rep])
        }

    def _fanfit_model_options(self) -> dict[str, Any]:
        options = super()._fanfit_model_options()
        options["n_folds_inner"] = int(self.n_folds_inner)
        options["inner_folds_cols"] = list(self._fanfit_inner_columns())
        return options

    def _fanfit_frame(self) -> pd.DataFrame:
        return self._dml_data.data.assign(**self._fanfit_inner_columns())  # type: ignore[no-any-return]

    def _fanfit_fits_nothing(self, spec: Any) -> bool:
        """Every one of ``ml_m``, ``ml_a``, ``ml_t``, ``ml_M`` given (with the inner
        predictions): DoubleML's own fit computes the rest (each fold's ``beta``), no job."""
        given = spec.external_predictions_cols or {}
        return all(key in given for key in LPLR_KEYS)

    def _fanfit_nuisance_loss(self, given: Set[tuple[str, str]] = frozenset()) -> None:
        """Nothing to add: :meth:`_nuisance_est` returns DoubleML's targets with the predictions."""

    def _nuisance_est(
        self, smpls: Any, n_jobs_cv: Any, external_predictions: Any, return_models: bool = False
    ) -> Any:
        """DoubleML's score elements and predictions from the job's outer-fold predictions.

        As the tail of DoubleML 0.11.4's ``DoubleMLLPLR._nuisance_est``: ``r_hat = t_hat - beta *
        a_hat``, ``_coef_start_val = np.average(beta)``, ``_score_elements(y, d, r_hat, m_hat)``;
        the targets DoubleML records (``d`` for ``ml_m`` and ``ml_a``, ``y`` for ``ml_M``, none
        for ``ml_t`` and the inner keys). Without the job's predictions (an in-process fit)
        DoubleML's own ``_nuisance_est`` runs.
        """
        given = {k: (external_predictions or {}).get(k) for k in LPLR_KEYS}
        if self._fanfit_beta is None or any(v is None for v in given.values()):
            return super()._nuisance_est(smpls, n_jobs_cv, external_predictions, return_models)
        data: Any = self._dml_data
        x, y = check_X_y(data.x, data.y, ensure_all_finite=False)
        _, d = check_X_y(x, data.d, ensure_all_finite=False)
        preds = {k: np.asarray(v, dtype=float) for k, v in given.items()}
        beta = self._fanfit_beta[:, self._i_rep]
        self._coef_start_val = np.average(beta)
        r_hat = preds["ml_t"] - beta * preds["ml_a"]
        psi_elements = self._score_elements(y, d, r_hat, preds["ml_m"])
        inner = [n for n in self.params_names if n not in preds]
        targets: dict[str, Any] = {"ml_m": d, "ml_a": d, "ml_t": None, "ml_M": y}
        return psi_elements, {
            "predictions": {**preds, "ml_r": r_hat, **{n: np.full(y.shape, np.nan) for n in inner}},
            "targets": {**targets, "ml_r": None, **dict.fromkeys(inner)},
            "models": dict.fromkeys(["ml_r", *LPLR_KEYS]),
        }
