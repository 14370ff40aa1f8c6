"""Dorm partitions live in the partition table: registration, release, recompute, and barriers.

GIVEN a moto partition table (and bucket, job and throughput tables), WHEN jobs arrive and end
through :mod:`fanfit.jobs.sharing` (as Prepare, TrainInit, Aggregate, TrainFinalize and Release call
it), THEN every running job holds a partition from one consistent Dorm solve, the history records
each recomputation, a recomputation that loses a race retries without losing the other's update,
and Schedule / TrainSchedule never plan past the job's partition, picking up a new one at the next
barrier.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
TABLE = "fanfit-partitions"
HISTORY = "fanfit-partition-history"


def _held(parts) -> dict[str, int]:
    return {j["job_id"]: int(j["partition"]) for j in parts.jobs()}


def test_jobs_arriving_and_ending_recompute_every_partition(make_partitions):
    from fanfit.jobs.sharing import register_job, release_job

    parts = make_partitions()
    # GIVEN capacity 4; WHEN a job of demand 4 arrives alone THEN it holds all 4
    assert register_job(parts, "a", "estimate", 4, capacity=(4, 0)).lambda_concurrency == 4
    # WHEN a second of demand 4 arrives THEN they split the capacity fairly: 2 and 2
    register_job(parts, "b", "train", 4, capacity=(4, 0))
    assert _held(parts) == {"a": 2, "b": 2}
    # WHEN a third (demand 2) arrives THEN all 4 stay in use and everyone holds at least 1
    register_job(parts, "c", "estimate", 2, capacity=(4, 0))
    held = _held(parts)
    assert sum(held.values()) == 4 and min(held.values()) >= 1 and set(held) == {"a", "b", "c"}
    # WHEN b ends THEN its share goes back to a and c, and b holds nothing
    entry = release_job(parts, "b", capacity=(4, 0))
    assert entry is not None and entry["event"] == "end" and entry["version"] == 4
    held = _held(parts)
    assert set(held) == {"a", "c"} and sum(held.values()) == 4
    # AND releasing it again changes nothing
    assert release_job(parts, "b", capacity=(4, 0)) is None
    history = parts.history()
    assert [h["event"] for h in history] == ["arrive", "arrive", "arrive", "end"]
    assert [h["version"] for h in history] == [1, 2, 3, 4]
    assert history[1]["jobs"] == {
        "a": {"kind": "estimate", "demand": 4, "gpu_demand": 0, "partition": 2, "gpus": 0},
        "b": {"kind": "train", "demand": 4, "gpu_demand": 0, "partition": 2, "gpus": 0},
    }
    assert all(0 <= h["utilization"] <= 1 for h in history)


def test_registering_again_with_the_same_demand_changes_nothing_and_a_new_demand_resizes(
    make_partitions,
):
    from fanfit.jobs.sharing import register_job

    parts = make_partitions()
    register_job(parts, "a", "estimate", 3, capacity=(4, 0))
    register_job(parts, "a", "estimate", 3, capacity=(4, 0))  # a retried Prepare
    assert len(parts.history()) == 1
    # WHEN a later stage needs less THEN the partition shrinks to the new demand
    p = register_job(parts, "a", "estimate", 1, capacity=(4, 0))
    assert p.lambda_concurrency == 1 and p.demand == 1
    assert [h["event"] for h in parts.history()] == ["arrive", "resize"]


def test_gpu_demand_is_shared_as_a_second_resource(make_partitions):
    from fanfit.jobs.sharing import register_job

    parts = make_partitions()
    register_job(parts, "g1", "train", 0, gpu_demand=2, capacity=(4, 2))
    p2 = register_job(parts, "g2", "estimate", 2, gpu_demand=2, capacity=(4, 2))
    gpus = {j["job_id"]: j["gpus"] for j in parts.jobs()}
    assert gpus == {"g1": 1, "g2": 1} and p2.lambda_concurrency == 2


def test_a_stale_commit_writes_nothing(make_partitions):
    from fanfit.jobs.sharing import register_job

    parts = make_partitions()
    register_job(parts, "a", "estimate", 2, capacity=(4, 0))
    version, jobs = parts.snapshot()
    register_job(parts, "b", "estimate", 2, capacity=(4, 0))  # commits version 2 meanwhile
    # WHEN a recomputation based on version 1 commits THEN it is refused and nothing changes
    stale = {**jobs[0], "partition": 4}
    assert parts.commit(version, [stale], [], {"version": 2, "event": "stale"}) is False
    assert _held(parts) == {"a": 2, "b": 2} and parts.snapshot()[0] == 2
    assert [h["job_id"] for h in parts.history()] == ["a", "b"]


def test_a_recomputation_overtaken_by_another_retries_and_loses_no_update(make_partitions):
    from fanfit.jobs.sharing import register_job
    from fanfit.storage import Partitions

    class Racing(Partitions):
        """Another job arrives between this recomputation's snapshot and its commit, once."""

        raced = False

        def snapshot(self):
            snap = super().snapshot()
            if not self.raced:
                self.raced = True
                register_job(
                    Partitions(TABLE, history_table=HISTORY), "rival", "train", 4, capacity=(4, 0)
                )
            return snap

    register_job(make_partitions(), "a", "estimate", 4, capacity=(4, 0))
    racing = Racing(TABLE, history_table=HISTORY)
    register_job(racing, "b", "estimate", 4, capacity=(4, 0))
    # THEN both arrivals are in, from one consistent solve after the rival's
    held = _held(make_partitions())
    assert set(held) == {"a", "b", "rival"} and sum(held.values()) == 4
    history = make_partitions().history()
    assert [(h["event"], h["job_id"]) for h in history] == [
        ("arrive", "a"),
        ("arrive", "rival"),
        ("arrive", "b"),
    ]
    assert set(history[-1]["jobs"]) == {"a", "b", "rival"}


