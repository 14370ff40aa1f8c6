"""A job's life after it ended: delete, history, logs (cancel is the handle's:
:func:`fanfit.client.jobs.cancel_job`).

The client's methods (:meth:`fanfit.client.Client.delete`, :meth:`~fanfit.client.Client.history`,
:meth:`~fanfit.client.Client.logs`) and the commands ``fanfit delete``, ``jobs --all`` and
``logs`` call these functions.

- delete: every object under ``jobs/<job>/`` (every version, in a versioned bucket), the uploaded
  data (``data/<sha256>.npz``) unless another job's spec names it, and the job's records.
- history: every job record with its status, duration and cost.
- logs: ``logs:FilterLogEvents`` on the stack's log groups over the job's time window, and the
  log streams of its Batch jobs.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fanfit import errors, storage
from fanfit.client.jobs import (
    BATCH_ACTIVE_STATUSES,
    StackClient,
    batch_jobs_of,
    batch_task,
    collect_cost,
    stack_capacity,
)
from fanfit.jobs.documents.record import JobRecord, SpecKind

__all__ = ["BATCH_LOG_GROUP", "delete_job", "job_history", "job_logs"]

log = logging.getLogger("fanfit")

#: Every AWS Batch status (a job's logs are read from those that ran, ended or not).
_BATCH_STATUSES = (*BATCH_ACTIVE_STATUSES, "SUCCEEDED", "FAILED")
#: The log group AWS Batch writes a job's container output to (its default, awslogs driver).
BATCH_LOG_GROUP = "/aws/batch/job"


def _execution_status(client: StackClient, execution_arn: str | None) -> str | None:
    if not execution_arn:
        return None
    try:
        return str(client.sfn.describe_execution(executionArn=execution_arn)["status"])
    except Exception:  # the execution is gone (a restarted local stack)
        return None


def delete_job(client: StackClient, job_id: str) -> dict[str, Any]:
    """Remove a job that has ended: its objects, its uploaded data if no other job uses it, its
    records.

    Parameters
    ----------
    client : StackClient
    job_id : str

    Returns
    -------
    dict
        ``job_id``, ``objects_removed`` (object versions under ``jobs/<job>/``), ``data_removed``
        and ``data_kept`` (the data keys the job named: removed, or kept because another job's
        spec names them), ``record_removed`` (bool).

    Raises
    ------
    fanfit.errors.JobRunningError
        The job's execution still runs (cancel it first: ``fanfit cancel JOB``).
    fanfit.errors.JobNotFoundError
        The stack holds neither a record nor an object of the job.
    """
    got = client.records.get(job_id)
    record = JobRecord.parse(got or {"job_id": job_id}, source=f"the job record of {job_id}")
    if _execution_status(client, record.execution_arn) == "RUNNING":
        raise errors.JobRunningError(
            f"job {job_id!r} is still running ({record.execution_arn}); cancel it first with "
            f"`fanfit cancel {job_id}` (Python: client.job({job_id!r}).cancel()), then delete it"
        )
    keys = client.store.list_keys(storage.job_prefix(job_id))
    if got is None and not keys:
        raise errors.JobNotFoundError(
            f"no job {job_id!r} on stack {client.stack.name!r}: no record and no object under "
            f"{storage.job_prefix(job_id)}"
        )
    own = _data_keys(client, job_id) if storage.spec_key(job_id) in keys else set()
    used = set()
    if own:
        for prefix in client.store.list_prefixes("jobs/"):
            other = prefix[len("jobs/") : -1]
            if other != job_id:
                used |= _data_keys(client, other)
    removed_data = sorted(own - used)
    removed = client.store.delete_keys(keys)
    if removed_data:
        client.store.delete_keys(removed_data)
    partitions = getattr(client, "partitions", None)
    if partitions is not None and partitions.get(job_id) is not None:
        from fanfit.jobs.sharing import capacity_from_env, release_job

        release_job(partitions, job_id, stack_capacity(client) or capacity_from_env(), client.sfn)
    record_removed = client.records.delete(job_id)
    return {
        "job_id": job_id,
        "objects_removed": removed,
        "data_removed": removed_data,
        "data_kept": sorted(own & used),
        "record_removed": record_removed,
    }


def _data_keys(client: StackClient, job_id: str) -> set[str]:
    """The uploaded data keys (``data/<sha256>.npz``) a job's spec names (or, for data used in
    place, its plan); none when it has no readable spec."""
    key = storage.spec_key(job_id)
    try:
        spec = client.store.get_json(key)
    except errors.JobNotFoundError:
        return set()
    if not isinstance(spec, dict):
        return set()
    value = spec.get("data_key")
    if value is None and spec.get("data_source") is not None:
        # data used in place: Prepare or TrainInit wrote its columns as the data object the plan names
        try:
            plan = client.store.get_json(storage.plan_key(job_id))
        except errors.JobNotFoundError:
            return set()
        value = plan.get("data_key") if isinstance(plan, dict) else None
    return (
        {value} if isinstance(value, str) and storage.DATA_KEY_PATTERN.fullmatch(value) else set()
    )


def job_history(client: StackClient, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Every job on the stack, running or ended, newest first.

    Parameters
    ----------
    client : StackClient
    limit : int, optional
        At most this many (the newest).

    Returns
    -------
    list of dict
        ``job_id``, ``kind``, ``status`` (the record's, else the execution's: RUNNING,
        SUCCEEDED, FAILED, CANCELLED, ...), ``started_at`` and ``ended_at`` (epoch seconds, None
        when unknown or running), ``duration_s`` (seconds, so far for a running job),
        ``cost_usd`` (the whole job at AWS list prices, None when it cannot be counted) and
        ``execution_arn``.
    """
    rows = []
    for got in client.records.scan():
        try:
            record = JobRecord.parse(got, source=f"the job record of {got.get('job_id')}")
        except errors.FanfitError as exc:  # one bad record does not hide the others
            log.warning("skipping a job record: %s", exc)
            continue
        extra = record.model_extra or {}
        started = extra.get("submitted_at")
        ended = extra.get("ended_at")
        status = record.status
        desc = None
        if record.execution_arn:
            try:
                desc = client.sfn.describe_execution(executionArn=record.execution_arn)
            except Exception:  # the execution is gone (a restarted local stack)
                desc = None
        if desc is not None:
            if desc["status"] != "RUNNING" and status in (None, storage.JOB_STATUS_RUNNING):
                status = desc["status"]
            started = desc["startDate"].timestamp() if desc.get("startDate") else started
            if desc.get("stopDate"):
                ended = desc["stopDate"].timestamp()
        status = status or "UNKNOWN"
        running = status == storage.JOB_STATUS_RUNNING
        if started is not None and ended is None and not running:
            ended = extra.get("updated_at")
        duration = None
        if started is not None:
            duration = max((time.time() if running else float(ended or started)) - started, 0.0)
        rows.append(
            {
                "job_id": record.job_id,
                "kind": record.kind or _kind_of(client, record.job_id),
                "status": status,
                "started_at": None if started is None else float(started),
                "ended_at": None if running or ended is None else float(ended),
                "duration_s": duration,
                "cost_usd": None if record.cost is None else _usd(record.cost),
                "execution_arn": record.execution_arn,
                "_countable": desc is not None and not running and record.cost is None,
            }
        )
    rows.sort(key=lambda r: (-float(r["started_at"] or 0.0), str(r["job_id"])))
    rows = rows if limit is None else rows[: max(int(limit), 0)]
    for row in rows:
        if row.pop("_countable"):  # an ended job whose cost is not kept yet: count it, keep it
            kind = "train" if row["kind"] == "train" else "estimate"
            try:
                job_id, arn = str(row["job_id"]), str(row["execution_arn"])
                cost = collect_cost(client, job_id, arn, None, False, kind)
                row["cost_usd"] = float(cost.total_usd)
            except Exception as exc:  # history not readable: the row says n/a
                log.debug("cannot count the cost of job %s: %s", row["job_id"], exc)
    return rows


