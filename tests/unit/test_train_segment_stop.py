"""A DS-Sync segment stops when its job fails or is cancelled: the job's stop marker.

GIVEN a DS-Sync job on moto whose workers run a segment of rounds in threads, WHEN one member's
step raises, THEN it writes the job's stop marker (``train/stop.json``) and re-raises its own
error unchanged, and its group-mates waiting for its partial stop within a few polls with
TrainJobStoppedError naming the job, the worker, the round and the reason, not at their
deadline; a cancel of a train job writes the marker too; a marker of an earlier execution does
not stop a resumed one; the failure branch of the state machine writes a marker that parses.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_train_dssync_segments import SPEC, Job
from test_train_resume import WORKER_FUNCTIONS, _blobs, _upload

from fanfit import storage

ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.01
WAIT_S = 60.0  # a deadline far beyond what a stop needs: only a bug reaches it
E1, E2 = (
    "arn:aws:states:us-east-1:1:execution:train:e1",
    "arn:aws:states:us-east-1:1:execution:train:e2",
)


@pytest.fixture
def aws(moto_stack):
    with moto_stack({"FANFIT_TRAIN_WORKER_FUNCTIONS": json.dumps(WORKER_FUNCTIONS)}):
        yield


class Boom(RuntimeError):
    """The failing member's own error (a learner raising, say)."""


def _run_segment(job: Job, items: list[dict], execution_arn: str) -> list[Any]:
    """Every worker's segment in threads at once; each worker's output or the error it raised."""
    from fanfit.jobs.train.shard import train_shard

    def one(item: dict) -> Any:
        try:
            return train_shard(job.store, job.job_id, item["round"], item["worker"],
                               memory_mb=1769, rounds=item["rounds"],
                               deadline=time.time() + WAIT_S, poll_s=POLL_S,
                               execution_arn=execution_arn)  # fmt: skip
        except Exception as exc:  # the test looks at each worker's error
            return exc

    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(one, items))


def test_a_failing_member_stops_its_group_mates_and_a_resumed_execution_is_not_stopped(
    aws, load_handler, lambda_context, monkeypatch, caplog
):
    from fanfit.errors import TrainJobStoppedError
    from fanfit.jobs.documents.train import TrainStop
    from fanfit.jobs.train import schedule, shard
    from fanfit.jobs.train.data import read_round_plan

    # GIVEN a DS-Sync job (4 workers in groups of 2) whose round 1 is a segment of rounds 1-3
    monkeypatch.setattr(schedule, "SEGMENT_CAP", 3)
    _upload("failing", _blobs(n=200, seed=7), **SPEC)
    job = Job("failing")
    job.init(load_handler, lambda_context)
    job.map(job.schedule(0)["workers"])
    items = job.schedule(1)["workers"]
    assert [i["rounds"] for i in items] == [3] * 4
    # ... and worker 1's step of round 2 raises its own error
    original = Boom("the learner ran out of memory")
    real_step = shard._step

    def step(store, job_id, round_index, worker, *args, **kwargs):
        if (worker, round_index) == (1, 2):
            # only once its round-2 group-mate has written its partial of round 2, so the mate
            # is at round 3 (at its boundary or waiting for worker 1) whatever the machine's load
            partial = storage.train_partial_key(job_id, 2, mate)
            for _ in range(int(WAIT_S / POLL_S)):  # bounded; the mate writes it in well under 1 s
                if store.exists(partial):
                    break
                time.sleep(POLL_S)
            raise original
        return real_step(store, job_id, round_index, worker, *args, **kwargs)

    monkeypatch.setattr(shard, "_step", step)
    groups = read_round_plan(job.store, "failing", 2).groups
    mate = next(i for g in groups if 1 in g for i in g if i != 1)
    # WHEN the segment runs in execution E1
    started = time.perf_counter()
    outs = _run_segment(job, items, E1)
    elapsed = time.perf_counter() - started

    # THEN worker 1 re-raised its own error unchanged (the same object)
    assert outs[1] is original
    # ... after writing the stop marker: failed, worker 1, round 2, the error's class, E1
    marker = TrainStop.parse(job.store.get_json(storage.train_stop_key("failing")))
    assert (marker.reason, marker.worker, marker.round, marker.error) == ("failed", 1, 2, "Boom")
    assert marker.execution_arn == E1 and "out of memory" in marker.message
    # ... and its round-2 group-mate, waiting for its partial to run round 3, stopped at once
    # (far within its 60 s deadline) with the named error giving the job, worker, round, reason
    assert isinstance(outs[mate], TrainJobStoppedError)
    message = str(outs[mate])
    assert "job failing" in message and f"worker {mate}" in message and "round 3" in message
    assert "worker 1 failed in round 2 (Boom: the learner ran out of memory)" in message
    assert elapsed < 10
    # ... and said why in its log
    assert message in caplog.text
    # ... while a worker of the other group, needing no partial of worker 1, ran on or stopped
    # at its round boundary (whichever came first), never with another error
    for i in set(range(4)) - {1, mate}:
        assert isinstance(outs[i], (dict, TrainJobStoppedError)), outs[i]

    # WHEN the job is resumed: a new execution E2 runs the segment again, the marker still there
    monkeypatch.setattr(shard, "_step", real_step)
    again = _run_segment(job, items, E2)
    # THEN E1's marker stops none of E2's workers: every worker ends round 3
    assert [o["round"] for o in again] == [3, 3, 3, 3], again
    assert job.store.exists(storage.train_stop_key("failing"))  # left as it was
    for r in (1, 2, 3):
        for w in range(4):
            assert job.store.exists(storage.train_worker_record_key("failing", r, w))


