"""A local stack that a command starts stays up for the next command (issue 13, item 4).

GIVEN a fake LocalStack process (no LocalStack is started) WHEN a command's block runs in
:func:`fanfit.local.stack.ensure_local_stack` THEN a stack it started is left running with one line
on stderr that says where and how to stop it, and a stack that was running is left as it was.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fanfit.local import stack as local_stack
from fanfit.local.process import StackInfo

INFO = StackInfo(
    pid=4242,
    port=4566,
    endpoint="http://127.0.0.1:4566",
    region="us-east-1",
    state_dir="/tmp/fanfit-state",
    log_file="/tmp/fanfit-state/localstack.log",
    started_at=0.0,
)


class FakeLocalStack:
    """Records start and stop; ``already`` is the stack that runs before the command."""

    already: StackInfo | None = None
    calls: list[str] = []

    def __init__(self, root=None, home=None) -> None:
        self.root = Path("/tmp/fanfit-project")

    def running(self) -> StackInfo | None:
        return type(self).already

    def start(self, timeout_s: float = 0.0) -> StackInfo:
        type(self).calls.append("start")
        type(self).already = INFO
        return INFO

    def stop(self) -> bool:
        type(self).calls.append("stop")
        type(self).already = None
        return True


class FakeDeployer:
    def __init__(self, info, template) -> None:
        self.info = info

    def run(self, force: bool = False, verify: bool = True) -> dict:
        FakeLocalStack.calls.append("deploy" if verify else "deploy from the record")
        return {}


@pytest.fixture()
def fake_stack(monkeypatch):
    FakeLocalStack.already = None
    FakeLocalStack.calls = []
    monkeypatch.setattr(local_stack, "LocalStack", FakeLocalStack)
    monkeypatch.setattr(local_stack, "Deployer", FakeDeployer)
    return FakeLocalStack


def test_a_stack_a_command_starts_keeps_running_and_says_how_to_stop_it(fake_stack, capsys):
    # GIVEN no local stack running
    # WHEN a command runs in ensure_local_stack (twice: the second command finds the first's stack)
    with local_stack.ensure_local_stack() as info:
        assert info == INFO
    with local_stack.ensure_local_stack() as again:
        assert again == INFO
    # THEN it was started and deployed once, never stopped
    assert fake_stack.calls == ["start", "deploy", "deploy"]
    assert fake_stack.already == INFO
    # AND one line on stderr (none on stdout) names the endpoint and `fanfit local down`
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert lines == [local_stack.KEPT_RUNNING.format(endpoint=INFO.endpoint)]
    assert "http://127.0.0.1:4566" in lines[0] and "fanfit local down" in lines[0]


def test_a_stack_a_command_starts_is_left_running_when_the_command_fails(fake_stack, capsys):
    # GIVEN no local stack running WHEN the command's block raises
    with pytest.raises(RuntimeError, match="job failed"), local_stack.ensure_local_stack():
        raise RuntimeError("job failed")
    # THEN the stack still runs (its records hold the failure) and the line was said
    assert fake_stack.calls == ["start", "deploy"]
    assert "fanfit local down" in capsys.readouterr().err


def test_keep_running_false_stops_the_stack_it_started(fake_stack, capsys):
    # GIVEN no local stack running WHEN a block asks not to keep it
    with local_stack.ensure_local_stack(deploy=False, keep_running=False):
        pass
    # THEN it is stopped again, silently
    assert fake_stack.calls == ["start", "stop"]
    assert capsys.readouterr().err == ""


def test_a_running_stack_is_used_silently_and_left_running(fake_stack, capsys):
    # GIVEN a local stack already running
    fake_stack.already = INFO
    # WHEN a command runs in ensure_local_stack
    with local_stack.ensure_local_stack(deploy=False):
        pass
    # THEN nothing starts or stops it, and nothing is said
    assert fake_stack.calls == []
    assert capsys.readouterr().err == ""


def test_the_cli_client_opener_leaves_the_stack_it_started_running(fake_stack, monkeypatch, capsys):
    # GIVEN the CLI without --stack and no local stack running
    from fanfit.cli import common
    from fanfit.client import Client

    monkeypatch.setattr(Client, "local_stack", classmethod(lambda cls: "client"))
    args = argparse.Namespace(stack=None, region=None)
    # WHEN a command opens its client and ends
    with common.open_client(args) as client:
        assert client == "client"
    # THEN the stack keeps running for the next command, and stderr says how to stop it
    assert "stop" not in fake_stack.calls
    assert fake_stack.already == INFO
    assert "fanfit local down" in capsys.readouterr().err


def test_the_cli_client_opener_deploys_again_when_the_recorded_stack_is_gone(
    fake_stack, monkeypatch
):
    # GIVEN a running local stack whose deploy record names a stack the client cannot read once
    from fanfit import errors
    from fanfit.cli import common
    from fanfit.client import Client
    from fanfit.local import deploy

    fake_stack.already = INFO
    answers = [errors.StackError("cannot read stack 'fanfit'"), "client"]

    def local(cls):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(Client, "local_stack", classmethod(local))
    forced = []
    monkeypatch.setattr(deploy, "deploy", lambda **kw: forced.append(kw))
    # WHEN a command opens its client
    with common.open_client(argparse.Namespace(stack=None, region=None)) as client:
        assert client == "client"
    # THEN the record was trusted first, and the project deployed again once the stack was missing
    assert fake_stack.calls == ["deploy from the record"]
    assert forced == [{"force": True}]
