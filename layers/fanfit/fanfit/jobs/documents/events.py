"""Event models of the estimate and train jobs' Lambda functions (parsed by Powertools' ``event_parser``).

Each model is what a state machine (orchestrator/estimate.asl.json, train.asl.json) sends; an event that does not
fit is rejected before any work starts.

Each handler that writes is idempotent (Powertools Idempotency on DynamoDB): its event model declares
``IDEMPOTENCY_KEY``, the JMESPath of the fields that make two invocations the same work, with the reason
beside it; the handler passes it to ``IdempotencyConfig(event_key_jmespath=Model.IDEMPOTENCY_KEY)``. A
Step Functions retry of the same work then gets the stored response and is not counted twice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from aws_lambda_powertools.utilities.parser import parse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from fanfit.errors import InvalidEventError
from fanfit.jobs.documents import Document
from fanfit.sched.resources import PlacementKind

#: Every event model's config: unknown keys are refused; its validator is built once, on the first
#: event parsed (``defer_build``), so that a function's init does not build the other functions' models.
_CONFIG = ConfigDict(extra="forbid", defer_build=True)

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$"
_KEY = r"^jobs/[A-Za-z0-9][A-Za-z0-9_.-]{0,79}/[A-Za-z0-9_./-]{1,200}$"


def _keys_in_job(event: Any) -> Any:
    """An S3 key of an event must lie under its own job's prefix ``jobs/<job_id>/``, with no ``..`` or
    empty segment: a crafted event cannot read or write another job's objects."""
    for name in ("spec_key", "plan_key"):
        key = getattr(event, name, None)
        if key is None:
            continue
        parts = key.split("/")
        if not key.startswith(f"jobs/{event.job_id}/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(
                f"{name} must be a key under jobs/{event.job_id}/ without '..' segments"
            )
    return event


class PrepareEvent(BaseModel):
    """Input of Prepare: plan stage ``stage`` of job ``job_id``."""

    # One stage of one execution: a resumed job (fanfit resume) is a new execution, so Prepare runs
    # again (keeping the plan written from the same spec, marking the job RUNNING); a retry within
    # one execution gets the stored response.
    IDEMPOTENCY_KEY: ClassVar[str] = "[job_id, stage, execution_arn]"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    spec_key: str = Field(pattern=_KEY)
    stage: int = Field(ge=0, le=16)
    execution_arn: str = ""
    check_keys = model_validator(mode="after")(_keys_in_job)


class MapFailure(BaseModel):
    """The error a failed Distributed Map hands its Catch (``$.error``): name and cause."""

    model_config = _CONFIG
    Error: str = Field(default="", max_length=1_000)
    Cause: str = Field(default="", max_length=300_000)


class ScheduleEvent(BaseModel):
    """Input of Schedule: record wave ``wave - 1`` of stage ``stage`` and plan wave ``wave``.

    ``execution_arn`` is the execution asking (a resumed job's new execution plans afresh from
    what S3 holds). With ``failure``, the Map of wave ``wave`` failed: Schedule names the shard
    that failed and its last error instead of planning (:func:`fanfit.jobs.estimate.failure.describe_failure`).
    """

    # One wave of one stage of one execution, and whether it failed: a resumed job's execution plans
    # its waves afresh from what S3 holds, and naming a failed wave is other work than planning it.
    IDEMPOTENCY_KEY: ClassVar[str] = "[job_id, stage, wave, execution_arn, failure]"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    stage: int = Field(ge=0, le=16)
    wave: int = Field(ge=0, le=10_000)
    execution_arn: str = Field(default="", max_length=2_048)
    failure: MapFailure | None = None