def test_a_waiter_stops_within_a_few_polls_of_the_marker(aws):
    from fanfit.errors import TrainJobStoppedError
    from fanfit.jobs.train.shard import StopCheck, stop_job, wait_for_group

    store = storage.JobStore("fanfit-unit")
    heads: list[str] = []
    real_exists = store.exists

    def exists(key: str) -> bool:
        heads.append(key)
        return real_exists(key)

    store.exists = exists  # type: ignore[method-assign]
    stop = StopCheck(store, "waits", worker=0, execution_arn=E1)

    # GIVEN worker 0 waiting (60 s deadline) for worker 1's partial of round 4, which never comes
    def wait() -> float:
        return wait_for_group(store, "waits", 4, [0, 1], 0, time.time() + WAIT_S, POLL_S,
                              stop=stop, stop_every=3)  # fmt: skip

    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(wait)
        for _ in range(200):  # bounded: until the waiter has polled a few times
            if len(heads) >= 4:
                break
            time.sleep(POLL_S)
        polls_before = len(heads)
        # WHEN the job is cancelled (the marker of the waiter's execution appears)
        stop_job(store, "waits", "cancelled", execution_arn=E1)
        with pytest.raises(TrainJobStoppedError) as err:
            waiting.result(timeout=10)
    # THEN it stopped within stop_every polls (plus the one in flight), naming why
    assert len(heads) - polls_before <= 3 + 1
    assert str(err.value) == (
        "job waits: worker 0 stopped waiting for its group's partials of round 4 (round 5 of "
        "its segment): the job was cancelled; stop marker "
        f"{storage.train_stop_key('waits')}"
    )


def test_a_marker_of_another_execution_is_read_once_and_ignored(aws):
    from fanfit.errors import TrainJobStoppedError
    from fanfit.jobs.train.shard import StopCheck, stop_job

    store = storage.JobStore("fanfit-unit")
    # GIVEN the marker of execution E1 (failed), read by a worker of execution E2
    stop_job(store, "stale", "failed", execution_arn=E1, worker=3, round_index=7, error="Boom")
    check = StopCheck(store, "stale", worker=0, execution_arn=E2)
    gets: list[str] = []
    real_get = store.get_json
    store.get_json = lambda key: gets.append(key) or real_get(key)  # type: ignore[method-assign]
    # WHEN it checks three times
    for r in (1, 2, 3):
        check.check(r)
    # THEN it did not stop, and read the marker's body once (a HEAD per check after that)
    assert gets == [storage.train_stop_key("stale")]
    # WHEN E2 itself fails later (the marker written again, for E2): THEN it stops
    stop_job(store, "stale", "failed", execution_arn=E2, worker=2, round_index=9, error="Boom")
    with pytest.raises(TrainJobStoppedError, match=r"worker 2 failed in round 9 \(Boom\)"):
        check.check(4)
    # ... and a marker naming no execution (an old writer) stops every worker
    stop_job(store, "stale", "cancelled")
    with pytest.raises(TrainJobStoppedError, match="the job was cancelled"):
        StopCheck(store, "stale", worker=1, execution_arn=E1).check(2)


