r"""What a model of the registry declares: its definition, nuisance fits and fold procedure.

A :class:`ModelDef` (an entry of :data:`fanfit.dml.models.REGISTRY`) names its DoubleML class,
scores, learners and checks; each of its nuisance fits is a :class:`Nuisance`; a model whose fits
nest inside each outer fold (PQ, CVaR, LPQ; SSM's ``'nonignorable'`` score) has a
:class:`FoldProcedure`, cut in two stages by a :class:`FoldSplit` where its start value enters.
:func:`row_mask` gives the rows a nuisance is fitted on. The entries themselves are in
:mod:`fanfit.dml.registry`.

Columns and samples are named by short strings resolved by :func:`column`: ``'y'``, ``'d'`` (the
active treatment), ``'z'`` (the first instrument), ``'z:<col>'`` (instrument ``col``), ``'treated'``
(:math:`1\{D = \text{treatment\_level}\}`, APO), ``'s'`` (the selection indicator ``s_col``, SSM)
and, as a target only, :data:`RESIDUAL` (:math:`Y - \tilde\theta D`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fanfit.dml.model_checks import DMLData, DMLSpec, column

__all__ = [
    "FOLD_TARGET",
    "RESIDUAL",
    "Build",
    "FoldProcedure",
    "FoldRun",
    "FoldSplit",
    "ModelDef",
    "Nuisance",
    "Preds",
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
        treatment column first, then ``'x'``: APO's ``ml_g_d_lvl0``), ``'xd'`` (``'x'``, then
        the treatment column: SSM's ``ml_pi`` under missing at random), ``'xm'`` (``'x'``, then
        the treatment's unit mean, :attr:`DMLData.d_mean`: PLR's ``ml_m`` with ``d_mean_cols``)
        or ``'zx'`` (the instruments, then ``'x'``: RDFlex's first-stage design :math:`(Z, X)`,
        fitted with the stage's sample weights and predicted at both sides of the cutoff,
        :func:`fanfit.dml.scores.rdd.rd_fit_predict`).
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


class Build(Protocol):
    """A fold procedure's builder: ``build(key)`` is a new unfitted estimator of nuisance ``key``
    (``ml_m``, ``ml_m_d_z0``) with its learner's seed and the unit's fold's nuisance parameters
    (:mod:`fanfit.dml.nuisance_params`); ``build(key, k)`` takes fold ``k``'s parameters instead
    (DoubleMLLPLR's inner fits)."""

    def __call__(self, key: str, params_fold: int | None = None, /) -> Any: ...


#: ``(spec, data, train, test, i_treat, build, start) -> (predictions, scalars)`` (:class:`FoldProcedure`).
FoldRun = Callable[
    [DMLSpec, DMLData, np.ndarray, np.ndarray, int, Build, float],
    tuple[dict[str, np.ndarray], dict[str, float]],
]


@dataclass(frozen=True)
class FoldSplit:
    r"""A fold procedure cut where its start value enters: two stages for any ``n_rep > 1``.

    DoubleML's PQ and LPQ start repetition ``r``'s preliminary search from repetition ``r - 1``'s
    results, but only that search (cheap, given the preliminary fits) and the fits after it need
    the start value (:mod:`fanfit.dml.scores.quantile`, "Start values"). So stage 0 runs
    :attr:`prelim` for every (treatment, repetition, fold) side by side; Prepare of stage 1 runs
    :attr:`root` fold after fold and repetition after repetition, each repetition starting from
    the previous one's mean when :attr:`FoldProcedure.chained` (:func:`fanfit.dml.unit_fits.
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
        each stage-1 prediction key's (n_test,) predictions; with :attr:`sample_weights`, the
        unit's ``data.stage_weights`` holds its repetition's weights.
    sample_weights : callable or None
        ``(spec, data, preds, i_treat) -> weights``: the per-observation sample weights of
        :attr:`final`'s fits, shape (n_obs,), from one repetition's stage-0 predictions of every
        fold (``preds`` as for :attr:`ModelDef.score_elements`); DoubleMLLPLR's ``'instrument'``
        score weights ``ml_m`` by :math:`\hat M (1 - \hat M)`. Prepare of stage 1 computes them
        (:func:`fanfit.dml.unit_fits.stage_inputs`); None: no weights.
    """

    prelim: Callable[
        [DMLSpec, DMLData, np.ndarray, np.ndarray, int, Build],
        tuple[dict[str, np.ndarray], np.ndarray],
    ]
    root: Callable[[DMLSpec, DMLData, np.ndarray, int, np.ndarray, float], dict[str, float]]
    final: Callable[
        [DMLSpec, DMLData, np.ndarray, np.ndarray, int, Build, Mapping[str, float]],
        dict[str, np.ndarray],
    ]
    sample_weights: Callable[[DMLSpec, DMLData, Preds, int], np.ndarray] | None = None


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
    split_scores : tuple of str
        The scores that run :attr:`split` whatever the chain (DoubleMLLPLR's ``'instrument'``:
        its ``ml_m`` needs every fold's ``ml_M``, :attr:`FoldSplit.sample_weights`).
    inner_folds : bool
        The procedure splits the fold's training rows again (LPLR, DoubleML's double sample
        splitting, ``spec.n_folds_inner`` inner folds): the unit hands :attr:`run` its inner
        folds as ``data.inner_folds`` of shape (n_obs, 1), each training row's inner fold and -1
        elsewhere, the given ones (``spec.inner_folds_cols``) or drawn from the unit's seed
        (:func:`fanfit.dml.unit_fits.fit_predict`).
    external : str
        Which of its keys it takes as DoubleML's external predictions (:mod:`fanfit.dml.
        external`), as DoubleML 0.11.4's class does: ``'some'`` any of them (DoubleMLPQ,
        DoubleMLLPLR), ``'all'`` every key or none (DoubleMLLPQ, which ignores a subset), ``''``
        none (DoubleMLCVAR; SSM's nonignorable score, DoubleMLSSM takes none). A fold unit reads
        the given predictions of its repetition from ``data.external``.
    external_keys : callable or None
        ``(spec) -> keys``: the further given predictions a given key needs and no unit
        predicts (DoubleMLLPLR's inner predictions ``ml_M_inner_<k>``, ``ml_a_inner_<k>``).
    given_skips_units : bool
        With every key of a treatment given, no fold unit runs for it (PQ, LPQ: nothing is left
        to compute; the root search starts from :attr:`start`); False: the units run and fit
        nothing (LPLR: each fold's ``beta`` comes from the given inner predictions).
    """

    run: FoldRun
    start: Callable[[DMLSpec, DMLData, int], float]
    scalars: tuple[str, ...]
    chained: bool
    solve: Callable[[DMLSpec, DMLData, Preds, int, Mapping[str, float]], tuple[float, Any, Any]]
    targets: Callable[[DMLSpec, DMLData, Preds, int], Mapping[str, np.ndarray]]
    split: FoldSplit | None = None
    scores: tuple[str, ...] = ()
    split_scores: tuple[str, ...] = ()
    inner_folds: bool = False
    external: str = ""
    external_keys: Callable[[DMLSpec], tuple[str, ...]] | None = None
    given_skips_units: bool = True

    def __post_init__(self) -> None:
        if self.chained and self.split is None:
            raise ValueError(
                "A chained fold procedure needs split (its chain runs between two stages)."
            )

    def runs_split(self, spec: DMLSpec) -> bool:
        """Whether a spec runs the procedure in two stages (:attr:`split`): when there is a
        chain to run, :attr:`chained` with ``n_rep > 1``, or for a score of :attr:`split_scores`.
        Otherwise every repetition starts from :attr:`start`, so each fold's :attr:`run` does
        everything in one stage (PQ and LPQ with ``n_rep = 1``, CVaR, LPLR's
        ``'nuisance_space'``)."""
        if self.split is None:
            return False
        return spec.score in self.split_scores or (self.chained and spec.n_rep > 1)


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
    transform_options : tuple of str
        Model-only spec options DoubleML's class of the model does not take: they come from
        another DoubleML class whose transformed data the job runs (PLR's ``d_mean_cols`` and
        ``approach``: DoubleMLPLPR's correlated random effects). Validated as :attr:`options`,
        never passed to the constructor.
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
        Set when DoubleML's class takes no external predictions (DoubleMLSSM 0.11.4; DoubleMLLPLR
        only with every inner prediction, which a job does not return): the fanfit
        class (:mod:`fanfit.client.doubleml`) that feeds it the job's predictions instead;
        :func:`fanfit.dml.interop.to_doubleml` refuses such a model, naming it.
    weights : bool
        Whether the model takes DoubleML's ``weights`` (APO): the spec's ``weights_col`` and
        ``weights_bar_cols``, read into :attr:`DMLData.weights` and ``weights_bar`` (the score
        sees the repetition's column of ``weights_bar``, :func:`fanfit.dml.score_elements`).
    fold_procedure : FoldProcedure or None
        Set when the model's fits nest inside each outer fold (PQ, CVaR, LPQ, LPLR; SSM's
        ``'nonignorable'`` score only, :attr:`FoldProcedure.scores`); then, for the scores it
        covers, :attr:`score_elements` is not used. :meth:`fold_procedure_for` gives a spec's.
    learner_copies : dict of str to str
        Optional learners that default to a copy of another (``{'ml_a': 'ml_m'}``: DoubleMLLPLR
        uses ``clone(ml_m)`` when ``ml_a`` is None); :class:`fanfit.dml.DMLSpec` fills them in.
    adjusted_preds : callable or None
        ``(spec, data, preds, i_treat) -> preds``: the predictions of one repetition and
        treatment as DoubleML keeps them, when it changes the fitted ones (DoubleMLPLPR's
        ``'cre_general'`` adjusts ``ml_m`` by unit); :attr:`score_elements` and
        :attr:`theta_initial` apply it themselves, the nuisance losses see it too.
    client_inputs : bool
        The model's stage inputs and its estimate come from the client (RDFlex: each stage's
        kernel weights and the final estimate from ``rdrobust``, which runs on the client): the
        execution waits for the client's inputs before each stage's first wave and for its
        estimate before Aggregate (Step Functions' callback pattern, ``orchestrator/
        estimate.asl.json``); Prepare computes no stage inputs for it.
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
    transform_options: tuple[str, ...] = ()
    ipw_options: bool = False
    doubleml_data: str = "DoubleMLData"
    data_options: Mapping[str, str] = field(default_factory=dict)
    clipping_keyword: str | None = None
    doubleml_client_class: str | None = None
    weights: bool = False
    fold_procedure: FoldProcedure | None = None
    learner_copies: Mapping[str, str] = field(default_factory=dict)
    adjusted_preds: Callable[[DMLSpec, DMLData, Preds, int], Preds] | None = None
    client_inputs: bool = False

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
