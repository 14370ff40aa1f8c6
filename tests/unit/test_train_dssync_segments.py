"""DS-Sync segments: one Map invocation of each worker runs K rounds, synchronised by its group only.

GIVEN a DS-Sync logreg job on moto, WHEN its workers run segments of several rounds in threads (the
Map runs every worker at once; each waits for its round-before group's partials by bounded
polling), THEN its model, losses and round records equal, bit for bit, the same job run one Map
per round; a member that never writes makes the waiting worker fail with
GroupPartialTimeoutError naming the job, round and member; a worker run again skips the rounds it
wrote; TrainSchedule's rule for K (:func:`fanfit.jobs.train.schedule.segment_rounds`) holds case
by case.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from test_train_resume import WORKER_FUNCTIONS, _blobs, _upload

# 4 workers in groups of 2, 7 rounds, uniform batches
SPEC = dict(model="logreg", features="a,b,c", target="y", workers=4, rounds=7, global_batch=64,
            balance="uniform", sync="ds-sync", group_size=2, lr=0.5, seed=6)  # fmt: skip
WAIT_S = 60.0  # a deadline far beyond what the threads need: only a bug reaches it
POLL_S = 0.01


@pytest.fixture
def aws(moto_stack):
    import json

    with moto_stack({"FANFIT_TRAIN_WORKER_FUNCTIONS": json.dumps(WORKER_FUNCTIONS)}):
        yield


class Job:
    """The train state machine's loop by hand, its Map's items run in threads (all at once)."""

    def __init__(self, job_id: str) -> None:
        from fanfit import storage

        self.job_id = job_id
        self.store = storage.JobStore("fanfit-unit")
        self.throughput = storage.ThroughputRecords("fanfit-throughput")
        self.records = storage.JobRecords("fanfit-jobs")
        self.schedules: list[dict] = []

    def init(self, load_handler, lambda_context) -> dict:
        event = {"job_id": self.job_id, "spec_key": f"jobs/{self.job_id}/spec.json",
                 "execution_arn": f"arn:x:{self.job_id}"}  # fmt: skip
        return load_handler("train_init", prefix="fanfit_seg")(event, lambda_context())

    def schedule(self, r: int) -> dict:
        from fanfit.jobs.train.schedule import schedule_round

        planned = schedule_round(self.store, self.throughput, self.job_id, r, records=self.records)
        self.schedules.append(planned)
        return planned

    def shard(self, item: dict, deadline: float | None = None) -> dict:
        from fanfit.jobs.train.shard import train_shard

        return train_shard(self.store, self.job_id, item["round"], item["worker"],
                           memory_mb=1769, rounds=item["rounds"],
                           deadline=deadline or time.time() + WAIT_S, poll_s=POLL_S)  # fmt: skip

    def map(self, items: list[dict]) -> list[dict]:
        with ThreadPoolExecutor(max_workers=len(items)) as pool:
            return list(pool.map(self.shard, items))

    def run(self, progress: dict) -> dict:
        """Rounds from Init's output until done; the result."""
        from fanfit.jobs.train.finalize import finalize_job

        for _ in range(20):
            if not progress["has_next_round"]:
                break
            planned = self.schedule(progress["round"])
            self.map(planned["workers"])
            progress = planned["advance"]
        done = finalize_job(self.store, self.records, self.job_id, progress["round"])
        return self.store.get_json(done["result_key"])


def _partials(store, job_id: str, rounds: int, workers: int) -> dict:
    from fanfit import storage

    out = {}
    for r in range(rounds):
        for i in range(workers):
            arrays = store.get_arrays(storage.train_partial_key(job_id, r, i))
            arrays.pop("__stats__")
            out[(r, i)] = arrays
    return out


