"""Running fit units: what a shard computes for each of its units, and what a later stage needs.

:func:`fit_predict` fits one unit's nuisance learner on the unit's training rows and predicts its
fold's test rows, as DoubleML's cross-fitting does for that fold. A unit of a model with a fold
procedure (:class:`~fanfit.dml.models.FoldProcedure`: PQ, CVaR, LPQ) runs that procedure's steps
for its fold instead: the whole fold (``run``), or for a :class:`~fanfit.dml.models.FoldSplit` the
start-independent fits in stage 0 (``prelim``, whose auxiliary array :func:`fit_predict_aux`
keeps) and the fits that need the fold's scalars in stage 1 (``final``); between the stages
:func:`stage_inputs` runs the chain of ``root`` searches (and, for the IV-type scores, the
preliminary estimate :math:`\\tilde\\theta`). :func:`fit_predict_units` runs a shard's units,
those of a TorchMLP learner trained together as one batched model (the GPU worker's path). What
the units are, their keys and seeds, and how their outputs are packed and gathered are in
:mod:`fanfit.dml.units`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fanfit.dml.data import DMLData
from fanfit.dml.external import every_key_given
from fanfit.dml.folds import DEFAULT_N_FOLDS_INNER, draw_inner_smpls, inner_smpls_to_ids
from fanfit.dml.models import RESIDUAL, column, model_def, row_mask
from fanfit.dml.nuisance_params import unit_learner
from fanfit.dml.scores.rdd import rd_fit_predict
from fanfit.dml.spec import DMLSpec
from fanfit.dml.units import (
    FitUnit,
    check_preds,
    fold_layout,
    learner_name,
    n_stages,
    nuisance,
    prediction_keys,
    train_mask,
    unit_seed,
    validate_spec_folds,
)
from fanfit.errors import InvalidFoldsError, InvalidJobError
from fanfit.learners.allowlist import BATCHED_LEARNERS

__all__ = [
    "UnitResult",
    "features",
    "fit_predict",
    "fit_predict_aux",
    "fit_predict_units",
    "stage_inputs",
]


def _target_and_rows(
    spec: DMLSpec, unit: FitUnit, data: DMLData, inputs: dict | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Target of the unit's learner and the restriction of its training rows (or None)."""
    fit = nuisance(spec, unit.learner)
    if fit.target == RESIDUAL:
        # numpy float64 as DoubleML's theta_initial: with a float32 outcome the target is float64
        theta = np.float64(_theta_initial(inputs, unit, spec))
        target = data.y - theta * data.d[:, unit.i_treat]
    else:
        target = column(spec, data, fit.target, unit.i_treat)
    return target, row_mask(spec, data, fit, unit.i_treat)


def features(spec: DMLSpec, data: DMLData, key: str, i_treat: int) -> np.ndarray:
    """The features a prediction key's learner sees: :meth:`~fanfit.dml.data.DMLData.xd`, or with
    ``features='dx'`` (:class:`~fanfit.dml.models.Nuisance`) the treatment column before it, with
    ``features='xd'`` after it, with ``features='xm'`` the treatment's unit mean after it.

    Returns
    -------
    numpy.ndarray, shape (n_obs, n_features)
    """
    x = data.xd(i_treat)
    kind = nuisance(spec, key).features
    if kind == "dx":
        return np.column_stack((data.d[:, i_treat], x))
    if kind == "xd":
        return np.column_stack((x, data.d[:, i_treat]))
    if kind == "zx":
        if data.z is None:
            raise InvalidJobError(f"Nuisance {key} needs the first stage's design (z_cols).")
        return np.column_stack((data.z, x))
    if kind == "xm":
        if data.d_mean is None:
            raise InvalidJobError(f"Nuisance {key} needs the treatments' unit means (d_mean_cols).")
        return np.column_stack((x, data.d_mean[:, i_treat]))
    return x


