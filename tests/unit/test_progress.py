"""Live progress (:mod:`fanfit.progress`): snapshots from a job's records, their lines and bar, and
the bounded polling of ``wait(progress=...)``.

GIVEN hand-made records (job documents, or objects in a moto S3 bucket as the functions write them)
and a fake Step Functions client, WHEN a snapshot is taken or a job is waited on with progress,
THEN the counts, the rate-based time left and the running cost follow from the records, plain
lines go to stderr when it is not a terminal, ``--quiet`` prints none, and the polling ends after a
bounded number of polls whatever the clock does.
"""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import boto3
import moto
import numpy as np
import pytest

from fanfit import errors, progress, storage
from fanfit.client import EstimateJob, build_spec
from fanfit.client.train import TrainJob
from fanfit.cost import job_cost
from fanfit.jobs.documents.estimate import ShardStats, StageSchedule
from fanfit.progress import (
    JobProgress,
    PlainProgressRenderer,
    ProgressTracker,
    RichProgressRenderer,
    estimate_progress,
    eta_seconds,
    format_line,
    make_renderer,
    running_cost_usd,
    train_progress,
)

BUCKET = "fanfit-progress-unit"
JOB = "est-20250101-120000-7c1e2f3a"
START = 1_700_000_000.0


# ----------------------------------------------------------------------------------- fakes


class FakeSfn:
    """describe_execution and get_execution_history of one execution, scripted."""

    def __init__(self, statuses: list[str] | None = None, events: list[dict] | None = None):
        self.statuses = list(statuses or ["RUNNING"])
        self.events = list(events or [])
        self.describe_calls = 0
        self.history_calls: list[dict[str, Any]] = []

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        i = min(self.describe_calls, len(self.statuses) - 1)
        self.describe_calls += 1
        desc = {"status": self.statuses[i], "startDate": datetime.fromtimestamp(START, UTC)}
        if desc["status"] != "RUNNING":
            desc["stopDate"] = datetime.fromtimestamp(START + 20.0, UTC)
        if desc["status"] == "FAILED":
            desc.update(error="States.TaskFailed", cause="boom")
        return desc

    def get_execution_history(self, **kwargs: Any) -> dict[str, Any]:
        self.history_calls.append(kwargs)
        events = sorted(self.events, key=lambda e: e["id"], reverse=bool(kwargs["reverseOrder"]))
        return {"events": events[: kwargs.get("maxResults", 1000)]}


class FakeTime:
    """A clock that moves only when slept on (or never, with ``frozen``)."""

    def __init__(self, frozen: bool = False) -> None:
        self.now, self.frozen, self.sleeps = 0.0, frozen, 0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return START + self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if not self.frozen:
            self.now += seconds


def _entered(i: int, name: str) -> dict[str, Any]:
    return {
        "id": i,
        "type": "TaskStateEntered",
        "timestamp": datetime.fromtimestamp(START + i, UTC),
        "stateEnteredEventDetails": {"name": name},
    }


@pytest.fixture
def s3(monkeypatch):
    """A moto S3 bucket (no other AWS)."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _client(s3: Any, sfn: FakeSfn) -> Any:
    return SimpleNamespace(store=storage.JobStore(BUCKET, s3), sfn=sfn)


DATA_KEY = "data/" + "0" * 64 + ".npz"


def _stats(shard_id: str, seconds: float, memory_mb: int = 1769, **extra: Any) -> dict[str, Any]:
    """A shard's ``__stats__`` as CrossFit writes them (a valid ShardStats)."""
    return {"shard_id": shard_id, "stage": 0, "n_units": 1, "unit_fit_s": {},
            "started_at": START, "fit_s": seconds, "io_s": 0.0, "ended_at": START + seconds,
            "memory_mb": memory_mb, "placement": "lambda", "resource": f"lambda-{memory_mb}",
            "peak_rss_mb": 100.0, "cold_start": False, **extra}  # fmt: skip


