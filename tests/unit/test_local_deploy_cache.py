"""The local deploy's record: a command on a running, unchanged stack reads no EC2 and no files.

GIVEN a template with one function directory and a running (fake) local stack, WHEN
:meth:`fanfit.local.deploy.Deployer.run` runs again, THEN the stack's own parameters and the
fingerprint come from the deploy record; a changed file or a restarted stack reads them again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fanfit.local import deploy
from fanfit.local.process import StackInfo

TEMPLATE = """\
Parameters:
  BatchSubnetIds:
    Type: String
Resources:
  Fit:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/fit/
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A template, its function's code, and counters of what a run reads and does."""
    (tmp_path / "functions" / "fit").mkdir(parents=True)
    (tmp_path / "functions" / "fit" / "app.py").write_text("x = 1\n")
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    calls = {"ec2": 0, "build": 0, "fingerprint": 0}

    def batch(info, template):
        calls["ec2"] += 1
        return {"BatchSubnetIds": "subnet-1"}

    real_fingerprint = deploy.fingerprint

    def counted_fingerprint(template, parameters=None):
        calls["fingerprint"] += 1
        return real_fingerprint(template, parameters)

    def build(self, digest, force=False):
        calls["build"] += 1
        return tmp_path / "build"

    monkeypatch.setattr(deploy, "local_batch_parameters", batch)
    monkeypatch.setattr(deploy, "fingerprint", counted_fingerprint)
    monkeypatch.setattr(deploy.Deployer, "build", build)
    monkeypatch.setattr(deploy.Deployer, "deploy_built", lambda self, built: None)
    monkeypatch.setattr(deploy.Deployer, "outputs", lambda self: {"DataBucketName": "b"})
    return {"root": tmp_path, "calls": calls}


def _info(root: Path, started_at: float = 1.0) -> StackInfo:
    return StackInfo(pid=1, port=4566, endpoint="http://127.0.0.1:4566", region="us-east-1",
                     state_dir=str(root / "state"), log_file=str(root / "log"),
                     started_at=started_at)  # fmt: skip


def test_an_unchanged_stack_reads_its_parameters_and_fingerprint_from_the_record(project) -> None:
    root, calls = project["root"], project["calls"]
    # GIVEN a first run that built and deployed
    assert deploy.Deployer(_info(root), root / "template.yaml").run() == {"DataBucketName": "b"}
    assert calls == {"ec2": 1, "build": 1, "fingerprint": 1}
    # WHEN the next command runs on the same stack with the same files
    deployer = deploy.Deployer(_info(root), root / "template.yaml")
    deployer.run()
    # THEN it neither read EC2 nor hashed the files nor built, and used the same parameters
    assert calls == {"ec2": 1, "build": 1, "fingerprint": 1}
    assert deployer.parameters == {"BatchSubnetIds": "subnet-1"}


def test_a_changed_file_or_a_restarted_stack_is_read_again(project) -> None:
    root, calls = project["root"], project["calls"]
    deploy.Deployer(_info(root), root / "template.yaml").run()
    # GIVEN a function file changed (another size and modification time)
    app = root / "functions" / "fit" / "app.py"
    app.write_text("x = 22\n")
    os.utime(app, ns=(1, 1))
    # WHEN the next command runs THEN the files are hashed again and the build runs
    deploy.Deployer(_info(root), root / "template.yaml").run()
    assert calls == {"ec2": 1, "build": 2, "fingerprint": 2}
    # GIVEN a restarted stack WHEN a command runs THEN the stack's parameters are read again
    deploy.Deployer(_info(root, started_at=2.0), root / "template.yaml").run()
    assert calls["ec2"] == 2 and calls["build"] == 3


def test_a_run_that_trusts_the_record_asks_the_stack_nothing(project, monkeypatch) -> None:
    root, calls = project["root"], project["calls"]
    deploy.Deployer(_info(root), root / "template.yaml").run()
    # GIVEN a stack that would answer DescribeStacks differently
    monkeypatch.setattr(deploy.Deployer, "outputs", lambda self: pytest.fail("asked the stack"))
    # WHEN the next command trusts the record THEN it gets the recorded outputs, nothing built
    outputs = deploy.Deployer(_info(root), root / "template.yaml").run(verify=False)
    assert outputs == {"DataBucketName": "b"} and calls["build"] == 1
