"""Fit units: the independent (stage, treatment, repetition, fold, learner) fits of cross-fitting.

An estimate is a list of stages. Within a stage every :class:`FitUnit` is independent: it fits one
nuisance learner on the training rows of one fold of one repetition and predicts that fold's test
rows, so units can run anywhere in any order (one Lambda invocation per shard of units). The
``'IV-type'`` scores of PLR and PLIV have a second stage: ``ml_g`` is fitted on
:math:`Y - \\tilde\\theta D`, where :math:`\\tilde\\theta` comes from the first stage's out-of-fold
``ml_l`` and ``ml_m`` (and ``ml_r``) predictions of the same treatment and repetition
(:func:`fanfit.dml.unit_fits.stage_inputs`). A model with a fold procedure (PQ, CVaR, LPQ) has
one unit per fold and stage, which runs the fits nested inside that fold and returns the fold's
predictions and scalars (:func:`fanfit.dml.unit_fits.fit_predict`, :func:`put_predictions`). PQ
and LPQ (a :class:`~fanfit.dml.models.FoldSplit`) have two stages for any ``n_rep > 1`` (one with
``n_rep = 1``, as CVaR): stage 0 runs the start-independent fits of every repetition and fold side
by side and also returns an auxiliary array per unit (the fold's preliminary propensities,
:func:`fanfit.dml.unit_fits.fit_predict_aux`); between the stages
:func:`fanfit.dml.unit_fits.stage_inputs` runs DoubleML's chain of preliminary IPW searches from
those arrays, repetition after repetition; stage 1 runs the fits that need each fold's IPW
quantile, again side by side.

Prediction keys (``FitUnit.learner``) are DoubleML's ``external_predictions`` keys: ``ml_l``,
``ml_m``, ``ml_g``, ``ml_g0``, ``ml_g1`` (IRM: fitted on ``d == 0`` / ``d == 1`` rows; IIVM: on
``z == 0`` / ``z == 1`` rows), ``ml_r``, ``ml_r0``, ``ml_r1`` (IIVM, on ``z == 0`` / ``z == 1`` rows),
and ``ml_m_<z_col>`` for PLIV with several instruments.

Out-of-fold predictions travel as ``preds``: ``dict[prediction key, numpy.ndarray of shape
(n_obs, n_rep, n_treat)]``, DoubleML's ``predictions`` layout.

This module says what the units are (their keys, stages, seeds, training rows) and how their
outputs are packed and gathered; running them is :mod:`fanfit.dml.unit_fits`.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fanfit.dml.data import DMLData
from fanfit.dml.external import every_key_given, external_units
from fanfit.dml.folds import (
    cluster_train_mask,
    draw_cluster_folds,
    draw_folds,
    validate_cluster_folds,
    validate_folds,
)
from fanfit.dml.models import Nuisance, model_def
from fanfit.dml.spec import DMLSpec
from fanfit.errors import InvalidDataError, InvalidJobError

__all__ = [
    "FitUnit",
    "check_preds",
    "draw_spec_folds",
    "fold_layout",
    "fold_means",
    "fold_scalar_keys",
    "fit_units",
    "init_preds",
    "n_stages",
    "nuisance",
    "nuisances",
    "prediction_keys",
    "put_predictions",
    "train_mask",
    "unit_seed",
    "validate_spec_folds",
]

# first word of the SeedSequence spawn key of unit seeds (folds use 0, see folds.draw_folds)
_UNITS_STREAM = 1

_KEY_RE = re.compile(r"^(?:p(\d+)-)?s(\d+)-t(\d+)-r(\d+)-f(\d+)-(ml_\w+)$")


@dataclass(frozen=True)
class FitUnit:
    """One independent nuisance fit.

    Attributes
    ----------
    stage : int
        0, or 1 for ``ml_g`` of the IV-type scores.
    i_treat : int
        Index into ``spec.d_cols``.
    i_rep : int
        Repetition of the sample splitting.
    i_fold : int
        Fold whose test rows are predicted (the learner is fitted on the other folds).
    learner : str
        Prediction key, DoubleML's ``external_predictions`` key (``'ml_l'``, ``'ml_m'``, ``'ml_g'``,
        ``'ml_g0'``, ``'ml_g1'``, ``'ml_r'``, ``'ml_r0'``, ``'ml_r1'``, ``'ml_m_<z_col>'``).
    part : int
        The part of a job of several parts (a QTE's (quantile, treatment level), an APOS's level:
        :class:`fanfit.jobs.documents.estimate.PlanPart`) whose spec the unit fits; 0 in a job of
        one. It does not change the unit's fit (:func:`unit_seed` leaves it out), only its key.
    """

    stage: int
    i_treat: int
    i_rep: int
    i_fold: int
    learner: str
    part: int = 0

    @property
    def key(self) -> str:
        """Unique id, e.g. ``'s0-t0-r1-f3-ml_l'``; ``'p2-s0-t0-r1-f3-ml_l'`` in part 2."""
        key = f"s{self.stage}-t{self.i_treat}-r{self.i_rep}-f{self.i_fold}-{self.learner}"
        return f"p{self.part}-{key}" if self.part else key

    @classmethod
    def from_key(cls, key: str) -> FitUnit:
        """Inverse of :attr:`key`."""
        match = _KEY_RE.match(key)
        if match is None:
            raise InvalidJobError(
                f"Not a fit unit key: {key!r} (expected e.g. 's0-t0-r1-f3-ml_l')."
            )
        p, s, t, r, f, learner = match.groups()
        return cls(int(s), int(t), int(r), int(f), learner, int(p or 0))

    def to_dict(self) -> dict:
        """JSON-safe dict with the five fields (and ``part`` when not 0)."""
        out = asdict(self)
        if not self.part:
            del out["part"]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> FitUnit:
        """Inverse of :meth:`to_dict`."""
        try:
            return cls(
                int(d["stage"]),
                int(d["i_treat"]),
                int(d["i_rep"]),
                int(d["i_fold"]),
                str(d["learner"]),
                int(d.get("part", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidJobError(f"Not a fit unit: {d!r} ({exc}).") from exc


# --------------------------------------------------------------------------- plan
def prediction_keys(spec: DMLSpec, stage: int | None = None) -> tuple[str, ...]:
    """The prediction keys of a spec (DoubleML's ``params_names``), optionally of one stage only.

    Parameters
    ----------
    spec : DMLSpec
    stage : int or None
        0 or 1; None for all stages.

    Returns
    -------
    tuple of str
        E.g. PLR partialling out: ``('ml_l', 'ml_m')``; IRM: ``('ml_g0', 'ml_g1', 'ml_m')``;
        PLIV with instruments ``Z1, Z2``: ``('ml_l', 'ml_r', 'ml_m_Z1', 'ml_m_Z2')``; IIVM:
        ``('ml_g0', 'ml_g1', 'ml_m', 'ml_r0', 'ml_r1')``, without ``ml_r0`` when
        ``subgroups['always_takers']`` is False and without ``ml_r1`` when
        ``subgroups['never_takers']`` is False (DoubleML then sets :math:`\\hat r(0, X) = 0`,
        :math:`\\hat r(1, X) = 1` without fitting; :func:`~fanfit.dml.estimate.score_elements`
        does too).
    """
    fp = model_def(spec.model).fold_procedure_for(spec)
    if fp is not None and not fp.runs_split(spec):  # one stage: each fold unit fits every key
        return tuple(n.key for n in nuisances(spec))
    return tuple(n.key for n in nuisances(spec) if stage is None or n.stage == stage)


def fold_scalar_keys(spec: DMLSpec) -> tuple[str, ...]:
    """The names of the fold scalars a model's fold procedure returns
    (:attr:`fanfit.dml.models.FoldProcedure.scalars`: PQ, CVaR, LPQ ``('theta_ipw',)``), else ``()``.

    They travel with the predictions as arrays of shape (n_obs, n_rep, n_treat) holding each
    fold's value on that fold's test rows (:func:`put_predictions`); the units of the last stage
    return them.
    """
    fp = model_def(spec.model).fold_procedure_for(spec)
    return fp.scalars if fp is not None else ()


def fold_means(
    spec: DMLSpec, folds: np.ndarray, preds: dict[str, np.ndarray], i_rep: int, i_treat: int
) -> dict[str, float]:
    """Each fold scalar's mean over the folds of one repetition and treatment (DoubleML's
    ``np.mean(ipw_vec)``: folds in order, equal weights).

    Parameters
    ----------
    spec : DMLSpec
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        With the arrays of :func:`fold_scalar_keys`.
    i_rep, i_treat : int

    Returns
    -------
    dict of str to float

    Raises
    ------
    InvalidJobError
        A scalar missing or not finite for a fold (its unit did not run).
    """
    col = np.asarray(folds)[:, i_rep]
    out = {}
    for name in fold_scalar_keys(spec):
        if name not in preds:
            raise InvalidJobError(f"The fold scalar {name!r} of model {spec.model!r} is missing.")
        values = np.array(
            [
                preds[name][np.flatnonzero(col == k)[0], i_rep, i_treat]
                for k in range(spec.n_cross_folds)
            ]
        )
        if not np.isfinite(values).all():
            raise InvalidJobError(
                f"The fold scalar {name!r} is not finite in repetition {i_rep}, treatment "
                f"{spec.d_cols[i_treat]!r}; a fold unit did not run."
            )
        out[name] = np.mean(values)  # numpy float64, as DoubleML's np.mean(ipw_vec)
    return out


def nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    """The spec's nuisance fits (:attr:`fanfit.dml.models.ModelDef.nuisances`), in DoubleML's order."""
    return model_def(spec.model).nuisances(spec)


def nuisance(spec: DMLSpec, key: str) -> Nuisance:
    """The nuisance fit behind a prediction key.

    Raises
    ------
    InvalidJobError
        A key the spec's model does not use.
    """
    for n in nuisances(spec):
        if n.key == key:
            return n
    raise InvalidJobError(f"Unknown prediction key {key!r} for model {spec.model!r}.")


def n_stages(spec: DMLSpec) -> int:
    """Number of stages: 2 for the IV-type scores of PLR and PLIV (``ml_g`` after a preliminary
    estimate) and for PQ and LPQ with any ``n_rep > 1`` (a
    :class:`~fanfit.dml.models.FoldSplit`: the fits that need each fold's IPW quantile in stage
    1, after DoubleML's chain of start values), else 1 (PQ and LPQ with ``n_rep = 1``: no chain,
    each fold unit runs the whole fold)."""
    return model_def(spec.model).n_stages(spec)


def fit_units(spec: DMLSpec, stage: int) -> list[FitUnit]:
    """All units of one stage, in a deterministic order (treatment, repetition, learner, fold).

    Parameters
    ----------
    spec : DMLSpec
    stage : int
        ``0 <= stage < n_stages(spec)``.

    Returns
    -------
    list of FitUnit
        A model with a fold procedure (PQ, CVaR, LPQ): one unit per treatment, repetition and
        fold, keyed by the stage's first prediction key, running the fold's nested fits of that
        stage (:func:`fit_predict`; it skips the fits of the keys whose predictions are given),
        none for a treatment whose every key is given
        (:func:`fanfit.dml.external.every_key_given`). Else
        ``n_treat * n_rep * len(prediction_keys(spec, stage)) * n_cross_folds`` units
        (``n_cross_folds = n_folds ** len(cluster_cols)`` with clusters, else ``n_folds``),
        less those of the (key, treatment) pairs whose predictions are given
        (:func:`fanfit.dml.external.external_units`).
    """
    if not 0 <= stage < n_stages(spec):
        raise InvalidJobError(
            f"Stage {stage} does not exist; this estimate has {n_stages(spec)} stage(s)."
        )
    if model_def(spec.model).fold_procedure_for(spec) is not None:
        # one unit per fold runs the fold's nested fits of this stage, every repetition side by
        # side; none for a treatment whose every prediction is given (nothing to fit)
        unit_key = prediction_keys(spec, stage)[0]
        return [
            FitUnit(stage, i_treat, i_rep, i_fold, unit_key)
            for i_treat in range(spec.n_treat)
            if not every_key_given(spec, i_treat)
            for i_rep in range(spec.n_rep)
            for i_fold in range(spec.n_cross_folds)
        ]
    keys = prediction_keys(spec, stage)
    given = set(external_units(spec))  # their predictions are given: no fits
    return [
        FitUnit(stage, i_treat, i_rep, i_fold, key)
        for i_treat in range(spec.n_treat)
        for i_rep in range(spec.n_rep)
        for key in keys
        if (key, i_treat) not in given
        for i_fold in range(spec.n_cross_folds)
    ]


def draw_spec_folds(spec: DMLSpec, data: DMLData) -> np.ndarray:
    """The folds a job draws from its seed: :func:`~fanfit.dml.folds.draw_folds`, or
    :func:`~fanfit.dml.folds.draw_cluster_folds` of ``data.cluster_vars`` with ``cluster_cols``.

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs, n_rep)
    """
    if spec.cluster_cols:
        assert data.cluster_vars is not None
        return draw_cluster_folds(data.cluster_vars, spec.n_folds, spec.n_rep, spec.seed)
    return draw_folds(data.n_obs, spec.n_folds, spec.n_rep, spec.seed)


def validate_spec_folds(spec: DMLSpec, data: DMLData, folds: Any) -> np.ndarray:
    """Check folds against a spec and its data: :func:`~fanfit.dml.folds.validate_folds`, or with
    ``cluster_cols`` :func:`~fanfit.dml.folds.validate_cluster_folds` (``n_folds **
    len(cluster_cols)`` folds, every cluster in one fold of its variable).

    Returns
    -------
    numpy.ndarray of int64, shape (n_obs, n_rep)

    Raises
    ------
    InvalidFoldsError
        Naming the row, fold or cluster that is wrong.
    """
    if spec.cluster_cols:
        if data.cluster_vars is None:
            raise InvalidDataError(
                f"cluster_cols is {list(spec.cluster_cols)}, but the data has no cluster columns."
            )
        return validate_cluster_folds(folds, data.cluster_vars, spec.n_folds, spec.n_rep)
    return validate_folds(folds, data.n_obs, spec.n_folds, spec.n_rep)


def train_mask(spec: DMLSpec, folds: np.ndarray, i_rep: int, i_fold: int) -> np.ndarray:
    """The training rows of fold ``i_fold`` of repetition ``i_rep`` (before any restriction to a
    treatment or instrument level).

    Without clusters all rows outside the fold; with ``cluster_cols`` the rows in none of the
    fold's test clusters (:func:`~fanfit.dml.folds.cluster_train_mask`).

    Returns
    -------
    numpy.ndarray of bool, shape (n_obs,)
    """
    col = np.asarray(folds)[:, i_rep]
    if spec.cluster_cols:
        return cluster_train_mask(col, i_fold, spec.n_folds, len(spec.cluster_cols))
    return col != i_fold


def unit_seed(seed: int, unit: FitUnit) -> int:
    """The ``random_state`` a unit's learner gets when the user set none.

    ``SeedSequence(seed, spawn_key=(1, i_treat, i_rep, i_fold, L)).generate_state(1, uint32)[0]``
    where ``L`` is the prediction key's UTF-8 bytes read as a big-endian integer. It depends on the
    unit's identity only (not on which shard or machine runs it, nor on the stage), and differs
    between units, so no two fits share a random stream.

    Parameters
    ----------
    seed : int
        The job seed (non-negative).
    unit : FitUnit

    Returns
    -------
    int
        In ``[0, 2**32 - 1]``.
    """
    learner_word = int.from_bytes(unit.learner.encode("utf-8"), "big")
    ss = np.random.SeedSequence(
        int(seed), spawn_key=(_UNITS_STREAM, unit.i_treat, unit.i_rep, unit.i_fold, learner_word)
    )
    return int(ss.generate_state(1, dtype=np.uint32)[0])


def learner_name(key: str) -> str:
    """The ``spec.learners`` name behind a prediction key (``ml_g0 -> ml_g``, ``ml_m_Z1 -> ml_m``,
    ``ml_g_d_lvl1 -> ml_g``, ``ml_pi -> ml_pi``): every registry model names its keys
    ``ml_<letters>`` + a suffix that starts with a digit or ``_``."""
    match = _LEARNER_PREFIX.match(key)
    return match.group(0) if match else key[:4]


_LEARNER_PREFIX = re.compile(r"ml_[a-z]+")


def fold_layout(spec: DMLSpec, stage: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What a fold unit of ``stage`` packs (a unit of a model with a fold procedure,
    :func:`fanfit.dml.unit_fits.fit_predict`): its stage's prediction keys, then (last stage
    only) the fold scalars (:func:`fold_scalar_keys`)."""
    last = stage == n_stages(spec) - 1
    return prediction_keys(spec, stage), fold_scalar_keys(spec) if last else ()