def _wave(
    wave: int,
    shards: list[tuple[str, list[str]]],
    started_at: float = START,
    ended_at: float = START + 0.5,
    memory_mb: int = 512,
) -> dict[str, Any]:
    """A wave of ``stages/0/schedule.json`` as Schedule writes it (a valid WaveEntry)."""
    return {"stage": 0, "wave": wave,
            "decision": {"policy": "auto", "n_shards": len(shards), "max_concurrency": 8},
            "resource": "lambda-1769", "predicted_samples_per_s": {}, "startup_s": 0.0,
            "map_runs_prefix": f"jobs/x/stages/0/waves/{wave}/map-runs/", "started_at": started_at,
            "ended_at": ended_at, "memory_mb": memory_mb, "peak_rss_mb": 90.0, "n_gpu_shards": 0,
            "shards": [{"shard_id": i, "units": u} for i, u in shards]}  # fmt: skip


def _write_estimate(store: storage.JobStore, job_id: str, n_obs_per_unit: int = 10) -> dict:
    """A PLR job of 3 folds x 2 repetitions x 2 learners = 12 fits: a probe wave of 2 shards
    (one fit each), a second wave of 5 shards (2 fits each); shards 00000, 00001, 00002 done."""
    spec, _ = build_spec(y="y", d="d", x=["x0", "x1"], z=None, model="plr", score=None,
                         learners={"ml_l": "LassoCV", "ml_m": "LassoCV"}, n_folds=3, n_rep=2,
                         seed=0)  # fmt: skip
    store.put_json(storage.spec_key(job_id),
                   {"kind": "estimate", "dml": spec.to_dict(), "data_key": DATA_KEY})  # fmt: skip
    units = [f"u{i}" for i in range(12)]
    waves = [
        _wave(0, [("00000", units[:1]), ("00001", units[1:2])]),
        _wave(1, [(f"{2 + i:05d}", units[2 + 2 * i: 4 + 2 * i]) for i in range(5)],
              START + 3, START + 3.5),
    ]  # fmt: skip
    schedule = {"waves": waves}
    store.put_json(storage.schedule_key(job_id, 0), schedule)
    store.put_json(storage.prepare_record_key(job_id, 0),
                   {"started_at": START, "ended_at": START + 1.0, "memory_mb": 512, "n_units": 12,
                    "peak_rss_mb": 80.0})  # fmt: skip
    rng = np.random.default_rng(0)
    stats = [_stats("00000", 2.0), _stats("00001", 3.0), _stats("00002", 4.0, 3008)]
    for s in stats:
        arrays = {f"s0-t0-r0-f{i}-ml_l": rng.normal(size=n_obs_per_unit) for i in range(2)}
        arrays["__stats__"] = np.array(json.dumps(s))
        store.put_arrays(storage.preds_key(job_id, 0, s["shard_id"]), arrays)
    return {"schedule": schedule, "stats": stats,
            "steps": [{**waves[0]}, {**waves[1]},
                      {"started_at": START, "ended_at": START + 1.0, "memory_mb": 512}]}  # fmt: skip


# ------------------------------------------------------------------------------ pure parts


def test_eta_is_elapsed_times_work_left_over_work_done() -> None:
    # GIVEN 36 of 90 fits done in 8.1 s, THEN 54 more take 8.1 * 54 / 36 = 12.15 s at that rate
    assert eta_seconds(8.1, 36, 90) == pytest.approx(12.15)
    # AND nothing done yet, or no total, gives no estimate; all done gives 0
    assert eta_seconds(5.0, 0, 90) is None
    assert eta_seconds(5.0, 3, 0) is None
    assert eta_seconds(float("nan"), 3, 10) is None
    assert eta_seconds(5.0, 90, 90) == 0.0
    # AND a snapshot's ETA is that of the unit its bar counts (fits when their total is known)
    p = JobProgress("estimate", JOB, elapsed_s=8.1, shards_done=12, shards_total=30,
                    fits_done=36, fits_total=90)  # fmt: skip
    assert p.eta_s == pytest.approx(12.15)
    assert (p.done, p.total, p.fraction) == (36, 90, pytest.approx(0.4))
    assert JobProgress("estimate", JOB, status="SUCCEEDED", elapsed_s=9.0).eta_s == 0.0