def test_release_handler_on_its_sample_event(make_partitions, load_handler, lambda_context):
    from fanfit.jobs.sharing import register_job

    register_job(make_partitions(), "example-job", "estimate", 2)
    register_job(make_partitions(), "other", "train", 4)
    assert _held(make_partitions()) == {"example-job": 2, "other": 2}
    handler = load_handler("release", "fanfit_fn_sharing")
    event = json.loads((EVENTS / "release.json").read_text())
    out = handler(event, lambda_context(memory_limit_in_mb=1024))
    assert out["released"] is True
    assert _held(make_partitions()) == {"other": 4}


def test_schedule_wave_never_exceeds_the_partition_and_resizes_at_the_next_wave(
    job_storage, make_partitions, put_estimate_spec
):
    from fanfit import storage
    from fanfit.jobs.estimate.crossfit import crossfit_shard
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave
    from fanfit.jobs.sharing import register_job, release_job

    store, records, throughput = job_storage
    parts = make_partitions()
    spec_key = put_estimate_spec(store, storage.spec_key("est-a"))
    # GIVEN another job holding 3 of the 4
    register_job(parts, "other", "train", 3)
    # WHEN the estimate arrives (8 units, max_concurrency 4: demand 4) THEN both hold 2
    prepare_stage(store, records, "est-a", spec_key, 0, partitions=parts)
    assert _held(parts) == {"other": 2, "est-a": 2}
    # WHEN wave 0 is cut THEN it runs at most 2 shards at once, and records the partition used
    wave0 = schedule_wave(store, records, throughput, "est-a", 0, 0, 1769, 4, partitions=parts)
    assert 1 <= wave0.max_concurrency <= 2
    entry0 = store.get_json(storage.schedule_key("est-a", 0))["waves"][0]
    assert entry0["partition"]["lambda_concurrency"] == 2
    assert entry0["decision"]["max_concurrency"] <= 2
    for shard in store.get_json(wave0.shards_key):
        crossfit_shard(store, "est-a", storage.plan_key("est-a"), 0, shard, memory_mb=1769)
    # WHEN the other job ends THEN the estimate's partition grows to its demand ...
    release_job(parts, "other")
    assert _held(parts) == {"est-a": 4}
    # ... and its next wave (the next barrier) uses it, without restarting: alone, it asks for
    # (and holds) what its wave runs at once (jobs/estimate/demand.py): the sizer packs the 6 units
    # left from the throughput wave 0 measured, into 3 shards on an idle machine (2 units each) and
    # into fewer when a loaded machine measured a slower start-up, so the partition follows the
    # wave's shards (above the 2 it had whenever the wave runs more than 2 at once)
    wave1 = schedule_wave(store, records, throughput, "est-a", 0, 1, 1769, 4, partitions=parts)
    entry1 = store.get_json(storage.schedule_key("est-a", 0))["waves"][1]
    held1 = entry1["partition"]["lambda_concurrency"]
    n_shards1 = len(store.get_json(wave1.shards_key))
    assert held1 == min(n_shards1, 4) == entry1["partition"]["demand"] == _held(parts)["est-a"]
    assert wave1.max_concurrency == entry1["decision"]["max_concurrency"] == held1
    # the job record's schedule summary carries the partitions too (fanfit status)
    waves = records.get("est-a")["schedule"]["waves"]
    assert [w["partition"]["lambda_concurrency"] for w in waves] == [2, held1]


