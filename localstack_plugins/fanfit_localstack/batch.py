"""AWS Batch for the local stack: moto's Batch API, with jobs run as local processes, not containers.

Community LocalStack has no Batch. This module gives it one through LocalStack's own extension
points:

- a service provider ``batch:local`` (``PROVIDER_OVERRIDE_BATCH=local``): every operation falls
  through to moto's Batch backend (LocalStack's ``moto-ext``), as the ``dynamodb:moto`` provider does.
  moto validates compute environments as AWS does (the service role, the instance profile, subnets and
  security groups must exist; instance types must be real);
- moto runs a submitted job's container with Docker, which these machines do not have. The job's
  ``run`` is replaced (:func:`apply_patches`) by one that runs the container command as a process on
  the host: ``python`` as the command's first word is ``$FANFIT_BATCH_PYTHON`` (the client's
  interpreter, which has PyTorch), ``Ref::name`` placeholders take the job's ``parameters`` as on
  AWS, the environment is the job definition's plus the container overrides plus the local endpoint
  and test credentials (on AWS the job role gives credentials). Where cgroup limits apply (v1, or v2
  delegated: :mod:`fanfit_localstack.cgroups`) the process gets the job's ``VCPU`` and ``MEMORY`` (scaled by
  ``$FANFIT_BATCH_VCPU_SCALE``, default ``$FANFIT_LAMBDA_VCPU_SCALE``); a ``GPU`` requirement uses
  the host's GPU when one is visible (``nvidia-smi``), else the job runs on the CPU, as the worker
  image's code allows. As on AWS, a job stays RUNNABLE while its queue is DISABLED or no compute
  environment of it is ENABLED (``batch:UpdateComputeEnvironment state=DISABLED`` holds a stack's GPU
  jobs, as a missing vCPU quota or route does on AWS), until it is terminated or one is enabled
  again. The job's status goes SUBMITTED -> RUNNABLE -> STARTING -> RUNNING ->
  SUCCEEDED or FAILED with its exit code, and its output goes to CloudWatch Logs
  (``/aws/batch/job``, stream ``<job definition>/default/<job id>``) as on AWS. The attempt timeout
  (``attemptDurationSeconds``) is enforced;
- CloudFormation resource providers for ``AWS::Batch::ComputeEnvironment``, ``AWS::Batch::JobQueue``
  and ``AWS::Batch::JobDefinition`` (entry-point group ``localstack.cloudformation.resource_providers``),
  which call the Batch API above, so ``sam deploy`` of the project's template creates them.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import shutil
import subprocess
import threading
import time
import uuid
from typing import Any

from localstack.services.cloudformation.resource_provider import (
    CloudFormationResourceProviderPlugin,
    OperationStatus,
    ProgressEvent,
    ResourceProvider,
    ResourceRequest,
)
from localstack.services.plugins import Service, ServiceLifecycleHook, aws_provider

from fanfit_localstack import cgroups

LOG = logging.getLogger(__name__)

_lock = threading.Lock()
_applied = False
#: Longest output kept per job for CloudWatch Logs, characters.
_MAX_LOG_CHARS = 1_000_000


# ------------------------------------------------------------------------------ service provider


class LocalBatchProvider(ServiceLifecycleHook):
    """Batch served by moto's backend; jobs run as local processes (see :func:`apply_patches`)."""

    service = "batch"

    def on_after_init(self) -> None:
        apply_patches()


def _moto_dispatch_table(provider: object) -> dict[str, Any]:
    """Every Batch operation to moto (LocalStack has no typed Batch API for a provider to subclass)."""
    from localstack.aws.spec import load_service
    from localstack.services.moto import call_moto

    def forward(context: Any, request: Any) -> Any:
        return call_moto(context)

    return dict.fromkeys(load_service("batch").operation_names, forward)


@aws_provider(api="batch", name="local")
def batch_local() -> Service:
    """The ``batch:local`` service plugin."""
    apply_patches()
    return Service.for_provider(LocalBatchProvider(), dispatch_table_factory=_moto_dispatch_table)


# ---------------------------------------------------------------------------- local job process


def _gpu_visible() -> bool:
    return (
        shutil.which("nvidia-smi") is not None
        and subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, check=False, timeout=10
        ).returncode
        == 0
    )


def _requirements(job: Any) -> dict[str, str]:
    reqs = job._get_container_property("resourceRequirements", []) or []
    return {str(r.get("type", "")).upper(): str(r.get("value", "")) for r in reqs}


def _command(job: Any) -> list[str]:
    command = job._add_parameters_to_command(job._get_container_property("command", []) or [])
    if not command:
        raise ValueError("the job definition has no command")
    if command[0] in ("python", "python3") or command[0].startswith("python3."):
        command = [os.environ.get("FANFIT_BATCH_PYTHON") or shutil.which("python3") or "python3",
                   *command[1:]]  # fmt: skip
    return [str(c) for c in command]


