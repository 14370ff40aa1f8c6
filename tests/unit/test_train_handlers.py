"""The five train handlers, run in-process on moto with the sample events events/train_*.json.

GIVEN a small job in a moto bucket (the job id of the sample events), WHEN TrainInit, then rounds of
TrainSchedule -> TrainShard (every worker) -> TrainReduce, then TrainFinalize run on those events,
THEN the trained model equals the in-process reference of :mod:`fanfit.train` (K-Means:
``kmeans_fit``; SGD: ``train_sgd``) with the same batches, and the round records and the throughput
table hold what the workers measured.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
ARN = "arn:aws:lambda:us-east-1:123456789012:function:fanfit-TrainShard{}Function"
WORKER_FUNCTIONS = {"1769": ARN.format("Large"), "885": ARN.format("Small")}


def _event(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


@pytest.fixture
def aws(moto_stack):
    env = {
        "FANFIT_TRAIN_WORKER_FUNCTIONS": json.dumps(WORKER_FUNCTIONS),
        "FANFIT_GPU_WORKER_MEMORY_MB": "15000",
    }
    with moto_stack(env):
        yield


def _upload(store, frame: pd.DataFrame, init=None, **options) -> None:
    """Write the job the sample events name (``example-train``)."""
    from fanfit import storage
    from fanfit.client.data import to_matrix
    from fanfit.client.train import build_train_spec

    spec = build_train_spec(**options)
    columns = [*spec.features, *([spec.target] if spec.target else [])]
    names, values = to_matrix(frame, columns)
    job = {"kind": "train", "spec": spec.to_dict(), "data_key": store.put_data(names, values)}
    job["init_key"] = None
    if init is not None:
        job["init_key"] = store.put_array("jobs/example-train/input-init.npy", np.asarray(init))
    store.put_json(storage.spec_key("example-train"), job)


def _run(load_handler, lambda_context, max_rounds: int = 50) -> tuple[dict, list[dict]]:
    """Run the state machine's loop by hand; returns the Finalize output and the Schedule outputs."""
    init, schedule, shard = (
        load_handler("train_init"),
        load_handler("train_schedule"),
        load_handler("train_shard"),
    )
    reduce, finalize = load_handler("train_reduce"), load_handler("train_finalize")
    progress = init(_event("train_init"), lambda_context())
    schedules = []
    for _ in range(max_rounds):
        planned = schedule(
            {**_event("train_schedule"), "round": progress["round"]}, lambda_context()
        )
        schedules.append(planned)

        def step(item: dict) -> None:
            if item["placement"] == "gpu":  # what the GPU worker's Batch job runs
                from fanfit.jobs.gpu import main

                assert main(["train_shard", json.dumps(item)]) == 0
                return
            memory = 885 if item["function_arn"] == WORKER_FUNCTIONS["885"] else 1769
            shard(item, lambda_context(memory_limit_in_mb=memory))

        if any(item.get("rounds", 1) > 1 for item in planned["workers"]):
            # a DS-Sync segment: the Map runs every worker at once (each waits for its group)
            with ThreadPoolExecutor(max_workers=len(planned["workers"])) as pool:
                list(pool.map(step, planned["workers"]))
        else:
            for item in planned["workers"]:
                step(item)
        if planned["reduce"]:  # BSP; DS-Sync has no reduce: the ASL's Pass takes "advance"
            progress = reduce(
                {**_event("train_reduce"), "round": progress["round"]}, lambda_context()
            )
        else:
            progress = planned["advance"]
        if not progress["has_next_round"]:
            break
    done = finalize({**_event("train_finalize"), "round": progress["round"]}, lambda_context())
    return done, schedules


def _blobs(n: int = 240, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0, 0.0], [5.0, 5.0, 0.0], [0.0, 5.0, 5.0]])
    X = centres[rng.integers(0, 3, n)] + rng.normal(size=(n, 3))
    return pd.DataFrame(X, columns=["a", "b", "c"])


