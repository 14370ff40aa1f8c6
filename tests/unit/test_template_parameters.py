"""template.yaml as `sam deploy --guided` offers it: defaults, the optional GPU worker, bounded runs,
retention, memory parameters and the client policy; the ASL as CloudFormation renders it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fanfit import limits, storage

ROOT = Path(__file__).resolve().parents[2]
MACHINES = {"EstimateStateMachine": "estimate", "TrainStateMachine": "train"}
#: Resource types that only the GPU worker needs.
GPU_TYPES = ("AWS::Batch::", "AWS::EC2::", "AWS::ECR::")


@pytest.fixture(scope="module")
def template() -> dict:
    from cfnlint.decode import decode

    tpl, matches = decode(str(ROOT / "template.yaml"))
    assert not matches, matches
    return tpl


def _refs(node: Any) -> set[str]:
    """Logical ids a template node names with Ref, GetAtt or ${X} in a Sub."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                found.add(value)
            elif key == "Fn::GetAtt":
                found.add(value[0] if isinstance(value, list) else value.split(".")[0])
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) else value
                found |= {m.split(".")[0] for m in re.findall(r"\$\{([\w.:]+)\}", text)}
                if isinstance(value, list):
                    found |= _refs(value[1])
            elif key == "Fn::If":
                continue  # a reference inside Fn::If is guarded by its condition
            else:
                found |= _refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value)
    return found


def test_every_parameter_has_a_default(template):
    # GIVEN the template's parameters WHEN `sam deploy --guided` offers them THEN each has a default
    missing = [n for n, p in template["Parameters"].items() if "Default" not in p]
    assert not missing
    params = template["Parameters"]
    assert params["EnableGpuWorker"]["Default"] == "false"
    assert sorted(params["EnableGpuWorker"]["AllowedValues"]) == ["false", "true"]
    # ... and the defaults of the GPU worker's network and image pass their own patterns
    assert re.fullmatch(params["GpuWorkerImageUri"]["AllowedPattern"], "")
    assert params["BatchSubnetIds"]["Type"] == "CommaDelimitedList"


def test_every_gpu_worker_resource_and_output_has_the_condition(template):
    # GIVEN the resources only the GPU worker needs (Batch, EC2, ECR, its IAM roles and watcher)
    resources = template["Resources"]
    gpu = {
        name
        for name, res in resources.items()
        if res["Type"].startswith(GPU_TYPES)
        or name in {"BatchServiceRole", "GpuInstanceRole", "GpuInstanceProfile", "GpuWorkerJobRole",
                    "WatchGpuJobFunction", "WatchGpuJobFunctionLogGroup"}
    }  # fmt: skip
    assert {"GpuComputeEnvironment", "GpuJobQueue", "GpuWorkerJobDefinition"} <= gpu
    # THEN each has Condition GpuWorkerEnabled
    assert all(resources[n].get("Condition") == "GpuWorkerEnabled" for n in gpu), [
        n for n in gpu if resources[n].get("Condition") != "GpuWorkerEnabled"
    ]
    # ... a resource without it names none of them outside an Fn::If
    for name, res in resources.items():
        if name not in gpu:
            assert not (_refs(res) & gpu), (name, _refs(res) & gpu)
    # ... and so does an output that names one, while GpuWorkerEnabled says which it is
    for name, out in template["Outputs"].items():
        if _refs(out) & gpu:
            assert out.get("Condition") == "GpuWorkerEnabled", name
    assert template["Outputs"]["GpuWorkerEnabled"]["Value"] == {
        "Fn::If": ["GpuWorkerEnabled", "true", "false"]
    }


