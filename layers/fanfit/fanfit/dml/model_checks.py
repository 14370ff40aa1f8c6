"""Each model's spec and data checks, and the data columns the model registry names.

:func:`column` resolves the short names of columns and samples that :mod:`fanfit.dml.models`
uses (``'y'``, ``'d'``, ``'z'``, ``'z:<col>'``, ``'treated'``, ``'t'``, ``'s'``); the registry's
``check_spec`` of each model is a ``_check_<model>`` here (column and option rules, raising
:class:`~fanfit.errors.InvalidJobError`), its ``check_data`` a ``_data_<model>`` (raising
:class:`~fanfit.errors.InvalidDataError`); :func:`require_binary` and :func:`check_noncompliance`
also serve :mod:`fanfit.dml.data`.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from fanfit.errors import InvalidDataError, InvalidJobError, OneSidedNoncomplianceError

# The spec and the data are typed loosely here (and in fanfit.dml.models): fanfit.dml.spec and
# fanfit.dml.data import both, and the import graph stays acyclic (tests/unit/test_import_graph.py).
#: A :class:`fanfit.dml.spec.DMLSpec`.
DMLSpec = Any
#: A :class:`fanfit.dml.data.DMLData`.
DMLData = Any

__all__ = ["check_noncompliance", "column", "column_label", "given_predictions", "require_binary"]


# --------------------------------------------------------------------------- columns
def given_predictions(data: DMLData, i_treat: int) -> dict[str, np.ndarray]:
    """A fold unit's given predictions (DoubleML's external predictions, ``data.external`` as
    :func:`fanfit.dml.unit_fits.fit_predict` hands it to the unit: its repetition's, and a key's
    inner ones of its fold as ``<key>_inner``) of treatment ``i_treat``: key -> float64 array
    of shape (n_obs,), the keys not given for that treatment (all NaN) left out."""
    out: dict[str, np.ndarray] = {}
    for key, values in (data.external or {}).items():
        col = np.asarray(values[:, 0, i_treat], dtype=np.float64)
        if not np.isnan(col).all():
            out[key] = col
    return out


def column(spec: DMLSpec, data: DMLData, name: str, i_treat: int) -> np.ndarray:
    """The data column a target or sample names (see :mod:`fanfit.dml.model_types`' docstring).

    Returns
    -------
    numpy.ndarray of float64, shape (n_obs,)

    Raises
    ------
    InvalidDataError
        An instrument column asked of data without instruments.
    InvalidJobError
        An unknown name.
    """
    if name == "y":
        return data.y
    if name == "d":
        return data.d[:, i_treat]
    if name == "treated":
        return (data.d[:, i_treat] == spec.treatment_level).astype(np.float64)
    if name == "t":
        if data.t is None:
            raise InvalidDataError(f"Model {spec.model!r} needs a time column (t_col).")
        return data.t
    if name == "s":
        if data.s is None:
            raise InvalidDataError(f"Model {spec.model!r} needs the selection column (s_col).")
        return data.s
    if name == "z" or name.startswith("z:"):
        if data.z is None:
            raise InvalidDataError(f"Model {spec.model!r} needs instrument data (z).")
        return data.z[:, 0] if name == "z" else data.z[:, spec.z_cols.index(name[2:])]
    raise InvalidJobError(f"Unknown column {name!r} in the model registry.")


def column_label(spec: DMLSpec, name: str) -> str:
    """The data column behind :func:`column`'s ``name`` (``'d' -> spec.d_cols[0]``), for reports."""
    if name == "d":
        return spec.d_cols[0]
    if name == "z":
        return spec.z_cols[0]
    if name.startswith("z:"):
        return name[2:]
    if name == "treated":
        return f"{spec.d_cols[0]} == {spec.treatment_level:g}"
    if name == "t":
        return str(spec.t_col)
    if name == "s":
        return str(spec.s_col)
    return spec.y_col


# --------------------------------------------------------------------------- checks
def _one_treatment(spec: DMLSpec, alternative: str) -> None:
    if len(spec.d_cols) != 1:
        raise InvalidJobError(
            f"Model {spec.model!r} needs exactly one {alternative}treatment column (d_cols), "
            f"got {len(spec.d_cols)}: {', '.join(spec.d_cols)}. Use 'plr' or 'pliv' for several treatments."
        )


def _no_instruments(spec: DMLSpec, iv_model: str) -> None:
    if spec.z_cols:
        raise InvalidJobError(
            f"Model {spec.model!r} takes no instruments, but z_cols is {list(spec.z_cols)}; "
            f"use model {iv_model!r} for an instrumental variable model."
        )


def _check_plr(spec: DMLSpec) -> None:
    _no_instruments(spec, "pliv")


def _check_irm(spec: DMLSpec) -> None:
    _one_treatment(spec, "binary ")
    _no_instruments(spec, "iivm")


def _check_pliv(spec: DMLSpec) -> None:
    if not spec.z_cols:
        raise InvalidJobError("Model 'pliv' needs at least one instrument column in z_cols.")
    if spec.score == "IV-type" and len(spec.z_cols) != 1:
        raise InvalidJobError(
            f"Model 'pliv' with score 'IV-type' needs exactly one instrument, got {len(spec.z_cols)}; "
            "use score 'partialling out' with several instruments."
        )


def _check_iivm(spec: DMLSpec) -> None:
    _one_treatment(spec, "binary ")
    if len(spec.z_cols) != 1:
        raise InvalidJobError(
            f"Model 'iivm' needs exactly one binary instrument column in z_cols, got {len(spec.z_cols)}."
        )


def _check_apo(spec: DMLSpec) -> None:
    _one_treatment(spec, "")
    _no_instruments(spec, "iivm")
    level = spec.treatment_level
    if level is None:
        raise InvalidJobError(
            "Model 'apo' needs treatment_level, the value of the treatment column whose average "
            "potential outcome is estimated (CLI: --treatment-level 1)."
        )
    if (
        isinstance(level, bool)
        or not isinstance(level, numbers.Real)
        or not np.isfinite(float(level))
    ):
        raise InvalidJobError(f"treatment_level must be a finite number, got {level!r}.")


def _check_did(spec: DMLSpec) -> None:
    _one_treatment(spec, "binary ")
    _no_instruments(spec, "iivm")


def _check_didcs(spec: DMLSpec) -> None:
    _check_did(spec)
    if spec.t_col is None:
        raise InvalidJobError(
            "Model 'didcs' needs t_col, the binary time column (0 before, 1 after the treatment; "
            "DoubleML's t_col; CLI: --t t)."
        )


def _check_ssm(spec: DMLSpec) -> None:
    _one_treatment(spec, "binary ")
    if not spec.s_col:
        raise InvalidJobError(
            "Model 'ssm' needs s_col, the binary selection column (1 where the outcome is "
            "observed; CLI: --s COLUMN, DoubleMLSSMData's s_col)."
        )
    if spec.score == "nonignorable":
        if len(spec.z_cols) != 1:
            raise InvalidJobError(
                "Model 'ssm' with score 'nonignorable' needs exactly one instrument for selection "
                f"in z_cols (CLI: --z COLUMN, DoubleMLSSMData's z_cols), got {list(spec.z_cols)}."
            )
        if spec.cluster_cols:
            raise InvalidJobError(
                "Model 'ssm' does not take cluster_cols (DoubleML's nonignorable SSM splits each "
                "fold's rows, not clusters); leave cluster_cols empty."
            )
        return
    if spec.z_cols:
        raise InvalidJobError(
            f"Model 'ssm' with score {spec.score!r} takes no instruments, but z_cols is "
            f"{list(spec.z_cols)}: DoubleML ignores them under missing at random; leave z_cols "
            "unset, or use score 'nonignorable' (selection instrumented by z)."
        )


def require_binary(
    col: str, values: np.ndarray, why: str, error: type[InvalidJobError] = InvalidDataError
) -> None:
    """Refuse a column that is not binary 0/1 with both values.

    Parameters
    ----------
    col : str
        The column's name, for the message.
    values : numpy.ndarray, shape (n_obs,)
    why : str
        The reason, appended to the message.
    error : type
        The error to raise (InvalidDataError, or InvalidLearnerError for a classifier's target).

    Raises
    ------
    InvalidDataError
        Naming the column, the first offending row and ``why`` (``error`` when the values are not
        all 0 or 1).
    """
    if not bool(np.all((np.power(values, 2) - values) == 0)):
        bad = np.flatnonzero((values != 0) & (values != 1))
        raise error(
            f"Column {col!r} must be binary with values 0 and 1 {why}, but row {int(bad[0])} "
            f"has {float(values[bad[0]]):g} ({bad.size} row(s) are neither 0 nor 1)."
        )
    if np.all(values == values[0]):
        raise InvalidDataError(
            f"Column {col!r} must take both values 0 and 1 {why}, but every row is {values[0]:g}."
        )


def _data_plr(spec: DMLSpec, data: DMLData) -> None:
    if spec.score == "IV-type" and bool(np.all((np.power(data.y, 2) - data.y) == 0)):
        raise InvalidDataError(
            f"Outcome column {spec.y_col!r} is binary, and score 'IV-type' does not support binary "
            "outcomes (additive probability models); use score 'partialling out'."
        )


def _data_iivm(spec: DMLSpec, data: DMLData) -> None:
    check_noncompliance(spec, data.d[:, 0], column(spec, data, "z", 0))


def _data_apo(spec: DMLSpec, data: DMLData) -> None:
    n_treated = int(np.sum(column(spec, data, "treated", 0)))
    if n_treated < 5:
        raise InvalidDataError(
            f"treatment_level={spec.treatment_level:g}: {n_treated} row(s) of {spec.d_cols[0]!r} "
            "have that value, fewer than 5 (DoubleML's minimum); choose a level the data has."
        )
    if n_treated == data.n_obs:
        raise InvalidDataError(
            f"treatment_level={spec.treatment_level:g}: every row of {spec.d_cols[0]!r} has that "
            "value, so ml_g_d_lvl0 has no rows to fit; choose another level."
        )


def _data_didcs(spec: DMLSpec, data: DMLData) -> None:
    d, t = column(spec, data, "d", 0), column(spec, data, "t", 0)
    for a in (0.0, 1.0):
        for b in (0.0, 1.0):
            n_cell = int(np.sum((d == a) & (t == b)))
            if n_cell < 2:
                raise InvalidDataError(
                    f"Model 'didcs' fits ml_g on each group and period, but {n_cell} row(s) have "
                    f"{spec.d_cols[0]} == {a:g} and {spec.t_col} == {b:g} (t_col); every "
                    "combination of treatment group and period needs rows."
                )


def check_noncompliance(spec: DMLSpec, d: np.ndarray, z: np.ndarray) -> None:
    """Refuse IIVM data whose missing subgroup ``spec.subgroups`` says exists.

    Without always takers (one-sided noncompliance: ``d == 0`` wherever ``z == 0``, as in
    DoubleML's 401(k) example, p401 instrumented by e401) ``ml_r0`` would be fitted on one class
    only and every shard would fail; likewise ``ml_r1`` without never takers (``d == 1`` wherever
    ``z == 1``). DoubleML's documentation sets ``subgroups={'always_takers': False}`` there.

    Parameters
    ----------
    spec : DMLSpec
        An IIVM spec.
    d, z : numpy.ndarray, shape (n_obs,)
        Binary treatment and instrument.

    Raises
    ------
    OneSidedNoncomplianceError
        Naming the option ``subgroups`` and the value to set.
    """
    d_col, z_col = spec.d_cols[0], spec.z_cols[0]
    if spec.always_takers and not np.any(d[z == 0] == 1):
        raise OneSidedNoncomplianceError(
            f"No row with {z_col} == 0 has {d_col} == 1: there are no always takers (one-sided "
            f"noncompliance), so ml_r cannot be fitted on the rows with {z_col} == 0 (one class "
            "only). Set subgroups={'always_takers': False} (CLI: --subgroups "
            "always_takers=false), as DoubleML does for this design."
        )
    if spec.never_takers and not np.any(d[z == 1] == 0):
        raise OneSidedNoncomplianceError(
            f"Every row with {z_col} == 1 has {d_col} == 1: there are no never takers, so ml_r "
            f"cannot be fitted on the rows with {z_col} == 1 (one class only). Set "
            "subgroups={'never_takers': False} (CLI: --subgroups never_takers=false)."
        )
