"""What the handles of both job kinds share: polling the execution, its failure, its cost and record,
cancelling it.

:class:`JobHandle` is the base of :class:`fanfit.client.estimate.EstimateJob` and
:class:`fanfit.client.train.TrainJob`; :func:`collect_cost` counts either kind's cost;
:func:`cancel_job` stops a job (``states:StopExecution``, ``batch:TerminateJob`` of its GPU worker
jobs, found on the stack's job queue by the job id their task carries, its partition released as
the failure branch's Release function releases it, :func:`fanfit.jobs.sharing.release_job`, and
its record's status set to ``CANCELLED``); :func:`record_submission` records a job as it starts.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from typing import TYPE_CHECKING, Any, Protocol, Self
from urllib.parse import quote

from fanfit import errors, storage
from fanfit.client.stack import Stack
from fanfit.jobs.documents.estimate import EstimateResultDoc
from fanfit.jobs.documents.record import JobRecord
from fanfit.jobs.states import THROTTLE_RETRY, throttle_wait_bound_s

if TYPE_CHECKING:
    from fanfit.cost import JobCost
    from fanfit.prices import PriceTable

__all__ = [
    "BATCH_ACTIVE_STATUSES",
    "JobHandle",
    "StackClient",
    "batch_jobs_of",
    "batch_task",
    "cancel_job",
    "collect_cost",
    "console_url",
    "cost_or_none",
    "record_submission",
    "stack_capacity",
    "stop_timed_out",
]

log = logging.getLogger("fanfit")

#: AWS Batch statuses of a job that has not ended (TerminateJob stops each of them).
BATCH_ACTIVE_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING")


class StackClient(Protocol):
    """What job handles and job submission use of a :class:`fanfit.client.Client`: its stack, its
    AWS clients, its job store and records (so that they need not import the client itself)."""

    stack: Stack
    session: Any
    local: bool
    s3: Any
    sfn: Any
    store: storage.JobStore
    records: storage.JobRecords

    def check_limits(self, kind: str, *, n_rows: int, n_cols: int) -> dict[str, float]:
        """:meth:`fanfit.client.Client.check_limits`."""
        ...


#: Error names a failed execution may carry, mapped to the exception the client raises.
_ERRORS: dict[str, type[errors.FanfitError]] = {
    "InvalidJobError": errors.InvalidJobError,
    "InvalidDataError": errors.InvalidDataError,
    "InvalidLearnerError": errors.InvalidLearnerError,
    "InvalidFoldsError": errors.InvalidFoldsError,
    # a client-inputs job's wait for its client timed out (orchestrator/estimate.asl.json)
    "ClientTimeoutError": errors.ClientTimeoutError,
}


class JobHandle:
    """What estimate and train job handles share: ``status()``, ``wait()``, ``cost()``.

    Parameters
    ----------
    client : StackClient
        A :class:`fanfit.client.Client`.
    job_id : str
    execution_arn : str
        The job's Step Functions execution.
    """

    #: ``'estimate'`` or ``'train'``: what the progress bar counts (shards or rounds).
    kind = "estimate"
    #: Error names a failed execution may carry, mapped to the exception :meth:`wait` raises.
    _ERRORS: dict[str, type[errors.FanfitError]] = _ERRORS
    #: Longest pause between two polls of the execution, seconds.
    _MAX_POLL_S = 2.0
    #: Longest pause between two polls as a share of the time waited so far (at least
    #: :attr:`_MIN_POLL_CAP_S`): a job's end is seen after at most about 2 % of its wall time.
    _POLL_SHARE = 0.02
    _MIN_POLL_CAP_S = 0.25

    def __init__(self, client: StackClient, job_id: str, execution_arn: str) -> None:
        self.client = client
        self.job_id = job_id
        self.execution_arn = execution_arn

    def status(self) -> str:
        """The execution's status: RUNNING, SUCCEEDED, FAILED, TIMED_OUT or ABORTED (also of a job
        whose execution a restarted local stack no longer has, and which had not ended); CANCELLED
        once the job was cancelled (:meth:`cancel`; its record says so). A job seen TIMED_OUT gets
        its stop marker here (:func:`stop_timed_out`: a timeout runs no failure branch)."""
        status = str(self._describe_execution()["status"])
        if status == "TIMED_OUT":
            stop_timed_out(self.client, self.job_id, self.execution_arn, self.kind)
        if status != "RUNNING" and self._cancelled():
            return storage.JOB_STATUS_CANCELLED
        return status

    @property
    def console_url(self) -> str | None:
        """The execution's page in the AWS Step Functions console; None on the local stack."""
        if self.client.local:
            return None
        return console_url(self.execution_arn)

    def cancel(self) -> dict[str, Any]:
        """Cancel the job: stop its execution (``states:StopExecution``), terminate its GPU worker
        jobs (``batch:TerminateJob``), release its partition of the shared capacity as the
        failure branch does (:func:`fanfit.jobs.sharing.release_job`), write a train job's stop
        marker (a running DS-Sync segment's workers stop on it,
        :func:`fanfit.jobs.train.shard.stop_job`), and set its record's status to
        ``CANCELLED``. A job that has already ended is left as it is.

        Returns
        -------
        dict
            ``job_id``, ``status``, ``stopped``, ``batch_jobs_terminated``,
            ``partition_released`` (:func:`fanfit.client.lifecycle.cancel_job`).

        Raises
        ------
        botocore.exceptions.ClientError
            A call was refused (e.g. AccessDenied).
        """
        return cancel_job(self.client, self.job_id, self.execution_arn)

    def _cancelled(self) -> bool:
        """Whether the job's record says it was cancelled."""
        try:
            got = self.client.records.get(self.job_id) or {}
        except Exception:  # a record that cannot be read: not known to be cancelled
            return False
        return got.get("status") == storage.JOB_STATUS_CANCELLED

    def wait(
        self, timeout: float = 3600.0, poll: float = 0.25, *, progress: bool | str | Any = False
    ) -> Self:
        """Poll until the execution ends (at most ``timeout`` seconds).

        The pause between polls starts at ``poll`` seconds and grows by half each time, to at most 2 % of the time waited so far (at least
        0.25 s, at most 2 s for an estimate or 1 s for a train job): a job's end is seen within
        about 2 % of its wall time, a small job's within a quarter second; the loop makes at least one poll (``timeout=0``: is it over
        now?) and at most ``timeout / poll + 1``, whatever the clock does.

        Parameters
        ----------
        timeout : float
            Seconds.
        poll : float
            First pause, seconds.
        progress : bool or str
            Show live progress on stderr (:mod:`fanfit.progress`): True for a rich bar on a
            terminal or in Jupyter and plain lines otherwise, ``'plain'`` or ``'rich'`` for one of
            them; a snapshot is read at most every second (pauses are then at most 1 s).

        Returns
        -------
        self

        Raises
        ------
        fanfit.errors.InvalidJobError (or a subclass)
            If the job was rejected; the message names the option or column.
        fanfit.errors.JobCancelledError
            If the job was cancelled (:meth:`cancel`).
        fanfit.errors.WaitTimeoutError
            If the job still runs after ``timeout`` seconds (it goes on running).
        fanfit.errors.JobFailedError
            If the execution failed otherwise, timed out or was aborted. A timed-out job first
            gets its stop marker (:func:`stop_timed_out`), so that its running workers stop.
        """
        from fanfit.progress import PROGRESS_INTERVAL_S, ProgressTracker, make_renderer

        renderer = make_renderer(progress)
        tracker = ProgressTracker(self, self.kind) if renderer is not None else None
        max_poll = (
            self._MAX_POLL_S if tracker is None else min(self._MAX_POLL_S, PROGRESS_INTERVAL_S)
        )
        started = time.monotonic()
        deadline = started + timeout
        shown_at = -math.inf
        try:
            for attempt in range(int(max(timeout, 0.0) / max(poll, 1e-3)) + 1):
                if attempt and time.monotonic() >= deadline:  # poll at least once
                    break
                desc = self._describe_execution()
                status = desc["status"]
                due = status != "RUNNING" or time.monotonic() - shown_at >= PROGRESS_INTERVAL_S
                if renderer is not None and tracker is not None and due:
                    shown_at = time.monotonic()
                    renderer.update(tracker.snapshot(desc))
                if status == "SUCCEEDED":
                    return self
                if status == "TIMED_OUT":
                    stop_timed_out(self.client, self.job_id, self.execution_arn, self.kind)
                if status != "RUNNING":
                    raise self._failure(desc)
                time.sleep(poll)
                waited = time.monotonic() - started
                cap = min(max_poll, max(self._MIN_POLL_CAP_S, self._POLL_SHARE * waited))
                poll = min(poll * 1.5, cap)
        finally:
            if renderer is not None:
                renderer.close()
        raise errors.WaitTimeoutError(
            f"job {self.job_id} did not end within {timeout:g} s; it is still running"
        )

    def _describe_execution(self) -> dict[str, Any]:
        """DescribeExecution of the job's execution; when the execution is gone (a restarted
        local stack keeps its job records, not its executions), the status, error and cause that
        the job record holds of a job that ended, else ``ABORTED`` with a cause that says to
        resume it."""
        sfn = self.client.sfn
        try:
            desc: dict[str, Any] = sfn.describe_execution(executionArn=self.execution_arn)
            return desc
        except sfn.exceptions.ExecutionDoesNotExist:
            record = self.client.records.get(self.job_id) or {}
        if record.get("status") in ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"):
            return {key: record[key] for key in ("status", "error", "cause") if record.get(key)}
        return {
            "status": "ABORTED",
            "error": "ExecutionDoesNotExist",
            "cause": f"its execution {self.execution_arn} no longer exists (a restarted local "
            f"stack keeps job records, not executions); run `fanfit resume {self.job_id}`",
        }

    def _failure(self, desc: dict[str, Any]) -> errors.FanfitError:
        name = desc.get("error") or desc["status"]
        cause = desc.get("cause") or ""
        try:
            message = json.loads(cause).get("errorMessage", cause)
        except (ValueError, AttributeError):
            message = cause
        if name == "JobCancelledError" or self._cancelled():
            return errors.JobCancelledError(
                f"job {self.job_id} was cancelled (status CANCELLED); it has no result"
            )
        if name == errors.LAMBDA_THROTTLE_ERROR or errors.LAMBDA_THROTTLE_ERROR in message:
            bound = throttle_wait_bound_s()
            return errors.LambdaThrottledError(
                f"job {self.job_id} failed: Lambda kept refusing a step for lack of concurrency "
                f"({errors.LAMBDA_THROTTLE_ERROR}) through {int(THROTTLE_RETRY['max_attempts'])} "
                f"retries (up to {bound:.0f} s of waiting): {message}. Raise the account's "
                "'Concurrent executions' quota or run fewer jobs at once, then "
                f"`fanfit resume {self.job_id}`"
            )
        if name == "ShardFailedError":
            return self._shard_failure(message)
        exc_type = self._ERRORS.get(name, errors.JobFailedError)
        if exc_type is errors.JobFailedError:
            return errors.JobFailedError(
                f"job {self.job_id} ended {desc['status']}: {name}: {message}"
            )
        return exc_type(message)

    def _shard_failure(self, message: str) -> errors.ShardFailedError:
        """The :class:`~fanfit.errors.ShardFailedError` of a job whose shard kept failing: the shard
        and its last error from the job record (``failed_shard``, ``shard_error``), else from the
        execution's cause."""
        record = JobRecord(job_id=self.job_id)
        try:
            got = self.client.records.get(self.job_id)
            if got is not None:
                record = JobRecord.parse(got, source=f"the job record of {self.job_id}")
        except Exception as exc:  # a record that cannot be read: the cause still names the shard
            log.debug("cannot read the record of job %s: %s", self.job_id, exc)
        found = re.search(r"shard (\d+) \(stage (\d+), wave (\d+)\)", message)
        shard_id = record.failed_shard or (found.group(1) if found else None)
        stage = record.failed_stage
        if stage is None and found:
            stage = int(found.group(2))
        wave = record.failed_wave
        if wave is None and found:
            wave = int(found.group(3))
        return errors.ShardFailedError(
            f"job {self.job_id} failed: {message}",
            shard_id=None if shard_id is None else str(shard_id),
            stage=stage,
            wave=wave,
            last_error=str(record.shard_error or ""),
        )

    def cost(self, prices: PriceTable | None = None, *, refresh: bool = False) -> JobCost:
        """What the job cost on AWS (so far, while it runs): see :mod:`fanfit.cost`.

        Counted from the execution history (Lambda invocations, state transitions, Batch jobs) and
        the job's shard records, priced from ``prices`` (default :data:`fanfit.prices.DEFAULT_PRICES`).
        The cost of an ended job at the default prices is kept in its record (``cost``) and read
        from there next time, unless ``refresh``.

        Returns
        -------
        fanfit.cost.JobCost

        Raises
        ------
        botocore.exceptions.ClientError
            If the execution history cannot be read.
        """
        return collect_cost(
            self.client, self.job_id, self.execution_arn, prices, refresh, kind=self.kind
        )

    def record(self) -> dict[str, Any]:
        """The job record in the job table (``{"job_id": ...}`` when there is none)."""
        return self.client.records.get(self.job_id) or {"job_id": self.job_id}