def test_kmeans_job_on_sample_events_equals_the_in_process_reference(
    aws, load_handler, lambda_context
):
    from fanfit import storage
    from fanfit.train import kmeans_fit

    # GIVEN three blobs, 4 workers of two memory sizes, LB-BSP, fixed initial centroids
    store = storage.JobStore("fanfit-unit")
    frame = _blobs()
    init = frame.to_numpy()[[0, 1, 2]]
    _upload(store, frame, init=init, model="kmeans", features="a,b,c", n_clusters=3, workers=4,
            worker_memory="1769,1769,885,885", rounds=20, balance="lb-bsp")  # fmt: skip

    # WHEN the handlers run the job round after round
    done, schedules = _run(load_handler, lambda_context)
    result = store.get_json(done["result_key"])

    # THEN the centroids and inertia equal kmeans_fit's with the batches the scheduler chose
    plans = [store.get_json(storage.train_round_plan_key("example-train", r)) for r in
             range(len(schedules))]  # fmt: skip
    ref = kmeans_fit(frame.to_numpy(), init, lambda r: plans[r]["batches"], max_iter=20)
    np.testing.assert_allclose(result["centroids"], ref.centroids, rtol=0, atol=1e-12)
    assert result["inertia"] == pytest.approx(ref.inertia, rel=1e-12)
    assert result["n_iter"] == ref.n_iter and result["converged"] is True
    # ... every round's batches cover every row
    assert all(sum(p["batches"]) == len(frame) for p in plans)
    # ... each Map item names the function of its worker's memory size
    assert [w["function_arn"] for w in schedules[0]["workers"]] == [
        WORKER_FUNCTIONS["1769"], WORKER_FUNCTIONS["1769"], WORKER_FUNCTIONS["885"],
        WORKER_FUNCTIONS["885"]]  # fmt: skip
    # ... round 0 had no history: batches follow the CPU share (2:2:1:1); later rounds measured
    assert plans[0]["prediction_source"] == "cpu-share"
    assert plans[0]["batches"] == [80, 80, 40, 40]
    assert all(p["prediction_source"] == "job" for p in plans[1:])
    # ... every round record has per-worker batch, compute seconds and throughput, and idle fraction
    first = result["rounds"][0]
    assert [w["batch"] for w in first["workers"]] == plans[0]["batches"]
    assert all(w["compute_s"] > 0 and w["samples_per_s"] > 0 for w in first["workers"])
    assert 0 <= first["idle_fraction"] < 1 and first["round_s"] == max(
        w["compute_s"] for w in first["workers"]
    )


