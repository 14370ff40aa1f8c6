"""Resuming a train job (``fanfit resume``): where it starts, what it keeps, what it gives.

GIVEN train jobs run by hand through the five train handlers on moto (as
tests/unit/test_train_handlers.py does), stopped after some rounds (a round's Map half done, the
job's tables emptied as a restarted local stack leaves them), WHEN TrainInit runs again in a new
execution, THEN it starts at the first round whose reduced model is not in S3
(:func:`fanfit.jobs.train.resume.resume_point`), keeps every reduced round's objects (same ETags) and the
stopped round's plan, and the job ends with the uninterrupted run's model, bit for bit.
``Client.resume`` refuses a running job and an unknown one, and hands back a ``TrainJob``.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

ARN = "arn:aws:lambda:us-east-1:123456789012:function:fanfit-TrainShard{}Function"
WORKER_FUNCTIONS = {"1769": ARN.format("Large"), "885": ARN.format("Small")}
FIRST = "arn:aws:states:us-east-1:123456789012:execution:fanfit-Train:{}"


@pytest.fixture
def aws(moto_stack):
    env = {"FANFIT_TRAIN_WORKER_FUNCTIONS": json.dumps(WORKER_FUNCTIONS)}
    with moto_stack(env) as s3:
        yield s3


@pytest.fixture
def handlers(aws, load_handler):
    names = ("train_init", "train_schedule", "train_shard", "train_reduce", "train_finalize")
    return {n: load_handler(n, prefix="fanfit_resume") for n in names}


def _blobs(n: int = 180, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0, 0.0], [4.0, 4.0, 0.0], [0.0, 4.0, 4.0]])
    X = centres[rng.integers(0, 3, n)] + 1.5 * rng.normal(size=(n, 3))
    y = (X[:, 0] + X[:, 1] - X[:, 2] > 1.0).astype(float)
    return pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2], "y": y})


KMEANS = dict(model="kmeans", features="a,b,c", n_clusters=3, workers=2,
              worker_memory="1769,885", rounds=12, balance="uniform", seed=4)  # fmt: skip
LOGREG = dict(model="logreg", features="a,b,c", target="y", workers=3, rounds=8, global_batch=60,
              balance="uniform", sync="ds-sync", group_size=2, lr=0.5, seed=2)  # fmt: skip


def _upload(job_id: str, frame: pd.DataFrame, **options) -> None:
    from fanfit import storage
    from fanfit.client.data import to_matrix
    from fanfit.client.train import build_train_spec

    store = storage.JobStore("fanfit-unit")
    spec = build_train_spec(**options)
    columns = [*spec.features, *([spec.target] if spec.target else [])]
    names, values = to_matrix(frame, columns)
    job = {"kind": "train", "spec": spec.to_dict(), "data_key": store.put_data(names, values),
           "init_key": None}  # fmt: skip
    store.put_json(storage.spec_key(job_id), job)


class Runner:
    """The train state machine's loop, by hand, for one job and one execution."""

    def __init__(self, handlers: dict, lambda_context, job_id: str, execution: str) -> None:
        self.h, self.ctx, self.job_id = handlers, lambda_context, job_id
        self.execution_arn = FIRST.format(execution)

    def init(self) -> dict:
        event = {"job_id": self.job_id, "spec_key": f"jobs/{self.job_id}/spec.json",
                 "execution_arn": self.execution_arn}  # fmt: skip
        return self.h["train_init"](event, self.ctx())

    def schedule(self, r: int) -> dict:
        return self.h["train_schedule"]({"job_id": self.job_id, "round": r}, self.ctx())

    def shard(self, item: dict) -> dict:
        memory = 885 if item["function_arn"] == WORKER_FUNCTIONS["885"] else 1769
        return self.h["train_shard"](item, self.ctx(memory_limit_in_mb=memory))

    def reduce(self, r: int) -> dict:
        return self.h["train_reduce"]({"job_id": self.job_id, "round": r}, self.ctx())

    def finalize(self, r: int) -> dict:
        event = {"job_id": self.job_id, "round": r, "execution_arn": self.execution_arn}
        return self.h["train_finalize"](event, self.ctx())

    def run(self, progress: dict, *, stop_after: int | None = None) -> dict | None:
        """From Init's output on: rounds until done (then Finalize's output) or ``stop_after``
        rounds reduced in this call (then None)."""
        done = 0
        while progress["has_next_round"]:
            if stop_after is not None and done == stop_after:
                return None
            r = progress["round"]
            planned = self.schedule(r)
            if any(item.get("rounds", 1) > 1 for item in planned["workers"]):
                # a DS-Sync segment: the Map runs every worker at once (each waits for its group)
                with ThreadPoolExecutor(max_workers=len(planned["workers"])) as pool:
                    list(pool.map(self.shard, planned["workers"]))
            else:
                for item in planned["workers"]:
                    self.shard(item)
            # BSP's reduce; DS-Sync has none: the ASL's Pass takes the schedule's "advance"
            progress = self.reduce(r) if planned["reduce"] else planned["advance"]
            done += 1
        return self.finalize(progress["round"])


