"""DoubleML's sample selection model (missing at random, nonignorable) on a fanfit stack: DoubleMLSSM.

DoubleML 0.11.4's own class takes no external predictions; :class:`DoubleMLSSM` feeds it the
job's through ``_nuisance_est`` (model ``ssm`` of :mod:`fanfit.dml.models`). Re-exported by
:mod:`fanfit.client.doubleml`, whose docstring says how a fit works.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.client.doubleml.base import (
    _check_arguments,
    _estimator,
    _OnStack,
    _PropensityOptions,
    _unsupported,
)
from fanfit.dml.interop import import_doubleml

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = ["DoubleMLSSM"]


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


def _check_instrument(data: Any) -> None:
    """The one instrument for selection that score ``'nonignorable'`` needs.

    Raises
    ------
    fanfit.errors.InvalidDataError
        No ``z_cols`` (DoubleML raises a ValueError).
    fanfit.errors.UnsupportedArgumentError
        Several: the pipeline's SSM takes one.
    """
    z_cols = list(data.z_cols or [])
    if not z_cols:
        raise errors.InvalidDataError(
            "score='nonignorable' needs an instrument for selection: give the data z_cols (one "
            "column), e.g. DoubleMLSSMData(df, 'y', 'd', z_cols='z', s_col='s')"
        )
    if len(z_cols) != 1:
        raise _unsupported(
            f"z_cols={z_cols} with score='nonignorable'",
            "fanfit's nonignorable SSM takes exactly one instrument for selection",
        )


class DoubleMLSSM(_PropensityOptions, _OnStack, _doubleml.DoubleMLSSM):  # type: ignore[misc]
    """DoubleML's sample selection model (missing at random or nonignorable), fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLSSM`` (0.11): ``obj_dml_data, ml_g, ml_pi, ml_m, n_folds=5,
    n_rep=1, score='missing-at-random', normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``; the data a
    ``DoubleMLSSMData`` (``s_col`` the selection indicator), or a DataFrame with ``y_col``,
    ``d_cols``, ``x_cols``, ``z_cols`` and ``s_col`` by keyword. Missing at random, the job fits
    ``ml_g`` on the selected rows of each treatment arm (``ml_g_d0``, ``ml_g_d1``), ``ml_pi`` of
    ``s`` on ``(x, d)`` and ``ml_m`` of ``d`` on ``x`` (model ``ssm`` of
    :mod:`fanfit.dml.models`). ``'nonignorable'`` (one instrument ``z`` for selection): one fit
    unit per fold runs DoubleML's nested fits, ``ml_pi`` of ``s`` on ``(x, d, z)`` on one half of
    the fold's training rows, then ``ml_m`` and ``ml_g_d0``/``ml_g_d1`` on ``(x, pi)`` on the
    other half (:func:`fanfit.dml.scores.ssm.ssm_nonignorable_fold`).

    DoubleML 0.11.4's DoubleMLSSM takes no external predictions; this class lets it take the
    job's: its ``_nuisance_est`` hands them to DoubleML's own propensity processing
    (``ps_processor.adjust_ps``) and ``_score_elements``, so coef, se, summary, confint,
    bootstrap and nuisance_loss are still DoubleML's numbers.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`~fanfit.client.doubleml.DoubleMLIRM`; also clustered data, and score
        ``'nonignorable'`` with more than one instrument.
    fanfit.errors.InvalidDataError
        Score ``'nonignorable'`` on data without an instrument (``z_cols``).
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
            _check_instrument(data)
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

    _fanfit_doubleml_external = False  # DoubleML's DoubleMLSSM takes no external predictions

    def _fanfit_model_options(self) -> dict[str, Any]:
        options = super()._fanfit_model_options()
        # missing at random: DoubleML ignores instruments (with a warning), the job takes none
        z = list(self._dml_data.z_cols) if self.score == "nonignorable" else None
        options.update(s=self._dml_data.s_col, z=z)
        return options

    def _fanfit_nuisance_loss(self, given: Set[tuple[str, str]] = frozenset()) -> None:
        """Nothing to add: :meth:`_nuisance_est` returns DoubleML's targets with the predictions,
        so DoubleML's fit already computed ``nuisance_targets`` and ``nuisance_loss``."""

    def _nuisance_est(
        self, smpls: Any, n_jobs_cv: Any, external_predictions: Any, return_models: bool = False
    ) -> Any:
        """DoubleML's score elements and predictions from the job's out-of-fold predictions.

        As the tail of DoubleML 0.11.4's ``DoubleMLSSM._nuisance_est`` (both scores): the
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