def test_estimate_snapshot_counts_the_shards_of_every_wave_of_the_schedule() -> None:
    # GIVEN a probe wave of 2 one-fit shards and a wave of 3 two-fit shards, 3 shards written
    schedule = StageSchedule.parse({"waves": [
        _wave(0, [("00000", ["a"]), ("00001", ["b"])]),
        _wave(1, [(f"{i:05d}", ["c", "d"]) for i in (2, 3, 4)]),
    ]})  # fmt: skip
    # WHEN the snapshot is computed
    p = estimate_progress(JOB, {0: schedule}, {0: {"00000", "00002", "99999"}}, fits_total=8,
                          elapsed_s=4.0, phase="cross-fitting", cost_usd=0.001)  # fmt: skip
    # THEN shards done / total and fits done / total follow (an unscheduled id is ignored)
    assert (p.shards_done, p.shards_total, p.fits_done, p.fits_total) == (2, 5, 3, 8)
    assert p.eta_s == pytest.approx(4.0 * 5 / 3)
    # AND a stage not scheduled yet counts nothing; a succeeded job is complete
    assert estimate_progress(JOB, {}, {}, fits_total=8).shards_total == 0
    done = estimate_progress(JOB, {0: schedule}, {0: set()}, fits_total=8, status="SUCCEEDED")
    assert (done.shards_done, done.fits_done) == (5, 8)


def test_train_snapshot_counts_rounds_and_ends_at_the_rounds_run() -> None:
    p = train_progress("train-1", 3, 10, elapsed_s=6.0)
    assert (p.done, p.total, p.eta_s) == (3, 10, pytest.approx(14.0))
    # GIVEN a K-Means job that converged after 4 of 11 rounds, WHEN it succeeded, THEN 4/4
    done = train_progress("train-1", 4, 11, status="SUCCEEDED")
    assert (done.rounds_done, done.rounds_total, done.fraction) == (4, 4, 1.0)


def test_plain_line_text() -> None:
    p = JobProgress("estimate", JOB, elapsed_s=8.1, shards_done=12, shards_total=30,
                    fits_done=36, fits_total=90, cost_usd=0.00042)  # fmt: skip
    assert format_line(p) == (
        "[fanfit] estimate 7c1e…: shards 12/30 (36/90 fits), 8.1 s elapsed, ~12 s left, $0.0004"
    )
    # AND nothing done yet: no time left shown; no cost known: none shown; a chosen id is whole
    early = JobProgress("train", "my-job", elapsed_s=0.54, rounds_total=10)
    assert format_line(early) == "[fanfit] train my-job: rounds 0/10, 0.5 s elapsed"
    # AND an ended job shows its status; long waits in minutes
    ended = JobProgress("train", "my-job", status="FAILED", elapsed_s=12.0, rounds_done=2,
                        rounds_total=10, cost_usd=0.0)  # fmt: skip
    assert (
        format_line(ended) == "[fanfit] train my-job: rounds 2/10, 12.0 s elapsed, failed, $0.0000"
    )
    slow = JobProgress("train", "j", elapsed_s=300.0, rounds_done=1, rounds_total=3)
    assert "~10 min left" in format_line(slow)


def test_running_cost_prices_lambda_and_batch_records_with_job_cost() -> None:
    records = [_stats("0", 2.0), _stats("1", 3.0, 3008),
               {**_stats("2", 60.0), "placement": "gpu", "resource": "gpu:g5.xlarge",
                "instance_type": "g5.xlarge"}]  # fmt: skip
    expected = job_cost(
        [{"function": "CrossFit", "memory_mb": 1769, "duration_s": 2.0},
         {"function": "CrossFit", "memory_mb": 3008, "duration_s": 3.0}],
        7, [{"instance_s": 60.0, "instance_type": "g5.xlarge"}],
    ).total_usd  # fmt: skip
    assert running_cost_usd(records, transitions=7) == pytest.approx(expected)
    assert expected > 0