def test_a_marker_that_cannot_be_written_does_not_mask_the_workers_error(aws, caplog):
    from fanfit.errors import InvalidJobError
    from fanfit.jobs.documents.train import TrainStop
    from fanfit.jobs.train.shard import train_shard

    # GIVEN a worker of a job (its plan written) whose step raises (a bad segment length) ...
    store = storage.JobStore("fanfit-unit")
    store.put_json(storage.plan_key("bad"), {"job_id": "bad"})
    with pytest.raises(InvalidJobError, match="rounds must be an integer"):
        train_shard(store, "bad", 3, 2, rounds=0, execution_arn=E1)
    # THEN it wrote the marker naming itself, its round and its error's class
    marker = TrainStop.parse(store.get_json(storage.train_stop_key("bad")))
    assert (marker.worker, marker.round, marker.error) == (2, 3, "InvalidJobError")
    # GIVEN ... and on a store whose writes fail (no such bucket)
    broken = storage.JobStore("fanfit-no-such-bucket")
    broken.exists = lambda key: True  # type: ignore[method-assign]  # the plan "is there"
    # WHEN it raises: THEN its own error comes out, the failed write only logged
    with (
        caplog.at_level("WARNING", logger="fanfit"),
        pytest.raises(InvalidJobError, match="rounds must be an integer"),
    ):
        train_shard(broken, "bad", 3, 2, rounds=0)
    assert "stop marker could not be written" in caplog.text


@pytest.fixture
def client(moto_stack, moto_client) -> Any:
    with moto_stack():
        made = moto_client()
        made.__dict__["_lifecycle_outputs"] = {"outputs": {}}  # no CloudFormation: no Batch queue
        yield made


def test_cancel_writes_the_marker_of_the_jobs_kind(client) -> None:
    from fanfit.jobs.documents.train import TrainStop

    # GIVEN a running train job and a running estimate
    arns = {}
    for job_id, kind in (("tr-a", "train"), ("est-a", "estimate")):
        client.store.put_json(storage.spec_key(job_id), {"kind": kind})
        machine = getattr(client.stack, f"{kind}_state_machine_arn")
        arns[job_id] = client.sfn.start_execution(stateMachineArn=machine, name=job_id, input="{}")[
            "executionArn"
        ]
        client.records.mark_running(job_id, execution_arn=arns[job_id], kind=kind)
    # WHEN both are cancelled
    client.job("tr-a").cancel()
    client.job("est-a").cancel()
    # THEN the train job has its stop marker (cancelled, its execution)
    marker = TrainStop.parse(client.store.get_json(storage.train_stop_key("tr-a")))
    assert marker.reason == "cancelled" and marker.execution_arn == arns["tr-a"]
    assert marker.describe() == "the job was cancelled"
    # AND the estimate has its own, where its CrossFit shards read it (none at the train key)
    marker = TrainStop.parse(client.store.get_json(storage.estimate_stop_key("est-a")))
    assert marker.reason == "cancelled" and marker.execution_arn == arns["est-a"]
    assert not client.store.exists(storage.train_stop_key("est-a"))
    assert not client.store.exists(storage.estimate_stop_key("tr-a"))