def _usd(cost: dict[str, Any]) -> float | None:
    value = cost.get("total_usd")
    return float(value) if isinstance(value, int | float) else None


def _kind_of(client: StackClient, job_id: str) -> str:
    key = storage.spec_key(job_id)
    try:
        return SpecKind.parse(client.store.get_json(key), source=key).kind
    except errors.FanfitError:
        return "estimate"


def _log_groups(client: StackClient) -> list[str]:
    """The stack's log groups (its ``AWS::Logs::LogGroup`` resources), sorted."""
    cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    groups = set()
    try:
        pages = cfn.get_paginator("list_stack_resources").paginate(StackName=client.stack.name)
        for page in pages:
            for res in page.get("StackResourceSummaries", []):
                if res.get("ResourceType") == "AWS::Logs::LogGroup":
                    groups.add(str(res["PhysicalResourceId"]))
    except Exception as exc:  # botocore ClientError, EndpointConnectionError
        raise errors.StackError(
            f"cannot list the resources of stack {client.stack.name!r}: {exc}"
        ) from exc
    return sorted(groups)


def _shard_named(message: str, shard_id: str) -> bool:
    """Whether a log message names shard ``shard_id`` (its predictions key, its id field, or
    the failure's ``shard <id>``)."""
    return any(
        form in message
        for form in (f"/preds/{shard_id}.npz", f'"shard_id": "{shard_id}"',
                     f'"shard_id":"{shard_id}"', f"shard {shard_id} ")
    )  # fmt: skip