def _etags(s3, job_id: str, prefix: str = "train/") -> dict[str, str]:
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket="fanfit-unit", Prefix=f"jobs/{job_id}/{prefix}"
    )
    return {o["Key"]: o["ETag"] for p in pages for o in p.get("Contents", [])}


def _empty_tables() -> None:
    """What a restarted local stack leaves: the job, idempotency and throughput tables empty."""
    import boto3

    ddb = boto3.client("dynamodb")
    for table in ("fanfit-jobs", "fanfit-idempotency", "fanfit-throughput"):
        schema = ddb.describe_table(TableName=table)["Table"]["KeySchema"]
        names = [k["AttributeName"] for k in schema]
        for item in ddb.scan(TableName=table)["Items"]:
            ddb.delete_item(TableName=table, Key={n: item[n] for n in names})


def _result(job_id: str, done: dict) -> dict:
    from fanfit import storage

    return storage.JobStore("fanfit-unit").get_json(done["result_key"])


def test_a_job_that_never_ran_has_no_resume_point_and_a_new_one_starts_at_round_0(
    handlers, lambda_context
):
    from fanfit import storage
    from fanfit.jobs.train.resume import resume_point

    store = storage.JobStore("fanfit-unit")
    # GIVEN a job whose spec is written but whose Init never ran
    _upload("job-new", _blobs(), **KMEANS)
    # THEN it has no resume point (it starts from scratch) ...
    assert resume_point(store, "job-new") is None
    # WHEN Init runs
    out = Runner(handlers, lambda_context, "job-new", "job-new").init()
    # THEN it starts at round 0, not resumed, and the resume point says the same
    assert (out["round"], out["has_next_round"], out["resumed"]) == (0, True, False)
    point = resume_point(store, "job-new")
    assert (point.round, point.phase, point.has_next_round) == (0, "train", True)
    # ... and Init run again in a new execution before any round was reduced starts at 0 again
    again = Runner(handlers, lambda_context, "job-new", "job-new-r1").init()
    assert (again["round"], again["has_next_round"], again["resumed"]) == (0, True, True)


def test_resume_point_is_the_first_round_whose_reduced_model_is_missing(aws):
    from fanfit import storage
    from fanfit.jobs.train.data import put_state_arrays as _put_state
    from fanfit.jobs.train.resume import resume_point

    store = storage.JobStore("fanfit-unit")
    store.put_json(storage.plan_key("job-x"), {"job_id": "job-x"})
    # GIVEN models of rounds 0..3 and records of rounds 0..2, and a stray model of round 5
    for r in range(4):
        _put_state(store, "job-x", r, {"centroids": np.zeros((1, 1))}, {"phase": "train"})
    for r in range(3):
        store.put_json(storage.train_round_key("job-x", r), {"round": r})
    _put_state(store, "job-x", 5, {"centroids": np.zeros((1, 1))}, {"phase": "train"})
    # THEN the job resumes at round 3 (round 4's model is missing: round 3 is not reduced)
    assert resume_point(store, "job-x").round == 3
    # GIVEN round 1's record removed by hand THEN the job cannot resume
    store.s3.delete_object(Bucket="fanfit-unit", Key=storage.train_round_key("job-x", 2))
    from fanfit.errors import InvalidJobError

    with pytest.raises(InvalidJobError, match="round 2 is reduced but its record"):
        resume_point(store, "job-x")


