"""fanfit.jobs.states names exactly the states of orchestrator/*.asl.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fanfit.jobs.states import EstimateState, TrainState

ORCHESTRATOR = Path(__file__).resolve().parents[2] / "orchestrator"


def _state_names(machine: dict[str, Any]) -> set[str]:
    """Every state name of an ASL machine, those of Map and Parallel states' inner machines too."""
    names: set[str] = set()
    for name, state in machine["States"].items():
        names.add(name)
        for inner in (
            state.get("ItemProcessor"),
            state.get("Iterator"),
            *state.get("Branches", []),
        ):
            if inner:
                names |= _state_names(inner)
    return names


@pytest.mark.parametrize(("asl", "states"), [("estimate", EstimateState), ("train", TrainState)])
def test_the_constants_are_exactly_the_states_of_the_asl_file(asl, states):
    # GIVEN the state machine's definition
    definition = json.loads((ORCHESTRATOR / f"{asl}.asl.json").read_text())
    # WHEN its state names (nested ones included) are collected
    names = _state_names(definition)
    # THEN the enum holds each of them and nothing else
    assert names == {s.value for s in states}


def test_a_constant_equals_its_sentence_and_finds_a_history_entry():
    # GIVEN a history event's state name WHEN looked up by constant THEN it matches as a string would
    phases = {EstimateState.AGGREGATE: "aggregate_s"}
    assert phases["Aggregate the predictions into the estimate"] == "aggregate_s"
    assert TrainState.REDUCE == "Merge the workers' partials into the next model"
