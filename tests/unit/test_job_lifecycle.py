"""A job's life from the client and the CLI, on moto: cancel, delete, history, and how ``fanfit
estimate``/``train``/``wait``/``result`` follow a job (``--detach``, ``--timeout``, Ctrl-C).

The stack here is moto's (no CloudFormation, no functions): state machines of one Pass state,
whose executions stay RUNNING until stopped, fanfit's bucket and tables, and the partition table.
The same commands run against the local stack in tests/integration/test_lifecycle_on_stack.py.
"""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from fanfit import cli, errors, storage
from fanfit.cli import attach, main

PARTITION_TABLE = "fanfit-partitions"


@pytest.fixture
def client(moto_stack, moto_client) -> Any:
    """A client of the moto stack with the partition table (account concurrency 4)."""
    env = {"FANFIT_PARTITION_TABLE": PARTITION_TABLE, "FANFIT_ACCOUNT_CONCURRENCY": "4"}
    with moto_stack(env, hash_tables=(PARTITION_TABLE,)):
        made = moto_client(partition_table=PARTITION_TABLE)
        made.__dict__["_lifecycle_outputs"] = {"outputs": {}}  # no CloudFormation: no Batch queue
        yield made


def _start(client: Any, job_id: str, **spec: Any) -> str:
    """Put a job's spec and two objects, start its execution and record it; its execution ARN."""
    client.store.put_json(storage.spec_key(job_id), {"kind": "estimate", **spec})
    client.store.put_json(storage.plan_key(job_id), {"job_id": job_id})
    client.store.put_bytes(storage.preds_key(job_id, 0, "00000"), b"npz")
    arn = client.sfn.start_execution(
        stateMachineArn=client.stack.estimate_state_machine_arn, name=job_id, input="{}"
    )["executionArn"]
    client.records.mark_running(job_id, execution_arn=arn, kind="estimate")
    return str(arn)


def _stop(client: Any, arn: str) -> None:
    client.sfn.stop_execution(executionArn=arn)


def test_cancel_stops_the_execution_releases_the_partition_and_says_cancelled(client) -> None:
    from fanfit.jobs.sharing import register_job

    # GIVEN two running jobs holding partitions of a concurrency of 4
    arn = _start(client, "est-a")
    other = _start(client, "est-b")
    register_job(client.partitions, "est-a", "estimate", demand=4, capacity=(4, 0),
                 execution_arn=arn, sfn=client.sfn)  # fmt: skip
    register_job(client.partitions, "est-b", "estimate", demand=4, capacity=(4, 0),
                 execution_arn=other, sfn=client.sfn)  # fmt: skip
    assert client.partitions.get("est-b")["partition"] < 4
    # WHEN the first is cancelled
    out = client.job("est-a").cancel()
    # THEN its execution is stopped, its partition handed to the other job, its status CANCELLED
    waited_s = out.pop("waited_s")
    assert out == {"job_id": "est-a", "status": "CANCELLED", "stopped": True,
                   "batch_jobs_terminated": [], "partition_released": True,
                   "still_running": None}  # fmt: skip
    # (no idempotency table in this stack's outputs: its steps cannot be seen, nothing waited)
    assert waited_s == 0.0
    assert client.sfn.describe_execution(executionArn=arn)["status"] == "ABORTED"
    assert client.partitions.get("est-a") is None
    assert client.partitions.get("est-b")["partition"] == 4
    assert client.records.get("est-a")["status"] == storage.JOB_STATUS_CANCELLED
    assert client.job("est-a").status() == "CANCELLED"
    # AND waiting for it raises the named error, which the CLI's wait turns into exit 3
    with pytest.raises(errors.JobCancelledError, match="est-a was cancelled"):
        client.job("est-a").wait(timeout=1.0)
    # AND cancelling it again changes nothing
    again = client.job("est-a").cancel()
    assert again["stopped"] is False and again["status"] == "CANCELLED"