def test_logreg_job_with_ds_sync_equals_train_sgd(aws, load_handler, lambda_context):
    import boto3

    from fanfit import storage
    from fanfit.sched.dssync import dssync_groups
    from fanfit.train import train_sgd

    # GIVEN a separable two-class problem, 4 workers, DS-Sync in groups of 2, uniform batches
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 * rng.normal(size=300) > 0).astype(float)
    frame = pd.DataFrame(np.column_stack([X, y]), columns=["a", "b", "c", "d", "y"])
    store = storage.JobStore("fanfit-unit")
    _upload(store, frame, model="logreg", features="a,b,c,d", target="y", workers=4,
            global_batch=64, rounds=5, sync="ds-sync", group_size=2, lr=0.5, seed=3)  # fmt: skip

    # WHEN the handlers run the job
    done, schedules = _run(load_handler, lambda_context)
    result = store.get_json(done["result_key"])

    # THEN the averaged model equals train_sgd's (same seed: same batches and groups)
    ref = train_sgd("logistic", X, y.astype(int), 2, global_batch=64, n_workers=4, rounds=5,
                    lr=0.5, seed=3, sync="ds-sync", group_size=2,
                    groups=lambda r: dssync_groups(4, 2, 3, r))  # fmt: skip
    np.testing.assert_allclose(result["coef"], ref["W"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result["intercept"], ref["b"], rtol=0, atol=1e-12)
    assert len(result["rounds"]) == 5 and result["classes"] == [0.0, 1.0]
    # ... run as round 0 (nothing measured yet) then one segment of rounds 1-4: two Maps
    assert [(p["round"], p["workers"][0]["rounds"]) for p in schedules] == [(0, 1), (1, 4)]
    # ... and the loss went down
    assert result["loss"][-1] < result["loss"][0]
    # ... and the throughput table holds this workload on lambda-1769
    table = boto3.client("dynamodb").scan(TableName="fanfit-throughput")["Items"]
    assert {item["resource"]["S"] for item in table} == {"lambda-1769"}


def test_a_retried_worker_step_is_answered_from_the_idempotency_record(
    aws, load_handler, lambda_context
):
    from fanfit import storage

    # GIVEN a linreg job through Init and Schedule of round 0
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(rng.normal(size=(50, 3)), columns=["a", "b", "y"])
    store = storage.JobStore("fanfit-unit")
    _upload(store, frame, model="linreg", features="a,b", target="y", workers=2, global_batch=20)
    load_handler("train_init")(_event("train_init"), lambda_context())
    load_handler("train_schedule")(_event("train_schedule"), lambda_context())
    shard = load_handler("train_shard")
    # WHEN the sample TrainShard event runs twice
    first = shard(_event("train_shard"), lambda_context())
    again = shard(_event("train_shard"), lambda_context())
    # THEN the second answer is the first (no second computation) and the partial exists
    assert again == first and store.exists(first["partial_key"])
    assert first["batch"] == 10 and first["resource"] == "lambda-1769"


def test_init_rejects_a_memory_size_without_a_function_naming_the_valid_ones(
    aws, load_handler, lambda_context
):
    from fanfit import storage
    from fanfit.errors import InvalidJobError

    # GIVEN a spec asking for 512 MB workers (no TrainShard function has that memory)
    store = storage.JobStore("fanfit-unit")
    _upload(store, _blobs(), model="kmeans", features="a,b,c", n_clusters=3, workers=2)
    job = store.get_json(storage.spec_key("example-train"))
    job["spec"]["worker_memory_mb"] = [512, 512]
    store.put_json(storage.spec_key("example-train"), job)
    # WHEN Init runs THEN it raises InvalidJobError naming the option and the valid sizes
    with pytest.raises(InvalidJobError, match=r"--worker-memory \[512\].*885, 1769"):
        load_handler("train_init")(_event("train_init"), lambda_context())
    assert not store.exists(storage.plan_key("example-train"))


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"model": "svm", "features": "a"}, "--model"),
        (
            {
                "model": "logreg",
                "features": "a",
                "target": "y",
                "global_batch": 8,
                "balance": "fast",
            },
            "--balance",
        ),  # fmt: skip
        (
            {"model": "logreg", "features": "a", "target": "y", "global_batch": 8, "sync": "async"},
            "--sync",
        ),  # fmt: skip
        ({"model": "logreg", "features": "a", "target": "y"}, "--global-batch"),
        ({"model": "kmeans", "features": "a"}, "--n-clusters"),
        ({"model": "kmeans", "features": "a", "n_clusters": 2, "workers": 41}, "--workers"),
        (
            {"model": "kmeans", "features": "a", "n_clusters": 2, "worker_memory": "1769,885"},
            "--worker-memory",
        ),  # fmt: skip
        ({"model": "linreg", "features": "a", "global_batch": 8}, "--target"),
        (
            {
                "model": "logreg",
                "features": "a",
                "target": "y",
                "global_batch": 8,
                "workers": 2,
                "balance": "static",
            },
            "--worker-batches",
        ),  # fmt: skip
        (
            {
                "model": "logreg",
                "features": "a",
                "target": "y",
                "global_batch": 8,
                "workers": 2,
                "balance": "static",
                "worker_batches": "5,4",
            },
            "sum to --global-batch",
        ),  # fmt: skip
        (
            {
                "model": "logreg",
                "features": "a",
                "target": "y",
                "global_batch": 8,
                "workers": 2,
                "worker_batches": [4, 4],
            },
            "--balance static only",
        ),  # fmt: skip
        (
            {
                "model": "logreg",
                "features": "a",
                "target": "y",
                "global_batch": 8,
                "workers": 2,
                "balance": "static",
                "worker_batches": "4,four",
            },
            "--worker-batches must be integers",
        ),  # fmt: skip
    ],
)
def test_bad_options_raise_invalid_job_error_naming_the_option(options, named):
    from fanfit.client.train import build_train_spec
    from fanfit.errors import InvalidJobError

    # GIVEN one bad option WHEN the spec is built THEN InvalidJobError names that option
    with pytest.raises(InvalidJobError, match=named):
        build_train_spec(**options)


def test_cli_train_exits_2_naming_a_bad_option(capsys):
    from fanfit.cli import main

    # GIVEN a train command with an unknown balance policy WHEN it runs (no stack is touched)
    code = main(["train", "--data", "nowhere.csv", "--model", "logreg", "--features", "a",
                 "--target", "y", "--global-batch", "8", "--balance", "fastest"])  # fmt: skip
    # THEN it exits 2 and the message names the option
    assert code == 2 and "--balance" in capsys.readouterr().err