def job_logs(
    client: StackClient,
    job_id: str,
    execution_arn: str,
    *,
    shard_id: str | None = None,
    limit: int = 10_000,
) -> list[dict[str, Any]]:
    """The CloudWatch Logs events of a job: its functions' and state machines' lines that name
    the job, over its execution's time window, and the output of its Batch jobs.

    Parameters
    ----------
    client : StackClient
    job_id, execution_arn : str
    shard_id : str, optional
        Only the lines naming this shard (its predictions key or id).
    limit : int
        At most this many events (the oldest first).

    Returns
    -------
    list of dict
        ``timestamp`` (epoch ms), ``log_group``, ``log_stream`` and ``message``, oldest first.

    Raises
    ------
    fanfit.errors.StackError
        The stack's resources cannot be listed.
    """
    logs = client.session.client("logs", endpoint_url=client.stack.endpoint_url)
    start_ms = end_ms = None
    try:
        desc = client.sfn.describe_execution(executionArn=execution_arn)
        start_ms = int(desc["startDate"].timestamp() * 1000) - 60_000
        if desc.get("stopDate"):
            end_ms = int(desc["stopDate"].timestamp() * 1000) + 60_000
    except Exception as exc:  # the execution is gone: no time window
        log.debug("cannot describe %s: %s", execution_arn, exc)
    window: dict[str, Any] = {}
    if start_ms is not None:
        window["startTime"] = start_ms
    if end_ms is not None:
        window["endTime"] = end_ms
    events: list[dict[str, Any]] = []
    for group in _log_groups(client):
        try:
            pages = logs.get_paginator("filter_log_events").paginate(
                logGroupName=group, filterPattern=f'"{job_id}"', **window
            )
            for page in pages:
                for ev in page.get("events", []):
                    if job_id not in str(ev.get("message", "")):
                        continue  # an emulator's filter may match more loosely than CloudWatch's
                    events.append({"timestamp": int(ev["timestamp"]), "log_group": group,
                                   "log_stream": ev.get("logStreamName", ""),
                                   "message": str(ev.get("message", "")).rstrip("\n")})  # fmt: skip
        except logs.exceptions.ResourceNotFoundException:
            continue  # a function that never ran has no log group yet
    if shard_id is not None:
        events = [e for e in events if _shard_named(e["message"], shard_id)]
    for batch_job in batch_jobs_of(client, job_id, _BATCH_STATUSES):
        stream = (batch_job.get("container") or {}).get("logStreamName")
        if not stream or (
            shard_id is not None and not _shard_named(batch_task(batch_job), shard_id)
        ):
            continue
        try:
            pages = logs.get_paginator("filter_log_events").paginate(
                logGroupName=BATCH_LOG_GROUP, logStreamNames=[stream]
            )
            for page in pages:
                for ev in page.get("events", []):
                    events.append({"timestamp": int(ev["timestamp"]), "log_group": BATCH_LOG_GROUP,
                                   "log_stream": stream,
                                   "message": str(ev.get("message", "")).rstrip("\n")})  # fmt: skip
        except logs.exceptions.ResourceNotFoundException:
            continue
    events.sort(key=lambda e: (e["timestamp"], e["log_group"]))
    return events[:limit]
