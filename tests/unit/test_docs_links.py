"""Every relative link and anchor of README.md, CHANGELOG.md and docs/ resolves; docs/index.md
maps every page of the guide; every page says at its top whom it is for.

GIVEN the project's Markdown files, WHEN their links are read outside code (anchors as GitHub
makes them from headings: tests/unit/docs_links.py), THEN each names an existing file and, for a
Markdown target, one of its headings; docs/index.md links every docs page; and the first line
after each page's title (HTML comments aside) starts with "*Who this page is for:*".
"""

from __future__ import annotations

import re
from pathlib import Path

import docs_links as dl
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
FILES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS]
WHO = "*Who this page is for:*"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    # GIVEN a Markdown file of the project WHEN its relative links are followed
    broken = dl.broken_links(path)
    # THEN every file exists and every anchor is a heading of its target
    assert not broken, f"{path.relative_to(ROOT)}: broken links {broken}"


def test_the_index_links_every_page_of_the_guide() -> None:
    # GIVEN docs/index.md, the map of the guide WHEN its links are read
    linked = {Path(t.partition("#")[0]).name for t in dl.relative_links(ROOT / "docs" / "index.md")}
    # THEN every other page of docs/ is among them
    missing = {p.name for p in DOCS} - linked - {"index.md"}
    assert not missing, f"docs/index.md does not link {sorted(missing)}"


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_every_page_says_whom_it_is_for(path: Path) -> None:
    # GIVEN a page of the guide WHEN its top is read (title, then HTML comments skipped)
    text = re.sub(r"<!--.*?-->", "", path.read_text(encoding="utf-8"), flags=re.S)
    lines = [line for line in text.splitlines() if line.strip()]
    # THEN a title comes first and the line after it says whom the page is for
    assert lines[0].startswith("# "), f"docs/{path.name}: no title on the first line"
    assert lines[1].startswith(WHO), f"docs/{path.name}: the line after the title is not {WHO!r}"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Data in S3 used in place", "data-in-s3-used-in-place"),
        ("The library (`layers/fanfit/fanfit`)", "the-library-layersfanfitfanfit"),
        ("CPU and memory: cgroups", "cpu-and-memory-cgroups"),
        ("QTE on the command line", "qte-on-the-command-line"),
        ("Inputs of `ml_l` and **bold** _words_", "inputs-of-ml_l-and-bold-words"),
        ("See [the guide](docs/index.md), 2.0", "see-the-guide-20"),
        ("The GPU worker (AWS Batch)", "the-gpu-worker-aws-batch"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    # GIVEN a heading WHEN turned into its anchor THEN it is the one GitHub makes
    assert dl.slug(heading) == anchor


def test_a_broken_link_and_a_repeated_heading_are_found(tmp_path: Path) -> None:
    # GIVEN a page with a repeated heading, and links to it, to a missing file and a missing anchor
    (tmp_path / "a.md").write_text(
        "# A\n\n## Run\n\n## Run\n\n```text\n## Not a heading\n[x](gone.md)\n```\n"
        "[ok](#run-1) [file](a.md#run) [gone](b.md) [nope](#not-a-heading) `[code](c.md)`\n",
        encoding="utf-8",
    )
    # WHEN its links are checked
    broken = dl.broken_links(tmp_path / "a.md")
    # THEN exactly the missing file and the heading inside a code block are reported
    assert broken == ["b.md: no such file", "#not-a-heading: no heading #not-a-heading in a.md"]
