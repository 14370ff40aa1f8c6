"""What the handles of both job kinds share: polling the execution, its failure, its cost and record.

:class:`JobHandle` is the base of :class:`fanfit.client.estimate.EstimateJob` and
:class:`fanfit.client.train.TrainJob`; :func:`collect_cost` counts either kind's cost.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from typing import TYPE_CHECKING, Any, Protocol, Self

from fanfit import errors, storage
from fanfit.client.stack import Stack
from fanfit.jobs.documents.estimate import EstimateResultDoc
from fanfit.jobs.documents.record import JobRecord

if TYPE_CHECKING:
    from fanfit.cost import JobCost
    from fanfit.prices import PriceTable

__all__ = ["JobHandle", "StackClient", "collect_cost", "cost_or_none"]

log = logging.getLogger("fanfit")


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

    def __init__(self, client: StackClient, job_id: str, execution_arn: str) -> None:
        self.client = client
        self.job_id = job_id
        self.execution_arn = execution_arn

    def status(self) -> str:
        """The execution's status: RUNNING, SUCCEEDED, FAILED, TIMED_OUT or ABORTED (also of a job
        whose execution a restarted local stack no longer has, and which had not ended)."""
        return str(self._describe_execution()["status"])

    def wait(
        self, timeout: float = 3600.0, poll: float = 0.25, *, progress: bool | str | Any = False
    ) -> Self:
        """Poll until the execution ends (at most ``timeout`` seconds).

        The pause between polls starts at ``poll`` seconds and grows by half each time, to 2 s
        (estimate) or 1 s (train); the loop makes at most ``timeout / poll + 1`` polls, whatever
        the clock does.

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
        fanfit.errors.JobFailedError
            If the execution failed otherwise, timed out, was aborted, or did not end in time.
        """
        from fanfit.progress import PROGRESS_INTERVAL_S, ProgressTracker, make_renderer

        renderer = make_renderer(progress)
        tracker = ProgressTracker(self, self.kind) if renderer is not None else None
        max_poll = (
            self._MAX_POLL_S if tracker is None else min(self._MAX_POLL_S, PROGRESS_INTERVAL_S)
        )
        deadline = time.monotonic() + timeout
        shown_at = -math.inf
        try:
            for _ in range(int(max(timeout, 0.0) / max(poll, 1e-3)) + 1):
                if time.monotonic() >= deadline:
                    break
                desc = self._describe_execution()
                status = desc["status"]
                due = status != "RUNNING" or time.monotonic() - shown_at >= PROGRESS_INTERVAL_S
                if renderer is not None and tracker is not None and due:
                    shown_at = time.monotonic()
                    renderer.update(tracker.snapshot(desc))
                if status == "SUCCEEDED":
                    return self
                if status != "RUNNING":
                    raise self._failure(desc)
                time.sleep(poll)
                poll = min(poll * 1.5, max_poll)
        finally:
            if renderer is not None:
                renderer.close()
        raise errors.JobFailedError(f"job {self.job_id} did not end within {timeout:.0f} s")

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
    """The job's cost as a dict, or None (logged) when it cannot be counted: a result never
    fails for want of its cost."""
    try:
        return dict(job.cost().to_dict())
    except Exception as exc:  # history not readable, no permission
        log.warning("cannot count the cost of job %s: %s", job.job_id, exc)
        return None
