"""The plan of an estimate job: ``plan.json``, its stages' units and inputs, Prepare's record and output.

:class:`EstimatePlan` (``plan_key(job)``) with its parts (:class:`PlanPart`); a stage's units as
documents (:func:`unit_doc`, :func:`fit_unit`: :class:`~fanfit.jobs.documents.events.FitUnitDoc`);
:class:`StageInputs` (``stage_inputs_key(job, s)``); :class:`StepRecord`
(``prepare_record_key(job, s)``) and :class:`PrepareOutput` (the state's ``$.plan``).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, ClassVar

from pydantic import PlainSerializer, PlainValidator

from fanfit import dml
from fanfit.dml import DMLSpec, FitUnit
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents import Document
from fanfit.jobs.documents.estimate.common import _OmitNone
from fanfit.jobs.documents.estimate.spec import PartSelect
from fanfit.jobs.documents.events import FitUnitDoc

__all__ = [
    "DMLSpecField",
    "EstimatePlan",
    "PlanPart",
    "PrepareOutput",
    "StageInputs",
    "StepRecord",
    "fit_unit",
    "unit_doc",
]


def _dml_spec(value: Any) -> dml.DMLSpec:
    if isinstance(value, dml.DMLSpec):
        return value
    return dml.DMLSpec.from_dict(value)  # raises InvalidJobError (a ValueError) naming the option


#: A :class:`fanfit.dml.DMLSpec` in a document: validated by ``DMLSpec.from_dict``, written by ``to_dict``.
DMLSpecField = Annotated[
    dml.DMLSpec,
    PlainValidator(_dml_spec),
    PlainSerializer(lambda spec: spec.to_dict(), return_type=dict),
]


class PlanPart(_OmitNone):
    """One part of a job of several parts in its plan: its label and validated spec; a part that
    selects its rows (:class:`PartSelect`) also its own folds (``folds_key``, (n_obs, n_rep) int64
    over its rows) and ``n_obs``, its row count."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = frozenset({"select", "folds_key", "n_obs"})

    label: str
    dml: DMLSpecField
    select: PartSelect | None = None
    folds_key: str | None = None
    n_obs: int | None = None


class EstimatePlan(Document):
    """``plan.json``: the validated job, written once by Prepare (:func:`fanfit.storage.plan_key`).

    Attributes
    ----------
    dml : DMLSpec
        The validated spec (written as :meth:`~fanfit.dml.DMLSpec.to_dict`).
    data_key, folds_key : str
        The data object and the folds, (n_obs, n_rep) int64.
    n_obs, n_stages : int
    max_concurrency : int
        The job's cap on concurrent shards.
    units_per_shard : int or None
        A fixed shard size, else the scheduler's.
    sharding : str
        The sizing policy (:data:`fanfit.sched.sizing.POLICIES`).
    weight : float
        The job's weight in the fair shares.
    spec_sha256 : str
        Hash of the spec's bytes: a resumed execution keeps a plan written from the same spec.
    model : str or None
        A job of several parts: its model (``'qte'``, ``'apos'``); None for a job of one.
    parts : list of PlanPart or None
        A job of several parts: each part's label and validated spec (``dml`` is the first's).
        The parts share the data object, the folds and the learners; ``n_stages`` is the most
        any part has, and stage ``s`` holds the units of every part that has it
        (:meth:`units`). Parts that select their rows (DIDMulti's combinations,
        :class:`PartSelect`) have their own folds and row counts; ``folds_key`` and ``n_obs`` are
        then the first part's (:meth:`part_folds_key`).
    """

    job_id: str
    dml: DMLSpecField
    model: str | None = None
    parts: list[PlanPart] | None = None
    data_key: str
    folds_key: str
    n_obs: int
    n_stages: int
    max_concurrency: int
    units_per_shard: int | None = None
    sharding: str = "auto"
    weight: float = 1.0
    spec_sha256: str
    deadline_s: float | None = None
    budget_usd: float | None = None

    @property
    def specs(self) -> list[DMLSpec]:
        """Every part's spec, in order (``[dml]`` for a job of one)."""
        return [p.dml for p in self.parts] if self.parts else [self.dml]

    @property
    def labels(self) -> list[str]:
        """Every part's label (``[""]`` for a job of one)."""
        return [p.label for p in self.parts] if self.parts else [""]

    def spec(self, part: int = 0) -> DMLSpec:
        """The spec of ``part``.

        Raises
        ------
        InvalidJobError
            No such part.
        """
        specs = self.specs
        if not 0 <= part < len(specs):
            raise InvalidJobError(f"part {part} does not exist; job {self.job_id} has {len(specs)}")
        return specs[part]

    def part_folds_key(self, part: int = 0) -> str:
        """The folds of ``part``: its own (a part that selects its rows), else the job's."""
        own = self.parts[part].folds_key if self.parts else None
        return own or self.folds_key

    def units(self, stage: int) -> list[FitUnit]:
        """The units of ``stage``: each part's (:func:`fanfit.dml.fit_units`) that has the stage,
        with its part index, in part order."""
        return [
            dataclasses.replace(unit, part=k) if k else unit
            for k, spec in enumerate(self.specs)
            if stage < dml.n_stages(spec)
            for unit in dml.fit_units(spec, stage)
        ]


