"""docs/architecture.md is generated from orchestrator/*.asl.json and cannot drift from them.

GIVEN the state machine definitions, WHEN ``docs/gen_architecture.py`` renders the page again,
THEN it equals the committed docs/architecture.md; every state of every definition (nested ones
included) appears in its machine's Mermaid diagram under its ASL name; every Choice rule, Catch
and Next is an edge; and every edge joins declared states.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASL_FILES = sorted((ROOT / "orchestrator").glob("*.asl.json"))
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _load_generator():
    name = "fanfit_docs_gen_architecture"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "gen_architecture.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _diagrams() -> dict[str, str]:
    """Machine name (``estimate``) -> the text of its Mermaid block in docs/architecture.md."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    found = re.findall(
        r"^## (\S+) \(`orchestrator/[^`]+`\)\n.*?```mermaid\n(.*?)```", text, flags=re.M | re.S
    )
    return dict(found)


def test_the_committed_page_is_what_the_generator_writes() -> None:
    # GIVEN the ASL files WHEN the page is rendered again THEN it is the committed one
    assert ARCHITECTURE.read_text(encoding="utf-8") == gen.render(), (
        "docs/architecture.md is out of date: run .venv/bin/python docs/gen_architecture.py"
    )


def test_check_mode_agrees() -> None:
    # GIVEN an up-to-date page WHEN the generator runs with --check THEN it exits 0
    assert gen.main(["--check"]) == 0


def test_there_is_one_diagram_per_state_machine() -> None:
    assert ASL_FILES, "no orchestrator/*.asl.json"
    assert sorted(_diagrams()) == sorted(p.name.removesuffix(".asl.json") for p in ASL_FILES)


def _declared(diagram: str) -> dict[str, str]:
    """Mermaid id -> state name, from ``state "NAME" as id`` and ``id : NAME`` lines."""
    out = {
        m.group(2): m.group(1)
        for m in re.finditer(r'^\s*state "([^"]+)" as (\w+)\s*$', diagram, re.M)
    }
    out.update(
        {m.group(1): m.group(2) for m in re.finditer(r"^\s*(\w+) : (.+?)\s*$", diagram, re.M)}
    )
    return out


@pytest.mark.parametrize("path", ASL_FILES, ids=lambda p: p.name)
def test_every_state_appears_in_its_diagram(path: Path) -> None:
    # GIVEN a definition's states, nested ones included WHEN its diagram is read THEN each is a
    # state of the diagram under its ASL name, and the diagram has no other states
    definition = json.loads(path.read_text())
    diagram = _diagrams()[path.name.removesuffix(".asl.json")]
    names = set(_declared(diagram).values())
    expected = set(gen.state_names(definition))
    assert expected - names == set(), f"states missing from the diagram: {expected - names}"
    assert names - expected == set(), (
        f"states in the diagram but not in {path.name}: {names - expected}"
    )


@pytest.mark.parametrize("path", ASL_FILES, ids=lambda p: p.name)
def test_transitions_choices_and_catches_are_edges(path: Path) -> None:
    # GIVEN a definition WHEN its diagram's edges are read THEN every Next, Choice rule, Default
    # and Catch is an edge between the states it names, Map states are composite, and every edge
    # joins declared states (or [*])
    definition = json.loads(path.read_text())
    diagram = _diagrams()[path.name.removesuffix(".asl.json")]
    declared = _declared(diagram)
    by_name = {v: k for k, v in declared.items()}
    edges = set()
    for m in re.finditer(r"^\s*(\S+) --> (\S+)(?: : (.*))?$", diagram, re.M):
        source, target = m.group(1), m.group(2)
        for end in (source, target):
            assert end == "[*]" or end in declared, f"edge to an undeclared state {end}"
        edges.add((source, target))
    for _, name, state in gen._walk(definition):
        nexts = [state["Next"]] if "Next" in state else []
        nexts += [rule["Next"] for rule in state.get("Choices", [])]
        nexts += [state["Default"]] if "Default" in state else []
        nexts += [catch["Next"] for catch in state.get("Catch", [])]
        for target in nexts:
            assert (by_name[name], by_name[target]) in edges, f"no edge {name} -> {target}"
        if state.get("End") or state["Type"] in ("Fail", "Succeed"):
            assert (by_name[name], "[*]") in edges, f"{name} does not end the diagram"
        if state["Type"] == "Map":
            assert re.search(rf"^\s*state {by_name[name]} \{{", diagram, re.M), (
                f"Map {name} is not a composite state"
            )
    assert diagram.count("{") == diagram.count("}")


def test_the_failure_states_are_marked() -> None:
    # GIVEN the states a Catch leads to WHEN the diagrams are read THEN they carry the failure class
    for path in ASL_FILES:
        definition = json.loads(path.read_text())
        diagram = _diagrams()[path.name.removesuffix(".asl.json")]
        by_name = {v: k for k, v in _declared(diagram).items()}
        marked = re.search(r"^\s*class (\S+) failure$", diagram, re.M)
        assert marked, f"{path.name}: no failure class"
        for name in gen.failure_states(definition):
            assert by_name[name] in marked.group(1).split(",")