# ----------------------------------------------------------------- snapshots from a moto S3 bucket


def test_estimate_tracker_reads_schedules_shards_and_history_incrementally(s3) -> None:
    # GIVEN a job half-way through its second wave, and a history of 3 events
    store = storage.JobStore(BUCKET, s3)
    written = _write_estimate(store, JOB)
    sfn = FakeSfn(events=[_entered(1, "Validate the job and write its plan"),
                          _entered(2, "Size the first wave of shards from measured throughput"),
                          _entered(3, "Cross-fit every shard of the wave")])  # fmt: skip
    job = SimpleNamespace(client=_client(s3, sfn), job_id=JOB, execution_arn="arn:x")
    tracker = ProgressTracker(job, "estimate", now=lambda: START + 8.0)
    # WHEN a snapshot is taken
    p = tracker.snapshot()
    # THEN 3 of 7 shards (4 of 12 fits) are done, 8 s in, in the cross-fitting phase
    assert (p.shards_done, p.shards_total, p.fits_done, p.fits_total) == (3, 7, 4, 12)
    assert (p.elapsed_s, p.phase, p.status) == (8.0, "cross-fitting", "RUNNING")
    assert p.eta_s == pytest.approx(8.0 * 8 / 4)
    # AND the cost prices the done shards' statistics, the Schedule and Prepare steps, and the
    # 3 state transitions read so far
    steps = [{**s, "function": "Step"} for s in written["steps"]]
    assert p.cost_usd == pytest.approx(running_cost_usd([*written["stats"], *steps], 3))
    # WHEN a shard more is written and two events more happen
    store.put_arrays(storage.preds_key(JOB, 0, "00003"),
                     {"x": np.zeros(3), "__stats__": np.array(json.dumps(_stats("00003", 1.0)))})  # fmt: skip
    sfn.events += [_entered(4, "Record the wave's throughput and size the next wave"),
                   _entered(5, "Aggregate the predictions into the estimate")]  # fmt: skip
    p2 = tracker.snapshot()
    # THEN the new shard counts, and only the new events were kept (newest first, one page)
    assert (p2.shards_done, p2.fits_done, p2.phase) == (4, 6, "aggregating")
    assert [e["id"] for e in tracker.events] == [1, 2, 3, 4, 5]
    assert all(c["reverseOrder"] for c in sfn.history_calls)
    assert p2.cost_usd > p.cost_usd


def test_an_unchanged_schedule_is_not_downloaded_again(s3) -> None:
    # GIVEN a tracker that has read the schedule once
    store = storage.JobStore(BUCKET, s3)
    _write_estimate(store, JOB)
    job = SimpleNamespace(client=_client(s3, FakeSfn()), job_id=JOB, execution_arn="arn:x")
    tracker = ProgressTracker(job, "estimate", now=lambda: START + 8.0)
    tracker.snapshot()
    bodies: list[str] = []
    real_get = s3.get_object

    def get_object(**kwargs: Any) -> Any:
        out = real_get(**kwargs)
        bodies.append(kwargs["Key"])
        return out

    tracker.store.s3 = SimpleNamespace(get_object=get_object, get_paginator=s3.get_paginator)
    # WHEN snapshots are taken and the schedule does not change, THEN it is not downloaded
    assert tracker.snapshot().shards_total == 7
    assert bodies == []
    # AND when the scheduler adds a wave, THEN the new schedule is read
    schedule = store.get_json(storage.schedule_key(JOB, 0))
    schedule["waves"].append(_wave(2, [("00007", [])]))
    store.put_json(storage.schedule_key(JOB, 0), schedule)
    assert tracker.snapshot().shards_total == 8
    assert bodies == [storage.schedule_key(JOB, 0)]