def record_submission(client: StackClient, job_id: str, kind: str, execution_arn: str) -> None:
    """Write the job's kind, execution and submission time into its record as it starts, so that
    ``fanfit wait JOB`` or ``client.job(JOB)`` find a job whose first step has not run yet.

    The status is left to the steps (Prepare, TrainInit and the failure branch write it): a
    failure recorded before this write is never overwritten. A role that cannot write the table
    only loses that early record (logged).
    """
    try:
        client.records.update(
            job_id, kind=kind, execution_arn=execution_arn, submitted_at=time.time()
        )
    except Exception as exc:  # a read-only role: the first step records the job
        log.warning("cannot record the start of job %s: %s", job_id, exc)


def console_url(execution_arn: str) -> str:
    """The page of a Step Functions execution in the AWS console (its region from the ARN).

    Parameters
    ----------
    execution_arn : str
        ``arn:aws:states:<region>:<account>:execution:<machine>:<name>``.

    Returns
    -------
    str
    """
    parts = execution_arn.split(":")
    region = parts[3] if len(parts) > 3 and parts[3] else "us-east-1"
    return (
        f"https://{region}.console.aws.amazon.com/states/home?region={region}"
        f"#/v2/executions/details/{quote(execution_arn, safe='')}"
    )


def _outputs(client: StackClient) -> dict[str, str]:
    """The stack's CloudFormation outputs (cached on the client)."""
    cache: dict[str, dict[str, str]] = client.__dict__.setdefault("_lifecycle_outputs", {})
    if "outputs" not in cache:
        cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
        try:
            desc = cfn.describe_stacks(StackName=client.stack.name)["Stacks"][0]
        except Exception as exc:  # botocore ClientError, EndpointConnectionError
            raise errors.StackError(f"cannot read stack {client.stack.name!r}: {exc}") from exc
        cache["outputs"] = {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}
    return cache["outputs"]