def test_delete_removes_the_jobs_objects_and_records_and_keeps_shared_data(client) -> None:
    # GIVEN two ended jobs on the same uploaded data, and a third on data of its own
    import numpy as np

    shared = client.store.put_data(["a", "b"], np.arange(6.0).reshape(3, 2))
    own = client.store.put_data(["a", "b"], np.arange(8.0).reshape(4, 2))
    for job_id, key in (("est-1", shared), ("est-2", shared), ("est-3", own)):
        _stop(client, _start(client, job_id, data_key=key))
    # WHEN the first and the third are deleted
    first = client.delete("est-1")
    third = client.delete("est-3")
    # THEN their objects and records are gone; the data another job uses is kept, the rest removed
    assert first["objects_removed"] == 3 and first["record_removed"] is True
    assert first["data_removed"] == [] and first["data_kept"] == [shared]
    assert third["data_removed"] == [own]
    assert (
        client.store.list_keys("jobs/est-1/") == [] and client.store.list_keys("jobs/est-3/") == []
    )
    assert client.records.get("est-1") is None and client.records.get("est-3") is None
    assert client.store.exists(shared) and not client.store.exists(own)
    assert client.store.list_keys("jobs/est-2/") != []
    # AND the last job on the shared data takes it with it
    assert client.delete("est-2")["data_removed"] == [shared]
    assert not client.store.exists(shared)
    # AND a job that is gone is named as such
    with pytest.raises(errors.JobNotFoundError, match="no job 'est-1'"):
        client.delete("est-1")


def test_delete_removes_every_version_in_a_versioned_bucket(client) -> None:
    # GIVEN a versioned bucket and an ended job whose object was written twice
    client.s3.put_bucket_versioning(
        Bucket="fanfit-unit", VersioningConfiguration={"Status": "Enabled"}
    )
    arn = _start(client, "est-v")
    client.store.put_json(storage.plan_key("est-v"), {"job_id": "est-v", "again": True})
    _stop(client, arn)
    # WHEN it is deleted
    client.delete("est-v")
    # THEN no version nor delete marker of it is left
    left = client.s3.list_object_versions(Bucket="fanfit-unit", Prefix="jobs/est-v/")
    assert left.get("Versions", []) == [] and left.get("DeleteMarkers", []) == []


