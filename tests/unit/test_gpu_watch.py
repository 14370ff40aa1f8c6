"""WatchGpuJob (fanfit.jobs.gpu_watch) on a fake Batch client, its handler with events/, and the
client's refusal of a GPU job on a stack without the GPU worker (fanfit.client.check)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fanfit import errors
from fanfit.client.check import check_gpu_worker, stack_has_gpu_worker
from fanfit.jobs.gpu_watch import MAX_POLL_S, check_gpu_job

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0  # seconds since the epoch


class _Batch:
    """describe_jobs answers one job; terminate_job is recorded."""

    def __init__(self, job: dict[str, Any] | None) -> None:
        self.job = job
        self.terminated: list[dict[str, str]] = []

    def describe_jobs(self, jobs: list[str]) -> dict[str, Any]:
        return {"jobs": [] if self.job is None else [{"jobId": jobs[0], **self.job}]}

    def terminate_job(self, jobId: str, reason: str) -> dict[str, Any]:  # noqa: N803 - boto3's
        self.terminated.append({"jobId": jobId, "reason": reason})
        return {}


def _job(status: str, age_s: float, **extra: Any) -> dict[str, Any]:
    return {"status": status, "createdAt": int((NOW - age_s) * 1000), "jobQueue": "q", **extra}


def test_a_succeeded_job_has_ended():
    batch = _Batch(_job("SUCCEEDED", 120))
    out = check_gpu_job(batch, "j1", runnable_timeout_s=900, now_s=NOW)
    assert out.ended and out.status == "SUCCEEDED" and not batch.terminated


@pytest.mark.parametrize(("status", "age_s", "poll"), [
    ("RUNNABLE", 4, 1),  # a young job is checked again within a second or so
    ("RUNNING", 40, 10),  # a quarter of its age
    ("RUNNING", 4000, MAX_POLL_S),  # at most 30 s
    ("RUNNABLE", 895, 6),  # never far past the RUNNABLE deadline (900 s)
])  # fmt: skip
def test_a_job_still_waiting_or_running_is_checked_again(status, age_s, poll):
    # GIVEN a job that has not ended WHEN checked THEN not ended, next check in `poll` seconds
    batch = _Batch(_job(status, age_s))
    out = check_gpu_job(batch, "j1", runnable_timeout_s=900, now_s=NOW)
    assert not out.ended and out.status == status
    assert out.poll_seconds == poll
    assert not batch.terminated


def test_a_job_runnable_past_the_limit_is_terminated_and_named():
    # GIVEN a job RUNNABLE for 16 minutes with a 15-minute limit
    batch = _Batch(_job("RUNNABLE", 960))
    # WHEN checked THEN GpuJobStuckRunnableError with the likely causes, and the job terminated
    with pytest.raises(errors.GpuJobStuckRunnableError) as info:
        check_gpu_job(batch, "j1", runnable_timeout_s=900, now_s=NOW)
    message = str(info.value)
    for cause in ("GpuRunnableTimeoutSeconds=900", "vCPU quota", "ECR, ECS, S3 and CloudWatch Logs",
                  "Availability Zones", "docs/deploy.md"):  # fmt: skip
        assert cause in message
    assert batch.terminated == [{"jobId": "j1", "reason": message[:250]}]
    assert isinstance(info.value, errors.JobFailedError)


def test_a_retried_attempt_waits_again_from_the_last_attempts_end():
    # GIVEN a job created 20 minutes ago whose first attempt ended 1 minute ago, RUNNABLE again
    stopped = int((NOW - 60) * 1000)
    batch = _Batch(_job("RUNNABLE", 1200, attempts=[{"stoppedAt": stopped}]))
    # WHEN checked THEN it is not stuck yet
    out = check_gpu_job(batch, "j1", runnable_timeout_s=900, now_s=NOW)
    assert not out.ended and not batch.terminated


def test_a_failed_or_unknown_job_raises_with_its_reason():
    failed = _job("FAILED", 100, statusReason="Essential container in task exited",
                  container={"exitCode": 1, "logStreamName": "def/default/j1"})  # fmt: skip
    with pytest.raises(errors.GpuJobFailedError, match="exit code 1; log: /aws/batch/job"):
        check_gpu_job(_Batch(failed), "j1", runnable_timeout_s=900, now_s=NOW)
    with pytest.raises(errors.GpuJobFailedError, match="not known to AWS Batch"):
        check_gpu_job(_Batch(None), "j1", runnable_timeout_s=900, now_s=NOW)


def test_the_handler_checks_the_job_of_its_event(monkeypatch, lambda_context):
    # GIVEN the handler with events/watch_gpu_job.json and a job RUNNING for a minute
    monkeypatch.setenv("FANFIT_GPU_RUNNABLE_TIMEOUT_S", "900")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "Fanfit")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "watch_gpu_job_app", ROOT / "functions" / "watch_gpu_job" / "app.py"
    )
    assert spec and spec.loader
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    import time

    app.batch = _Batch(_job("RUNNING", 60) | {"createdAt": int((time.time() - 60) * 1000)})
    event = json.loads((ROOT / "events" / "watch_gpu_job.json").read_text())
    # WHEN invoked THEN it answers the job's status and when to look again
    out = app.lambda_handler(event, lambda_context())
    assert out["batch_job_id"] == event["batch_job_id"]
    assert out["status"] == "RUNNING" and out["ended"] is False and 1 <= out["poll_seconds"] <= 30
    # ... and an event that does not fit is refused before any call
    with pytest.raises(errors.InvalidEventError):
        app.lambda_handler({"batch_job_id": "../x"}, lambda_context())


class _Stack:
    name = "fanfit"
    endpoint_url = None


class _Client:
    """A client whose stack has (or lacks) the GPU worker; counts DescribeStacks."""

    def __init__(self, outputs: dict[str, str]) -> None:
        self.stack = _Stack()
        self.calls = 0
        client = self

        class _Cfn:
            def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803
                client.calls += 1
                return {"Stacks": [{"Outputs": [
                    {"OutputKey": k, "OutputValue": v} for k, v in outputs.items()
                ]}]}  # fmt: skip

        class _Session:
            def client(self, name: str, endpoint_url: str | None = None) -> Any:
                assert name == "cloudformation"
                return _Cfn()

        self.session = _Session()


def test_a_gpu_job_on_a_stack_without_the_gpu_worker_is_refused_naming_the_parameter():
    from fanfit.learners import as_learner_spec

    torch = as_learner_spec("TorchMLPRegressor")
    linear = as_learner_spec("LinearRegression")
    # GIVEN a stack deployed with the defaults (GpuWorkerEnabled=false)
    client = _Client({"GpuWorkerEnabled": "false"})
    # WHEN a Torch learner or GPU workers are asked for THEN GpuWorkerDisabledError names them
    with pytest.raises(errors.GpuWorkerDisabledError, match="EnableGpuWorker=true") as info:
        check_gpu_worker(client, learners={"ml_l": torch, "ml_m": linear})
    assert "ml_l='TorchMLPRegressor'" in str(info.value) and "ml_m" not in str(info.value)
    with pytest.raises(errors.GpuWorkerDisabledError, match="--gpu-workers"):
        check_gpu_worker(client, gpu_workers=2)
    assert client.calls == 1  # the outputs are read once per client
    # ... while a CPU job asks nothing of the stack, and a stack with the GPU worker takes it
    cpu = _Client({})
    check_gpu_worker(cpu, learners={"ml_l": linear, "ml_m": linear})
    assert cpu.calls == 0
    check_gpu_worker(_Client({"GpuWorkerEnabled": "true"}), learners={"ml_l": torch})


def test_an_older_stack_has_the_gpu_worker_when_it_names_a_queue():
    assert stack_has_gpu_worker({"GpuJobQueueArn": "arn:aws:batch:q"})
    assert not stack_has_gpu_worker({})
    assert not stack_has_gpu_worker({"GpuWorkerEnabled": "false", "GpuJobQueueArn": "x"})


def test_the_cost_of_a_gpu_job_counts_its_instance_time_from_the_check_that_saw_it_end():
    from fanfit.cost.history import batch_jobs_from_history

    def ev(i: int, kind: str, t: float, prev: int, **details: Any) -> dict[str, Any]:
        key = kind[0].lower() + kind[1:] + "EventDetails"
        return {"id": i, "type": kind, "timestamp": t, "previousEventId": prev, key: details}

    # GIVEN a batch:submitJob task (ends at once) and the WatchGpuJob checks of its job
    running = {"batch_job_id": "j1", "status": "RUNNING", "ended": False, "poll_seconds": 5}
    ended = {"batch_job_id": "j1", "status": "SUCCEEDED", "ended": True, "poll_seconds": 1,
             "started_at": 1_000_000, "stopped_at": 1_075_000}  # fmt: skip
    events = [
        ev(1, "TaskScheduled", 0, 0, resourceType="batch", resource="submitJob"),
        ev(2, "TaskSucceeded", 1, 1, resourceType="batch", resource="submitJob",
           output=json.dumps({"JobId": "j1", "JobName": "fanfit-crossfit"})),
        ev(3, "TaskSucceeded", 40, 2, resourceType="lambda", resource="invoke",
           output=json.dumps({"StatusCode": 200, "Payload": running})),
        ev(4, "TaskSucceeded", 90, 3, resourceType="lambda", resource="invoke",
           output=json.dumps({"StatusCode": 200, "Payload": ended})),
    ]  # fmt: skip
    # WHEN read THEN the job ran 75 s (its startedAt to stoppedAt), not the task's 1 s
    assert batch_jobs_from_history(events) == [{"instance_s": 75.0, "instance_type": None}]