def test_shard_statistics_are_read_from_the_tail_of_a_large_object(s3) -> None:
    # GIVEN a shard's predictions object of about 800 KB
    store = storage.JobStore(BUCKET, s3)
    key = storage.preds_key(JOB, 0, "00000")
    stats = _stats("00000", 2.5)
    store.put_arrays(key, {"s0-t0-r0-f0-ml_l": np.zeros(100_000),
                           "__stats__": np.array(json.dumps(stats))})  # fmt: skip
    size = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
    ranges: list[str] = []
    real_get = s3.get_object

    def get_object(**kwargs: Any) -> Any:
        ranges.append(kwargs.get("Range", "whole"))
        return real_get(**kwargs)

    counting = SimpleNamespace(get_object=get_object)
    # WHEN its statistics are read
    got = progress.read_shard_stats(counting, BUCKET, key, size)
    # THEN they are the stored ones, from one ranged GET of the last 64 KB
    assert got == ShardStats.parse(stats)
    assert ranges == [f"bytes={size - 65536}-{size - 1}"]


def test_train_tracker_counts_round_records_and_prices_their_workers(s3) -> None:
    store = storage.JobStore(BUCKET, s3)
    job_id = "train-20250101-120000-00aa11bb"
    store.put_json(storage.spec_key(job_id), {"kind": "train", "data_key": DATA_KEY,
                   "spec": {"model": "kmeans", "features": ["a", "b"], "n_clusters": 2,
                            "rounds": 4}})  # fmt: skip
    workers = [{"worker": i, "memory_mb": 1024, "resource": "lambda-1024", "batch": 10,
                "compute_s": 1.0 + i, "io_s": 0.0, "samples_per_s": 10 / (1.0 + i),
                "predicted_samples_per_s": 10.0, "cold_start": False, "started_at": START,
                "ended_at": START + 1.0 + i, "peak_rss_mb": 90.0} for i in range(2)]  # fmt: skip
    for r in range(2):
        store.put_json(storage.train_round_key(job_id, r),
                       {"round": r, "phase": "train", "workers": workers, "round_s": 2.0,
                        "idle_fraction": 0.25, "span_s": 2.0, "groups": [[0, 1]],
                        "prediction_source": "job", "inertia": 1.0})  # fmt: skip
    # a worker's partial is not a round record
    store.put_arrays(storage.train_partial_key(job_id, 2, 0), {"x": np.zeros(2)})
    job = SimpleNamespace(client=_client(s3, FakeSfn()), job_id=job_id, execution_arn="arn:x")
    p = ProgressTracker(job, "train", now=lambda: START + 10.0).snapshot()
    # THEN 2 rounds of 4 + the K-Means final round; cost: 2 rounds x 2 workers
    assert (p.rounds_done, p.rounds_total, p.elapsed_s) == (2, 5, 10.0)
    assert p.cost_usd == pytest.approx(running_cost_usd(workers * 2))
    assert format_line(p) == (
        f"[fanfit] train 00aa…: rounds 2/5, 10.0 s elapsed, ~15 s left, ${p.cost_usd:.4f}"
    )


def test_a_read_error_keeps_the_last_counts(s3) -> None:
    store = storage.JobStore(BUCKET, s3)
    _write_estimate(store, JOB)
    sfn = FakeSfn()
    job = SimpleNamespace(client=_client(s3, sfn), job_id=JOB, execution_arn="arn:x")
    tracker = ProgressTracker(job, "estimate", now=lambda: START + 5.0)
    first = tracker.snapshot()

    def denied(**kwargs: Any) -> Any:
        raise RuntimeError("AccessDenied")

    sfn.get_execution_history = denied  # type: ignore[method-assign]
    tracker.now = lambda: START + 6.0
    again = tracker.snapshot()
    assert (again.shards_done, again.elapsed_s) == (first.shards_done, 6.0)


# ------------------------------------------------------------------------------------ renderers


