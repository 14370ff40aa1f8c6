"""fanfit.local.deploy.load_template: one YAML loader for the deploy (local paths) and the tests
that read the template's ``!Ref`` s (tests/integration/test_layer_budget.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fanfit.errors import StackError
from fanfit.local.deploy import load_template, local_paths

ROOT = Path(__file__).resolve().parents[2]

TEMPLATE = """\
Transform: AWS::Serverless-2016-10-31
Globals:
  Function:
    Layers:
      - !Ref SharedLayer
Resources:
  SharedLayer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: layer/
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: code/
      Role: !GetAtt FnRole.Arn
      Environment:
        Variables:
          BUCKET: !Sub "${AWS::StackName}-data"
          PICK: !If [IsLocal, !Ref LocalName, {"Fn::Sub": "x"}]
          JOINED: !Join
            - "-"
            - [a, !Ref Name]
"""


def test_tags_read_as_their_long_form_and_paths_are_still_found(tmp_path: Path) -> None:
    # GIVEN a template with short-form tags (scalar, nested list, mapping) and two local paths
    (tmp_path / "layer").mkdir()
    (tmp_path / "code").mkdir()
    path = tmp_path / "template.yaml"
    path.write_text(TEMPLATE)
    # WHEN it is loaded
    doc = load_template(path)
    # THEN !Ref X is {"Ref": X} and every other tag is {"Fn::<tag>": value}, built in full
    assert doc["Globals"]["Function"]["Layers"] == [{"Ref": "SharedLayer"}]
    props = doc["Resources"]["Fn"]["Properties"]
    assert props["Role"] == {"Fn::GetAtt": "FnRole.Arn"}
    env = props["Environment"]["Variables"]
    assert env["BUCKET"] == {"Fn::Sub": "${AWS::StackName}-data"}
    assert env["PICK"] == {"Fn::If": ["IsLocal", {"Ref": "LocalName"}, {"Fn::Sub": "x"}]}
    assert env["JOINED"] == {"Fn::Join": ["-", ["a", {"Ref": "Name"}]]}
    # AND the deploy still finds the local paths the template names
    assert local_paths(path) == [tmp_path / "code", tmp_path / "layer"]


def test_the_projects_template_names_every_function_and_layer() -> None:
    # GIVEN the project's template WHEN its local paths are read THEN every functions/ directory
    # with an app.py, both layers and both state machine definitions are among them
    found = {p.relative_to(ROOT).as_posix() for p in local_paths(ROOT / "template.yaml")}
    functions = {p.parent.relative_to(ROOT).as_posix() for p in ROOT.glob("functions/*/app.py")}
    assert functions <= found
    assert {"layers/fanfit", "layers/scientific", "orchestrator/estimate.asl.json",
            "orchestrator/train.asl.json"} <= found  # fmt: skip
    # AND the layers every function gets are Refs to layer resources of the template
    doc = load_template(ROOT / "template.yaml")
    for layer in doc["Globals"]["Function"]["Layers"]:
        assert doc["Resources"][layer["Ref"]]["Type"] == "AWS::Serverless::LayerVersion"


def test_a_file_that_is_not_a_template_is_a_stack_error(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("just: a mapping\n")
    with pytest.raises(StackError, match="no Resources section"):
        load_template(path)
    with pytest.raises(StackError, match="cannot read the template"):
        load_template(tmp_path / "missing.yaml")
