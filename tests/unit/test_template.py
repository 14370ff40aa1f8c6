"""Static checks of template.yaml and the state machine definitions that cfn-lint cannot make."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def template() -> dict:
    from cfnlint.decode import decode

    tpl, matches = decode(str(ROOT / "template.yaml"))
    assert not matches, matches
    return tpl


@pytest.fixture(scope="module")
def asl() -> dict:
    return json.loads((ROOT / "orchestrator" / "estimate.asl.json").read_text())


MACHINES = {"EstimateStateMachine": "estimate", "TrainStateMachine": "train"}


@pytest.fixture(scope="module", params=sorted(MACHINES))
def machine(request, template) -> tuple[str, dict, dict]:
    """(resource name, its template properties, its definition) for each state machine."""
    props = template["Resources"][request.param]["Properties"]
    return request.param, props, json.loads((ROOT / props["DefinitionUri"]).read_text())


def _states(definition: dict):
    for name, state in definition["States"].items():
        yield name, state
        if state["Type"] == "Map":
            yield from _states(state.get("ItemProcessor") or state["Iterator"])


def test_every_substitution_in_the_definition_is_provided(machine):
    # GIVEN a state machine resource WHEN its definition names ${X} THEN DefinitionSubstitutions has X
    name, sm, _ = machine
    assert sm["DefinitionUri"] == f"orchestrator/{MACHINES[name]}.asl.json"
    text = (ROOT / sm["DefinitionUri"]).read_text()
    used = set(re.findall(r"\$\{(\w+)\}", text))
    assert used == set(sm["DefinitionSubstitutions"])


def test_every_state_is_reachable_and_every_transition_exists(machine):
    asl = machine[2]

    def check(definition: dict) -> None:
        names = set(definition["States"])
        targets = {definition["StartAt"]}
        for state in definition["States"].values():
            targets |= {state[k] for k in ("Next", "Default") if k in state}
            targets |= {c["Next"] for c in state.get("Choices", []) + state.get("Catch", [])}
            if state["Type"] == "Map":
                check(state["ItemProcessor"])
        assert targets == names

    check(asl)


def test_cross_fitting_is_a_distributed_map_reading_and_writing_s3(asl):
    m = asl["States"]["Cross-fit every shard of the wave"]
    assert m["Type"] == "Map"
    assert m["ItemProcessor"]["ProcessorConfig"]["Mode"] == "DISTRIBUTED"
    assert m["ItemReader"]["Resource"] == "arn:aws:states:::s3:getObject"
    assert m["ResultWriter"]["Resource"] == "arn:aws:states:::s3:putObject"
    assert "MaxConcurrencyPath" in m
    # the scheduler sizes every wave: the Map loops back to it until the stage has no units left
    assert m["Next"] == "Record the wave's throughput and size the next wave"
    again = asl["States"][m["Next"]]
    assert again["Parameters"]["FunctionName"] == "${ScheduleFunctionArn}"
    assert again["Next"] == "Is a wave of shards left to run?"


def test_every_lambda_task_retries_throttling_and_catches_or_ends_inside_a_map(machine):
    asl = machine[2]
    for name, state in _states(asl):
        if state.get("Resource") == "arn:aws:states:::lambda:invoke":
            retried = {e for r in state.get("Retry", []) for e in r["ErrorEquals"]}
            assert "Lambda.TooManyRequestsException" in retried, name
            assert "Lambda.ServiceException" in retried, name
            # a crashed or timed-out runtime is retried too: every handler is idempotent
            assert {"Lambda.Unknown", "Runtime.ExitError", "Sandbox.Timedout"} <= retried, name
            # a step still running for a stopped execution holds its idempotency record: the
            # resumed execution's same step waits for it and then gets its stored response
            # (WatchGpuJob only reads a Batch job: it keeps no idempotency record)
            if state["Parameters"].get("FunctionName") != "${WatchGpuJobFunctionArn}":
                assert "IdempotencyAlreadyInProgressError" in retried, name
    top = asl["States"]
    # the failure path itself: record the failure, then hand the job's partition back (Release),
    # which on its own failure still ends in the job's error
    failure_path = {
        "Record that the job failed",
        "Hand the job's partition back to the running jobs",
        # train: the stop marker that a DS-Sync segment's running workers read
        "Tell the job's running workers that it failed",
        # estimate: the stop marker that the wave's running CrossFit shards read
        "Tell the job's running shards that it failed",
    }
    # a failed Map of shards first names the shard that failed (estimate), then records the failure
    naming = "Name the shard that failed and its last error"
    for name, state in top.items():
        if state["Type"] in ("Task", "Map") and name not in failure_path:
            target = state["Catch"][0]["Next"]
            if state.get("Resource", "").endswith(".waitForTaskToken"):
                # a wait for the client: its timeout is first named by a Pass (ClientTimeoutError),
                # then recorded; any other error (the client's SendTaskFailure) is recorded as is
                first, last = state["Catch"][0], state["Catch"][-1]
                assert first["ErrorEquals"] == ["States.Timeout", "States.HeartbeatTimeout"], name
                assert top[target]["Type"] == "Pass" and top[target]["ResultPath"] == "$.error"
                assert top[target]["Parameters"]["Error"] == "ClientTimeoutError", name
                assert top[target]["Next"] == "Record that the job failed", name
                assert last["ErrorEquals"] == ["States.ALL"], name
                assert last["Next"] == "Record that the job failed", name
                assert "States.Timeout" not in {e for r in state["Retry"] for e in r["ErrorEquals"]}
                continue
            if target == naming:
                assert state["Type"] == "Map" and top[naming]["Catch"][0]["Next"] == (
                    "Record that the job failed"
                ), name
                continue
            assert target == "Record that the job failed", name
    release = top["Hand the job's partition back to the running jobs"]
    after_record = top["Record that the job failed"]["Next"]
    # the stop marker (train: a DS-Sync segment's workers; estimate: the wave's CrossFit shards)
    # is written between the record and the release; its own failure goes on to the release,
    # and the job's $.error is left as it was
    assert after_record in (
        "Tell the job's running workers that it failed",
        "Tell the job's running shards that it failed",
    )
    tell = top[after_record]
    assert (
        tell["Next"]
        == tell["Catch"][0]["Next"]
        == ("Hand the job's partition back to the running jobs")
    )
    assert tell["ResultPath"] is None and tell["Catch"][0]["ResultPath"] != "$.error"
    assert release["Parameters"]["FunctionName"] == "${ReleaseFunctionArn}"
    assert release["Next"] == release["Catch"][0]["Next"] == "The job failed"
    assert release["ResultPath"] is None  # the job's own $.error reaches the Fail state
    assert top["The job failed"]["ErrorPath"] == "$.error.Error"


def test_a_throttled_lambda_task_waits_with_bounded_backoff_then_fails(machine, template):
    from fanfit.jobs.states import THROTTLE_RETRY, throttle_wait_bound_s

    # GIVEN every Lambda Task of the state machine outside the failure path (which ends the job
    # quickly with its shorter policy)
    failure_path = {
        "Name the shard that failed and its last error",
        "Hand the job's partition back to the running jobs",
    }
    tasks = [
        (name, state)
        for name, state in _states(machine[2])
        if state.get("Resource") == "arn:aws:states:::lambda:invoke" and name not in failure_path
    ]
    assert len(tasks) >= 5
    for name, state in tasks:
        # THEN its first retrier takes Lambda's throttle alone, with THROTTLE_RETRY's backoff
        first = state["Retry"][0]
        assert first["ErrorEquals"] == ["Lambda.TooManyRequestsException"], name
        assert first["IntervalSeconds"] == THROTTLE_RETRY["interval_s"], name
        assert first["MaxAttempts"] == THROTTLE_RETRY["max_attempts"], name
        assert first["BackoffRate"] == THROTTLE_RETRY["backoff_rate"], name
        assert first["MaxDelaySeconds"] == THROTTLE_RETRY["max_delay_s"], name
        assert first["JitterStrategy"] == "FULL", name
        # ... and no later retrier takes it again (the first match wins; a second would be dead)
        assert all(
            "Lambda.TooManyRequestsException" not in r["ErrorEquals"] for r in state["Retry"][1:]
        ), name
    # AND a permanently throttled step gives up long before the default JobTimeoutSeconds
    # (4 h): 1+2+4+8+16 s, then 15 waits of 20 s
    assert throttle_wait_bound_s() == 331.0
    default_timeout = template["Parameters"]["JobTimeoutSeconds"]["Default"]
    assert throttle_wait_bound_s() < default_timeout / 10


def test_policies_name_their_resources(template):
    # Only actions that support no resource-level permissions may use "*": the CloudWatch
    # log-delivery actions and batch:DescribeJobs.
    for name, res in template["Resources"].items():
        for policy in res.get("Properties", {}).get("Policies", []):
            for stmt in policy.get("Statement", []) if isinstance(policy, dict) else []:
                if stmt.get("Resource") == "*":
                    actions = (
                        stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]
                    )
                    assert all(
                        a.startswith("logs:") or a == "batch:DescribeJobs" for a in actions
                    ), name


def test_every_map_item_can_run_on_lambda_or_the_gpu_worker(machine):
    # GIVEN each state machine's Map of shards WHEN an item's placement is "gpu"
    # THEN it goes to batch:submitJob with the GPU queue and job definition, then WatchGpuJob
    # checks the job until it ends (a Wait of poll_seconds between checks); else to Lambda
    _, _, asl = machine
    # (the train machine's other Map, DS-Sync's over the round's groups, runs TrainReduce only)
    maps = [
        s
        for _, s in _states(asl)
        if s["Type"] == "Map" and s.get("ItemsPath") != "$.schedule.groups"
    ]
    assert len(maps) == 1
    states = maps[0]["ItemProcessor"]["States"]
    choice = states[maps[0]["ItemProcessor"]["StartAt"]]
    assert choice["Type"] == "Choice"
    batch = states[choice["Choices"][0]["Next"]]
    task = "$"
    if batch["Type"] == "Pass":  # the train Map: a Pass names the execution in the worker's task
        assert batch["Parameters"]["execution_arn.$"] == "$$.Execution.Id"
        task, batch = batch["ResultPath"], states[batch["Next"]]
    # not .sync: .sync cannot tell a job stuck in RUNNABLE from a long run
    assert batch["Resource"] == "arn:aws:states:::batch:submitJob"
    assert batch["Parameters"]["JobQueue"] == "${GpuJobQueueArn}"
    assert batch["Parameters"]["JobDefinition"] == "${GpuWorkerJobDefinitionArn}"
    assert batch["Parameters"]["Parameters"]["task.$"] == f"States.JsonToString({task})"
    check = states[batch["Next"]]
    assert check["Parameters"]["FunctionName"] == "${WatchGpuJobFunctionArn}"
    assert check["Parameters"]["Payload"] == {"batch_job_id.$": "$.batch.batch_job_id"}
    ended = states[check["Next"]]
    assert ended["Type"] == "Choice" and ended["Choices"][0]["Variable"] == "$.batch.ended"
    wait = states[ended["Default"]]
    assert wait == {"Type": "Wait", "SecondsPath": "$.batch.poll_seconds", "Next": batch["Next"]}
    report = states[ended["Choices"][0]["Next"]]
    assert report["Type"] == "Pass" and report["End"] is True
    assert states[choice["Default"]]["Resource"] == "arn:aws:states:::lambda:invoke"


def test_each_crossfit_memory_size_is_a_function_of_its_own_chosen_by_the_shards_resource(
    template, asl
):
    # GIVEN the template's CrossFitMemorySizes (three sizes) and the estimate Map's Choice
    res = template["Resources"]
    default = template["Parameters"]["CrossFitMemorySizes"]["Default"]
    assert [int(mb) for mb in str(default).split(",")] == [1769, 3538, 10240]
    functions = ["CrossFitFunction", "CrossFitFunction2", "CrossFitFunction3"]
    subs = res["EstimateStateMachine"]["Properties"]["DefinitionSubstitutions"]
    invoked = [
        p["LambdaInvokePolicy"]["FunctionName"]["Ref"]
        for p in res["EstimateStateMachine"]["Properties"]["Policies"]
        if isinstance(p, dict) and "LambdaInvokePolicy" in p
    ]
    for i, name in enumerate(functions):
        props = res[name]["Properties"]
        # THEN each size is a function of its own: same code, its size, 900 s, its log group,
        # its ARN and resource name substituted, the state machine may invoke it
        assert props["CodeUri"] == "functions/crossfit/" and props["Timeout"] == 900
        assert props["MemorySize"] == {"Fn::Select": [i, {"Ref": "CrossFitMemorySizes"}]}
        assert res[f"{name}LogGroup"]["Properties"]["LogGroupName"] == {
            "Fn::Sub": f"/aws/lambda/${{{name}}}"
        }
        assert subs[f"{name}Arn"] == {"Fn::GetAtt": [name, "Arn"]}
        if i:
            assert subs[f"CrossFitResource{i + 1}"]["Fn::Sub"][1]["MB"] == {
                "Fn::Select": [i, {"Ref": "CrossFitMemorySizes"}]
            }
        assert name in invoked
    # WHEN a shard's resource is the second or third size THEN the Choice sends it to that
    # function; any other Lambda shard goes to the first
    processor = asl["States"]["Cross-fit every shard of the wave"]["ItemProcessor"]
    states = processor["States"]
    choice = states[processor["StartAt"]]
    for i in (2, 3):
        (rule,) = [r for r in choice["Choices"] if f"${{CrossFitResource{i}}}" in json.dumps(r)]
        assert rule["And"][1]["Variable"] == "$.shard.resource"
        assert states[rule["Next"]]["Parameters"]["FunctionName"] == f"${{CrossFitFunction{i}Arn}}"
    assert states[choice["Default"]]["Parameters"]["FunctionName"] == "${CrossFitFunctionArn}"
    # AND the Schedule function is told the sizes (fanfit.sched.placement chooses among them)
    env = res["ScheduleFunction"]["Properties"]["Environment"]["Variables"]
    assert env["FANFIT_CROSSFIT_MEMORY_SIZES"] == {
        "Fn::Join": [",", [{"Fn::Select": [i, {"Ref": "CrossFitMemorySizes"}]} for i in range(3)]]
    }


def test_the_gpu_worker_is_a_scale_to_zero_batch_environment_with_one_gpu_per_job(template):
    res = template["Resources"]
    compute = res["GpuComputeEnvironment"]["Properties"]
    assert compute["Type"] == "MANAGED" and compute["ComputeResources"]["MinvCpus"] == 0
    assert compute["ComputeResources"]["Ec2Configuration"][0]["ImageType"] == "ECS_AL2_NVIDIA"
    container = res["GpuWorkerJobDefinition"]["Properties"]["ContainerProperties"]
    assert {"Type": "GPU", "Value": "1"} in container["ResourceRequirements"]
    assert container["Command"] == ["python", "-m", "fanfit.jobs.gpu", "Ref::kind", "Ref::task"]
    assert (ROOT / "functions" / "gpu_worker" / "Dockerfile").is_file()
    # the worker's role reads the bucket and writes only under jobs/
    statements = res["GpuWorkerJobRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
    assert {s["Action"] for s in statements} == {"s3:GetObject", "s3:PutObject", "s3:ListBucket"}


def test_bucket_is_encrypted_and_not_public(template):
    props = template["Resources"]["DataBucket"]["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert all(props["PublicAccessBlockConfiguration"].values())


def test_functions_follow_the_layout(template):
    for name, res in template["Resources"].items():
        if res["Type"] == "AWS::Serverless::Function":
            code = res["Properties"]["CodeUri"]
            assert (ROOT / code / "app.py").is_file(), name
            assert (ROOT / "events" / f"{Path(code).name}.json").is_file(), name


#: The functions whose steps recompute the jobs' partitions (fanfit.jobs.sharing): a recomputation
#: that keeps losing to concurrent ones raises PartitionConflictError, which the step retries.
PARTITION_FUNCTIONS = {
    "${PrepareFunctionArn}",
    "${ScheduleFunctionArn}",
    "${AggregateFunctionArn}",
    "${ReleaseFunctionArn}",
    "${TrainInitFunctionArn}",
    "${TrainScheduleFunctionArn}",
    "${TrainFinalizeFunctionArn}",
}


def test_every_step_that_recomputes_partitions_retries_a_partition_conflict(machine):
    # GIVEN each Lambda task of a function that registers, re-reads or releases a partition
    asl = machine[2]
    tasks = [
        (name, state)
        for name, state in _states(asl)
        if state.get("Parameters", {}).get("FunctionName") in PARTITION_FUNCTIONS
    ]
    assert tasks
    # THEN it retries PartitionConflictError with backoff and jitter (many jobs starting at once)
    for name, state in tasks:
        conflict = [r for r in state["Retry"] if "PartitionConflictError" in r["ErrorEquals"]]
        assert conflict and conflict[0]["MaxAttempts"] >= 3, name
        assert conflict[0].get("JitterStrategy") == "FULL" and conflict[0]["BackoffRate"] > 1, name