def test_a_stopped_kmeans_job_resumed_after_a_restart_equals_the_uninterrupted_run(
    aws, handlers, lambda_context
):
    from fanfit import storage

    s3, frame = aws, _blobs()
    # GIVEN the uninterrupted run of a K-Means job
    _upload("km-clean", frame, **KMEANS)
    clean = Runner(handlers, lambda_context, "km-clean", "km-clean")
    clean_result = _result("km-clean", clean.run(clean.init()))
    assert clean_result["n_iter"] >= 5  # enough rounds to stop in the middle
    # ... and the same job stopped after 3 reduced rounds, in round 3's Map (worker 0 done)
    _upload("km-stop", frame, **KMEANS)
    first = Runner(handlers, lambda_context, "km-stop", "km-stop")
    assert first.run(first.init(), stop_after=3) is None
    items = first.schedule(3)["workers"]
    first.shard(items[0])
    reduced = {k: v for k, v in _etags(s3, "km-stop").items()
               if re.search(r"/state/0000[0-3]\.npz$|/rounds/0000[0-2]/", k)}  # fmt: skip
    round3_plan = _etags(s3, "km-stop", "train/rounds/00003/plan.json")
    assert len(reduced) == 4 + 3 * (1 + 2 + 1)  # 4 models; per round: plan, 2 partials, record
    # ... and the stack restarted: its tables are empty, S3 holds everything
    _empty_tables()

    # WHEN Init runs in a new execution
    second = Runner(handlers, lambda_context, "km-stop", "km-stop-r1")
    progress = second.init()
    # THEN it starts at round 3, the first one not reduced, and records the new execution
    assert (progress["round"], progress["has_next_round"], progress["resumed"]) == (3, True, True)
    store = storage.JobStore("fanfit-unit")
    record = storage.JobRecords("fanfit-jobs").get("km-stop")
    assert record["status"] == "RUNNING" and record["execution_arn"] == second.execution_arn
    assert record["resumed_at_round"] == 3 and record["kind"] == "train"
    # ... round 3 keeps its plan (worker 0's partial was computed with its batches)
    assert second.schedule(3)["round"] == 3
    assert _etags(s3, "km-stop", "train/rounds/00003/plan.json") == round3_plan
    done = second.run(progress)
    result = _result("km-stop", done)
    # ... the reduced rounds were neither run again nor rewritten
    after = _etags(s3, "km-stop")
    assert {k: after[k] for k in reduced} == reduced
    # ... and the model is the uninterrupted run's, bit for bit
    np.testing.assert_array_equal(result["centroids"], clean_result["centroids"])
    assert result["inertia"] == clean_result["inertia"]
    assert (result["n_iter"], result["converged"]) == (clean_result["n_iter"],
                                                       clean_result["converged"])  # fmt: skip
    assert len(result["rounds"]) == len(clean_result["rounds"])
    assert [r["inertia"] for r in result["rounds"]] == [
        r["inertia"] for r in clean_result["rounds"]
    ]
    assert [r["workers"][0]["batch"] for r in result["rounds"]] == [
        r["workers"][0]["batch"] for r in clean_result["rounds"]]  # fmt: skip
    assert store.get_json(storage.result_key("km-stop"))["execution_arn"] == second.execution_arn
    assert storage.JobRecords("fanfit-jobs").get("km-stop")["status"] == "SUCCEEDED"


def test_a_stopped_ds_sync_logreg_job_resumed_without_a_restart_equals_the_uninterrupted_run(
    aws, handlers, lambda_context, monkeypatch
):
    # one Map per round (segments of one round: a worker timeout too short for two rounds), so
    # that the job can be stopped between rounds (test_train_dssync_segments: within a segment)
    monkeypatch.setenv("FANFIT_TRAIN_SHARD_TIMEOUT_S", "0.001")
    frame = _blobs(seed=5)
    # GIVEN the uninterrupted run of a DS-Sync logistic regression ...
    _upload("lr-clean", frame, **LOGREG)
    clean = Runner(handlers, lambda_context, "lr-clean", "lr-clean")
    clean_result = _result("lr-clean", clean.run(clean.init()))
    # ... and the same job stopped after 5 rounds, round 5 scheduled (its idempotency records kept)
    _upload("lr-stop", frame, **LOGREG)
    first = Runner(handlers, lambda_context, "lr-stop", "lr-stop")
    assert first.run(first.init(), stop_after=5) is None
    first.schedule(5)
    # WHEN it is resumed in a new execution
    second = Runner(handlers, lambda_context, "lr-stop", "lr-stop-r1")
    progress = second.init()
    assert (progress["round"], progress["resumed"]) == (5, True)
    result = _result("lr-stop", second.run(progress))
    # THEN its model and losses are the uninterrupted run's, bit for bit
    assert result["coef"] == clean_result["coef"]
    assert result["intercept"] == clean_result["intercept"]
    assert result["loss"] == clean_result["loss"] and len(result["loss"]) == LOGREG["rounds"]


