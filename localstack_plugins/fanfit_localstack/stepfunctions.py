"""Distributed Map features that LocalStack 2026.3.0's Step Functions interpreter lacks.

Applied at start-up (``localstack.hooks.on_infra_start``) with LocalStack's patch utilities
(:mod:`localstack.utils.patch`); the state machine definitions stay as they are on AWS. What
LocalStack 2026.3.0 does, and what these patches change (AWS Step Functions developer guide,
"Map state in Distributed mode", "ResultWriter", "Tolerated failure threshold"):

1. **Failed child executions.** LocalStack counts a failed iteration but lets the Map succeed with
   ``null`` in its place. AWS fails the Map Run with ``States.ExceedToleratedFailureThreshold``
   ("The specified tolerated failure threshold was exceeded") once more iterations failed than
   ``ToleratedFailureCount``/``ToleratedFailurePercentage`` allow (both 0 by default: any failure),
   and starts no further iterations. Patched: the worker records each iteration and stops the run
   when the threshold is exceeded; the Map state fails with that error (so ``Retry``/``Catch`` on the
   Map see it).
2. **ResultWriter.** LocalStack evaluates ``ResultWriter.Parameters`` against the wrong input (a
   ``Prefix.$`` path fails with ``States.Runtime``) and writes only a ``manifest.json`` listing no
   files. Patched: the parameters are evaluated against the Map state's input, and
   ``<Prefix>/<map-run-id>/SUCCEEDED_0.json`` / ``FAILED_0.json`` (one entry per child execution:
   ``ExecutionArn``, ``Name``, ``Input``, ``Output`` or ``Error``/``Cause``, ``Status``, dates,
   ...) and a ``manifest.json`` listing them with their sizes are written, also when the Map Run
   fails.
3. **Re-throwing ``States.*`` errors from a Fail state.** A ``Fail`` state whose ``ErrorPath``
   resolves to a ``States.*`` name (``Catch`` then ``Fail`` with ``"ErrorPath": "$.error.Error"``)
   made LocalStack raise ``ValueError`` (custom error names must not start with ``States.``; that
   rule is for names written in the definition). Patched: the name is re-thrown as it is.

``ItemReader`` (S3 JSON), ``ItemSelector`` with ``$$.Map.Item.Value``, ``MaxConcurrencyPath`` and
``Retry``/``Catch`` inside and around the Map work unpatched. ``ItemBatcher`` is rejected by
LocalStack's ASL parser (``InvalidDefinition``) and is not added here.
"""

from __future__ import annotations

import copy
import datetime
import json
import logging
import threading
import uuid
from typing import Any

from localstack.runtime import hooks

LOG = logging.getLogger(__name__)

_applied = False
_lock = threading.Lock()

THRESHOLD_ERROR = "States.ExceedToleratedFailureThreshold"
THRESHOLD_CAUSE = "The specified tolerated failure threshold was exceeded"
_MAP_INPUT_ATTR = "_fanfit_map_input"
_ITEMS_ATTR = "_fanfit_items"
_TOLERANCE_ATTR = "_fanfit_tolerance_declared"


class ThresholdExceededError(Exception):
    """Set as a job's output to stop the Map Run (LocalStack's job pool stops on an exception)."""


def _iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _json_str(value: Any) -> str:
    from localstack.services.stepfunctions.asl.utils.encoding import to_json_str

    return str(to_json_str(value))


def threshold_exceeded(
    failed: int,
    total: int,
    count: int,
    percentage: float,
    count_declared: bool,
    percentage_declared: bool,
) -> bool:
    """Whether a Map Run with ``failed`` of ``total`` items failed exceeds its tolerance.

    Parameters
    ----------
    failed, total : int
        Failed (or timed out, or aborted) child executions, and all items of the run.
    count, percentage : int, float
        ``ToleratedFailureCount`` and ``ToleratedFailurePercentage`` (percent).
    count_declared, percentage_declared : bool
        Whether the state declares them. With neither, any failure exceeds (AWS's default of 0);
        with both, exceeding either does.

    Returns
    -------
    bool
    """
    exceeded = False
    if count_declared or not percentage_declared:
        exceeded = failed > count
    if percentage_declared and total > 0:
        exceeded = exceeded or (100.0 * failed / total) > percentage
    return exceeded