def _batch(client: StackClient) -> Any:
    return client.session.client("batch", endpoint_url=client.stack.endpoint_url)


def batch_jobs_of(
    client: StackClient, job_id: str, statuses: tuple[str, ...] = BATCH_ACTIVE_STATUSES
) -> list[dict[str, Any]]:
    """The GPU worker (AWS Batch) jobs of a fanfit job on the stack's job queue.

    A Batch job belongs to the fanfit job whose id its task carries (the ``task`` parameter the
    state machines pass: a shard's or a worker's input, with ``job_id``).

    Parameters
    ----------
    client : StackClient
    job_id : str
    statuses : tuple of str
        Batch statuses to list (default: those not ended).

    Returns
    -------
    list of dict
        Batch's ``DescribeJobs`` entries; empty on a stack without a GPU worker (no
        ``GpuJobQueueArn`` output).
    """
    queue = _outputs(client).get("GpuJobQueueArn")
    if not queue:
        return []
    batch = _batch(client)
    ids: list[str] = []
    for status in statuses:
        pages = batch.get_paginator("list_jobs").paginate(jobQueue=queue, jobStatus=status)
        ids += [j["jobId"] for page in pages for j in page.get("jobSummaryList", [])]
    found = []
    for start in range(0, len(ids), 100):
        for job in batch.describe_jobs(jobs=ids[start : start + 100]).get("jobs", []):
            if _task_job_id(job) == job_id:
                found.append(job)
    return found


