"""Faults lose nothing: whole jobs on a local stack that fails a share of Lambda invocations, and
on one whose account runs one Lambda invocation at a time.

A second local stack runs with ``FANFIT_LOCAL_FAULTS="error=0.2,timeout=0.05,crash=0.05,seed=1"``:
a fifth of the invocations fail with ``Lambda.ServiceException`` before the handler runs, some time
out, and some crash after the handler's work is done (its S3 writes and idempotency record land,
the response is lost). The state machines' Retry policies, the shards' deterministic S3 keys and
Powertools Idempotency must make an estimate and a train job end with results identical to the
same jobs on the fault-free session stack. A QTE runs there as one job of several parts (issue 28,
item 3): its two treatment levels' parts fan out together over two stages, and every
part's estimate must equal the fault-free run's, each unit fitted by exactly one shard.

A third local stack caps the account's Lambda concurrency at 1
(``LAMBDA_LIMITS_CONCURRENT_EXECUTIONS=1``: LocalStack then refuses an invocation beyond it with
``TooManyRequestsException``, as AWS does): two estimates of 8 shards each at once must wait and
retry (``fanfit.jobs.states.THROTTLE_RETRY``) instead of failing, end with the fault-free numbers,
and their records (the cost the client keeps there) must count the throttles their histories show
(on the local stack the top-level steps' only: LocalStack keeps no history of a Distributed Map's
children; on AWS the cost reads those too).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit.local.stack import LocalStack

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAULTS = "error=0.2,timeout=0.05,crash=0.05,seed=1"
X_401K = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


@pytest.fixture(scope="module")
def faulty_client(
    tmp_path_factory: pytest.TempPathFactory, redeploy: Any, client_of_stack: Any
) -> Iterator[Any]:
    """A client of a second local stack that injects faults (the session's stays fault-free).

    Faults are drawn in LocalStack's process, so they need a process of their own; the project is
    created there from the session's build and upload (no second ``sam build``/``sam deploy``).
    """
    home = tmp_path_factory.mktemp("fanfit-faults")
    patch = pytest.MonkeyPatch()
    patch.setenv("FANFIT_LOCAL_FAULTS", FAULTS)
    stack = LocalStack(root=ROOT, home=home)
    try:
        info = stack.start()
        patch.delenv("FANFIT_LOCAL_FAULTS")  # only that stack's process has it
        redeploy(info)
        yield client_of_stack(info)
    finally:
        patch.undo()
        stack.stop()


@pytest.fixture(scope="module")
def throttled_client(
    tmp_path_factory: pytest.TempPathFactory, redeploy: Any, client_of_stack: Any
) -> Iterator[Any]:
    """A client of a local stack whose account runs at most one Lambda invocation at a time."""
    home = tmp_path_factory.mktemp("fanfit-throttled")
    patch = pytest.MonkeyPatch()
    patch.setenv("LAMBDA_LIMITS_CONCURRENT_EXECUTIONS", "1")
    stack = LocalStack(root=ROOT, home=home)
    try:
        info = stack.start()
        patch.delenv("LAMBDA_LIMITS_CONCURRENT_EXECUTIONS")  # only that stack's process has it
        redeploy(info)
        yield client_of_stack(info)
    finally:
        patch.undo()
        stack.stop()


def _throttles(client: Any, execution_arn: str) -> int:
    """Task attempts of the execution that Lambda refused for lack of concurrency."""
    pages = client.sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn)
    return sum(
        1
        for page in pages
        for event in page["events"]
        if (event.get("taskFailedEventDetails") or {}).get("error")
        == "Lambda.TooManyRequestsException"
    )


def _injected(client: Any, execution_arn: str) -> dict[str, int]:
    """How many task failures of each injected kind the execution's history shows."""
    counts: dict[str, int] = {}
    history = client.sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)
    for event in history["events"]:
        details = event.get("taskFailedEventDetails")
        if details and "fanfit fault injection" in (details.get("cause") or ""):
            counts[details["error"]] = counts.get(details["error"], 0) + 1
    return counts