def test_delete_refuses_a_running_job_by_name(client, monkeypatch, capsys) -> None:
    # GIVEN a running job
    _start(client, "est-r")
    # WHEN it is deleted THEN a named error says to cancel it first, and nothing is removed
    with pytest.raises(errors.JobRunningError, match=r"fanfit cancel est-r"):
        client.delete("est-r")
    assert client.store.list_keys("jobs/est-r/") != []
    # AND the CLI says it in one line with exit code 2
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(client))
    assert main(["delete", "est-r"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "JobRunningError" in err[0] and "fanfit cancel est-r" in err[0]


def test_history_lists_running_and_ended_jobs_with_status_and_duration(client) -> None:
    # GIVEN a running job, a cancelled one and one whose record says it failed
    _start(client, "est-run")
    _start(client, "est-can")
    client.job("est-can").cancel()
    _stop(client, _start(client, "est-fail"))
    client.records.update("est-fail", status="FAILED")
    # WHEN the history is read
    rows = {r["job_id"]: r for r in client.history()}
    # THEN every job is there with its status; ended jobs have an end, running ones a duration so far
    assert {k: r["status"] for k, r in rows.items()} == {
        "est-run": "RUNNING", "est-can": "CANCELLED", "est-fail": "FAILED"
    }  # fmt: skip
    assert rows["est-run"]["ended_at"] is None and rows["est-run"]["duration_s"] >= 0.0
    assert rows["est-can"]["ended_at"] is not None
    assert all(r["kind"] == "estimate" for r in rows.values())
    assert len(client.history(limit=2)) == 2


def test_jobs_with_no_job_running_says_so_in_one_line(monkeypatch, capsys) -> None:
    # GIVEN a stack without running jobs
    fake = SimpleNamespace(jobs=lambda: [], history=lambda limit=None: [])
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(fake))
    # WHEN fanfit jobs and fanfit jobs --all run THEN each prints one line and exits 0
    assert main(["jobs"]) == 0
    assert capsys.readouterr().out.strip().startswith("no job is running")
    assert main(["jobs", "--all"]) == 0
    assert capsys.readouterr().out.strip() == "no job on this stack"


def test_jobs_all_prints_status_duration_and_cost(monkeypatch, capsys) -> None:
    # GIVEN a history of two jobs
    rows = [
        {"job_id": "est-2", "kind": "estimate", "status": "RUNNING", "started_at": 1.7e9,
         "ended_at": None, "duration_s": 12.5, "cost_usd": None, "execution_arn": "arn:2"},
        {"job_id": "est-1", "kind": "estimate", "status": "CANCELLED", "started_at": 1.7e9 - 99,
         "ended_at": 1.7e9, "duration_s": 99.0, "cost_usd": 0.000123, "execution_arn": "arn:1"},
    ]  # fmt: skip
    fake = SimpleNamespace(history=lambda limit=None: rows[:limit])
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(fake))
    # WHEN fanfit jobs --all prints them
    assert main(["jobs", "--all"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # THEN a header and one line each, with duration and cost
    assert lines[0].split() == [
        "job",
        "kind",
        "status",
        "started",
        "(UTC)",
        "duration",
        "cost",
        "(USD)",
    ]
    assert "12.5 s so far" in lines[1] and "n/a" in lines[1]
    assert "CANCELLED" in lines[2] and "1:39" in lines[2] and "0.000123" in lines[2]


class _Job:
    """A job handle whose ``result`` raises ``exc`` or returns a result with ``to_dict``."""

    kind = "estimate"
    job_id = "est-x"
    execution_arn = "arn:aws:states:eu-west-1:123456789012:execution:fanfit-estimate:est-x"

    def __init__(self, exc: BaseException | None = None, console: str | None = None) -> None:
        self.exc = exc
        self.console_url = console
        self.waited: list[float] = []

    def result(self, timeout: float = 3600.0, progress: Any = False) -> Any:
        self.waited.append(timeout)
        if self.exc is not None:
            raise self.exc
        return SimpleNamespace(to_dict=lambda: {"job_id": self.job_id, "coef": {"d": 1.0}})

    def wait(self, timeout: float = 3600.0, progress: Any = False) -> Any:
        return self.result(timeout, progress)


def _args(**kw: Any) -> Any:
    base = {"detach": False, "output": "table", "timeout": 5.0, "quiet": True, "stack": None,
            "region": None}  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_detach_prints_the_job_id_or_one_json_object_at_once(capsys) -> None:
    # GIVEN a job just started
    job = _Job(console="https://console")
    # WHEN followed with --detach THEN only its id is printed (JSON: id, execution, console link)
    assert attach.follow(_args(detach=True), job, print) == 0
    assert capsys.readouterr().out == "est-x\n"
    assert attach.follow(_args(detach=True, output="json"), job, print) == 0
    assert json.loads(capsys.readouterr().out) == {
        "job_id": "est-x", "execution_arn": job.execution_arn, "console_url": "https://console"
    }  # fmt: skip
    assert job.waited == []


def test_timeout_and_ctrl_c_detach_and_print_the_next_commands(capsys) -> None:
    # GIVEN a job that outlives the --timeout, and one interrupted by Ctrl-C
    slow = _Job(errors.WaitTimeoutError("job est-x did not end within 5 s"))
    interrupted = _Job(KeyboardInterrupt())
    # WHEN followed THEN the command detaches with exit 4 or 130 and names the next commands
    assert attach.follow(_args(stack="prod"), slow, print) == attach.EXIT_DETACHED == 4
    err = capsys.readouterr().err
    assert "--timeout 5 s ran out; detached" in err
    for command in ("wait", "result", "cancel"):
        assert f"fanfit {command} est-x --stack prod" in err
    assert attach.follow(_args(), interrupted, print) == attach.EXIT_INTERRUPTED == 130
    assert "interrupted; detached" in capsys.readouterr().err


def test_wait_exits_0_3_or_4_with_one_line(monkeypatch, capsys) -> None:
    # GIVEN jobs that succeed, were cancelled, failed, or outlive the timeout
    outcomes = {
        "ok": None,
        "cancelled": errors.JobCancelledError("job cancelled was cancelled (status CANCELLED)"),
        "failed": errors.ShardFailedError("job failed failed: shard 00001 kept failing"),
        "slow": errors.WaitTimeoutError("job slow did not end within 1 s; it is still running"),
    }
    fake = SimpleNamespace(job=lambda job_id: _Job(outcomes[job_id]))
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(fake))
    # WHEN fanfit wait follows each THEN exit 0, 3, 3, 4, one line each
    codes = {job_id: main(["wait", job_id, "--timeout", "1", "--quiet"]) for job_id in outcomes}
    assert codes == {"ok": 0, "cancelled": 3, "failed": 3, "slow": 4}
    captured = capsys.readouterr()
    assert captured.out == "job ok SUCCEEDED\n"
    lines = captured.err.splitlines()
    assert len(lines) == 3
    assert "ShardFailedError" in lines[1] and "fanfit cancel slow" in lines[2]


def test_result_of_a_running_job_exits_4_and_of_an_ended_one_prints_its_json(
    monkeypatch, capsys
) -> None:
    # GIVEN a running job and an ended one
    jobs = {"run": _Job(errors.WaitTimeoutError("still running")), "done": _Job()}
    fake = SimpleNamespace(job=lambda job_id: jobs[job_id])
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(fake))
    # WHEN fanfit result reads them THEN the running one exits 4 without waiting
    assert main(["result", "run"]) == 4 and jobs["run"].waited == [0.0]
    assert "still running" in capsys.readouterr().err
    # AND the ended one prints the attached run's JSON
    assert main(["result", "done", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"job_id": "est-x", "coef": {"d": 1.0}}


def test_the_console_link_names_the_region_and_the_execution() -> None:
    from fanfit.client.jobs import console_url

    # GIVEN an execution ARN in eu-west-1 WHEN linked THEN the console page of that execution
    url = console_url(_Job.execution_arn)
    assert url.startswith("https://eu-west-1.console.aws.amazon.com/states/home?region=eu-west-1")
    assert url.endswith(
        "arn%3Aaws%3Astates%3Aeu-west-1%3A123456789012%3Aexecution%3Afanfit-estimate%3Aest-x"
    )


def test_a_batch_job_belongs_to_the_job_its_task_names() -> None:
    from fanfit.client.jobs import batch_jobs_of

    # GIVEN a queue holding GPU worker jobs of two fanfit jobs (and one with a task not JSON)
    tasks = {"b1": {"job_id": "est-a", "shard_id": "00001"}, "b2": {"job_id": "est-b"},
             "b3": "not json"}  # fmt: skip

    class _Batch:
        def get_paginator(self, name: str) -> Any:
            return SimpleNamespace(paginate=lambda **kw: [
                {"jobSummaryList": [{"jobId": j} for j in tasks] if kw["jobStatus"] == "RUNNING"
                 else []}])  # fmt: skip

        def describe_jobs(self, jobs: list[str]) -> dict[str, Any]:
            return {"jobs": [{"jobId": j, "parameters": {"task": tasks[j] if isinstance(
                tasks[j], str) else json.dumps(tasks[j])}} for j in jobs]}  # fmt: skip

    fake = SimpleNamespace(
        session=SimpleNamespace(client=lambda name, endpoint_url=None: _Batch()),
        stack=SimpleNamespace(endpoint_url=None),
        _lifecycle_outputs={"outputs": {"GpuJobQueueArn": "arn:queue"}},
    )
    # WHEN the Batch jobs of est-a are listed THEN only its own
    assert [j["jobId"] for j in batch_jobs_of(fake, "est-a")] == ["b1"]


def test_cancel_waits_for_the_jobs_running_steps_and_names_those_that_still_run(client) -> None:
    import hashlib
    import json
    import time

    import boto3

    from fanfit.client.jobs import cancel_job

    # GIVEN a running estimate with 4 units in stage 0, whose shard 00001 runs (its idempotency
    # record is in progress for another minute), on a stack that names its idempotency table
    client.__dict__["_lifecycle_outputs"] = {
        "outputs": {"IdempotencyTableName": "fanfit-idempotency"}
    }
    arn = _start(client, "est-w")
    client.store.put_json(storage.units_key("est-w", 0), [{}, {}, {}, {}])
    digest = hashlib.md5(json.dumps(["est-w", 0, "00001"]).encode()).hexdigest()
    expires = int(time.time() * 1000) + 60_000
    boto3.client("dynamodb").put_item(TableName="fanfit-idempotency", Item={
        "id": {"S": f"fanfit-CrossFit-9.lambda_handler#{digest}"}, "status": {"S": "INPROGRESS"},
        "in_progress_expiration": {"N": str(expires)}})  # fmt: skip
    # WHEN it is cancelled with a wait of half a second
    out = cancel_job(client, "est-w", arn, wait_s=0.5)
    # THEN the cancel waited that long and names the shard that still runs
    assert out["stopped"] is True and out["status"] == "CANCELLED"
    assert out["still_running"] == ["fanfit-CrossFit-9: shard 00001 of stage 0"]
    assert 0.5 <= out["waited_s"] < 5.0
    # WHEN the shard returns (its record completes) and the job is looked at again
    boto3.client("dynamodb").update_item(
        TableName="fanfit-idempotency", Key={"id": {"S": f"fanfit-CrossFit-9.lambda_handler#{digest}"}},
        UpdateExpression="SET #s = :c", ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":c": {"S": "COMPLETED"}})  # fmt: skip
    from fanfit.client.jobs import _wait_for_steps

    still, waited = _wait_for_steps(client, "est-w", "estimate", 5.0)
    # THEN nothing of it runs, seen at the first look
    assert still == [] and waited < 1.0