def _theta_initial(inputs: dict | None, unit: FitUnit, spec: DMLSpec) -> float:
    try:
        return float(inputs["theta_initial"][unit.i_treat][unit.i_rep])  # type: ignore[index]
    except (TypeError, KeyError, IndexError) as exc:
        raise InvalidJobError(
            f"Unit {unit.key} (ml_g of score {spec.score!r}) needs stage_inputs with "
            "'theta_initial' from stage 0; compute them with stage_inputs(spec, 1, ...)."
        ) from exc


def fit_predict(
    spec: DMLSpec,
    unit: FitUnit,
    data: DMLData,
    folds: np.ndarray,
    stage_inputs: dict | None = None,
) -> np.ndarray:
    """Fit a unit's learner on its training rows and predict its fold's test rows.

    What DoubleML's ``_dml_cv_predict`` (through scikit-learn's ``cross_val_predict``) computes for
    that fold, bit for bit: the learner ``spec.learners[...].build(random_state=unit_seed(...))``,
    with the nuisance parameters DoubleML sets for that (nuisance, treatment, repetition, fold)
    (:func:`fanfit.dml.nuisance_params.unit_learner`), is fitted on ``X[train]`` where ``train`` are the sorted rows outside fold ``i_fold`` of
    repetition ``i_rep`` (for ``ml_g0``/``ml_g1``/``ml_r0``/``ml_r1`` only those with ``d`` (IRM) or
    ``z`` (IIVM) equal to 0 / 1; with ``cluster_cols`` only the rows in none of the fold's test
    clusters, :func:`~fanfit.dml.units.train_mask`), ``X`` being the covariates plus the other
    treatments (:meth:`~fanfit.dml.data.DMLData.xd`). Regressors predict with ``predict``;
    classifiers are fitted on the label-encoded target and give ``predict_proba[:, 1]`` (0 where
    the training rows lack class 1, as ``cross_val_predict`` fills it).

    A unit of a model with a fold procedure (:attr:`fanfit.dml.models.ModelDef.fold_procedure`,
    PQ, CVaR, LPQ) runs the fold's nested fits of its stage instead, each learner built with the
    ``random_state`` of its own key (``unit_seed`` of the unit with that learner), and returns its
    outputs packed as :func:`~fanfit.dml.units.put_predictions` unpacks them; the auxiliary array
    a split procedure's stage-0 unit also returns is dropped here (:func:`fit_predict_aux` keeps
    it). The procedure sees ``data.external`` of the unit's repetition only, shape
    (n_obs, 1, n_treat) (PQ's given predictions: :mod:`fanfit.dml.fold_procedures`).

    Parameters
    ----------
    spec : DMLSpec
    unit : FitUnit
    data : DMLData
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
    stage_inputs : dict or None
        For stage 1: what :func:`stage_inputs` returned (PQ's and LPQ's: ``fold_scalars``).

    Returns
    -------
    numpy.ndarray of float64, shape (n_test,)
        Predictions for the rows ``np.flatnonzero(folds[:, i_rep] == i_fold)``, in that order
        (a fold procedure's unit: shape ``(n_keys * n_test + n_scalars,)``).

    Raises
    ------
    InvalidFoldsError
        The fold has no test rows, or no training rows are left (e.g. no untreated rows outside
        the fold for ``ml_g0``).
    InvalidJobError
        Missing stage inputs for stage 1, or a prediction key the model does not use.
    """
    return fit_predict_aux(spec, unit, data, folds, stage_inputs)[0]