class FitUnitDoc(Document):
    """One (treatment, repetition, fold, nuisance learner) unit, as :meth:`fanfit.dml.FitUnit.to_dict`
    writes it: an item of a stage's ``units.json`` and of a shard's ``units``
    (:mod:`fanfit.jobs.documents.estimate`)."""

    stage: int = Field(ge=0, le=16)
    i_treat: int = Field(ge=0)
    i_rep: int = Field(ge=0)
    i_fold: int = Field(ge=0)
    learner: str = Field(min_length=1, max_length=300)
    #: The part of a job of several parts (:class:`fanfit.jobs.documents.estimate.PlanPart`).
    part: int = Field(default=0, ge=0, le=9_999)

    @model_serializer(mode="wrap")
    def _omit_part_0(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a job of one part writes its units as it always has: without "part"
        out: dict[str, Any] = handler(self)
        if not out.get("part"):
            out.pop("part", None)
        return out


class Shard(Document):
    """One shard: the units one invocation fits. An item of a wave's shard list (``waves/<w>.json``, the
    Distributed Map's ItemReader input, written by Schedule) and the ``shard`` of CrossFit's event."""

    shard_id: str = Field(pattern=r"^[0-9]{5}$")
    units: list[FitUnitDoc] = Field(min_length=1)
    placement: PlacementKind = "lambda"
    #: Where it runs (:mod:`fanfit.sched.resources`): ``lambda-<MB>`` picks the CrossFit function
    #: of that memory size (the estimate Map's Choice; any other Lambda shard runs on the first),
    #: ``gpu:<instance type>`` the GPU worker.
    resource: str | None = Field(default=None, pattern=r"^(lambda-[0-9]{3,5}|gpu:[A-Za-z0-9.\-]+)$")


class CrossFitEvent(BaseModel):
    """Input of CrossFit: one shard of stage ``stage`` of job ``job_id``."""

    # The shard's identity: shard ids are never reused within a stage and the shard writes one
    # deterministic predictions object, so a retried shard is answered from its stored response; a
    # failed one stores none and runs again (also in a resumed execution).
    IDEMPOTENCY_KEY: ClassVar[str] = "[job_id, stage, shard.shard_id]"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    plan_key: str = Field(pattern=_KEY)
    stage: int = Field(ge=0, le=16)
    shard: Shard
    #: The execution the shard runs for (``$$.Execution.Id`` in the Map's ItemSelector): a stop
    #: marker of another execution does not stop it (:mod:`fanfit.jobs.stop`).
    execution_arn: str = ""
    check_keys = model_validator(mode="after")(_keys_in_job)


class AggregateEvent(BaseModel):
    """Input of Aggregate: gather the predictions of job ``job_id`` into its estimate."""

    # One estimate per job: a retry must not write result.json and release the partition twice.
    IDEMPOTENCY_KEY: ClassVar[str] = "job_id"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    plan_key: str = Field(pattern=_KEY)
    execution_arn: str = ""
    check_keys = model_validator(mode="after")(_keys_in_job)


class TrainInitEvent(BaseModel):
    """Input of TrainInit: validate train job ``job_id`` and write its plan and round-0 model."""

    #: Idempotency key of TrainInit: a resumed job (``fanfit resume``) is a new execution, so Init
    #: runs again and starts at the first round whose reduced model is not in S3; a retry within
    #: one execution gets the stored response.
    IDEMPOTENCY_KEY: ClassVar[str] = "[job_id, execution_arn]"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    spec_key: str = Field(pattern=_KEY)
    execution_arn: str = ""
    check_keys = model_validator(mode="after")(_keys_in_job)


class TrainRoundEvent(BaseModel):
    """Input of TrainSchedule and TrainReduce: round ``round`` of train job ``job_id``."""

    #: Idempotency key of TrainSchedule and TrainReduce: one schedule and one reduce per round, so
    #: a retry neither folds a round's throughput in twice nor steps the model twice. (A resumed
    #: execution re-entering a round is safe without the record: Schedule keeps a round plan in
    #: S3, and Reduce rewrites the same record and model from the same partials.)
    IDEMPOTENCY_KEY: ClassVar[str] = "[job_id, round]"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    round: int = Field(ge=0, le=20_000)


class TrainShardEvent(BaseModel):
    """Input of TrainShard: worker ``worker``'s step of round ``round``.

    ``function_arn`` is the function the Map item invoked (chosen by TrainSchedule from the
    worker's memory size) and ``placement`` where it runs (Lambda, or the GPU worker on AWS
    Batch); the worker itself uses neither.
    """

    #: Idempotency key of TrainShard: the worker's identity in the job and the execution, one step
    #: per worker, round and execution, so a Step Functions retry of a Map item returns the stored
    #: partial's statistics and its throughput is not counted twice. The execution is part of it
    #: because a worker whose process died (SIGKILL, out of memory) leaves its record INPROGRESS
    #: until its invocation's timeout (up to 900 s, Powertools' ``in_progress_expiration``): a
    #: resumed job's new execution must not wait for it (the retry in the same execution stops the
    #: job instead, :func:`fanfit.jobs.train.shard.stop_on_unfinished_attempt`).
    #: ``function_arn`` and ``placement`` are not part of it.
    IDEMPOTENCY_KEY: ClassVar[str] = "[job_id, round, worker, execution_arn]"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    round: int = Field(ge=0, le=20_000)
    worker: int = Field(ge=0, lt=40)
    function_arn: str = ""
    placement: PlacementKind = "lambda"
    #: DS-Sync segments: rounds ``round .. round + rounds - 1`` in this one invocation
    #: (:func:`fanfit.jobs.train.schedule.segment_rounds`; at most its cap).
    rounds: int = Field(default=1, ge=1, le=50)
    #: The execution the worker runs in (``$$.Execution.Id``): a stop marker of another execution
    #: (an earlier, failed or cancelled one of a resumed job) does not stop it
    #: (:class:`fanfit.jobs.documents.train.TrainStop`). Empty: every marker stops it.
    execution_arn: str = ""


class TrainFinalizeEvent(BaseModel):
    """Input of TrainFinalize: write the result of train job ``job_id`` from round ``round``'s model."""

    #: Idempotency key of TrainFinalize: a resumed job's execution writes the result and marks the
    #: job SUCCEEDED again (``fanfit resume``); a retry within one execution does not.
    IDEMPOTENCY_KEY: ClassVar[str] = "[job_id, execution_arn]"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    round: int = Field(ge=0, le=20_000)
    execution_arn: str = ""


class ReleaseEvent(BaseModel):
    """Input of Release: job ``job_id`` ended (failed); hand its partition back."""

    # A job hands its partition back once: a retry must not recompute the others' partitions again.
    IDEMPOTENCY_KEY: ClassVar[str] = "job_id"
    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)