def _patch_fail_state() -> None:
    from localstack.aws.api.stepfunctions import HistoryEventType, TaskFailedEventDetails
    from localstack.services.stepfunctions.asl.component.common.error_name.custom_error_name import (
        ILLEGAL_CUSTOM_ERROR_PREFIX,
        CustomErrorName,
    )
    from localstack.services.stepfunctions.asl.component.common.error_name.error_name import (
        ErrorName,
    )
    from localstack.services.stepfunctions.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from localstack.services.stepfunctions.asl.component.state.state_fail.state_fail import (
        StateFail,
    )
    from localstack.services.stepfunctions.asl.eval.event.event_detail import EventDetails
    from localstack.utils.patch import patch

    class RethrownErrorName(ErrorName):
        """An error name taken from the input at run time, ``States.*`` names included."""

    @patch(StateFail._eval_state, pass_target=False)
    def _eval_state(self: Any, env: Any) -> None:
        details = TaskFailedEventDetails()
        error_value = None
        if self.error:
            self.error.eval(env=env)
            error_value = env.stack.pop()
            details["error"] = error_value
        if self.cause:
            self.cause.eval(env=env)
            details["cause"] = env.stack.pop()
        error_name: ErrorName | None = None
        if error_value:
            is_states = str(error_value).startswith(ILLEGAL_CUSTOM_ERROR_PREFIX)
            error_name = (RethrownErrorName if is_states else CustomErrorName)(error_value)
        raise FailureEventException(
            failure_event=FailureEvent(
                env=env,
                error_name=error_name,
                event_type=HistoryEventType.TaskFailed,
                event_details=EventDetails(taskFailedEventDetails=details),
            )
        )


def _patch_state_map() -> None:
    from localstack.services.stepfunctions.asl.component.common.error_name.failure_event import (
        FailureEventException,
    )
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_map.iteration.distributed_iteration_component import (  # noqa: E501
        DistributedIterationComponent,
    )
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_map.state_map import (  # noqa: E501
        StateMap,
    )
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_map.tolerated_failure import (  # noqa: E501
        ToleratedFailureCountDecl,
        ToleratedFailurePercentageDecl,
    )
    from localstack.utils.patch import patch

    @patch(StateMap.from_state_props)
    def from_state_props(fn: Any, self: Any, state_props: Any) -> None:
        fn(self, state_props)
        declared = (
            state_props.get(ToleratedFailureCountDecl) is not None,
            state_props.get(ToleratedFailurePercentageDecl) is not None,
        )
        setattr(self.iteration_component, _TOLERANCE_ATTR, declared)

    @patch(StateMap._eval_execution)
    def _eval_execution(fn: Any, self: Any, env: Any) -> None:
        # The effective input (after InputPath) is on top of the stack, as the workers read it.
        effective_input = env.stack[-1] if env.stack else env.states.get_input()
        setattr(env, _MAP_INPUT_ATTR, copy.deepcopy(effective_input))
        try:
            fn(self, env)
        except FailureEventException:
            if self.result_writer is not None and isinstance(
                self.iteration_component, DistributedIterationComponent
            ):
                try:
                    _write_results(self.result_writer, env)
                except Exception as exc:  # the Map's own failure is what matters
                    LOG.warning("fanfit: ResultWriter after a failed Map Run: %s", exc)
            raise


