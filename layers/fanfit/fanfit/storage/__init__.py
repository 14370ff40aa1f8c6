"""S3 and DynamoDB I/O of fanfit: the key layout of a job, array and JSON objects, job records.

S3 is the source of truth. Everything a step writes goes to a deterministic key, so a retried step
overwrites its own object with the same content and nothing is counted twice. Arrays travel as
``.npz``/``.npy`` read with ``allow_pickle=False``: no object in the bucket is ever unpickled.

Key layout (``<job>`` is the job id)::

    data/<sha256>.npz                      the data, content-addressed: arrays ``values`` (n_obs, n_cols)
                                           float64 and ``columns`` (n_cols,) str
    jobs/<job>/spec.json                   the job spec the client wrote
    jobs/<job>/plan.json                   the validated plan (Prepare)
    jobs/<job>/folds.npy                   test-fold index per row and repetition, (n_obs, n_rep) int64
    jobs/<job>/stages/<s>/units.json       the (repetition, fold, learner) units of stage s (Prepare)
    jobs/<job>/stages/<s>/prepare.json     Prepare's record of stage s: started_at, ended_at, memory_mb
    jobs/<job>/stages/<s>/schedule.json    the waves of stage s so far: decision and shard ids (Schedule)
    jobs/<job>/stages/<s>/waves/<w>.json   the shard list of wave w of stage s (the Map's ItemReader)
    jobs/<job>/stages/<s>/inputs.json      inputs of stage s computed from earlier stages
    jobs/<job>/stages/<s>/prepare.json     what Prepare measured planning stage s (seconds, memory)
    jobs/<job>/stages/<s>/preds/<shard>.npz  out-of-fold predictions of one shard, one array per unit
    jobs/<job>/map-runs/<s>/<w>/...        the Distributed Map's ResultWriter output of wave w of stage s
    jobs/<job>/result.json                 the estimate (Aggregate) or the trained model (TrainFinalize)
    jobs/<job>/predictions.npz             every out-of-fold prediction of an estimate (Aggregate): one
                                           (n_obs, n_rep) float64 array per treatment and learner,
                                           ``t<i_treat>_<key>``, and ``d_cols`` (DoubleML's
                                           external_predictions, see fanfit.dml.interop)
    jobs/<job>/train/state/<r>.npz         a train job's model at the start of round r (TrainInit, TrainReduce)
    jobs/<job>/train/rounds/<r>/plan.json  round r's batches, groups and predicted throughput (TrainSchedule)
    jobs/<job>/train/rounds/<r>/workers/<i>.npz  worker i's partial of round r (TrainShard)
    jobs/<job>/train/rounds/<r>/record.json  what round r measured (TrainReduce)
    jobs/<job>/train/throughput.json       the job's per-worker throughput averages (TrainSchedule)

DynamoDB: the job table (:class:`JobRecords`), the throughput table (:class:`ThroughputRecords`)
and the partition table (:class:`Partitions`: running jobs' shares of the account, Dorm).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
from typing import Any

import numpy as np

from fanfit.errors import InvalidDataError, InvalidJobError, JobNotFoundError

JOB_STATUS_RUNNING = "RUNNING"
JOB_STATUS_SUCCEEDED = "SUCCEEDED"
JOB_STATUS_FAILED = "FAILED"


def data_key(digest: str) -> str:
    """Key of a content-addressed data object, from the hex SHA-256 of its bytes."""
    return f"data/{digest}.npz"


#: What a data key looks like: ``data/<sha256 hex>.<ext>`` (content-addressed, one level deep).
DATA_KEY_PATTERN = re.compile(r"data/[0-9a-f]{64}\.[a-z0-9]{2,8}")


def check_data_key(key: Any, *, field: str = "data_key") -> str:
    """Check a data key read from a job file: ``data/<sha256>.npz`` and nothing else.

    Parameters
    ----------
    key : any
        The value of the job file's ``field``.
    field : str
        Its name, for the message.

    Returns
    -------
    str
        ``key``.

    Raises
    ------
    InvalidJobError
        ``key`` is not a string of that form (null, a path that climbs out with ``..``, another
        job's object); the value is not echoed when long.
    """
    if not isinstance(key, str) or not DATA_KEY_PATTERN.fullmatch(key):
        shown = repr(key) if len(repr(key)) <= 100 else f"a {type(key).__name__} value"
        raise InvalidJobError(
            f"{field} must be a data key 'data/<sha256>.npz' as the client uploads it, got {shown}"
        )
    return key


def check_job_key(key: Any, job_id: str, *, field: str) -> str:
    """Check an S3 key read from a job file lies under ``jobs/<job_id>/`` without ``..`` segments.

    Raises
    ------
    InvalidJobError
        It is not a string, lies outside the job's prefix, or has an empty, ``.`` or ``..`` segment.
    """
    if (
        not isinstance(key, str)
        or len(key) > 1024
        or not key.startswith(job_prefix(job_id))
        or any(part in ("", ".", "..") for part in key.split("/"))
    ):
        shown = repr(key) if len(repr(key)) <= 100 else f"a {type(key).__name__} value"
        raise InvalidJobError(
            f"{field} must be a key under {job_prefix(job_id)} without '..' segments, got {shown}"
        )
    return key


def job_prefix(job_id: str) -> str:
    """Prefix under which every object of ``job_id`` lives."""
    return f"jobs/{job_id}/"


def spec_key(job_id: str) -> str:
    """Key of the job spec written by the client."""
    return f"jobs/{job_id}/spec.json"


def input_folds_key(job_id: str) -> str:
    """Key of the folds the user gave an estimate job (int64, shape (n_obs, n_rep)), written by
    the client."""
    return f"{job_prefix(job_id)}input-folds.npy"


def input_init_key(job_id: str) -> str:
    """Key of the initial K-Means centroids the user gave a train job (float64, shape
    (n_clusters, n_features)), written by the client."""
    return f"{job_prefix(job_id)}input-init.npy"


def plan_key(job_id: str) -> str:
    """Key of the plan written by Prepare."""
    return f"jobs/{job_id}/plan.json"


def folds_key(job_id: str) -> str:
    """Key of the folds array, shape (n_obs, n_rep)."""
    return f"jobs/{job_id}/folds.npy"


def units_key(job_id: str, stage: int) -> str:
    """Key of a stage's (repetition, fold, learner) units, as Prepare wrote them."""
    return f"{job_prefix(job_id)}stages/{stage}/units.json"


def schedule_key(job_id: str, stage: int) -> str:
    """Key of a stage's schedule: its waves so far, each with its decision and shard ids."""
    return f"{job_prefix(job_id)}stages/{stage}/schedule.json"


def wave_key(job_id: str, stage: int, wave: int) -> str:
    """Key of the shard list of one wave of a stage (the Distributed Map's ItemReader input)."""
    return f"{job_prefix(job_id)}stages/{stage}/waves/{wave}.json"


def stage_prefix(job_id: str, stage: int) -> str:
    """Prefix of every object of one stage of an estimate (units, schedule, waves, predictions)."""
    return f"{job_prefix(job_id)}stages/{stage}/"


def prepare_record_key(job_id: str, stage: int) -> str:
    """Key of what Prepare measured while planning a stage (seconds, memory; for the cost)."""
    return f"{stage_prefix(job_id, stage)}prepare.json"


def preds_prefix(job_id: str, stage: int) -> str:
    """Prefix of the predictions objects of a stage's shards (:func:`preds_key`)."""
    return f"{stage_prefix(job_id, stage)}preds/"


def map_runs_prefix(job_id: str, stage: int, wave: int) -> str:
    """Prefix the Distributed Map of a wave writes its results under (its ResultWriter's Prefix)."""
    return f"{job_prefix(job_id)}map-runs/{stage}/{wave}"


def stage_inputs_key(job_id: str, stage: int) -> str:
    """Key of the inputs of ``stage`` computed from the predictions of earlier stages."""
    return f"jobs/{job_id}/stages/{stage}/inputs.json"


def preds_key(job_id: str, stage: int, shard_id: str) -> str:
    """Key of the out-of-fold predictions of one shard."""
    return f"{preds_prefix(job_id, stage)}{shard_id}.npz"


def result_key(job_id: str) -> str:
    """Key of the job's result."""
    return f"jobs/{job_id}/result.json"


def predictions_key(job_id: str) -> str:
    """Key of an estimate's out-of-fold predictions (``.npz``; :mod:`fanfit.dml.interop` layout)."""
    return f"{job_prefix(job_id)}predictions.npz"


def train_state_key(job_id: str, round_index: int) -> str:
    """Key of a train job's model at the start of round ``round_index`` (``.npz``)."""
    return f"{job_prefix(job_id)}train/state/{round_index:05d}.npz"


def train_state_prefix(job_id: str) -> str:
    """Prefix of a train job's model states (:func:`train_state_key`), for listing them."""
    return f"{job_prefix(job_id)}train/state/"


def train_state_index(job_id: str, key: str) -> int | None:
    """The round of a model state's key (:func:`train_state_key`); None for any other key."""
    prefix = train_state_prefix(job_id)
    name = key[len(prefix) :] if key.startswith(prefix) else ""
    return int(name[:-4]) if name.endswith(".npz") and name[:-4].isdigit() else None


def train_round_plan_key(job_id: str, round_index: int) -> str:
    """Key of a round's plan: per-worker batches, DS-Sync groups, predicted throughput."""
    return f"{job_prefix(job_id)}train/rounds/{round_index:05d}/plan.json"


def train_partial_key(job_id: str, round_index: int, worker: int) -> str:
    """Key of one worker's partial of a round (``.npz``)."""
    return f"{job_prefix(job_id)}train/rounds/{round_index:05d}/workers/{worker:03d}.npz"


def train_round_key(job_id: str, round_index: int) -> str:
    """Key of a round's record: per-worker batch, compute seconds, throughput; round time."""
    return f"{job_prefix(job_id)}train/rounds/{round_index:05d}/record.json"


def train_throughput_key(job_id: str) -> str:
    """Key of a train job's per-worker throughput averages (an ``EwmaThroughput`` dict)."""
    return f"{job_prefix(job_id)}train/throughput.json"


def shard_id_of_preds_key(key: str) -> str:
    """The shard id of a predictions key (:func:`preds_key`): ``.../preds/00012.npz`` -> ``00012``."""
    return key.rsplit("/", 1)[-1].removesuffix(".npz")


def train_rounds_prefix(job_id: str) -> str:
    """Prefix of a train job's per-round objects (plans, partials, records)."""
    return f"{job_prefix(job_id)}train/rounds/"


def is_train_round_key(key: str) -> bool:
    """Whether ``key`` is a round record (:func:`train_round_key`), of any job and round."""
    return "/train/rounds/" in key and key.endswith("/record.json")


def encode_data(columns: list[str], values: np.ndarray) -> tuple[str, bytes]:
    """Serialise a data matrix for upload.

    Parameters
    ----------
    columns : list of str, length n_cols
    values : ndarray of shape (n_obs, n_cols), float64

    Returns
    -------
    key : str
        The content-addressed key (``data/<sha256>.npz``).
    body : bytes
        The ``.npz`` bytes.
    """
    buf = io.BytesIO()
    np.savez(
        buf,
        values=np.ascontiguousarray(values, dtype=np.float64),
        columns=np.array(columns, dtype=str),
    )
    body = buf.getvalue()
    return data_key(hashlib.sha256(body).hexdigest()), body


def decode_data(body: bytes) -> tuple[list[str], np.ndarray]:
    """Inverse of :func:`encode_data`: returns ``(columns, values)``.

    Raises
    ------
    InvalidDataError
        If the object is not a fanfit data object.
    """
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as npz:
            return [str(c) for c in npz["columns"]], np.asarray(npz["values"], dtype=np.float64)
    except (ValueError, KeyError, OSError) as exc:
        raise InvalidDataError(
            f"not a fanfit data object (an .npz with 'values' and 'columns'): {exc}"
        ) from exc


class JobStore:
    """Reads and writes the objects of jobs in one S3 bucket.

    Parameters
    ----------
    bucket : str
        The stack's data bucket.
    s3 : botocore client, optional
        An S3 client; ``boto3.client("s3")`` when omitted (it honours ``AWS_ENDPOINT_URL``).
    """

    def __init__(self, bucket: str, s3: Any = None) -> None:
        if s3 is None:
            import boto3

            s3 = boto3.client("s3")
        self.bucket = bucket
        self.s3 = s3

    def put_bytes(
        self, key: str, body: bytes, content_type: str = "application/octet-stream"
    ) -> str:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)
        return key

    def get_bytes(self, key: str) -> bytes:
        """The object's bytes.

        Raises
        ------
        JobNotFoundError
            The object does not exist (a job's spec, plan or schedule: no such job).
        InvalidDataError
            A data object (``data/...``) does not exist.
        """
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
            if key.startswith("data/"):
                raise InvalidDataError(
                    f"data object {key} does not exist in bucket {self.bucket}; upload the data "
                    "again (the client does it on submit)"
                ) from exc
            job = key.split("/")[1] if key.startswith("jobs/") and key.count("/") >= 2 else None
            where = f"job {job!r} has no object {key}" if job else f"no object {key}"
            raise JobNotFoundError(
                f"{where} in bucket {self.bucket}: no such job on this stack, or its objects "
                "were removed"
            ) from exc

    def exists(self, key: str) -> bool:
        try:
            self.s3.head_object(Bucket=self.bucket, Key=key)
        except self.s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    def put_json(self, key: str, obj: Any) -> str:
        return self.put_bytes(key, json.dumps(obj, allow_nan=False).encode(), "application/json")

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, sorted."""
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def put_arrays(self, key: str, arrays: dict[str, np.ndarray]) -> str:
        """Write named arrays as one ``.npz`` object."""
        buf = io.BytesIO()
        np.savez(buf, allow_pickle=False, **arrays)
        return self.put_bytes(key, buf.getvalue())

    def get_arrays(self, key: str) -> dict[str, np.ndarray]:
        """Read an ``.npz`` object written by :meth:`put_arrays` (never unpickles)."""
        with np.load(io.BytesIO(self.get_bytes(key)), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}

    def put_array(self, key: str, array: np.ndarray) -> str:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        return self.put_bytes(key, buf.getvalue())

    def get_array(self, key: str) -> np.ndarray:
        return np.load(io.BytesIO(self.get_bytes(key)), allow_pickle=False)

    def put_data(self, columns: list[str], values: np.ndarray) -> str:
        """Upload a data matrix once, keyed by its content; returns the key."""
        key, body = encode_data(columns, values)
        if not self.exists(key):
            self.put_bytes(key, body)
        return key

    def get_data(self, key: str) -> tuple[list[str], np.ndarray]:
        """Read a data object: ``(columns, values)`` with values of shape (n_obs, n_cols)."""
        return decode_data(self.get_bytes(key))


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


#: Key of the partition table's one bookkeeping item: the version every recomputation bumps, and the
#: history of recomputations. Not a valid job id (job ids start with a letter or digit).
PARTITIONS_EPOCH_KEY = "#epoch"
#: Most recomputations the epoch item keeps in its history (oldest dropped first).
PARTITIONS_HISTORY_LIMIT = 100


class Partitions(_Table):
    """Running jobs' partitions of the shared capacity in the DynamoDB partition table (Dorm).

    One item per running job, key ``job_id``: ``kind`` (``estimate`` / ``train``), ``demand`` and
    ``partition`` (Lambda concurrency, invocations), ``gpu_demand`` and ``gpus`` (Batch GPUs),
    ``weight``, ``version`` (the recomputation that set the partition) and ``updated_at`` (epoch s).
    One more item, ``job_id = "#epoch"``, holds ``version`` (bumped by every recomputation) and
    ``history`` (the last :data:`PARTITIONS_HISTORY_LIMIT` recomputations).

    Concurrency control is optimistic: a recomputation reads the epoch's version and every job
    (:meth:`snapshot`), solves, and writes everything in one ``TransactWriteItems``
    (:meth:`commit`) whose first item is the epoch, conditioned on the version it read. Two
    recomputations that overlap cannot both commit; the loser sees ``False`` and starts again
    from a fresh snapshot (:func:`fanfit.jobs.sharing.recompute`). No update is lost, and every
    job's partition comes from one consistent solve.

    Parameters
    ----------
    table_name : str
    dynamodb : botocore client, optional
    """

    @classmethod
    def from_env(cls) -> Partitions | None:
        """The stack's partition table from ``FANFIT_PARTITION_TABLE``; None when it is not set."""
        import os

        name = os.environ.get("FANFIT_PARTITION_TABLE")
        return cls(name) if name else None

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

    def snapshot(self) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
        """``(version, jobs, history)``: the epoch's version (0 before the first recomputation),
        every running job's item (sorted by ``registered_at``, then id) and the history."""
        items = self._scan()
        epoch = next((i for i in items if i["job_id"] == PARTITIONS_EPOCH_KEY), {})
        jobs = sorted(
            (i for i in items if i["job_id"] != PARTITIONS_EPOCH_KEY),
            key=lambda i: (float(i.get("registered_at", 0)), i["job_id"]),
        )
        return int(epoch.get("version", 0)), jobs, list(epoch.get("history", []))

    def jobs(self) -> list[dict[str, Any]]:
        """Every running job's item, in arrival order."""
        return self.snapshot()[1]

    def history(self) -> list[dict[str, Any]]:
        """The recorded recomputations, oldest first (see :func:`fanfit.jobs.sharing.recompute`)."""
        return self.snapshot()[2]

    def commit(
        self,
        version: int,
        put: list[dict[str, Any]],
        delete: list[str],
        history: list[dict[str, Any]],
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
        history : list of dict
            The epoch's new history (trimmed to :data:`PARTITIONS_HISTORY_LIMIT`).

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
        epoch = {
            "job_id": PARTITIONS_EPOCH_KEY,
            "version": version + 1,
            "updated_at": time.time(),
            "history": history[-PARTITIONS_HISTORY_LIMIT:],
        }
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
        return True


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
