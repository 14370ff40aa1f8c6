"""The user side: start estimate and train jobs on a stack and read their results.

>>> client = fanfit.Client.local_stack()               # the running local stack
>>> client = fanfit.Client(stack="fanfit")             # a stack deployed with `sam deploy`
>>> res = client.estimate("sipp1991.dta", model="plr", y="net_tfa", d="e401", x=[...],
...                       ml_l="RandomForestRegressor", ml_m="RandomForestClassifier", n_rep=3)
>>> res.coef, res.se, res.summary

Modules, bottom to top (each imports only those before it):

- :mod:`~fanfit.client.data`: reading a table and keeping a job's columns;
- :mod:`~fanfit.client.options`: the estimate options defined once (:class:`EstimateOptions`),
  type checks of options, :func:`build_spec`;
- :mod:`~fanfit.client.check`: :func:`check_estimate` (what ``--dry-run`` runs);
- :mod:`~fanfit.client.stack`: :class:`Stack`, a stack's resources from CloudFormation;
- :mod:`~fanfit.client.jobs`: :class:`JobHandle` (polling, failures, cost, record of any kind);
- :mod:`~fanfit.client.estimate` and :mod:`~fanfit.client.train`: each job kind's handle,
  result and submission;
- :mod:`~fanfit.client.client`: :class:`Client`, which delegates to them;
- :mod:`~fanfit.client.doubleml`: DoubleML's classes fitted on a stack (:class:`DoubleMLPLR`,
  :class:`DoubleMLIRM`, :class:`DoubleMLPLIV`, :class:`DoubleMLIIVM`, :func:`from_doubleml`),
  imported on first use (they need the ``doubleml`` extra); a package of one module per family
  (``plm``, ``irm``, ``did``, ``ssm``, ``quantile``, ``apo``, ``panel``) built on ``base``, and
  ``heterogeneity`` (``cate``, ``gate``, ``policy_tree``; also ``fanfit.client.heterogeneity``).

This package only re-exports their public names.
"""

from typing import Any

from fanfit.client.check import CheckedEstimate, check_estimate
from fanfit.client.client import Client
from fanfit.client.estimate import EstimateJob, EstimateResult
from fanfit.client.jobs import JobHandle
from fanfit.client.options import EstimateOptions, build_spec
from fanfit.client.stack import Stack
from fanfit.client.train import TrainJob, TrainResult

_DOUBLEML_NAMES = ("DoubleMLIIVM", "DoubleMLIRM", "DoubleMLPLIV", "DoubleMLPLR", "from_doubleml")

__all__ = [
    "CheckedEstimate",
    "Client",
    "DoubleMLIIVM",
    "DoubleMLIRM",
    "DoubleMLPLIV",
    "DoubleMLPLR",
    "EstimateJob",
    "EstimateOptions",
    "EstimateResult",
    "JobHandle",
    "Stack",
    "TrainJob",
    "TrainResult",
    "build_spec",
    "check_estimate",
    "from_doubleml",
]


def __getattr__(name: str) -> Any:  # lazy: DoubleML is a client extra
    if name in _DOUBLEML_NAMES:
        from fanfit.client import doubleml

        return getattr(doubleml, name)
    if name == "heterogeneity":  # `from fanfit.client import heterogeneity`, its former home
        from fanfit.client.doubleml import heterogeneity

        return heterogeneity
    raise AttributeError(name)
