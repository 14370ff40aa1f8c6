"""The client sees which steps of a job still run: their idempotency records in progress.

GIVEN a prepared estimate on moto and a CrossFit-like handler made idempotent by Powertools with
CrossFit's own key WHEN the client looks while the handler runs THEN it names that shard (and no
step of another job, no record of a crashed invocation whose in-progress time ran out, no
completed record); once the handler returned it sees nothing. A train job's workers are found by
their round and worker. ``fanfit cancel`` then reports what still runs.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from fanfit import storage

TABLE = "fanfit-idempotency"


@pytest.fixture
def estimate(job_storage, make_partitions, put_estimate_spec) -> tuple[Any, str]:
    """``(store, job_id)`` of a prepared PLR estimate (8 units in stage 0)."""
    from fanfit.jobs.estimate.prepare import prepare_stage

    store, records, _ = job_storage
    job = "est-run"
    key = put_estimate_spec(store, storage.spec_key(job), n_rep=2, max_concurrency=1)
    prepare_stage(store, records, job, key, 0, partitions=make_partitions())
    return store, job


def test_a_running_shard_is_seen_until_it_returns(estimate, lambda_context, monkeypatch) -> None:
    import boto3
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent,
    )

    from fanfit.client.running import running_steps, step_keys
    from fanfit.jobs.documents.events import CrossFitEvent

    store, job = estimate
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "fanfit-CrossFit-1A2B")
    dynamodb = boto3.client("dynamodb")
    keys = step_keys(store, job, "estimate")
    # GIVEN records that are not this job's running steps: another job's shard, a crashed
    # invocation's (in progress, but its time ran out) and a completed one
    now_ms = int(time.time() * 1000)
    for rid, status, expires in (
        ("fanfit-CrossFit-1A2B.lambda_handler#" + _md5(["est-other", 0, "00001"]), "INPROGRESS",
         now_ms + 60_000),
        ("fanfit-CrossFit-1A2B.lambda_handler#" + _digest(keys, "shard 00002 of stage 0"),
         "INPROGRESS", now_ms - 1_000),
        ("fanfit-CrossFit-1A2B.lambda_handler#" + _digest(keys, "shard 00003 of stage 0"),
         "COMPLETED", now_ms + 60_000),
    ):  # fmt: skip
        dynamodb.put_item(TableName=TABLE, Item={
            "id": {"S": rid}, "status": {"S": status},
            "in_progress_expiration": {"N": str(expires)}})  # fmt: skip
    seen: list[list[str]] = []
    persistence = DynamoDBPersistenceLayer(table_name=TABLE)
    config = IdempotencyConfig(event_key_jmespath=CrossFitEvent.IDEMPOTENCY_KEY)

    @idempotent(persistence_store=persistence, config=config)
    def handler(event: dict, context: Any) -> dict:
        seen.append(running_steps(dynamodb, TABLE, keys))
        return {"ok": True}

    # WHEN shard 00001 of stage 0 runs, and the client looks while it does and after it returned
    event = {"job_id": job, "plan_key": storage.plan_key(job), "stage": 0,
             "shard": {"shard_id": "00001", "units": []}}  # fmt: skip
    handler(event, lambda_context())
    # THEN it saw that shard alone, named by its function, and nothing once it had returned
    assert seen == [["fanfit-CrossFit-1A2B: shard 00001 of stage 0"]]
    assert running_steps(dynamodb, TABLE, keys) == []


def _md5(key: list) -> str:
    import hashlib
    import json

    return hashlib.md5(json.dumps(key).encode()).hexdigest()


def _digest(keys: dict[str, str], step: str) -> str:
    return next(digest for digest, name in keys.items() if name == step)


def test_a_train_jobs_workers_are_keyed_by_round_and_worker(job_storage) -> None:
    import hashlib
    import json

    from fanfit.client.running import step_keys

    store, _, _ = job_storage
    # GIVEN a train job of 3 workers and 5 rounds
    store.put_json(
        storage.spec_key("tr-run"), {"kind": "train", "spec": {"workers": 3, "rounds": 5}}
    )
    # WHEN its steps' keys of two executions are listed
    arns = (
        "arn:aws:states:us-east-1:1:execution:t:tr-run",
        "arn:aws:states:us-east-1:1:execution:t:r",
    )
    keys = step_keys(store, "tr-run", "train", arns)
    # THEN every (round, worker, execution) is there, hashed as Powertools hashes TrainShard's key
    assert len(keys) == 2 * 6 * 3
    for arn in arns:
        digest = hashlib.md5(json.dumps(["tr-run", 4, 2, arn]).encode()).hexdigest()
        assert keys[digest] == "worker 2 of round 4"
    # AND without an execution: the workers invoked without one
    digest = hashlib.md5(json.dumps(["tr-run", 4, 2, ""]).encode()).hexdigest()
    assert step_keys(store, "tr-run", "train")[digest] == "worker 2 of round 4"
    # AND a job without objects has none (nothing to wait for)
    assert step_keys(store, "nothing", "estimate") == {}
