"""The DynamoDB tables: job records (:class:`JobRecords`), throughput records
(:class:`ThroughputRecords`) and the running jobs' partitions (:class:`Partitions`, Dorm)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

_log = logging.getLogger(__name__)

JOB_STATUS_RUNNING = "RUNNING"
JOB_STATUS_SUCCEEDED = "SUCCEEDED"
JOB_STATUS_FAILED = "FAILED"
#: A job stopped by the user (``fanfit cancel``): its execution was stopped, its partition released.
JOB_STATUS_CANCELLED = "CANCELLED"


class _Table:
    """One DynamoDB table, by name, through a botocore client (default: a new ``dynamodb`` one)."""

    def __init__(self, table_name: str, dynamodb: Any = None) -> None:
        if dynamodb is None:
            import boto3

            dynamodb = boto3.client("dynamodb")
        self.table_name = table_name
        self.ddb = dynamodb


class JobRecords(_Table):
    """Job records in the DynamoDB job table (one item per job, key ``job_id``).

    Parameters
    ----------
    table_name : str
    dynamodb : botocore client, optional
    """

    def _update(self, job_id: str, fields: dict[str, Any]) -> None:
        names = {f"#{k}": k for k in fields}
        values = {f":{k}": _to_attr(v) for k, v in fields.items()}
        expr = "SET " + ", ".join(f"#{k} = :{k}" for k in fields)
        self.ddb.update_item(
            TableName=self.table_name,
            Key={"job_id": {"S": job_id}},
            UpdateExpression=expr,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def update(self, job_id: str, **fields: Any) -> None:
        """Set ``fields`` (str, numbers, bools, None, and dicts and lists of them) on the record."""
        self._update(job_id, {**fields, "updated_at": time.time()})

    def mark_running(self, job_id: str, **fields: Any) -> None:
        """Create or update the record as RUNNING with ``fields`` (str, numbers, bools)."""
        self._update(job_id, {"status": JOB_STATUS_RUNNING, "updated_at": time.time(), **fields})

    def mark_succeeded(self, job_id: str, result_key: str, **fields: Any) -> None:
        """Mark the job SUCCEEDED once its result object is written."""
        self._update(
            job_id,
            {
                "status": JOB_STATUS_SUCCEEDED,
                "result_key": result_key,
                "updated_at": time.time(),
                **fields,
            },
        )

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The record as a plain dict, or None when there is none."""
        item = self.ddb.get_item(
            TableName=self.table_name, Key={"job_id": {"S": job_id}}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        return {k: _from_attr(v) for k, v in item.items()}

    def scan(self) -> list[dict[str, Any]]:
        """Every job record (running and ended), as plain dicts, in no particular order."""
        pages = self.ddb.get_paginator("scan").paginate(
            TableName=self.table_name, ConsistentRead=True
        )
        return [{k: _from_attr(v) for k, v in i.items()} for p in pages for i in p["Items"]]

    def delete(self, job_id: str) -> bool:
        """Remove the job's record; True when there was one."""
        got = self.ddb.delete_item(
            TableName=self.table_name, Key={"job_id": {"S": job_id}}, ReturnValues="ALL_OLD"
        )
        return bool(got.get("Attributes"))


class ThroughputRecords(_Table):
    """Measured throughput in the DynamoDB throughput table, one item per (signature, resource).

    The table's key is ``signature`` (hash) and ``resource`` (range); each item holds one
    :class:`fanfit.sched.throughput.ThroughputEntry` (``samples_per_s``, ``io_s``,
    ``n_observations``) and ``updated_at`` (epoch seconds). The scheduler is its only writer.

    Parameters
    ----------
    table_name : str
    dynamodb : botocore client, optional
    """

    def load(self, signatures: Any) -> list[dict[str, Any]]:
        """Every stored entry of the given signatures (all their resources), as plain dicts."""
        entries: list[dict[str, Any]] = []
        for signature in sorted(set(signatures)):
            pages = self.ddb.get_paginator("query").paginate(
                TableName=self.table_name,
                KeyConditionExpression="#s = :s",
                ExpressionAttributeNames={"#s": "signature"},
                ExpressionAttributeValues={":s": {"S": signature}},
                ConsistentRead=True,
            )
            for page in pages:
                entries += [{k: _from_attr(v) for k, v in i.items()} for i in page["Items"]]
        return entries

    def save(self, entries: Any) -> None:
        """Write entries (dicts with ``signature``, ``resource`` and numbers), one item each."""
        now = time.time()
        for entry in entries:
            item = {k: _to_attr(v) for k, v in {**entry, "updated_at": now}.items()}
            self.ddb.put_item(TableName=self.table_name, Item=item)


#: Key of the partition table's one bookkeeping item: the version every recomputation bumps. Not a
#: valid job id (job ids start with a letter or digit).
PARTITIONS_EPOCH_KEY = "#epoch"
#: Most recomputations the partition history table keeps (the oldest is deleted as a new one lands).
PARTITIONS_HISTORY_LIMIT = 100


class Partitions(_Table):
    """Running jobs' partitions of the shared capacity in the DynamoDB partition table (Dorm).

    One item per running job, key ``job_id``: ``kind`` (``estimate`` / ``train``), ``demand`` and
    ``partition`` (Lambda concurrency, invocations), ``gpu_demand`` and ``gpus`` (Batch GPUs),
    ``weight``, ``version`` (the recomputation that set the partition) and ``updated_at`` (epoch s).
    One more item, ``job_id = "#epoch"``, holds ``version`` (bumped by every recomputation).

    Concurrency control is optimistic: a recomputation reads the epoch's version and every job
    (:meth:`snapshot`), solves, and writes everything in one ``TransactWriteItems``
    (:meth:`commit`) whose first item is the epoch, conditioned on the version it read. Two
    recomputations that overlap cannot both commit; the loser sees ``False`` and starts again
    from a fresh snapshot (:func:`fanfit.jobs.sharing.recompute`). No update is lost, and every
    job's partition comes from one consistent solve.

    The history of recomputations lives in a table of its own (``history_table``, key ``version``,
    one item per committed recomputation, the last :data:`PARTITIONS_HISTORY_LIMIT` kept), written
    once the recomputation committed: a snapshot and a commit touch only the running jobs' items,
    whatever the history holds. (Until 2026-11-26 the history was a list in the epoch item: every
    recomputation read and wrote it whole, 0.1-0.5 MB with 6-40 jobs, past DynamoDB's 400 KB item
    limit from about 35 jobs.)

    Parameters
    ----------
    table_name : str
    dynamodb : botocore client, optional
    history_table : str, optional
        The partition history table (the stack's ``PartitionHistoryTable``); without it no history
        is written and :meth:`history` is empty.
    """

    def __init__(
        self, table_name: str, dynamodb: Any = None, history_table: str | None = None
    ) -> None:
        super().__init__(table_name, dynamodb)
        self.history_table = history_table

    @classmethod
    def from_env(cls) -> Partitions | None:
        """The stack's partition table from ``FANFIT_PARTITION_TABLE`` (and its history table from
        ``FANFIT_PARTITION_HISTORY_TABLE``); None when the first is not set."""
        import os

        name = os.environ.get("FANFIT_PARTITION_TABLE")
        history = os.environ.get("FANFIT_PARTITION_HISTORY_TABLE") or None
        return cls(name, history_table=history) if name else None

    def get(self, job_id: str) -> dict[str, Any] | None:
        """One job's item as a plain dict (strongly consistent), or None when it holds none."""
        item = self.ddb.get_item(
            TableName=self.table_name, Key={"job_id": {"S": job_id}}, ConsistentRead=True
        ).get("Item")
        return None if item is None else {k: _from_attr(v) for k, v in item.items()}

    def _scan(self) -> list[dict[str, Any]]:
        pages = self.ddb.get_paginator("scan").paginate(
            TableName=self.table_name, ConsistentRead=True
        )
        return [{k: _from_attr(v) for k, v in i.items()} for p in pages for i in p["Items"]]

    def snapshot(self) -> tuple[int, list[dict[str, Any]]]:
        """``(version, jobs)``: the epoch's version (0 before the first recomputation) and every
        running job's item (sorted by ``registered_at``, then id)."""
        items = self._scan()
        epoch = next((i for i in items if i["job_id"] == PARTITIONS_EPOCH_KEY), {})
        jobs = sorted(
            (i for i in items if i["job_id"] != PARTITIONS_EPOCH_KEY),
            key=lambda i: (float(i.get("registered_at", 0)), i["job_id"]),
        )
        return int(epoch.get("version", 0)), jobs

    def jobs(self) -> list[dict[str, Any]]:
        """Every running job's item, in arrival order."""
        return self.snapshot()[1]

    def history(self) -> list[dict[str, Any]]:
        """The recorded recomputations, oldest first (see :func:`fanfit.jobs.sharing.recompute`):
        the last :data:`PARTITIONS_HISTORY_LIMIT`, read with one consistent ``BatchGetItem`` of
        their versions; empty without a history table."""
        if not self.history_table:
            return []
        epoch = self.get(PARTITIONS_EPOCH_KEY) or {}
        version = int(epoch.get("version", 0))
        first = max(1, version - PARTITIONS_HISTORY_LIMIT + 1)
        keys = [{"version": {"N": str(v)}} for v in range(first, version + 1)]
        items: list[dict[str, Any]] = []
        request = {self.history_table: {"Keys": keys, "ConsistentRead": True}} if keys else {}
        # keys left unprocessed (throttling) are asked again, a bounded number of times
        for _ in range(10):
            if not request:
                break
            out = self.ddb.batch_get_item(RequestItems=request)
            items += out.get("Responses", {}).get(self.history_table, [])
            request = out.get("UnprocessedKeys") or {}
        entries = [json.loads(i["entry"]["S"]) for i in items]
        return sorted(entries, key=lambda e: int(e.get("version", 0)))

    def commit(
        self,
        version: int,
        put: list[dict[str, Any]],
        delete: list[str],
        entry: dict[str, Any] | None = None,
    ) -> bool:
        """Write one recomputation atomically, if no other has committed since ``version``.

        Parameters
        ----------
        version : int
            The epoch's version :meth:`snapshot` returned; the epoch becomes ``version + 1``.
        put : list of dict
            Job items to write whole (new jobs, and jobs whose demand or partition changed).
        delete : list of str
            Job ids to remove (jobs that ended).
        entry : dict, optional
            The recomputation's history entry (JSON-serialisable): once committed, written to the
            history table as version ``version + 1``, and the entry
            :data:`PARTITIONS_HISTORY_LIMIT` versions older deleted. A failed history write is
            logged, not raised: the partitions are committed.

        Returns
        -------
        bool
            True when committed; False when another recomputation committed first (nothing written).

        Raises
        ------
        fanfit.errors.PartitionConflictError
            More than 99 items would change at once (DynamoDB's 100-item transaction limit).
        """
        from fanfit.errors import PartitionConflictError

        if len(put) + len(delete) > 99:
            raise PartitionConflictError(
                f"a recomputation would change {len(put) + len(delete)} partitions at once; "
                "DynamoDB transactions take at most 100 items: lower max_changes"
            )
        epoch = {"job_id": PARTITIONS_EPOCH_KEY, "version": version + 1, "updated_at": time.time()}
        condition: dict[str, Any] = (
            {"ConditionExpression": "attribute_not_exists(job_id)"}
            if version == 0
            else {
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": {"N": str(version)}},
            }
        )
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": {k: _to_attr(v) for k, v in epoch.items()},
                    **condition,
                }
            }
        ]
        items += [
            {"Put": {"TableName": self.table_name, "Item": {k: _to_attr(v) for k, v in i.items()}}}
            for i in put
        ]
        items += [
            {"Delete": {"TableName": self.table_name, "Key": {"job_id": {"S": job_id}}}}
            for job_id in delete
        ]
        try:
            self.ddb.transact_write_items(TransactItems=items)
        except self.ddb.exceptions.TransactionCanceledException:
            return False
        except self.ddb.exceptions.ClientError as exc:  # TransactionConflict, older emulators
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("TransactionConflictException", "ConditionalCheckFailedException"):
                return False
            raise
        if entry is not None and self.history_table:
            self._record(version + 1, entry)
        return True

    def _record(self, version: int, entry: dict[str, Any]) -> None:
        """Write ``entry`` as history version ``version``; delete the one that falls out."""
        try:
            self.ddb.put_item(
                TableName=self.history_table,
                Item={
                    "version": {"N": str(version)},
                    "entry": {"S": json.dumps(entry, allow_nan=False)},
                },
            )
            if version > PARTITIONS_HISTORY_LIMIT:
                old = str(version - PARTITIONS_HISTORY_LIMIT)
                self.ddb.delete_item(TableName=self.history_table, Key={"version": {"N": old}})
        except self.ddb.exceptions.ClientError as exc:
            _log.warning("partition history version %d not written: %s", version, exc)


def _to_attr(value: Any) -> dict[str, Any]:
    """A DynamoDB attribute value: bool, number, map (dict), list, null (None), else string."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        return {"N": repr(float(value)) if isinstance(value, float) else str(value)}
    if isinstance(value, dict):
        return {"M": {str(k): _to_attr(v) for k, v in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [_to_attr(v) for v in value]}
    return {"S": str(value)}


def _from_attr(attr: dict[str, Any]) -> Any:
    ((kind, value),) = attr.items()
    if kind == "N":
        number = float(value)
        return int(number) if number.is_integer() and "." not in value else number
    if kind == "BOOL":
        return bool(value)
    if kind == "NULL":
        return None
    if kind == "M":
        return {k: _from_attr(v) for k, v in value.items()}
    if kind == "L":
        return [_from_attr(v) for v in value]
    return value