def test_non_tty_stderr_falls_back_to_plain_lines(monkeypatch) -> None:
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS"):
        monkeypatch.delenv(var, raising=False)

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(make_renderer(True, io.StringIO()), PlainProgressRenderer)
    assert isinstance(make_renderer(True, Tty()), RichProgressRenderer)
    assert isinstance(make_renderer("plain", Tty()), PlainProgressRenderer)
    assert make_renderer(False) is None and make_renderer(None) is None
    with pytest.raises(ValueError, match="progress must be"):
        make_renderer("loud")


def test_plain_renderer_prints_one_line_per_change(capsys) -> None:
    # GIVEN the default stream (stderr, captured: not a terminal)
    renderer = make_renderer(True)
    assert isinstance(renderer, PlainProgressRenderer)
    base = JobProgress("train", "j", elapsed_s=1.0, rounds_done=1, rounds_total=3)
    # WHEN the same counts come three times (only the clock moves), then a round more, then the end
    for t in (1.0, 2.0, 3.0):
        renderer.update(JobProgress("train", "j", elapsed_s=t, rounds_done=1, rounds_total=3))
    renderer.update(JobProgress("train", "j", elapsed_s=4.0, rounds_done=2, rounds_total=3))
    renderer.update(JobProgress("train", "j", status="SUCCEEDED", elapsed_s=5.0, rounds_done=3,
                                rounds_total=3))  # fmt: skip
    renderer.close()
    out, err = capsys.readouterr()
    # THEN three lines on stderr, none on stdout
    assert out == ""
    assert err.splitlines() == [
        format_line(base),
        "[fanfit] train j: rounds 2/3, 4.0 s elapsed, ~2 s left",
        "[fanfit] train j: rounds 3/3, 5.0 s elapsed, succeeded",
    ]


def test_rich_renderer_draws_the_counts() -> None:
    from rich.console import Console

    buf = io.StringIO()
    renderer = RichProgressRenderer(Console(file=buf, force_terminal=True, width=160))
    renderer.update(JobProgress("estimate", JOB, elapsed_s=8.1, phase="cross-fitting",
                                shards_done=12, shards_total=30, fits_done=36, fits_total=90,
                                cost_usd=0.00042))  # fmt: skip
    renderer.close()
    text = buf.getvalue()
    for part in ("estimate 7c1e… cross-fitting", "shards 12/30 (36/90 fits)", "8.1 s",
                 "~12 s left", "$0.0004"):  # fmt: skip
        assert part in text


# ------------------------------------------------------------------------- wait() with progress


def test_wait_with_progress_polls_a_bounded_number_of_times(s3, monkeypatch, capsys) -> None:
    import fanfit.client.jobs

    store = storage.JobStore(BUCKET, s3)
    _write_estimate(store, JOB)
    clock = FakeTime()
    monkeypatch.setattr(fanfit.client.jobs, "time", clock)
    monkeypatch.setattr(progress.readers, "time", clock)
    # GIVEN an execution that runs for 12 polls, then succeeds
    sfn = FakeSfn(statuses=["RUNNING"] * 12 + ["SUCCEEDED"])
    job = EstimateJob(_client(s3, sfn), JOB, "arn:x")  # type: ignore[arg-type]
    # WHEN it is waited on with progress (stderr captured: plain lines)
    assert job.wait(timeout=60.0, progress=True) is job
    # THEN it polled 13 times, slept 12 times at most 1 s each, and showed at most one snapshot a
    # second, ending with the success line
    assert (sfn.describe_calls, clock.sleeps) == (13, 12)
    assert len(sfn.history_calls) <= clock.now / progress.PROGRESS_INTERVAL_S + 2
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith("[fanfit] estimate 7c1e…: shards ") for line in lines)
    assert "shards 7/7 (12/12 fits), 20.0 s elapsed, succeeded, $" in lines[-1]


