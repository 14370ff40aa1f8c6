"""Whole train jobs through the train state machine on the local stack.

Init -> rounds of { Schedule -> Map(TrainShard Lambdas, one per worker, each at its memory size)
-> Reduce } -> Finalize. K-Means must equal scikit-learn's Lloyd to 1e-8 whatever LB-BSP does to
the batches; logistic regression by mini-batch SGD must classify as well as scikit-learn's to within
one percentage point, with BSP and with DS-Sync.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DATA_401K = ROOT / "examples" / "data" / "sipp1991.dta"
X_401K = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]
KMEANS_ROUNDS = 6


@pytest.fixture(scope="module")
def digits() -> pd.DataFrame:
    from sklearn.datasets import load_digits

    X = load_digits().data
    return pd.DataFrame(X, columns=[f"p{i}" for i in range(X.shape[1])])


@pytest.fixture(scope="module")
def split_401k() -> tuple[pd.DataFrame, pd.DataFrame]:
    from sklearn.model_selection import train_test_split

    df = pd.read_stata(DATA_401K)[[*X_401K, "p401"]].astype(float)
    train, test = train_test_split(df, test_size=0.25, random_state=0, stratify=df["p401"])
    return train, test


@pytest.mark.parametrize("balance", ["uniform", "lb-bsp"])
def test_kmeans_on_digits_equals_sklearn_lloyd(local_client, digits, balance):
    from sklearn.cluster import KMeans

    # GIVEN the digits (1797 x 64), 10 initial centroids drawn from its rows and jittered (digits are
    # integers: centroids on data rows make exact distance ties, which each implementation breaks
    # by its own round-off), 4 workers of two memory sizes
    X = digits.to_numpy()
    rng = np.random.default_rng(0)
    init = X[rng.choice(len(X), 10, replace=False)] + rng.normal(0, 0.1, (10, X.shape[1]))
    ref = KMeans(n_clusters=10, init=init, n_init=1, algorithm="lloyd", max_iter=KMEANS_ROUNDS,
                 tol=0.0).fit(X)  # fmt: skip

    # WHEN the train job runs K-Means for at most as many rounds as scikit-learn's max_iter
    res = local_client.train(digits, model="kmeans", features=list(digits.columns), n_clusters=10,
                             init=init, workers=4, worker_memory="1769,1769,885,885",
                             rounds=KMEANS_ROUNDS, balance=balance, timeout=300)  # fmt: skip

    # THEN the final centroids and the inertia equal scikit-learn's
    np.testing.assert_allclose(res.centroids, ref.cluster_centers_, rtol=0, atol=1e-8)
    assert res.inertia == pytest.approx(ref.inertia_, rel=1e-10)
    assert res.n_iter == ref.n_iter_
    # ... every round covered every row, and recorded each worker's batch, time and throughput
    for record in res.rounds:
        batches = [w["batch"] for w in record["workers"]]
        assert sum(batches) == len(X) and len(batches) == 4
        assert all(w["compute_s"] > 0 and w["samples_per_s"] > 0 for w in record["workers"])
        assert 0 <= record["idle_fraction"] < 1 and record["round_s"] > 0 and record["wall_s"] > 0
        assert [w["memory_mb"] for w in record["workers"]] == [1769, 1769, 885, 885]
    if balance == "uniform":
        assert all([w["batch"] for w in r["workers"]] == [450, 449, 449, 449] for r in res.rounds)
    else:
        # LB-BSP: one finish time T lies within one row's time of every worker's predicted round
        # time t_i = b_i / predicted_i (a batch within one row of its share v_i (T - a_i), a_i >= 0
        # the fitted fixed cost); a worker at the smallest batch (1 row) is one whose fixed cost
        # reaches about T (K-Means' rounds take milliseconds, so on a busy machine one can)
        for record in res.rounds:
            v = np.array([w["predicted_samples_per_s"] for w in record["workers"]])
            b = np.array([w["batch"] for w in record["workers"]])
            t, row = b / v, 1 / v
            free = b > 1
            lowest_t, highest_t = np.max(t[free] - row[free]), np.min(t[free] + row[free])
            assert lowest_t <= highest_t
            assert np.all(t[~free] + row[~free] >= lowest_t)


@pytest.mark.parametrize("sync", ["bsp", "ds-sync"])
def test_logreg_on_401k_classifies_as_well_as_sklearn(local_client, split_401k, sync):
    from sklearn.linear_model import LogisticRegression

    # GIVEN the 401(k) data split 75/25, p401 from the nine covariates standardised on the train part
    train, test = split_401k
    mean, sd = train[X_401K].mean(), train[X_401K].std(ddof=0)
    sk = LogisticRegression().fit((train[X_401K] - mean) / sd, train["p401"])
    sk_acc = sk.score((test[X_401K] - mean) / sd, test["p401"])

    # WHEN the train job fits logistic regression by mini-batch SGD on 4 workers
    res = local_client.train(train, model="logreg", features=X_401K, target="p401", workers=4,
                             global_batch=1000, rounds=10, lr=1.0, sync=sync, group_size=2,
                             standardize=True, balance="lb-bsp", seed=0, timeout=300)  # fmt: skip

    # THEN its test accuracy is within one percentage point of scikit-learn's
    acc = float(np.mean(res.predict(test[X_401K].to_numpy()) == test["p401"].to_numpy()))
    assert abs(acc - sk_acc) <= 0.01, (acc, sk_acc)
    # ... the loss fell, and every round split the global batch over the workers
    assert res.raw["loss"][-1] < res.raw["loss"][0]
    assert all(sum(w["batch"] for w in r["workers"]) == 1000 for r in res.rounds)
    if sync == "ds-sync":
        assert all(sorted(i for g in r["groups"] for i in g) == [0, 1, 2, 3] for r in res.rounds)
        assert any(len(r["groups"]) == 2 for r in res.rounds)
        # ... and no reduce ran: every worker averaged its group's partials itself (sync_s)
        from fanfit.jobs.states import TrainState

        assert all(w["sync_s"] > 0 for r in res.rounds for w in r["workers"])
        pages = local_client.sfn.get_paginator("get_execution_history").paginate(
            executionArn=res.raw["execution_arn"]
        )
        entered = {e["stateEnteredEventDetails"]["name"] for p in pages for e in p["events"]
                   if "stateEnteredEventDetails" in e}  # fmt: skip
        assert TrainState.REDUCE not in entered and TrainState.ADVANCE_ROUND in entered


#: A DS-Sync job of 8 workers in groups of 2 whose rounds 1-23 run as one segment: the segment
#: test runs it uninterrupted, the kill test kills one of its workers and resumes it.
DSSYNC_8 = dict(model="logreg", features=X_401K, target="p401", workers=8, global_batch=400,
                rounds=24, lr=1.0, sync="ds-sync", group_size=2, standardize=True, seed=0)  # fmt: skip


@pytest.fixture(scope="module")
def dssync_8(local_client, split_401k):
    """:data:`DSSYNC_8` run once, uninterrupted, on the 401(k) train part: its result."""
    train, _ = split_401k
    return local_client.train(train, **DSSYNC_8, timeout=300)


def test_ds_sync_runs_the_rounds_after_the_first_as_one_segment(local_client, dssync_8):
    from fanfit.jobs.states import TrainState

    # GIVEN the 401(k) train part, 8 workers in groups of 2, uniform batches (segments allowed)
    # WHEN a 24-round DS-Sync job runs on the stack
    res = dssync_8
    # THEN round 0 ran alone and rounds 1-23 as one segment: two Maps, not 24
    pages = local_client.sfn.get_paginator("get_execution_history").paginate(
        executionArn=res.raw["execution_arn"]
    )
    maps = [e for p in pages for e in p["events"] if e["type"] == "MapStateEntered"
            and e["stateEnteredEventDetails"]["name"] == TrainState.RUN_ROUND]  # fmt: skip
    assert len(maps) == 2
    # ... every round was recorded, each worker once, the segment's later rounds with the
    # seconds each worker waited for its group, and the loss fell
    assert [r["round"] for r in res.rounds] == list(range(24))
    assert all(sorted(w["worker"] for w in r["workers"]) == list(range(8)) for r in res.rounds)
    assert all(w["wait_s"] >= 0 for r in res.rounds[2:] for w in r["workers"])
    assert res.raw["loss"][-1] < res.raw["loss"][0]


def _handler_pid(pid: int, endpoint: str) -> bool:
    """Whether ``pid`` is a local Lambda handler process (``lambda_bootstrap``) of the stack at
    ``endpoint``: other stacks on the machine are never touched."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"lambda_bootstrap" in cmd and f"AWS_ENDPOINT_URL={endpoint}".encode() in env