def test_the_failure_branch_writes_a_marker_of_the_execution_that_parses():
    from fanfit.jobs.documents.train import TrainStop
    from fanfit.jobs.states import TrainState

    # GIVEN the train state machine's failure branch
    states = json.loads((ROOT / "orchestrator" / "train.asl.json").read_text())["States"]
    assert states[TrainState.RECORD_FAILURE]["Next"] == TrainState.WRITE_STOP
    write = states[TrainState.WRITE_STOP]
    assert write["Next"] == TrainState.RELEASE
    assert write["Resource"] == "arn:aws:states:::aws-sdk:s3:putObject"
    params = write["Parameters"]
    # WHEN its Body's fields are filled as Step Functions fills them (an object: Step Functions
    # writes it as JSON; a string would be written JSON-quoted, as the local stack does too)
    values = {"$$.Execution.Id": E1, "$.error.Error": "Runtime.ExitError",
              "$.error.Cause": "{\"errorMessage\": \"out of memory\"}",
              "$$.State.EnteredTime": "2026-11-26T07:00:00.000Z"}  # fmt: skip
    assert isinstance(params["Body"], dict)
    body = {k.removesuffix(".$"): values[v] if k.endswith(".$") else v
            for k, v in params["Body"].items()}  # fmt: skip
    # THEN they make a TrainStop of that execution, written to the key fanfit.storage names
    marker = TrainStop.parse(body)
    assert (marker.reason, marker.execution_arn, marker.error) == (
        "failed",
        E1,
        "Runtime.ExitError",
    )
    assert marker.describe() == (
        'a worker failed (Runtime.ExitError: {"errorMessage": "out of memory"})'
    )
    template = params["Key.$"].split("'")[1]
    assert template.replace("{}", "JOB") == storage.train_stop_key("JOB")
    # ... and the worker Task passes the execution, so a worker knows whose marker it reads
    inner = states[TrainState.RUN_ROUND]["ItemProcessor"]["States"][TrainState.WORKER_STEP]
    assert inner["Parameters"]["Payload"]["execution_arn.$"] == "$$.Execution.Id"


def test_the_gpu_worker_s_failure_marker_names_its_execution(
    aws, load_handler, lambda_context, monkeypatch
):
    from fanfit.jobs import gpu
    from fanfit.jobs.documents.events import TrainShardEvent
    from fanfit.jobs.documents.train import TrainStop
    from fanfit.jobs.states import TrainState
    from fanfit.jobs.train import shard

    # GIVEN the GPU branch of the train state machine's worker Map
    states = json.loads((ROOT / "orchestrator" / "train.asl.json").read_text())["States"]
    inner = states[TrainState.RUN_ROUND]["ItemProcessor"]["States"]
    assert inner[TrainState.IS_WORKER_ON_GPU]["Choices"][0]["Next"] == TrainState.GPU_TASK
    task_state = inner[TrainState.GPU_TASK]
    assert task_state["Next"] == TrainState.WORKER_STEP_ON_GPU
    submit = inner[TrainState.WORKER_STEP_ON_GPU]["Parameters"]["Parameters"]
    assert submit["task.$"] == f"States.JsonToString({task_state['ResultPath']})"
    # ... and a job whose round-0 Map item runs on the GPU worker
    _upload("gpu-fails", _blobs(n=200, seed=7), **SPEC)
    job = Job("gpu-fails")
    job.init(load_handler, lambda_context)
    item = {**job.schedule(0)["workers"][0], "placement": "gpu"}
    # WHEN Step Functions fills the Pass's parameters from that item in execution E1
    values = {**{f"$.{k}": v for k, v in item.items()}, "$$.Execution.Id": E1}
    task = {k.removesuffix(".$"): values[v] for k, v in task_state["Parameters"].items()}
    # ... and the GPU worker runs that task and its step raises
    assert TrainShardEvent.model_validate(task).execution_arn == E1
    original = Boom("CUDA out of memory")

    def step(*args, **kwargs):
        raise original

    monkeypatch.setattr(shard, "_step", step)
    with pytest.raises(Boom):
        gpu.run_task("train_shard", task, store=job.store)
    # THEN its stop marker names execution E1 (so a resumed execution is not stopped by it)
    marker = TrainStop.parse(job.store.get_json(storage.train_stop_key("gpu-fails")))
    assert (marker.reason, marker.worker, marker.execution_arn) == ("failed", item["worker"], E1)
    assert not marker.applies_to(E2)