def test_static_balance_runs_the_given_split_and_equals_the_uniform_model(
    aws, load_handler, lambda_context
):
    from fanfit import storage
    from fanfit.train import kmeans_fit

    # GIVEN a K-Means job with a fixed uneven split of its 240 rows over 4 workers
    store = storage.JobStore("fanfit-unit")
    frame = _blobs()
    init = frame.to_numpy()[[0, 1, 2]]
    _upload(store, frame, init=init, model="kmeans", features="a,b,c", n_clusters=3, workers=4,
            rounds=5, balance="static", worker_batches="100,60,50,30")  # fmt: skip
    # WHEN the job runs
    done, schedules = _run(load_handler, lambda_context)
    # THEN every round used that split
    for planned in schedules:
        plan = store.get_json(storage.train_round_plan_key("example-train", planned["round"]))
        assert plan["batches"] == [100, 60, 50, 30]
    # AND the centroids equal Lloyd's with an even split (the split does not change the maths)
    result = store.get_json(done["result_key"])
    ref = kmeans_fit(frame.to_numpy(), init, lambda r: [60, 60, 60, 60], max_iter=5)
    np.testing.assert_allclose(result["centroids"], ref.centroids, rtol=0, atol=1e-12)


def test_max_batches_leaves_the_data_and_runtime_out_of_each_workers_memory():
    from fanfit.jobs.documents.train import TrainPlan, TrainSpec, TrainWorker
    from fanfit.jobs.train.schedule import RUNTIME_BASE_MB, max_batches

    # GIVEN a logreg plan of 1,000,000 rows x 50 features, 10 classes, on 885 and 1,769 MB workers
    plan = TrainPlan(
        job_id="job-x",
        spec=TrainSpec(model="logreg", features=[f"x{i}" for i in range(50)], n_clusters=None),
        data_key="data/x",
        n_obs=1_000_000,
        n_outputs=10,
        workers=[TrainWorker(worker=i, memory_mb=m) for i, m in enumerate((885, 1769, 160))],
    )
    # WHEN the bounds are computed
    bounds = max_batches(plan)
    # THEN each is (memory - runtime - data) / (8 (d + 3K)) rows, and a worker too small gets 1
    data = 8 * 1_000_000 * 51
    for bound, mb in zip(bounds[:2], (885, 1769)):
        assert bound == (mb * 2**20 - RUNTIME_BASE_MB * 2**20 - data) // (8 * (50 + 30))
    assert bounds[2] == 1