def _render(template: dict, machine: str, **values: Any) -> dict:
    """The machine's definition as CloudFormation renders it: each DefinitionSubstitution replaced
    by its value (an Fn::If by its branch for ``values['gpu']``; a Sub with the parameters)."""
    props = template["Resources"][machine]["Properties"]
    params = {n: str(values.get(n, p.get("Default"))) for n, p in template["Parameters"].items()}
    gpu = params["EnableGpuWorker"] == "true"
    text = (ROOT / props["DefinitionUri"]).read_text()
    for key, value in props["DefinitionSubstitutions"].items():
        if isinstance(value, dict) and "Fn::If" in value:
            value = value["Fn::If"][1 if gpu else 2]
        if isinstance(value, dict) and "Fn::Sub" in value:
            sub, names = value["Fn::Sub"], dict(params)
            if isinstance(sub, list):  # [text, {name: Fn::Select [i, Ref list parameter]}]
                sub, variables = sub
                for name, select in variables.items():
                    i, ref = select["Fn::Select"]
                    names[name] = params[ref["Ref"]].split(",")[i]
            value = re.sub(r"\$\{(\w+)\}", lambda m, names=names: names[m.group(1)], sub)
        if isinstance(value, dict):
            value = f"arn:aws:test:{key}"  # a Ref or GetAtt: an ARN or name
        text = text.replace("${" + key + "}", str(value))
    return json.loads(text)


def _tasks(states: dict[str, Any]):
    for name, state in states.items():
        if state["Type"] == "Task":
            yield name, state
        if state["Type"] == "Map":
            yield from _tasks(state["ItemProcessor"]["States"])


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("gpu", ["true", "false"])
def test_the_rendered_definition_is_json_with_a_timeout_on_the_machine_and_every_task(
    template, machine, gpu
):
    # GIVEN the definition as CloudFormation renders it, with a JobTimeoutSeconds of 600 (and a
    # ClientTimeoutSeconds of 120)
    definition = _render(
        template, machine, JobTimeoutSeconds=600, ClientTimeoutSeconds=120, EnableGpuWorker=gpu
    )
    # THEN it is JSON whose top level and every Task state (in the Map too) time out after 600 s,
    # but for the waits for the client (a client-inputs model's callbacks), after 120 s
    assert definition["TimeoutSeconds"] == 600
    tasks = dict(_tasks(definition["States"]))
    waits = {n for n, s in tasks.items() if s["Resource"].endswith(".waitForTaskToken")}
    assert waits == (
        {"Wait for the client's inputs of the stage", "Wait for the client's estimate"}
        if machine == "EstimateStateMachine"
        else set()
    )
    assert tasks and all(s["TimeoutSeconds"] == 600 for n, s in tasks.items() if n not in waits)
    assert all(tasks[n]["TimeoutSeconds"] == 120 for n in waits)
    # ... the splice left nothing but valid fields: comments end where they should
    assert "${" not in json.dumps(definition)
    assert all(s["QueryLanguage"] == "JSONPath" for s in tasks.values())
    assert template["Parameters"]["JobTimeoutSeconds"]["Default"] == 4 * 3600


def test_the_raw_definitions_are_valid_json():
    # GIVEN the ASL files as committed (`python -m json.tool` in make lint) THEN they parse
    for name in MACHINES.values():
        json.loads((ROOT / "orchestrator" / f"{name}.asl.json").read_text())


def test_the_gpu_watcher_gets_the_runnable_timeout(template):
    res = template["Resources"]["WatchGpuJobFunction"]["Properties"]
    env = res["Environment"]["Variables"]
    assert env["FANFIT_GPU_RUNNABLE_TIMEOUT_S"] == {"Ref": "GpuRunnableTimeoutSeconds"}
    assert template["Parameters"]["GpuRunnableTimeoutSeconds"]["Default"] == 15 * 60


