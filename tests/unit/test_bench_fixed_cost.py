"""benchmarks/fixed_cost.py's cut of an execution into its states' seconds.

GIVEN an execution history of Prepare, a wave's Map of two shards (one inline child state inside
the Map) and Aggregate, and the shards' statistics, WHEN :func:`execution_profile` reads them,
THEN each top-level state's seconds are its entered-to-exited time, the child state is not
counted as top-level, the fits' critical path is the slowest shard of the wave, and ``fixed_s``
is the execution's seconds less that path.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from bench_module import load_benchmark

fixed_cost = load_benchmark("fixed_cost")
T0 = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _state(kind: str, name: str, entered: float, exited: float) -> list[dict]:
    return [
        {"type": f"{kind}StateEntered", "timestamp": _at(entered),
         "stateEnteredEventDetails": {"name": name}},
        {"type": f"{kind}StateExited", "timestamp": _at(exited),
         "stateExitedEventDetails": {"name": name}},
    ]  # fmt: skip


def test_an_execution_is_cut_into_its_states_and_its_fits_path() -> None:
    map_state = fixed_cost.MAP_STATE
    inner = _state("Task", "inner", 1.2, 1.3)
    events = [
        {"type": "ExecutionStarted", "timestamp": _at(0.0)},
        *_state("Task", "Prepare", 0.1, 0.5),
        {"type": "MapStateEntered", "timestamp": _at(0.6), "stateEnteredEventDetails": {"name": map_state}},
        *inner,
        {"type": "MapStateExited", "timestamp": _at(2.0), "stateExitedEventDetails": {"name": map_state}},
        *_state("Task", "Aggregate", 2.1, 2.4),
        {"type": "ExecutionSucceeded", "timestamp": _at(2.5)},
    ]  # fmt: skip
    wave = _at(0.6).timestamp()
    shards = [{"started_at": wave + 0.1, "fit_s": 0.7, "cold_start": False},
              {"started_at": wave + 0.2, "fit_s": 0.9, "cold_start": True}]  # fmt: skip
    got = fixed_cost.execution_profile(events, shards)
    assert got["states"] == {"Prepare": 0.4, map_state: 1.4, "Aggregate": 0.3}
    assert got["execution_s"] == 2.5 and got["between_states_s"] == pytest.approx(0.4)
    assert (got["fit_path_s"], got["fixed_s"]) == (0.9, 1.6)
    assert (got["n_waves"], got["n_shards"], got["cold_shards"]) == (1, 2, 1)


def test_a_history_without_its_end_is_refused() -> None:
    with pytest.raises(ValueError, match="terminal"):
        fixed_cost.execution_profile([{"type": "ExecutionStarted", "timestamp": T0}], [])
