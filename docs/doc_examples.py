"""Extract and run the examples of the user guide (docs/*.md); used by the docs tests.

An *example* is a fenced code block of language ``python`` or ``console``:

- a ``python`` block runs in-process (``exec``), the blocks of one document in order in one
  namespace; a ``text`` block right after it (only blank lines between) is its expected stdout;
- a ``console`` block holds commands (lines starting with ``$ fanfit``), each followed by its
  expected output (possibly none); every command runs through :func:`fanfit.cli.main`. A command
  is expected to exit 0 and its shown output is its stdout (logs and progress go to stderr);
  when the shown output has a line starting with ``fanfit: error:`` the command is expected to
  exit non-zero and the shown output is its stderr and stdout.

Shown output is compared as doctest compares it, with ``...`` standing for any text
(``ELLIPSIS``, ``NORMALIZE_WHITESPACE``). Where that fails, the output still matches when it has
the same text with the same count of numbers, each shown integer equal to the printed one and
each other number within :data:`NUMBER_RTOL` of the shown one (or one unit of its last shown
decimal, e.g. 0.43 and 0.431): a random forest's estimate differs
in its third digit with the BLAS kernel OpenBLAS picks for the machine's CPU (measured: DoubleML's
getting-started PLR prints coef 0.51 on an AMD EPYC's default kernel, 0.509 under
``OPENBLAS_CORETYPE=Haswell``). The parity of fanfit with DoubleML is checked by the tests on the
same machine, to 1e-9, not by the shown digits.

An HTML comment on the line before the fence (blank lines allowed) says what an example needs:

- none: it runs in the unit tests (``tests/unit/test_docs_examples.py``), with no stack;
- ``<!-- needs: stack -->``: it runs in ``tests/integration/test_docs_examples_on_stack.py`` on the local
  stack. There a document's python blocks run in order in one namespace, the unmarked ones too,
  so a stack example may use names an earlier example of the same document defined. ``$JOB`` in a
  command stands for the id of the last job an earlier stack example printed;
- ``<!-- parse-only -->``: it cannot run in any test (it would deploy to AWS, or start or stop the
  stack): python blocks are compiled, commands parsed by fanfit's parser, and ``fanfit
  estimate`` / ``fanfit train`` commands on local data run with ``--dry-run`` added.

Other fenced blocks (``bash``, ``text``, ``yaml``, ``mermaid``) are not examples; a ``bash``
block must not run ``fanfit`` (use a ``console`` block, so that it is checked).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
MARKERS = {"needs: stack": "stack", "parse-only": "parse-only"}
EXAMPLE_LANGUAGES = frozenset({"python", "console"})
#: The id of a job, as fanfit names it (``est-20261123-101530-1a2b3c4d``, ``train-...``).
JOB_ID = re.compile(r"\b(?:est|train)-\d{8}-\d{6}-[0-9a-f]{8}\b")

_FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
_COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->$")
_CHECKER = doctest.OutputChecker()
_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class DocError(AssertionError):
    """A document breaks the conventions above (named by file and line)."""


@dataclass(frozen=True)
class Block:
    """One fenced code block of a document.

    Attributes
    ----------
    doc : str
        The document's file name (``estimate.md``).
    line : int
        1-based line of the opening fence.
    lang : str
        The fence's language (``''`` when none).
    code : str
        The block's text.
    needs : str or None
        ``'stack'``, ``'parse-only'`` or None (from the marker comment before the fence).
    output : str or None
        Python blocks: the expected stdout (the ``text`` block right after), else None.
    """

    doc: str
    line: int
    lang: str
    code: str
    needs: str | None = None
    output: str | None = None

    @property
    def where(self) -> str:
        """``docs/<doc>:<line>``, for messages."""
        return f"docs/{self.doc}:{self.line}"


@dataclass(frozen=True)
class Command:
    """One ``$ fanfit ...`` line of a console block and the output shown after it."""

    argv: list[str]
    text: str
    expected: str
    block: Block

    @property
    def expects_error(self) -> bool:
        return any(line.startswith("fanfit: error:") for line in self.expected.splitlines())


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with its marker and (python) shown output.

    Raises
    ------
    DocError
        An unclosed fence, or an unknown marker comment right before an example.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    raw: list[tuple[int, int, str, str, str | None]] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, indent, lang = i, len(match.group(1)), match.group(2)
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        if j >= len(lines):
            raise DocError(f"docs/{path.name}:{start + 1}: unclosed code fence")
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        comment = _COMMENT.match(lines[k].strip()) if k >= 0 else None
        marker = comment.group(1) if comment else None
        body = [line[indent:] if line[:indent].isspace() else line for line in lines[start + 1 : j]]
        raw.append((start + 1, j, lang, "\n".join(body) + "\n", marker))
        i = j + 1
    out: list[Block] = []
    for n, (line, end, lang, code, marker) in enumerate(raw):
        needs = None
        if lang in EXAMPLE_LANGUAGES and marker is not None:
            if marker not in MARKERS:
                raise DocError(
                    f"docs/{path.name}:{line}: unknown marker <!-- {marker} -->; "
                    f"known: {', '.join(f'<!-- {m} -->' for m in MARKERS)}"
                )
            needs = MARKERS[marker]
        output = None
        if lang == "python" and n + 1 < len(raw):
            next_line, _, next_lang, next_code, _ = raw[n + 1]
            between = lines[end + 1 : next_line - 1]
            if next_lang == "text" and not any(s.strip() for s in between):
                output = next_code
        out.append(Block(path.name, line, lang, code, needs, output))
    return out


def examples(path: Path) -> list[Block]:
    """The examples (``python`` and ``console`` blocks) of a document."""
    return [b for b in blocks(path) if b.lang in EXAMPLE_LANGUAGES]


def commands(block: Block) -> list[Command]:
    """The commands of a console block, each with the output shown after it.

    Raises
    ------
    DocError
        A block not starting with a command, or a command other than ``fanfit``.
    """
    out: list[Command] = []
    current: list[str] | None = None
    expected: list[str] = []
    text = ""

    def flush() -> None:
        if current is not None:
            out.append(Command(current, text, "\n".join(expected).strip("\n"), block))

    for n, line in enumerate(block.code.splitlines()):
        if line.startswith("$ "):
            flush()
            text = line[2:].strip()
            argv = shlex.split(text)
            if not argv or argv[0] != "fanfit":
                raise DocError(f"{block.where}: a console example runs only `fanfit`, got {text!r}")
            current, expected = argv[1:], []
        elif current is None:
            raise DocError(f"{block.where}: line {n + 1} of the block is not a `$ fanfit` command")
        else:
            expected.append(line)
    flush()
    if not out:
        raise DocError(f"{block.where}: a console block without a `$ fanfit` command")
    return out


#: Relative tolerance of a shown number (see the module docstring).
NUMBER_RTOL = 0.02
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
_INTEGER = re.compile(r"[-+]?\d+")
_TOKEN = re.compile(
    rf"(?P<ellipsis>\.\.\.)|(?P<space>\s+)|(?P<number>{_NUMBER.pattern})|.", re.DOTALL
)


def output_matches(expected: str, got: str) -> bool:
    """Whether ``got`` matches the shown ``expected`` output: doctest's ELLIPSIS rules, else the
    same text with every integer equal and every other number within :data:`NUMBER_RTOL` (see the
    module docstring)."""
    if not expected.strip():
        return True
    want, have = expected.strip() + "\n", got.strip() + "\n"
    if _CHECKER.check_output(want, have, _FLAGS):
        return True
    # the shown text as a pattern: its numbers captured, ``...`` any text, white space folded
    pattern, shown = [], []
    for token in _TOKEN.finditer(want.strip()):
        if token.group("ellipsis"):
            pattern.append(".*?")
        elif token.group("space"):
            pattern.append(r"\s+")
        elif token.group("number"):
            pattern.append(f"({_NUMBER.pattern})")
            shown.append(token.group("number"))
        else:
            pattern.append(re.escape(token.group(0)))
    found = re.fullmatch("".join(pattern), have.strip(), re.DOTALL)
    if found is None:
        return False
    for text, printed in zip(shown, found.groups()[:: _NUMBER.groups + 1], strict=True):
        if _INTEGER.fullmatch(text):  # a count, an id, a seed: exactly, not within a tolerance
            if printed != text:
                return False
            continue
        x, y = float(text), float(printed)
        decimals = text.partition(".")[2].split("e")[0].split("E")[0]
        unit = 10.0 ** -len(decimals)
        if abs(x - y) > max(NUMBER_RTOL * max(abs(x), abs(y)), unit * 1.000001):
            return False
    return True


def expand(argv: list[str], variables: Mapping[str, str], where: str) -> list[str]:
    """``$NAME`` in the arguments replaced from ``variables``.

    Raises
    ------
    DocError
        A variable that is not set (no earlier example printed a job id, say).
    """

    def one(arg: str) -> str:
        def sub(m: re.Match[str]) -> str:
            if m.group(1) not in variables:
                raise DocError(f"{where}: ${m.group(1)} is not set by an earlier example")
            return variables[m.group(1)]

        return re.sub(r"\$([A-Z_]+)", sub, arg)

    return [one(a) for a in argv]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Run ``fanfit ARGV`` in-process; returns the exit code, stdout and stderr."""
    from fanfit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # --help, argparse usage errors
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return int(code), out.getvalue(), err.getvalue()


