"""``fanfit local up | status``: a few lines for a person, the whole record with ``--output json``.

GIVEN a recorded local stack (this test's own process stands in for LocalStack: its pid is alive,
nothing listens on its port) and the deploy record a ``fanfit local up`` leaves, WHEN ``fanfit
local status`` or ``up`` prints, THEN the lines name the endpoint, the state directory, whether
the limits apply, whether the project is deployed and how to stop the stack, and ``--output json``
holds every field (outputs included).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fanfit.cli import main
from fanfit.cli.local import STOP_HINT, format_local
from fanfit.local import process

STARTED_AT = 1_764_000_000.0
OUTPUTS = {
    "DataBucketName": "fanfit-data-000000000000-us-east-1",
    "EstimateStateMachineArn": "arn:x",
}


def _record_stack(home: Path, deployed_into: float | None) -> None:
    """A state file naming this process as the stack, cgroup limits reported as applied, and
    (unless ``deployed_into`` is None) a deploy record into the run started at that time."""
    info = {"pid": os.getpid(), "port": 9, "endpoint": "http://127.0.0.1:9", "region": "us-east-1",
            "state_dir": str(home), "log_file": str(home / "localstack.log"),
            "started_at": STARTED_AT}  # fmt: skip
    (home / process.STATE_FILE).write_text(json.dumps(info))
    limits = {"pid": os.getpid(), "mode": "v1", "apply": True,
              "summary": "cgroup v1: cpu and memory per environment under /x/fanfit-lambda"}  # fmt: skip
    (home / process.LIMITS_FILE).write_text(json.dumps(limits))
    if deployed_into is not None:
        record = home / "deploy" / "fanfit" / "deployed.json"
        record.parent.mkdir(parents=True)
        record.write_text(json.dumps({"localstack_started_at": deployed_into,
                                      "endpoint": "http://127.0.0.1:9", "outputs": OUTPUTS,
                                      "deployed_at": STARTED_AT + 60.0, "fingerprint": "f"}))  # fmt: skip


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("FANFIT_HOME", str(home))
    return home


def test_status_prints_a_few_lines_a_person_reads(home, capsys) -> None:
    # GIVEN a running stack into which the project was deployed
    _record_stack(home, deployed_into=STARTED_AT)
    # WHEN `fanfit local status` runs
    code = main(["local", "status"])
    lines = capsys.readouterr().out.splitlines()
    # THEN it exits 0 with six lines: endpoint, state dir, log, limits, deployment, how to stop
    assert code == 0
    assert lines[0].startswith(f"local stack: running at http://127.0.0.1:9 (pid {os.getpid()}, ")
    assert lines[1] == f"state directory: {home}"
    assert lines[2] == f"log: {home / 'localstack.log'}"
    assert (
        lines[3]
        == "limits: applied (cgroup v1: cpu and memory per environment under /x/fanfit-lambda)"
    )
    assert lines[4] == (
        "stack fanfit: deployed at 2025-11-24 16:01:00 UTC, 2 outputs (--output json lists them)"
    )
    assert lines[5] == STOP_HINT
    assert len(lines) == 6
    # ... and no dict of LocalStack's services or outputs
    assert "{" not in "\n".join(lines)


def test_status_as_json_is_the_whole_record(home, capsys) -> None:
    # GIVEN the same stack WHEN `fanfit local status --output json` runs
    _record_stack(home, deployed_into=STARTED_AT)
    main(["local", "status", "--output", "json"])
    record = json.loads(capsys.readouterr().out)
    # THEN one object holds every field, the outputs and the limits included
    assert record["running"] is True and record["deployed"] is True
    assert record["outputs"] == OUTPUTS and record["stack_name"] == "fanfit"
    assert record["endpoint"] == "http://127.0.0.1:9" and record["state_dir"] == str(home)
    assert record["limits_apply"] is True and record["deployed_at"] == STARTED_AT + 60.0


def test_a_deploy_into_an_earlier_run_of_the_stack_is_not_deployed(home, capsys) -> None:
    # GIVEN a deploy record of an earlier run (a restart keeps no CloudFormation stack)
    _record_stack(home, deployed_into=STARTED_AT - 3600.0)
    # WHEN `fanfit local status` runs THEN it says the project is not deployed, and how to deploy
    main(["local", "status"])
    out = capsys.readouterr().out
    assert "stack fanfit: not deployed (fanfit local up deploys it)" in out.splitlines()


def test_no_stack_says_how_to_start_one_and_exits_1(home, capsys) -> None:
    # GIVEN no recorded stack WHEN `fanfit local status` runs
    code = main(["local", "status"])
    # THEN it exits 1 with the state directory and how to start one
    assert code == 1
    assert capsys.readouterr().out.splitlines() == [
        "local stack: not running",
        f"state directory: {home}",
        "start it with: fanfit local up",
    ]


def test_up_prints_its_start_and_deploy_times(monkeypatch, capsys) -> None:
    # GIVEN `up`'s record of a start and a deploy, without limits (no cgroups here)
    from fanfit.local import stack

    record = {"running": True, "healthy": True, "state_dir": "/s", "pid": 7, "port": 5,
              "endpoint": "http://127.0.0.1:5", "log_file": "/s/localstack.log",
              "services": {"s3": "running", "lambda": "available"}, "outputs": OUTPUTS,
              "limits": "none: no cgroup v2 mounted", "limits_apply": False,
              "stack_name": "fanfit", "deployed": True,
              "timings": {"start_s": 2.14, "build_s": 20.0, "total_s": 46.25}}  # fmt: skip
    monkeypatch.setattr(stack, "up", lambda: record)
    # WHEN `fanfit local up` prints
    assert main(["local", "up"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # THEN the start time, the missing limits and the deploy time are said, the services are not
    assert (
        lines[0] == "local stack: running at http://127.0.0.1:5 (pid 7, healthy, started in 2.1 s)"
    )
    assert lines[3] == (
        "limits: not applied, functions run without CPU or memory limits "
        "(none: no cgroup v2 mounted)"
    )
    assert lines[4] == "stack fanfit: deployed in 46.2 s, 2 outputs (--output json lists them)"
    assert not any("running'" in line or "available" in line for line in lines)


def test_limits_not_reported_yet_are_said_so() -> None:
    # GIVEN a running stack whose executor has not reported limits WHEN formatted
    text = format_local({"running": True, "healthy": True, "endpoint": "e", "pid": 1,
                         "uptime_s": 3.0, "state_dir": "/s"})  # fmt: skip
    # THEN the limits line says they are not known yet, and the stack is not deployed
    assert "limits: not reported yet (the first Lambda environment reports them)" in text
    assert "stack fanfit: not deployed (fanfit local up deploys it)" in text