def test_an_estimate_under_faults_equals_the_fault_free_run(local_client, faulty_client):
    # GIVEN 2,000 rows of the 401(k) data and a PLR with 5 folds x 2 repetitions (dozens of
    # invocations; what is tested is that faults change nothing, not the estimate itself)
    data = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    data = data.sample(n=2000, random_state=0).reset_index(drop=True)
    options = dict(model="plr", y="net_tfa", d="e401", x=X_401K,
                   ml_l='Lasso:{"alpha": 1.0}', ml_m='LogisticRegression:{"max_iter": 1000}',
                   n_folds=5, n_rep=2, seed=3, units_per_shard=1)  # fmt: skip
    # WHEN it runs on the fault-free stack and on the faulty one (at the same time)
    clean_job = local_client.submit_estimate(data, **options)
    job = faulty_client.submit_estimate(data, **options)
    clean = clean_job.result(timeout=600)
    faulty = job.result(timeout=900)
    # THEN the estimates are identical, every unit was counted once
    np.testing.assert_array_equal(faulty.coef, clean.coef)
    np.testing.assert_array_equal(faulty.se, clean.se)
    np.testing.assert_array_equal(faulty.all_coef, clean.all_coef)
    assert len(faulty.timings["shards"]) == 2 * 5 * 2  # one shard per unit, none twice
    # ... and the top-level tasks did meet injected faults (the Map's children have their own)
    record = job.record()
    assert record["status"] == "SUCCEEDED"