def test_a_killed_ds_sync_worker_stops_its_segment_within_seconds_and_resume_equals_the_run(
    local_client, split_401k, dssync_8, fanfit_outputs, wait_until
):
    import os
    import signal
    import time

    from fanfit import storage
    from fanfit.client.running import running_steps, step_keys
    from fanfit.jobs.documents.train import TrainStop

    client = local_client
    train, _ = split_401k
    dynamodb = client.session.client("dynamodb", endpoint_url=client.stack.endpoint_url)
    table = fanfit_outputs["IdempotencyTableName"]

    def records(job_id: str) -> dict[tuple[int, int], str]:
        pages = client.s3.get_paginator("list_objects_v2").paginate(
            Bucket=client.stack.bucket, Prefix=storage.train_rounds_prefix(job_id)
        )
        keys = [o["Key"] for p in pages for o in p.get("Contents", [])
                if o["Key"].endswith(".json") and "/workers/" in o["Key"]]  # fmt: skip
        return {(int(k.split("/")[-3]), int(k.split("/")[-1].split(".")[0])): k for k in keys}

    # GIVEN the 8-worker DS-Sync job, its segment (rounds 1-23) past round 3
    job = client.submit_train(train, **DSSYNC_8)
    seen = wait_until(lambda: {k: v for k, v in records(job.job_id).items() if k[0] >= 3}, 180,
                      f"round 3 of {job.job_id}", interval_s=0.05)  # fmt: skip
    (_, worker), key = min(seen.items())
    pid = int(client.store.get_json(key)["stats"]["pid"])
    assert _handler_pid(pid, client.stack.endpoint_url), (pid, key)
    keys = step_keys(client.store, job.job_id, "train", (job.execution_arn,))
    mine = f"worker {worker} of round 1"
    running_at_kill = set(running_steps(dynamodb, table, keys))
    assert any(s.endswith(mine) for s in running_at_kill), running_at_kill
    # WHEN that worker's handler process is SIGKILLed in the middle of the segment
    os.kill(pid, signal.SIGKILL)
    killed_at = time.time()
    ended: dict[str, float] = {}  # step -> epoch s it was first seen over
    stop_key = storage.train_stop_key(job.job_id)
    first: list[tuple[float, TrainStop]] = []  # the first stop marker seen, and when

    def over() -> bool:
        if not first and client.store.exists(stop_key):
            first.append((time.time(), TrainStop.parse(client.store.get_json(stop_key))))
        # a killed process leaves its step INPROGRESS (until its timeout): it runs no more
        now = {s for s in running_steps(dynamodb, table, keys) if not s.endswith(mine)}
        for step in running_at_kill - now:
            ended.setdefault(step, time.time())
        status = client.sfn.describe_execution(executionArn=job.execution_arn)["status"]
        return status != "RUNNING" and not now

    wait_until(over, 60, lambda: f"{job.job_id}: its workers stopped; ended {ended}",
               interval_s=0.05)  # fmt: skip
    last = max(ended.values(), default=killed_at)
    # THEN the job failed: the killed worker's retry found its step's record INPROGRESS and wrote
    # the job's stop marker, naming the worker and that error (the state machine's failure branch
    # writes it again once the Map failed: then naming the group-mate's TrainJobStoppedError,
    # whose message names the killed worker's error)
    assert client.sfn.describe_execution(executionArn=job.execution_arn)["status"] == "FAILED"
    assert first, "no stop marker was seen"
    seen_at, marker = first[0]
    assert (marker.reason, marker.execution_arn) == ("failed", job.execution_arn), marker
    assert (marker.worker, marker.error) == (worker, "IdempotencyAlreadyInProgressError") or (
        marker.error == "TrainJobStoppedError"
        and f"worker {worker} failed" in marker.message
        and "IdempotencyAlreadyInProgressError" in marker.message
    ), marker
    # ... and every other worker's invocation returned within 10 s of that marker (none waited
    # for the dead member until its deadline), and within 30 s of the kill (the retry runs in a
    # fresh runtime: its init takes seconds on a loaded 2-core machine)
    assert last - seen_at <= 10.0 and last - killed_at <= 30.0, (killed_at, seen_at, ended)
    done = max(r for r, _ in records(job.job_id))
    assert done < 23, done

    # WHEN the failed job is resumed (a new execution; the dead step's record does not block it)
    resumed = client.resume(job.job_id)
    res = resumed.result(timeout=300)
    # THEN it ends with the uninterrupted run's model, bit for bit
    assert np.array_equal(res.coef, dssync_8.coef) and np.array_equal(
        res.intercept, dssync_8.intercept
    )
    assert [r["round"] for r in res.rounds] == list(range(24))
    print(json.dumps({"kill_stop_s": round(last - killed_at, 2),
                      "marker_seen_after_kill_s": round(seen_at - killed_at, 2),
                      "billed_after_kill_s_at_most": round(sum(t - killed_at for t in ended.values()), 2),
                      "last_round_recorded": done}))  # fmt: skip