# --------------------------------------------------------------------------- predictions
def init_preds(spec: DMLSpec, n_obs: int, stage: int | None = None) -> dict[str, np.ndarray]:
    """Empty (NaN) prediction arrays for the spec's keys.

    Returns
    -------
    dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
    """
    keys = prediction_keys(spec, stage) + fold_scalar_keys(spec)
    return {k: np.full((n_obs, spec.n_rep, spec.n_treat), np.nan) for k in keys}


def put_predictions(
    preds: dict[str, np.ndarray],
    unit: FitUnit,
    folds: np.ndarray,
    values: np.ndarray,
    spec: DMLSpec | None = None,
) -> None:
    """Store a unit's test-row predictions (from :func:`fit_predict`) into ``preds`` in place.

    Parameters
    ----------
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
    unit : FitUnit
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
    values : numpy.ndarray, shape (n_test,)
        In the order of ``np.flatnonzero(folds[:, i_rep] == i_fold)``. A fold unit of a model with
        a fold procedure (``spec`` given) packs its stage's prediction keys' (n_test,)
        predictions, in :func:`prediction_keys` order, then, in the last stage, its fold scalars
        (:func:`fold_scalar_keys`): shape ``(n_keys * n_test + n_scalars,)``; each scalar is
        stored on the fold's test rows.
    spec : DMLSpec, optional
        Needed for a fold procedure's units.
    """
    test = np.flatnonzero(np.asarray(folds)[:, unit.i_rep] == unit.i_fold)
    values = np.asarray(values, dtype=np.float64)
    if spec is not None and model_def(spec.model).fold_procedure_for(spec) is not None:
        keys, scalars = fold_layout(spec, unit.stage)
        if values.shape != (len(keys) * test.size + len(scalars),):
            raise InvalidJobError(
                f"Unit {unit.key}: got {values.size} packed values, expected "
                f"{len(keys)} x {test.size} predictions + {len(scalars)} fold scalar(s)."
            )
        shape = (np.asarray(folds).shape[0], spec.n_rep, spec.n_treat)
        for j, key in enumerate((*keys, *scalars)):
            target = preds.setdefault(key, np.full(shape, np.nan))
            if j < len(keys):
                target[test, unit.i_rep, unit.i_treat] = values[j * test.size : (j + 1) * test.size]
            else:  # the fold's scalar, on its test rows
                target[test, unit.i_rep, unit.i_treat] = values[
                    len(keys) * test.size + j - len(keys)
                ]
        return
    if values.shape != test.shape:
        raise InvalidJobError(
            f"Unit {unit.key}: got {values.shape[0] if values.ndim else 0} predictions for {test.size} test rows."
        )
    preds[unit.learner][test, unit.i_rep, unit.i_treat] = values


