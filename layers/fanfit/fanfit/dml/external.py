"""DoubleML's external predictions on the stack: the nuisances whose predictions a job is given.

DoubleML's ``fit(external_predictions=...)`` takes, per treatment column and prediction key
(``ml_l``, ``ml_g0``, ``ml_m_z``: its ``params_names``), an array of shape (n_obs, n_rep) of
out-of-fold predictions that replaces that nuisance's fits; the other nuisances are fitted
(DoubleML's ``_nuisance_est``, and its own test modules, refit a model this way). A job carries
the given predictions as data columns, named by
:attr:`fanfit.dml.DMLSpec.external_predictions_cols` ``{key: {treatment column: [column of
repetition 0, ...]}}``: :func:`~fanfit.dml.units.fit_units` leaves their units out, and
:func:`put_external_predictions` puts them into the predictions before the first stage, so the
later stages (PLR's IV-type ``ml_g``, fitted on :math:`Y - \\tilde\\theta D` with
:math:`\\tilde\\theta` from ``ml_l`` and ``ml_m``) and the aggregate see them as DoubleML does.

Models whose fits nest inside each outer fold (a fold procedure: PQ, CVaR, LPQ, LPLR, SSM's
nonignorable score) take none: their nested fits need more than the out-of-fold predictions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fanfit.dml.model_checks import DMLData, DMLSpec
from fanfit.dml.models import model_def
from fanfit.errors import InvalidJobError

__all__ = [
    "check_external_predictions",
    "external_columns",
    "external_units",
    "is_external",
    "put_external_predictions",
    "read_external_predictions",
]


def is_external(spec: DMLSpec, key: str, i_treat: int) -> bool:
    """Whether nuisance ``key``'s predictions for treatment ``i_treat`` are given."""
    return (key, i_treat) in external_units(spec)


def external_units(spec: DMLSpec) -> list[tuple[str, int]]:
    """The ``(key, i_treat)`` whose predictions are given, in the spec's key and treatment order."""
    given = spec.external_predictions_cols
    if not isinstance(given, Mapping):
        return []
    return [
        (key, i_treat)
        for key, by_treat in given.items()
        if isinstance(by_treat, Mapping)
        for i_treat, d_col in enumerate(spec.d_cols)
        if d_col in by_treat
    ]


def external_columns(spec: DMLSpec) -> tuple[str, ...]:
    """The data columns holding the given predictions, in :func:`external_units` order, each
    once (one column may serve several repetitions; the well-formed entries only:
    :func:`check_external_predictions` names the others)."""
    given = spec.external_predictions_cols or {}
    out: list[str] = []
    for key, i_treat in external_units(spec):
        cols = given[key][spec.d_cols[i_treat]]
        if isinstance(cols, Sequence) and not isinstance(cols, str):
            out += [c for c in cols if isinstance(c, str)]
    return tuple(dict.fromkeys(out))


def check_external_predictions(spec: DMLSpec) -> None:
    """Check :attr:`~fanfit.dml.DMLSpec.external_predictions_cols` against the spec.

    Raises
    ------
    InvalidJobError
        Not ``{key: {treatment column: [n_rep column names]}}``; a key the model does not
        predict or a treatment it does not have, naming them; a model with a fold procedure
        (module docstring); a column that is also a role of the data (y, d, x, ...).
    """
    given = spec.external_predictions_cols
    if given is None:
        return
    if not isinstance(given, Mapping):
        raise InvalidJobError(
            "external_predictions_cols must be an object {prediction key: {treatment column: "
            f"[column of each repetition]}}, got {type(given).__name__}."
        )
    mdef = model_def(spec.model)
    if mdef.fold_procedure_for(spec) is not None:
        raise InvalidJobError(
            f"Model {spec.model!r} with score {spec.score!r} fits its nuisances inside each outer "
            "fold, from more than their out-of-fold predictions: it takes no external predictions."
        )
    keys = [n.key for n in mdef.nuisances(spec)]
    roles = set(spec.data_cols)
    for key, by_treat in given.items():
        if key not in keys:
            raise InvalidJobError(
                f"external_predictions_cols names {key!r}; model {spec.model!r} with score "
                f"{spec.score!r} predicts {', '.join(keys)}."
            )
        if not isinstance(by_treat, Mapping) or not by_treat:
            raise InvalidJobError(
                f"external_predictions_cols[{key!r}] must be a non-empty object {{treatment "
                "column: [column of each repetition]}."
            )
        for d_col, cols in by_treat.items():
            if d_col not in spec.d_cols:
                raise InvalidJobError(
                    f"external_predictions_cols[{key!r}] names treatment {d_col!r}; the "
                    f"treatments are {', '.join(spec.d_cols)}."
                )
            if (
                not isinstance(cols, Sequence)
                or isinstance(cols, str)
                or len(cols) != spec.n_rep
                or not all(isinstance(c, str) and c for c in cols)
            ):
                raise InvalidJobError(
                    f"external_predictions_cols[{key!r}][{d_col!r}] must list n_rep={spec.n_rep} "
                    f"column names, one per repetition; got {cols!r}."
                )
            taken = sorted(set(cols) & roles)
            if taken:
                raise InvalidJobError(
                    f"external_predictions_cols[{key!r}][{d_col!r}] names column(s) "
                    f"{', '.join(taken)}, which the job also reads as data."
                )


def read_external_predictions(
    spec: DMLSpec, index: Mapping[str, int], values: np.ndarray
) -> dict[str, np.ndarray] | None:
    """The given predictions of a table: ``{key: array (n_obs, n_rep, n_treat)}``, NaN for a
    treatment whose predictions are not given; None when none are
    (:attr:`fanfit.dml.data.DMLData.external`)."""
    if not spec.external_predictions_cols:
        return None
    out: dict[str, np.ndarray] = {}
    given = spec.external_predictions_cols
    for key, i_treat in external_units(spec):
        arr = out.setdefault(key, np.full((values.shape[0], spec.n_rep, spec.n_treat), np.nan))
        for i_rep, col in enumerate(given[key][spec.d_cols[i_treat]]):
            arr[:, i_rep, i_treat] = values[:, index[col]]
    return out


def put_external_predictions(
    preds: dict[str, np.ndarray], spec: DMLSpec, data: DMLData
) -> dict[str, np.ndarray]:
    """Put the given predictions (``data.external``) into ``preds`` in place, allocating a key's
    array (n_obs, n_rep, n_treat) where ``preds`` has none; returns ``preds``."""
    if not data.external:
        return preds
    for key, i_treat in external_units(spec):
        arr = preds.setdefault(key, np.full((data.n_obs, spec.n_rep, spec.n_treat), np.nan))
        arr[:, :, i_treat] = data.external[key][:, :, i_treat]
    return preds