def _environment(job: Any) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "CUDA_VISIBLE_DEVICES")
    }
    endpoint = os.environ.get("LOCALSTACK_HOST", "127.0.0.1:4566")
    env.update(
        {
            "AWS_ENDPOINT_URL": f"http://{endpoint}",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": job.job_definition._region,
            "AWS_REGION": job.job_definition._region,
            "AWS_BATCH_JOB_ID": job.job_id,
            "AWS_BATCH_JQ_NAME": job.job_queue.name,
            "AWS_BATCH_CE_NAME": "local",
            "PYTHONUNBUFFERED": "1",
        }
    )
    for item in job._get_container_property("environment", []) or []:
        env[str(item["name"])] = str(item["value"])
    if "GPU" in _requirements(job) and not _gpu_visible():
        env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU here: the worker runs on the CPU
    return env


def _vcpu_scale() -> float:
    raw = os.environ.get("FANFIT_BATCH_VCPU_SCALE")
    if raw:
        try:
            value = float(raw)
            if 0 < value <= 64:
                return value
        except ValueError:
            pass
        LOG.warning("fanfit: ignoring FANFIT_BATCH_VCPU_SCALE=%r", raw)
    return cgroups.vcpu_scale()


def _put_logs(job: Any, text: str) -> None:
    try:
        logs = job._log_backend
        group, stream = job._log_group, job._stream_name
        with contextlib.suppress(Exception):  # the group exists
            logs.create_log_group(group, {})
        logs.create_log_stream(group, stream)
        now = int(time.time() * 1000)
        events = [{"timestamp": now, "message": line} for line in text.splitlines()[-10_000:]]
        if events:
            logs.put_log_events(group, stream, events)
        job.log_stream_name = stream
    except Exception as exc:  # noqa: BLE001 - logs are a convenience, never fail the job
        LOG.debug("fanfit: could not write Batch job logs: %s", exc)


#: Longest a job is held RUNNABLE by a disabled queue or compute environment, seconds (a bound, not a
#: feature: the state machine's watcher fails it long before).
_MAX_HOLD_S = 6 * 3600.0
#: Seconds between two looks at the queue while a job is held.
_HOLD_POLL_S = 0.5


def _can_start(job: Any) -> bool:
    """Whether the job's queue would start it now: the queue ENABLED and one of its compute
    environments ENABLED (AWS Batch leaves a job RUNNABLE otherwise)."""
    queue = job.job_queue
    if str(getattr(queue, "state", "ENABLED")).upper() != "ENABLED":
        return False
    environments = getattr(queue, "environments", None) or []
    return not environments or any(
        str(getattr(env, "state", "ENABLED")).upper() == "ENABLED" for env in environments
    )


def _hold_runnable(job: Any) -> bool:
    """Keep the job RUNNABLE until its queue can start it; False when it was terminated (or held
    past :data:`_MAX_HOLD_S`) meanwhile, and is then marked stopped."""
    deadline = time.monotonic() + _MAX_HOLD_S
    while not _can_start(job):
        if job.stop or time.monotonic() > deadline:
            if job.job_stopped_reason is None:
                job.job_stopped_reason = "held RUNNABLE too long by a disabled queue"
            job._mark_stopped(success=False)
            return False
        time.sleep(_HOLD_POLL_S)
    return not job.stop