def check_preds(
    spec: DMLSpec, n_obs: int, preds: dict[str, Any], stage: int | None = None
) -> dict[str, np.ndarray]:
    """Check that ``preds`` has every key of the spec (of ``stage``, or all) with finite values;
    with ``stage`` None also the fold scalars of a fold procedure (:func:`fold_scalar_keys`).

    Returns
    -------
    dict of str to numpy.ndarray of float64, shape (n_obs, n_rep, n_treat)

    Raises
    ------
    InvalidJobError
        A key missing, a wrong shape, or NaN/inf (named by learner, treatment and repetition).
    """
    out = {}
    shape = (n_obs, spec.n_rep, spec.n_treat)
    keys = prediction_keys(spec, stage) + (fold_scalar_keys(spec) if stage is None else ())
    missing = [k for k in keys if k not in preds]
    if missing:
        raise InvalidJobError(
            f"Predictions for {', '.join(repr(k) for k in missing)} are missing; "
            f"have: {', '.join(sorted(preds)) or 'none'}."
        )
    for key in keys:
        arr = np.asarray(preds[key], dtype=np.float64)
        if arr.shape != shape:
            raise InvalidJobError(
                f"Predictions for {key!r} have shape {arr.shape}, expected {shape}."
            )
        bad = ~np.isfinite(arr)
        if bad.any():
            row, i_rep, i_treat = np.argwhere(bad)[0]
            raise InvalidJobError(
                f"Predictions for {key!r} are not finite ({int(bad.sum())} value(s)), first at row {row}, "
                f"treatment {spec.d_cols[i_treat]!r}, repetition {i_rep}; a unit did not run or its learner failed."
            )
        out[key] = arr
    return out