class ReleaseOutput(Document):
    """Output of Release: whether the job held a partition, and the recomputation's version (absent
    when it held none)."""

    job_id: str
    released: bool
    version: int | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


#: The step of a client request: a stage (its inputs) or ``"estimate"`` (the client's estimate,
#: :data:`fanfit.storage.CLIENT_ESTIMATE_STEP`).
ClientStep = Annotated[int, Field(ge=0, le=16)] | Literal["estimate"]
#: A Step Functions task token: a 36-character UUID on the local stack, up to 1,024 characters on
#: AWS (``SendTaskSuccess``'s ``taskToken``).
TaskToken = Annotated[str, Field(min_length=1, max_length=1_024)]


class ClientInputsEvent(BaseModel):
    """Input of ClientInputs (invoked with ``lambda:invoke.waitForTaskToken``): the execution waits
    for the client's inputs of stage ``step``, or for its estimate (``step`` ``"estimate"``), and
    hands the token the client resumes it with.

    ClientInputs keeps no idempotency record: a retried invocation carries a new token, which must
    replace the request's (writing the request again is itself idempotent).
    """

    model_config = _CONFIG
    job_id: str = Field(pattern=_ID)
    step: ClientStep
    task_token: TaskToken
    execution_arn: str = Field(default="", max_length=2_048)


class ClientRequest(Document):
    """``client_request_key(job, step)``: the execution waits for the client (a model with
    ``ModelDef.client_inputs``, RDFlex): its inputs of stage ``step`` (``stage_inputs_key(job,
    step)``), or its estimate (``step`` ``"estimate"``: ``client_estimate_key(job)``).

    Attributes
    ----------
    job_id : str
    step : int or ``"estimate"``
    task_token : str
        What the client passes to ``SendTaskSuccess`` / ``SendTaskFailure`` (up to 1,024 characters).
    execution_arn : str
        The waiting execution (``$$.Execution.Id``).
    requested_at : float
        When ClientInputs wrote it, seconds since the epoch.
    """

    job_id: str = Field(pattern=_ID)
    step: ClientStep
    task_token: TaskToken
    execution_arn: str = Field(default="", max_length=2_048)
    requested_at: float = Field(ge=0)


class WatchGpuJobEvent(BaseModel):
    """Input of WatchGpuJob: check the GPU worker's AWS Batch job ``batch_job_id`` once.

    WatchGpuJob only reads the job (and terminates one stuck in RUNNABLE, which is idempotent on
    Batch), so it needs no idempotency record: a retry checks again.
    """

    model_config = _CONFIG
    #: A Batch job id (a UUID on AWS).
    batch_job_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_:-]{0,127}$")


class WatchGpuJobOutput(Document):
    """Output of WatchGpuJob: the job's ``status``, whether it ``ended`` (SUCCEEDED), and the seconds
    the state machine waits before the next check (``poll_seconds``, at least 1). An ended job's
    ``started_at`` and ``stopped_at`` (ms since the epoch, as Batch reports them) are what
    :mod:`fanfit.cost` counts its instance time from."""

    batch_job_id: str
    status: str
    ended: bool
    poll_seconds: int = Field(ge=1)
    started_at: int | None = None
    stopped_at: int | None = None

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _describe(model: type[BaseModel], exc: ValidationError) -> str:
    """``field: what is wrong; ...`` without echoing the offending values (they may be huge)."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False)[:10]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "event"
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - len(problems)
    tail = f"; and {more} more" if more > 0 else ""
    fields = ", ".join(model.model_fields)
    return (
        f"malformed {model.__name__} event: {'; '.join(problems)}{tail} "
        f"(expected a JSON object with only the keys {fields})"
    )


def parse_event(model: type[M]) -> Callable[[Callable[[M, Any], R]], Callable[[Any, Any], R]]:
    """Powertools' event parsing (``parse``, what ``@event_parser`` calls) with a named error.

    The handler receives the event parsed into ``model``; an event that does not fit (wrong or missing
    keys, wrong types, out of range, not a JSON object) raises :class:`fanfit.errors.InvalidEventError`
    naming each field, before the handler runs (so nothing is written). Errors the handler itself
    raises pass through unchanged.

    Parameters
    ----------
    model : type of pydantic.BaseModel
        One of this module's event models.

    Returns
    -------
    callable
        A decorator for ``lambda_handler(event, context)``.

    Raises
    ------
    fanfit.errors.InvalidEventError
        From the decorated handler, when the event does not fit ``model``.
    """

    def decorate(handler: Callable[[M, Any], R]) -> Callable[[Any, Any], R]:
        @functools.wraps(handler)
        def wrapper(event: Any, context: Any) -> R:
            try:
                parsed = parse(event=event, model=model)
            except ValidationError as exc:
                raise InvalidEventError(_describe(model, exc)) from exc
            return handler(parsed, context)

        return wrapper

    return decorate