def _patch_distributed_map() -> None:
    from localstack.aws.api.stepfunctions import HistoryEventType, MapRunFailedEventDetails
    from localstack.services.stepfunctions.asl.component.common.error_name.failure_event import (
        FailureEvent,
        FailureEventException,
    )
    from localstack.services.stepfunctions.asl.component.common.error_name.states_error_name import (  # noqa: E501
        StatesErrorName,
    )
    from localstack.services.stepfunctions.asl.component.common.error_name.states_error_name_type import (  # noqa: E501
        StatesErrorNameType,
    )
    from localstack.services.stepfunctions.asl.component.common.timeouts.timeout import (
        EvalTimeoutError,
    )
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_map.iteration.distributed_iteration_component import (  # noqa: E501
        DistributedIterationComponent,
    )
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_map.iteration.itemprocessor.distributed_item_processor_worker import (  # noqa: E501
        DistributedItemProcessorWorker,
    )
    from localstack.services.stepfunctions.asl.eval.event.event_detail import EventDetails
    from localstack.services.stepfunctions.asl.eval.program_state import (
        ProgramError,
        ProgramStopped,
    )
    from localstack.services.stepfunctions.asl.eval.states import ItemData, MapData
    from localstack.utils.patch import patch

    @patch(DistributedIterationComponent._map_run)
    def _map_run(fn: Any, self: Any, env: Any, eval_input: Any) -> None:
        record = eval_input.map_run_record
        setattr(record, _TOLERANCE_ATTR, getattr(self, _TOLERANCE_ATTR, (False, False)))
        record.__dict__.setdefault(_ITEMS_ATTR, [])
        try:
            fn(self, env, eval_input)
        except ThresholdExceededError as exc:
            error = StatesErrorName(typ=StatesErrorNameType.StatesExceedToleratedFailureThreshold)
            raise FailureEventException(
                failure_event=FailureEvent(
                    env=env,
                    error_name=error,
                    event_type=HistoryEventType.TaskFailed,
                    event_details=EventDetails(
                        mapRunFailedEventDetails=MapRunFailedEventDetails(
                            error=THRESHOLD_ERROR, cause=THRESHOLD_CAUSE
                        )
                    ),
                )
            ) from exc

    @patch(DistributedItemProcessorWorker._eval_job, pass_target=False)
    def _eval_job(self: Any, env: Any, job: Any) -> None:
        record = self._map_run_record
        record.item_counter.total.count()
        record.item_counter.running.count()
        record.execution_counter.total.count()
        record.execution_counter.running.count()
        name = str(uuid.uuid4())
        started = datetime.datetime.now(tz=datetime.UTC)
        child_input: Any = job.job_input
        status, error, cause = "FAILED", None, None
        job_output = None
        try:
            env.states.context_object.context_object_data["Map"] = MapData(
                Item=ItemData(Index=job.job_index, Value=job.job_input)
            )
            env.states.reset(job.job_input)
            env.stack.append(env.states.get_input())
            self._eval_input(env_frame=env)
            child_input = copy.deepcopy(env.states.get_input())
            job.job_program.eval(env)
            end = env.program_state()
            if isinstance(end, ProgramError):
                details = end.error or {}
                error, cause = details.get("error"), details.get("cause")
            elif isinstance(end, ProgramStopped):
                status, error, cause = "ABORTED", end.error, end.cause
            else:
                status = "SUCCEEDED"
                job_output = env.states.get_input()
        except EvalTimeoutError as exc:
            status, error, cause = "TIMED_OUT", "States.Timeout", str(exc)
        except FailureEventException as exc:
            error, cause = exc.extract_error_cause_pair() or (None, None)
        except Exception as exc:
            error, cause = "States.Runtime", str(exc)
        finally:
            record.item_counter.running.offset(-1)
            record.execution_counter.running.offset(-1)
            for counter in (record.item_counter, record.execution_counter):
                {
                    "SUCCEEDED": counter.succeeded,
                    "FAILED": counter.failed,
                    "TIMED_OUT": counter.timed_out,
                    "ABORTED": counter.aborted,
                }[status].count()
            if status == "SUCCEEDED":
                record.item_counter.results_written.count()
                record.execution_counter.results_written.count()
            items = record.__dict__.setdefault(_ITEMS_ATTR, [])
            items.append(
                {
                    "index": job.job_index,
                    "name": name,
                    "status": status,
                    "input": child_input,
                    "output": job_output,
                    "error": error,
                    "cause": cause,
                    "start": started,
                    "stop": datetime.datetime.now(tz=datetime.UTC),
                }
            )
            job.job_output = job_output
            if status != "SUCCEEDED":
                failed = sum(1 for item in list(items) if item["status"] != "SUCCEEDED")
                count_declared, percentage_declared = getattr(
                    record, _TOLERANCE_ATTR, (False, False)
                )
                if threshold_exceeded(
                    failed,
                    self._job_pool._jobs_number,
                    int(record.tolerated_failure_count or 0),
                    float(record.tolerated_failure_percentage or 0.0),
                    count_declared,
                    percentage_declared,
                ):
                    job.job_output = ThresholdExceededError(
                        f"{failed} of {self._job_pool._jobs_number} items failed"
                    )


