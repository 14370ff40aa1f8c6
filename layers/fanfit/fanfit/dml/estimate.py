"""Aggregation of out-of-fold predictions into an estimate, and the in-process reference run."""

from __future__ import annotations

import dataclasses

import numpy as np

from fanfit.dml.data import DMLData
from fanfit.dml.external import put_external_predictions
from fanfit.dml.folds import cluster_folds_to_smpls
from fanfit.dml.losses import loss_metrics, nuisance_loss
from fanfit.dml.models import model_def
from fanfit.dml.result import DMLResult
from fanfit.dml.scores.plm_irm import (
    clip_propensity,
    cluster_est_coef,
    cluster_var_est,
    est_coef,
    var_est,
)
from fanfit.dml.spec import DMLSpec
from fanfit.dml.unit_fits import fit_predict_aux, stage_inputs
from fanfit.dml.units import (
    check_preds,
    draw_spec_folds,
    fit_units,
    fold_means,
    fold_scalar_keys,
    init_preds,
    n_stages,
    prediction_keys,
    put_predictions,
    validate_spec_folds,
)
from fanfit.errors import InvalidJobError

__all__ = ["aggregate", "estimate_in_process", "score_elements"]


def score_elements(
    spec: DMLSpec, data: DMLData, preds: dict[str, np.ndarray], i_rep: int, i_treat: int
) -> tuple[np.ndarray, np.ndarray]:
    """Score elements ``psi_a``, ``psi_b`` of one repetition and treatment.

    Calls the model's :attr:`~fanfit.dml.models.ModelDef.score_elements` (formulas in
    :mod:`fanfit.dml.scores.plm_irm`); the propensities it lists in
    :attr:`~fanfit.dml.models.ModelDef.clipped` (IRM, IIVM, APO: ``ml_m``) are clipped to
    ``[trimming_threshold, 1 - trimming_threshold]`` first, as DoubleML does. IIVM
    without always takers (``subgroups['always_takers']`` False) takes :math:`\\hat r(0, X) = 0`,
    without never takers :math:`\\hat r(1, X) = 1` (DoubleML ``DoubleMLIIVM._nuisance_est``).
    Data with DoubleML's ``weights_bar`` (APO) gives the score repetition ``i_rep``'s column.

    Parameters
    ----------
    spec : DMLSpec
    data : DMLData
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        Checked predictions (:func:`fanfit.dml.units.check_preds`).
    i_rep, i_treat : int

    Returns
    -------
    psi_a, psi_b : numpy.ndarray, shape (n_obs,)
    """
    if data.weights_bar is not None and data.weights_bar.ndim == 2:
        # DoubleML's weights_bar has one column per repetition (DoubleMLAPO._get_weights)
        data = dataclasses.replace(data, weights_bar=data.weights_bar[:, i_rep])
    return model_def(spec.model).score_elements(
        spec, data, _clipped(spec, preds, i_rep, i_treat), i_treat
    )


def _clipped(
    spec: DMLSpec, preds: dict[str, np.ndarray], i_rep: int, i_treat: int
) -> dict[str, np.ndarray]:
    """One repetition's and treatment's predictions (and fold scalars), the model's :attr:`clipped`
    keys clipped."""
    mdef = model_def(spec.model)
    keys = (*prediction_keys(spec), *fold_scalar_keys(spec))  # a solve may need the scalars' rows
    p = {k: preds[k][:, i_rep, i_treat] for k in keys if k in preds}
    for key in mdef.clipped:
        if key in p:  # a score without the propensity (DID 'experimental') has no such key
            p[key] = clip_propensity(p[key], spec.trimming_threshold)
    return p