def check_command(command: Command, argv: list[str] | None = None) -> str:
    """Run one command and check its exit code and output; returns the output.

    Raises
    ------
    AssertionError
        Naming the document, line and command.
    """
    code, out, err = run_cli(command.argv if argv is None else argv)
    where = f"{command.block.where}: $ fanfit {' '.join(command.argv)}"
    if command.expects_error:
        got = err + out
        assert code != 0, f"{where}: exited 0, the example shows an error\n{got}"
    else:
        got = out
        assert code == 0, f"{where}: exited {code}\n{out}{err}"
    assert output_matches(command.expected, got), (
        f"{where}: output differs\n--- shown ---\n{command.expected}\n--- got ---\n{got}"
    )
    return got


def run_python(block: Block, namespace: dict[str, Any]) -> str:
    """Run a python block in ``namespace`` and check its stdout against the shown output.

    Returns
    -------
    str
        What the block printed.
    """
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102 - our own docs
    got = buffer.getvalue()
    if block.output is not None:
        assert output_matches(block.output, got), (
            f"{block.where}: output differs\n--- shown ---\n{block.output}\n--- got ---\n{got}"
        )
    return got


def parse_only(block: Block) -> None:
    """Check a ``parse-only`` example as far as it can be without a stack or AWS.

    Python is compiled; every command is parsed by fanfit's parser, and ``estimate`` and
    ``train`` commands on local data run with ``--dry-run`` (which touches no stack).
    """
    if block.lang == "python":
        compile(block.code, block.where, "exec")
        return
    from fanfit.cli import build_parser

    for command in commands(block):
        where = f"{block.where}: $ fanfit {command.text}"
        try:
            args = build_parser().parse_args(command.argv)
        except SystemExit as exc:
            raise AssertionError(f"{where}: fanfit's parser rejects it (exit {exc.code})") from exc
        data = getattr(args, "data", None)
        if args.command in ("estimate", "train") and data and not str(data).startswith("s3://"):
            code, out, err = run_cli([*command.argv, "--dry-run"])
            assert code == 0, f"{where} --dry-run: exited {code}\n{out}{err}"


def job_ids(text: str) -> list[str]:
    """The job ids in a text, in order."""
    return JOB_ID.findall(text)


def workdir(path: Path) -> Path:
    """Make ``path`` a working directory for the examples: a link ``examples`` in it to the
    project's examples makes their relative paths (``examples/data/sipp1991.dta``) work, and what
    they write lands in ``path``."""
    link = path / "examples"
    if not link.exists():
        link.symlink_to(ROOT / "examples", target_is_directory=True)
    return path


def documents() -> list[Path]:
    """The guide's documents, ``index.md`` first, then in reading order, then any others."""
    order = ["index.md", "estimate.md", "train.md", "python.md", "doubleml.md", "cli.md",
             "deploy.md", "local.md", "limits.md", "architecture.md"]  # fmt: skip
    found = {p.name: p for p in DOCS.glob("*.md")}
    return [found[n] for n in order if n in found] + [
        found[n] for n in sorted(found) if n not in order
    ]
