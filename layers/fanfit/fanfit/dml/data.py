"""The estimate's data: validated arrays for y, d, x and z, in the dtypes DoubleML computes in
(float64, or float32 where the spec records it: :attr:`fanfit.dml.DMLSpec.dtypes`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fanfit.dml.external import read_external_predictions
from fanfit.dml.model_checks import check_noncompliance, column, column_label, require_binary
from fanfit.dml.models import model_def
from fanfit.dml.spec import MODEL_COLUMNS, DMLSpec
from fanfit.errors import InvalidDataError, InvalidLearnerError

__all__ = [
    "DMLData",
    "as_spec_dtypes",
    "check_columns",
    "check_noncompliance",
    "is_binary",
    "validate_data",
]


@dataclass
class DMLData:
    """Arrays of one estimate, C-contiguous; float64, except the roles ``y``, ``d``, ``x``, ``z``,
    ``t``, ``s`` that the spec records as float32 (:attr:`fanfit.dml.DMLSpec.dtypes`,
    :func:`validate_data` casts them). Cluster ids and weights are always float64.

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
    t : numpy.ndarray of shape (n_obs,), or None
        The time column ``spec.t_col`` (DIDCS); None for the other models.
    s : numpy.ndarray of shape (n_obs,), or None
        The selection indicator ``spec.s_col`` (SSM); None for the other models.
    weights : numpy.ndarray of shape (n_obs,), or None
        DoubleML's ``weights`` (``spec.weights_col``, APO); None: all ones.
    weights_bar : numpy.ndarray of shape (n_obs, n_rep) or (n_obs,), or None
        DoubleML's ``weights_bar`` (``spec.weights_bar_cols``), one column per repetition; the
        score functions get the repetition's column (:func:`fanfit.dml.score_elements`); None:
        ``weights``.
    inner_folds : numpy.ndarray of shape (n_obs, n_rep * n_folds), or None
        The given inner folds of a model with nested sample splitting (``spec.inner_folds_cols``,
        LPLR): column ``i_rep * n_folds + i_fold`` holds each training row's inner fold
        (0 to ``n_folds_inner - 1``) in that outer fold and -1 on its test rows; None: each fold
        unit draws its own (:func:`fanfit.dml.folds.unit_inner_smpls`).
    d_mean : numpy.ndarray of shape (n_obs, n_treat), or None
        Each treatment's unit mean (``spec.d_mean_cols``, DoubleMLPLPR's ``d_mean``), a feature
        of PLR's ``ml_m`` only.
    external : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat), or None
        The given out-of-fold predictions (``spec.external_predictions_cols``), NaN for a
        treatment whose predictions are not given (:mod:`fanfit.dml.external`).
    stage_weights : numpy.ndarray of shape (n_obs,), or None
        The sample weights of a fold unit's stage-1 fits (:attr:`fanfit.dml.models.FoldSplit.
        sample_weights`: DoubleMLLPLR's ``'instrument'`` score), of the unit's treatment and
        repetition; set by the unit from its stage's inputs, None elsewhere.
    """

    y: np.ndarray
    d: np.ndarray
    x: np.ndarray
    z: np.ndarray | None = None
    cluster_vars: np.ndarray | None = None
    t: np.ndarray | None = None
    s: np.ndarray | None = None
    weights: np.ndarray | None = None
    weights_bar: np.ndarray | None = None
    inner_folds: np.ndarray | None = None
    d_mean: np.ndarray | None = None
    external: dict[str, np.ndarray] | None = None
    stage_weights: np.ndarray | None = None

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
        columns ``x_cols + d_cols`` without the active treatment, in that order, in ``x``'s dtype
        (the spec's ``dtypes['x']`` is that of DoubleML's ``x``, those columns together).

        Returns
        -------
        numpy.ndarray, shape (n_obs, n_x + n_treat - 1)
        """
        if self.n_treat == 1:
            return self.x
        others = [j for j in range(self.n_treat) if j != i_treat]
        return np.ascontiguousarray(np.hstack((self.x, self.d[:, others])), dtype=self.x.dtype)


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
        *((name, spec.model_column(name)) for name in MODEL_COLUMNS),
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
        Copies of the used columns, checked in float64, then each role in the dtype the spec
        records for it (:attr:`fanfit.dml.DMLSpec.dtypes`; :func:`as_spec_dtypes`).

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
    # a given inner prediction (DoubleML's <key>_inner_<k>: DoubleMLLPLR) is NaN outside its
    # outer fold's training rows; the fold's unit checks those (fanfit.dml.scores.lplr)
    inner = {
        c
        for key, by_treat in (spec.external_predictions_cols or {}).items()
        if "_inner_" in key and isinstance(by_treat, dict)
        for cols in by_treat.values()
        for c in cols
    }
    for c in spec.used_cols:
        if c in inner:
            continue
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

    t = None
    if spec.t_col is not None:
        t = np.ascontiguousarray(values[:, index[spec.t_col]], dtype=np.float64)
    s = np.ascontiguousarray(values[:, index[spec.s_col]], dtype=np.float64) if spec.s_col else None
    data = DMLData(y=y, d=d, x=x, z=z, cluster_vars=cluster_vars, t=t, s=s)
    if spec.weights_col is not None:
        data.weights = np.ascontiguousarray(values[:, index[spec.weights_col]], dtype=np.float64)
        _check_weights(spec.weights_col, data.weights)
    if spec.weights_bar_cols is not None:
        data.weights_bar = _take(values, index, spec.weights_bar_cols)
        _check_weights(f"weights_bar_cols ({', '.join(spec.weights_bar_cols)})", data.weights_bar)
    if spec.inner_folds_cols is not None:
        data.inner_folds = _take(values, index, spec.inner_folds_cols)
    if spec.d_mean_cols is not None:
        data.d_mean = _take(values, index, spec.d_mean_cols)
    data.external = read_external_predictions(spec, index, values)
    _check_model_data(spec, data)
    if cluster_vars is not None:
        _check_clusters(spec, cluster_vars)
    return as_spec_dtypes(spec, data)


def as_spec_dtypes(spec: DMLSpec, data: DMLData) -> DMLData:
    """The data with each role's array in the dtype DoubleML computes it in (:attr:`DMLSpec.dtypes`).

    The one place where fanfit's float64 data become DoubleML's arrays, for the jobs of fanfit's
    DoubleML classes (only they set :attr:`DMLSpec.dtypes`): a Stata file's ``float`` columns, as
    pandas reads them, are float32 in DoubleML's ``DoubleMLData.y``/``.x``, and its learners, start
    values (``np.quantile`` of ``y``), IPW searches and scores run on them. Every
    unit, fold procedure and aggregation reads its data through :func:`validate_data`, so they all
    see the same arrays. float32 values travel exactly as float64, so the cast back is exact.

    Parameters
    ----------
    spec : DMLSpec
    data : DMLData
        float64 arrays.

    Returns
    -------
    DMLData
        ``data`` itself when every role is float64, else a copy with the float32 roles cast.
    """
    if not spec.dtypes:
        return data
    cast: dict[str, Any] = {}
    for role in spec.dtype_roles:
        value = getattr(data, role)
        dtype = np.dtype(spec.dtype(role))
        if value is not None and value.dtype != dtype:
            cast[role] = np.ascontiguousarray(value, dtype=dtype)
    return dataclasses.replace(data, **cast) if cast else data


def _check_weights(name: str, weights: np.ndarray) -> None:
    """DoubleML 0.11.4 ``utils/_checks._check_weights``: every weight >= 0, not all zero.

    Raises
    ------
    InvalidDataError
        Naming the column(s) ``name``.
    """
    if np.any(weights < 0):
        raise InvalidDataError(
            f"Weights column {name} has {int(np.sum(weights < 0))} negative value(s); DoubleML's "
            "weights must be greater or equal 0."
        )
    if np.sum(weights) == 0:
        raise InvalidDataError(f"Weights column {name} is all zero; at least one must be non-zero.")


def _check_clusters(spec: DMLSpec, cluster_vars: np.ndarray) -> None:
    for j, col in enumerate(spec.cluster_cols):
        n_clusters = np.unique(cluster_vars[:, j]).size
        if n_clusters < spec.n_folds:
            raise InvalidDataError(
                f"Cluster column {col!r} (cluster_cols) has {n_clusters} cluster(s), fewer than "
                f"n_folds={spec.n_folds}: the folds are drawn per cluster; use n_folds of at most "
                f"{n_clusters} or more clusters."
            )


def _check_model_data(spec: DMLSpec, data: DMLData) -> None:
    """The model's binary columns, then every classifier's target, then the model's own checks."""
    mdef = model_def(spec.model)
    for name in mdef.binary:
        require_binary(
            column_label(spec, name),
            column(spec, data, name, 0),
            f"(model {spec.model!r} needs one binary {_ROLE_WORD.get(name, name)})",
        )
    learners = spec.learners
    seen = set()
    for fit in mdef.nuisances(spec):
        lspec = learners.get(fit.learner)
        if lspec is None or not lspec.is_classifier or mdef.roles[fit.learner] != "either":
            continue
        for i_treat in range(spec.n_treat) if fit.target == "d" else (0,):
            col = spec.d_cols[i_treat] if fit.target == "d" else column_label(spec, fit.target)
            if (fit.learner, col) in seen:
                continue
            seen.add((fit.learner, col))
            require_binary(
                col,
                column(spec, data, fit.target, i_treat),
                f"when {fit.learner} is a classifier ({lspec.name}); use a regressor otherwise",
                InvalidLearnerError,
            )
    if mdef.check_data is not None:
        mdef.check_data(spec, data)


_ROLE_WORD = {"d": "treatment", "z": "instrument", "t": "time column"}
_ROLE_WORD = {"d": "treatment", "z": "instrument", "s": "selection indicator"}
