"""The job record (one item of the DynamoDB job table) as its readers see it.

The steps write the record field by field (:class:`fanfit.storage.JobRecords`): Prepare and
TrainInit mark it RUNNING with the job's kind and execution, Schedule adds the estimate's
``schedule`` (:class:`~fanfit.jobs.documents.estimate.ScheduleSummary`), TrainReduce its
``last_round``, the failure steps ``error``/``cause`` and the failed shard, Aggregate and
TrainFinalize ``result_key``, and the client keeps the job's ``cost`` there. :class:`JobRecord` is
the reader's view (the client's handles, ``fanfit status``, ``fanfit jobs``): the fields they read,
typed; keys it does not name are kept (``extra="allow"``), since the steps add fields over time.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import ConfigDict, field_validator

from fanfit.jobs.documents import Document
from fanfit.jobs.documents.estimate import ScheduleSummary

__all__ = ["JobRecord", "SpecKind", "StepTiming"]


class JobRecord(Document):
    """A job's record in the job table: ``JobRecord.parse(records.get(job_id), source=...)``.

    Attributes
    ----------
    job_id : str
    kind : {'estimate', 'train'} or None
        None on records written before train jobs existed (an estimate).
    status : str or None
        RUNNING, SUCCEEDED, FAILED or CANCELLED (stopped by ``fanfit cancel``).
    execution_arn : str or None
        The job's latest execution (a resume replaces it).
    model, score : str or None
        The estimate's DML model and score, or the train job's model.
    result_key : str or None
        Set once the result is written.
    error, cause : str or None
        Of a failed job.
    failed_shard, failed_stage, failed_wave, shard_error : optional
        The shard that kept failing, where, and its last error (estimate).
    cost : dict or None
        :meth:`fanfit.cost.JobCost.to_dict`, kept by the client once the job has ended.
    schedule : ScheduleSummary or None
        The estimate's current stage and its waves' decisions (Schedule).
    """

    model_config = ConfigDict(extra="allow")

    job_id: str
    kind: str | None = None
    status: str | None = None
    execution_arn: str | None = None
    model: str | None = None
    score: str | None = None
    result_key: str | None = None
    error: str | None = None
    cause: str | None = None
    failed_shard: str | None = None
    failed_stage: int | None = None
    failed_wave: int | None = None
    shard_error: str | None = None
    cost: dict[str, Any] | None = None
    schedule: ScheduleSummary | None = None


class SpecKind(Document):
    """The ``kind`` of a job's ``spec.json``, read before the spec itself (resume, ``Client.job``):
    ``'estimate'`` (also when absent: specs written before train jobs existed) or ``'train'``. The
    spec's other keys are left to its model (:class:`~fanfit.jobs.documents.estimate.EstimateSpec`,
    :class:`~fanfit.jobs.documents.train.TrainJobFile`)."""

    model_config = ConfigDict(extra="ignore")

    kind: Literal["estimate", "train"] = "estimate"


class StepTiming(Document):
    """The timing fields of a Lambda step's output, as the cost collection reads them from an
    execution history (:func:`fanfit.cost.history.lambda_invocations_from_history`).

    Every step output that bills Lambda time carries them (:class:`~fanfit.jobs.documents.estimate.CrossFitOutput`,
    :class:`~fanfit.jobs.documents.train.ShardOutput`, the stage and wave records, ...); the other
    keys of the output belong to its own model and are ignored here. A field that is absent or not a
    finite number reads as None (the history's own timestamps are used then).

    Attributes
    ----------
    started_at, ended_at : float or None
        Epoch seconds of the handler's start and end.
    memory_mb : int or None
        The function's MemorySize (MB), as the handler read it from its context.
    """

    model_config = ConfigDict(extra="ignore")

    started_at: float | None = None
    ended_at: float | None = None
    memory_mb: int | None = None

    @field_validator("started_at", "ended_at", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float | None:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if number and math.isfinite(value) else None

    @field_validator("memory_mb", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> int | None:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return int(value) if number and math.isfinite(value) and value > 0 else None

    @property
    def duration_s(self) -> float | None:
        """``ended_at - started_at`` (seconds), None unless both are known."""
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at