def batch_task(batch_job: dict[str, Any]) -> str:
    """A Batch job's ``task`` parameter (the JSON of the shard's or worker's input), or ''."""
    task = (batch_job.get("parameters") or {}).get("task")
    return task if isinstance(task, str) else ""


def _task_job_id(batch_job: dict[str, Any]) -> str | None:
    """The fanfit job id a Batch job's ``task`` parameter names, or None."""
    try:
        parsed = json.loads(batch_task(batch_job) or "null")
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    found = parsed.get("job_id")
    return str(found) if found is not None else None


#: How long ``fanfit cancel`` waits for the job's running steps to stop, seconds: they stop within
#: about a second of the stop marker (a CrossFit shard between units or, in its Lambda's or the
#: GPU worker's main thread, within its current unit; a DS-Sync worker within 5 polls).
CANCEL_WAIT_S = 30.0


def _stop_running_workers(client: StackClient, job_id: str, execution_arn: str) -> bool:
    """After a job's execution was stopped: write its stop marker (reason ``'cancelled'``,
    :func:`fanfit.jobs.stop.write_stop`), since StopExecution does not stop a Lambda invocation
    (nor a GPU worker) that runs: a train job's DS-Sync segment workers read
    :func:`fanfit.storage.train_stop_key` and stop within a few polls, an estimate's CrossFit
    shards read :func:`fanfit.storage.estimate_stop_key` between two units and stop there.

    Returns
    -------
    bool
        Whether a marker was written: False when the write failed (logged: the execution is
        stopped either way; its running workers then run to their end or deadline).
    """
    from fanfit.jobs.stop import write_stop

    record = client.records.get(job_id) or {}
    if record.get("kind") == "train":
        key = storage.train_stop_key(job_id)
    else:
        key = storage.estimate_stop_key(job_id)
    try:
        write_stop(client.store, key, "cancelled", execution_arn=execution_arn)
    except Exception as exc:  # e.g. AccessDenied on s3:PutObject: the stop stands
        log.warning("job %s: cannot write its stop marker: %s", job_id, exc)
        return False
    return True


