r"""Out-of-sample losses of the nuisance learners, as DoubleML 0.11's ``nuisance_loss``.

After every repetition's cross-fitting DoubleML evaluates each nuisance learner on its own
out-of-fold predictions (``DoubleML._calc_nuisance_loss``, shown by ``print(obj)`` under
"Out-of-sample Performance" and kept in ``obj.nuisance_loss``): the root mean squared error of a
regressor, the log loss of a classifier, over the rows where the learner has a target. Which rows
those are, and what the target is, follows each model's ``_nuisance_est``:

=============================  =============================================  ========================
prediction key                 target                                         rows (others are NaN)
=============================  =============================================  ========================
``ml_l``                       :math:`Y`                                      all
``ml_m`` (PLR, IRM)            :math:`D`                                      all
``ml_m`` (PLIV, IIVM)          :math:`Z`                                      all
``ml_m_<z_col>`` (PLIV)        that instrument                                all
``ml_r`` (PLIV)                :math:`D`                                      all
``ml_g`` (PLR, PLIV IV-type)   :math:`Y - \tilde\theta D`                     all
``ml_g0`` / ``ml_g1`` (IRM)    :math:`Y`                                      :math:`D = 0` / :math:`D = 1`
``ml_g0`` / ``ml_g1`` (IIVM)   :math:`Y`                                      :math:`Z = 0` / :math:`Z = 1`
``ml_r0`` / ``ml_r1`` (IIVM)   :math:`D`                                      :math:`Z = 0` / :math:`Z = 1`
``ml_g_d_lvl0`` (APO)          :math:`Y`                                      :math:`D \ne \ell`
``ml_g_d_lvl1`` (APO)          :math:`Y`                                      :math:`D = \ell`
``ml_m`` (APO)                 :math:`1\{D = \ell\}`                        all
=============================  =============================================  ========================

The table is the registry's (:attr:`fanfit.dml.models.Nuisance.target` and ``rows``):
:func:`nuisance_targets` reads it from there.

(:math:`\tilde\theta` is the preliminary partialling-out estimate ``ml_g`` was fitted with,
:func:`~fanfit.dml.scores.plm_irm.plr_theta_initial` / :func:`~fanfit.dml.scores.plm_irm.pliv_theta_initial`.)
The propensity predictions of IRM, IIVM and APO (``ml_m``) are evaluated after clipping to
``[trimming_threshold, 1 - trimming_threshold]``, as DoubleML clips them before it computes the loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fanfit.dml.data import DMLData
from fanfit.dml.model_checks import column
from fanfit.dml.model_types import FOLD_TARGET, RESIDUAL, row_mask
from fanfit.dml.models import model_def
from fanfit.dml.scores.plm_irm import clip_propensity
from fanfit.dml.spec import DMLSpec
from fanfit.dml.units import check_preds, learner_name, prediction_keys
from fanfit.errors import InvalidJobError

__all__ = [
    "LOG_LOSS",
    "RMSE",
    "log_loss",
    "loss_metrics",
    "nuisance_loss",
    "nuisance_targets",
    "rmse",
]

#: Name of the regression loss, as DoubleML prints it ("Learner ml_l RMSE: ...").
RMSE = "RMSE"
#: Name of the classification loss, as DoubleML prints it ("Learner ml_m Log Loss: ...").
LOG_LOSS = "Log Loss"

# DoubleML clips probabilities to [eps, 1 - eps] before taking logarithms
_LOG_LOSS_EPS = 1e-15


def rmse(targets: np.ndarray, preds: np.ndarray) -> float:
    r"""Root mean squared error over the rows with a target.

    .. math::

        \mathrm{RMSE} = \sqrt{\frac{1}{|S|} \sum_{i \in S} (t_i - \hat p_i)^2},
        \qquad S = \{i : t_i \text{ not NaN}\}

    Computed as DoubleML 0.11's ``DoubleML._calc_nuisance_loss`` does
    (``sqrt(nanmean((targets - preds) ** 2))``), so the values agree to the last bit.

    Parameters
    ----------
    targets : numpy.ndarray, shape (n_obs,)
        NaN where the learner has no target.
    preds : numpy.ndarray, shape (n_obs,)
        Out-of-fold predictions.

    Returns
    -------
    float
        NaN when no row has a target.
    """
    sq_error = np.power(targets - preds, 2)
    with np.errstate(invalid="ignore"):
        return float(np.sqrt(_nanmean(sq_error)))


def log_loss(targets: np.ndarray, preds: np.ndarray) -> float:
    r"""Log loss (binary cross-entropy) over the rows with a target.

    .. math::

        \mathrm{LogLoss} = -\frac{1}{|S|} \sum_{i \in S} t_i \log \bar p_i + (1 - t_i) \log(1 - \bar p_i),
        \qquad \bar p_i = \min(\max(\hat p_i, 10^{-15}), 1 - 10^{-15})

    Computed as DoubleML 0.11's ``DoubleML._calc_nuisance_loss`` does.

    Parameters
    ----------
    targets : numpy.ndarray, shape (n_obs,)
        0/1, NaN where the learner has no target.
    preds : numpy.ndarray, shape (n_obs,)
        Predicted probabilities of class 1.

    Returns
    -------
    float
        NaN when no row has a target.
    """
    predictions = np.clip(preds, _LOG_LOSS_EPS, 1 - _LOG_LOSS_EPS)
    logloss = targets * np.log(predictions) + (1 - targets) * np.log(1 - predictions)
    return float(-_nanmean(logloss))


def _nanmean(values: np.ndarray) -> float:
    if np.all(np.isnan(values)):
        return float("nan")  # np.nanmean would warn "Mean of empty slice"
    return float(np.nanmean(values, axis=0))


def loss_metrics(spec: DMLSpec) -> dict[str, str]:
    """The loss each prediction key is evaluated with: :data:`RMSE` or :data:`LOG_LOSS`.

    A classifier (``spec.learners[...].is_classifier``, DoubleML's ``_is_classifier``) gets the log
    loss, a regressor the RMSE.

    Parameters
    ----------
    spec : DMLSpec

    Returns
    -------
    dict of str to str
        Prediction key (:func:`~fanfit.dml.units.prediction_keys`) -> metric name, in key order.

    Raises
    ------
    InvalidJobError
        The spec lacks a learner its model needs.
    """
    out = {}
    for key in prediction_keys(spec):
        name = learner_name(key)
        if name not in spec.learners:
            raise InvalidJobError(
                f"Prediction key {key!r} needs learner {name!r}, which the spec does not define."
            )
        out[key] = LOG_LOSS if spec.learners[name].is_classifier else RMSE
    return out


def _only(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values`` as float with NaN outside ``rows`` (DoubleML's ``_cond_targets``)."""
    out = values.astype(float)
    out[np.invert(rows)] = np.nan
    return out


def nuisance_targets(
    spec: DMLSpec, data: DMLData, preds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The target each nuisance learner's predictions are evaluated against (DoubleML's ``nuisance_targets``).

    See the module docstring for the target and rows of each prediction key.

    Parameters
    ----------
    spec : DMLSpec
    data : DMLData
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        Every prediction key of the spec (the stage-0 predictions are needed for the
        :math:`\\tilde\\theta` of ``ml_g``).

    Returns
    -------
    dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        NaN on the rows a learner is not evaluated on.

    Raises
    ------
    InvalidJobError
        Missing, misshapen or non-finite predictions.
    InvalidDataError
        An IV model without instrument data.
    """
    checked = check_preds(spec, data.n_obs, dict(preds))
    shape = (data.n_obs, spec.n_rep, spec.n_treat)
    mdef = model_def(spec.model)
    out = {}
    for fit in mdef.nuisances(spec):
        targets = np.full(shape, np.nan)
        for i_treat in range(spec.n_treat):
            for i_rep in range(spec.n_rep):
                if fit.target == FOLD_TARGET:  # depends on the fold's scalars (PQ's ml_g)
                    fp = mdef.fold_procedure_for(spec)
                    assert fp is not None
                    p = {k: v[:, i_rep, i_treat] for k, v in checked.items()}
                    target = fp.targets(spec, data, p, i_treat)[fit.key]
                elif fit.target == RESIDUAL:
                    assert mdef.theta_initial is not None
                    p = {k: v[:, i_rep, i_treat] for k, v in checked.items()}
                    theta = mdef.theta_initial(spec, data, p, i_treat)
                    target = data.y - theta * data.d[:, i_treat]
                else:
                    target = column(spec, data, fit.target, i_treat)
                mask = None if fit.loss_all_rows else row_mask(spec, data, fit, i_treat)
                if mask is not None:
                    target = _only(target, mask)
                targets[:, i_rep, i_treat] = target
        out[fit.key] = targets
    return out


def nuisance_loss(
    spec: DMLSpec, data: DMLData, preds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The out-of-sample loss of every nuisance learner in every repetition (DoubleML's ``nuisance_loss``).

    For every prediction key, repetition and treatment: :func:`rmse` of a regressor or
    :func:`log_loss` of a classifier (:func:`loss_metrics`) between the out-of-fold predictions
    and :func:`nuisance_targets`, over the rows with a target. IRM and IIVM propensities (``ml_m``)
    are clipped to ``[trimming_threshold, 1 - trimming_threshold]`` first. Equals
    ``DoubleML.nuisance_loss`` after ``fit()`` on the same folds with the same learners
    (DoubleML 0.11 ``DoubleML._calc_nuisance_loss``; shown by ``print(obj)`` and
    ``evaluate_learners()`` computes the RMSE of the same targets and predictions).

    Parameters
    ----------
    spec : DMLSpec
    data : DMLData
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        The out-of-fold predictions of every prediction key (:attr:`DMLResult.predictions`:
        propensities before clipping).

    Returns
    -------
    dict of str to numpy.ndarray of shape (n_rep, n_treat)
        Prediction key -> loss, DoubleML's layout ``(n_rep, n_coefs)``.

    Raises
    ------
    InvalidJobError
        Missing, misshapen or non-finite predictions, or a learner missing from the spec.
    InvalidDataError
        An IV model without instrument data.
    """
    metrics = loss_metrics(spec)
    mdef = model_def(spec.model)
    clipped = mdef.clipped
    targets = nuisance_targets(spec, data, preds)
    checked = check_preds(spec, data.n_obs, dict(preds))
    if mdef.adjusted_preds is not None:  # as DoubleML keeps them (PLPR's cre_general)
        checked = _adjusted(spec, data, checked, mdef.adjusted_preds)
    out = {}
    for key, metric in metrics.items():
        loss = np.full((spec.n_rep, spec.n_treat), np.nan)
        for i_rep in range(spec.n_rep):
            for i_treat in range(spec.n_treat):
                p = checked[key][:, i_rep, i_treat]
                if key in clipped:
                    p = clip_propensity(p, spec.trimming_threshold)
                t = targets[key][:, i_rep, i_treat]
                loss[i_rep, i_treat] = log_loss(t, p) if metric == LOG_LOSS else rmse(t, p)
        out[key] = loss
    return out


def _adjusted(
    spec: DMLSpec, data: DMLData, preds: dict[str, np.ndarray], adjust: Callable[..., Mapping]
) -> dict[str, np.ndarray]:
    """``preds`` (n_obs, n_rep, n_treat) with every repetition and treatment passed through
    the model's :attr:`~fanfit.dml.models.ModelDef.adjusted_preds`."""
    out = {k: np.array(v, dtype=float) for k, v in preds.items()}
    for i_rep in range(spec.n_rep):
        for i_treat in range(spec.n_treat):
            p = adjust(spec, data, {k: v[:, i_rep, i_treat] for k, v in preds.items()}, i_treat)
            for k, v in p.items():
                out[k][:, i_rep, i_treat] = v
    return out
