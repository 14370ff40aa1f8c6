"""Which steps of a job still run: its workers' idempotency records that are in progress.

Stopping an execution (``fanfit cancel``, a failure, a time-out) does not stop a Lambda invocation
that runs, nor a GPU worker's Batch job. Every fanfit function that writes is idempotent on the
stack's idempotency table (Powertools Idempotency): its record is ``INPROGRESS`` from the handler's
start until it returns, and carries an ``in_progress_expiration`` (epoch ms, the invocation's
timeout) after which a crashed invocation's record no longer counts. The record's id is
``<function>.<handler>#<md5 of the event's idempotency key>`` (each event model's
``IDEMPOTENCY_KEY``, :mod:`fanfit.jobs.documents.events`), so the client recognises a job's
long-running steps by hashing the keys they can have: an estimate's CrossFit shards
``[job_id, stage, shard_id]`` and a train job's workers ``[job_id, round, worker, execution_arn]``
(the execution, since a resumed job's new execution must not wait for a dead worker's record of an
earlier one: :attr:`fanfit.jobs.documents.events.TrainShardEvent.IDEMPOTENCY_KEY`). Source of the
key's layout: Powertools for AWS Lambda (Python), ``BasePersistenceLayer._get_hashed_idempotency_key``
(``json.dumps(data, sort_keys=True)``, MD5).

What this cannot see: a step that is not idempotent (none of fanfit's long ones), and a Batch
job's own process (``fanfit cancel`` terminates those).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

from fanfit import storage

__all__ = ["MAX_SHARD_IDS", "running_steps", "step_keys"]

log = logging.getLogger("fanfit")

#: The most shard ids of a stage searched for (ids are never reused in a stage, and a wave
#: replanned after a failure takes new ones, so a stage may use more ids than it has units).
MAX_SHARD_IDS = 20_000
#: Most stages of an estimate (as :class:`fanfit.jobs.documents.events.CrossFitEvent` allows).
_MAX_STAGES = 16


def _hash(key: list[Any]) -> str:
    """Powertools' idempotency hash of a JMESPath result ``key``."""
    return hashlib.md5(json.dumps(key, sort_keys=True).encode(), usedforsecurity=False).hexdigest()


def step_keys(
    store: storage.JobStore, job_id: str, kind: str, execution_arns: tuple[str, ...] = ("",)
) -> dict[str, str]:
    """The idempotency hashes a job's long-running steps can have, with what each step is.

    Parameters
    ----------
    store : JobStore
    job_id : str
    kind : {'estimate', 'train'}
    execution_arns : tuple of str
        A train job's executions whose workers are looked for (their ``$$.Execution.Id``; the
        default, ``""``: workers invoked without one). Not used for an estimate.

    Returns
    -------
    dict of str to str
        ``{md5 hex: 'shard 00003 of stage 0'}`` for every stage of an estimate (from its units
        objects: ids up to twice its units plus 64, at most :data:`MAX_SHARD_IDS`), or
        ``{md5 hex: 'worker 2 of round 5'}`` for every round and worker of a train job (from its
        spec); empty when the job's objects cannot be read.
    """
    keys: dict[str, str] = {}
    try:
        if kind == "train":
            spec = store.get_json(storage.spec_key(job_id)).get("spec", {})
            workers, rounds = int(spec.get("workers", 0)), int(spec.get("rounds", 0))
            for arn in execution_arns:
                for r in range(rounds + 1):
                    for w in range(workers):
                        keys[_hash([job_id, r, w, arn])] = f"worker {w} of round {r}"
            return keys
        for stage in range(_MAX_STAGES):
            units_key = storage.units_key(job_id, stage)
            if not store.exists(units_key):
                break
            n_ids = min(2 * len(store.get_json(units_key)) + 64, MAX_SHARD_IDS)
            for i in range(n_ids):
                shard_id = f"{i:05d}"
                keys[_hash([job_id, stage, shard_id])] = f"shard {shard_id} of stage {stage}"
    except Exception as exc:  # no spec or units (a job that never started): nothing to find
        log.debug("job %s: cannot list its steps' keys: %s", job_id, exc)
    return keys


def running_steps(
    dynamodb: Any, table: str, keys: dict[str, str], now_s: float | None = None
) -> list[str]:
    """The steps among ``keys`` whose idempotency record is in progress now.

    Parameters
    ----------
    dynamodb : botocore DynamoDB client
    table : str
        The stack's idempotency table (output ``IdempotencyTableName``).
    keys : dict
        :func:`step_keys` of the job.
    now_s : float, optional
        Epoch seconds (default: now): a record whose ``in_progress_expiration`` is past (a crashed
        or timed-out invocation) does not count.

    Returns
    -------
    list of str
        ``'<function>: <step>'`` of each running step, sorted.

    Raises
    ------
    botocore.exceptions.ClientError
        The scan was refused (no ``dynamodb:Scan`` on the table).
    """
    if not keys:
        return []
    now_ms = 1000.0 * (time.time() if now_s is None else now_s)
    found: list[str] = []
    pages = dynamodb.get_paginator("scan").paginate(
        TableName=table,
        ConsistentRead=True,
        FilterExpression="#status = :running",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={":running": {"S": "INPROGRESS"}},
    )
    for page in pages:
        for item in page.get("Items", []):
            function, _, digest = item.get("id", {}).get("S", "").rpartition("#")
            if digest not in keys:
                continue
            expires = item.get("in_progress_expiration", {}).get("N")
            if expires is not None and float(expires) < now_ms:
                continue
            found.append(f"{function.split('.')[0]}: {keys[digest]}")
    return sorted(found)