def test_the_lifecycle_rules_expire_every_object_of_a_job(template):
    # GIVEN the bucket's lifecycle rules and the keys fanfit.storage writes for a job
    rules = template["Resources"]["DataBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    expiring = [r for r in rules if r.get("ExpirationInDays") == {"Ref": "JobRetentionDays"}]
    assert template["Parameters"]["JobRetentionDays"]["Default"] == 30
    keys = [
        storage.spec_key("j1"),
        storage.input_folds_key("j1"),
        storage.input_init_key("j1"),
        storage.result_key("j1"),
        storage.preds_key("j1", 0, "s0"),
        storage.data_key("0" * 64),  # the uploaded data
    ]
    # THEN each key lies under the prefix of a rule that expires it and its old versions
    for key in keys:
        rule = [r for r in expiring if key.startswith(r["Prefix"])]
        assert rule, key
        assert rule[0]["NoncurrentVersionExpiration"]["NoncurrentDays"] >= 1
        assert rule[0]["Status"] == "Enabled"


def test_prepare_and_aggregate_memory_come_from_parameters_named_in_the_limit_error(template):
    res = template["Resources"]
    for function, parameter in limits.MEMORY_PARAMETERS.items():
        logical = {
            "TrainShardSmall": "TrainShardSmallFunction",
            "TrainShardLarge": "TrainShardLargeFunction",
        }.get(function, f"{function}Function")
        # GIVEN each function whose memory a parameter sets THEN its MemorySize is that parameter
        memory = res[logical]["Properties"]["MemorySize"]
        if function == "CrossFit":
            # the first (default) of the CrossFit functions' sizes
            assert memory == {"Fn::Select": [0, {"Ref": parameter}]}, function
        else:
            assert memory == {"Ref": parameter}, function
        assert parameter in template["Parameters"]
    # WHEN Aggregate's data would not fit THEN the error names AggregateMemorySize
    with pytest.raises(limits.LambdaLimitError, match="AggregateMemorySize=") as info:
        limits.check_memory(2_000 * 2**20, 1769, function="Aggregate")
    assert "sam deploy --parameter-overrides" in str(info.value)


def _statements(template: dict) -> list[dict]:
    doc = template["Resources"]["ClientPolicy"]["Properties"]["PolicyDocument"]
    out = []
    for stmt in doc["Statement"]:
        if "Fn::If" in stmt:
            condition = stmt["Fn::If"][0]
            assert condition in ("GpuWorkerEnabled", "HasExternalDataBucket")
            only = "gpu_only" if condition == "GpuWorkerEnabled" else "external_only"
            out.append({**stmt["Fn::If"][1], only: True})
        else:
            out.append(stmt)
    return out


def _actions(stmt: dict) -> list[str]:
    return stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]


def test_the_client_policy_names_this_stacks_resources_only(template):
    # GIVEN the client policy's statements
    statements = _statements(template)
    by_action = {a: s for s in statements for a in _actions(s)}
    # THEN it runs, watches and cancels executions of this stack's two state machines
    for action in ("states:StartExecution", "states:DescribeExecution", "states:StopExecution",
                   "states:GetExecutionHistory"):  # fmt: skip
        text = json.dumps(by_action[action]["Resource"])
        assert "${AWS::StackName}-estimate" in text and "${AWS::StackName}-train" in text, action
    # ... reads and deletes objects under jobs/ and data/ of its bucket only
    s3 = by_action["s3:DeleteObject"]["Resource"]
    assert s3 == [{"Fn::Sub": "${DataBucket.Arn}/jobs/*"}, {"Fn::Sub": "${DataBucket.Arn}/data/*"}]
    # ... uses its job and partition tables, reads its stack
    assert by_action["dynamodb:DeleteItem"]["Resource"] in (
        {"Fn::GetAtt": ["JobTable", "Arn"]},
        {"Fn::GetAtt": ["PartitionTable", "Arn"]},
        {"Fn::GetAtt": ["PartitionHistoryTable", "Arn"]},
    )
    assert by_action["dynamodb:BatchGetItem"]["Resource"] == {
        "Fn::GetAtt": ["PartitionHistoryTable", "Arn"]
    }
    assert by_action["cloudformation:DescribeStacks"]["Resource"] == {"Ref": "AWS::StackId"}
    # ... touches Batch only with the GPU worker
    assert by_action["batch:TerminateJob"].get("gpu_only") and by_action["batch:DescribeJobs"].get(
        "gpu_only"
    )
    # ... and names "*" only for batch:DescribeJobs and for resuming or failing a job that waits
    # for the client (states:SendTaskSuccess/Failure): no resource-level permissions
    for stmt in statements:
        if stmt["Resource"] == "*":
            assert _actions(stmt) in (
                ["batch:DescribeJobs"],
                ["states:SendTaskSuccess", "states:SendTaskFailure"],
            )
        assert stmt["Effect"] == "Allow"
    assert template["Outputs"]["ClientPolicyArn"]["Value"] == {"Ref": "ClientPolicy"}