def test_segments_equal_one_map_per_round_bit_for_bit(
    aws, load_handler, lambda_context, monkeypatch
):
    from fanfit.jobs.train import schedule

    frame = _blobs(n=200, seed=7)
    # GIVEN the job run one Map per round (a worker timeout too short for two rounds: K = 1)
    monkeypatch.setenv("FANFIT_TRAIN_SHARD_TIMEOUT_S", "0.001")
    _upload("per-round", frame, **SPEC)
    per_round = Job("per-round")
    ref = per_round.run(per_round.init(load_handler, lambda_context))
    assert [p["workers"][0]["rounds"] for p in per_round.schedules] == [1] * 7
    # WHEN the same job runs in segments of at most 3 rounds (the cap lowered from 50)
    monkeypatch.setenv("FANFIT_TRAIN_SHARD_TIMEOUT_S", "900")
    monkeypatch.setattr(schedule, "SEGMENT_CAP", 3)
    _upload("segments", frame, **SPEC)
    seg = Job("segments")
    result = seg.run(seg.init(load_handler, lambda_context))

    # THEN round 0 ran alone, then segments of 3, 3 (the rounds left): three Maps, not seven
    assert [(p["round"], p["workers"][0]["rounds"]) for p in seg.schedules] == [
        (0, 1), (1, 3), (4, 3)
    ]  # fmt: skip
    assert [p["advance"]["round"] for p in seg.schedules] == [1, 4, 7]
    # ... every round has its plan, naming its segment, its groups drawn for that round
    from fanfit.jobs.train.data import read_round_plan
    from fanfit.sched.dssync import dssync_groups

    for r, first in enumerate([0, 1, 1, 1, 4, 4, 4]):
        plan = read_round_plan(seg.store, "segments", r)
        assert (plan.segment_first, plan.segment_rounds) == (first, 1 if r == 0 else 3)
        assert plan.groups == dssync_groups(4, 2, 6, r)
    # ... the model, the losses and every partial are the per-round run's, bit for bit
    assert result["coef"] == ref["coef"] and result["intercept"] == ref["intercept"]
    assert result["loss"] == ref["loss"] and len(result["loss"]) == 7
    a, b = _partials(seg.store, "segments", 7, 4), _partials(seg.store, "per-round", 7, 4)
    for key in a:
        for name in a[key]:
            assert np.array_equal(a[key][name], b[key][name]), (key, name)
    # ... and every round is recorded, each worker once, with the seconds it waited
    assert [r["round"] for r in result["rounds"]] == list(range(7))
    waited = [w.get("wait_s") for r in result["rounds"] for w in r["workers"]]
    assert all(w is None for w in waited[: 2 * 4])  # rounds 0, 1: no wait (first of a segment)
    assert all(w is not None and w >= 0 for w in waited[2 * 4 : 4 * 4])  # rounds 2, 3


def test_a_member_that_never_writes_fails_the_wait_with_a_named_error(
    aws, load_handler, lambda_context
):
    from fanfit.errors import GroupPartialTimeoutError
    from fanfit.jobs.train.data import read_round_plan

    # GIVEN a job whose round 1 is scheduled as a segment (rounds 1-6)
    _upload("stalled", _blobs(n=200, seed=7), **SPEC)
    job = Job("stalled")
    job.init(load_handler, lambda_context)
    job.map(job.schedule(0)["workers"])
    items = job.schedule(1)["workers"]
    assert items[0]["rounds"] == 6
    # WHEN only worker 0 runs (its round-1 group's other member never starts), 0.2 s to wait
    groups = read_round_plan(job.store, "stalled", 1).groups
    partner = next(i for g in groups if 0 in g for i in g if i != 0)
    started = time.perf_counter()
    with pytest.raises(GroupPartialTimeoutError) as err:
        job.shard(items[0], deadline=time.time() + 0.2)
    # THEN it ran round 1 (no wait: the first of the segment), then gave up on round 2 within
    # its deadline, naming the job, the round whose partials it waited for and the member
    assert time.perf_counter() - started < 10
    message = str(err.value)
    assert "job stalled" in message and "round 1" in message and f"[{partner}]" in message
    from fanfit import storage

    assert job.store.exists(storage.train_worker_record_key("stalled", 1, 0))
    assert not job.store.exists(storage.train_worker_record_key("stalled", 2, 0))


