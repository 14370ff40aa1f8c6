"""Write docs/architecture.md from orchestrator/*.asl.json and the library's module docstrings.

One Mermaid ``stateDiagram-v2`` per state machine, with the states named as in the ASL: Choice
states with one labelled edge per rule and one for ``Default``; Map states as composite states
holding their item processor; ``Catch`` edges, labelled with the errors they catch, to the failure
states; ``End`` and ``Fail`` states to ``[*]``. Under each diagram, a table of the states: what each
runs, its retries and where its errors go.

    .venv/bin/python docs/gen_architecture.py           # rewrite docs/architecture.md
    .venv/bin/python docs/gen_architecture.py --check   # exit 1 when it is out of date

``tests/unit/test_docs_architecture.py`` re-generates the file and compares it with the committed
one, so a change to an ASL file without re-running this script fails the unit tests.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ORCHESTRATOR = ROOT / "orchestrator"
LIBRARY = ROOT / "layers" / "fanfit" / "fanfit"
OUTPUT = ROOT / "docs" / "architecture.md"

#: Comparison operators of Choice rules (without their ``Path`` variants), as shown on an edge.
_OPERATORS = {
    "Equals": "=",
    "LessThan": "<",
    "GreaterThan": ">",
    "LessThanEquals": "<=",
    "GreaterThanEquals": ">=",
}
#: Type tests of Choice rules (``IsPresent`` etc.), as shown on an edge.
_TESTS = {
    "IsPresent": "present",
    "IsNull": "null",
    "IsBoolean": "a boolean",
    "IsNumeric": "a number",
    "IsString": "a string",
    "IsTimestamp": "a timestamp",
}
_FAILURE_TYPES = frozenset({"Fail"})


def _path(value: str) -> str:
    """A JSONPath as shown on an edge: ``$.a.b`` -> ``a.b``."""
    return value[2:] if value.startswith("$.") else value


def _label(text: str) -> str:
    """Text safe for a Mermaid edge label (no ``:``, ``;``, ``#`` or quotes)."""
    return re.sub(r"\s+", " ", re.sub(r"[:;#\"]", " ", text)).strip()


def condition(rule: dict[str, Any]) -> str:
    """A Choice rule as text: ``schedule.wave.has_wave = true``, ``a and b``, ``not (a)``.

    Parameters
    ----------
    rule : dict
        One element of a Choice state's ``Choices`` (or a nested ``And``/``Or``/``Not`` operand).

    Returns
    -------
    str
    """
    if "And" in rule:
        return " and ".join(condition(r) for r in rule["And"])
    if "Or" in rule:
        return " or ".join(condition(r) for r in rule["Or"])
    if "Not" in rule:
        return f"not ({condition(rule['Not'])})"
    variable = _path(rule.get("Variable", "?"))
    for key, value in rule.items():
        if key in ("Variable", "Next"):
            continue
        if key in _TESTS:
            return f"{variable} is {'' if value else 'not '}{_TESTS[key]}"
        if key.endswith("Matches"):
            return f"{variable} matches {value}"
        by_path = key.endswith("Path")
        base = key[: -len("Path")] if by_path else key
        for suffix, symbol in _OPERATORS.items():
            if base.endswith(suffix):
                shown = _path(value) if by_path else json.dumps(value).strip('"')
                return f"{variable} {symbol} {shown}"
    return variable


class _Ids:
    """Mermaid ids for state names, unique within one diagram."""

    def __init__(self) -> None:
        self._by_name: dict[tuple[str, ...], str] = {}
        self._used: set[str] = set()

    def __call__(self, scope: tuple[str, ...], name: str) -> str:
        key = (*scope, name)
        if key not in self._by_name:
            base = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "state"
            candidate, n = base, 2
            while candidate in self._used:
                candidate, n = f"{base}_{n}", n + 1
            self._used.add(candidate)
            self._by_name[key] = candidate
        return self._by_name[key]


def _walk(
    definition: dict[str, Any], scope: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str, dict[str, Any]]]:
    """Every state of a definition, depth first: ``(scope, name, state)``; ``scope`` names the
    enclosing Map (or Parallel) states."""
    for name, state in definition["States"].items():
        yield scope, name, state
        for sub in _children(state):
            yield from _walk(sub, (*scope, name))


