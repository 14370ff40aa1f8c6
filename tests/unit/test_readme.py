"""README.md reads in five minutes: short, the two set-up commands first, sections in a newcomer's
order, no long lines, and every figure it shows taken from docs/benchmarks.md.

GIVEN README.md, WHEN read as a newcomer reads it, THEN it holds at most 12,000 characters; the
first thing after its title is the block with ``make demo`` and ``make test``; its sections come
in the order of issue 29; no line outside code blocks is over 200 characters; and every number of
its Measured table's fanfit and alternative columns appears in docs/benchmarks.md.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_CHARS = 12_000
MAX_LINE = 200
SECTIONS = [
    "What fanfit is",
    "A DoubleML script, with the class swapped",
    "The command line",
    "Deploying to AWS",
    "Measured",
    "Where the rest lives",
]


def _outside_code(text: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            lines.append(line)
    return lines


def test_readme_is_at_most_12000_characters() -> None:
    # GIVEN README.md WHEN counted THEN it reads in five minutes
    assert len(README) <= MAX_CHARS, f"README.md has {len(README):,} characters (> {MAX_CHARS:,})"


def test_the_two_set_up_commands_come_first() -> None:
    # GIVEN README.md WHEN its lines after the title are read
    lines = [line for line in README.splitlines() if line.strip()]
    # THEN the title, then a code block whose first two lines are `make demo` and `make test`
    assert lines[0].startswith("# ")
    assert lines[1].startswith("```")
    assert lines[2].split()[:2] == ["make", "demo"]
    assert lines[3].split()[:2] == ["make", "test"]


def test_sections_come_in_a_newcomers_order() -> None:
    # GIVEN README.md's second-level headings WHEN listed THEN they are the issue's, in order
    assert re.findall(r"^## (.*)$", README, flags=re.M) == SECTIONS
    # ... and "what fanfit is" has the picture of the pipeline
    what = README.split("## What fanfit is")[1].split("\n## ")[0]
    assert "```mermaid" in what


def test_no_line_outside_code_is_over_200_characters() -> None:
    # GIVEN README.md's lines outside code blocks WHEN measured THEN none is over 200 characters
    long = [line[:60] for line in _outside_code(README) if len(line) > MAX_LINE]
    assert not long, f"lines over {MAX_LINE} characters: {long}"


def test_every_figure_shown_comes_from_the_benchmarks_page() -> None:
    # GIVEN the Measured table's rows WHEN their fanfit and alternative cells' numbers are read
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    table = README.split("## Measured")[1].split("\n## ")[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| what")]
    assert len(rows) >= 5
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert "docs/benchmarks.md" in cells[3], f"no link to docs/benchmarks.md: {row[:60]}"
        for number in re.findall(r"\d[\d,]*(?:\.\d+)?", f"{cells[1]} {cells[2]}"):
            # THEN each appears on the benchmarks page
            assert re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d,]|\.\d)", benchmarks), (
                f"README's {number} ({row[:50]}...) is not in docs/benchmarks.md"
            )


def test_every_flag_the_readme_names_exists() -> None:
    # GIVEN the --flags README.md names (code blocks included) WHEN compared with fanfit's parsers
    import argparse

    from fanfit.cli import build_parser

    known, todo = {"--guided"}, [build_parser()]  # sam deploy's own flag
    while todo:
        parser = todo.pop()
        for action in parser._actions:
            known.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", README))
    # THEN each is one of fanfit's options (or sam's --guided)
    assert not named - known, f"README.md names options fanfit does not have: {named - known}"