def stop_timed_out(client: StackClient, job_id: str, execution_arn: str, kind: str) -> bool:
    """Write the stop marker of a job whose execution timed out, unless it has one for it.

    An execution past its ``TimeoutSeconds`` ends ``TIMED_OUT`` without running its failure
    branch (a Catch does not see the execution's own timeout), so nothing writes the stop marker
    that a failure or a cancel writes (:mod:`fanfit.jobs.stop`), and its running DS-Sync workers
    and CrossFit shards would run to their own deadlines. The client writes it instead when it sees
    the status (:meth:`JobHandle.wait`, :meth:`JobHandle.status`): reason ``'failed'``, error
    ``'States.Timeout'``, naming ``execution_arn`` (a later ``fanfit resume`` is not stopped by it).

    Parameters
    ----------
    client : StackClient
    job_id, execution_arn : str
    kind : {'estimate', 'train'}
        Which marker: :func:`fanfit.storage.train_stop_key` or
        :func:`fanfit.storage.estimate_stop_key`.

    Returns
    -------
    bool
        Whether a marker was written: False when one for this execution (or for every execution)
        is already there, or when the write failed (logged; the job has ended either way).
    """
    from fanfit.jobs.stop import StopReader, write_stop

    key = storage.train_stop_key(job_id) if kind == "train" else storage.estimate_stop_key(job_id)
    try:
        if StopReader(client.store, key, execution_arn).read() is not None:
            return False
        write_stop(client.store, key, "failed", execution_arn=execution_arn,
                   error="States.Timeout")  # fmt: skip
    except Exception as exc:  # e.g. AccessDenied: the job has ended; its workers hit deadlines
        log.warning("job %s: cannot write its stop marker after its timeout: %s", job_id, exc)
        return False
    log.info("job %s timed out: wrote its stop marker %s", job_id, key)
    return True