def fit_unit(doc: FitUnitDoc) -> dml.FitUnit:
    """The :class:`fanfit.dml.FitUnit` of a unit document."""
    return dml.FitUnit(doc.stage, doc.i_treat, doc.i_rep, doc.i_fold, doc.learner, doc.part)


def unit_doc(unit: dml.FitUnit) -> FitUnitDoc:
    """The document of a :class:`fanfit.dml.FitUnit` (what :meth:`~fanfit.dml.FitUnit.to_dict` writes)."""
    return FitUnitDoc(
        stage=unit.stage, i_treat=unit.i_treat, i_rep=unit.i_rep, i_fold=unit.i_fold,
        learner=unit.learner, part=unit.part,
    )  # fmt: skip


class StageInputs(_OmitNone):
    r"""``stages/<s>/inputs.json``: what stage ``s`` needs from the earlier stages
    (:func:`fanfit.dml.stage_inputs`; for a model with ``ModelDef.client_inputs``, what the client
    sent, for stage 0 too): ``{}``; ``theta_initial[i_treat][i_rep]``, the preliminary
    estimate of the IV-type scores; or ``fold_scalars[name][i_treat][i_rep][i_fold]``, the fold
    scalars of a split fold procedure (PQ, LPQ: ``theta_ipw``, each fold's preliminary IPW
    quantile, computed by Prepare from stage 0's preliminary propensities with DoubleML's chain of
    start values over the repetitions); with them, for a split whose final fits are weighted
    (DoubleMLLPLR's ``'instrument'``: :math:`\hat M (1 - \hat M)` of every fold's ``ml_M``),
    ``sample_weights[i_treat][i_rep]``, one float per row (JSON keeps a float64 exactly; n_obs
    values per repetition)."""

    theta_initial: list[list[float]] | None = None
    fold_scalars: dict[str, list[list[list[float]]]] | None = None
    sample_weights: list[list[list[float]]] | None = None


class StepRecord(Document):
    """``stages/<s>/prepare.json``: when Prepare ran and on how much memory (for the cost)."""

    started_at: float
    ended_at: float
    memory_mb: int
    n_units: int
    peak_rss_mb: float


class PrepareOutput(Document):
    """What Prepare returns into the state (``$.plan``).

    Attributes
    ----------
    job_id, spec_key, plan_key : str
    stage, n_units, next_stage : int
    has_next_stage : bool
    client_inputs : bool
        The job's model (any part's, in a job of several parts) takes its stage inputs and its
        estimate from the client (``ModelDef.client_inputs``): the state machine waits for the
        client's inputs before the stage's first wave (unless ``client_inputs_ready``) and, after
        the last stage, for its estimate before Aggregate (unless ``client_estimate_ready``).
    client_inputs_ready : bool
        The stage's inputs object (``stage_inputs_key(job, stage)``) already exists: a resumed job
        goes on without waiting.
    client_estimate_ready : bool
        Only without a next stage: the client's estimate (``client_estimate_key(job)``) already
        exists.
    """

    job_id: str
    spec_key: str
    plan_key: str
    stage: int
    n_units: int
    has_next_stage: bool
    next_stage: int
    client_inputs: bool = False
    client_inputs_ready: bool = False
    client_estimate_ready: bool = False