def _children(state: dict[str, Any]) -> list[dict[str, Any]]:
    if state["Type"] == "Map":
        return [state.get("ItemProcessor") or state["Iterator"]]
    if state["Type"] == "Parallel":
        return list(state["Branches"])
    return []


def state_names(definition: dict[str, Any]) -> list[str]:
    """The names of every state of a definition, nested ones included, depth first."""
    return [name for _, name, _ in _walk(definition)]


def _diagram_body(
    definition: dict[str, Any], scope: tuple[str, ...], ids: _Ids, indent: str
) -> list[str]:
    lines: list[str] = []
    for name, state in definition["States"].items():
        if not _children(state):
            lines.append(f'{indent}state "{name}" as {ids(scope, name)}')
    for name, state in definition["States"].items():
        sid = ids(scope, name)
        children = _children(state)
        if not children:
            continue
        # A composite state takes its name as ``id : name`` (Mermaid's documented form for a named
        # composite state; ``state "name" as id { ... }`` does not parse).
        lines.append(f"{indent}{sid} : {name}")
        lines.append(f"{indent}state {sid} {{")
        for i, sub in enumerate(children):
            if i:
                lines.append(f"{indent}    --")
            lines.extend(_diagram_body(sub, (*scope, name), ids, indent + "    "))
        lines.append(f"{indent}}}")
    lines.append(f"{indent}[*] --> {ids(scope, definition['StartAt'])}")
    for name, state in definition["States"].items():
        sid = ids(scope, name)
        kind = state["Type"]
        if kind == "Choice":
            for rule in state.get("Choices", []):
                lines.append(
                    f"{indent}{sid} --> {ids(scope, rule['Next'])} : {_label(condition(rule))}"
                )
            if "Default" in state:
                lines.append(f"{indent}{sid} --> {ids(scope, state['Default'])} : otherwise")
        elif "Next" in state:
            lines.append(f"{indent}{sid} --> {ids(scope, state['Next'])}")
        if state.get("End") or kind in ("Succeed", "Fail"):
            lines.append(f"{indent}{sid} --> [*]")
        for catch in state.get("Catch", []):
            errors = ", ".join(catch["ErrorEquals"])
            lines.append(
                f"{indent}{sid} --> {ids(scope, catch['Next'])} : {_label('catch ' + errors)}"
            )
    return lines


def failure_states(definition: dict[str, Any]) -> list[str]:
    """Names of the states a ``Catch`` leads to, and the ``Fail`` states, in definition order."""
    caught = {c["Next"] for _, _, s in _walk(definition) for c in s.get("Catch", [])}
    return [
        name
        for _, name, state in _walk(definition)
        if name in caught or state["Type"] in _FAILURE_TYPES
    ]


def diagram(definition: dict[str, Any]) -> list[str]:
    """The Mermaid ``stateDiagram-v2`` of one definition, as lines (without the code fence).

    Parameters
    ----------
    definition : dict
        A parsed ``*.asl.json``.

    Returns
    -------
    list of str
    """
    ids = _Ids()
    lines = ["stateDiagram-v2", "    direction TB"]
    lines += _diagram_body(definition, (), ids, "    ")
    failed = [
        ids(scope, name)
        for scope, name, _ in _walk(definition)
        if name in failure_states(definition)
    ]
    if failed:
        lines.append("    classDef failure fill:#fde2e2,stroke:#b42318,color:#7a271a")
        lines.append(f"    class {','.join(failed)} failure")
    return lines


