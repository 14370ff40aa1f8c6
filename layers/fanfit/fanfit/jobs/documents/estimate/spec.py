"""The spec of an estimate job: ``spec.json`` as the client submits it, and its parts.

:class:`EstimateSpec` (``spec_key(job)``, written by the client, read by Prepare) with the parts of
a job of several parts (:class:`SpecPart`) and how a part selects its rows (:class:`PartSelect`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, StrictInt, field_validator, model_validator

from fanfit import dml, storage
from fanfit.jobs.documents import DataSource, Document, check_one_data
from fanfit.jobs.documents.estimate.common import _OmitNone
from fanfit.limits import check_weight
from fanfit.sched.sizing import POLICIES

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_PARTS",
    "MAX_UNITS_PER_SHARD",
    "EstimateSpec",
    "PartSelect",
    "SpecPart",
]

#: Largest ``max_concurrency`` a job file may ask for (Lambda's account concurrency can be raised
#: to tens of thousands; a Distributed Map runs at most 10,000 child executions at once).
MAX_CONCURRENCY = 10_000
#: Largest ``units_per_shard`` (a stage has at most MAX_N_FOLDS x MAX_N_REP x learners units).
MAX_UNITS_PER_SHARD = 100_000

#: Most parts one job may hold (a QTE over 99 quantiles is 198 parts).
MAX_PARTS = 1_000


_COLUMN = Annotated[str, Field(min_length=1, max_length=255)]
_PERIOD = Annotated[float, Field(allow_inf_nan=False)]


class PartSelect(Document):
    """How a part selects its rows and derives its columns from the job's data: one group-time
    combination :math:`(g, t_{pre}, t_{eval})` of a staggered-adoption DID (DoubleMLDIDMulti) on
    the panel in long format, as :func:`fanfit.dml.gt_subsets.gt_subset` computes it (DoubleML
    0.11.4's ``DoubleMLDIDBinary._preprocess_data``; with ``panel`` false
    ``DoubleMLDIDCSBinary``'s). Plain data, validated here; the part's ``dml`` runs on the derived
    columns (its ``x_cols``, ``G_indicator``, ``y_diff``; or ``x_cols``, ``y_col``,
    ``G_indicator``, ``t_indicator``)."""

    kind: Literal["did_gt"] = "did_gt"
    id_col: _COLUMN
    t_col: _COLUMN
    g_col: _COLUMN
    y_col: _COLUMN
    g_value: _PERIOD
    t_value_pre: _PERIOD
    t_value_eval: _PERIOD
    control_group: Literal["never_treated", "not_yet_treated"] = "never_treated"
    anticipation_periods: Annotated[StrictInt, Field(ge=0, le=1_000)] = 0
    #: The never-treated units' group value: ``inf`` (DoubleML's for float groups) or ``0``.
    never_treated: Literal["inf", "zero"] = "inf"
    #: Panel data (one row per unit: ``G_indicator``, ``y_diff``), else repeated cross-sections
    #: (the two periods' rows: ``y_col``, ``G_indicator``, ``t_indicator``; a ``didcs`` part).
    panel: bool = True

    @model_validator(mode="after")
    def _periods(self) -> Self:
        if self.t_value_pre == self.t_value_eval:
            raise ValueError("t_value_pre and t_value_eval must be two different periods")
        return self


class SpecPart(_OmitNone):
    """One part of a job of several parts, as the client submits it: a label (``"quantile 0.5 of
    treatment 1"``, ``"treatment level 2"``) and the part's registry model (``dml``, as
    :attr:`EstimateSpec.dml`). A part that ``select`` s its rows from the job's data
    (:class:`PartSelect`: a DIDMulti's group-time combination) has its own sample splitting:
    ``folds_key`` (the client's folds of its rows, :func:`fanfit.storage.input_folds_key` of the
    part), or drawn by Prepare from the seed when absent."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = frozenset({"select", "folds_key"})

    label: str = Field(min_length=1, max_length=200)
    dml: dict[str, Any]
    select: PartSelect | None = None
    folds_key: str | None = None


class EstimateSpec(Document):
    """``spec.json``: the job the client submits (:func:`fanfit.storage.spec_key`).

    The data is named by exactly one of ``data_key`` (the uploaded data object) and ``data_source``
    (the user's ``s3://`` object used in place, :class:`~fanfit.jobs.documents.DataSource`: Prepare
    writes its columns as the data object and the plan names that). ``dml`` is kept as the client
    wrote it: Prepare validates it with
    :meth:`fanfit.dml.DMLSpec.from_dict`, whose errors name the option and keep their class
    (InvalidLearnerError, ...). ``weight`` is the job's weight in the fair shares
    (:func:`fanfit.limits.check_weight`; None reads as 1).

    A model that DoubleML fits as several models (DoubleMLQTE: one PQ, CVaR or LPQ per quantile
    and treatment level; DoubleMLAPOS: one APO per level) is one job of several ``parts``
    (:class:`SpecPart`, at most :data:`MAX_PARTS`) named by ``model`` (``'qte'``, ``'apos'``):
    every part runs on the one data object and the one sample splitting, with the same learners;
    ``dml`` is then the first part's. DoubleMLDIDMulti (``'did_multi'``) is one job whose parts
    each ``select`` their rows from the one data object (:class:`PartSelect`), each with its own
    folds (:attr:`SpecPart.folds_key`; then no ``folds_key`` of the job). ``boot_method`` and
    ``n_rep_boot`` of a job of several parts are the multiplier bootstrap of the model's combined
    result (QTE's and APOS's joint bands, :func:`fanfit.dml.combined.combine_parts`; DoubleML's
    ``bootstrap(method, n_rep_boot)``), seeded by the first part's seed; None: no joint bands.
    """

    kind: Literal["estimate"] = "estimate"
    dml: dict[str, Any]
    model: str | None = Field(default=None, max_length=40)
    parts: Annotated[list[SpecPart], Field(min_length=1, max_length=MAX_PARTS)] | None = None
    data_key: str | None = None
    data_source: DataSource | None = None
    folds_key: str | None = None
    max_concurrency: Annotated[StrictInt, Field(ge=1, le=MAX_CONCURRENCY)] | None = None
    units_per_shard: Annotated[StrictInt, Field(ge=1, le=MAX_UNITS_PER_SHARD)] | None = None
    sharding: str | None = None
    weight: float = 1.0
    #: The placement's objective (:class:`fanfit.sched.profiles.Objective`): a deadline, seconds,
    #: or a budget, USD; neither: the least cost within 5% of the fastest plan's time.
    deadline_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    budget_usd: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    boot_method: str | None = None
    n_rep_boot: Annotated[StrictInt, Field(ge=1)] | None = None

    @field_validator("boot_method")
    @classmethod
    def _boot_method(cls, value: str | None) -> str | None:
        if value is not None and value not in dml.BOOT_METHODS:
            raise ValueError(f"boot_method must be one of {', '.join(dml.BOOT_METHODS)}")
        return value

    @field_validator("data_key", mode="before")
    @classmethod
    def _data_key(cls, value: Any) -> str | None:
        return None if value is None else storage.check_data_key(value)

    @model_validator(mode="after")
    def _one_data(self) -> Self:
        check_one_data(self.data_key, self.data_source)
        return self

    @model_validator(mode="after")
    def _parts(self) -> Self:
        if (self.parts is None) != (self.model is None):
            raise ValueError("model and parts come together (a job of several parts), or neither")
        if self.parts is not None and self.parts[0].dml != self.dml:
            raise ValueError("dml must be the first part's dml in a job of several parts")
        selecting = {p.select is not None for p in self.parts or ()}
        if len(selecting) > 1:
            raise ValueError("every part selects its rows (select), or none does")
        if selecting == {True} and self.folds_key is not None:
            raise ValueError("parts that select their rows take their folds per part (folds_key)")
        if any(p.folds_key is not None and p.select is None for p in self.parts or ()):
            raise ValueError("a part's own folds_key needs its select: else the job's folds_key")
        if self.parts is None and (self.boot_method or self.n_rep_boot) is not None:
            raise ValueError(
                "boot_method and n_rep_boot of the spec bootstrap a combined result: a job of "
                "several parts only (a job of one takes them in dml)"
            )
        return self

    @field_validator("sharding", mode="before")
    @classmethod
    def _sharding(cls, value: Any) -> str | None:
        if not value:
            return None  # absent, null or empty: the default policy
        if not isinstance(value, str) or value not in POLICIES:
            shown = repr(value) if len(repr(value)) <= 100 else f"a {type(value).__name__} value"
            raise ValueError(f"sharding must be one of {', '.join(POLICIES)}; got {shown}")
        return value

    @field_validator("weight", mode="before")
    @classmethod
    def _weight(cls, value: Any) -> float:
        return check_weight(value)