@pytest.mark.parametrize(
    ("still", "said"),
    [
        ([], "nothing of it runs any more (1.2 s after the stop)"),
        (["fanfit-CrossFit-1: shard 00004 of stage 0"],
         "still running after 1.2 s (they stop at their next unit or poll): "
         "fanfit-CrossFit-1: shard 00004 of stage 0"),
        (None, "its running steps cannot be seen (no dynamodb:Scan on the idempotency table)"),
    ],
)  # fmt: skip
def test_cancel_says_whether_anything_of_the_job_still_runs(monkeypatch, capsys, still, said):
    from fanfit.cli import common

    # GIVEN a cancel that stopped the job and then saw `still` running after its wait
    out = {"job_id": "est-x", "status": "CANCELLED", "stopped": True, "batch_jobs_terminated": [],
           "partition_released": True, "still_running": still, "waited_s": 1.2}  # fmt: skip
    fake = SimpleNamespace(job=lambda job_id: SimpleNamespace(cancel=lambda: out))
    monkeypatch.setattr(common, "stack_client", lambda args: contextlib.nullcontext(fake))
    # WHEN fanfit cancel runs THEN it exits 0 and its second line says what still runs
    assert main(["cancel", "est-x"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("job est-x CANCELLED: execution stopped")
    assert lines[1] == said