def test_a_hybrid_round_with_a_gpu_worker_equals_lloyd_and_measures_the_gpu_worker(
    aws, load_handler, lambda_context
):
    from fanfit import storage
    from fanfit.train import kmeans_fit

    # GIVEN a K-Means job of 3 workers: two Lambda workers and one on the GPU worker (AWS Batch)
    store = storage.JobStore("fanfit-unit")
    frame = _blobs()
    init = frame.to_numpy()[[0, 1, 2]]
    _upload(store, frame, init=init, model="kmeans", features="a,b,c", n_clusters=3, workers=3,
            gpu_workers=1, worker_memory="1769,885", rounds=6, balance="lb-bsp")  # fmt: skip
    # WHEN the rounds run, the GPU worker's step through fanfit.jobs.gpu as its Batch job does
    done, schedules = _run(load_handler, lambda_context)
    # THEN the Map items place the last worker on Batch, the others on their Lambda functions
    assert [w["placement"] for w in schedules[0]["workers"]] == ["lambda", "lambda", "gpu"]
    assert schedules[0]["workers"][2]["function_arn"] == ""
    # ... the model equals Lloyd's with the batches the scheduler chose
    result = store.get_json(done["result_key"])
    plans = [store.get_json(storage.train_round_plan_key("example-train", r)) for r in
             range(len(schedules))]  # fmt: skip
    ref = kmeans_fit(frame.to_numpy(), init, lambda r: plans[r]["batches"], max_iter=6)
    np.testing.assert_allclose(result["centroids"], ref.centroids, rtol=0, atol=1e-12)
    # ... the GPU worker's step is recorded as resource gpu:g4dn.xlarge with the job's memory, and its
    # first batch came from the prior (4 vCPU) before it was measured
    gpu = result["rounds"][0]["workers"][2]
    assert gpu["resource"] == "gpu:g4dn.xlarge" and gpu["memory_mb"] == 15000
    # ... and it computed in torch (CPU torch here, CUDA on a machine with a GPU), the Lambda
    # workers in numpy (the K-Means sums stay float64 on CUDA: the centroids above are exact)
    torch = pytest.importorskip("torch")
    assert gpu["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert "device" not in result["rounds"][0]["workers"][0]
    assert plans[0]["prediction_source"] == "cpu-share" and plans[0]["batches"][2] == max(
        plans[0]["batches"]
    )
    # ... every round split its rows between Lambda and the GPU by drift-plus-penalty (Proteus),
    # recorded in the round plan, the round record and the job record's last round
    for plan, rec in zip(plans, result["rounds"]):
        lam, gpu_q = plan["dispatch"]["queues"]
        assert (lam["name"], gpu_q["name"]) == ("lambda", "gpu")
        assert lam["samples"] == sum(plan["batches"][:2]) and gpu_q["samples"] == plan["batches"][2]
        assert rec["dispatch"] == plan["dispatch"]
    assert plans[1]["prediction_source"] == "job"  # measured after round 0
    import os

    from fanfit.storage import JobRecords

    job = JobRecords(os.environ["FANFIT_JOB_TABLE"]).get("example-train")
    assert job["last_round"]["dispatch"]["gpu"] == plans[-1]["batches"][2]


def test_batch_worker_rejects_a_bad_task_with_exit_2(aws):
    from fanfit.jobs.gpu import main

    # GIVEN tasks that are not JSON objects, an unknown kind, or a task missing its worker
    # WHEN the Batch worker runs them THEN it exits 2 without running anything
    assert main(["train_shard", "not json"]) == 2
    assert main(["train_shard", "[1, 2]"]) == 2
    assert main(["evaluate", "{}"]) == 2
    assert main(["train_shard", json.dumps({"job_id": "example-train", "round": 0})]) == 2
    assert main(["only-one-argument"]) == 2


class _Killed(BaseException):
    """Stands in for a SIGKILL: not an Exception, so Powertools neither deletes the step's record
    nor stores a response (the record stays INPROGRESS, as a dead process leaves it)."""


def test_a_retry_of_a_killed_worker_stops_the_job_and_a_resumed_execution_is_not_blocked(
    aws, load_handler, lambda_context, monkeypatch
):
    import sys

    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
    )

    from fanfit import storage
    from fanfit.errors import TrainJobStoppedError
    from fanfit.jobs.documents.train import TrainStop
    from fanfit.jobs.train.shard import StopCheck

    # GIVEN a linreg job through Init and Schedule of round 0, and worker 0's step of round 0 in
    # execution A whose process died mid-step (its idempotency record left INPROGRESS)
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(size=(50, 3)), columns=["a", "b", "y"])
    store = storage.JobStore("fanfit-unit")
    _upload(store, frame, model="linreg", features="a,b", target="y", workers=2, global_batch=20)
    load_handler("train_init")(_event("train_init"), lambda_context())
    load_handler("train_schedule")(_event("train_schedule"), lambda_context())
    shard = load_handler("train_shard")
    module = sys.modules["fanfit_fn_train_shard"]
    arn_a = "arn:aws:states:us-east-1:123456789012:execution:fanfit-Train:example-train"
    arn_b = f"{arn_a}-r1"
    event_a = {**_event("train_shard"), "execution_arn": arn_a}
    real_step = module.train_shard

    def killed(*args, **kwargs):
        raise _Killed()

    monkeypatch.setattr(module, "train_shard", killed)
    with pytest.raises(_Killed):
        shard(event_a, lambda_context())
    monkeypatch.setattr(module, "train_shard", real_step)
    assert not store.exists(storage.train_stop_key("example-train"))

    # WHEN Step Functions retries that step in the same execution
    with pytest.raises(IdempotencyAlreadyInProgressError):
        shard(event_a, lambda_context())
    # THEN the retry wrote the job's stop marker for execution A, naming the worker, the round
    # and the error, and a group-mate of that execution stops on it
    marker = TrainStop.parse(store.get_json(storage.train_stop_key("example-train")))
    assert (marker.reason, marker.execution_arn, marker.worker, marker.round, marker.error) == (
        "failed", arn_a, 0, 0, "IdempotencyAlreadyInProgressError")  # fmt: skip
    with pytest.raises(TrainJobStoppedError, match="worker 0 failed in round 0"):
        StopCheck(store, "example-train", 1, arn_a).check(1)

    # WHEN the job is resumed: the same step in a new execution B
    out = shard({**event_a, "execution_arn": arn_b}, lambda_context())
    # THEN the dead record of execution A does not block it: the step ran and wrote its partial
    assert store.exists(out["partial_key"]) and out["batch"] == 10
    StopCheck(store, "example-train", 1, arn_b).check(1)  # A's marker does not stop B
