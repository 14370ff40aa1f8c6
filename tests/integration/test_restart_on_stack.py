"""Killing the local stack mid-job and starting it again loses no completed shard.

S3 is a job's source of truth: a shard is done when its predictions object exists. On AWS S3 does
not forget; on the local stack every S3 write is mirrored to disk before LocalStack answers it and
put back when LocalStack starts (``fanfit_localstack.s3mirror``). This test runs a stack of its own
(the session's stack stays up), starts a 20-shard PLR one shard at a time, kills LocalStack with
SIGKILL (its whole process group: no shutdown hook runs) once some shards wrote their predictions,
starts it again, redeploys, and resumes the job:

- the predictions of every shard that completed before the kill (its CrossFit invocation is
  recorded COMPLETED: the write was acknowledged) are back, with the same ETag; an object whose write was still in
  flight is back whole or not at all;
- the resumed execution runs only the shards without predictions and rewrites none of the others;
- the estimate equals an uninterrupted run's, bit for bit;
- then stopped as ``fanfit local down`` stops it (SIGTERM), started and redeployed again, the stack
  has the job's record back from its DynamoDB journal (``fanfit_localstack.dynamodb``), the same
  job table (CloudFormation names it stably), and the job's result, ``fanfit status`` and
  ``fanfit report`` work (issue 13, item 4).

A QTE runs as one job of several parts (issue 28, item 3): killed while its second stage runs
(every part's first stage done, DoubleML's start values computed from it), it keeps every
acknowledged shard of both stages, and ``fanfit resume`` (:meth:`fanfit.client.Client.resume`)
ends with an uninterrupted run's numbers, part by part.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit.local.stack import LocalStack, StackInfo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _preds(client: Any, job_id: str, stages: tuple[int, ...] = (0,)) -> dict[str, tuple[str, Any]]:
    """Key -> (ETag, LastModified) of every predictions object of ``stages``."""
    out: dict[str, tuple[str, Any]] = {}
    for stage in stages:
        pages = client.s3.get_paginator("list_objects_v2").paginate(
            Bucket=client.stack.bucket, Prefix=f"jobs/{job_id}/stages/{stage}/preds/"
        )
        out.update(
            {o["Key"]: (o["ETag"], o["LastModified"]) for p in pages for o in p.get("Contents", [])}
        )
    return out


def _assert_restored(client: Any, before: dict[str, tuple[str, Any]],
                     back: dict[str, tuple[str, Any]]) -> None:  # fmt: skip
    """Every predictions object back after the restart is the one listed before the kill (same
    ETag), or one whose write was acknowledged between that listing and the kill: whole."""
    listed = set(back) & set(before)
    assert {k: back[k][0] for k in listed} == {k: before[k][0] for k in listed}
    for key in set(back) - listed:
        body = client.s3.get_object(Bucket=client.stack.bucket, Key=key)["Body"].read()
        assert np.load(io.BytesIO(body)).files, key


def _completed_preds(client: Any, job_id: str, stages: tuple[int, ...] = (0,)) -> set[str]:
    """Predictions keys of the shards of ``stages`` whose CrossFit completed: Powertools
    Idempotency records an invocation COMPLETED, with its response, only after the handler
    returned, so the write of those predictions was acknowledged (a write still in flight may
    already be listed by S3)."""
    table = _table_name(client, "IdempotencyTable")
    dynamodb = client.session.client("dynamodb", endpoint_url=client.stack.endpoint_url)
    keys: set[str] = set()
    for page in dynamodb.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            if item.get("status", {}).get("S") != "COMPLETED" or "data" not in item:
                continue
            key = json.loads(item["data"]["S"]).get("preds_key", "")
            if any(key.startswith(f"jobs/{job_id}/stages/{s}/preds/") for s in stages):
                keys.add(key)
    return keys


def _table_name(client: Any, logical_id: str) -> str:
    cloudformation = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    return cloudformation.describe_stack_resource(StackName="fanfit", LogicalResourceId=logical_id)[
        "StackResourceDetail"
    ]["PhysicalResourceId"]


def _kill(pid: int) -> None:
    """SIGKILL LocalStack's process group (it runs in a session of its own) and wait for it."""
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # LocalStack is this process's child: reap it
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError(f"LocalStack's process group {pid} survived SIGKILL")


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[LocalStack]:
    """A local stack of this test's own (state dir under ``tmp_path``); stopped at the end."""
    stack = LocalStack(root=ROOT, home=tmp_path / "home")
    try:
        yield stack
    finally:
        stack.stop()


