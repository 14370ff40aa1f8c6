"""The estimate's data: validated float64 arrays for y, d, x and z."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fanfit.dml.spec import DMLSpec
from fanfit.errors import (
    InvalidDataError,
    InvalidJobError,
    InvalidLearnerError,
    OneSidedNoncomplianceError,
)

__all__ = ["DMLData", "check_columns", "check_noncompliance", "is_binary", "validate_data"]


@dataclass
class DMLData:
    """Arrays of one estimate, all float64 and C-contiguous.

    Attributes
    ----------
    y : numpy.ndarray, shape (n_obs,)
        Outcome.
    d : numpy.ndarray, shape (n_obs, n_treat)
        Treatment(s), in the order of ``spec.d_cols``.
    x : numpy.ndarray, shape (n_obs, n_x)
        Covariates, in the order of ``spec.x_cols``.
    z : numpy.ndarray of shape (n_obs, n_z), or None
        Instrument(s), in the order of ``spec.z_cols``; None for PLR and IRM.
    cluster_vars : numpy.ndarray of shape (n_obs, n_cluster_vars), or None
        Cluster ids, in the order of ``spec.cluster_cols`` (DoubleML's ``cluster_vars``); None
        without clusters.
    """

    y: np.ndarray
    d: np.ndarray
    x: np.ndarray
    z: np.ndarray | None = None
    cluster_vars: np.ndarray | None = None

    @property
    def n_obs(self) -> int:
        """Number of observations (rows)."""
        return int(self.y.shape[0])

    @property
    def n_treat(self) -> int:
        """Number of treatments (columns of ``d``)."""
        return int(self.d.shape[1])

    def xd(self, i_treat: int) -> np.ndarray:
        """Covariates seen by the nuisance learners of treatment ``i_treat``.

        As DoubleML's ``DoubleMLData.set_x_d`` with ``use_other_treat_as_covariate=True``: the
        columns ``x_cols + d_cols`` without the active treatment, in that order.

        Returns
        -------
        numpy.ndarray, shape (n_obs, n_x + n_treat - 1)
        """
        if self.n_treat == 1:
            return self.x
        others = [j for j in range(self.n_treat) if j != i_treat]
        return np.ascontiguousarray(np.hstack((self.x, self.d[:, others])))


def is_binary(values: np.ndarray) -> bool:
    """Whether every value is 0 or 1 (DoubleML's test ``np.all(v**2 - v == 0)``).

    Parameters
    ----------
    values : numpy.ndarray, any shape
    """
    values = np.asarray(values, dtype=np.float64)
    return bool(np.all((np.power(values, 2) - values) == 0))


def check_columns(spec: DMLSpec, columns: Sequence[str]) -> None:
    """Check that every column the spec uses is among ``columns``.

    Parameters
    ----------
    spec : DMLSpec
    columns : sequence of str
        The data's column names.

    Raises
    ------
    InvalidDataError
        A column is missing (the message names it, its role, and the columns the data has), or
        ``columns`` names a column twice.
    """
    columns = list(columns)
    seen: set[str] = set()
    for c in columns:
        if c in seen:
            raise InvalidDataError(
                f"The data has two columns named {c!r}; column names must be unique."
            )
        seen.add(c)
    roles = [
        ("y_col", (spec.y_col,)),
        ("d_cols", spec.d_cols),
        ("x_cols", spec.x_cols),
        ("z_cols", spec.z_cols),
        ("cluster_cols", spec.cluster_cols),
    ]
    for role, cols in roles:
        for c in cols:
            if c not in seen:
                shown = ", ".join(repr(x) for x in columns[:20]) + (
                    ", ..." if len(columns) > 20 else ""
                )
                raise InvalidDataError(
                    f"Column {c!r} ({role}) is not in the data. The data has columns: {shown}."
                )


def _take(values: np.ndarray, index: dict[str, int], cols: Sequence[str]) -> np.ndarray:
    return np.ascontiguousarray(values[:, [index[c] for c in cols]], dtype=np.float64)


def validate_data(spec: DMLSpec, columns: Sequence[str], values: np.ndarray) -> DMLData:
    """Pick and check the spec's columns from a numeric table.

    Parameters
    ----------
    spec : DMLSpec
        A validated spec.
    columns : sequence of str
        Column names of ``values``.
    values : numpy.ndarray, shape (n_obs, n_cols)
        The data as numbers (non-numeric columns are rejected by the caller before).

    Returns
    -------
    DMLData
        float64 copies of the used columns.

    Raises
    ------
    InvalidDataError
        With the column or option named, for: a missing column; a shape that does not match
        ``columns``; NaN or inf in a used column (how many rows, and the first); IRM/IIVM treatment
        that is not binary 0/1 or has one value only; IIVM instrument likewise; a classifier learner
        whose target is not binary (e.g. a classifier ``ml_m`` for PLR with a non-binary treatment, a
        classifier ``ml_g``/``ml_l`` with a non-binary outcome); PLR ``'IV-type'`` with a binary
        outcome (DoubleML refuses additive probability models there); ``n_folds`` larger than the
        number of rows; a cluster column (``cluster_cols``) with fewer clusters than ``n_folds``.
    OneSidedNoncomplianceError
        IIVM data without always (never) takers while ``subgroups`` says they exist
        (:func:`check_noncompliance`).
    """
    check_columns(spec, columns)
    values = np.asarray(values)
    if values.ndim != 2 or values.shape[1] != len(columns):
        raise InvalidDataError(
            f"The data has shape {values.shape}, expected (n_obs, {len(columns)}) for {len(columns)} columns."
        )
    try:
        values = values.astype(np.float64, copy=False)
    except (TypeError, ValueError) as exc:
        raise InvalidDataError(f"The data is not numeric: {exc}") from exc
    n_obs = values.shape[0]
    index = {c: i for i, c in enumerate(columns)}
    for c in spec.used_cols:
        col = values[:, index[c]]
        bad = ~np.isfinite(col)
        if bad.any():
            n_nan = int(np.isnan(col).sum())
            n_inf = int(bad.sum()) - n_nan
            raise InvalidDataError(
                f"Column {c!r} has {int(bad.sum())} non-finite row(s) ({n_nan} NaN, {n_inf} inf), "
                f"first at row {int(np.flatnonzero(bad)[0])}; drop or impute them before estimating."
            )
    if n_obs < spec.n_folds:
        raise InvalidDataError(
            f"n_folds={spec.n_folds} is larger than the number of rows ({n_obs}); "
            f"use at most n_folds={max(n_obs, 1)} or more data."
        )

    y = np.ascontiguousarray(values[:, index[spec.y_col]], dtype=np.float64)
    d = _take(values, index, spec.d_cols)
    x = _take(values, index, spec.x_cols)
    z = _take(values, index, spec.z_cols) if spec.z_cols else None
    cluster_vars = _take(values, index, spec.cluster_cols) if spec.cluster_cols else None

    _check_binary_roles(spec, y, d, z)
    if spec.model == "iivm":
        assert z is not None
        check_noncompliance(spec, d[:, 0], z[:, 0])
    if cluster_vars is not None:
        _check_clusters(spec, cluster_vars)
    return DMLData(y=y, d=d, x=x, z=z, cluster_vars=cluster_vars)


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


def _check_clusters(spec: DMLSpec, cluster_vars: np.ndarray) -> None:
    for j, col in enumerate(spec.cluster_cols):
        n_clusters = np.unique(cluster_vars[:, j]).size
        if n_clusters < spec.n_folds:
            raise InvalidDataError(
                f"Cluster column {col!r} (cluster_cols) has {n_clusters} cluster(s), fewer than "
                f"n_folds={spec.n_folds}: the folds are drawn per cluster; use n_folds of at most "
                f"{n_clusters} or more clusters."
            )


def _require_binary(
    col: str, values: np.ndarray, why: str, error: type[InvalidJobError] = InvalidDataError
) -> None:
    if not is_binary(values):
        bad = np.flatnonzero((values != 0) & (values != 1))
        raise error(
            f"Column {col!r} must be binary with values 0 and 1 {why}, but row {int(bad[0])} "
            f"has {float(values[bad[0]]):g} ({bad.size} row(s) are neither 0 nor 1)."
        )
    if np.all(values == values[0]):
        raise InvalidDataError(
            f"Column {col!r} must take both values 0 and 1 {why}, but every row is {values[0]:g}."
        )


def _check_binary_roles(spec: DMLSpec, y: np.ndarray, d: np.ndarray, z: np.ndarray | None) -> None:
    learners = spec.learners
    model = spec.model

    def classifier(name: str) -> bool:
        return name in learners and learners[name].is_classifier

    if model in ("irm", "iivm"):
        _require_binary(spec.d_cols[0], d[:, 0], f"(model {model!r} needs one binary treatment)")
    if model == "iivm":
        assert z is not None
        _require_binary(spec.z_cols[0], z[:, 0], "(model 'iivm' needs one binary instrument)")
    if model == "plr" and classifier("ml_m"):
        for j, col in enumerate(spec.d_cols):
            _require_binary(
                col,
                d[:, j],
                f"when ml_m is a classifier ({learners['ml_m'].name}); use a regressor otherwise",
                InvalidLearnerError,
            )
    for name in ("ml_l", "ml_g"):
        if classifier(name) and spec.model in ("plr", "irm", "iivm"):
            _require_binary(
                spec.y_col,
                y,
                f"when {name} is a classifier ({learners[name].name}); use a regressor otherwise",
                InvalidLearnerError,
            )
    if model == "plr" and spec.score == "IV-type" and is_binary(y):
        raise InvalidDataError(
            f"Outcome column {spec.y_col!r} is binary, and score 'IV-type' does not support binary "
            "outcomes (additive probability models); use score 'partialling out'."
        )
