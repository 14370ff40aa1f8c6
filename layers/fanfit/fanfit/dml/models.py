r"""The model registry: everything fanfit knows about each DoubleML model, in one place.

Prepare, Schedule, CrossFit, Aggregate and the rest of :mod:`fanfit.dml` look a model up here
(:func:`model_def`) and hold no model-specific branches. A :class:`ModelDef` declares

- its DoubleML class and constructor (positional and keyword learners, model-only options),
- its scores (the first is DoubleML's default) and its nuisance learners: for each learner whether
  it must be a regressor, a classifier or may be either, and what it estimates,
- its nuisance fits (:class:`Nuisance`, per score and options): the prediction key (DoubleML's
  ``external_predictions`` key), the learner, the target, the sample it is fitted on (all rows,
  ``d == 0``/``d == 1``, ``z == 0``/``z == 1``, or the rows at/off a treatment level), the features
  and the stage (``ml_g`` of PLR/PLIV ``'IV-type'`` runs in stage 1 on :math:`Y - \tilde\theta D`,
  :math:`\tilde\theta` from :attr:`ModelDef.theta_initial` of stage 0),
- its score function (``psi_a``, ``psi_b`` of a score linear in :math:`\theta`), the propensity it
  clips to ``[trimming_threshold, 1 - trimming_threshold]`` and its data checks.

Adding a model means one :class:`ModelDef` in :data:`REGISTRY` plus its score function (in
:mod:`fanfit.dml.scores` or a ``scores_*.py`` of its own) and its client class
(:mod:`fanfit.client.doubleml`); see docs/models.md.

Columns and samples are named by short strings resolved by :func:`column`: ``'y'``, ``'d'`` (the
active treatment), ``'z'`` (the first instrument), ``'z:<col>'`` (instrument ``col``), ``'treated'``
(:math:`1\{D = \text{treatment\_level}\}`, APO), ``'s'`` (the selection indicator ``s_col``, SSM)
and, as a target only, :data:`RESIDUAL` (:math:`Y - \tilde\theta D`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fanfit.dml import fold_procedures
from fanfit.dml.model_checks import (
    DMLData,
    DMLSpec,
    _check_apo,
    _check_did,
    _check_didcs,
    _check_iivm,
    _check_irm,
    _check_pliv,
    _check_plr,
    _check_ssm,
    _data_apo,
    _data_didcs,
    _data_iivm,
    _data_plr,
    column,
    column_label,
)
from fanfit.dml.scores import (
    apo_score_elements,
    iivm_score_elements,
    irm_score_elements,
    pliv_score_elements,
    pliv_theta_initial,
    plr_score_elements,
    plr_theta_initial,
)
from fanfit.dml.scores_did import did_cs_score_elements, did_score_elements
from fanfit.dml.scores_ssm import (
    ssm_nonignorable_run,
    ssm_score_elements,
    ssm_solve,
    ssm_start,
    ssm_targets,
)
from fanfit.errors import InvalidJobError

__all__ = [
    "FOLD_TARGET",
    "RESIDUAL",
    "REGISTRY",
    "FoldProcedure",
    "FoldSplit",
    "ModelDef",
    "Nuisance",
    "column",
    "column_label",
    "model_def",
    "row_mask",
]

#: Target of ``ml_g`` under PLR/PLIV ``'IV-type'``: :math:`Y - \tilde\theta D`.
RESIDUAL = "y - theta d"

#: Predictions of one repetition and treatment: prediction key -> array of shape (n_obs,).
Preds = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class Nuisance:
    """One nuisance fit of a model (per treatment, repetition and fold it becomes a fit unit).

    Attributes
    ----------
    key : str
        Prediction key, DoubleML's ``external_predictions`` key (``'ml_g0'``, ``'ml_g_d_lvl1'``...).
    learner : str
        The ``spec.learners`` name it fits (``'ml_g'``).
    target : str
        ``'y'``, ``'d'``, ``'z'``, ``'z:<col>'``, ``'treated'`` or :data:`RESIDUAL`.
    rows : tuple of (str, float) or None
        The training sample: None for all rows, else ``(column, value)``, the rows where that
        column (:func:`column`) equals the value, e.g. ``('d', 0.0)`` for IRM's ``ml_g0``.
        The loss is evaluated on the same rows.
    features : str
        ``'x'`` (covariates plus the other treatments, :meth:`DMLData.xd`), ``'dx'`` (the
        treatment column first, then ``'x'``: APO's ``ml_g_d_lvl0``) or ``'xd'`` (``'x'``, then
        the treatment column: SSM's ``ml_pi`` under missing at random).
    loss_all_rows : bool
        Evaluate the loss (and the nuisance targets) on every row instead of the training rows:
        DoubleML's SSM scores ``ml_g_d0``/``ml_g_d1`` against ``y`` on all rows (its targets are
        ``y`` at every test row, unselected rows included).
    stage : int
        0, or 1 for fits that need :attr:`ModelDef.theta_initial` of stage 0 (or, for a model
        whose :class:`FoldProcedure` runs in two stages, the fits of its split's ``final``; in
        one stage every fold unit fits every key).
    also : tuple of (str, float)
        Further ``(column, value)`` conditions on the training sample, all of which must hold
        with ``rows`` (DIDCS's ``ml_g_d0_t1``: ``rows=('d', 0.0), also=(('t', 1.0),)``; SSM's
        ``ml_g_d1``: ``rows=('d', 1.0), also=(('s', 1.0),)``); :func:`row_mask` combines them.
    """

    key: str
    learner: str
    target: str
    rows: tuple[str, float] | None = None
    features: str = "x"
    loss_all_rows: bool = False
    stage: int = 0
    also: tuple[tuple[str, float], ...] = ()


#: Target of a nuisance whose target depends on its fold's scalars (PQ's ``ml_g``:
#: :math:`1\{Y \le \theta^{(k)}_{\mathrm{ipw}}\}`); :attr:`FoldProcedure.targets` gives it.
FOLD_TARGET = "fold"

#: ``(spec, data, train, test, i_treat, build, start) -> (predictions, scalars)`` (:class:`FoldProcedure`).
FoldRun = Callable[
    [DMLSpec, DMLData, np.ndarray, np.ndarray, int, Callable[[str], Any], float],
    tuple[dict[str, np.ndarray], dict[str, float]],
]


@dataclass(frozen=True)
class FoldSplit:
    """A fold procedure cut where its start value enters: two stages for any ``n_rep > 1``.

    DoubleML's PQ and LPQ start repetition ``r``'s preliminary search from repetition ``r - 1``'s
    results, but only that search (cheap, given the preliminary fits) and the fits after it need
    the start value (:mod:`fanfit.dml.scores_quantile`, "Start values"). So stage 0 runs
    :attr:`prelim` for every (treatment, repetition, fold) side by side; Prepare of stage 1 runs
    :attr:`root` fold after fold and repetition after repetition, each repetition starting from
    the previous one's mean when :attr:`FoldProcedure.chained` (:func:`fanfit.dml.units.
    stage_inputs`); stage 1 runs :attr:`final` for every fold side by side.

    Attributes
    ----------
    prelim : callable
        ``(spec, data, train, test, i_treat, build) -> (preds, aux)``: the start-independent fits;
        ``preds`` maps each stage-0 prediction key to its (n_test,) predictions, ``aux`` is any
        float array the fold's :attr:`root` needs (PQ: the first half's preliminary propensities),
        stored beside the unit's predictions (:func:`fanfit.storage.aux_array_name`).
    root : callable
        ``(spec, data, train, i_treat, aux, start) -> scalars``: the fold's scalars (every name of
        :attr:`FoldProcedure.scalars`) from its ``aux`` and the start value.
    final : callable
        ``(spec, data, train, test, i_treat, build, scalars) -> preds``: the start-dependent fits,
        each stage-1 prediction key's (n_test,) predictions.
    """

    prelim: Callable[
        [DMLSpec, DMLData, np.ndarray, np.ndarray, int, Callable[[str], Any]],
        tuple[dict[str, np.ndarray], np.ndarray],
    ]
    root: Callable[[DMLSpec, DMLData, np.ndarray, int, np.ndarray, float], dict[str, float]]
    final: Callable[
        [DMLSpec, DMLData, np.ndarray, np.ndarray, int, Callable[[str], Any], Mapping[str, float]],
        dict[str, np.ndarray],
    ]


@dataclass(frozen=True)
class FoldProcedure:
    """A model whose fits nest inside each outer fold (PQ, CVaR, LPQ): one fit unit per fold runs them.

    Such a model has one fit unit per (treatment, repetition, fold) and stage (its prediction key
    is the stage's first nuisance key). In one stage (:meth:`runs_split` False) the unit calls
    :attr:`run` with the fold's training and test rows and returns every nuisance's outer-fold
    predictions and the fold's scalars. In two stages (:attr:`split`, when :meth:`runs_split`)
    stage 0's unit returns the stage-0 nuisances' predictions (and an auxiliary array), stage 1's
    unit the stage-1 nuisances' predictions and the fold's scalars (:class:`FoldSplit`); the
    nuisances' :attr:`Nuisance.stage` say which stage fits them. The scalars travel with the predictions to
    Aggregate as arrays of shape (n_obs, n_rep, n_treat) holding each fold's value on its test
    rows (:func:`fanfit.dml.units.put_predictions`). Aggregate solves each repetition with
    :attr:`solve`, given the mean over folds of each scalar.

    Attributes
    ----------
    run : callable
        ``(spec, data, train, test, i_treat, build, start) -> (preds, scalars)``: ``train``/``test``
        row indices (sorted), ``build(learner)`` a new unfitted estimator of ``spec.learners``
        with the unit's ``random_state``, ``start`` the start value; ``preds`` maps every
        prediction key to its (n_test,) predictions, ``scalars`` every name of :attr:`scalars`
        to a float. With :attr:`split`, the same as its three parts composed (not used by the
        pipeline then).
    start : callable
        ``(spec, data, i_treat) -> float``: the start value of repetition 0 (of every repetition
        when not :attr:`chained`).
    scalars : tuple of str
        Names of the fold's scalars (the first is the one :attr:`chained` averages).
    chained : bool
        Repetition ``r`` starts from the mean over folds of repetition ``r - 1``'s first scalar
        (DoubleML's PQ and LPQ); needs :attr:`split`, whose chain Prepare runs between the two
        stages.
    solve : callable
        ``(spec, data, preds, i_treat, means) -> (coef, psi, psi_deriv)`` for one repetition:
        ``preds`` as for :attr:`ModelDef.score_elements`, ``means`` each scalar's mean over folds;
        ``psi``, ``psi_deriv`` of shape (n_obs,).
    targets : callable
        ``(spec, data, preds, i_treat) -> {key: target}`` of the nuisances with target
        :data:`FOLD_TARGET`, from the scalars' arrays in ``preds`` (for the nuisance losses).
    split : FoldSplit or None
        The procedure cut in two stages (PQ, LPQ), used when :meth:`runs_split`; None runs
        :attr:`run` in one stage (CVaR).
    scores : tuple of str
        The scores whose fits nest inside the folds (SSM: ``('nonignorable',)``; its
        ``'missing-at-random'`` cross-fits plainly); empty for every score of the model
        (:meth:`ModelDef.fold_procedure_for`).
    """

    run: FoldRun
    start: Callable[[DMLSpec, DMLData, int], float]
    scalars: tuple[str, ...]
    chained: bool
    solve: Callable[[DMLSpec, DMLData, Preds, int, Mapping[str, float]], tuple[float, Any, Any]]
    targets: Callable[[DMLSpec, DMLData, Preds, int], Mapping[str, np.ndarray]]
    split: FoldSplit | None = None
    scores: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.chained and self.split is None:
            raise ValueError(
                "A chained fold procedure needs split (its chain runs between two stages)."
            )

    def runs_split(self, spec: DMLSpec) -> bool:
        """Whether a spec runs the procedure in two stages (:attr:`split`): only when there is a
        chain to run, :attr:`chained` with ``n_rep > 1``. Otherwise every repetition starts from
        :attr:`start`, so each fold's :attr:`run` does everything in one stage (PQ and LPQ with
        ``n_rep = 1``, CVaR)."""
        return self.split is not None and self.chained and spec.n_rep > 1


@dataclass(frozen=True)
class ModelDef:
    """A model of the registry (see the module docstring).

    Attributes
    ----------
    name : str
        fanfit's name (``spec.model``), e.g. ``'irm'``.
    doubleml_class : str
        DoubleML's class, e.g. ``'DoubleMLIRM'``.
    scores : tuple of str
        Valid scores; the first is DoubleML's default.
    roles : dict of str to str
        ``{learner: 'regressor' | 'classifier' | 'either'}`` (DoubleML's ``_check_learner``);
        'either' means a classifier only for a binary 0/1 target.
    purposes : dict of str to str
        What each learner estimates, for messages (``'P(D=1|X)'``).
    nuisances : callable
        ``(spec) -> tuple of Nuisance`` in DoubleML's ``params_names`` order.
    score_elements : callable
        ``(spec, data, preds, i_treat) -> (psi_a, psi_b)``, arrays of shape (n_obs,); ``preds``
        maps every prediction key to its (n_obs,) predictions of one repetition and treatment,
        the propensity keys :attr:`clipped` already clipped.
    check_spec : callable
        ``(spec) -> None``: the model's column and option rules, raising InvalidJobError.
    binary : tuple of str
        Columns (:func:`column`) that must be binary 0/1 with both values (IRM: ``'d'``).
    check_data : callable or None
        ``(spec, data) -> None``: the model's other data rules, run after the binary columns and
        the classifiers' targets are checked, raising InvalidDataError (or a subclass).
    theta_initial : callable or None
        ``(spec, data, preds, i_treat) -> float``: the preliminary estimate a stage-1 fit with
        target :data:`RESIDUAL` needs, from the stage-0 predictions of that repetition.
    clipped : tuple of str
        Prediction keys of propensities, clipped to ``[t, 1 - t]`` before the score and the loss.
    propensity_group : str or None
        The column (:func:`column`) the propensity ``ml_m`` predicts, for the overlap report.
    doubleml_learners : tuple of str
        The learners DoubleML's constructor takes positionally, in order.
    doubleml_optional : tuple of str
        Learners it takes as keywords (None when the score does not use them).
    options : tuple of str
        Model-only spec options (None elsewhere): ``'subgroups'``, ``'treatment_level'``; passed
        to DoubleML's constructor by name.
    ipw_options : bool
        Whether the model takes ``normalize_ipw`` and ``ps_processor_config``.
    doubleml_data : str
        DoubleML's data class the model takes (``'DoubleMLData'``; DID: ``'DoubleMLDIDData'``).
    data_options : dict of str to str
        Spec options that name a further data column, by the data class's keyword
        (``{'t_col': 't_col'}``: DIDCS's time indicator; ``{'s_col': 's_col'}``: SSM's selection
        indicator, DoubleMLSSMData's ``s_col``); None when unset.
    clipping_keyword : str or None
        The constructor keyword that takes ``spec.trimming_threshold`` when the model clips its
        propensity without ``ps_processor_config`` (DID: ``'clipping_threshold'``).
    doubleml_client_class : str or None
        Set when DoubleML's class takes no external predictions (DoubleMLSSM 0.11.4): the fanfit
        class (:mod:`fanfit.client.doubleml`) that feeds it the job's predictions instead;
        :func:`fanfit.dml.interop.to_doubleml` refuses such a model, naming it.
    weights : bool
        Whether the model takes DoubleML's ``weights`` (APO): the spec's ``weights_col`` and
        ``weights_bar_cols``, read into :attr:`DMLData.weights` and ``weights_bar`` (the score
        sees the repetition's column of ``weights_bar``, :func:`fanfit.dml.score_elements`).
    fold_procedure : FoldProcedure or None
        Set when the model's fits nest inside each outer fold (PQ, CVaR, LPQ; SSM's
        ``'nonignorable'`` score only, :attr:`FoldProcedure.scores`); then, for the scores it
        covers, :attr:`score_elements` is not used. :meth:`fold_procedure_for` gives a spec's.
    """

    name: str
    doubleml_class: str
    scores: tuple[str, ...]
    roles: Mapping[str, str]
    purposes: Mapping[str, str]
    nuisances: Callable[[DMLSpec], tuple[Nuisance, ...]]
    score_elements: Callable[[DMLSpec, DMLData, Preds, int], tuple[np.ndarray, np.ndarray]]
    check_spec: Callable[[DMLSpec], None]
    binary: tuple[str, ...] = ()
    check_data: Callable[[DMLSpec, DMLData], None] | None = None
    theta_initial: Callable[[DMLSpec, DMLData, Preds, int], float] | None = None
    clipped: tuple[str, ...] = ()
    propensity_group: str | None = None
    doubleml_learners: tuple[str, ...] = ()
    doubleml_optional: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    ipw_options: bool = False
    doubleml_data: str = "DoubleMLData"
    data_options: Mapping[str, str] = field(default_factory=dict)
    clipping_keyword: str | None = None
    doubleml_client_class: str | None = None
    weights: bool = False
    fold_procedure: FoldProcedure | None = None

    @property
    def default_score(self) -> str:
        """DoubleML's default score (the first of :attr:`scores`)."""
        return self.scores[0]

    def fold_procedure_for(self, spec: DMLSpec) -> FoldProcedure | None:
        """The spec's fold procedure: :attr:`fold_procedure` when it covers ``spec.score``
        (:attr:`FoldProcedure.scores` empty or holding it), else None."""
        fp = self.fold_procedure
        if fp is None or (fp.scores and spec.score not in fp.scores):
            return None
        return fp

    def n_stages(self, spec: DMLSpec) -> int:
        """1 + the highest stage of the spec's nuisances; a fold procedure: 2 when it
        :meth:`~FoldProcedure.runs_split` (PQ, LPQ with ``n_rep > 1``), else 1."""
        fp = self.fold_procedure_for(spec)
        if fp is not None:
            return 2 if fp.runs_split(spec) else 1
        return 1 + max(n.stage for n in self.nuisances(spec))

    def required_learners(self, spec: DMLSpec) -> tuple[str, ...]:
        """The learners the spec's nuisances fit, in :attr:`roles` order."""
        used = {n.learner for n in self.nuisances(spec)}
        return tuple(name for name in self.roles if name in used)


def row_mask(spec: DMLSpec, data: DMLData, fit: Nuisance, i_treat: int) -> np.ndarray | None:
    """The rows a nuisance is fitted and evaluated on: every condition of ``fit.rows`` and
    ``fit.also`` (:func:`column` equal to the value), or None for all rows.

    Returns
    -------
    numpy.ndarray of bool, shape (n_obs,), or None
    """
    conditions = ((fit.rows,) if fit.rows is not None else ()) + fit.also
    if not conditions:
        return None
    mask = np.ones(data.n_obs, dtype=bool)
    for name, level in conditions:
        mask &= column(spec, data, name, i_treat) == level
    return mask


# --------------------------------------------------------------------------- nuisances
def _plr_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    out = [Nuisance("ml_l", "ml_l", "y"), Nuisance("ml_m", "ml_m", "d")]
    if spec.score == "IV-type":
        out.append(Nuisance("ml_g", "ml_g", RESIDUAL, stage=1))
    return tuple(out)


def _irm_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    return (
        Nuisance("ml_g0", "ml_g", "y", rows=("d", 0.0)),
        Nuisance("ml_g1", "ml_g", "y", rows=("d", 1.0)),
        Nuisance("ml_m", "ml_m", "d"),
    )


def _pliv_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    if len(spec.z_cols) > 1:
        return (
            Nuisance("ml_l", "ml_l", "y"),
            Nuisance("ml_r", "ml_r", "d"),
            *(Nuisance(f"ml_m_{z}", "ml_m", f"z:{z}") for z in spec.z_cols),
        )
    out = [
        Nuisance("ml_l", "ml_l", "y"),
        Nuisance("ml_m", "ml_m", "z"),
        Nuisance("ml_r", "ml_r", "d"),
    ]
    if spec.score == "IV-type":
        out.append(Nuisance("ml_g", "ml_g", RESIDUAL, stage=1))
    return tuple(out)


def _iivm_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    out = [
        Nuisance("ml_g0", "ml_g", "y", rows=("z", 0.0)),
        Nuisance("ml_g1", "ml_g", "y", rows=("z", 1.0)),
        Nuisance("ml_m", "ml_m", "z"),
    ]
    # DoubleML sets r(0, X) = 0 without always takers and r(1, X) = 1 without never takers
    if spec.always_takers:
        out.append(Nuisance("ml_r0", "ml_r", "d", rows=("z", 0.0)))
    if spec.never_takers:
        out.append(Nuisance("ml_r1", "ml_r", "d", rows=("z", 1.0)))
    return tuple(out)


def _apo_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 irm/apo.py _nuisance_est: ml_g_d_lvl0 on (d, x) of the rows off the level
    # (used by its sensitivity analysis only), ml_g_d_lvl1 on x of the rows at the level,
    # ml_m on x of all rows with target 1{d == level}
    return (
        Nuisance("ml_g_d_lvl0", "ml_g", "y", rows=("treated", 0.0), features="dx"),
        Nuisance("ml_g_d_lvl1", "ml_g", "y", rows=("treated", 1.0)),
        Nuisance("ml_m", "ml_m", "treated"),
    )


def _did_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 did/did.py _nuisance_est (fanfit.dml.scores_did.did_learners): ml_g0 and
    # ml_g1 on the rows with d == 0 / d == 1 for both scores, ml_m on all rows (observational)
    out = [
        Nuisance("ml_g0", "ml_g", "y", rows=("d", 0.0)),
        Nuisance("ml_g1", "ml_g", "y", rows=("d", 1.0)),
    ]
    if spec.score == "observational":
        out.append(Nuisance("ml_m", "ml_m", "d"))
    return tuple(out)


def _didcs_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 did/did_cs.py _nuisance_est (fanfit.dml.scores_did.did_cs_learners):
    # ml_g_d{a}_t{b} on the rows with d == a and t == b, ml_m on all rows (observational)
    out = [
        Nuisance(f"ml_g_d{a}_t{b}", "ml_g", "y", rows=("d", float(a)), also=(("t", float(b)),))
        for a, b in ((0, 0), (0, 1), (1, 0), (1, 1))
    ]
    if spec.score == "observational":
        out.append(Nuisance("ml_m", "ml_m", "d"))
    return tuple(out)


def _ssm_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 irm/ssm.py _nuisance_est, missing at random: ml_pi on (x, d) of all rows
    # with target s, ml_m on x with target d, ml_g_d0/ml_g_d1 on x of the rows with d == 0/1 and
    # s == 1 (_get_cond_smpls_2d); params_names order ml_g_d0, ml_g_d1, ml_pi, ml_m.
    # 'nonignorable': the same keys, targets and loss rows (DoubleML records the same targets);
    # the fold procedure (_SSM_NONIGNORABLE) fits them on the halves of each fold's training rows
    # with (x, d, z) for ml_pi and (x, ml_pi's predictions) for the others
    return (
        Nuisance("ml_g_d0", "ml_g", "y", rows=("d", 0.0), also=(("s", 1.0),), loss_all_rows=True),
        Nuisance("ml_g_d1", "ml_g", "y", rows=("d", 1.0), also=(("s", 1.0),), loss_all_rows=True),
        Nuisance("ml_pi", "ml_pi", "s", features="xd"),
        Nuisance("ml_m", "ml_m", "d"),
    )


# --------------------------------------------------------------------------- scores
def _plr_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    g_hat = p["ml_g"] if spec.score == "IV-type" else None
    return plr_score_elements(data.y, data.d[:, i_treat], p["ml_l"], p["ml_m"], g_hat, spec.score)


def _irm_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    d = data.d[:, i_treat]
    return irm_score_elements(
        data.y, d, p["ml_g0"], p["ml_g1"], p["ml_m"], spec.score, spec.normalize_ipw
    )


def _pliv_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    column(spec, data, "z", i_treat)  # names the missing instrument data
    assert data.z is not None
    if len(spec.z_cols) > 1:
        z = np.asfortranarray(data.z)  # DoubleML's z is a DataFrame's .values
        m_hat = np.full((data.n_obs, len(spec.z_cols)), np.nan)
        for j, col in enumerate(spec.z_cols):
            m_hat[:, j] = p[f"ml_m_{col}"]
    else:
        z = data.z[:, 0]
        m_hat = p["ml_m"]
    g_hat = p["ml_g"] if spec.score == "IV-type" else None
    d = data.d[:, i_treat]
    return pliv_score_elements(data.y, z, d, p["ml_l"], m_hat, p["ml_r"], g_hat, spec.score)


def _iivm_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    z = column(spec, data, "z", i_treat)
    d = data.d[:, i_treat]
    r_hat0 = p["ml_r0"] if spec.always_takers else np.zeros_like(d)
    r_hat1 = p["ml_r1"] if spec.never_takers else np.ones_like(d)
    return iivm_score_elements(
        data.y, z, d, p["ml_g0"], p["ml_g1"], p["ml_m"], r_hat0, r_hat1, spec.normalize_ipw
    )


def _apo_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    treated = column(spec, data, "treated", i_treat)
    return apo_score_elements(
        data.y, treated, p["ml_g_d_lvl1"], p["ml_m"], spec.normalize_ipw, data.weights,
        data.weights_bar,
    )  # fmt: skip


def _in_sample_normalization(spec: DMLSpec) -> bool:
    return spec.in_sample_normalization is not False  # DoubleML's default True


def _did_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    return did_score_elements(
        data.y, data.d[:, i_treat], p["ml_g0"], p["ml_g1"], p.get("ml_m"), spec.score,
        _in_sample_normalization(spec), spec.trimming_threshold,
    )  # fmt: skip


def _didcs_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    t = column(spec, data, "t", i_treat)
    return did_cs_score_elements(
        data.y, data.d[:, i_treat], t, p["ml_g_d0_t0"], p["ml_g_d0_t1"], p["ml_g_d1_t0"],
        p["ml_g_d1_t1"], p.get("ml_m"), spec.score,
        _in_sample_normalization(spec), spec.trimming_threshold,
    )  # fmt: skip


def _ssm_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    s = column(spec, data, "s", i_treat)
    return ssm_score_elements(
        data.y, data.d[:, i_treat], s, p["ml_g_d0"], p["ml_g_d1"], p["ml_pi"], p["ml_m"],
        spec.normalize_ipw, spec.trimming_threshold,
    )  # fmt: skip


def _plr_theta(spec: DMLSpec, data: DMLData, p: Preds, i_treat: int) -> float:
    return plr_theta_initial(data.y, data.d[:, i_treat], p["ml_l"], p["ml_m"])


def _pliv_theta(spec: DMLSpec, data: DMLData, p: Preds, i_treat: int) -> float:
    z = column(spec, data, "z", i_treat)
    return pliv_theta_initial(data.y, z, data.d[:, i_treat], p["ml_l"], p["ml_m"], p["ml_r"])


# --------------------------------------------------------------------------- PQ, CVaR, LPQ
# (fold procedures, fanfit.dml.fold_procedures: the nested fits of scores_quantile's module
# docstring, one unit per fold)
def _quantile_nuisances(g_stage: int) -> Callable[[DMLSpec], tuple[Nuisance, ...]]:
    # DoubleML 0.11.4 irm/pq.py and irm/cvar.py: ml_g fitted on the second half's rows with
    # d == treatment (target FOLD_TARGET: it depends on the fold's IPW quantile), ml_m on all rows;
    # PQ fits ml_g in stage 1 (its FoldSplit's final), CVaR everything in stage 0
    def nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
        level = float(spec.treatment if spec.treatment is not None else 1)
        return (
            Nuisance("ml_g", "ml_g", FOLD_TARGET, rows=("d", level), stage=g_stage),
            Nuisance("ml_m", "ml_m", "d"),
        )

    return nuisances


def _lpq_nuisances(spec: DMLSpec) -> tuple[Nuisance, ...]:
    # DoubleML 0.11.4 irm/lpq.py, params_names order: ml_m_z on all rows, ml_m_d_z0/z1 and
    # ml_g_du_z0/z1 on the rows with z == 0 / z == 1 (ml_g_du_*: 1{d == treatment} 1{y <= q_k},
    # stage 1: its FoldSplit's final)
    return (
        Nuisance("ml_m_z", "ml_m", "z"),
        Nuisance("ml_m_d_z0", "ml_m", "d", rows=("z", 0.0)),
        Nuisance("ml_m_d_z1", "ml_m", "d", rows=("z", 1.0)),
        Nuisance("ml_g_du_z0", "ml_g", FOLD_TARGET, rows=("z", 0.0), stage=1),
        Nuisance("ml_g_du_z1", "ml_g", FOLD_TARGET, rows=("z", 1.0), stage=1),
    )


def _nonlinear_score(
    spec: DMLSpec, data: DMLData, p: Preds, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    raise InvalidJobError(
        f"Model {spec.model!r} has no (psi_a, psi_b) score elements of fixed predictions: "
        "its fold procedure's solve gives coef, psi and psi_deriv (fanfit.dml.aggregate)."
    )


def _quantile_model(name: str, doubleml_class: str, score: str, **declared: Any) -> ModelDef:
    return ModelDef(
        name=name,
        doubleml_class=doubleml_class,
        scores=(score,),
        score_elements=_nonlinear_score,
        check_spec=fold_procedures.check_quantile_spec,
        doubleml_learners=("ml_g", "ml_m"),
        options=("treatment", "quantile"),
        ipw_options=True,
        doubleml_client_class=doubleml_class,
        fold_procedure=FoldProcedure(
            run=fold_procedures.fold_run(name),
            start=fold_procedures.fold_start(name),
            scalars=(fold_procedures.THETA_IPW,),
            chained=name != "cvar",  # DoubleML's CVaR restarts every repetition from its start
            solve=fold_procedures.fold_solve(name),
            targets=fold_procedures.fold_targets(name),
            # PQ and LPQ: two stages, the chain of IPW searches in between; CVaR never chains
            # and runs its whole fold in one unit, one stage
            split=None
            if name == "cvar"
            else FoldSplit(
                prelim=fold_procedures.fold_prelim(name),
                root=fold_procedures.fold_root(name),
                final=fold_procedures.fold_final(name),
            ),
        ),
        **declared,
    )


#: What PQ and CVaR declare alike besides their learners' roles and purposes.
_PQ_COMMON: dict[str, Any] = {
    "binary": ("d",),
    "clipped": ("ml_m",),
    "propensity_group": "d",
}


#: SSM's ``'nonignorable'`` score: one unit per fold runs ml_pi on one half of the fold's
#: training rows, then ml_m and ml_g_d0/ml_g_d1 on the other (fanfit.dml.scores_ssm).
_SSM_NONIGNORABLE = FoldProcedure(
    run=ssm_nonignorable_run,
    start=ssm_start,
    scalars=(),
    chained=False,
    solve=ssm_solve,
    targets=ssm_targets,
    scores=("nonignorable",),
)


# --------------------------------------------------------------------------- the registry
_IV_TYPE_G = "E[Y - D theta|X] (IV-type score)"

#: What DoubleMLDID and DoubleMLDIDCS declare alike: scores, learners, the clipped propensity
#: (DoubleML's ``clipping_threshold``), ``in_sample_normalization`` and DoubleMLDIDData.
_DID_COMMON: dict[str, Any] = {
    "scores": ("observational", "experimental"),
    "roles": {"ml_g": "either", "ml_m": "classifier"},
    "clipped": ("ml_m",),
    "propensity_group": "d",
    "doubleml_learners": ("ml_g",),
    "doubleml_optional": ("ml_m",),
    "options": ("in_sample_normalization",),
    "doubleml_data": "DoubleMLDIDData",
    "clipping_keyword": "clipping_threshold",
}

#: Every model fanfit runs, by ``spec.model``.
REGISTRY: dict[str, ModelDef] = {
    m.name: m
    for m in (
        ModelDef(
            name="plr",
            doubleml_class="DoubleMLPLR",
            scores=("partialling out", "IV-type"),
            roles={"ml_l": "either", "ml_m": "either", "ml_g": "regressor"},
            purposes={"ml_l": "E[Y|X]", "ml_m": "E[D|X]", "ml_g": _IV_TYPE_G},
            nuisances=_plr_nuisances,
            score_elements=_plr_score,
            check_spec=_check_plr,
            check_data=_data_plr,
            theta_initial=_plr_theta,
            doubleml_learners=("ml_l", "ml_m"),
            doubleml_optional=("ml_g",),
        ),
        ModelDef(
            name="irm",
            doubleml_class="DoubleMLIRM",
            scores=("ATE", "ATTE"),
            roles={"ml_g": "either", "ml_m": "classifier"},
            purposes={"ml_g": "E[Y|D,X]", "ml_m": "P(D=1|X)"},
            nuisances=_irm_nuisances,
            score_elements=_irm_score,
            check_spec=_check_irm,
            binary=("d",),
            clipped=("ml_m",),
            propensity_group="d",
            doubleml_learners=("ml_g", "ml_m"),
            ipw_options=True,
        ),
        ModelDef(
            name="pliv",
            doubleml_class="DoubleMLPLIV",
            scores=("partialling out", "IV-type"),
            roles={
                "ml_l": "regressor",
                "ml_m": "regressor",
                "ml_r": "regressor",
                "ml_g": "regressor",
            },
            purposes={"ml_l": "E[Y|X]", "ml_m": "E[Z|X]", "ml_r": "E[D|X]", "ml_g": _IV_TYPE_G},
            nuisances=_pliv_nuisances,
            score_elements=_pliv_score,
            check_spec=_check_pliv,
            theta_initial=_pliv_theta,
            doubleml_learners=("ml_l", "ml_m", "ml_r"),
            doubleml_optional=("ml_g",),
        ),
        ModelDef(
            name="iivm",
            doubleml_class="DoubleMLIIVM",
            scores=("LATE",),
            roles={"ml_g": "either", "ml_m": "classifier", "ml_r": "classifier"},
            purposes={"ml_g": "E[Y|Z,X]", "ml_m": "P(Z=1|X)", "ml_r": "P(D=1|Z,X)"},
            nuisances=_iivm_nuisances,
            score_elements=_iivm_score,
            check_spec=_check_iivm,
            binary=("d", "z"),
            check_data=_data_iivm,
            clipped=("ml_m",),
            propensity_group="z",
            doubleml_learners=("ml_g", "ml_m", "ml_r"),
            options=("subgroups",),
            ipw_options=True,
        ),
        ModelDef(
            name="apo",
            doubleml_class="DoubleMLAPO",
            scores=("APO",),
            roles={"ml_g": "either", "ml_m": "classifier"},
            purposes={"ml_g": "E[Y|D,X]", "ml_m": "P(D=treatment_level|X)"},
            nuisances=_apo_nuisances,
            score_elements=_apo_score,
            check_spec=_check_apo,
            check_data=_data_apo,
            clipped=("ml_m",),
            propensity_group="treated",
            doubleml_learners=("ml_g", "ml_m"),
            options=("treatment_level",),
            weights=True,
            ipw_options=True,
        ),
        ModelDef(
            name="did",
            doubleml_class="DoubleMLDID",
            purposes={"ml_g": "E[Y1 - Y0|D,X]", "ml_m": "P(D=1|X)"},
            nuisances=_did_nuisances,
            score_elements=_did_score,
            check_spec=_check_did,
            binary=("d",),
            **_DID_COMMON,
        ),
        ModelDef(
            name="didcs",
            doubleml_class="DoubleMLDIDCS",
            purposes={"ml_g": "E[Y|D,T,X]", "ml_m": "P(D=1|X)"},
            nuisances=_didcs_nuisances,
            score_elements=_didcs_score,
            check_spec=_check_didcs,
            binary=("d", "t"),
            check_data=_data_didcs,
            data_options={"t_col": "t_col"},
            **_DID_COMMON,
        ),
        ModelDef(
            name="ssm",
            doubleml_class="DoubleMLSSM",
            scores=("missing-at-random", "nonignorable"),
            roles={"ml_g": "either", "ml_pi": "classifier", "ml_m": "classifier"},
            purposes={
                "ml_g": "E[Y|D,S=1,X] (nonignorable: E[Y|D,S=1,X,pi])",
                "ml_pi": "P(S=1|D,X) (nonignorable: P(S=1|D,X,Z))",
                "ml_m": "P(D=1|X) (nonignorable: P(D=1|X,pi))",
            },
            nuisances=_ssm_nuisances,
            score_elements=_ssm_score,
            check_spec=_check_ssm,
            binary=("d", "s"),
            clipped=("ml_m",),
            propensity_group="d",
            doubleml_learners=("ml_g", "ml_pi", "ml_m"),
            ipw_options=True,
            data_options={"s_col": "s_col"},
            doubleml_client_class="DoubleMLSSM",
            fold_procedure=_SSM_NONIGNORABLE,
        ),
        _quantile_model(
            "pq",
            "DoubleMLPQ",
            "PQ",
            roles={"ml_g": "classifier", "ml_m": "classifier"},
            purposes={"ml_g": "P(Y <= q_ipw|D=d,X)", "ml_m": "P(D=1|X)"},
            nuisances=_quantile_nuisances(g_stage=1),
            **_PQ_COMMON,
        ),
        _quantile_model(
            "cvar",
            "DoubleMLCVAR",
            "CVaR",
            roles={"ml_g": "regressor", "ml_m": "classifier"},
            purposes={"ml_g": "E[max(q, (Y - tau q)/(1 - tau))|D=d,X]", "ml_m": "P(D=1|X)"},
            nuisances=_quantile_nuisances(g_stage=0),
            **_PQ_COMMON,
        ),
        _quantile_model(
            "lpq",
            "DoubleMLLPQ",
            "LPQ",
            roles={"ml_g": "classifier", "ml_m": "classifier"},
            purposes={"ml_g": "P(D=d, Y <= q_ipw|Z=z,X)", "ml_m": "P(Z=1|X), P(D=1|Z=z,X)"},
            nuisances=_lpq_nuisances,
            binary=("d", "z"),
            clipped=("ml_m_z",),
            propensity_group="z",
        ),
    )
}


def model_def(model: str) -> ModelDef:
    """The registry entry of ``model``.

    Raises
    ------
    InvalidJobError
        An unknown model, naming the known ones.
    """
    try:
        return REGISTRY[model]
    except (KeyError, TypeError):
        raise InvalidJobError(
            f"Unknown model {model!r}; choose one of {', '.join(REGISTRY)}."
        ) from None
