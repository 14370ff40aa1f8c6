"""A job's whole life from the CLI on the local stack: detach, wait, result, cancel, delete,
``jobs --all`` and logs.

GIVEN the session's stack and a small PLR (300 rows, linear learners, 2 folds), WHEN a job is
started with ``--detach``, waited for and its result read, THEN the result's JSON is the attached
run's; WHEN a slow job (one fit per shard, one shard at a time) is cancelled, THEN its execution
stops, its partition is released and its status says CANCELLED; WHEN it is deleted, THEN its
objects, its data and its record are gone; ``fanfit jobs --all`` lists the jobs with status,
duration and cost, and ``fanfit logs`` shows the functions' lines of a job and of one shard.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit import storage

pytestmark = pytest.mark.integration

LIN = "LinearRegression"


def _frame(seed: int, n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    d = x[:, 0] + rng.normal(size=n)
    return pd.DataFrame({"y": 0.5 * d + x[:, 1] + rng.normal(size=n), "d": d,
                         "x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2]})  # fmt: skip


def _fanfit(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fanfit.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lifecycle") / "plr.csv"
    _frame(11).to_csv(path, index=False)
    return path


def _estimate_args(csv: Path) -> list[str]:
    return ["estimate", "--data", str(csv), "--y", "y", "--d", "d", "--x", "x0,x1,x2",
            "--ml-l", LIN, "--ml-m", LIN, "--n-folds", "2", "--seed", "3", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def detached(local_stack_env: dict[str, str], local_client: Any, small_csv: Path) -> dict:
    """A job started with ``--detach --output json`` and waited for with ``fanfit wait``."""
    started = _fanfit(local_stack_env, *_estimate_args(small_csv), "--detach", "--output", "json")
    assert started.returncode == 0, started.stderr
    out = json.loads(started.stdout)
    assert set(out) == {"job_id", "execution_arn"}  # the local stack: no console link
    waited = _fanfit(local_stack_env, "wait", out["job_id"], "--timeout", "300", "--quiet")
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout == f"job {out['job_id']} SUCCEEDED\n"
    return dict(out)


def test_detach_wait_result_gives_the_attached_runs_json(
    local_stack_env: dict[str, str], small_csv: Path, detached: dict
) -> None:
    # GIVEN the detached job, ended, and the same job run attached
    attached = _fanfit(local_stack_env, *_estimate_args(small_csv), "--output", "json")
    assert attached.returncode == 0, attached.stderr
    attached_json = json.loads(attached.stdout)
    # WHEN the results are read with fanfit result
    mine = _fanfit(local_stack_env, "result", detached["job_id"], "--output", "json")
    again = _fanfit(local_stack_env, "result", attached_json["job_id"], "--output", "json")
    assert mine.returncode == 0 and again.returncode == 0, mine.stderr + again.stderr
    # THEN fanfit result prints exactly what the attached run printed, job id and set-up included
    assert json.loads(again.stdout) == attached_json
    result = json.loads(mine.stdout)
    assert result["job_id"] == detached["job_id"]
    assert result["execution_arn"] == detached["execution_arn"]
    assert result["spec"]["x_cols"] == ["x0", "x1", "x2"] and result["spec"]["seed"] == 3
    assert set(result["spec"]["learners"]) == {"ml_l", "ml_m"}
    assert (result["n_folds"], result["n_rep"]) == (2, 1)
    # ... and the same estimate as the attached run (same data, folds and seed)
    assert result["coef"] == pytest.approx(attached_json["coef"], rel=1e-12)
    # AND the table is the attached run's printout
    table = _fanfit(local_stack_env, "result", detached["job_id"])
    assert table.returncode == 0 and "DoubleMLPLR Object" in table.stdout
    assert f"Job: {detached['job_id']}" in table.stdout
    # AND cancelling the ended job leaves it as it is
    cancel = _fanfit(local_stack_env, "cancel", detached["job_id"])
    assert cancel.returncode == 0 and "had already ended (SUCCEEDED)" in cancel.stdout


def test_cancel_stops_a_running_job_and_delete_removes_it(
    local_stack_env: dict[str, str], local_client: Any, stopped_jobs: Any, wait_until: Any
) -> None:
    # GIVEN a slow job (200 shards of one fit, one at a time: minutes, while the test needs
    # seconds; it is cancelled long before its end) that holds its partition
    running_before = stopped_jobs.snapshot()
    job = local_client.submit_estimate(
        _frame(12), model="plr", y="y", d="d", x=["x0", "x1", "x2"], ml_l=LIN, ml_m=LIN,
        n_folds=10, n_rep=10, seed=5, units_per_shard=1, max_concurrency=1,
    )  # fmt: skip
    wait_until(lambda: local_client.partitions.get(job.job_id), 120,
               f"the partition of {job.job_id}", interval_s=0.5)  # fmt: skip
    # ... which cannot be deleted while it runs (one line naming the error and the fix, exit 2)
    refused = _fanfit(local_stack_env, "delete", job.job_id)
    assert refused.returncode == 2 and "JobRunningError" in refused.stderr, refused.stderr
    assert f"fanfit cancel {job.job_id}" in refused.stderr
    # WHEN it is cancelled from the CLI
    done = _fanfit(local_stack_env, "cancel", job.job_id, "--output", "json")
    # THEN the execution stopped, the partition was released, and its status says CANCELLED
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["stopped"] is True, out
    assert out["partition_released"] is True, out
    assert out["status"] == "CANCELLED"
    stopped_jobs.wait(job.execution_arn, running_before)
    assert (
        local_client.sfn.describe_execution(executionArn=job.execution_arn)["status"] != "RUNNING"
    )
    assert local_client.partitions.get(job.job_id) is None
    status = _fanfit(local_stack_env, "status", job.job_id)
    assert "status: CANCELLED" in status.stdout.splitlines(), status.stdout + status.stderr
    # ... and waiting for it says so in one line, exit 3
    waited = _fanfit(local_stack_env, "wait", job.job_id, "--quiet")
    assert waited.returncode == 3 and "cancelled" in waited.stderr
    assert len(waited.stderr.strip().splitlines()) == 1, waited.stderr
    # ... and fanfit jobs --all lists it as CANCELLED
    listed = _fanfit(local_stack_env, "jobs", "--all", "--limit", "5", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["job_id"]: r for r in json.loads(listed.stdout)}
    assert rows[job.job_id]["status"] == "CANCELLED" and rows[job.job_id]["duration_s"] > 0
    # WHEN it is deleted
    spec = local_client.store.get_json(storage.spec_key(job.job_id))
    deleted = _fanfit(local_stack_env, "delete", job.job_id, "--output", "json")
    # THEN its objects, its data (no other job uses it) and its record are gone
    assert deleted.returncode == 0, deleted.stderr
    gone = json.loads(deleted.stdout)
    assert gone["objects_removed"] > 0 and gone["data_removed"] == [spec["data_key"]]
    assert local_client.store.list_keys(storage.job_prefix(job.job_id)) == []
    assert not local_client.store.exists(spec["data_key"])
    assert local_client.records.get(job.job_id) is None
    # ... and a second delete names the job that is gone, in one line
    again = _fanfit(local_stack_env, "delete", job.job_id)
    assert again.returncode != 0 and job.job_id in again.stderr
    assert "Traceback" not in again.stderr


def test_jobs_all_lists_the_ended_job_with_duration_and_cost(
    local_stack_env: dict[str, str], detached: dict
) -> None:
    # GIVEN the detached job, ended WHEN fanfit jobs --all lists the history
    listed = _fanfit(local_stack_env, "jobs", "--all", "--limit", "5")
    # THEN its line has its status, a duration and a cost
    assert listed.returncode == 0, listed.stderr
    line = next(li for li in listed.stdout.splitlines() if li.startswith(detached["job_id"]))
    assert "SUCCEEDED" in line and "n/a" not in line
    as_json = _fanfit(local_stack_env, "jobs", "--all", "--limit", "5", "--output", "json")
    row = next(r for r in json.loads(as_json.stdout) if r["job_id"] == detached["job_id"])
    assert row["duration_s"] > 0 and row["cost_usd"] > 0 and row["ended_at"] > row["started_at"]
    # AND fanfit jobs, with no job of this module running, prints its table or its one line
    running = _fanfit(local_stack_env, "jobs")
    assert running.returncode == 0 and "Traceback" not in running.stderr, running.stderr


def test_logs_show_the_functions_lines_of_a_job_and_of_one_shard(
    local_stack_env: dict[str, str], local_client: Any, detached: dict, wait_until: Any
) -> None:
    # GIVEN the detached job, ended, and one of its shards
    result = local_client.job(detached["job_id"]).result()
    shard_id = result.timings["shards"][0]["shard_id"]

    # WHEN its logs are read (CloudWatch Logs may take a moment to hold the last lines)
    def lines(*extra: str) -> list[dict]:
        done = _fanfit(local_stack_env, "logs", detached["job_id"], *extra, "--output", "json")
        assert done.returncode == 0, done.stderr
        return [json.loads(li) for li in done.stdout.splitlines()]

    events = wait_until(lines, 60, f"log lines of {detached['job_id']}", interval_s=2.0)
    # THEN they are the functions' lines naming the job, from the stack's Lambda log groups
    assert all(detached["job_id"] in e["message"] for e in events)
    assert any(e["log_group"].startswith("/aws/lambda/") for e in events)
    # AND --shard keeps that shard's lines only
    shard = lines("--shard", shard_id)
    assert shard and all(shard_id in e["message"] for e in shard)
    assert len(shard) < len(events)


def test_cancel_during_a_wave_stops_its_running_shard_within_seconds(
    local_client: Any, fanfit_outputs: dict[str, str], wait_until: Any
) -> None:
    import time

    from fanfit.client.running import running_steps, step_keys

    # GIVEN an estimate whose shards fit 20 forest units each (tens of seconds a shard on this
    # machine), one shard at a time, and one of its shards running (its idempotency record)
    rf = 'RandomForestRegressor:{"n_estimators": 200, "random_state": 0}'
    job = local_client.submit_estimate(
        _frame(13, n=3000), model="plr", y="y", d="d", x=["x0", "x1", "x2"], ml_l=rf, ml_m=rf,
        n_folds=5, n_rep=2, seed=5, units_per_shard=20, max_concurrency=1,
    )  # fmt: skip
    dynamodb = local_client.session.client("dynamodb", endpoint_url=local_client.stack.endpoint_url)
    table = fanfit_outputs["IdempotencyTableName"]
    running: list[str] = []

    def a_shard_runs() -> bool:
        running[:] = running_steps(dynamodb, table, step_keys(local_client.store, job.job_id,
                                                              "estimate"))  # fmt: skip
        return bool(running)

    wait_until(a_shard_runs, 180, f"a running shard of {job.job_id}", interval_s=0.2)
    # WHEN the job is cancelled
    cancelled_at = time.perf_counter()
    out = job.cancel()
    returned_s = time.perf_counter() - cancelled_at
    # THEN the cancel returned once nothing of the job ran, within 10 s of the stop
    assert out["stopped"] is True and out["still_running"] == [], out
    assert returned_s < 10.0, (returned_s, out)
    # ... and the stopped shard wrote no predictions (a resume fits its units again)
    shard_id = running[0].rsplit("shard ", 1)[1].split(" ")[0]
    assert not local_client.store.exists(storage.preds_key(job.job_id, 0, shard_id)), running
    print(json.dumps({"cancel_stop_s": round(returned_s, 2), "waited_s": round(out["waited_s"], 2),
                      "running_at_cancel": running}))  # fmt: skip