def aggregate(
    spec: DMLSpec, data: DMLData, folds: np.ndarray, preds: dict[str, np.ndarray]
) -> DMLResult:
    r"""Turn out-of-fold predictions into the estimate (DML2 with repeated cross-fitting).

    For every repetition :math:`r` and treatment :math:`j`: the score elements
    :math:`\psi_a, \psi_b` (:func:`score_elements`), :math:`\hat\theta_{j,r} = -\bar\psi_b/\bar\psi_a`,
    :math:`\psi = \psi_a \hat\theta_{j,r} + \psi_b`, and :math:`\hat\sigma_{j,r}` from
    :func:`~fanfit.dml.scores.plm_irm.var_est`; with ``spec.cluster_cols`` the cluster-robust
    :func:`~fanfit.dml.scores.plm_irm.cluster_est_coef` and :func:`~fanfit.dml.scores.plm_irm.cluster_var_est`
    (one- and two-way, DoubleML's ``_est_causal_pars`` and ``_var_est``) instead; then the
    median aggregation over repetitions
    (:func:`~fanfit.dml.scores.plm_irm.aggregate_coefs_and_ses`). Equals DoubleML's ``fit(external_predictions=preds)``.
    A model with a fold procedure (PQ, CVaR: :attr:`~fanfit.dml.models.ModelDef.fold_procedure`)
    solves each repetition with its own :attr:`~fanfit.dml.models.FoldProcedure.solve` (PQ's root
    search and kernel-density derivative) given the means over folds of its fold scalars
    (:func:`~fanfit.dml.units.fold_means`), with the same standard error.
    If ``spec.boot_method`` is set, the result is bootstrapped with ``spec.n_rep_boot`` draws from
    ``numpy.random.RandomState(spec.seed)``.

    Parameters
    ----------
    spec : DMLSpec
    data : DMLData
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        Every prediction key of the spec (:func:`~fanfit.dml.units.prediction_keys`).

    Returns
    -------
    DMLResult
        With ``predictions``, ``nuisance_loss`` and ``nuisance_metric``
        (:func:`fanfit.dml.losses.nuisance_loss`) and, when ``spec.boot_method`` is set, the bootstrap.

    Raises
    ------
    InvalidJobError
        Missing, misshapen or non-finite predictions.
    InvalidFoldsError
        Folds that do not fit the data or the spec.
    """
    n_obs = data.n_obs
    folds = validate_spec_folds(spec, data, folds)
    checked = check_preds(spec, n_obs, preds)
    clusters = None
    if spec.cluster_cols:
        assert data.cluster_vars is not None
        clusters = cluster_folds_to_smpls(folds, data.cluster_vars, spec.n_folds)
    score_dim = (n_obs, spec.n_rep, spec.n_treat)
    psi_a_all = np.full(score_dim, np.nan)
    psi_b_all = np.full(score_dim, np.nan)
    psi = np.full(score_dim, np.nan)
    psi_deriv = np.full(score_dim, np.nan)
    all_coef = np.full((spec.n_treat, spec.n_rep), np.nan)
    all_se = np.full((spec.n_treat, spec.n_rep), np.nan)
    fp = model_def(spec.model).fold_procedure_for(spec)
    # same loop, storage and slicing as DoubleML.fit, so the floating point results agree
    for i_rep in range(spec.n_rep):
        for i_treat in range(spec.n_treat):
            if fp is not None:
                # a fold procedure's model (PQ, CVaR) solves its own score, given the means of
                # the fold scalars (DoubleML's NonLinearScoreMixin / CVaR's linear score)
                p = _clipped(spec, checked, i_rep, i_treat)
                means = fold_means(spec, folds, checked, i_rep, i_treat)
                coef, psi[:, i_rep, i_treat], psi_deriv[:, i_rep, i_treat] = fp.solve(
                    spec, data, p, i_treat, means
                )
                all_coef[i_treat, i_rep] = coef
                sigma2 = var_est(psi[:, i_rep, i_treat], psi_deriv[:, i_rep, i_treat])
                all_se[i_treat, i_rep] = np.sqrt(sigma2)
                continue
            psi_a_all[:, i_rep, i_treat], psi_b_all[:, i_rep, i_treat] = score_elements(
                spec, data, checked, i_rep, i_treat
            )
            psi_a = psi_a_all[:, i_rep, i_treat]
            psi_b = psi_b_all[:, i_rep, i_treat]
            if clusters is None:
                coef = est_coef(psi_a, psi_b)
            else:
                test_sets = [test for _, test in clusters[0][i_rep]]
                test_clusters = [test for _, test in clusters[1][i_rep]]
                coef = cluster_est_coef(psi_a, psi_b, test_sets, test_clusters)
            all_coef[i_treat, i_rep] = coef
            psi[:, i_rep, i_treat] = psi_a * all_coef[i_treat, i_rep] + psi_b
            psi_deriv[:, i_rep, i_treat] = psi_a
            if clusters is None:
                sigma2 = var_est(psi[:, i_rep, i_treat], psi_deriv[:, i_rep, i_treat])
            else:
                assert data.cluster_vars is not None
                sigma2, _ = cluster_var_est(
                    psi[:, i_rep, i_treat],
                    psi_deriv[:, i_rep, i_treat],
                    test_sets,
                    test_clusters,
                    data.cluster_vars,
                    spec.n_folds,
                )
            all_se[i_treat, i_rep] = np.sqrt(sigma2)
    result = DMLResult.from_estimates(
        d_cols=spec.d_cols,
        all_coef=all_coef,
        all_se=all_se,
        psi=psi,
        psi_deriv=psi_deriv,
        n_obs=n_obs,
        n_folds=spec.n_cross_folds,
        model=spec.model,
        score=spec.score,
    )
    result.predictions = checked
    # DoubleML's nuisance_loss: each learner's out-of-sample RMSE or log loss per repetition
    result.nuisance_loss = nuisance_loss(spec, data, checked)
    result.nuisance_metric = loss_metrics(spec)
    if spec.boot_method is not None:
        result.bootstrap(spec.boot_method, spec.n_rep_boot, spec.seed)
    return result


