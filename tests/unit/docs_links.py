"""GitHub's anchors of Markdown headings, and the relative links of a Markdown file.

Used by tests/unit/test_docs_links.py (README.md, CHANGELOG.md and docs/) and by the docs' own
tests. GitHub's anchor of a heading (github-slugger, as GitHub renders Markdown): the heading's
rendered text (inline code keeps its text, emphasis markers and link targets go), lower-cased,
every character that is not a letter, a digit, a space, ``-`` or ``_`` removed, spaces turned into
``-``; a repeated anchor gets ``-1``, ``-2``, ... in order.
"""

from __future__ import annotations

import re
from pathlib import Path

_FENCED = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", flags=re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", flags=re.I)


def without_code_blocks(text: str) -> str:
    """``text`` with its fenced code blocks removed (links and headings in them do not count)."""
    return _FENCED.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text (without the ``#`` marks)."""
    pieces = []
    last = 0
    for match in _CODE_SPAN.finditer(heading):
        pieces.append(_plain(heading[last : match.start()]))
        pieces.append(match.group(2))
        last = match.end()
    pieces.append(_plain(heading[last:]))
    text = "".join(pieces).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _plain(text: str) -> str:
    """Markdown outside code spans as rendered: link texts kept, emphasis markers dropped."""
    text = _LINK.sub(lambda m: m.group(1), text)
    text = text.replace("*", "")
    return re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", text)


def anchors(path: Path) -> set[str]:
    """Every anchor a link may name in ``path``: its headings' (duplicates numbered) and any
    explicit ``<a id="...">``."""
    text = without_code_blocks(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    seen: dict[str, int] = {}
    for match in re.finditer(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", text, flags=re.M):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(_HTML_ANCHOR.findall(text))
    return found


def relative_links(path: Path) -> list[str]:
    """The link targets of ``path`` that point into the project (no scheme: not ``https:``,
    ``mailto:``), outside code blocks and code spans, in order."""
    text = _CODE_SPAN.sub("", without_code_blocks(path.read_text(encoding="utf-8")))
    return [t for t in (m.group(2) for m in _LINK.finditer(text)) if not re.match(r"^[a-z]+:", t)]


def broken_links(path: Path) -> list[str]:
    """The relative links of ``path`` whose file does not exist or whose anchor is not one of
    its target's :func:`anchors`, each as ``'target: why'``."""
    broken = []
    for target in relative_links(path):
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    return broken