def test_killing_the_stack_mid_job_loses_no_completed_shard_and_local_down_keeps_its_record(
    own_stack: LocalStack,
    local_client: Any,
    redeploy: Any,
    client_of_stack: Any,
    wait_until: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a PLR with 5 folds x 2 repetitions, one unit per shard (20 shards), one at a time, on a
    # stack of its own (the project created there from the session's build and upload)
    info = own_stack.start()
    redeploy(info)
    client = client_of_stack(info)
    rng = np.random.default_rng(11)
    n = 400
    x = rng.normal(size=(n, 3))
    d = x[:, 0] + rng.normal(size=n)
    frame = pd.DataFrame({"y": 0.5 * d + x[:, 1] + rng.normal(size=n), "d": d,
                          "x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2]})  # fmt: skip
    options = dict(model="plr", y="y", d="d", x=["x0", "x1", "x2"], ml_l="LinearRegression",
                   ml_m="LinearRegression", n_folds=5, n_rep=2, seed=3, units_per_shard=1,
                   max_concurrency=1)  # fmt: skip
    # (the uninterrupted run, on the session's stack, runs meanwhile)
    clean_job = local_client.submit_estimate(frame, **options)
    job = client.submit_estimate(frame, **options)
    bucket = client.stack.bucket
    completed: set[str] = wait_until(
        lambda: done if len(done := _completed_preds(client, job.job_id)) >= 4 else None,
        300,
        f"4 completed shards of {job.job_id}",
        interval_s=0.2,
    )
    # WHEN LocalStack is killed mid-job (SIGKILL: no shutdown hook, no flush)
    before = _preds(client, job.job_id)
    _kill(info.pid)
    assert 4 <= len(completed) < 20 and completed <= set(before), (completed, before)
    # ... and started again (a new process, another port) and the project redeployed
    restarted = own_stack.start()
    assert restarted.pid != info.pid
    restored = own_stack.s3_restored(restarted.pid)
    assert restored is not None and restored["objects"] > 0 and restored["skipped"] == 0
    redeploy(restarted)
    client = client_of_stack(restarted)
    # THEN the same bucket holds the predictions of every shard completed before the kill, same
    # bytes; a write in flight at the kill is back whole or not at all
    assert client.stack.bucket == bucket
    back = _preds(client, job.job_id)
    assert {k: back[k][0] for k in completed} == {k: before[k][0] for k in completed}
    _assert_restored(client, before, back)
    # ... its record is back (the tables are written through to disk too), and the job resumes
    # from S3 and runs only the shards without predictions
    assert client.records.get(job.job_id) is not None
    resumed = client.resume(job.job_id)
    result = resumed.result(timeout=600)
    after = _preds(client, job.job_id)
    assert len(after) == 20
    assert {k: after[k] for k in back} == back  # nothing restored was written again
    shards = result.timings["shards"]
    assert len(shards) == 20  # every unit counted once
    done_before = {k.rsplit("/", 1)[-1].rsplit(".", 1)[0] for k in back}
    ran = {s["shard_id"] for s in shards} - done_before
    assert len(ran) == 20 - len(back)
    # ... and the estimate equals an uninterrupted run's
    clean = clean_job.result(timeout=600)
    np.testing.assert_array_equal(result.all_coef, clean.all_coef)
    np.testing.assert_array_equal(result.se, clean.se)
    # WHEN the stack is then stopped as `fanfit local down` stops it (SIGTERM), started again and
    # the project redeployed (issue 13, item 4: the tables are written through to disk)
    record = client.records.get(job.job_id)
    assert record is not None and record["status"] == "SUCCEEDED"
    job_table = _table_name(client, "JobTable")
    assert own_stack.stop()
    again = own_stack.start()
    tables = own_stack.dynamodb_restored(again.pid)
    assert tables is not None and tables["tables"] >= 3 and tables["items"] >= 1, tables
    assert tables["skipped"] == 0
    redeploy(again)
    client = client_of_stack(again)
    # THEN the redeployed stack names the same job table, and the job's record is back as it was
    assert _table_name(client, "JobTable") == job_table
    assert client.records.get(job.job_id) == record
    # ... its result is the same
    later = client.job(job.job_id).result(timeout=30)
    np.testing.assert_array_equal(later.all_coef, result.all_coef)
    np.testing.assert_array_equal(later.se, result.se)
    # ... and `fanfit status` and `fanfit report` of it work
    from fanfit import cli

    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(client))
    capsys.readouterr()  # what the fixtures printed
    assert cli.main(["status", job.job_id, "--output", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["status"] == "SUCCEEDED" and status["job_id"] == job.job_id
    assert cli.main(["report", job.job_id, "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.html").is_file()
    print(json.dumps({"completed": len(completed), "listed": len(before), "restored": len(back),
                      "run_again": len(ran), "restore": restored,
                      "tables_restored": tables}))  # fmt: skip


def test_killing_the_stack_in_a_qte_jobs_second_stage_loses_no_shard_and_resume_ends_it(
    own_stack: LocalStack,
    local_client: Any,
    redeploy: Any,
    client_of_stack: Any,
    wait_until: Any,
) -> None:
    import dataclasses

    from fanfit import storage
    from fanfit.client import qte as cqte
    from fanfit.client.options import EstimateOptions

    # GIVEN a QTE at the median as one job (PQ: two parts, one per treatment level, two stages
    # each), 2 folds x 2 repetitions, one unit per shard (8 shards a stage), one at a time, on a
    # stack of its own
    info = own_stack.start()
    redeploy(info)
    client = client_of_stack(info)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(600, 4))
    d = (rng.uniform(size=600) < 1 / (1 + np.exp(-x[:, 0]))).astype(float)
    frame = pd.DataFrame(x, columns=["x0", "x1", "x2", "x3"])
    frame = frame.assign(y=0.5 * d + x[:, 1] + rng.normal(size=600), d=d)
    options = EstimateOptions(data=frame, model="qte", y="y", d="d", x=["x0", "x1", "x2", "x3"],
                              ml_g="LogisticRegression", ml_m="LogisticRegression",
                              quantiles="0.5", n_folds=2, n_rep=2, seed=3, units_per_shard=1,
                              max_concurrency=1)  # fmt: skip
    # (the uninterrupted run, on the session's stack, runs meanwhile)
    clean_jobs = cqte.submit_qte(local_client, options=options)
    jobs = cqte.submit_qte(client, options=options)
    (job_id,) = jobs.job_ids

    def in_stage_1() -> set[str] | None:
        done = _completed_preds(client, job_id, (1,))
        if done:
            return done
        status = client.sfn.describe_execution(executionArn=jobs.jobs[0].execution_arn)["status"]
        assert status == "RUNNING", f"{job_id} is {status} before the kill"
        return None

    completed: set[str] = wait_until(
        in_stage_1,
        600,
        f"a completed shard of stage 1 of {job_id}",
        interval_s=0.2,
    )
    # WHEN LocalStack is killed while the second stage runs (SIGKILL)
    before = _preds(client, job_id, (0, 1))
    _kill(info.pid)
    stage_0 = {k for k in before if "/stages/0/" in k}
    assert len(stage_0) == 8 and 1 <= len(completed) < 8 and completed <= set(before)
    # ... and started again and the project redeployed
    restarted = own_stack.start()
    restored = own_stack.s3_restored(restarted.pid)
    assert restored is not None and restored["skipped"] == 0
    redeploy(restarted)
    client = client_of_stack(restarted)
    # THEN every predictions object of stage 0 and every acknowledged one of stage 1 is back,
    # same bytes; a write in flight at the kill is back whole or not at all
    back = _preds(client, job_id, (0, 1))
    assert stage_0 | completed <= set(back)
    _assert_restored(client, before, back)
    # ... and the resumed job runs only the shards without predictions, every unit once
    resumed = client.resume(job_id)
    result = dataclasses.replace(jobs, jobs=[resumed.part(k) for k in range(2)]).result(600)
    after = _preds(client, job_id, (0, 1))
    assert len(after) == 16
    assert {k: after[k] for k in back} == back  # nothing restored was written again
    shards = result.results[0].timings["shards"]
    assert len(shards) == 16
    ran = {f"{s['stage']}/{s['shard_id']}" for s in shards}
    kept = {f"{k.split('/stages/')[1][0]}/{storage.shard_id_of_preds_key(k)}" for k in back}
    assert kept <= ran and len(ran - kept) == 16 - len(back)
    # ... and every part's estimate and the effects equal an uninterrupted run's, bit for bit
    clean = clean_jobs.result(timeout=600)
    for attr in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_array_equal(getattr(result, attr), getattr(clean, attr), err_msg=attr)
    for part, clean_part in zip(result.results, clean.results, strict=True):
        np.testing.assert_array_equal(part.all_coef, clean_part.all_coef)
        np.testing.assert_array_equal(part.se, clean_part.se)
    assert client.records.get(job_id)["status"] == "SUCCEEDED"
    print(json.dumps({"qte_completed_stage_1": len(completed), "listed": len(before),
                      "restored": len(back), "restore": restored}))  # fmt: skip


def test_the_s3_mirror_keeps_the_latest_state_of_every_key_across_a_kill(
    own_stack: LocalStack,
) -> None:
    # GIVEN a versioned bucket written every way fanfit and boto3 write: put, overwrite, copy,
    # multipart upload (boto3's upload_fileobj above 8 MB), delete, delete_objects; a user
    # metadata entry and a content type
    import boto3
    from boto3.s3.transfer import TransferConfig

    info = own_stack.start()
    s3 = boto3.Session(**_credentials(info)).client("s3", endpoint_url=info.endpoint)
    s3.create_bucket(Bucket="mirror-test")
    s3.put_bucket_versioning(Bucket="mirror-test", VersioningConfiguration={"Status": "Enabled"})
    s3.create_bucket(Bucket="mirror-empty")
    s3.put_object(Bucket="mirror-test", Key="a/1.json", Body=b"{}", ContentType="application/json",
                  Metadata={"origin": "test"})  # fmt: skip
    s3.put_object(Bucket="mirror-test", Key="a/2", Body=b"first")
    s3.put_object(Bucket="mirror-test", Key="a/2", Body=b"second")
    s3.copy_object(Bucket="mirror-test", Key="b/copy", CopySource={"Bucket": "mirror-test",
                   "Key": "a/2"})  # fmt: skip
    big = np.random.default_rng(0).bytes(9 * 2**20)
    s3.upload_fileobj(io.BytesIO(big), "mirror-test", "big.bin",
                      Config=TransferConfig(multipart_threshold=5 * 2**20))  # fmt: skip
    for key in ("gone/1", "gone/2", "gone/3"):
        s3.put_object(Bucket="mirror-test", Key=key, Body=key.encode())
    s3.delete_object(Bucket="mirror-test", Key="gone/1")
    s3.delete_objects(
        Bucket="mirror-test", Delete={"Objects": [{"Key": "gone/2"}, {"Key": "gone/3"}]}
    )
    # WHEN LocalStack is killed and started again
    _kill(info.pid)
    info = own_stack.start()
    s3 = boto3.Session(**_credentials(info)).client("s3", endpoint_url=info.endpoint)
    # THEN both buckets and the latest state of every key are back
    names = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert {"mirror-test", "mirror-empty"} <= names
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="mirror-test")["Contents"]}
    assert keys == {"a/1.json", "a/2", "b/copy", "big.bin"}
    first = s3.get_object(Bucket="mirror-test", Key="a/1.json")
    assert first["Body"].read() == b"{}"
    assert first["ContentType"] == "application/json" and first["Metadata"] == {"origin": "test"}
    assert s3.get_object(Bucket="mirror-test", Key="a/2")["Body"].read() == b"second"
    assert s3.get_object(Bucket="mirror-test", Key="b/copy")["Body"].read() == b"second"
    assert s3.get_object(Bucket="mirror-test", Key="big.bin")["Body"].read() == big
    assert own_stack.s3_restored(info.pid)["objects"] == 4


def _credentials(info: StackInfo) -> dict[str, str]:
    return {"aws_access_key_id": "test", "aws_secret_access_key": "test",  # noqa: S106
            "region_name": info.region}  # fmt: skip
