"""A train job stopped mid-run and resumed on the local stack ends as an uninterrupted run.

On the session's local stack: a K-Means job (600 rows, 8 clusters, 10 rounds, 2 workers) is
stopped with ``StopExecution`` once a few rounds are reduced, then resumed (``Client.resume``,
a new execution ``<job>-r<epoch s>``). The resumed execution must start at the first round whose
reduced model is not in S3, leave every reduced round's objects as they were (same ETags), and end
with the centroids, inertia and round records of an uninterrupted run with the same spec and seed,
bit for bit (uniform batches: every round's rows and each reduce's summation order depend on the
seed and the round only).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit import errors

pytestmark = pytest.mark.integration

OPTIONS = dict(model="kmeans", features=["u", "v"], n_clusters=8, workers=2, rounds=10,
               balance="uniform", seed=1)  # fmt: skip


def _frame() -> pd.DataFrame:
    """Uniform points in the unit square: Lloyd takes more than 10 iterations on them (33)."""
    X = np.random.default_rng(2).random((600, 2))
    return pd.DataFrame({"u": X[:, 0], "v": X[:, 1]})


def _etags(client: Any, job_id: str) -> dict[str, str]:
    """Key -> ETag of every object of the job's rounds and models."""
    pages = client.s3.get_paginator("list_objects_v2").paginate(
        Bucket=client.stack.bucket, Prefix=f"jobs/{job_id}/train/"
    )
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def _n_models(client: Any, job_id: str) -> int:
    return sum(1 for k in _etags(client, job_id) if "/train/state/" in k)


def test_a_stopped_train_job_resumed_equals_the_uninterrupted_run(
    local_client: Any, stopped_jobs: Any, wait_until: Any
) -> None:
    from fanfit.client.train import TrainJob
    from fanfit.jobs.train import resume_point

    client = local_client
    # GIVEN a K-Means job that is stopped once at least 3 rounds are reduced
    running_before = stopped_jobs.snapshot()
    job = client.submit_train(_frame(), **OPTIONS)
    wait_until(lambda: _n_models(client, job.job_id) >= 4, 300,
               f"4 reduced models of {job.job_id}", interval_s=0.2)  # fmt: skip
    client.sfn.stop_execution(executionArn=job.execution_arn, error="Test.Stopped")
    # ... resuming it while it runs was refused before; now it is stopped, and a step in flight
    # when the execution stopped has landed
    stopped_jobs.wait(job.execution_arn, running_before)
    # (AWS reports ABORTED; the local stack's interpreter reports FAILED when the stop lands while
    # a round's Distributed Map runs: StoppedJobs in conftest.py)
    status = client.sfn.describe_execution(executionArn=job.execution_arn)["status"]
    assert status in ("ABORTED", "FAILED"), status
    point = resume_point(client.store, job.job_id)
    assert point is not None and 3 <= point.round < 11 and point.has_next_round, point
    before = _etags(client, job.job_id)
    reduced = {k: v for k, v in before.items()
               if (m := re.search(r"/(state|rounds)/(\d{5})", k))
               and int(m.group(2)) < point.round + (m.group(1) == "state")}  # fmt: skip
    assert len(reduced) == (point.round + 1) + point.round * 4  # models; plan, 2 partials, record

    # WHEN it is resumed
    resumed = client.resume(job.job_id)
    # THEN the handle is a TrainJob of a new execution named <job>-r<epoch s>
    assert isinstance(resumed, TrainJob) and resumed.execution_arn != job.execution_arn
    assert re.search(rf":{re.escape(job.job_id)}-r\d{{10}}$", resumed.execution_arn)
    # ... and resuming it again while that execution runs is refused
    with pytest.raises(errors.InvalidJobError, match="still running"):
        client.resume(job.job_id)
    result = resumed.result(timeout=600)

    # ... the reduced rounds were neither run again nor rewritten
    after = _etags(client, job.job_id)
    assert {k: after[k] for k in reduced} == reduced
    # ... the resumed execution ran only the rounds from the first one not reduced
    assert len(resumed.round_wall_seconds()) == len(result.rounds) - point.round
    assert [r["wall_s"] is None for r in result.rounds] == [
        i < point.round for i in range(len(result.rounds))]  # fmt: skip
    assert resumed.record()["status"] == "SUCCEEDED"
    assert resumed.record()["execution_arn"] == resumed.execution_arn
    assert result.execution_arn == resumed.execution_arn

    # ... and the model is an uninterrupted run's, bit for bit
    clean = client.train(_frame(), timeout=600, **OPTIONS)
    np.testing.assert_array_equal(result.centroids, clean.centroids)
    assert result.inertia == clean.inertia
    assert (result.n_iter, result.raw["converged"]) == (clean.n_iter, clean.raw["converged"])
    assert result.n_iter == 10 and len(result.rounds) == 11  # 10 Lloyd rounds + the final E-step
    assert [r["inertia"] for r in result.rounds] == [r["inertia"] for r in clean.rounds]
    assert [[w["batch"] for w in r["workers"]] for r in result.rounds] == [
        [w["batch"] for w in r["workers"]] for r in clean.rounds]  # fmt: skip
    print(json.dumps({"resumed_at_round": point.round, "rounds": len(result.rounds)}))
    # ... and a job the stack does not hold is not found
    with pytest.raises(errors.JobNotFoundError):
        client.resume(f"{job.job_id}-none")
