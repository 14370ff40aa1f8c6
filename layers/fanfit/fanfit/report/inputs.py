"""What a report reads of a job's result: typed models, parsed once, read by attribute.

A report takes a result object (``EstimateResult``, ``TrainResult``), its ``to_dict()`` or the
``result.json`` of the job; :func:`estimate_input` and :func:`train_input` parse it into
:class:`EstimateReportInput` or :class:`TrainReportInput`, and the figures and the page read those
models' fields, never the dict. The models hold only what a report shows and ignore the other keys
of a result (``predictions_key``, ``centroids``, the timings' prices, ...), so the ``result.json``
(:class:`fanfit.jobs.documents.estimate.EstimateResultDoc`,
:class:`fanfit.jobs.documents.train.TrainResult`) and the client's ``to_dict()`` (which adds
``cost``) both parse; a field the report reads that is missing or of the wrong type raises
:class:`fanfit.errors.InvalidDocumentError` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field, field_validator

from fanfit.errors import InvalidJobError
from fanfit.jobs.documents import Document
from fanfit.jobs.documents.estimate import CombinedResult
from fanfit.jobs.documents.train import RoundRecord

__all__ = [
    "EstimateReportInput",
    "PartInput",
    "PropensityOverlapInput",
    "ReportCost",
    "ReportCostItem",
    "ReportSpec",
    "TrainReportInput",
    "as_dict",
    "estimate_input",
    "train_input",
]

#: A number shown in a table: an int stays an int (written ``1,000``), a float a float (``6g``).
Number = int | float


def as_dict(result: Any) -> dict[str, Any]:
    """A result as a plain dict: ``to_dict()`` of a result object, or the mapping itself.

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` is neither.
    """
    if hasattr(result, "to_dict"):
        return dict(result.to_dict())
    if isinstance(result, Mapping):
        return dict(result)
    raise InvalidJobError(
        f"a report needs an estimate or train result (object or dict), got {type(result).__name__}"
    )


class _Input(Document):
    """A report input: validated like a job document, but the keys a report does not show are
    ignored (a result carries more than its report reads)."""

    model_config = ConfigDict(extra="ignore")


def _none_if_empty(value: Any) -> Any:
    """An absent, null or empty section (``{}``) reads as not stored."""
    return value or None


class ReportCostItem(_Input):
    """One priced line of :meth:`fanfit.cost.JobCost.to_dict`'s ``items`` (USD, list prices)."""

    service: str
    name: str
    quantity: Number
    unit: str
    unit_usd: Number
    usd: Number


class ReportCost(_Input):
    """A job's cost as :meth:`fanfit.cost.JobCost.to_dict` writes it: its items, total and notes."""

    total_usd: float = 0.0
    items: list[ReportCostItem] = Field(default_factory=list)
    notes: list[Any] = Field(default_factory=list)


class ReportSpec(_Input):
    """The job's options as ``result.json``'s ``spec`` has them (:meth:`fanfit.dml.DMLSpec.to_dict`):
    columns, seed, folds, IRM/IIVM options and learners (prediction key -> ``{"name", "params"}``)."""

    y_col: str | None = None
    d_cols: list[str] = Field(default_factory=list)
    x_cols: list[str] = Field(default_factory=list)
    z_cols: list[str] = Field(default_factory=list)
    seed: int | None = None
    n_folds: int | None = None
    n_rep: int | None = None
    trimming_threshold: Number | None = None
    normalize_ipw: bool | None = None
    learners: dict[str, Any] = Field(default_factory=dict)


class PropensityOverlapInput(_Input):
    """``result.json``'s ``propensity_overlap`` (:func:`fanfit.dml.overlap.propensity_overlap`):
    the [0, 1] bin edges (n_bins + 1), the counts per group (``"0"``/``"1"`` -> n_rep lists of
    n_bins counts), the grouping variable and the clipping threshold."""

    variable: str = "d"
    bin_edges: list[float]
    counts: dict[str, list[list[float]]]
    trimming_threshold: float = 0.0


class _Timings(_Input):
    """The timings a report reads: the shard records (each parsed later through
    :class:`fanfit.jobs.documents.estimate.ShardStats`, which names the bad record)."""

    shards: list[Any] = Field(default_factory=list)


class PartInput(_Input):
    """One part of a job of several parts as ``result.json``'s ``parts`` has it: its label and
    estimate per treatment (``coef``, ``se``, ``ci_95``)."""

    label: str
    coef: dict[str, float]
    se: dict[str, float]
    ci_95: dict[str, list[float]] | None = None


class EstimateReportInput(_Input):
    """What the report of an estimate reads (``result.json`` or ``EstimateResult.to_dict()``).

    Per treatment (``d_cols``, default the keys of ``coef``): ``coef``, ``se``, ``t_stat``,
    ``pval``, ``ci_95`` ([low, high]) and ``ci_joint_95`` after a bootstrap; per repetition
    ``all_coef`` and ``all_se``. The sections an older ``result.json`` lacks (``nuisance_loss``,
    ``nuisance_metric``, ``spec``, ``propensity_overlap``, ``cost``) are None when absent or empty.
    A job of several parts has ``parts`` (each part's estimate) and, for ``qte`` and ``apos``,
    ``combined`` (:class:`fanfit.jobs.documents.estimate.CombinedResult`).
    """

    model: str = ""
    score: str = ""
    d_cols: list[str] | None = None
    coef: dict[str, float]
    se: dict[str, float]
    t_stat: dict[str, float]
    pval: dict[str, float]
    ci_95: dict[str, list[float]] | None = None
    ci_joint_95: dict[str, list[float]] | None = None
    all_coef: dict[str, list[float]]
    all_se: dict[str, list[float]] | None = None
    n_obs: int | None = None
    n_folds: int | None = None
    n_rep: int | None = None
    nuisance_loss: dict[str, list[list[float | None]]] | None = None
    nuisance_metric: dict[str, str] | None = None
    spec: ReportSpec | None = None
    propensity_overlap: PropensityOverlapInput | None = None
    job_id: str | None = None
    execution_arn: str = ""
    timings: _Timings = Field(default_factory=_Timings)
    cost: ReportCost | None = None
    parts: list[PartInput] | None = None
    combined: CombinedResult | None = None

    _empty_is_none = field_validator(
        "nuisance_loss", "nuisance_metric", "spec", "propensity_overlap", "cost", "parts",
        "combined", mode="before",
    )(_none_if_empty)  # fmt: skip

    @property
    def names(self) -> list[str]:
        """The treatments in order: ``d_cols``, else the keys of ``coef``."""
        return list(self.d_cols or list(self.coef))


class TrainReportInput(_Input):
    """What the report of a train job reads (``result.json`` or ``TrainResult.to_dict()``): the
    model, balance and sync, worker count, iterations, the final inertia (K-Means), the round
    records (:class:`~fanfit.jobs.documents.train.RoundRecord`) and the cost."""

    model: str | None = None
    balance: str | None = None
    sync: str | None = None
    n_workers: int | None = None
    n_iter: int | None = None
    inertia: float | None = None
    rounds: list[RoundRecord]
    job_id: str | None = None
    execution_arn: str = ""
    cost: ReportCost | None = None

    _empty_is_none = field_validator("cost", mode="before")(_none_if_empty)


def estimate_input(result: Any) -> EstimateReportInput:
    """Parse an estimate result (object, ``to_dict()`` or ``result.json``) for a report.

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` has no ``coef`` or ``all_coef`` (not an estimate);
        :class:`~fanfit.errors.InvalidDocumentError` (a subclass) naming the field that is malformed.
    """
    if isinstance(result, EstimateReportInput):
        return result
    r = as_dict(result)
    if "coef" not in r or "all_coef" not in r:
        raise InvalidJobError("an estimate result needs 'coef' and 'all_coef' (result.json keys)")
    return EstimateReportInput.parse(r, source="the estimate result")


def train_input(result: Any) -> TrainReportInput:
    """Parse a train result (object, ``to_dict()`` or ``result.json``) for a report.

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` has no ``rounds`` (not a train result);
        :class:`~fanfit.errors.InvalidDocumentError` (a subclass) naming the round and the field
        when a round record is malformed.
    """
    if isinstance(result, TrainReportInput):
        return result
    r = as_dict(result)
    if "rounds" not in r:
        raise InvalidJobError("a train result needs 'rounds' (result.json of a train job)")
    return TrainReportInput.parse(r, source="the train result")