def _function(parameters: dict[str, Any]) -> str:
    if "FunctionName" in parameters:
        name = str(parameters["FunctionName"])
        match = re.fullmatch(r"\$\{(\w+?)(?:Arn)?\}", name)
        return f"`{match.group(1)}`" if match else f"`{name}`"
    if "FunctionName.$" in parameters:
        return f"the function named by `{parameters['FunctionName.$']}`"
    return "a function"


def _substitution(value: Any) -> str:
    match = re.fullmatch(r"\$\{(\w+?)(?:Arn|Name)?\}", str(value))
    return f"`{match.group(1)}`" if match else f"`{value}`"


def runs(state: dict[str, Any]) -> str:
    """What a state does, in a few words (the table's "runs" column)."""
    kind = state["Type"]
    if kind == "Task":
        resource = state["Resource"]
        params = state.get("Parameters", {})
        if resource.endswith(":lambda:invoke"):
            return f"Lambda {_function(params)}"
        if resource.endswith(":lambda:invoke.waitForTaskToken"):
            return (
                f"Lambda {_function(params)}, then waits for its task token (SendTaskSuccess or "
                "SendTaskFailure)"
            )
        if ":batch:submitJob" in resource:
            waits = ", waits for it" if resource.endswith(".sync") else ""
            return (
                f"AWS Batch job of {_substitution(params.get('JobDefinition'))} on "
                f"{_substitution(params.get('JobQueue'))}{waits}"
            )
        if ":dynamodb:" in resource:
            action = resource.rsplit(":", 1)[-1]
            return f"DynamoDB {action[0].upper()}{action[1:]} on {_substitution(params.get('TableName'))}"
        return f"`{resource}`"
    if kind == "Map":
        processor = state.get("ItemProcessor") or state.get("Iterator") or {}
        mode = processor.get("ProcessorConfig", {}).get("Mode", "INLINE")
        if mode == "DISTRIBUTED":
            parts = ["Distributed Map: one child execution per item"]
            if "ItemReader" in state:
                parts.append("items read from S3 (`ItemReader`)")
            if "ItemBatcher" in state:
                parts.append("items batched (`ItemBatcher`)")
            if "ResultWriter" in state:
                parts.append("results written to S3 (`ResultWriter`)")
        else:
            parts = [f"Inline Map over `{state.get('ItemsPath', '$')}`"]
        if "MaxConcurrencyPath" in state:
            parts.append(f"concurrency from `{state['MaxConcurrencyPath']}`")
        elif "MaxConcurrency" in state:
            cap = state["MaxConcurrency"]
            parts.append("no concurrency cap of its own" if cap == 0 else f"at most {cap} at once")
        return "; ".join(parts)
    if kind == "Choice":
        return "branches (see the diagram's edges)"
    if kind == "Pass":
        return "shapes its output, runs nothing"
    if kind == "Fail":
        return f"fails the execution with the error at `{state.get('ErrorPath', state.get('Error', ''))}`"
    if kind == "Succeed":
        return "ends the execution successfully"
    if kind == "Wait":
        return "waits"
    if kind == "Parallel":
        return f"runs {len(state['Branches'])} branches side by side"
    return kind


def retries(state: dict[str, Any]) -> str:
    """The state's ``Retry`` rules in a few words."""
    out = []
    for rule in state.get("Retry", []):
        errors = ", ".join(f"`{e}`" for e in rule["ErrorEquals"])
        out.append(
            f"{errors}: up to {rule.get('MaxAttempts', 3)} retries, from "
            f"{rule.get('IntervalSeconds', 1)} s, backoff x{rule.get('BackoffRate', 2)}"
            + (" with jitter" if rule.get("JitterStrategy") == "FULL" else "")
        )
    return "<br>".join(out) or "-"


def catches(state: dict[str, Any]) -> str:
    """The state's ``Catch`` rules: ``errors -> next state``."""
    out = [
        f"{', '.join(f'`{e}`' for e in c['ErrorEquals'])} -> {c['Next']}"
        for c in state.get("Catch", [])
    ]
    return "<br>".join(out) or "-"