def cancel_job(
    client: StackClient, job_id: str, execution_arn: str, wait_s: float = CANCEL_WAIT_S
) -> dict[str, Any]:
    """Stop a running job: its execution, its Batch jobs, its partition; status ``CANCELLED``.

    The job also gets its stop marker (:func:`fanfit.storage.train_stop_key` of a train job,
    :func:`fanfit.storage.estimate_stop_key` of an estimate; reason ``'cancelled'``, naming
    ``execution_arn``), written right after StopExecution: the workers of a DS-Sync segment that
    still run (StopExecution does not stop a running Lambda invocation) stop within a few polls
    instead of waiting for their group until their deadline, and an estimate's running CrossFit
    shards stop before their next unit (:mod:`fanfit.jobs.stop`).

    Then it waits (at most ``wait_s``) until none of the job's long-running steps still runs
    (their idempotency records: :mod:`fanfit.client.running`), and says which still do.

    Parameters
    ----------
    client : StackClient
    job_id, execution_arn : str
    wait_s : float
        Longest wait for the job's running steps to stop, seconds (0: only look once).

    Returns
    -------
    dict
        ``job_id``, ``status`` (``'CANCELLED'``, or the status of a job that had already ended,
        which is left as it was), ``stopped`` (whether this call stopped the execution),
        ``batch_jobs_terminated`` (Batch job ids), ``partition_released`` (whether the job holds
        no partition afterwards: released here, or reclaimed by another job's barrier first),
        ``still_running`` (``'<function>: <step>'`` of each step still running when the wait
        ended: empty when none; None when the client cannot see them) and ``waited_s``.

    Raises
    ------
    botocore.exceptions.ClientError
        A call was refused (e.g. AccessDenied on ``states:StopExecution``).
    """
    from fanfit.jobs.sharing import capacity_from_env, release_job

    status = client.sfn.describe_execution(executionArn=execution_arn)["status"]
    record_kind = str((client.records.get(job_id) or {}).get("kind") or "estimate")
    if status != "RUNNING":
        got = client.records.get(job_id) or {}
        return {
            "job_id": job_id,
            "status": got.get("status") or status,
            "stopped": False,
            "batch_jobs_terminated": [],
            "partition_released": False,
        }
    client.sfn.stop_execution(
        executionArn=execution_arn,
        error="JobCancelledError",
        cause=f"job {job_id} was cancelled by the user (fanfit cancel)",
    )
    _stop_running_workers(client, job_id, execution_arn)
    terminated = []
    try:
        batch_jobs = batch_jobs_of(client, job_id)
    except Exception as exc:  # no Batch permission, stack outputs unreadable: the stop stands
        log.warning("job %s: cannot list its GPU worker (Batch) jobs: %s", job_id, exc)
        batch_jobs = []
    for batch_job in batch_jobs:
        _batch(client).terminate_job(
            jobId=batch_job["jobId"], reason=f"fanfit job {job_id} was cancelled"
        )
        terminated.append(str(batch_job["jobId"]))
    released = False
    partitions = getattr(client, "partitions", None)
    if partitions is not None:
        entry = release_job(
            partitions, job_id, stack_capacity(client) or capacity_from_env(), client.sfn
        )
        # None: the job held no partition any more: another job's barrier reclaimed it once the
        # execution had stopped (jobs.sharing's stale-job reclaim). Released either way.
        released = entry is not None or partitions.get(job_id) is None
    client.records.update(job_id, status=storage.JOB_STATUS_CANCELLED, ended_at=time.time())
    still_running, waited_s = _wait_for_steps(client, job_id, record_kind, wait_s, execution_arn)
    return {
        "job_id": job_id,
        "status": storage.JOB_STATUS_CANCELLED,
        "stopped": True,
        "batch_jobs_terminated": terminated,
        "partition_released": released,
        "still_running": still_running,
        "waited_s": waited_s,
    }


#: Seconds between two looks at a cancelled job's running steps.
_STEPS_POLL_S = 0.25


def _wait_for_steps(
    client: StackClient, job_id: str, kind: str, wait_s: float, execution_arn: str = ""
) -> tuple[list[str] | None, float]:
    """Poll (bounded by ``wait_s``) until none of the job's long-running steps of execution
    ``execution_arn`` runs (:func:`fanfit.client.running.running_steps`).

    Returns
    -------
    still_running : list of str or None
        The steps still running when the wait ended (empty: none), or None when the client cannot
        see them (no idempotency table output, no ``dynamodb:Scan``; logged).
    waited_s : float
        Seconds waited.
    """
    from fanfit.client.running import running_steps, step_keys

    started = time.perf_counter()
    try:
        table = _outputs(client).get("IdempotencyTableName")
        if not table:
            return None, 0.0
        keys = step_keys(client.store, job_id, kind, (execution_arn,))
        dynamodb = client.session.client("dynamodb", endpoint_url=client.stack.endpoint_url)
        deadline = started + max(wait_s, 0.0)
        for _ in range(int(max(wait_s, 0.0) / _STEPS_POLL_S) + 2):  # bounded: wait_s / poll
            running = running_steps(dynamodb, table, keys)
            if not running or time.perf_counter() >= deadline:
                return running, time.perf_counter() - started
            time.sleep(_STEPS_POLL_S)
        return running, time.perf_counter() - started
    except Exception as exc:  # no permission, stack outputs unreadable: the cancel stands
        log.warning("job %s: cannot see whether its steps still run: %s", job_id, exc)
        return None, time.perf_counter() - started


