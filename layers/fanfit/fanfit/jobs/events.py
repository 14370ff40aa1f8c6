"""Event models of the estimate job's Lambda functions (parsed by Powertools' ``event_parser``).

Each model is what the state machine (orchestrator/estimate.asl.json) sends; an event that does not
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