def test_a_finished_job_resumes_at_its_final_model_and_only_writes_its_result(
    aws, handlers, lambda_context
):
    from fanfit import storage
    from fanfit.jobs.train.resume import resume_point

    s3 = aws
    # GIVEN a job whose every round was reduced, stopped before Finalize
    _upload("km-final", _blobs(), **KMEANS)
    first = Runner(handlers, lambda_context, "km-final", "km-final")
    progress = first.init()
    while progress["has_next_round"]:
        r = progress["round"]
        for item in first.schedule(r)["workers"]:
            first.shard(item)
        progress = first.reduce(r)
    before = _etags(s3, "km-final")
    # THEN its resume point is its final model, with no round left
    point = resume_point(storage.JobStore("fanfit-unit"), "km-final")
    assert (point.round, point.phase, point.has_next_round) == (progress["round"], "done", False)
    # WHEN it is resumed
    second = Runner(handlers, lambda_context, "km-final", "km-final-r1")
    out = second.init()
    # THEN Init goes straight to Finalize (no round left) ...
    assert (out["round"], out["has_next_round"]) == (progress["round"], False)
    done = second.run(out)
    # ... which writes the result without touching any round
    assert _etags(s3, "km-final") == before
    result = _result("km-final", done)
    assert len(result["rounds"]) == progress["round"]
    # ... and a finished job resumed once more writes it again, for its new execution
    third = Runner(handlers, lambda_context, "km-final", "km-final-r2")
    again = third.run(third.init())
    assert _result("km-final", again)["centroids"] == result["centroids"]
    assert _result("km-final", again)["execution_arn"] == third.execution_arn


def test_a_resumed_job_whose_spec_changed_is_refused_by_name(aws, handlers, lambda_context):
    from fanfit import storage

    # GIVEN a job that ran two rounds, whose spec.json was then rewritten with other options
    frame = _blobs()
    _upload("km-edit", frame, **KMEANS)
    first = Runner(handlers, lambda_context, "km-edit", "km-edit")
    first.run(first.init(), stop_after=2)
    _upload("km-edit", frame, **{**KMEANS, "n_clusters": 4})
    # WHEN it is resumed THEN Init fails naming the option that changed
    from fanfit.errors import InvalidJobError

    with pytest.raises(InvalidJobError, match=r"differs from the plan .*n_clusters"):
        Runner(handlers, lambda_context, "km-edit", "km-edit-r1").init()
    # ... and nothing of the job was rewritten
    assert storage.JobStore("fanfit-unit").get_json(storage.plan_key("km-edit"))["spec"][
        "n_clusters"] == 3  # fmt: skip


def test_a_resumed_job_takes_the_functions_of_the_redeployed_stack(
    aws, handlers, lambda_context, load_handler, monkeypatch
):
    from fanfit import storage

    # GIVEN a job that ran one round
    _upload("km-arn", _blobs(), **KMEANS)
    first = Runner(handlers, lambda_context, "km-arn", "km-arn")
    first.run(first.init(), stop_after=1)
    # WHEN the stack was redeployed with other TrainShard function names and the job resumed
    moved = {mb: arn.replace("fanfit-", "fanfit2-") for mb, arn in WORKER_FUNCTIONS.items()}
    monkeypatch.setenv("FANFIT_TRAIN_WORKER_FUNCTIONS", json.dumps(moved))
    init = load_handler("train_init", prefix="fanfit_resume_moved")
    event = {"job_id": "km-arn", "spec_key": "jobs/km-arn/spec.json",
             "execution_arn": FIRST.format("km-arn-r1")}  # fmt: skip
    assert init(event, lambda_context())["round"] == 1
    # THEN the plan's workers name the new functions, with the sizes they had
    plan = storage.JobStore("fanfit-unit").get_json(storage.plan_key("km-arn"))
    assert [w["function_arn"] for w in plan["workers"]] == [moved["1769"], moved["885"]]
    assert [w["memory_mb"] for w in plan["workers"]] == [1769, 885]