def _qte_frame(n: int) -> pd.DataFrame:
    """``n`` rows of a binary treatment ``d`` (logistic in ``x0``), an outcome ``y`` with effect
    0.5 and four covariates (seed 7): both classes of every quantile's indicator in every fold."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(n, 4))
    d = (rng.uniform(size=n) < 1 / (1 + np.exp(-x[:, 0]))).astype(float)
    y = 0.5 * d + x[:, 1] + 0.5 * x[:, 2] + rng.normal(size=n)
    return pd.DataFrame(x, columns=["x0", "x1", "x2", "x3"]).assign(y=y, d=d)


def _unit_counts(job: Any, n_stages: int) -> tuple[dict[str, int], set[str]]:
    """How many shards of ``job``'s result fitted each unit (by key, which names its part and
    stage), and the keys of the units its stages planned (each stage's ``units.json``)."""
    from fanfit import dml, storage

    fitted: dict[str, int] = {}
    for shard in job.result().timings["shards"]:
        for unit in shard["unit_fit_s"]:
            fitted[unit] = fitted.get(unit, 0) + 1
    planned = {
        dml.FitUnit(**doc).key
        for stage in range(n_stages)
        for doc in job.client.store.get_json(storage.units_key(job.job_id, stage))
    }
    return fitted, planned


def test_a_qte_as_one_job_under_faults_equals_the_fault_free_run(local_client, faulty_client):
    from fanfit.client import qte as cqte
    from fanfit.client.options import EstimateOptions

    # GIVEN 1,000 rows of a binary treatment and a QTE at the median (PQ: two parts, one per
    # treatment level, two stages each, DoubleML's start values between them), 2 folds x 2
    # repetitions, logistic learners, one unit per shard (16 shards)
    options = EstimateOptions(data=_qte_frame(1000), model="qte", y="y", d="d",
                              x=["x0", "x1", "x2", "x3"], ml_g="LogisticRegression",
                              ml_m="LogisticRegression", quantiles="0.5", n_folds=2, n_rep=2,
                              seed=3, units_per_shard=1)  # fmt: skip
    # WHEN it runs as one job on the fault-free stack and on the faulty one (at the same time)
    clean_jobs = cqte.submit_qte(local_client, options=options)
    jobs = cqte.submit_qte(faulty_client, options=options)
    started = time.monotonic()
    clean = clean_jobs.result(timeout=600)
    faulty = jobs.result(timeout=900)
    # THEN one job each, and the effects and every part's estimate are identical
    assert len(set(jobs.job_ids)) == 1 and len(faulty.results) == 2
    for attr in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_array_equal(getattr(faulty, attr), getattr(clean, attr), err_msg=attr)
    for k, (part, clean_part) in enumerate(zip(faulty.results, clean.results, strict=True)):
        for attr in ("coef", "se", "all_coef", "all_se"):
            np.testing.assert_array_equal(getattr(part, attr), getattr(clean_part, attr),
                                          err_msg=f"part {k}: {attr}")  # fmt: skip
    # ... every unit of every part and stage was fitted by exactly one shard (one unit each)
    job = jobs.jobs[0].job
    n_stages = job._plan().n_stages
    assert n_stages == 2
    fitted, planned = _unit_counts(job, n_stages)
    assert set(fitted) == planned and set(fitted.values()) == {1}, fitted
    assert len(planned) == 2 * 2 * 2 * 2  # stages x parts x repetitions x folds
    assert job.record()["status"] == "SUCCEEDED"
    # ... and the job did meet injected faults (the top-level steps'; the Map's children too)
    injected = _injected(faulty_client, job.execution_arn)
    print(json.dumps({"qte_injected": injected, "wall_s": round(time.monotonic() - started, 1)}))


def test_a_train_job_under_faults_equals_the_fault_free_run(local_client, faulty_client):
    from sklearn.datasets import load_digits

    # GIVEN K-Means on the digits with 4 workers for 6 rounds (30+ invocations)
    X = load_digits().data
    frame = pd.DataFrame(X, columns=[f"p{i}" for i in range(X.shape[1])])
    rng = np.random.default_rng(1)
    init = X[rng.choice(len(X), 8, replace=False)] + rng.normal(0, 0.1, (8, X.shape[1]))
    options = dict(model="kmeans", features=list(frame.columns), n_clusters=8, init=init,
                   workers=4, worker_memory="1769,1769,885,885", rounds=6, balance="uniform")  # fmt: skip
    # WHEN it runs on both stacks (at the same time)
    clean_job = local_client.submit_train(frame, **options)
    job = faulty_client.submit_train(frame, **options)
    started = time.monotonic()
    clean = clean_job.result(timeout=600)
    faulty = job.result(timeout=900)
    # THEN the model is identical and the faults were met and retried
    np.testing.assert_array_equal(faulty.centroids, clean.centroids)
    assert faulty.inertia == clean.inertia and faulty.n_iter == clean.n_iter
    injected = _injected(faulty_client, faulty.execution_arn)
    assert sum(injected.values()) > 0, (injected, time.monotonic() - started)
    assert set(injected) <= {"Lambda.ServiceException", "Sandbox.Timedout", "Runtime.ExitError"}
    print(json.dumps({"injected": injected}))


def test_estimates_on_an_account_of_concurrency_1_wait_and_equal_the_free_run(
    local_client, throttled_client
):
    # GIVEN a PLR of 2 learners x 4 folds, one unit per shard: 8 shards, up to 8 at once
    data = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    data = data.sample(n=1000, random_state=0).reset_index(drop=True)
    options = dict(model="plr", y="net_tfa", d="e401", x=X_401K,
                   ml_l='Lasso:{"alpha": 1.0}', ml_m='LogisticRegression:{"max_iter": 1000}',
                   n_folds=4, n_rep=1, seed=3, units_per_shard=1, max_concurrency=8)  # fmt: skip
    # WHEN it runs on the free stack, and twice at the same time on the stack whose account runs
    # one invocation at once (each job's steps and shards compete for the one slot; the local
    # stack keeps no history of a Distributed Map's children, so a throttle it can show is one of
    # a job's own steps: Prepare, Schedule, Aggregate, meeting the other job's shards)
    clean_job = local_client.submit_estimate(data, **options)
    jobs = [throttled_client.submit_estimate(data, **options) for _ in range(2)]
    clean = clean_job.result(timeout=600)
    started = time.monotonic()
    results = [job.result(timeout=900) for job in jobs]
    # THEN both succeeded with the same numbers, every shard run once
    for throttled in results:
        np.testing.assert_array_equal(throttled.coef, clean.coef)
        np.testing.assert_array_equal(throttled.se, clean.se)
        assert len(throttled.timings["shards"]) == 8
    # ... and Lambda did refuse invocations, which the state machines retried
    seen = [_throttles(throttled_client, job.execution_arn) for job in jobs]
    assert sum(seen) > 0, (seen, time.monotonic() - started)
    # ... and each job's record shows its own (the cost the client keeps there; not billed)
    for job, count in zip(jobs, seen, strict=True):
        assert job.cost().throttles == count
        assert job.record()["cost"]["throttles"] == count
    print(json.dumps({"throttles": seen, "wall_s": round(time.monotonic() - started, 1)}))
