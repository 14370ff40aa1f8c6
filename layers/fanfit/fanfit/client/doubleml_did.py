"""DoubleML's difference-in-differences models on a fanfit stack: DoubleMLDID and DoubleMLDIDCS.

Panel data (:class:`DoubleMLDID`, model ``did`` of :mod:`fanfit.dml.models`) and repeated
cross-sections (:class:`DoubleMLDIDCS`, model ``didcs``), on a ``DoubleMLDIDData`` or a
DataFrame with its columns. Both are re-exported by :mod:`fanfit.client.doubleml`, whose
docstring says how a fit works.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from fanfit import errors
from fanfit.client.doubleml_base import _check_arguments, _estimator, _OnStack, _where
from fanfit.dml.interop import import_doubleml

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra

__all__ = ["DoubleMLDID", "DoubleMLDIDCS"]


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