# ----------------------------------------------------------------------------- Client.resume


@pytest.fixture
def client(aws):
    """A Client on moto's S3, DynamoDB and Step Functions (whose executions stay RUNNING)."""
    import boto3

    from fanfit import storage
    from fanfit.client import Client, Stack

    sfn = boto3.client("stepfunctions")
    role = "arn:aws:iam::123456789012:role/fanfit"
    definition = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
    arns = {
        name: sfn.create_state_machine(name=name, definition=definition, roleArn=role)[
            "stateMachineArn"
        ]
        for name in ("fanfit-Estimate", "fanfit-Train")
    }
    c = Client.__new__(Client)
    c.session = boto3.Session()
    c.local = False
    c.stack = Stack(name="fanfit", bucket="fanfit-unit", job_table="fanfit-jobs",
                    estimate_state_machine_arn=arns["fanfit-Estimate"],
                    train_state_machine_arn=arns["fanfit-Train"])  # fmt: skip
    c.s3, c.sfn = aws, sfn
    c.store = storage.JobStore("fanfit-unit", aws)
    c.records = storage.JobRecords("fanfit-jobs")
    c.partitions = None
    return c


def test_client_resume_of_a_train_job_starts_the_train_machine_and_returns_a_train_job(client):
    from fanfit import storage
    from fanfit.client.train import TrainJob

    # GIVEN a train job whose execution was stopped
    _upload("train-stopped", _blobs(), **KMEANS)
    old = client.sfn.start_execution(stateMachineArn=client.stack.train_state_machine_arn,
                                     name="train-stopped", input="{}")["executionArn"]  # fmt: skip
    client.records.mark_running("train-stopped", execution_arn=old, kind="train")
    client.sfn.stop_execution(executionArn=old)
    # WHEN it is resumed
    job = client.resume("train-stopped")
    # THEN the handle is a TrainJob of a new execution of the train state machine, named as an
    # estimate's resumed execution is
    assert isinstance(job, TrainJob) and job.kind == "train"
    assert job.execution_arn != old
    desc = client.sfn.describe_execution(executionArn=job.execution_arn)
    assert desc["stateMachineArn"] == client.stack.train_state_machine_arn
    assert re.fullmatch(r"train-stopped-r\d{10}", desc["name"])
    assert json.loads(desc["input"]) == {"job_id": "train-stopped",
                                         "spec_key": storage.spec_key("train-stopped")}  # fmt: skip
    # ... which the record names at once: a second resume meanwhile is refused
    assert client.records.get("train-stopped")["execution_arn"] == job.execution_arn
    from fanfit import errors

    with pytest.raises(errors.InvalidJobError, match="still running"):
        client.resume("train-stopped")


def test_client_resume_refuses_a_running_train_job_and_an_unknown_job(client):
    from fanfit import errors

    # GIVEN a train job whose execution still runs
    _upload("train-running", _blobs(), **KMEANS)
    arn = client.sfn.start_execution(stateMachineArn=client.stack.train_state_machine_arn,
                                     name="train-running", input="{}")["executionArn"]  # fmt: skip
    client.records.mark_running("train-running", execution_arn=arn, kind="train")
    # THEN resuming it is refused, naming the execution
    with pytest.raises(errors.InvalidJobError, match="still running"):
        client.resume("train-running")
    # ... and a job the bucket does not hold is not found
    with pytest.raises(errors.JobNotFoundError):
        client.resume("train-nowhere")


def test_client_resume_of_a_train_job_after_a_restart_needs_no_record(client):
    from fanfit.client.train import TrainJob

    # GIVEN a train job whose record went with the stack's tables (S3 holds its spec)
    _upload("train-restarted", _blobs(), **KMEANS)
    # WHEN it is resumed THEN a new execution starts
    assert isinstance(client.resume("train-restarted"), TrainJob)


def test_client_resume_of_an_estimate_job_still_returns_an_estimate_job(client):
    from fanfit import storage
    from fanfit.client import EstimateJob

    client.store.put_json(storage.spec_key("est-stopped"), {"dml": {}, "data_key": "x"})
    job = client.resume("est-stopped")
    assert type(job) is EstimateJob
    desc = client.sfn.describe_execution(executionArn=job.execution_arn)
    assert desc["stateMachineArn"] == client.stack.estimate_state_machine_arn