def fit_predict_aux(
    spec: DMLSpec,
    unit: FitUnit,
    data: DMLData,
    folds: np.ndarray,
    stage_inputs: dict | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`fit_predict`, and the unit's auxiliary array when it has one.

    Only a stage-0 unit of a model whose fold procedure runs in two stages (a
    :class:`~fanfit.dml.models.FoldSplit`: PQ and LPQ with ``n_rep > 1``) has one: the ``aux``
    of its ``prelim`` (the fold's preliminary propensities on the first half, shape
    (1, n_train_1) for PQ, (3, n_train_1) for LPQ), which :func:`stage_inputs` of stage 1 needs. The pipeline stores it beside the unit's predictions, in the same shard
    object, under :func:`fanfit.storage.aux_array_name` of the unit's key.

    Returns
    -------
    values : numpy.ndarray of float64
        As :func:`fit_predict`.
    aux : numpy.ndarray of float64 or None

    Raises
    ------
    As :func:`fit_predict`.
    """
    if model_def(spec.model).fold_procedure_for(spec) is not None:
        return _run_fold_procedure(spec, unit, data, folds, stage_inputs)
    return _fit_predict_one(spec, unit, data, folds, stage_inputs), None


def _unit_rows(
    spec: DMLSpec, unit: FitUnit, data: DMLData, folds: np.ndarray, stage_inputs: dict | None
) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A unit's learner spec, features, target, training and test rows (:func:`fit_predict`)."""
    name = learner_name(unit.learner)
    if name not in spec.learners:
        raise InvalidJobError(
            f"Unit {unit.key} needs learner {name!r}, which the spec does not define."
        )
    lspec = unit_learner(spec, unit.learner, unit.i_treat, unit.i_rep, unit.i_fold, name)
    x = features(spec, data, unit.learner, unit.i_treat)
    target, cond = _target_and_rows(spec, unit, data, stage_inputs)
    col = np.asarray(folds)[:, unit.i_rep]
    test = np.flatnonzero(col == unit.i_fold)
    if test.size == 0:
        raise InvalidFoldsError(f"Fold {unit.i_fold} has no rows in repetition {unit.i_rep}.")
    rows = train_mask(spec, folds, unit.i_rep, unit.i_fold)
    if cond is not None:
        rows &= cond
    train = np.flatnonzero(rows)
    if train.size == 0:
        raise InvalidFoldsError(
            f"Unit {unit.key}: no training rows outside fold {unit.i_fold} of repetition {unit.i_rep}"
            + (" with the required treatment/instrument value" if cond is not None else "")
            + "; use fewer folds or check the data."
        )
    return lspec, x, target, train, test


def _positive_proba(proba: np.ndarray, classes: Any, n_test: int) -> np.ndarray:
    """``predict_proba``'s column of class 1 (0 where the training rows lack it, as
    ``cross_val_predict`` fills it)."""
    positive = np.flatnonzero(np.asarray(classes) == 1)
    if positive.size == 0:
        return np.zeros(n_test, dtype=np.float64)
    return np.asarray(proba[:, positive[0]], dtype=np.float64)


def _fit_predict_one(
    spec: DMLSpec, unit: FitUnit, data: DMLData, folds: np.ndarray, stage_inputs: dict | None
) -> np.ndarray:
    """One nuisance fit of a model without a fold procedure (:func:`fit_predict`)."""
    return _fit_one(spec, unit, data, folds, stage_inputs)[0]


def _fit_one(
    spec: DMLSpec, unit: FitUnit, data: DMLData, folds: np.ndarray, stage_inputs: dict | None
) -> tuple[np.ndarray, Any]:
    """:func:`_fit_predict_one`'s predictions and the fitted estimator (DoubleML's model of the
    fold: ``store_models``)."""
    lspec, x, target, train, test = _unit_rows(spec, unit, data, folds, stage_inputs)
    estimator = lspec.build(random_state=unit_seed(spec.seed, unit))
    if nuisance(spec, unit.learner).features == "zx":  # RDFlex: weighted, both sides' mean
        assert data.z is not None
        weights = _stage_weights(stage_inputs, unit, data)
        values = rd_fit_predict(estimator, x, target, train, test, weights, data.z.shape[1],
                                lspec.is_classifier)  # fmt: skip
        return values, estimator
    if lspec.is_classifier:
        # cross_val_predict label-encodes the whole target column before splitting
        _, encoded = np.unique(target, return_inverse=True)
        estimator.fit(x[train], encoded[train])
        proba = estimator.predict_proba(x[test])
        return _positive_proba(proba, estimator.classes_, test.size), estimator
    estimator.fit(x[train], target[train])
    # float64 (a learner fitted on float32 covariates may predict in float32; exact in float64)
    return np.asarray(estimator.predict(x[test]), dtype=np.float64).reshape(test.size), estimator


@dataclass(frozen=True)
class UnitResult:
    """One unit's outputs from :func:`fit_predict_units`.

    Attributes
    ----------
    values, aux : numpy.ndarray or None
        As :func:`fit_predict_aux` returns them.
    fit_s : float
        Seconds of its fit; for a unit fitted in a batch, the batch's seconds over its fits.
    batch : int
        Fits trained together with it (1: on its own).
    model : bytes or None
        With ``spec.store_models``, the fitted estimator (:func:`fanfit.learners.persist.dumps`).
    """

    values: np.ndarray
    aux: np.ndarray | None
    fit_s: float
    batch: int = 1
    model: bytes | None = None


def _batchable(spec: DMLSpec, unit: FitUnit) -> bool:
    """Whether a unit's fit can join a batch: a TorchMLP learner of a model without a fold
    procedure (:mod:`fanfit.learners.torch_batched`)."""
    if model_def(spec.model).fold_procedure_for(spec) is not None:
        return False
    if nuisance(spec, unit.learner).features == "zx":  # weighted, predicted twice
        return False
    lspec = spec.learners.get(learner_name(unit.learner))
    return lspec is not None and lspec.name in BATCHED_LEARNERS


def fit_predict_units(
    spec: DMLSpec,
    units: Sequence[FitUnit],
    data: DMLData,
    folds: np.ndarray,
    stage_inputs: dict | None = None,
    *,
    batch_torch: bool = True,
    memory_budget_mb: float | None = None,
    before_unit: Callable[[int], None] | None = None,
) -> list[UnitResult]:
    """:func:`fit_predict_aux` of every unit of a shard, the TorchMLP fits of one learner together.

    With ``batch_torch``, the units whose learner is a TorchMLP (:data:`BATCHED_LEARNERS`, a model
    without a fold procedure) are grouped by learner and trained as one batched model per group
    (:func:`fanfit.learners.torch_batched.fit_predict_batched`), each with its own training rows,
    target, seed (``unit_seed``) and shuffling, so its predictions are its solo fit's (equal in
    float64; as good in float32); the group is cut into batches the device's memory holds. Every
    other unit is fitted on its own, in order.

    Parameters
    ----------
    spec, data, folds, stage_inputs
        As :func:`fit_predict`.
    units : sequence of FitUnit
    batch_torch : bool, default True
        False: every unit on its own (:func:`fit_predict_aux`).
    memory_budget_mb : float, optional
        Memory one batch may use, MB (default: the device's, :func:`fanfit.learners.
        torch_batched.fit_predict_batched`).
    before_unit : callable, optional
        Called with the count of units fitted so far before each unit fitted on its own and
        before each batched group (CrossFit reads its job's stop marker there and may raise).

    Returns
    -------
    list of UnitResult
        In the order of ``units``.

    Raises
    ------
    As :func:`fit_predict`.
    """
    out: dict[int, UnitResult] = {}
    # one group per learner and its nuisance parameters (DMLSpec.learner_params): a batch
    # trains one configuration
    groups: dict[tuple[str, str], list[int]] = {}
    for i, unit in enumerate(units):
        if batch_torch and _batchable(spec, unit):
            own = unit_learner(spec, unit.learner, unit.i_treat, unit.i_rep, unit.i_fold)
            groups.setdefault((learner_name(unit.learner), str(own)), []).append(i)
            continue
        if before_unit is not None:
            before_unit(len(out))
        t0 = time.perf_counter()
        if spec.store_models:  # a plain fit (DMLSpec.validate): keep its estimator
            from fanfit.learners.persist import dumps

            values, estimator = _fit_one(spec, unit, data, folds, stage_inputs)
            fit_s = time.perf_counter() - t0
            out[i] = UnitResult(values, None, fit_s, model=dumps(estimator))
            continue
        values, aux = fit_predict_aux(spec, unit, data, folds, stage_inputs)
        out[i] = UnitResult(values, aux, time.perf_counter() - t0)
    for members in groups.values():
        from fanfit.learners.torch_batched import BatchedFit, fit_predict_batched

        if before_unit is not None:
            before_unit(len(out))

        fits, tests = [], []
        for i in members:
            unit = units[i]
            lspec, x, target, train, test = _unit_rows(spec, unit, data, folds, stage_inputs)
            if lspec.is_classifier:
                _, target = np.unique(target, return_inverse=True)
            # the solo fit's seed (a random_state the user gave stays as it is)
            seed = lspec.build(random_state=unit_seed(spec.seed, unit)).random_state
            fits.append(BatchedFit(x[train], target[train], x[test], seed))
            tests.append(test.size)
        run = fit_predict_batched(lspec.build(), fits, memory_budget_mb=memory_budget_mb)
        # each unit's share of its batch's seconds
        shares = [
            (seconds / size, size)
            for size, seconds in zip(run.batches, run.batch_seconds)
            for _ in range(size)
        ]
        order = _batch_order(members, [f.y_train for f in fits], lspec.is_classifier)
        for pos, j in enumerate(order):
            i = members[j]
            pred, classes = run.predictions[j], run.classes[j]
            if lspec.is_classifier:
                values = _positive_proba(pred, classes, tests[j])
            else:
                values = np.asarray(pred, dtype=np.float64).reshape(tests[j])
            out[i] = UnitResult(values, None, shares[pos][0], shares[pos][1])
    return [out[i] for i in range(len(units))]


def _batch_order(members: list[int], targets: list[np.ndarray], classify: bool) -> list[int]:
    """The positions of a group's fits in the order :func:`~fanfit.learners.torch_batched.
    fit_predict_batched` batches them: by output width (the classifier's classes), then given."""
    if not classify:
        return list(range(len(members)))
    width = [len(np.unique(t)) for t in targets]
    return sorted(range(len(members)), key=lambda j: (width[j], j))


def _run_fold_procedure(
    spec: DMLSpec, unit: FitUnit, data: DMLData, folds: np.ndarray, inputs: dict | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """A fold unit of a model with a fold procedure: its packed outputs (:func:`~fanfit.dml.units.put_predictions`)
    and, for stage 0 of a split procedure, its auxiliary array."""
    fp = model_def(spec.model).fold_procedure_for(spec)
    assert fp is not None
    test, train = _fold_rows(spec, folds, unit.i_rep, unit.i_fold)
    if test.size == 0 or train.size == 0:
        raise InvalidFoldsError(
            f"Unit {unit.key}: fold {unit.i_fold} of repetition {unit.i_rep} has no test or no "
            "training rows."
        )

    def build(key: str, params_fold: int | None = None) -> Any:
        # key: the nuisance (DoubleML's params name, ml_m_d_z0) whose parameters of fold
        # params_fold (default the unit's) are set; the seed is its learner's, as before them
        name = learner_name(key)
        if name not in spec.learners:
            raise InvalidJobError(
                f"Unit {unit.key} needs learner {name!r}, which the spec does not define."
            )
        fold = unit.i_fold if params_fold is None else params_fold
        lspec = unit_learner(spec, key, unit.i_treat, unit.i_rep, fold, name)
        own = FitUnit(unit.stage, unit.i_treat, unit.i_rep, unit.i_fold, name)
        return lspec.build(random_state=unit_seed(spec.seed, own))

    if fp.inner_folds:  # the fold's own inner folds, as one column (FoldProcedure.inner_folds)
        data = dataclasses.replace(data, inner_folds=_inner_folds(spec, data, unit, train)[:, None])
    if data.external:  # the given predictions of the unit's repetition, shape (n_obs, 1, n_treat)
        data = dataclasses.replace(data, external=_unit_external(data.external, unit))
    aux: np.ndarray | None = None
    if not fp.runs_split(spec):  # one stage: the whole fold from the first start value
        start = fp.start(spec, data, unit.i_treat)
        preds, scalars = fp.run(spec, data, train, test, unit.i_treat, build, start)
    elif unit.stage == 0:  # the start-independent fits; the chain needs their aux
        assert fp.split is not None
        preds, raw = fp.split.prelim(spec, data, train, test, unit.i_treat, build)
        aux, scalars = np.asarray(raw, dtype=np.float64), {}
    else:  # the fits that need the fold's scalars, which Prepare computed between the stages
        assert fp.split is not None
        scalars = _fold_scalars(fp.scalars, inputs, unit)
        if fp.split.sample_weights is not None:  # and its repetition's sample weights
            data = dataclasses.replace(data, stage_weights=_stage_weights(inputs, unit, data))
        preds = fp.split.final(spec, data, train, test, unit.i_treat, build, scalars)
    keys, names = fold_layout(spec, unit.stage)
    values = np.concatenate(
        [np.asarray(preds[k], dtype=np.float64).reshape(test.size) for k in keys]
        + [np.array([scalars[name] for name in names], dtype=np.float64)]
    )
    return values, aux


def _unit_external(external: dict[str, np.ndarray], unit: FitUnit) -> dict[str, np.ndarray]:
    """A fold unit's given predictions: its repetition's, shape (n_obs, 1, n_treat); a key's
    inner predictions (DoubleML's ``<key>_inner_<k>``, those of outer fold ``k``: DoubleMLLPLR)
    only of the unit's fold, as ``<key>_inner``."""
    rep = slice(unit.i_rep, unit.i_rep + 1)
    own = f"_inner_{unit.i_fold}"
    out: dict[str, np.ndarray] = {}
    for key, values in external.items():
        if "_inner_" not in key:
            out[key] = values[:, rep]
        elif key.endswith(own):
            out[key[: -len(own)] + "_inner"] = values[:, rep]
    return out


def _inner_folds(spec: DMLSpec, data: DMLData, unit: FitUnit, train: np.ndarray) -> np.ndarray:
    """A fold unit's inner folds as fold ids, shape (n_obs,): the given column of
    ``data.inner_folds`` (``i_rep * n_folds + i_fold``), else drawn as DoubleML draws them
    (:func:`~fanfit.dml.folds.draw_inner_smpls`) from the ``random_state`` of the unit's
    repetition and fold (:func:`~fanfit.dml.units.unit_seed` of learner ``'inner_folds'``)."""
    if data.inner_folds is not None:
        return data.inner_folds[:, unit.i_rep * spec.n_cross_folds + unit.i_fold]
    own = FitUnit(0, 0, unit.i_rep, unit.i_fold, "inner_folds")
    n_inner = spec.n_folds_inner or DEFAULT_N_FOLDS_INNER
    inner = draw_inner_smpls(train, n_inner, unit_seed(spec.seed, own))
    return inner_smpls_to_ids(inner, data.n_obs).astype(np.float64)


def _fold_rows(
    spec: DMLSpec, folds: np.ndarray, i_rep: int, i_fold: int
) -> tuple[np.ndarray, np.ndarray]:
    """The (sorted) test and training rows of one outer fold."""
    test = np.flatnonzero(np.asarray(folds)[:, i_rep] == i_fold)
    return test, np.flatnonzero(train_mask(spec, folds, i_rep, i_fold))


def _fold_scalars(names: tuple[str, ...], inputs: dict | None, unit: FitUnit) -> dict[str, float]:
    """The fold's scalars from stage 1's inputs (``fold_scalars[name][i_treat][i_rep][i_fold]``)."""
    try:
        table = inputs["fold_scalars"]  # type: ignore[index]
        # numpy float64, as DoubleML holds them (a Python float is rounded to a float32 outcome's
        # dtype when compared with it: NumPy's NEP 50)
        return {n: np.float64(table[n][unit.i_treat][unit.i_rep][unit.i_fold]) for n in names}
    except (TypeError, KeyError, IndexError) as exc:
        raise InvalidJobError(
            f"Unit {unit.key} needs stage_inputs with 'fold_scalars' ({', '.join(names)}) from "
            f"stage 0; compute them with stage_inputs(spec, {unit.stage}, ...)."
        ) from exc


def _stage_weights(inputs: dict | None, unit: FitUnit, data: DMLData) -> np.ndarray:
    """The unit's repetition's sample weights from its stage's inputs
    (``sample_weights[i_treat][i_rep]``, one per row: LPLR's ``'instrument'`` stage 1, every
    stage of RDFlex, whose inputs the client sends)."""
    try:
        weights = np.asarray(
            inputs["sample_weights"][unit.i_treat][unit.i_rep],  # type: ignore[index]
            dtype=np.float64,
        )
    except (TypeError, KeyError, IndexError) as exc:
        raise InvalidJobError(
            f"Unit {unit.key} needs stage_inputs with 'sample_weights' (LPLR's 'instrument': "
            f"stage_inputs(spec, {unit.stage}, ...) from stage 0; RDFlex: the client's)."
        ) from exc
    if weights.shape != (data.n_obs,):
        raise InvalidJobError(
            f"Unit {unit.key}: stage_inputs' sample_weights hold {weights.size} values for "
            f"{data.n_obs} rows."
        )
    return weights


def stage_inputs(
    spec: DMLSpec,
    stage: int,
    data: DMLData,
    folds: np.ndarray,
    preds: dict,
    aux: dict[str, np.ndarray] | None = None,
) -> dict:
    """JSON-safe inputs of a stage, computed from the outputs of the earlier stages.

    Stage 0 needs nothing (``{}``). Stage 1 of the IV-type scores needs the preliminary estimate
    :math:`\\tilde\\theta` of every treatment and repetition
    (:func:`~fanfit.dml.scores.plm_irm.plr_theta_initial`, :func:`~fanfit.dml.scores.plm_irm.pliv_theta_initial`).
    Stage 1 of a model whose fold procedure runs in two stages (a
    :class:`~fanfit.dml.models.FoldSplit`: PQ and LPQ with ``n_rep > 1``) needs every fold's scalars: for each treatment, repetition after repetition, each fold's
    ``root`` from its stage-0 ``aux`` and the start value :math:`s_r`, with :math:`s_0` the
    procedure's ``start`` and, when it is ``chained``, :math:`s_{r+1}` the mean over folds of
    repetition :math:`r`'s first scalar (DoubleML 0.11.4's ``_coef_start_val`` after each
    repetition, ``np.mean(ipw_vec)``: folds in order, equal weights); else every :math:`s_r = s_0`.
    A split whose final fits are weighted (:attr:`~fanfit.dml.models.FoldSplit.sample_weights`:
    DoubleMLLPLR's ``'instrument'`` score) also needs each repetition's weights, from every
    fold's stage-0 predictions.

    Parameters
    ----------
    spec : DMLSpec
    stage : int
    data : DMLData
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        At least the stage-0 predictions.
    aux : dict of str to numpy.ndarray, optional
        The stage-0 units' auxiliary arrays by unit key (:func:`fit_predict_aux`); needed for a
        split fold procedure.

    Returns
    -------
    dict
        ``{}``, ``{"theta_initial": [[float per repetition] per treatment]}`` or
        ``{"fold_scalars": {name: [[[float per fold] per repetition] per treatment]}}``, with
        weighted final fits also ``"sample_weights": [[[float per row] per repetition] per
        treatment]``.

    Raises
    ------
    InvalidJobError
        A stage that does not exist, or a stage-0 unit's auxiliary array missing.
    """
    if not 0 <= stage < n_stages(spec):
        raise InvalidJobError(
            f"Stage {stage} does not exist; this estimate has {n_stages(spec)} stage(s)."
        )
    if stage == 0:
        return {}
    validate_spec_folds(spec, data, folds)
    fp = model_def(spec.model).fold_procedure_for(spec)
    if fp is not None and fp.runs_split(spec):
        assert fp.split is not None
        out: dict[str, Any] = {"fold_scalars": _fold_chain(spec, data, folds, aux or {})}
        weigh = fp.split.sample_weights
        if weigh is not None:
            p0 = check_preds(spec, data.n_obs, preds, stage=0)
            out["sample_weights"] = [
                [
                    np.asarray(
                        weigh(
                            spec, data, {k: v[:, i_rep, i_treat] for k, v in p0.items()}, i_treat
                        ),
                        dtype=np.float64,
                    ).tolist()
                    for i_rep in range(spec.n_rep)
                ]
                for i_treat in range(spec.n_treat)
            ]
        return out
    p = check_preds(spec, data.n_obs, preds, stage=0)
    theta_initial = model_def(spec.model).theta_initial
    if theta_initial is None:
        raise InvalidJobError(f"Model {spec.model!r} has no stage {stage}.")
    theta = [
        [
            theta_initial(spec, data, {k: v[:, i_rep, i_treat] for k, v in p.items()}, i_treat)
            for i_rep in range(spec.n_rep)
        ]
        for i_treat in range(spec.n_treat)
    ]
    return {"theta_initial": theta}


def _fold_chain(
    spec: DMLSpec, data: DMLData, folds: np.ndarray, aux: dict[str, np.ndarray]
) -> dict[str, list[list[list[float]]]]:
    """Every fold's scalars of a split fold procedure, by the chain of :func:`stage_inputs`."""
    fp = model_def(spec.model).fold_procedure_for(spec)
    assert fp is not None and fp.split is not None
    key = prediction_keys(spec, 0)[0]
    table: dict[str, list[list[list[float]]]] = {n: [] for n in fp.scalars}
    for i_treat in range(spec.n_treat):
        start: Any = fp.start(spec, data, i_treat)  # y's dtype (rep 0), then float64
        for name in fp.scalars:
            table[name].append([])
        if every_key_given(spec, i_treat):  # no unit ran (fanfit.dml.external): the start value
            for name in fp.scalars:
                table[name][i_treat] = [[float(start)] * spec.n_cross_folds] * spec.n_rep
            continue
        for i_rep in range(spec.n_rep):
            per_fold = []
            for i_fold in range(spec.n_cross_folds):
                unit = FitUnit(0, i_treat, i_rep, i_fold, key)
                if unit.key not in aux:
                    raise InvalidJobError(
                        f"The auxiliary array of unit {unit.key} (its fold's preliminary fits) is "
                        "missing; its stage-0 shard did not store it."
                    )
                _, train = _fold_rows(spec, folds, i_rep, i_fold)
                per_fold.append(fp.split.root(spec, data, train, i_treat, aux[unit.key], start))
            for name in fp.scalars:
                table[name][i_treat].append([float(v[name]) for v in per_fold])
            if fp.chained:
                # numpy float64 as DoubleML's np.mean(ipw_vec): against a float32 outcome's
                # bounds the next searches' brackets are then computed in float64, as there
                start = np.mean([v[fp.scalars[0]] for v in per_fold])
    return table