def estimate_in_process(spec: DMLSpec, data: DMLData, folds: np.ndarray | None = None) -> DMLResult:
    """Run every unit of every stage here, in a loop, and aggregate: the reference and no-cloud path.

    Parameters
    ----------
    spec : DMLSpec
        Validated here.
    data : DMLData
        From :func:`~fanfit.dml.data.validate_data`.
    folds : numpy.ndarray of int, shape (n_obs, n_rep), or None
        None draws them from ``spec.seed`` (:func:`~fanfit.dml.units.draw_spec_folds`: with
        ``cluster_cols``, multiway cluster folds).

    Returns
    -------
    DMLResult

    Raises
    ------
    InvalidJobError
        A model whose stage inputs and estimate come from the client
        (:attr:`~fanfit.dml.models.ModelDef.client_inputs`: RDFlex); its client runs
        :func:`fit_stage` stage by stage.
    """
    spec.validate()
    if model_def(spec.model).client_inputs:
        raise InvalidJobError(
            f"Model {spec.model!r} takes its stage inputs and its estimate from the client "
            "(rdrobust): run its stages with fit_stage (fanfit.RDFlex does)."
        )
    if folds is None:
        folds = draw_spec_folds(spec, data)
    folds = validate_spec_folds(spec, data, folds)
    preds = put_external_predictions(init_preds(spec, data.n_obs), spec, data)
    aux: dict[str, np.ndarray] = {}  # the units' auxiliary arrays (PQ, LPQ: stage 0's)
    for stage in range(n_stages(spec)):
        inputs = stage_inputs(spec, stage, data, folds, preds, aux)
        fit_stage(spec, data, folds, stage, inputs, preds, aux)
    return aggregate(spec, data, folds, preds)


def fit_stage(
    spec: DMLSpec,
    data: DMLData,
    folds: np.ndarray,
    stage: int,
    inputs: dict,
    preds: dict[str, np.ndarray],
    aux: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Run every unit of one stage here and put its predictions into ``preds`` (in place).

    What the stage's Map computes on the stack; :func:`estimate_in_process` runs it per stage
    with :func:`~fanfit.dml.unit_fits.stage_inputs`, a model whose inputs come from the client
    (RDFlex) with the client's.

    Parameters
    ----------
    spec, data : DMLSpec, DMLData
    folds : numpy.ndarray of int, shape (n_obs, n_rep)
        Validated (:func:`~fanfit.dml.units.validate_spec_folds`).
    stage : int
    inputs : dict
        The stage's inputs (:class:`~fanfit.jobs.documents.estimate.StageInputs` as a dict).
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        From :func:`~fanfit.dml.units.init_preds`; filled in place.
    aux : dict or None
        Receives the units' auxiliary arrays by unit key (PQ, LPQ: stage 0's).

    Returns
    -------
    dict
        ``preds``.
    """
    for unit in fit_units(spec, stage):
        values, unit_aux = fit_predict_aux(spec, unit, data, folds, inputs)
        put_predictions(preds, unit, folds, values, spec)
        if unit_aux is not None and aux is not None:
            aux[unit.key] = unit_aux
    return preds
