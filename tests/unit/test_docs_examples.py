"""Every example of the user guide (docs/*.md) runs; the examples that need no stack run here.

GIVEN the guide's ``python`` and ``console`` blocks (extracted by ``docs/doc_examples.py``, whose
docstring states the conventions), WHEN the unmarked ones run in-process with boto3 and the local
stack made to fail if anything touches them, THEN they succeed and print what the guide shows;
``parse-only`` examples parse (and dry-run where they can); the ``needs: stack`` ones are left
to ``tests/integration/test_docs_examples_on_stack.py``. Also: the markers are known, console blocks run
only ``fanfit``, bash blocks never do, and every ``--flag`` the guide names exists (the
relative links and anchors: tests/unit/test_docs_links.py).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_helper():
    name = "fanfit_docs_examples"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "doc_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


dx = _load_helper()
DOCS = dx.documents()
DOC_IDS = [p.name for p in DOCS]
#: Flags of other tools the guide may name (sam, docker, aws, pytest).
EXTERNAL_FLAGS = frozenset(
    {"--guided", "--stack-name", "--resolve-s3", "--capabilities", "--parameter-overrides",
     "--repository-name", "--username", "--password-stdin", "--collect-only", "--lint"}
)  # fmt: skip
#: Pages that are not about running fanfit: the generated state machines, the benchmarks' table.
PAGES_WITHOUT_EXAMPLES = frozenset({"architecture.md", "benchmarks.md"})
BENCHMARKS = ROOT / "benchmarks"


def test_the_guide_has_its_documents() -> None:
    # GIVEN docs/ WHEN listed THEN every page the issue asks for is there
    names = set(DOC_IDS)
    for page in ("index", "install", "estimate", "train", "cli", "python", "doubleml", "deploy",
                 "local", "limits", "architecture", "benchmarks", "scheduling", "operations"):  # fmt: skip
        assert f"{page}.md" in names


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_examples_without_a_stack_run_and_print_what_the_guide_shows(
    doc, tmp_path, monkeypatch, no_aws
) -> None:
    # GIVEN a document's examples, run in a scratch dir that links the project's examples/
    monkeypatch.chdir(dx.workdir(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")  # argparse's --help wraps at the terminal's width
    namespace: dict = {"__name__": f"docs_{doc.stem}"}
    ran = 0
    for block in dx.examples(doc):
        # WHEN an unmarked example runs THEN it succeeds with the shown output
        if block.needs == "stack":
            continue
        if block.needs == "parse-only":
            dx.parse_only(block)
        elif block.lang == "python":
            dx.run_python(block, namespace)
        else:
            for command in dx.commands(block):
                assert "$" not in command.text, (
                    f"{block.where}: a variable in an example without a stack: {command.text}"
                )
                dx.check_command(command)
        ran += 1
    if doc.name not in PAGES_WITHOUT_EXAMPLES:
        assert ran, f"docs/{doc.name} has no example that runs without a stack"


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_blocks_follow_the_conventions(doc) -> None:
    # GIVEN a document WHEN its blocks are read THEN markers are known (blocks() raises otherwise),
    # console blocks hold `$ fanfit` commands only, and bash blocks never run fanfit
    for block in dx.blocks(doc):
        if block.lang == "console":
            assert dx.commands(block)
        elif block.lang == "bash":
            for line in block.code.splitlines():
                assert not re.match(r"^\s*(\$\s*)?fanfit\b", line), (
                    f"{block.where}: `fanfit` in a bash block is never checked; use a console block"
                )
        elif block.lang not in ("python", "text", "mermaid", "yaml", "json"):
            pytest.fail(f"{block.where}: a code block needs a language (got {block.lang!r})")


def test_examples_that_need_the_stack_are_few() -> None:
    # GIVEN every example WHEN counted THEN the integration test stays small: few stack examples,
    # and the `$JOB` they use is set by an earlier stack example
    python_blocks, commands, job_set = 0, 0, False
    for doc in DOCS:
        for block in dx.examples(doc):
            if block.needs != "stack":
                continue
            if block.lang == "python":
                python_blocks += 1
                job_set = job_set or "job_id" in block.code
            else:
                for command in dx.commands(block):
                    commands += 1
                    if "$JOB" in command.text:
                        assert job_set, f"{block.where}: $JOB before any stack example made a job"
                    job_set = job_set or command.argv[0] in ("estimate", "train")
    assert python_blocks <= 6 and commands <= 6, (python_blocks, commands)


def _parser_flags() -> set[str]:
    import argparse

    from fanfit.cli import build_parser

    flags: set[str] = set()
    todo = [build_parser()]
    while todo:
        parser = todo.pop()
        for action in parser._actions:
            flags.update(o for o in action.option_strings if o.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return flags


def _benchmark_flags() -> set[str]:
    """The ``--flags`` benchmarks/*.py define (``add_argument("--name"``)."""
    flags: set[str] = set()
    for script in BENCHMARKS.glob("*.py"):
        flags.update(re.findall(r"add_argument\(\s*\"(--[a-z0-9-]+)\"", script.read_text()))
    return flags


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_every_flag_the_guide_names_exists(doc) -> None:
    # GIVEN the --flags a document names outside bash blocks WHEN compared with fanfit's parsers
    # THEN each is one of fanfit's options or a named flag of another tool
    text = doc.read_text(encoding="utf-8")
    for block in dx.blocks(doc):
        if block.lang == "bash":
            text = text.replace(block.code, "")
    known = _parser_flags() | EXTERNAL_FLAGS
    if doc.name == "benchmarks.md":  # its commands run the benchmark scripts, with their flags
        known |= _benchmark_flags()
    named = set(re.findall(r"(?<![\w-])--[a-z][a-zA-Z0-9-]*", text))
    assert not named - known, f"docs/{doc.name} names options fanfit does not have: {named - known}"


@pytest.mark.parametrize(
    ("shown", "printed", "matches"),
    [
        # the PLR summary on two BLAS kernels (docs/doubleml.md): digits differ, text does not
        (
            "d  0.509  0.04  12.666  0.0  0.43  0.587",
            "d  0.51  0.04  12.688  0.0  0.431  0.589",
            True,
        ),
        ("coef ... done", "coef 0.5 and more done", True),  # doctest's ELLIPSIS first
        # numbers and an ellipsis that stands for text with numbers in it (a job id)
        ("d  0.509  0.43\nest-...", "d  0.51  0.431\nest-20261125-151554-7453e623", True),
        ("d  0.509  0.43\nest-...", "d  0.61  0.431\nest-20261125-151554-7453e623", False),
        ("d  0.509  0.04", "d  0.609  0.04", False),  # a number off by more than 2 %
        ("d  0.509  0.04", "x  0.509  0.04", False),  # other text
        ("d  0.509  0.04", "d  0.509  0.04  7", False),  # another count of numbers
        # an integer (a count, a seed, an id's digits) compares exactly: not within one unit,
        # nor within 2 %; a float keeps its tolerance
        ("seed 42", "seed 45", False),
        ("seed 42", "seed 43", False),
        ("seed 42", "seed 41", False),
        ("1000 rows", "1010 rows", False),
        ("n_obs 9915", "n_obs 9915", True),
        ("3 folds, coef 0.43", "3 folds, coef 0.431", True),
        ("3 folds, coef 0.43", "4 folds, coef 0.43", False),
        ("seed 42", "seed 42.0", False),
    ],
)
def test_shown_output_matches_within_the_number_tolerance(
    shown: str, printed: str, matches: bool
) -> None:
    # GIVEN a shown output and a printed one WHEN compared THEN only equal text with equal
    # integers and the other numbers within NUMBER_RTOL (or one unit of the shown last decimal)
    # matches
    assert dx.output_matches(shown, printed) is matches
