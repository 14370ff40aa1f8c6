"""Fixtures of the integration tests: one local stack per test session, the project deployed into it.

The stack runs in a state dir of its own (``FANFIT_HOME`` is set to it for the session, so
``fanfit.local.status()``, ``Client.local_stack()`` and the CLI in a subprocess find it), on a free
port, and is stopped when the session ends. It needs ``make install-local``
(``scripts/install_local_stack.sh``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fanfit.local.deploy import Deployer
from fanfit.local.stack import LocalStack, StackInfo

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """A running local stack for the whole session (started here, stopped at the end)."""
    home = tmp_path_factory.mktemp("fanfit-home")
    patch = pytest.MonkeyPatch()
    patch.setenv("FANFIT_HOME", str(home))
    stack = LocalStack(root=ROOT, home=home)
    started = time.perf_counter()
    info = stack.start()
    print(f"\nlocal stack up in {time.perf_counter() - started:.1f} s at {info.endpoint}")
    try:
        yield info
    finally:
        stack.stop()
        patch.undo()


@pytest.fixture(scope="session")
def local_stack_env(local_stack: StackInfo) -> dict[str, str]:
    """Environment for a subprocess (the CLI) that must use the session's stack."""
    env = dict(os.environ)
    env.update(local_stack.client_env())
    env["FANFIT_HOME"] = local_stack.state_dir
    return env


@pytest.fixture(scope="session")
def fanfit_outputs(local_stack: StackInfo) -> dict[str, str]:
    """The project's ``template.yaml`` deployed as stack ``fanfit``; its outputs."""
    deployer = Deployer(local_stack, ROOT / "template.yaml")
    outputs = deployer.run()
    print(f"\nfanfit deployed: {deployer.timings}")
    return outputs


@pytest.fixture(scope="session")
def local_client(fanfit_outputs: dict[str, str]) -> Any:
    """A :class:`fanfit.client.Client` of the deployed project on the session's stack."""
    from fanfit.client import Client

    return Client.local_stack()
