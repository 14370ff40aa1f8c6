"""WatchGpuJob: one check of a GPU worker's AWS Batch job, for the state machines' polling loop.

The state machines submit a GPU worker's job with ``batch:submitJob`` (not ``.sync``), then loop
``check -> ended? -> wait poll_seconds -> check``. ``.sync`` waits until the job ends, whatever its
status: a job that stays RUNNABLE because no instance can start for it (no G-instance vCPU quota, no
route from the subnets to ECR, ECS, S3 and CloudWatch Logs, an instance type the subnets' zones do
not offer) would wait until the job's timeout, hours later, with no hint why. One check
(:func:`check_gpu_job`) reads the job with ``batch:DescribeJobs`` and

- returns ``ended=True`` when it SUCCEEDED, with its ``started_at`` and ``stopped_at`` (what
  :mod:`fanfit.cost` counts its instance time from: the ``batch:submitJob`` task itself ends at
  once);
- raises :class:`~fanfit.errors.GpuJobFailedError` when it FAILED (its status reason, exit code and
  log stream in the message);
- terminates it and raises :class:`~fanfit.errors.GpuJobStuckRunnableError` when it has waited to
  start (SUBMITTED, PENDING, RUNNABLE) longer than ``runnable_timeout_s`` (the template's
  ``GpuRunnableTimeoutSeconds``), counted from its creation or from its last attempt's end (a
  retried attempt waits again);
- else returns ``ended=False`` and the seconds to the next check: a quarter of the time the job has
  existed, between 1 and :data:`MAX_POLL_S` (a short job is seen soon after it ends, a long one costs
  few state transitions), and never past the RUNNABLE deadline.

The same code runs on AWS and on the local stack, whose Batch provider keeps a job RUNNABLE while no
compute environment of its queue is ENABLED (``fanfit_localstack.batch``).
"""

from __future__ import annotations

import math
import time
from typing import Any

from fanfit.errors import GpuJobFailedError, GpuJobStuckRunnableError
from fanfit.jobs.documents.events import WatchGpuJobOutput

__all__ = ["MAX_POLL_S", "WAITING_STATUSES", "check_gpu_job", "stuck_message"]

#: Longest wait between two checks, seconds.
MAX_POLL_S = 30
#: Batch statuses of a job that has not started yet.
WAITING_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE")


def stuck_message(job_id: str, waited_s: float, runnable_timeout_s: float, queue: str) -> str:
    """The message of :class:`~fanfit.errors.GpuJobStuckRunnableError`: what waited, how long, and
    the likely causes with where to look.

    Parameters
    ----------
    job_id : str
        The Batch job id.
    waited_s, runnable_timeout_s : float
        Seconds the job waited to start, and the limit (``GpuRunnableTimeoutSeconds``).
    queue : str
        The job queue (ARN or name).
    """
    return (
        f"the GPU worker's AWS Batch job {job_id} on queue {queue} stayed RUNNABLE for "
        f"{waited_s:,.0f} s, longer than GpuRunnableTimeoutSeconds={runnable_timeout_s:,.0f} s: no "
        "instance started for it; it was terminated. Likely causes: the account's vCPU quota "
        "for G instances ('Running On-Demand G and VT instances', Service Quotas) is 0 or too low "
        "for GpuInstanceTypes; the subnets in BatchSubnetIds have no route to ECR, ECS, S3 and "
        "CloudWatch Logs (add VPC endpoints or a NAT gateway); an instance type of "
        "GpuInstanceTypes is not offered in the subnets' Availability Zones; the compute "
        "environment is disabled or INVALID (see its statusReason in the AWS Batch console). "
        "docs/deploy.md lists what the GPU worker needs."
    )


def _failed_message(job: dict[str, Any]) -> str:
    container = job.get("container") or {}
    parts = [f"the GPU worker's AWS Batch job {job.get('jobId')} ended {job.get('status')}"]
    if job.get("statusReason"):
        parts.append(f"reason: {job['statusReason']}")
    if container.get("exitCode") is not None:
        parts.append(f"exit code {container['exitCode']}")
    if container.get("logStreamName"):
        parts.append(f"log: /aws/batch/job stream {container['logStreamName']}")
    return "; ".join(parts)


def check_gpu_job(
    batch: Any,
    batch_job_id: str,
    *,
    runnable_timeout_s: float,
    now_s: float | None = None,
) -> WatchGpuJobOutput:
    """Check a GPU worker's Batch job once (see the module doc).

    Parameters
    ----------
    batch : botocore client
        An AWS Batch client.
    batch_job_id : str
        The job id ``batch:submitJob`` returned.
    runnable_timeout_s : float
        Longest a job may wait to start, seconds (``GpuRunnableTimeoutSeconds``).
    now_s : float, optional
        The current time, seconds since the epoch (default ``time.time()``).

    Returns
    -------
    WatchGpuJobOutput
        ``status``, ``ended`` and ``poll_seconds`` (seconds to the next check, in [1, 30]).

    Raises
    ------
    fanfit.errors.GpuJobFailedError
        The job FAILED, or Batch does not know it.
    fanfit.errors.GpuJobStuckRunnableError
        The job waited to start longer than ``runnable_timeout_s``; it was terminated first.
    """
    now = time.time() if now_s is None else now_s
    jobs = batch.describe_jobs(jobs=[batch_job_id]).get("jobs", [])
    if not jobs:
        raise GpuJobFailedError(
            f"the GPU worker's AWS Batch job {batch_job_id} is not known to AWS Batch (removed, "
            "or submitted in another account or region)"
        )
    job = jobs[0]
    status = str(job.get("status", ""))
    if status == "SUCCEEDED":
        started, stopped = job.get("startedAt"), job.get("stoppedAt")
        return WatchGpuJobOutput(
            batch_job_id=batch_job_id,
            status=status,
            ended=True,
            poll_seconds=1,
            started_at=int(started) if started is not None else None,
            stopped_at=int(stopped) if stopped is not None else None,
        )
    if status == "FAILED":
        raise GpuJobFailedError(_failed_message(job))
    created = float(job.get("createdAt", now * 1000)) / 1000
    if status in WAITING_STATUSES:
        # a retried attempt waits again: count from the end of the last attempt
        stopped = [
            float(a["stoppedAt"]) / 1000 for a in job.get("attempts", []) if a.get("stoppedAt")
        ]
        waiting_since = max([created, *stopped])
        waited = max(0.0, now - waiting_since)
        if waited > runnable_timeout_s:
            message = stuck_message(
                batch_job_id, waited, runnable_timeout_s, str(job.get("jobQueue", ""))
            )
            batch.terminate_job(jobId=batch_job_id, reason=message[:250])
            raise GpuJobStuckRunnableError(message)
        to_deadline = runnable_timeout_s - waited
    else:
        to_deadline = math.inf
    age = max(0.0, now - created)
    poll = min(MAX_POLL_S, max(1.0, age / 4), max(1.0, to_deadline + 1))
    return WatchGpuJobOutput(
        batch_job_id=batch_job_id, status=status, ended=False, poll_seconds=int(math.ceil(poll))
    )
