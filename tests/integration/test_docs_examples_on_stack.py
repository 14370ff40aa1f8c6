"""The user guide's examples that need the local stack run on it.

GIVEN the session's local stack with the project deployed (``local_client``), WHEN the examples
of docs/*.md marked ``<!-- needs: stack -->`` run in the guide's reading order (a document's
python blocks in order in one namespace, its unmarked ones included; ``$JOB`` the id of the last
job an earlier example printed), THEN each succeeds and prints what the guide shows. They are
few and small: one 2-fold x 1-repetition estimate with linear learners from the CLI and one from
Python (handed to DoubleML), one 3-round K-Means, ``fanfit status``, ``fanfit report`` and
``fanfit local status``. The conventions are in ``docs/doc_examples.py``; the examples that need
no stack run in ``tests/unit/test_docs_examples.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

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


def test_examples_that_need_the_stack_run(local_client, local_stack_env, tmp_path, monkeypatch):
    # GIVEN the session's stack (commands and Client.local_stack() find it through FANFIT_HOME)
    monkeypatch.setenv("FANFIT_HOME", local_stack_env["FANFIT_HOME"])
    monkeypatch.chdir(dx.workdir(tmp_path))
    variables: dict[str, str] = {}
    ran = 0
    for doc in dx.documents():
        examples = dx.examples(doc)
        if not any(block.needs == "stack" for block in examples):
            continue
        namespace: dict = {"__name__": f"docs_{doc.stem}"}
        for block in examples:
            if block.needs == "parse-only" or (block.lang == "console" and block.needs is None):
                continue  # parse-only: never run; unmarked commands: run by the unit tests
            # WHEN the example runs THEN it succeeds with the shown output
            if block.lang == "python":
                printed = dx.run_python(block, namespace)
            else:
                printed = ""
                for command in dx.commands(block):
                    argv = dx.expand(command.argv, variables, block.where)
                    printed += dx.check_command(command, argv)
            ids = dx.job_ids(printed)
            if ids:
                variables["JOB"] = ids[-1]
            ran += block.needs == "stack"
    assert ran >= 1