def stack_capacity(client: StackClient) -> tuple[int, int] | None:
    """The stack's shared capacity as its functions see it (``FANFIT_ACCOUNT_CONCURRENCY``,
    ``FANFIT_BATCH_MAX_VCPUS`` of the Prepare function), so that a release from the client
    recomputes the other jobs' partitions as the Release function would; None if unreadable."""
    from fanfit.jobs.sharing import GPU_WORKER_VCPUS

    try:
        name = _outputs(client).get("PrepareFunctionName")
        if not name:
            return None
        lam = client.session.client("lambda", endpoint_url=client.stack.endpoint_url)
        env = lam.get_function_configuration(FunctionName=name).get("Environment", {})
        variables = env.get("Variables", {})
        concurrency = int(variables.get("FANFIT_ACCOUNT_CONCURRENCY", "1000"))
        gpus = int(variables.get("FANFIT_BATCH_MAX_VCPUS", "0")) // GPU_WORKER_VCPUS
    except Exception as exc:  # no permission, no such function: the client's defaults
        log.debug("cannot read the stack's capacity: %s", exc)
        return None
    return concurrency, gpus


def collect_cost(
    client: StackClient,
    job_id: str,
    execution_arn: str,
    prices: PriceTable | None,
    refresh: bool,
    kind: str = "estimate",
) -> JobCost:
    """The cost of a job of any kind (:meth:`JobHandle.cost`): the one kept in its record, unless
    ``prices`` or ``refresh``; else counted from the execution history and kept in the record
    once the job has ended. ``kind`` ``'estimate'``: the shard records of its ``result.json``
    stand in for Distributed Map children without a readable history.

    Returns
    -------
    fanfit.cost.JobCost
        USD at ``prices`` (default :data:`fanfit.prices.DEFAULT_PRICES`).

    Raises
    ------
    botocore.exceptions.ClientError
        If the execution history cannot be read.
    """
    from fanfit.cost import JobCost, collect_job_cost
    from fanfit.prices import DEFAULT_PRICES

    got = client.records.get(job_id)
    record = JobRecord.parse(got, source=f"the job record of {job_id}") if got else None
    if prices is None and not refresh and record is not None and record.cost is not None:
        return JobCost.from_dict(record.cost)
    status = client.sfn.describe_execution(executionArn=execution_arn)["status"]
    shards = None
    key = storage.result_key(job_id)
    if kind == "estimate" and status == "SUCCEEDED" and client.store.exists(key):
        shards = EstimateResultDoc.parse(client.store.get_json(key), source=key).timings.shards
    cost = collect_job_cost(
        client.sfn,
        execution_arn,
        lambda_client=client.session.client("lambda", endpoint_url=client.stack.endpoint_url),
        shard_records=shards,
        prices=prices or DEFAULT_PRICES,
    )
    if prices is None and status != "RUNNING":
        try:
            client.records.update(job_id, cost=cost.to_dict())
        except Exception as exc:  # a read-only role: the cost is still returned
            log.warning("cannot keep the cost in the record of job %s: %s", job_id, exc)
    return cost


def cost_or_none(job: Any) -> dict[str, Any] | None:
    """The job's cost as a dict when it has already been counted (kept in its record by
    :meth:`JobHandle.cost`, ``fanfit status`` or ``fanfit jobs --all``), else None.

    Reading a result never counts the cost: counting reads the execution history and, on AWS, one
    history per Distributed Map child (seconds for a job of many shards), which an attached run
    would wait for. :meth:`JobHandle.cost` counts it on demand; a result's ``timings`` already
    have the shards' billed Lambda time (``billed_gb_s``, ``lambda_cost_usd``, from Aggregate).
    One read of the job record; a record that cannot be read gives None (logged).
    """
    try:
        got = job.client.records.get(job.job_id)
        record = JobRecord.parse(got, source=f"the job record of {job.job_id}") if got else None
    except Exception as exc:  # no permission, a record that does not parse: no cost shown
        log.debug("cannot read the record of job %s: %s", job.job_id, exc)
        return None
    return None if record is None or record.cost is None else dict(record.cost)