def test_schedule_round_sets_the_maps_concurrency_from_the_partition(
    job_storage, make_partitions, put_train_spec
):
    from fanfit import storage
    from fanfit.jobs.sharing import register_job, release_job
    from fanfit.jobs.train.init import init_job
    from fanfit.jobs.train.schedule import schedule_round

    store, records, throughput = job_storage
    parts = make_partitions()
    spec_key = put_train_spec(store, storage.spec_key("train-a"))
    functions = {1769: "arn:aws:lambda:us-east-1:123456789012:function:large"}
    # GIVEN capacity 4 and an estimate holding 3 of it, WHEN the train job (4 workers) arrives
    register_job(parts, "other", "estimate", 3)
    init_job(store, records, "train-a", spec_key, functions, partitions=parts)
    held = _held(parts)
    assert held["train-a"] == 2 and sum(held.values()) == 4
    # THEN round 0 runs at most 2 workers at once (the Map's MaxConcurrencyPath), all 4 of them
    r0 = schedule_round(store, throughput, "train-a", 0, partitions=parts)
    assert r0["max_concurrency"] == 2 and len(r0["workers"]) == 4
    plan0 = store.get_json(storage.train_round_plan_key("train-a", 0))
    assert plan0["partition"]["lambda_concurrency"] == 2 and plan0["max_concurrency"] == 2
    # WHEN the estimate ends THEN the next barrier reads the larger partition
    release_job(parts, "other")
    r0_again = schedule_round(store, throughput, "train-a", 0, partitions=parts)
    assert r0_again["max_concurrency"] == 4
    # AND the batches (hence the model) do not depend on the partition
    plan0_again = store.get_json(storage.train_round_plan_key("train-a", 0))
    assert plan0_again["batches"] == plan0["batches"]
    # without a partition table every worker runs at once, as before
    assert schedule_round(store, throughput, "train-a", 0)["max_concurrency"] == 4


