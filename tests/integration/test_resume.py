"""A shard that keeps failing names itself; a stopped job resumed runs only its missing shards.

On the session's local stack:

- a PLR job whose folds leave one fold's training rows with a single treatment class makes exactly
  one unit (``ml_m`` of that fold, a LogisticRegression) fail every time: the job must end with
  ``ShardFailedError`` naming that shard and its last error, in the client's exception, in the job
  record and in ``fanfit status``;
- a job stopped (``StopExecution``) after some of its shards wrote their predictions, then resumed
  (``Client.resume``), must run only the shards without predictions, leave the others untouched,
  and give the estimate of an uninterrupted run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit import errors, storage

pytestmark = pytest.mark.integration


def _single_class_fold_data(n: int = 60) -> tuple[pd.DataFrame, np.ndarray]:
    """Binary-treatment PLR data and folds whose fold 1 holds only untreated rows: the ml_m fit of
    fold 0 (trained on fold 1) sees one class and fails; every other fit succeeds."""
    rng = np.random.default_rng(0)
    d = (rng.random(n) < 0.5).astype(float)
    x = rng.normal(size=(n, 2))
    y = d + x[:, 0] + rng.normal(size=n)
    folds = np.zeros((n, 1), dtype=np.int64)
    folds[np.flatnonzero(d == 0)[:10], 0] = 1
    frame = pd.DataFrame({"y": y, "d": d, "x0": x[:, 0], "x1": x[:, 1]})
    return frame, folds


def test_a_shard_that_keeps_failing_ends_the_job_with_its_name_and_last_error(
    local_client: Any, local_stack_env: dict[str, str]
) -> None:
    # GIVEN a job in which exactly one unit (ml_m, repetition 0, fold 0) always fails
    frame, folds = _single_class_fold_data()
    job = local_client.submit_estimate(
        frame, model="plr", y="y", d="d", x=["x0", "x1"], ml_l="LinearRegression",
        ml_m="LogisticRegression", n_folds=2, n_rep=1, folds=folds, units_per_shard=1,
    )  # fmt: skip
    # WHEN it runs
    with pytest.raises(errors.ShardFailedError) as info:
        job.wait(timeout=300)
    # THEN the error names the shard that fitted that unit and its last error
    schedule = local_client.store.get_json(storage.schedule_key(job.job_id, 0))
    failing = [
        sh["shard_id"]
        for w in schedule["waves"]
        for sh in w["shards"]
        if sh["units"] == ["s0-t0-r0-f0-ml_m"]
    ]
    assert info.value.shard_id == failing[0]
    assert info.value.stage == 0 and info.value.wave == 0
    assert "at least 2 classes" in info.value.last_error
    assert f"shard {failing[0]}" in str(info.value)
    # ... the job record holds them
    record = job.record()
    assert record["status"] == "FAILED" and record["error"] == "ShardFailedError"
    assert record["failed_shard"] == failing[0]
    assert record["shard_error"].startswith("ValueError: ")
    # ... and `fanfit status` shows them (and exits 3: the job failed); --stack: the session's
    # stack through its endpoint variables, without redeploying
    done = subprocess.run(
        [sys.executable, "-m", "fanfit.cli", "status", job.job_id, "--stack", "fanfit"],
        env=local_stack_env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert f"failed_shard: {failing[0]}" in done.stdout
    assert "shard_error: ValueError: " in done.stdout
    assert "error: ShardFailedError" in done.stdout


def _preds(client: Any, job_id: str) -> dict[str, str]:
    """Key -> ETag of every predictions object of stage 0."""
    pages = client.s3.get_paginator("list_objects_v2").paginate(
        Bucket=client.stack.bucket, Prefix=f"jobs/{job_id}/stages/0/preds/"
    )
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def test_a_stopped_job_resumed_runs_only_its_missing_shards(
    local_client: Any, stopped_jobs: Any, wait_until: Any
) -> None:
    # GIVEN a PLR with 5 folds x 2 repetitions, one unit per shard (20 shards), one at a time
    rng = np.random.default_rng(7)
    n = 400
    x = rng.normal(size=(n, 3))
    d = x[:, 0] + rng.normal(size=n)
    frame = pd.DataFrame({"y": 0.5 * d + x[:, 1] + rng.normal(size=n), "d": d,
                          "x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2]})  # fmt: skip
    options = dict(model="plr", y="y", d="d", x=["x0", "x1", "x2"], ml_l="LinearRegression",
                   ml_m="LinearRegression", n_folds=5, n_rep=2, seed=5, units_per_shard=1,
                   max_concurrency=1)  # fmt: skip
    running_before = stopped_jobs.snapshot()
    job = local_client.submit_estimate(frame, **options)
    # WHEN it is stopped once a few shards have written their predictions
    wait_until(lambda: len(_preds(local_client, job.job_id)) >= 4, 300,
               f"4 predictions of {job.job_id}", interval_s=0.5)  # fmt: skip
    local_client.sfn.stop_execution(executionArn=job.execution_arn, error="Test.Stopped")
    # ... and is over: a shard in flight when the execution stopped may still land
    stopped_jobs.wait(job.execution_arn, running_before)
    before = _preds(local_client, job.job_id)
    assert 4 <= len(before) < 20, len(before)
    # ... and resumed
    resumed = local_client.resume(job.job_id)
    assert resumed.execution_arn != job.execution_arn
    result = resumed.result(timeout=600)
    # THEN the shards written before were neither run again nor rewritten
    after = _preds(local_client, job.job_id)
    assert {k: after[k] for k in before} == before
    shards = result.timings["shards"]
    assert len(shards) == 20  # every unit counted once
    new_ids = {s["shard_id"] for s in shards} - {k.rsplit("/", 1)[-1][:-4] for k in before}
    assert len(new_ids) == 20 - len(before)
    schedule = local_client.store.get_json(storage.schedule_key(job.job_id, 0))
    run_again = [sh for w in schedule["waves"] for sh in w["shards"] if sh["shard_id"] in new_ids]
    assert len(run_again) == 20 - len(before)
    # ... the resumed execution invoked CrossFit only for the missing shards
    history = local_client.sfn.get_execution_history(
        executionArn=resumed.execution_arn, maxResults=1000
    )["events"]
    map_started = [e for e in history if e["type"] == "MapRunStarted"]
    assert map_started  # the missing shards ran in the resumed execution's Map
    # ... and the estimate equals an uninterrupted run's
    clean = local_client.estimate(frame, timeout=600, **options)
    np.testing.assert_array_equal(result.all_coef, clean.all_coef)
    np.testing.assert_array_equal(result.coef, clean.coef)
    np.testing.assert_array_equal(result.se, clean.se)
    print(json.dumps({"kept": len(before), "run_again": len(new_ids)}))