def _result_entry(item: dict[str, Any], record: Any) -> dict[str, Any]:
    """One child execution in AWS's result-file format."""
    map_sm_arn = record.map_state_machine_arn
    execution_arn = map_sm_arn.replace(":stateMachine:", ":execution:") + ":" + item["name"]
    entry: dict[str, Any] = {
        "ExecutionArn": execution_arn,
        "Input": _json_str(item["input"]),
        "InputDetails": {"Included": True},
        "Name": item["name"],
        "RedriveCount": 0,
        "RedriveStatus": "NOT_REDRIVABLE",
        "StartDate": _iso(item["start"]),
        "StateMachineArn": map_sm_arn,
        "Status": item["status"],
        "StopDate": _iso(item["stop"]),
    }
    if item["status"] == "SUCCEEDED":
        entry["Output"] = _json_str(item["output"])
        entry["OutputDetails"] = {"Included": True}
        entry["RedriveStatusReason"] = "Execution is SUCCEEDED and cannot be redriven"
    else:
        if item["error"] is not None:
            entry["Error"] = item["error"]
        if item["cause"] is not None:
            entry["Cause"] = item["cause"]
        entry["RedriveStatusReason"] = "Execution is a child of a Map Run and cannot be redriven"
    return entry


def _write_results(result_writer: Any, env: Any) -> dict[str, Any]:
    """Write the Map Run's result files and manifest to S3; return the Map state's output."""
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_task.credentials import (  # noqa: E501
        StateCredentials,
    )
    from localstack.services.stepfunctions.asl.utils.boto_client import boto_client_for

    record = env.map_run_record_pool_manager.get_all()[-1]
    frame = env.open_frame()
    try:
        map_input = getattr(env, _MAP_INPUT_ATTR, None)
        if map_input is None:
            map_input = env.states.get_input()
        frame.states.reset(input_value=map_input)
        frame.stack.append(map_input)
        result_writer.parargs.eval(env=frame)
        parameters = frame.stack.pop()
        result_writer.resource.eval(env=frame)
        runtime_part = frame.stack.pop()
    finally:
        env.close_frame(frame)
    bucket = parameters["Bucket"]
    prefix = str(parameters.get("Prefix") or "")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    map_run_id = record.map_run_arn.split(":")[-1]
    s3 = boto_client_for(
        service="s3",
        region=runtime_part.region,
        state_credentials=StateCredentials(role_arn=env.aws_execution_details.role_arn),
    )
    items = sorted(record.__dict__.get(_ITEMS_ATTR, []), key=lambda item: item["index"])
    files: dict[str, list[dict[str, Any]]] = {"FAILED": [], "PENDING": [], "SUCCEEDED": []}
    for status in ("SUCCEEDED", "FAILED"):
        entries = [
            _result_entry(item, record)
            for item in items
            if (item["status"] == "SUCCEEDED") == (status == "SUCCEEDED")
        ]
        if not entries:
            continue
        key = f"{prefix}{map_run_id}/{status}_0.json"
        body = json.dumps(entries).encode("utf-8")
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        files[status].append({"Key": key, "Size": len(body)})
    manifest = {
        "DestinationBucket": bucket,
        "MapRunArn": record.map_run_arn,
        "ResultFiles": files,
    }
    manifest_key = f"{prefix}{map_run_id}/manifest.json"
    s3.put_object(Bucket=bucket, Key=manifest_key, Body=json.dumps(manifest, indent=2).encode())
    return {
        "MapRunArn": record.map_run_arn,
        "ResultWriterDetails": {"Bucket": bucket, "Key": manifest_key},
    }


def _patch_result_writer() -> None:
    from localstack.services.stepfunctions.asl.component.state.state_execution.state_map.result_writer.result_writer_decl import (  # noqa: E501
        ResultWriter,
    )
    from localstack.utils.patch import patch

    @patch(ResultWriter._eval_body, pass_target=False)
    def _eval_body(self: Any, env: Any) -> None:
        env.stack.pop()  # the iterations' outputs: written from the Map Run's own records
        env.stack.append(_write_results(self, env))


@hooks.on_infra_start()
def apply_patches() -> None:
    """Apply the patches once per process (LocalStack's ``on_infra_start`` hook)."""
    global _applied
    with _lock:
        if _applied:
            return
        _patch_fail_state()
        _patch_state_map()
        _patch_distributed_map()
        _patch_result_writer()
        _applied = True
        LOG.info("fanfit: Step Functions Distributed Map patches applied")