def test_registered_completion_figures_give_the_partition_table_dorm_policys_pass(make_partitions):
    from fanfit.errors import InvalidJobError
    from fanfit.jobs.sharing import register_job
    from fanfit.sched.completion import dorm_policy

    parts = make_partitions()
    # GIVEN three estimates of demand 12 on 12 slots, the third on the critical path
    figures = {"a": (1.0, 1.0), "b": (50.0, 1.0), "c": (100.0, 100.0)}
    for job_id in ("a", "b"):
        remaining, critical = figures[job_id]
        register_job(parts, job_id, "estimate", 12, capacity=(12, 0), remaining_s=remaining,
                     critical_s=critical)  # fmt: skip
    # WHEN the third arrives without figures THEN Dorm's optimizer alone cuts them: 4, 4, 4
    register_job(parts, "c", "estimate", 12, capacity=(12, 0))
    assert _held(parts) == {"a": 4, "b": 4, "c": 4}
    # WHEN it re-registers with its figures (a "resize") THEN the table holds dorm_policy's
    # completion pass, the partitions the benchmark simulates
    register_job(parts, "c", "estimate", 12, capacity=(12, 0), remaining_s=100.0, critical_s=100.0)
    expected = dorm_policy(
        [[12, 0]] * 3, [12, 0], remaining_s=[1, 50, 100], critical_s=[1, 1, 100]
    ).partitions[:, 0]
    assert _held(parts) == dict(zip("abc", expected.tolist())) == {"a": 4, "b": 3, "c": 5}
    assert parts.history()[-1]["event"] == "resize"
    assert parts.get("c")["remaining_s"] == 100.0
    # ... and a figure that is not a finite number >= 0 is refused by name
    with pytest.raises(InvalidJobError, match="remaining_s"):
        register_job(parts, "d", "estimate", 2, capacity=(12, 0), remaining_s=-1.0, critical_s=1.0)


def test_the_history_keeps_the_last_100_recomputations_outside_the_partition_table(
    make_partitions, monkeypatch
):
    import boto3

    from fanfit.jobs.sharing import register_job
    from fanfit.storage import tables

    # GIVEN a history limit of 5 and 8 recomputations of 2 jobs
    monkeypatch.setattr(tables, "PARTITIONS_HISTORY_LIMIT", 5)
    parts = make_partitions()
    for k in range(8):
        register_job(parts, "ab"[k % 2], "estimate", 1 + k, capacity=(4, 0))
    # THEN the history holds the last 5, oldest first, one item each in the history table
    history = parts.history()
    assert [h["version"] for h in history] == [4, 5, 6, 7, 8]
    assert [h["jobs"][h["job_id"]]["demand"] for h in history] == [4, 5, 6, 7, 8]
    ddb = boto3.client("dynamodb")
    assert ddb.scan(TableName=HISTORY)["Count"] == 5
    # ... and the partition table holds only the epoch (its version, no history) and the 2 jobs:
    # what a recomputation reads and writes does not grow with the history
    items = ddb.scan(TableName=TABLE)["Items"]
    epoch = next(i for i in items if i["job_id"]["S"] == "#epoch")
    assert len(items) == 3 and set(epoch) == {"job_id", "version", "updated_at"}
    assert epoch["version"]["N"] == "8"
    # ... and without a history table the partitions work and no history is kept
    bare = tables.Partitions(TABLE)
    register_job(bare, "c", "estimate", 1, capacity=(4, 0))
    assert bare.history() == [] and {j["job_id"] for j in bare.jobs()} == {"a", "b", "c"}
    # (the history is the last 5 versions, 5 to 9, of which 9 was not recorded)
    assert [h["version"] for h in parts.history()] == [5, 6, 7, 8]


def test_a_history_write_that_fails_is_logged_and_the_partitions_stay_committed(
    make_partitions, monkeypatch, caplog
):
    from botocore.exceptions import ClientError

    from fanfit.jobs.sharing import register_job

    # GIVEN the history table refuses writes (throttled)
    parts = make_partitions()
    real_put = parts.ddb.put_item

    def put_item(**kwargs):
        if kwargs["TableName"] == HISTORY:
            error = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}}
            raise ClientError(error, "PutItem")
        return real_put(**kwargs)

    monkeypatch.setattr(parts.ddb, "put_item", put_item)
    # WHEN a job registers THEN it holds its partition, the history has no entry, and a warning says so
    with caplog.at_level("WARNING"):
        p = register_job(parts, "a", "estimate", 3, capacity=(4, 0))
    assert p.lambda_concurrency == 3 and parts.history() == []
    assert "partition history version 1 not written" in caplog.text