def test_a_worker_run_again_skips_the_rounds_it_wrote(aws, load_handler, lambda_context):
    from fanfit import storage

    # GIVEN a job whose segment of rounds 1-6 ran, every worker's partials written ...
    _upload("rerun", _blobs(n=200, seed=7), **SPEC)
    job = Job("rerun")
    job.init(load_handler, lambda_context)
    job.map(job.schedule(0)["workers"])
    items = job.schedule(1)["workers"]
    outs = job.map(items)
    before = _partials(job.store, "rerun", 7, 4)
    # ... and worker 2's last round lost (as if it failed before writing it)
    for key in (storage.train_partial_key("rerun", 6, 2),
                storage.train_worker_record_key("rerun", 6, 2)):  # fmt: skip
        job.store.s3.delete_object(Bucket=job.store.bucket, Key=key)
    writes: list[str] = []
    real = job.store.put_arrays

    def put_arrays(key, arrays):
        writes.append(key)
        return real(key, arrays)

    job.store.put_arrays = put_arrays  # type: ignore[method-assign]
    # WHEN worker 2 runs its segment again, and then worker 1
    again_2 = job.shard(items[2])
    again_1 = job.shard(items[1])
    # THEN worker 2 computed only round 6 again, the same partial bit for bit; worker 1 nothing
    assert writes == [storage.train_partial_key("rerun", 6, 2)]
    after = _partials(job.store, "rerun", 7, 4)
    assert all(np.array_equal(after[(6, 2)][k], v) for k, v in before[(6, 2)].items())
    # ... and a skipped segment answers with its last round's output from its record (the
    # statistics as recorded, before the record's own write was timed)
    same = ("partial_key", "round", "worker", "batch", "compute_s", "started_at", "sync_s")
    assert {k: again_1[k] for k in same} == {k: outs[1][k] for k in same}
    assert again_2["round"] == 6 and again_2["partial_key"] == outs[2]["partial_key"]


@pytest.mark.parametrize(
    ("change", "args", "expected"),
    [
        ({}, dict(round_s=None), 1),  # round 0: nothing measured
        ({"balance": "lb-bsp"}, {}, 1),  # LB-BSP: its batches need each round's measurements
        ({}, dict(n_gpu=1), 1),  # a GPU worker
        ({}, dict(max_concurrency=7), 1),  # partition below the workers: would deadlock
        ({"sync": "bsp"}, {}, 1),  # not DS-Sync
        ({}, {}, 10),  # the rounds left: 10
        ({}, dict(rounds_left=100), 50),  # the cap
        ({}, dict(round_s=100.0), 4),  # 4 x 100 s <= 900 / 2 < 5 x 100 s
        ({}, dict(round_s=1000.0), 1),  # even one round is over half the timeout: still 1
    ],
)
def test_the_segment_length_rule(change, args, expected):
    from fanfit.jobs.documents.train import TrainSpec
    from fanfit.jobs.train.schedule import segment_rounds

    # GIVEN a DS-Sync spec of 8 Lambda workers, all running at once, 10 rounds left, 1 s rounds
    spec = TrainSpec.model_construct(sync="ds-sync", balance="uniform").model_copy(update=change)
    call = dict(n_workers=8, n_gpu=0, max_concurrency=8, rounds_left=10, round_s=1.0,
                timeout_s=900.0) | args  # fmt: skip
    # WHEN TrainSchedule picks K; THEN it is the rule's
    assert segment_rounds(spec, **call) == expected


def test_a_bad_worker_timeout_variable_is_named(monkeypatch):
    from fanfit.errors import InvalidJobError
    from fanfit.jobs.train.schedule import SHARD_TIMEOUT_S, shard_timeout_s

    # GIVEN no variable, then a non-positive one; WHEN read; THEN the default, then a named error
    monkeypatch.delenv("FANFIT_TRAIN_SHARD_TIMEOUT_S", raising=False)
    assert shard_timeout_s() == SHARD_TIMEOUT_S
    monkeypatch.setenv("FANFIT_TRAIN_SHARD_TIMEOUT_S", "0")
    with pytest.raises(InvalidJobError, match="FANFIT_TRAIN_SHARD_TIMEOUT_S"):
        shard_timeout_s()


def test_the_worker_task_passes_the_items_segment_to_the_worker():
    import json
    from pathlib import Path

    from fanfit.jobs.documents.events import TrainShardEvent
    from fanfit.jobs.documents.train import RoundItem
    from fanfit.jobs.states import TrainState

    # GIVEN the train state machine's worker Task inside the workers' Map
    asl = Path(__file__).resolve().parents[2] / "orchestrator" / "train.asl.json"
    states = json.loads(asl.read_text())["States"]
    inner = states[TrainState.RUN_ROUND]["ItemProcessor"]["States"]
    payload = inner[TrainState.WORKER_STEP]["Parameters"]["Payload"]
    # THEN it passes every field of a Map item that TrainShard reads, the segment's rounds too,
    # and the execution (a stop marker of another execution does not stop the worker)
    assert payload["rounds.$"] == "$.rounds"
    assert payload["execution_arn.$"] == "$$.Execution.Id"
    wanted = set(RoundItem.model_fields) & set(TrainShardEvent.model_fields) - {"placement"}
    assert {k.removesuffix(".$") for k in payload} == wanted | {"execution_arn"}