def test_wait_ends_after_a_bounded_number_of_polls_even_with_a_stopped_clock(
    s3, monkeypatch, capsys
) -> None:
    import fanfit.client.jobs

    clock = FakeTime(frozen=True)
    monkeypatch.setattr(fanfit.client.jobs, "time", clock)
    sfn = FakeSfn(statuses=["RUNNING"])
    job = TrainJob(_client(s3, sfn), "train-x", "arn:x")  # type: ignore[arg-type]
    # WHEN the clock never moves, THEN the loop still ends: at most timeout / poll + 1 polls
    with pytest.raises(errors.JobFailedError, match="did not end within 5 s"):
        job.wait(timeout=5.0, poll=0.5, progress="plain")
    assert sfn.describe_calls == 11
    assert "[fanfit] train train-x: rounds 0/?" in capsys.readouterr().err


def test_wait_with_progress_still_raises_the_failure(s3, monkeypatch, capsys) -> None:
    import fanfit.client.jobs

    monkeypatch.setattr(fanfit.client.jobs, "time", FakeTime())
    sfn = FakeSfn(statuses=["RUNNING", "FAILED"])
    job = TrainJob(_client(s3, sfn), "train-x", "arn:x")  # type: ignore[arg-type]
    with pytest.raises(errors.JobFailedError, match="ended FAILED: States.TaskFailed: boom"):
        job.wait(timeout=30.0, progress="plain")
    assert capsys.readouterr().err.splitlines()[-1].endswith(", failed, $0.0000")


def test_wait_without_progress_prints_nothing(s3, monkeypatch, capsys) -> None:
    import fanfit.client.jobs

    monkeypatch.setattr(fanfit.client.jobs, "time", FakeTime())
    sfn = FakeSfn(statuses=["RUNNING", "RUNNING", "SUCCEEDED"])
    EstimateJob(_client(s3, sfn), JOB, "arn:x").wait(timeout=30.0)  # type: ignore[arg-type]
    assert capsys.readouterr() == ("", "") and sfn.history_calls == []


# ---------------------------------------------------------------------------------------- the CLI


class _FakeResult:
    def to_dict(self) -> dict[str, Any]:
        return {"coef": {"d": 0.5}}


class _FakeJob:
    """What ``_client`` hands the command: result() shows one snapshot as the real wait would."""

    job_id, execution_arn = JOB, "arn:x"
    seen: list[Any] = []

    def result(self, timeout: float, progress: Any = False) -> _FakeResult:
        _FakeJob.seen.append(progress)
        renderer = make_renderer(progress)
        if renderer is not None:
            renderer.update(JobProgress("estimate", JOB, elapsed_s=1.0, shards_total=4))
            renderer.close()
        return _FakeResult()


@pytest.mark.parametrize("quiet", [False, True])
def test_cli_estimate_progress_and_quiet(monkeypatch, capsys, quiet: bool) -> None:
    from fanfit import cli

    @contextlib.contextmanager
    def fake_client(args: Any):
        yield SimpleNamespace(submit_estimate=lambda data, **options: _FakeJob())

    monkeypatch.setattr(cli, "_client", fake_client)
    _FakeJob.seen = []
    argv = ["estimate", "--data", "x.csv", "--y", "y", "--d", "d", "--x", "x0,x1",
            "--ml-l", "LassoCV", "--ml-m", "LassoCV", "--output", "json"]  # fmt: skip
    # WHEN run with or without --quiet (stderr captured: not a terminal)
    assert cli.main([*argv, "--quiet"] if quiet else argv) == 0
    out, err = capsys.readouterr()
    # THEN the result on stdout is the same; progress lines on stderr only without --quiet
    assert json.loads(out) == {"coef": {"d": 0.5}}
    assert _FakeJob.seen == [not quiet]
    progress_lines = [line for line in err.splitlines() if line.startswith("[fanfit]")]
    assert progress_lines == (
        [] if quiet else ["[fanfit] estimate 7c1e…: shards 0/4, 1.0 s elapsed"]
    )


def test_cli_train_takes_quiet() -> None:
    from fanfit.cli import build_parser

    args = build_parser().parse_args(["train", "--data", "x.csv", "--model", "kmeans",
                                      "--features", "a", "--quiet"])  # fmt: skip
    assert args.quiet is True
