"""A job stopped from outside gives its partition back: stale jobs are dropped as if released.

GIVEN a moto partition table and moto Step Functions executions, WHEN a registered job's execution
is stopped (StopExecution), times out or does not exist, THEN the next recomputation (another
job's arrival or end) or the next barrier of a job holding less than its demand drops it, records
the drop in the history entry (reason ``"stale"``), and hands its share to the running jobs; the
checks are bounded (one DescribeExecution per other registered job per check, none for a job that
holds its whole demand), and jobs registered without an execution, or whose execution cannot be
read, are kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
TABLE = "fanfit-partitions"
HISTORY = "fanfit-partition-history"
ROLE = "arn:aws:iam::123456789012:role/fanfit-states"
DEFINITION = json.dumps({"StartAt": "Wait", "States": {"Wait": {"Type": "Pass", "End": True}}})


class Executions:
    """The stack's two state machines on moto; ``start(name)`` returns a RUNNING execution's ARN."""

    def __init__(self) -> None:
        import boto3

        self.sfn = boto3.client("stepfunctions")
        self.machines = {
            kind: self.sfn.create_state_machine(
                name=f"fanfit-{kind}", definition=DEFINITION, roleArn=ROLE
            )["stateMachineArn"]
            for kind in ("estimate", "train")
        }

    def start(self, name: str, kind: str = "estimate") -> str:
        return self.sfn.start_execution(stateMachineArn=self.machines[kind], name=name)[
            "executionArn"
        ]

    def stop(self, arn: str) -> None:
        self.sfn.stop_execution(executionArn=arn, error="Stopped", cause="by the test")


class CountingSfn:
    """A Step Functions client that counts DescribeExecution calls by ARN."""

    def __init__(self, sfn: Any) -> None:
        self.sfn = sfn
        self.calls: list[str] = []

    def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803 - boto3's
        self.calls.append(executionArn)
        return self.sfn.describe_execution(executionArn=executionArn)


@pytest.fixture
def executions(partition_stack) -> Executions:
    return Executions()


def _held(parts) -> dict[str, int]:
    return {j["job_id"]: int(j["partition"]) for j in parts.jobs()}


def test_a_stopped_jobs_partition_is_reclaimed_at_the_next_registration(
    executions, make_partitions
):
    from fanfit.jobs.sharing import register_job

    parts = make_partitions()
    # GIVEN two running jobs that split a capacity of 4
    a = executions.start("a")
    register_job(parts, "a", "estimate", 4, capacity=(4, 0), execution_arn=a)
    register_job(parts, "b", "train", 4, capacity=(4, 0),
                 execution_arn=executions.start("b", "train"))  # fmt: skip
    assert _held(parts) == {"a": 2, "b": 2}
    assert parts.get("a")["execution_arn"] == a
    # WHEN a's execution is stopped from outside (it never reaches Aggregate or Release)
    executions.stop(a)
    # AND a third job arrives
    counting = CountingSfn(executions.sfn)
    register_job(parts, "c", "estimate", 2, capacity=(4, 0),
                 execution_arn=executions.start("c"), sfn=counting)  # fmt: skip
    # THEN a is dropped as if released and b and c share the capacity
    held = _held(parts)
    assert set(held) == {"b", "c"} and sum(held.values()) == 4
    entry = parts.history()[-1]
    assert entry["event"] == "arrive" and entry["job_id"] == "c"
    assert entry["dropped"] == [
        {"job_id": "a", "reason": "stale", "execution_arn": a, "execution_status": "ABORTED"}
    ]
    assert set(entry["jobs"]) == {"b", "c"}
    # AND the check asked once about each other registered job, never about the arriving one
    assert sorted(counting.calls) == sorted([a, parts.get("b")["execution_arn"]])


def test_a_job_whose_execution_does_not_exist_is_dropped_when_another_ends(
    executions, make_partitions
):
    from fanfit.jobs.sharing import register_job, release_job

    parts = make_partitions()
    # GIVEN two running jobs, then one registered by an execution Step Functions does not know
    # (a restarted stack; its own registration checks only the others)
    register_job(parts, "a", "estimate", 2, capacity=(4, 0), execution_arn=executions.start("a"))
    register_job(parts, "b", "estimate", 4, capacity=(4, 0), execution_arn=executions.start("b"))
    gone = executions.machines["estimate"].replace(":stateMachine:", ":execution:") + ":gone"
    register_job(parts, "ghost", "estimate", 2, capacity=(4, 0), execution_arn=gone)
    assert set(_held(parts)) == {"ghost", "a", "b"}
    # WHEN a ends
    entry = release_job(parts, "a", capacity=(4, 0))
    # THEN the ghost goes with it and b takes the whole capacity
    assert entry is not None and entry["event"] == "end" and entry["job_id"] == "a"
    assert [(d["job_id"], d["execution_status"]) for d in entry["dropped"]] == [
        ("ghost", "MISSING")
    ]
    assert _held(parts) == {"b": 4}


def test_finished_timed_out_and_failed_executions_are_stale_but_a_pending_redrive_is_not(
    make_partitions,
):
    from fanfit.jobs.sharing import register_job

    class Statuses:
        def __init__(self, statuses: dict[str, str]) -> None:
            self.statuses = statuses

        def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803
            return {"status": self.statuses[executionArn]}

    parts = make_partitions()
    statuses = {"arn:run": "RUNNING", "arn:ok": "SUCCEEDED", "arn:failed": "FAILED",
                "arn:timed-out": "TIMED_OUT", "arn:redrive": "PENDING_REDRIVE"}  # fmt: skip
    # GIVEN five jobs registered while their executions ran
    fake = Statuses(dict.fromkeys(statuses, "RUNNING"))
    for arn in statuses:
        register_job(parts, arn.removeprefix("arn:"), "estimate", 1, capacity=(8, 0),
                     execution_arn=arn, sfn=fake)  # fmt: skip
    assert len(_held(parts)) == 5
    # WHEN their executions end in every way and another job arrives
    fake.statuses = statuses
    register_job(parts, "new", "estimate", 1, capacity=(8, 0), sfn=fake)
    dropped = parts.history()[-1]["dropped"]
    assert sorted(d["job_id"] for d in dropped) == ["failed", "ok", "timed-out"]
    assert set(_held(parts)) == {"run", "redrive", "new"}


def test_jobs_without_an_execution_or_with_one_that_cannot_be_read_are_kept(make_partitions):
    from botocore.exceptions import ClientError

    from fanfit.jobs.sharing import register_job

    class Denied:
        calls = 0

        def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803
            Denied.calls += 1
            raise ClientError(
                {"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "DescribeExecution"
            )

    parts = make_partitions()
    # GIVEN a job registered before executions were recorded (an older event: no execution_arn)
    register_job(parts, "old", "estimate", 2, capacity=(4, 0))
    assert "execution_arn" not in parts.get("old")
    # AND one whose execution cannot be described (no permission)
    register_job(parts, "hidden", "estimate", 2, capacity=(4, 0),
                 execution_arn="arn:aws:states:us-east-1:123456789012:execution:fanfit-estimate:h")  # fmt: skip
    # WHEN another job arrives THEN both are kept; only the one with an execution was asked about
    register_job(parts, "new", "estimate", 2, capacity=(4, 0), sfn=Denied())
    assert set(_held(parts)) == {"old", "hidden", "new"}
    assert Denied.calls == 1
    assert "dropped" not in parts.history()[-1]


def test_a_resumed_job_records_its_new_execution_and_is_not_dropped_for_the_old_one(
    executions, make_partitions
):
    from fanfit.jobs.sharing import register_job, release_job

    parts = make_partitions()
    first = executions.start("job")
    register_job(parts, "job", "estimate", 2, capacity=(4, 0), execution_arn=first)
    # GIVEN its execution was stopped and the job resumed (fanfit resume: a new execution whose
    # Prepare registers the same demand again)
    executions.stop(first)
    second = executions.start("job-r1")
    register_job(parts, "job", "estimate", 2, capacity=(4, 0), execution_arn=second)
    # THEN the registration takes the new execution (event "resume") ...
    assert parts.get("job")["execution_arn"] == second
    assert parts.history()[-1]["event"] == "resume"
    # ... and a retried Prepare of the same execution changes nothing
    register_job(parts, "job", "estimate", 2, capacity=(4, 0), execution_arn=second)
    assert len(parts.history()) == 2
    # AND another job's recomputation keeps it
    register_job(
        parts, "other", "estimate", 2, capacity=(4, 0), execution_arn=executions.start("o")
    )
    release_job(parts, "other", capacity=(4, 0))
    assert _held(parts) == {"job": 2}


def test_a_barrier_short_of_its_demand_reclaims_a_stopped_jobs_share(
    executions, make_partitions, monkeypatch
):
    from fanfit.jobs import sharing
    from fanfit.jobs.sharing import partition_at_barrier, register_job

    parts = make_partitions()
    a, b = executions.start("a"), executions.start("b")
    register_job(parts, "a", "estimate", 4, capacity=(4, 0), execution_arn=a)
    register_job(parts, "b", "estimate", 4, capacity=(4, 0), execution_arn=b)
    calls: list[str] = []
    real = sharing.execution_status
    monkeypatch.setattr(sharing, "execution_status",
                        lambda arn, sfn=None: calls.append(arn) or real(arn, sfn))  # fmt: skip
    # GIVEN both running: b's barrier checks a once and changes nothing
    assert partition_at_barrier(parts, "b", capacity=(4, 0)).lambda_concurrency == 2
    assert calls == [a] and len(parts.history()) == 2
    # WHEN a is stopped from outside THEN b's next barrier drops it and reads its whole demand
    executions.stop(a)
    calls.clear()
    p = partition_at_barrier(parts, "b", capacity=(4, 0))
    assert p is not None and p.lambda_concurrency == 4 and p.whole
    assert calls == [a]
    entry = parts.history()[-1]
    assert entry["event"] == "reclaim" and entry["job_id"] == "b"
    assert entry["dropped"][0]["job_id"] == "a" and entry["dropped"][0]["reason"] == "stale"
    assert _held(parts) == {"b": 4}
    # AND a barrier holding its whole demand makes no call at all
    calls.clear()
    assert partition_at_barrier(parts, "b", capacity=(4, 0)).lambda_concurrency == 4
    assert calls == []


def test_a_barrier_alone_short_of_its_demand_asks_nobody(executions, make_partitions, monkeypatch):
    from fanfit.jobs import sharing
    from fanfit.jobs.sharing import partition_at_barrier, register_job

    parts = make_partitions()
    # GIVEN a job whose demand (8) exceeds the capacity (4), alone
    register_job(parts, "big", "estimate", 8, capacity=(4, 0), execution_arn=executions.start("g"))
    monkeypatch.setattr(sharing, "execution_status", lambda *a, **k: pytest.fail("called"))
    # THEN its barrier reads 4 without any DescribeExecution and without a recomputation
    assert partition_at_barrier(parts, "big", capacity=(4, 0)).lambda_concurrency == 4
    assert len(parts.history()) == 1


def test_a_recomputation_overtaken_by_another_does_not_ask_again(executions, make_partitions):
    from fanfit.jobs.sharing import recompute, register_job
    from fanfit.storage import Partitions

    a = executions.start("a")
    register_job(make_partitions(), "a", "estimate", 4, capacity=(4, 0), execution_arn=a)
    executions.stop(a)

    class Racing(Partitions):
        """Another job arrives between this recomputation's snapshot and its commit, once (its
        own recomputation makes no stale check: it only overtakes)."""

        raced = False

        def snapshot(self):
            snap = super().snapshot()
            if not self.raced:
                self.raced = True
                recompute(Partitions(TABLE, history_table=HISTORY), (4, 0), check_stale=False,
                          arrive={"job_id": "rival", "kind": "train", "demand": 4})  # fmt: skip
            return snap

    counting = CountingSfn(executions.sfn)
    register_job(Racing(TABLE, history_table=HISTORY), "b", "estimate", 4, capacity=(4, 0),
                 execution_arn=executions.start("b"), sfn=counting)  # fmt: skip
    # THEN b's registration retried after the rival's commit, dropped a, and asked about a once
    assert counting.calls.count(a) == 1
    assert set(_held(make_partitions())) == {"b", "rival"}
    assert [(h["event"], h["job_id"]) for h in make_partitions().history()] == [
        ("arrive", "a"),
        ("arrive", "rival"),
        ("arrive", "b"),
    ]


def test_schedule_wave_grows_when_a_stopped_jobs_share_is_reclaimed(
    executions, job_storage, make_partitions, put_estimate_spec
):
    from fanfit import storage
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave
    from fanfit.jobs.sharing import register_job

    store, records, throughput = job_storage
    parts = make_partitions()
    spec_key = put_estimate_spec(store, storage.spec_key("est-a"))
    # GIVEN a train job holding part of the capacity, and the estimate arriving with its execution
    other = executions.start("other", "train")
    register_job(parts, "other", "train", 3, execution_arn=other)
    mine = executions.start("est-a")
    prepare_stage(store, records, "est-a", spec_key, 0, execution_arn=mine, partitions=parts)
    assert _held(parts) == {"other": 2, "est-a": 2}
    assert parts.get("est-a")["execution_arn"] == mine
    # WHEN the train job is stopped from outside (no TrainFinalize, no Release)
    executions.stop(other)
    # THEN the estimate's next barrier reclaims its share and cuts the wave for 4
    wave0 = schedule_wave(store, records, throughput, "est-a", 0, 0, 1769, 4, partitions=parts)
    entry0 = store.get_json(storage.schedule_key("est-a", 0))["waves"][0]
    assert entry0["partition"]["lambda_concurrency"] == 4
    assert wave0.max_concurrency <= 4
    assert _held(parts) == {"est-a": 4}
    last = parts.history()[-1]
    assert (last["event"], last["job_id"]) == ("reclaim", "est-a")
    assert [(d["job_id"], d["reason"]) for d in last["dropped"]] == [("other", "stale")]


def test_schedule_round_grows_when_a_stopped_jobs_share_is_reclaimed(
    executions, job_storage, make_partitions, put_train_spec
):
    from fanfit import storage
    from fanfit.jobs.sharing import register_job
    from fanfit.jobs.train.init import init_job
    from fanfit.jobs.train.schedule import schedule_round

    store, records, throughput = job_storage
    parts = make_partitions()
    spec_key = put_train_spec(store, storage.spec_key("train-a"))
    functions = {1769: "arn:aws:lambda:us-east-1:123456789012:function:large"}
    # GIVEN an estimate holding 3 of the 4, and the train job (4 workers) arriving
    other = executions.start("other")
    register_job(parts, "other", "estimate", 3, execution_arn=other)
    mine = executions.start("train-a", "train")
    init_job(store, records, "train-a", spec_key, functions, mine, partitions=parts)
    assert _held(parts)["train-a"] == 2 and parts.get("train-a")["execution_arn"] == mine
    r0 = schedule_round(store, throughput, "train-a", 0, partitions=parts)
    assert r0["max_concurrency"] == 2
    # WHEN the estimate's execution is stopped THEN the next round's barrier reads 4
    executions.stop(other)
    r0_again = schedule_round(store, throughput, "train-a", 0, partitions=parts)
    assert r0_again["max_concurrency"] == 4
    assert _held(parts) == {"train-a": 4}
    assert parts.history()[-1]["dropped"][0]["job_id"] == "other"


def test_prepare_handler_records_the_events_execution(
    executions, make_partitions, put_estimate_spec, load_handler, lambda_context
):
    from fanfit import storage

    store = storage.JobStore("fanfit-unit")
    event = json.loads((EVENTS / "prepare.json").read_text())
    put_estimate_spec(store, event["spec_key"], n_rep=1, max_concurrency=2, weight=2.5)
    handler = load_handler("prepare", "fanfit_fn_stale")
    handler(event, lambda_context(memory_limit_in_mb=1024))
    item = make_partitions().get(event["job_id"])
    assert item["execution_arn"] == event["execution_arn"]
    assert item["weight"] == 2.5 and item["demand"] == 2


def test_an_older_prepare_event_without_an_execution_still_registers(partition_stack):
    from fanfit.jobs.documents.events import PrepareEvent, TrainInitEvent

    event = json.loads((EVENTS / "prepare.json").read_text())
    event.pop("execution_arn")
    assert PrepareEvent.model_validate(event).execution_arn == ""
    train = json.loads((EVENTS / "train_init.json").read_text())
    train.pop("execution_arn")
    assert TrainInitEvent.model_validate(train).execution_arn == ""
