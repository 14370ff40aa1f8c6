"""docs/benchmarks.md: one table, a row per benchmark in the format its top states.

GIVEN docs/benchmarks.md, WHEN its table is read, THEN its header is the seven columns the page
states, every row has seven cells of at most 300 characters with a date and whether the machine
was idle, and every ``benchmarks/*.py`` script has a row.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
HEADER = "| benchmark | command | what it measures | target | median (runs) | date | machine |"
MAX_CELL = 300


def _rows() -> list[list[str]]:
    table = PAGE.split(HEADER, 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.strip().splitlines()[1:] if line.startswith("|")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]] for row in rows]


def test_the_table_has_the_stated_header_and_rows() -> None:
    # GIVEN the page WHEN its table is read THEN the header is the stated one and rows follow
    assert HEADER in PAGE
    assert "`| benchmarks/NAME.py [mode] | the exact command |" in PAGE  # the row format, stated
    assert len(_rows()) >= 20


def test_every_row_has_seven_short_cells_a_date_and_the_machine() -> None:
    # GIVEN each row WHEN its cells are read
    for cells in _rows():
        # THEN seven cells, none over 300 characters, an ISO date, and idle, shared or not recorded
        assert len(cells) == 7, cells[0]
        too_long = [len(c) for c in cells if len(c) > MAX_CELL]
        assert not too_long, f"{cells[0]}: cells of {too_long} characters (> {MAX_CELL})"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", cells[5]), f"{cells[0]}: date {cells[5]!r}"
        assert re.search(r"\b(idle|shared|not recorded)\b", cells[6]), f"{cells[0]}: {cells[6]!r}"
        assert cells[1].startswith("`"), f"{cells[0]}: the command is not code"


def test_every_benchmark_script_has_a_row() -> None:
    # GIVEN benchmarks/*.py WHEN the rows' first cells are read THEN each script has one
    named = " ".join(cells[0] for cells in _rows())
    missing = [p.name for p in sorted((ROOT / "benchmarks").glob("*.py"))
               if f"benchmarks/{p.name}" not in named and not p.name.startswith("_")]  # fmt: skip
    assert not missing, f"docs/benchmarks.md has no row for {missing}"
