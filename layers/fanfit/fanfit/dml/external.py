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

Models whose fits nest inside each outer fold (a fold procedure) take them as DoubleML 0.11.4's
class does (:attr:`fanfit.dml.models.FoldProcedure.external`):

- PQ (DoubleMLPQ, ``irm/pq.py`` ``_nuisance_est``) any of ``ml_g``, ``ml_m``. A unit per fold
  still runs while one key is not given: it skips the given key's fits and returns, as before,
  every key of its stage, the given one's values being the given predictions on its test rows
  (:mod:`fanfit.dml.fold_procedures`). With ``ml_m`` given, the fold's preliminary propensities
  are DoubleML's ``m_hat["preds"][np.concatenate([test for _, test in smpls_prelim])]``
  (:func:`~fanfit.dml.scores.quantile.pq_fold_prelim`); the chain of start values over the
  repetitions runs as without them. With both given (:func:`every_key_given`) no unit runs and
  the root search starts from the first start value, as DoubleML's, which then fits nothing and
  leaves ``_coef_start_val`` as it was; the fold scalar ``theta_ipw`` then holds that start value
  (:func:`put_external_predictions`). A unit runs even when every key of its *stage* is given
  (two stages, ``n_rep > 1``) but not every key: stage 0's units carry the preliminary
  propensities the chain between the stages needs, stage 1's the fold scalars the aggregate
  needs; such a unit fits nothing.
- LPQ (DoubleMLLPQ, ``irm/lpq.py`` ``_nuisance_est``) all five keys, then no unit runs, as PQ
  with both given; a subset is ignored (:func:`external_units` leaves it out, every nuisance is
  fitted), as DoubleML ignores it: its check ``elif any(ext_preds) and not any(ext_preds):`` can
  never be true, so it fits everything and never reads the given arrays.
- LPLR (DoubleMLLPLR, ``plm/lplr.py`` ``_nuisance_est``) any of ``ml_m``, ``ml_a``, ``ml_t``,
  ``ml_M``; ``ml_M`` and ``ml_a`` with their inner predictions ``<key>_inner_<k>`` of every
  outer fold ``k`` (``FoldProcedure.external_keys``; only with ``n_folds_inner == n_folds``, as
  DoubleML reads and uses them: :func:`fanfit.dml.scores.lplr.check_lplr_spec`), which may be
  NaN outside their fold's training rows. The units run even with every key given: each
  fold's ``beta`` comes from the given inner predictions.
- CVaR (DoubleMLCVAR takes none) and SSM's nonignorable score (DoubleMLSSM takes none) take
  none (:func:`check_external_predictions`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fanfit.dml.model_checks import DMLData, DMLSpec
from fanfit.dml.models import model_def
from fanfit.errors import InvalidJobError

__all__ = [
    "check_external_predictions",
    "every_key_given",
    "external_columns",
    "external_units",
    "given_units",
    "is_external",
    "put_external_predictions",
    "read_external_predictions",
]


def is_external(spec: DMLSpec, key: str, i_treat: int) -> bool:
    """Whether nuisance ``key``'s predictions for treatment ``i_treat`` are given."""
    return (key, i_treat) in external_units(spec)


def given_units(spec: DMLSpec) -> list[tuple[str, int]]:
    """The ``(key, i_treat)`` that ``external_predictions_cols`` names, in the spec's key and
    treatment order (also those the model ignores: :func:`external_units`)."""
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


def _model_keys(spec: DMLSpec) -> tuple[str, ...]:
    return tuple(n.key for n in model_def(spec.model).nuisances(spec))


def external_units(spec: DMLSpec) -> list[tuple[str, int]]:
    """The ``(key, i_treat)`` whose given predictions replace fits, in the spec's key and
    treatment order: :func:`given_units`, less a treatment's of a model that takes every key or
    none (``FoldProcedure.external`` ``'all'``: DoubleMLLPQ) when not
    every key of that treatment is given (DoubleML 0.11.4 then fits every nuisance, module
    docstring)."""
    units = given_units(spec)
    fp = model_def(spec.model).fold_procedure_for(spec)
    if fp is None or fp.external != "all":
        return units
    keys = _model_keys(spec)
    complete = {i for i in range(len(spec.d_cols)) if all((k, i) in units for k in keys)}
    return [(key, i_treat) for key, i_treat in units if i_treat in complete]


def every_key_given(spec: DMLSpec, i_treat: int) -> bool:
    """Whether every prediction key of treatment ``i_treat`` is given (and taken,
    :func:`external_units`): nothing of it is fitted. A model with a fold procedure then has
    no fold unit for it (:func:`~fanfit.dml.units.fit_units`) and PQ's and LPQ's root search
    starts from the first start value (:func:`fanfit.dml.fold_procedures.fold_solve`); one
    whose units run all the same (``FoldProcedure.given_skips_units`` False: LPLR) counts as
    not given here."""
    fp = model_def(spec.model).fold_procedure_for(spec)
    if fp is not None and not fp.given_skips_units:
        return False
    units = set(external_units(spec))
    return bool(units) and all((key, i_treat) in units for key in _model_keys(spec))


def external_columns(spec: DMLSpec) -> tuple[str, ...]:
    """The data columns holding the given predictions, in :func:`external_units` order, each
    once (one column may serve several repetitions; the well-formed entries only:
    :func:`check_external_predictions` names the others)."""
    given = spec.external_predictions_cols or {}
    out: list[str] = []
    for key, i_treat in given_units(spec):  # also the ignored ones: DoubleML checks them too
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
        that takes none (CVaR, LPLR, SSM's nonignorable score: module docstring); a column that
        is also a role of the data (y, d, x, ...).
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
    fp = mdef.fold_procedure_for(spec)
    if fp is not None and not fp.external:
        raise InvalidJobError(
            f"Model {spec.model!r} with score {spec.score!r} fits its nuisances inside each outer "
            "fold, from more than their out-of-fold predictions: it takes no external predictions."
        )
    keys = [n.key for n in mdef.nuisances(spec)]
    if fp is not None and fp.external_keys is not None:
        keys += fp.external_keys(spec)  # LPLR's inner predictions
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
    array (n_obs, n_rep, n_treat) where ``preds`` has none; returns ``preds``.

    For a treatment of a model with a fold procedure whose every key is given
    (:func:`every_key_given`: no fold unit runs to return its fold scalars) also the fold
    scalars, each the procedure's first start value (``FoldProcedure.start``, PQ's and LPQ's
    ``np.quantile(y[d == treatment], quantile)``) on every row and repetition: the value
    DoubleML 0.11.4's root search then starts from (``_coef_start_val``, not updated when
    nothing is fitted), which :func:`~fanfit.dml.fold_procedures.fold_solve` uses.

    Parameters
    ----------
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
    spec : DMLSpec
    data : DMLData

    Returns
    -------
    dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        ``preds``.
    """
    if not data.external:
        return preds
    shape = (data.n_obs, spec.n_rep, spec.n_treat)
    for key, i_treat in external_units(spec):
        arr = preds.setdefault(key, np.full(shape, np.nan))
        arr[:, :, i_treat] = data.external[key][:, :, i_treat]
    fp = model_def(spec.model).fold_procedure_for(spec)
    if fp is not None:
        for i_treat in range(spec.n_treat):
            if every_key_given(spec, i_treat):
                start = float(fp.start(spec, data, i_treat))
                for name in fp.scalars:
                    preds.setdefault(name, np.full(shape, np.nan))[:, :, i_treat] = start
    return preds