def _run_local(job: Any) -> None:
    """Replacement of moto's ``Job.run``: run the container command as a host process."""
    from moto.batch.utils import JobStatus

    groups = None
    try:
        job.status = JobStatus.RUNNABLE
        if job.depends_on and not job._wait_for_dependencies():
            return
        if not _hold_runnable(job):
            if not job.job_stopped:
                job._mark_stopped(success=False)
            return
        job.status = JobStatus.STARTING
        command, env = _command(job), _environment(job)
        reqs = _requirements(job)
        memory_mb = int(float(reqs.get("MEMORY", "2048")))
        vcpus = float(reqs.get("VCPU", "1")) * _vcpu_scale()
        # thread pools sized to the job's cores, not the host's (as the Lambda executor does)
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(name, str(max(1, math.ceil(vcpus))))
        groups = cgroups.create(f"batch-{job.job_id}", memory_mb, vcpus=vcpus)
        job.job_started_at = datetime.datetime.now()
        job._start_attempt()
        job.status = JobStatus.RUNNING
        timeout = job._get_attempt_duration()
        proc = subprocess.Popen(  # noqa: S603 - the job definition's command, as Batch runs it
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if groups is not None:  # the process and its children get the job's CPU and memory
            for tasks in (groups.memory / "cgroup.procs", groups.cpu / "cgroup.procs"):
                try:
                    tasks.write_text(str(proc.pid))
                except OSError as exc:
                    LOG.warning("fanfit: Batch job %s runs without limits: %s", job.job_id, exc)
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
            job.job_stopped_reason = "Job attempt duration exceeded timeout"
        if job.stop:
            proc.kill()
        job.exit_code = proc.returncode
        _put_logs(job, (output or "")[-_MAX_LOG_CHARS:])
        if proc.returncode != 0 and job.job_stopped_reason is None:
            job.job_stopped_reason = "Essential container in task exited"
        job._mark_stopped(success=proc.returncode == 0)
    except Exception as exc:  # noqa: BLE001 - any failure to start is the job's failure, as on AWS
        LOG.warning("fanfit: Batch job %s could not run: %s", job.job_id, exc)
        job.job_stopped_reason = f"CannotStartContainerError: {exc}"
        job._mark_stopped(success=False)
    finally:
        if groups is not None:
            groups.remove()


class _LocalStackIam:
    """The two IAM lookups moto's Batch backend makes, answered by LocalStack's IAM service.

    moto checks that a compute environment's service role and instance profile exist in moto's own
    IAM backend; LocalStack keeps IAM in its own store, where CloudFormation created them.
    """

    def __init__(self, account_id: str, region: str) -> None:
        from localstack.aws.connect import connect_to

        self._iam = connect_to(aws_access_key_id=account_id, region_name=region).iam

    def get_role_by_arn(self, arn: str) -> Any:
        from botocore.exceptions import ClientError
        from moto.iam.exceptions import NotFoundException as IAMNotFoundException

        try:
            return self._iam.get_role(RoleName=arn.rsplit("/", 1)[-1])["Role"]
        except ClientError as exc:
            raise IAMNotFoundException(f"Role {arn} not found") from exc

    def get_instance_profiles(self) -> list[Any]:
        profiles = []
        for page in self._iam.get_paginator("list_instance_profiles").paginate():
            for p in page["InstanceProfiles"]:
                profiles.append(
                    type("Profile", (), {"arn": p["Arn"], "name": p["InstanceProfileName"]})
                )
        return profiles


def apply_patches() -> None:
    """Make moto's Batch jobs run as local processes and see LocalStack's IAM (once per process)."""
    global _applied
    with _lock:
        if _applied:
            return
        from moto.batch.models import BatchBackend, Job

        Job.run = _run_local  # type: ignore[method-assign]
        BatchBackend.iam_backend = property(  # type: ignore[method-assign,assignment]
            lambda self: _LocalStackIam(self.account_id, self.region_name)
        )
        _applied = True
        LOG.info("fanfit: Batch jobs run as local processes")


# ------------------------------------------------------------------------- CloudFormation types


_KEEP_KEYS = {"Parameters", "Tags"}  # user-defined keys: passed as they are


def _api_case(value: Any, parent: str = "") -> Any:
    """CloudFormation's PascalCase properties to the Batch API's camelCase, recursively."""
    if isinstance(value, list):
        return [_api_case(v, parent) for v in value]
    if isinstance(value, dict):
        if parent in _KEEP_KEYS:
            return dict(value)
        return {k[:1].lower() + k[1:]: _api_case(v, k) for k, v in value.items()}
    return value


def _unique_name(request: ResourceRequest, explicit: str | None) -> str:
    if explicit:
        return explicit
    stack = request.stack_name[:40]
    return f"{stack}-{request.logical_resource_id[:40]}-{uuid.uuid4().hex[:8]}"


def _done(request: ResourceRequest, model: dict[str, Any]) -> ProgressEvent:
    return ProgressEvent(
        status=OperationStatus.SUCCESS, resource_model=model, custom_context=request.custom_context
    )


class ComputeEnvironmentProvider(ResourceProvider[dict]):
    """``AWS::Batch::ComputeEnvironment``: Ref is the ARN."""

    TYPE = "AWS::Batch::ComputeEnvironment"
    SCHEMA = {
        "typeName": TYPE,
        "primaryIdentifier": ["/properties/ComputeEnvironmentArn"],
        "readOnlyProperties": ["/properties/ComputeEnvironmentArn"],
        "createOnlyProperties": ["/properties/ComputeEnvironmentName", "/properties/Type"],
    }

    def create(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        name = _unique_name(request, model.get("ComputeEnvironmentName"))
        args = _api_case({k: v for k, v in model.items() if k != "ComputeEnvironmentName"})
        args.pop("replaceComputeEnvironment", None)
        args.pop("updatePolicy", None)
        out = request.aws_client_factory.batch.create_compute_environment(
            computeEnvironmentName=name, **args
        )
        model["ComputeEnvironmentName"] = name
        model["ComputeEnvironmentArn"] = out["computeEnvironmentArn"]
        return _done(request, model)

    def delete(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        client = request.aws_client_factory.batch
        try:
            client.update_compute_environment(
                computeEnvironment=model["ComputeEnvironmentArn"], state="DISABLED"
            )
            client.delete_compute_environment(computeEnvironment=model["ComputeEnvironmentArn"])
        except client.exceptions.ClientException as exc:
            LOG.debug("fanfit: compute environment already gone: %s", exc)
        return _done(request, model)

    def read(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        return _done(request, request.desired_state)


class JobQueueProvider(ResourceProvider[dict]):
    """``AWS::Batch::JobQueue``: Ref is the ARN."""

    TYPE = "AWS::Batch::JobQueue"
    SCHEMA = {
        "typeName": TYPE,
        "primaryIdentifier": ["/properties/JobQueueArn"],
        "readOnlyProperties": ["/properties/JobQueueArn"],
        "createOnlyProperties": ["/properties/JobQueueName"],
    }

    def create(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        name = _unique_name(request, model.get("JobQueueName"))
        args = _api_case({k: v for k, v in model.items() if k != "JobQueueName"})
        args["priority"] = int(args["priority"])
        for item in args.get("computeEnvironmentOrder", []):
            item["order"] = int(item["order"])
        out = request.aws_client_factory.batch.create_job_queue(jobQueueName=name, **args)
        model["JobQueueName"] = name
        model["JobQueueArn"] = out["jobQueueArn"]
        return _done(request, model)

    def delete(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        client = request.aws_client_factory.batch
        try:
            client.update_job_queue(jobQueue=model["JobQueueArn"], state="DISABLED")
            client.delete_job_queue(jobQueue=model["JobQueueArn"])
        except client.exceptions.ClientException as exc:
            LOG.debug("fanfit: job queue already gone: %s", exc)
        return _done(request, model)

    def read(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        return _done(request, request.desired_state)


class JobDefinitionProvider(ResourceProvider[dict]):
    """``AWS::Batch::JobDefinition``: Ref is the ARN (``...:job-definition/<name>:<revision>``)."""

    TYPE = "AWS::Batch::JobDefinition"
    SCHEMA = {
        "typeName": TYPE,
        "primaryIdentifier": ["/properties/JobDefinitionArn"],
        "readOnlyProperties": ["/properties/JobDefinitionArn"],
        "createOnlyProperties": ["/properties/JobDefinitionName"],
    }

    def create(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        name = _unique_name(request, model.get("JobDefinitionName"))
        args = _api_case({k: v for k, v in model.items() if k != "JobDefinitionName"})
        for req in args.get("containerProperties", {}).get("resourceRequirements", []):
            req["value"] = str(req["value"])
        if "timeout" in args:
            args["timeout"] = {k: int(v) for k, v in args["timeout"].items()}
        if "retryStrategy" in args and "attempts" in args["retryStrategy"]:
            args["retryStrategy"]["attempts"] = int(args["retryStrategy"]["attempts"])
        out = request.aws_client_factory.batch.register_job_definition(
            jobDefinitionName=name, **args
        )
        model["JobDefinitionName"] = name
        model["JobDefinitionArn"] = out["jobDefinitionArn"]
        return _done(request, model)

    def delete(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        model = request.desired_state
        client = request.aws_client_factory.batch
        try:
            client.deregister_job_definition(jobDefinition=model["JobDefinitionArn"])
        except client.exceptions.ClientException as exc:
            LOG.debug("fanfit: job definition already gone: %s", exc)
        return _done(request, model)

    def read(self, request: ResourceRequest[dict]) -> ProgressEvent[dict]:
        return _done(request, request.desired_state)


class ComputeEnvironmentPlugin(CloudFormationResourceProviderPlugin):
    name = "AWS::Batch::ComputeEnvironment"

    def __init__(self) -> None:
        self.factory: type[ResourceProvider] | None = None

    def load(self) -> None:
        self.factory = ComputeEnvironmentProvider


class JobQueuePlugin(CloudFormationResourceProviderPlugin):
    name = "AWS::Batch::JobQueue"

    def __init__(self) -> None:
        self.factory: type[ResourceProvider] | None = None

    def load(self) -> None:
        self.factory = JobQueueProvider


class JobDefinitionPlugin(CloudFormationResourceProviderPlugin):
    name = "AWS::Batch::JobDefinition"

    def __init__(self) -> None:
        self.factory: type[ResourceProvider] | None = None

    def load(self) -> None:
        self.factory = JobDefinitionProvider
