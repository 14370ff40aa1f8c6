"""Event models of the estimate and train jobs' Lambda functions (parsed by Powertools' ``event_parser``).

Each model is what a state machine (orchestrator/estimate.asl.json, train.asl.json) sends; an event that does not
fit is rejected before any work starts.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$"
_KEY = r"^jobs/[A-Za-z0-9][A-Za-z0-9_.-]{0,79}/[A-Za-z0-9_./-]{1,200}$"


class PrepareEvent(BaseModel):
    """Input of Prepare: plan stage ``stage`` of job ``job_id``."""

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    spec_key: str = Field(pattern=_KEY)
    stage: int = Field(ge=0, le=16)
    execution_arn: str = ""


class ScheduleEvent(BaseModel):
    """Input of Schedule: record wave ``wave - 1`` of stage ``stage`` and plan wave ``wave``."""

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    stage: int = Field(ge=0, le=16)
    wave: int = Field(ge=0, le=10_000)


class Shard(BaseModel):
    """One item of a stage's shard list: the units one invocation fits."""

    model_config = ConfigDict(extra="forbid")
    shard_id: str = Field(pattern=r"^[0-9]{5}$")
    units: list[dict] = Field(min_length=1)


class CrossFitEvent(BaseModel):
    """Input of CrossFit: one shard of stage ``stage`` of job ``job_id``."""

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    plan_key: str = Field(pattern=_KEY)
    stage: int = Field(ge=0, le=16)
    shard: Shard


class AggregateEvent(BaseModel):
    """Input of Aggregate: gather the predictions of job ``job_id`` into its estimate."""

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    plan_key: str = Field(pattern=_KEY)
    execution_arn: str = ""


class TrainInitEvent(BaseModel):
    """Input of TrainInit: validate train job ``job_id`` and write its plan and round-0 model."""

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    spec_key: str = Field(pattern=_KEY)
    execution_arn: str = ""


class TrainRoundEvent(BaseModel):
    """Input of TrainSchedule and TrainReduce: round ``round`` of train job ``job_id``."""

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    round: int = Field(ge=0, le=20_000)


class TrainShardEvent(BaseModel):
    """Input of TrainShard: worker ``worker``'s step of round ``round``.

    ``function_arn`` is the function the Map item invoked (chosen by TrainSchedule from the
    worker's memory size); the worker itself does not use it.
    """

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    round: int = Field(ge=0, le=20_000)
    worker: int = Field(ge=0, lt=40)
    function_arn: str = ""


class TrainFinalizeEvent(BaseModel):
    """Input of TrainFinalize: write the result of train job ``job_id`` from round ``round``'s model."""

    model_config = ConfigDict(extra="forbid")
    job_id: str = Field(pattern=_ID)
    round: int = Field(ge=0, le=20_000)
    execution_arn: str = ""