def test_cli_train_prints_one_json_object(local_client, local_stack_env, tmp_path):
    # GIVEN a running local stack with the project deployed and a CSV of three blobs
    rng = np.random.default_rng(4)
    X = np.repeat([[0.0, 0.0], [6.0, 6.0]], 50, axis=0) + rng.normal(size=(100, 2))
    csv = tmp_path / "blobs.csv"
    pd.DataFrame(X, columns=["a", "b"]).to_csv(csv, index=False)
    # WHEN the CLI trains K-Means with --output json
    cmd = [sys.executable, "-m", "fanfit.cli", "train", "--data", str(csv), "--model", "kmeans",
           "--features", "a,b", "--n-clusters", "2", "--workers", "2", "--rounds", "5",
           "--output", "json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=local_stack_env)
    # THEN stdout is exactly one JSON object with the centroids and the round records
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["model"] == "kmeans" and np.asarray(out["centroids"]).shape == (2, 2)
    assert out["rounds"] and out["execution_arn"].startswith("arn:aws:states:")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--worker-memory", "512"], "--worker-memory"),
        (["--balance", "fastest"], "--balance"),
        (["--sync", "gossip"], "--sync"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_bad_options_through_the_cli_exit_2_naming_the_option(
    local_client, local_stack_env, tmp_path, args, named
):
    # GIVEN a valid logreg command but for one bad option
    csv = tmp_path / "data.csv"
    pd.DataFrame({"a": [0.0, 1.0, 2.0, 3.0], "y": [0, 0, 1, 1]}).to_csv(csv, index=False)
    cmd = [sys.executable, "-m", "fanfit.cli", "train", "--data", str(csv), "--model", "logreg",
           "--features", "a", "--target", "y", "--workers", "2", "--global-batch", "2", *args]  # fmt: skip
    # WHEN it runs THEN it exits 2 naming the option, and prints nothing on stdout
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=local_stack_env)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and done.stdout == ""


def test_a_cancelled_or_failed_ds_sync_job_stops_its_running_segment(
    local_client, split_401k, stopped_jobs, wait_until
):
    import time

    from fanfit import storage
    from fanfit.jobs.documents.train import TrainStop

    client = local_client
    train, _ = split_401k

    def recorded(job_id: str) -> list[int]:
        pages = client.s3.get_paginator("list_objects_v2").paginate(
            Bucket=client.stack.bucket, Prefix=storage.train_rounds_prefix(job_id)
        )
        return sorted(int(o["Key"].split("/")[-3]) for p in pages for o in p.get("Contents", [])
                      if o["Key"].endswith(".json") and "/workers/" in o["Key"])  # fmt: skip

    # GIVEN a 40-round DS-Sync job (rounds 1-39 one segment of 4 workers) past round 2
    before = stopped_jobs.snapshot()
    job = client.submit_train(train, model="logreg", features=X_401K, target="p401", workers=4,
                              global_batch=400, rounds=40, lr=1.0, sync="ds-sync", group_size=2,
                              standardize=True, seed=0)  # fmt: skip
    wait_until(lambda: max(recorded(job.job_id), default=-1) >= 2, 120,
               f"round 2 of {job.job_id}", interval_s=0.05)  # fmt: skip
    # WHEN it is cancelled (StopExecution does not stop the segment's running Lambdas)
    cancelled_at = time.perf_counter()
    client.job(job.job_id).cancel()
    stopped_jobs.wait(job.execution_arn, before, timeout_s=60)
    stopped_after = time.perf_counter() - cancelled_at
    # THEN the marker names the cancel and the execution, and the workers stopped at their next
    # round boundary (or wait): their steps ended within seconds, the segment's last rounds not run
    marker = TrainStop.parse(client.store.get_json(storage.train_stop_key(job.job_id)))
    assert (marker.reason, marker.execution_arn) == ("cancelled", job.execution_arn)
    last = max(recorded(job.job_id))
    assert last < 39 and stopped_after < 10, (last, stopped_after)
    # ... the workers knew their execution (the Map's $$.Execution.Id is the job's execution's)
    pages = client.sfn.get_paginator("get_execution_history").paginate(
        executionArn=job.execution_arn
    )
    payloads = [json.loads(e["taskScheduledEventDetails"]["parameters"])["Payload"]
                for p in pages for e in p["events"] if e["type"] == "TaskScheduled"
                and "TrainShard" in e["taskScheduledEventDetails"]["parameters"]]  # fmt: skip
    assert payloads and all(p["execution_arn"] == job.execution_arn for p in payloads), payloads

    # WHEN an execution fails in the state machine itself (its job's spec is not there)
    name = f"{job.job_id}-f"
    arn = client.sfn.start_execution(
        stateMachineArn=client.stack.train_state_machine_arn, name=name,
        input=json.dumps({"job_id": name, "spec_key": storage.spec_key(name)}),
    )["executionArn"]  # fmt: skip
    wait_until(lambda: client.sfn.describe_execution(executionArn=arn)["status"] != "RUNNING",
               60, f"{name} ended", interval_s=0.2)  # fmt: skip
    # THEN its failure branch wrote the marker: failed, the error's name, that execution
    failed = TrainStop.parse(client.store.get_json(storage.train_stop_key(name)))
    assert (failed.reason, failed.error, failed.execution_arn) == (
        "failed", "JobNotFoundError", arn)  # fmt: skip
    assert client.sfn.describe_execution(executionArn=arn)["status"] == "FAILED"
    print(json.dumps({"last_round_recorded": last, "stopped_after_s": round(stopped_after, 2)}))
