"""The result of an estimate job: ``result.json`` as Aggregate writes it, and Aggregate's output.

:class:`EstimateResultDoc` (``result_key(job)``) with its timings (:class:`EstimateTimings`), the
parts of a job of several parts (:class:`PartResult`) and their combined result
(:class:`CombinedResult`, :class:`CombinedFramework`); what Aggregate returns into the state
(:class:`AggregateOutput`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from fanfit.jobs.documents import Document
from fanfit.jobs.documents.estimate.common import _OmitNone
from fanfit.jobs.documents.estimate.shards import ShardStats

__all__ = [
    "AggregateOutput",
    "AggregateStats",
    "ClientEstimate",
    "CombinedFramework",
    "CombinedResult",
    "EstimateResultDoc",
    "EstimateTimings",
    "PartResult",
]


class AggregateStats(Document):
    """Aggregate's own memory figures."""

    memory_mb: int
    peak_rss_mb: float


class EstimateTimings(Document):
    """``timings`` of ``result.json``: per-shard statistics, billed GB-seconds, the estimated Lambda
    cost (USD) and the prices it used."""

    shards: list[ShardStats]
    billed_gb_s: float
    lambda_cost_usd: float
    aggregate: AggregateStats
    price_usd_per_gb_s: float
    price_usd_per_request: float


#: The optional fields of an estimate's result: left out of ``result.json`` when None.
_RESULT_OPTIONAL = frozenset(
    {"ci_joint_95", "boot_method", "n_rep_boot", "nuisance_loss", "nuisance_metric", "spec",
     "propensity_overlap", "rdd"}
)  # fmt: skip


class ClientEstimate(_OmitNone):
    """The estimate of a model whose estimate the client computes (``ModelDef.client_inputs``:
    RDFlex, whose ``rdrobust`` runs on the client), sent before Aggregate, which writes it into
    ``result.json``. Laid out as :meth:`fanfit.dml.DMLResult.to_dict` lays an estimate out, one
    entry per coefficient of ``d_cols`` (RDFlex: ``Conventional``, ``Bias-Corrected``,
    ``Robust``, rdrobust's three rows); ``rdd`` holds RDFlex's own figures
    (:attr:`EstimateResultDoc.rdd`)."""

    d_cols: list[str]
    coef: dict[str, float]
    se: dict[str, float]
    t_stat: dict[str, float]
    pval: dict[str, float]
    ci_95: dict[str, list[float]]
    all_coef: dict[str, list[float]]
    all_se: dict[str, list[float]]
    rdd: dict[str, Any] | None = None


class _EstimateFields(_OmitNone):
    """The fields of an estimate's result that each part of a job has (:class:`EstimateResultDoc`,
    :class:`PartResult`)."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = _RESULT_OPTIONAL

    model: str
    score: str
    d_cols: list[str]
    coef: dict[str, float]
    se: dict[str, float]
    t_stat: dict[str, float]
    pval: dict[str, float]
    ci_95: dict[str, list[float]]
    all_coef: dict[str, list[float]]
    all_se: dict[str, list[float]]
    n_obs: int
    n_folds: int
    n_rep: int
    ci_joint_95: dict[str, list[float]] | None = None
    boot_method: str | None = None
    n_rep_boot: int | None = None
    nuisance_loss: dict[str, list[list[float | None]]] | None = None
    nuisance_metric: dict[str, str] | None = None
    spec: dict[str, Any] | None = None
    propensity_overlap: dict[str, Any] | None = None
    rdd: dict[str, Any] | None = None
    job_id: str
    execution_arn: str
    predictions_key: str
    folds_key: str


class PartResult(_EstimateFields):
    """One part's estimate in the ``result.json`` of a job of several parts
    (:attr:`EstimateResultDoc.parts`): the fields of a job of one but ``timings`` (the job's), with
    the part's ``label``, ``spec`` and ``predictions_key`` (:func:`fanfit.storage.predictions_key`
    of the part)."""

    label: str


class CombinedFramework(_OmitNone):
    """The numbers of a ``DoubleMLFramework`` (:meth:`fanfit.dml.combined.Framework.to_dict`), one
    entry per theta (``names``): ``coef``, ``se``, ``t_stat``, ``pval`` (median of the
    per-repetition p-values), ``ci_95`` (``[low, high]``), ``all_coef`` and ``all_se`` (n_rep
    values each) and, after the bootstrap, ``ci_joint_95`` (the joint band)."""

    names: list[str]
    coef: list[float]
    se: list[float]
    t_stat: list[float]
    pval: list[float]
    ci_95: list[list[float]]
    all_coef: list[list[float]]
    all_se: list[list[float]]
    ci_joint_95: list[list[float]] | None = None


class CombinedResult(_OmitNone):
    """``result.json``'s ``combined`` of a job of several parts: the model's result from its parts
    (:func:`fanfit.dml.combined.combine_parts`, DoubleML 0.11.4's ``DoubleMLFramework``
    arithmetic).

    ``qte``: ``effects`` the quantile treatment effects (one per ``quantiles``, DoubleMLQTE's
    ``coef``, ``se``, ``confint``, ``confint(joint=True)``); ``apos``: ``effects`` the levels'
    average potential outcomes (DoubleMLAPOS's) and ``contrasts`` each other level minus
    ``reference_level`` (``causal_contrast``; absent for one level). With ``boot_method`` the joint
    bands of ``n_rep_boot`` draws seeded by ``seed``.
    """

    model: str
    score: str
    effects: CombinedFramework
    contrasts: CombinedFramework | None = None
    quantiles: list[float] | None = None
    treatment_levels: list[float] | None = None
    reference_level: float | None = None
    boot_method: str | None = None
    n_rep_boot: int | None = None
    seed: int | None = None


class EstimateResultDoc(_EstimateFields):
    """``result.json`` of an estimate (:func:`fanfit.storage.result_key`): the estimate as
    :meth:`fanfit.dml.DMLResult.to_dict` writes it (per treatment), with the job's keys and timings.
    ``ci_joint_95``, ``boot_method`` and ``n_rep_boot`` are present after a bootstrap only.
    ``nuisance_loss`` (prediction key -> ``n_rep`` lists of ``n_treat`` losses, DoubleML's
    ``nuisance_loss`` layout; :func:`fanfit.dml.losses.nuisance_loss`), ``nuisance_metric``
    (prediction key -> ``'RMSE'`` or ``'Log Loss'``) and ``spec`` (the job's
    :meth:`fanfit.dml.DMLSpec.to_dict`: columns, learners, seed) and, for IRM and IIVM,
    ``propensity_overlap`` (:func:`fanfit.dml.overlap.propensity_overlap`) and, for RDFlex,
    ``rdd`` (the client's :class:`ClientEstimate`: ``d_cols`` are rdrobust's three rows; ``rdd``
    its bandwidths ``h`` per repetition, ``N_h``, ``final_h``, ``cutoff``, ``fuzzy``,
    ``fs_kernel``) are optional, so that a
    ``result.json`` written before they existed still parses. A job of several parts
    (:attr:`EstimatePlan.parts`) holds every part's estimate in ``parts`` (:class:`PartResult`),
    the first part's also at the top level, and, for ``qte`` and ``apos``, the model's combined
    result in ``combined`` (:class:`CombinedResult`)."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = _RESULT_OPTIONAL | {"parts", "combined"}

    timings: EstimateTimings
    parts: list[PartResult] | None = None
    combined: CombinedResult | None = None


class AggregateOutput(Document):
    """What Aggregate returns into the state."""

    job_id: str
    result_key: str
