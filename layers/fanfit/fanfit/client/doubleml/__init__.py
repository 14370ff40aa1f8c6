"""DoubleML's classes on a fanfit stack: a DoubleML script runs with only its class names changed.

>>> import fanfit                                                      # doctest: +SKIP
>>> dml_plr = fanfit.DoubleMLPLR(obj_dml_data, ml_l, ml_m, n_folds=3)  # DoubleML 0.11's signature
>>> dml_plr.fit()                  # on the stack: FANFIT_STACK, else the local stack
>>> dml_plr.summary, dml_plr.confint(), dml_plr.bootstrap(), dml_plr.sensitivity_analysis()

Every class is a subclass of DoubleML 0.11's class of the same name, with its constructor (plus
``y_col``/``d_cols``/``x_cols``/``z_cols`` when ``obj_dml_data`` is a DataFrame). Only
:meth:`~fanfit.client.doubleml.base._OnStack.fit` differs: it sends the data, DoubleML's sample
splitting (``smpls``, drawn at construction as DoubleML draws it, or given with
``set_sample_splitting``) and the learners (as allow-listed specs, never pickles) to an estimate
job on the stack; the job's out-of-fold predictions then go to DoubleML's own
``fit(external_predictions=...)`` (DoubleML user guide, "External predictions"; Bach et al. 2022,
JMLR 23), so that coef, se, summary, confint, bootstrap, sensitivity_analysis, evaluate_learners
and nuisance_loss are DoubleML's numbers by construction.
The fit checks that coef and se also equal the job's own result (relative 1e-9) and raises
:class:`fanfit.errors.ParityError` otherwise. ``cate``, ``gate`` and (IRM) ``policy_tree`` come
from :mod:`fanfit.client.doubleml.heterogeneity`: DoubleML's results, from the stored
predictions, with fanfit's named errors.

This package holds :func:`from_doubleml` and re-exports the classes, one family per module:

- :mod:`~fanfit.client.doubleml.base`: what every class shares (:class:`_OnStack`, its ``fit``
  on a stack; :func:`default_client`; the learner and data helpers);
- :mod:`~fanfit.client.doubleml.plm`: :class:`DoubleMLPLR`, :class:`DoubleMLPLIV`,
  :class:`DoubleMLLPLR`;
- :mod:`~fanfit.client.doubleml.irm`: :class:`DoubleMLIRM`, :class:`DoubleMLIIVM`;
- :mod:`~fanfit.client.doubleml.apo`: :class:`DoubleMLAPO`, :class:`DoubleMLAPOS`;
- :mod:`~fanfit.client.doubleml.did`: :class:`DoubleMLDID`, :class:`DoubleMLDIDCS`,
  :class:`DoubleMLDIDMulti`;
- :mod:`~fanfit.client.doubleml.ssm`: :class:`DoubleMLSSM`;
- :mod:`~fanfit.client.doubleml.quantile`: :class:`DoubleMLPQ`, :class:`DoubleMLCVAR`,
  :class:`DoubleMLLPQ`, :class:`DoubleMLQTE`;
- :mod:`~fanfit.client.doubleml.panel`: :class:`DoubleMLPLPR`;
- :mod:`~fanfit.client.doubleml.heterogeneity`: ``cate``, ``gate``, ``policy_tree``.

Importing this package imports DoubleML (a client extra: ``pip install 'fanfit[doubleml]'``);
without it, :class:`fanfit.dml.interop.MissingDependencyError` gives the pip command.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from fanfit.client.doubleml.apo import DoubleMLAPO, DoubleMLAPOS
from fanfit.client.doubleml.base import _OnStack, _unsupported, default_client
from fanfit.client.doubleml.did import DoubleMLDID, DoubleMLDIDCS, DoubleMLDIDMulti
from fanfit.client.doubleml.irm import DoubleMLIIVM, DoubleMLIRM
from fanfit.client.doubleml.panel import DoubleMLPLPR
from fanfit.client.doubleml.plm import DoubleMLLPLR, DoubleMLPLIV, DoubleMLPLR
from fanfit.client.doubleml.quantile import DoubleMLCVAR, DoubleMLLPQ, DoubleMLPQ, DoubleMLQTE
from fanfit.client.doubleml.ssm import DoubleMLSSM
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
    "DoubleMLLPLR",
    "DoubleMLLPQ",
    "DoubleMLPLIV",
    "DoubleMLPLPR",
    "DoubleMLPLR",
    "DoubleMLPQ",
    "DoubleMLQTE",
    "DoubleMLSSM",
    "default_client",
    "from_doubleml",
]


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
    _doubleml.DoubleMLLPLR: DoubleMLLPLR,
}


def from_doubleml(model: Any, client: Any = None, **fit_options: Any) -> Any:
    """Run an unfitted DoubleML model on a stack and return its fitted fanfit counterpart.

    The counterpart (:class:`DoubleMLPLR`, :class:`DoubleMLIRM`, :class:`DoubleMLPLIV` or
    :class:`DoubleMLIIVM`) takes the model's data, learners (its ``learner`` dict), n_folds,
    n_rep, score and model options, its sample splitting when it has one (``smpls``) and its
    nuisance parameters (``set_ml_nuisance_params``, ``tune``); it is then fitted with :meth:`~fanfit.client.doubleml.base._OnStack.fit`.

    Parameters
    ----------
    model : doubleml.DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV or DoubleMLIIVM
    client : fanfit.client.Client, optional
        As :meth:`~fanfit.client.doubleml.base._OnStack.fit`.
    **fit_options
        Further arguments of :meth:`~fanfit.client.doubleml.base._OnStack.fit` (``seed``,
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
    ours = counterpart(model)
    if not isinstance(ours, _OnStack):  # fanfit.RDFlex: fit(n_iterations, client=...)
        return ours.fit(client=client, **fit_options)
    return ours.fit(client, **fit_options)


def counterpart(model: Any) -> Any:
    """fanfit's unfitted class of an unfitted DoubleML model (:func:`from_doubleml`, before its
    fit): the same data, learners, options, sample splitting and nuisance parameters.

    Raises
    ------
    fanfit.errors.UnsupportedArgumentError
        A model of another class, or with an argument a stack cannot honour.
    fanfit.errors.InvalidLearnerError
        A learner outside the allow-list.
    """
    if type(model).__module__.startswith("doubleml.rdd"):  # RDFlex: its own module (rdrobust)
        from fanfit.client.doubleml.rdd import RDFlex

        return RDFlex.of(model)
    cls = _CLASSES.get(type(model))
    if cls is None:
        raise _unsupported(
            f"a {type(model).__name__}",
            "fanfit runs DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV, DoubleMLIIVM, DoubleMLAPO, "
            "DoubleMLDID, DoubleMLDIDCS, DoubleMLSSM, DoubleMLPQ, DoubleMLCVAR, DoubleMLLPQ, "
            "DoubleMLLPLR and RDFlex",
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
    if isinstance(model, _doubleml.DoubleMLLPLR):
        kwargs["n_folds_inner"] = model.n_folds_inner
        if not model._ml_a_provided:
            kwargs.pop("ml_a")  # DoubleML's clone(ml_m), as the model holds it
    ours = cls(model._dml_data, **kwargs)
    if isinstance(model, _doubleml.DoubleMLLPLR) and model._smpls is not None:
        ours._smpls, ours._smpls_inner = model._smpls, model._smpls_inner  # DoubleML's, unchanged
    elif model._smpls is not None and cluster:
        ours.set_sample_splitting(model.smpls, model.smpls_cluster)
    elif model._smpls is not None:
        ours.set_sample_splitting(model.smpls)
    ours._params = copy.deepcopy(model._params)  # set_ml_nuisance_params, tune()
    return ours
