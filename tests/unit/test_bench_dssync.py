"""benchmarks/dssync.py reads a round's time, its reduce and its profile from the execution history.

GIVEN a synthetic history of one DS-Sync-shaped execution (two rounds: schedule, workers' Map with
two worker Tasks, the Pass, the Choice), WHEN :func:`round_timings` and :func:`profile` read it,
THEN each round's seconds are the differences of the named states' events and the profile the
medians over rounds 1.. (round 0 left out).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from bench_module import load_benchmark


def _bench():
    return load_benchmark("dssync")


class _Sfn:
    """get_execution_history's paginator over a fixed list of events."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events

    def get_paginator(self, name: str):
        assert name == "get_execution_history"
        return self

    def paginate(self, executionArn: str):  # noqa: N803 (boto3's name)
        return [{"events": self.events}]


def _event(kind: str, name: str, t: float) -> dict:
    key = "stateEnteredEventDetails" if kind.endswith("Entered") else "stateExitedEventDetails"
    at = datetime(2026, 11, 25, tzinfo=UTC) + timedelta(seconds=t)
    return {"type": kind, "timestamp": at, key: {"name": name}}


def _round(t0: float, worker_s: float) -> list[dict]:
    from fanfit.jobs.states import TrainState as S

    return [
        _event("TaskStateEntered", S.SCHEDULE_ROUND, t0),
        _event("TaskStateExited", S.SCHEDULE_ROUND, t0 + 0.5),
        _event("MapStateEntered", S.RUN_ROUND, t0 + 0.5),
        _event("TaskStateEntered", S.WORKER_STEP, t0 + 0.6),
        _event("TaskStateEntered", S.WORKER_STEP, t0 + 0.7),
        _event("TaskStateExited", S.WORKER_STEP, t0 + 0.6 + worker_s),
        _event("TaskStateExited", S.WORKER_STEP, t0 + 0.7 + worker_s),
        _event("MapStateExited", S.RUN_ROUND, t0 + 3.0),
        _event("ChoiceStateEntered", S.IS_REDUCE_NEEDED, t0 + 3.0),
        _event("PassStateEntered", S.ADVANCE_ROUND, t0 + 3.05),
        _event("ChoiceStateEntered", S.IS_ROUND_LEFT, t0 + 3.1),
    ]


def test_round_timings_and_profile_read_the_named_states_of_the_history():
    bench = _bench()
    # GIVEN two rounds, the second with 2 s worker Tasks, and the workers' records of each
    sfn = _Sfn(_round(0.0, 1.0) + _round(10.0, 2.0))
    worker = {"started_at": 0.0, "ended_at": 1.5, "io_s": 0.8, "compute_s": 0.3, "sync_s": 0.4,
              "sync_held": 1}  # fmt: skip
    records = [{"workers": [worker, worker]}, {"workers": [worker, {**worker, "sync_held": 0}]}]
    # WHEN the benchmark reads them
    rounds = bench.round_timings(sfn, "arn:x")
    prof = bench.profile(rounds, records)
    # THEN each round is schedule entered to the Choice entered, its reduce the Map's exit to it
    assert [r["round_s"] for r in rounds] == pytest.approx([3.1, 3.1])
    assert rounds[1]["reduce_s"] == pytest.approx(0.1)
    assert rounds[1]["schedule_s"] == pytest.approx(0.5) and rounds[1]["map_s"] == pytest.approx(
        2.5
    )
    assert rounds[1]["invoke_s"] == pytest.approx([2.0, 2.0])
    # ... and the profile holds round 1's figures only
    assert prof["invoke_s"] == pytest.approx(2.0) and prof["after_map_s"] == pytest.approx(0.1)
    assert prof["handler_s"] == pytest.approx(1.5) and prof["sync_s"] == pytest.approx(0.4)
    assert prof["sync_held"] == pytest.approx(0.5)


def test_a_rounds_time_is_the_difference_of_consecutive_rounds_last_partials():
    bench = _bench()
    # GIVEN three rounds' records whose workers ended at these epoch seconds
    records = [
        {"workers": [{"ended_at": 10.0}, {"ended_at": 11.0}]},
        {"workers": [{"ended_at": 11.5}, {"ended_at": 11.75}]},
        {"workers": [{"ended_at": 14.0}, {"ended_at": 12.0}]},
    ]
    # WHEN the benchmark reads a round's time from them
    # THEN each round r >= 1 is its latest end less round r - 1's (round 0 has none)
    assert bench.record_round_times(records) == pytest.approx([0.75, 2.25])