def table(definition: dict[str, Any]) -> list[str]:
    """A Markdown table of the definition's states (nested ones marked with their Map)."""
    lines = [
        "| state | type | runs | retries | errors go to |",
        "|---|---|---|---|---|",
    ]
    for scope, name, state in _walk(definition):
        shown = f"{name} (in *{scope[-1]}*)" if scope else name
        cells = [shown, state["Type"], runs(state), retries(state), catches(state)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring (read with ``ast``; nothing is imported)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return first.replace("|", "\\|")


def library_table(library: Path = LIBRARY) -> list[str]:
    """One row per module of the library: its dotted name and the first sentence of its docstring."""
    lines = ["| module | what it holds |", "|---|---|"]
    for path in sorted(library.rglob("*.py")):
        rel = path.relative_to(library.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        if rel.name == "__main__":
            continue
        lines.append(f"| `{'.'.join(parts)}` | {_summary(path)} |")
    return lines


def render(orchestrator: Path = ORCHESTRATOR, library: Path = LIBRARY) -> str:
    """The whole of docs/architecture.md, from every ``*.asl.json`` in ``orchestrator``."""
    out = [
        "# Architecture: the state machines and the library",
        "",
        "*Who this page is for:* developers who change a state machine or the library, and users who",
        "want to see every state a job passes through and every module of the library.",
        "",
        "<!-- Generated by docs/gen_architecture.py from orchestrator/*.asl.json and the module docstrings: do not edit by",
        "     hand; run `.venv/bin/python docs/gen_architecture.py` after changing a definition. -->",
        "",
        "Every job is one AWS Step Functions execution. The definitions live in `orchestrator/`",
        "(Amazon States Language, JSONPath); `template.yaml` deploys each with its",
        "`DefinitionSubstitutions`, so a `${Name}` below is the ARN or name of a resource of the",
        "template. State names are the ASL's own. In the diagrams a Map state is a composite state",
        "holding its item processor, a Choice state's edges carry their conditions, and the red",
        "states are where errors end up: every top-level step catches `States.ALL`, the job's",
        "record in the job table is marked FAILED with the error, and the execution fails with it. Between steps",
        "the state carries S3 keys and small numbers only (a state's input or output is at most",
        "256 KB); the data, plans, predictions and models live in S3.",
        "",
        "See [estimate.md](estimate.md) and [train.md](train.md) for what the steps compute, and",
        "[limits.md](limits.md) for the service limits that shaped them.",
    ]
    for path in sorted(orchestrator.glob("*.asl.json")):
        definition = json.loads(path.read_text())
        machine = path.name.removesuffix(".asl.json")
        out += [
            "",
            f"## {machine} (`orchestrator/{path.name}`)",
            "",
            definition.get("Comment", "").replace("${TimeoutSecondsField}", "").strip(),
            "",
            "```mermaid",
            *diagram(definition),
            "```",
            "",
            *table(definition),
        ]
    out += [
        "",
        "## The library (`layers/fanfit/fanfit`)",
        "",
        "Each Lambda function (`functions/<name>/app.py`) parses its event into a model of",
        "`fanfit.jobs.documents.events` and makes one call into a step of `fanfit.jobs`; the steps",
        "read and write the job documents of `fanfit.jobs.documents` at the keys of `fanfit.storage`.",
        "Imports only point down DESIGN.md's rows (cli, client and local on top; jobs; progress,",
        "report and cost; dml, sched, train and learners; storage, prices, limits and errors), and no",
        "module imports one that imports it back: `tests/unit/test_import_graph.py` checks both. One",
        "line per module, the first sentence of its docstring:",
        "",
        *library_table(library),
    ]
    return "\n".join(out).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check`` compare) docs/architecture.md; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is out of date: run python docs/gen_architecture.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
