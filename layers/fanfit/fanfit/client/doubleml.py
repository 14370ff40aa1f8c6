"""DoubleML's classes on a fanfit stack: a DoubleML script runs with only its class names changed.

>>> import fanfit                                                      # doctest: +SKIP
>>> dml_plr = fanfit.DoubleMLPLR(obj_dml_data, ml_l, ml_m, n_folds=3)  # DoubleML 0.11's signature
>>> dml_plr.fit()                  # on the stack: FANFIT_STACK, else the local stack
>>> dml_plr.summary, dml_plr.confint(), dml_plr.bootstrap(), dml_plr.sensitivity_analysis()

:class:`DoubleMLPLR`, :class:`DoubleMLIRM`, :class:`DoubleMLPLIV` and :class:`DoubleMLIIVM` are
subclasses of DoubleML 0.11's classes of the same names, with their constructors (plus
``y_col``/``d_cols``/``x_cols``/``z_cols`` when ``obj_dml_data`` is a DataFrame). Only
:meth:`~fanfit.client.doubleml_base._OnStack.fit` differs: it sends the data, DoubleML's sample
splitting (``smpls``, drawn at construction as DoubleML draws it, or given with
``set_sample_splitting``) and the learners (as allow-listed specs, never pickles) to an estimate
job on the stack; the job's out-of-fold predictions then go to DoubleML's own
``fit(external_predictions=...)`` (DoubleML user guide, "External predictions"; Bach et al. 2022,
JMLR 23), so that coef, se, summary, confint, bootstrap, sensitivity_analysis, evaluate_learners
and nuisance_loss are DoubleML's numbers by construction.
The fit checks that coef and se also equal the job's own result (relative 1e-9) and raises
:class:`fanfit.errors.ParityError` otherwise. ``cate``, ``gate`` and (IRM) ``policy_tree`` come
from :mod:`fanfit.client.heterogeneity`: DoubleML's results, from the stored predictions, with
fanfit's named errors.

This module holds PLR, PLIV, IRM, IIVM and :func:`from_doubleml`, and re-exports the others
(each family in a module of its own):

- :mod:`~fanfit.client.doubleml_base`: what every class shares (:class:`_OnStack`, its ``fit``
  on a stack; :func:`default_client`; the learner and data helpers);
- :mod:`~fanfit.client.doubleml_apo`: :class:`DoubleMLAPO`, :class:`DoubleMLAPOS`;
- :mod:`~fanfit.client.doubleml_did`: :class:`DoubleMLDID`, :class:`DoubleMLDIDCS`,
  :class:`DoubleMLDIDMulti`;
- :mod:`~fanfit.client.doubleml_ssm`: :class:`DoubleMLSSM`;
- :mod:`~fanfit.client.doubleml_quantile`: :class:`DoubleMLPQ`, :class:`DoubleMLCVAR`,
  :class:`DoubleMLLPQ`, :class:`DoubleMLQTE`.

Importing this module imports DoubleML (a client extra: ``pip install 'fanfit[doubleml]'``);
without it, :class:`fanfit.dml.interop.MissingDependencyError` gives the pip command.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fanfit.client.doubleml_apo import DoubleMLAPO, DoubleMLAPOS
from fanfit.client.doubleml_base import (
    _check_arguments,
    _dml_data,
    _estimator,
    _OnStack,
    _PropensityOptions,
    _unsupported,
    _where,
    default_client,
)
from fanfit.client.doubleml_did import DoubleMLDID, DoubleMLDIDCS, DoubleMLDIDMulti
from fanfit.client.doubleml_quantile import DoubleMLCVAR, DoubleMLLPQ, DoubleMLPQ, DoubleMLQTE
from fanfit.client.doubleml_ssm import DoubleMLSSM
from fanfit.client.heterogeneity import HeterogeneityMethods, PolicyTreeMethod
from fanfit.dml.interop import import_doubleml

import_doubleml()  # without DoubleML: MissingDependencyError, with the pip command
import doubleml as _doubleml  # noqa: E402 - after the check that names the extra
from doubleml.utils._estimation import _default_kde  # noqa: E402

__all__ = [
    "DoubleMLAPO",
    "DoubleMLAPOS",
    "DoubleMLCVAR",
    "DoubleMLDID",
    "DoubleMLDIDCS",
    "DoubleMLDIDMulti",
    "DoubleMLIIVM",
    "DoubleMLIRM",
    "DoubleMLLPQ",
    "DoubleMLPLIV",
    "DoubleMLPLR",
    "DoubleMLPQ",
    "DoubleMLQTE",
    "DoubleMLSSM",
    "default_client",
    "from_doubleml",
]


def _theta_initial(psi_a: np.ndarray, psi_b: np.ndarray) -> float:
    """The partialling-out estimate DoubleML fits ``ml_g`` of the IV-type score against."""
    return float(-np.nanmean(psi_b) / np.nanmean(psi_a))


class DoubleMLPLR(HeterogeneityMethods, _OnStack, _doubleml.DoubleMLPLR):  # type: ignore[misc]
    """DoubleML's partially linear regression model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLPLR`` (0.11): ``obj_dml_data, ml_l, ml_m, ml_g=None,
    n_folds=5, n_rep=1, score='partialling out', draw_sample_splitting=True``; learners are
    scikit-learn estimators of the allow-list (:mod:`fanfit.learners`) or ``'NAME:{json}'``
    strings. With a DataFrame as ``obj_dml_data``, name its columns with ``y_col``, ``d_cols``,
    ``x_cols`` (default: all others), ``z_cols``, ``cluster_cols``.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A callable score or ``use_other_treat_as_covariate=False``.
    fanfit.errors.InvalidLearnerError, InvalidDataError
        A learner outside the allow-list; ``obj_dml_data`` of the wrong kind.
    """

    _fanfit_model = "plr"

    def __init__(
        self, obj_dml_data: Any, ml_l: Any, ml_m: Any, ml_g: Any = None, n_folds: int = 5,
        n_rep: int = 1, score: Any = "partialling out", draw_sample_splitting: bool = True, *,
        y_col: Any = None, d_cols: Any = None, x_cols: Any = None, z_cols: Any = None,
        cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        super().__init__(
            data, _estimator("ml_l", ml_l), _estimator("ml_m", ml_m), _estimator("ml_g", ml_g),
            n_folds, n_rep, score, draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        targets = {"ml_l": y, "ml_m": d}
        if "ml_g" in preds:
            v_hat = d - preds["ml_m"]
            theta = _theta_initial(-v_hat * v_hat, v_hat * (y - preds["ml_l"]))
            targets["ml_g"] = y - theta * d
        return targets


class DoubleMLPLIV(_OnStack, _doubleml.DoubleMLPLIV):  # type: ignore[misc]
    """DoubleML's partially linear IV regression model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLPLIV`` (0.11): ``obj_dml_data, ml_l, ml_m, ml_r, ml_g=None,
    n_folds=5, n_rep=1, score='partialling out', draw_sample_splitting=True``, and the DataFrame
    columns as :class:`DoubleMLPLR`. Raises as :class:`DoubleMLPLR`.
    """

    _fanfit_model = "pliv"

    def __init__(
        self, obj_dml_data: Any, ml_l: Any, ml_m: Any, ml_r: Any, ml_g: Any = None,
        n_folds: int = 5, n_rep: int = 1, score: Any = "partialling out",
        draw_sample_splitting: bool = True, *, y_col: Any = None, d_cols: Any = None,
        x_cols: Any = None, z_cols: Any = None, cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        super().__init__(
            data, _estimator("ml_l", ml_l), _estimator("ml_m", ml_m), _estimator("ml_r", ml_r),
            _estimator("ml_g", ml_g), n_folds, n_rep, score, draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        z_cols = list(self._dml_data.z_cols)
        targets = {"ml_l": y, "ml_r": d}
        if len(z_cols) == 1:
            targets["ml_m"] = z[:, 0]
        else:
            targets.update({f"ml_m_{c}": z[:, j] for j, c in enumerate(z_cols)})
        if "ml_g" in preds:
            z1 = z[:, 0] - preds["ml_m"]
            theta = _theta_initial(-(d - preds["ml_r"]) * z1, z1 * (y - preds["ml_l"]))
            targets["ml_g"] = y - theta * d
        return targets


class DoubleMLIRM(  # type: ignore[misc]
    HeterogeneityMethods, PolicyTreeMethod, _PropensityOptions, _OnStack, _doubleml.DoubleMLIRM
):
    """DoubleML's interactive regression model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLIRM`` (0.11): ``obj_dml_data, ml_g, ml_m, n_folds=5, n_rep=1,
    score='ATE', weights=None, normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``, and the
    DataFrame columns as :class:`DoubleMLPLR`.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`DoubleMLPLR`; also ``weights`` or a propensity calibration.
    """

    _fanfit_model = "irm"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, n_folds: int = 5, n_rep: int = 1,
        score: Any = "ATE", weights: Any = None, normalize_ipw: bool = False,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, *, y_col: Any = None,
        d_cols: Any = None, x_cols: Any = None, z_cols: Any = None, cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        self._fanfit_check_ps(weights, normalize_ipw, ps_processor_config)
        super().__init__(
            data, _estimator("ml_g", ml_g), _estimator("ml_m", ml_m), n_folds, n_rep, score,
            weights, normalize_ipw, trimming_rule, trimming_threshold, ps_processor_config,
            draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        return {"ml_g0": _where(y, d == 0), "ml_g1": _where(y, d == 1), "ml_m": d}


class DoubleMLIIVM(_PropensityOptions, _OnStack, _doubleml.DoubleMLIIVM):  # type: ignore[misc]
    """DoubleML's interactive IV model, fitted on a fanfit stack.

    Parameters as ``doubleml.DoubleMLIIVM`` (0.11): ``obj_dml_data, ml_g, ml_m, ml_r, n_folds=5,
    n_rep=1, score='LATE', subgroups=None, normalize_ipw=False, trimming_rule='truncate',
    trimming_threshold=1e-2, ps_processor_config=None, draw_sample_splitting=True``, and the
    DataFrame columns as :class:`DoubleMLPLR`.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        As :class:`DoubleMLIRM`.
    """

    _fanfit_model = "iivm"

    def __init__(
        self, obj_dml_data: Any, ml_g: Any, ml_m: Any, ml_r: Any, n_folds: int = 5,
        n_rep: int = 1, score: Any = "LATE", subgroups: Any = None, normalize_ipw: bool = False,
        trimming_rule: str = "truncate", trimming_threshold: float = 1e-2,
        ps_processor_config: Any = None, draw_sample_splitting: bool = True, *, y_col: Any = None,
        d_cols: Any = None, x_cols: Any = None, z_cols: Any = None, cluster_cols: Any = None,
    ) -> None:  # fmt: skip
        data = _dml_data(obj_dml_data, y_col, d_cols, x_cols, z_cols, cluster_cols)
        _check_arguments(data, score)
        self._fanfit_check_ps(None, normalize_ipw, ps_processor_config)
        super().__init__(
            data, _estimator("ml_g", ml_g), _estimator("ml_m", ml_m), _estimator("ml_r", ml_r),
            n_folds, n_rep, score, subgroups, normalize_ipw, trimming_rule, trimming_threshold,
            ps_processor_config, draw_sample_splitting,
        )  # fmt: skip
        self._fanfit_check_learners()

    def _fanfit_model_options(self) -> dict[str, Any]:
        options = super()._fanfit_model_options()
        options["subgroups"] = dict(self.subgroups)
        return options

    def _fanfit_targets(self, y, d, z, preds):  # type: ignore[no-untyped-def]
        z0, z1 = z[:, 0] == 0, z[:, 0] == 1
        r0 = d if self.subgroups["always_takers"] else np.zeros_like(d)
        r1 = d if self.subgroups["never_takers"] else np.ones_like(d)
        return {"ml_g0": _where(y, z0), "ml_g1": _where(y, z1), "ml_m": z[:, 0],
                "ml_r0": _where(r0, z0), "ml_r1": _where(r1, z1)}  # fmt: skip


#: fanfit's class of each DoubleML class.
_CLASSES: dict[type, type] = {
    _doubleml.DoubleMLPLR: DoubleMLPLR,
    _doubleml.DoubleMLIRM: DoubleMLIRM,
    _doubleml.DoubleMLPLIV: DoubleMLPLIV,
    _doubleml.DoubleMLIIVM: DoubleMLIIVM,
    _doubleml.DoubleMLAPO: DoubleMLAPO,
    _doubleml.DoubleMLDID: DoubleMLDID,
    _doubleml.DoubleMLDIDCS: DoubleMLDIDCS,
    _doubleml.DoubleMLSSM: DoubleMLSSM,
    _doubleml.DoubleMLPQ: DoubleMLPQ,
    _doubleml.DoubleMLCVAR: DoubleMLCVAR,
    _doubleml.DoubleMLLPQ: DoubleMLLPQ,
}


def from_doubleml(model: Any, client: Any = None, **fit_options: Any) -> Any:
    """Run an unfitted DoubleML model on a stack and return its fitted fanfit counterpart.

    The counterpart (:class:`DoubleMLPLR`, :class:`DoubleMLIRM`, :class:`DoubleMLPLIV` or
    :class:`DoubleMLIIVM`) takes the model's data, learners (its ``learner`` dict), n_folds,
    n_rep, score and model options, and its sample splitting when it has one (``smpls``); it is
    then fitted with :meth:`~fanfit.client.doubleml_base._OnStack.fit`.

    Parameters
    ----------
    model : doubleml.DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV or DoubleMLIIVM
    client : fanfit.client.Client, optional
        As :meth:`~fanfit.client.doubleml_base._OnStack.fit`.
    **fit_options
        Further arguments of :meth:`~fanfit.client.doubleml_base._OnStack.fit` (``seed``,
        ``timeout``, job options).

    Returns
    -------
    DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV or DoubleMLIIVM
        Fitted.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A model of another class, or with an argument a stack cannot honour.
    fanfit.errors.InvalidLearnerError
        A learner outside the allow-list.
    """
    if isinstance(model, _OnStack):
        return model.fit(client, **fit_options)
    cls = _CLASSES.get(type(model))
    if cls is None:
        raise _unsupported(
            f"a {type(model).__name__}",
            "fanfit runs DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV, DoubleMLIIVM, DoubleMLAPO, "
            "DoubleMLDID, DoubleMLDIDCS, DoubleMLSSM, DoubleMLPQ, DoubleMLCVAR and DoubleMLLPQ",
        )
    kwargs: dict[str, Any] = dict(model.learner)
    cluster = bool(getattr(model._dml_data, "is_cluster_data", False))
    n_folds = model._n_folds_per_cluster if cluster else model.n_folds  # per cluster variable
    kwargs.update(n_folds=n_folds, n_rep=model.n_rep, score=model.score,
                  draw_sample_splitting=False)  # fmt: skip
    ipw = _doubleml.DoubleMLIRM | _doubleml.DoubleMLIIVM | _doubleml.DoubleMLAPO
    quantile_models = _doubleml.DoubleMLPQ | _doubleml.DoubleMLCVAR | _doubleml.DoubleMLLPQ
    if isinstance(model, ipw | _doubleml.DoubleMLSSM | quantile_models):
        kwargs.update(
            normalize_ipw=model.normalize_ipw, ps_processor_config=model.ps_processor_config
        )
    if isinstance(model, _doubleml.DoubleMLAPO):
        kwargs["treatment_level"] = model.treatment_level
    if isinstance(model, quantile_models):
        kwargs.update(treatment=model.treatment, quantile=model.quantile)
    with_kde = _doubleml.DoubleMLPQ | _doubleml.DoubleMLLPQ
    if isinstance(model, with_kde) and model.kde is not _default_kde:
        kwargs["kde"] = model.kde  # refused by name: fanfit's derivative is the default kde
    weighted = _doubleml.DoubleMLIRM | _doubleml.DoubleMLAPO
    if isinstance(model, weighted) and not np.all(model._weights["weights"] == 1.0):
        raise _unsupported("weights", "fanfit's IRM scores weight every observation equally")
    if isinstance(model, _doubleml.DoubleMLIIVM):
        kwargs["subgroups"] = dict(model.subgroups)
    if isinstance(model, _doubleml.DoubleMLDID | _doubleml.DoubleMLDIDCS):
        kwargs.update(
            in_sample_normalization=model.in_sample_normalization,
            clipping_threshold=model.clipping_threshold,
        )
    ours = cls(model._dml_data, **kwargs)
    if model._smpls is not None and cluster:
        ours.set_sample_splitting(model.smpls, model.smpls_cluster)
    elif model._smpls is not None:
        ours.set_sample_splitting(model.smpls)
    return ours.fit(client, **fit_options)
