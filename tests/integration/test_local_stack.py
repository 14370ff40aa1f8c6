"""The embedded local stack itself: LocalStack core with fanfit's plugins, and the deploy through SAM.

A small template of its own (``fixtures/template.yaml``: a layer, functions with and without it, a
DynamoDB table, a bucket, a Distributed Map state machine and a Catch-to-Fail one) is deployed with
:class:`fanfit.local.deploy.Deployer`, as the project's ``template.yaml`` is.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from fanfit.errors import StackError
from fanfit.local import stack as local_stack_module
from fanfit.local.deploy import Deployer
from fanfit.local.stack import LocalStack, StackInfo

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
POLL_S = 0.25
EXECUTION_TIMEOUT_S = 120.0


class Smoke:
    """The deployed fixture stack and clients of the local stack."""

    def __init__(self, info: StackInfo, outputs: dict[str, str], timings: dict[str, float]):
        self.info = info
        self.outputs = outputs
        self.timings = timings
        kwargs: dict[str, Any] = {
            "endpoint_url": info.endpoint,
            "region_name": info.region,
            "aws_access_key_id": "test",
            "aws_secret_access_key": "test",
        }
        self.lam = boto3.client("lambda", **kwargs)
        self.sfn = boto3.client("stepfunctions", **kwargs)
        self.s3 = boto3.client("s3", **kwargs)
        self.dynamodb = boto3.client("dynamodb", **kwargs)
        self.bucket = outputs["BucketName"]

    def invoke(self, function: str, event: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """Invoke synchronously; return the decoded payload and the FunctionError (or None)."""
        response = self.lam.invoke(FunctionName=self.outputs[function], Payload=json.dumps(event))
        return json.loads(response["Payload"].read()), response.get("FunctionError")

    def run(self, machine: str, execution_input: dict[str, Any]) -> dict[str, Any]:
        """Start an execution and poll (bounded) until it ends; return DescribeExecution."""
        arn = self.sfn.start_execution(
            stateMachineArn=self.outputs[machine], input=json.dumps(execution_input)
        )["executionArn"]
        deadline = time.monotonic() + EXECUTION_TIMEOUT_S
        while time.monotonic() < deadline:
            described = self.sfn.describe_execution(executionArn=arn)
            if described["status"] != "RUNNING":
                return described
            time.sleep(POLL_S)
        raise AssertionError(f"execution {arn} still running after {EXECUTION_TIMEOUT_S} s")

    def read_json(self, key: str) -> Any:
        return json.loads(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())


@pytest.fixture(scope="module")
def smoke(local_stack: StackInfo) -> Smoke:
    bucket = f"fanfit-smoke-{uuid.uuid4().hex[:12]}"  # S3 data outlives LocalStack restarts
    deployer = Deployer(
        local_stack,
        FIXTURES / "template.yaml",
        stack_name="fanfit-smoke",
        parameters={"BucketName": bucket},
    )
    outputs = deployer.run()
    return Smoke(local_stack, outputs, deployer.timings)


def _put_shards(smoke: Smoke, shards: list[dict[str, Any]]) -> dict[str, Any]:
    run = uuid.uuid4().hex[:8]
    key = f"runs/{run}/shards.json"
    smoke.s3.put_object(Bucket=smoke.bucket, Key=key, Body=json.dumps(shards).encode())
    return {
        "run": run,
        "shards_key": key,
        "max_concurrency": 2,
        "results_prefix": f"runs/{run}/map",
    }


def test_the_stack_reports_healthy_and_is_found_by_status(local_stack: StackInfo):
    # GIVEN the session's stack WHEN its status is read through the CLI-facing API
    status = local_stack_module.status()
    # THEN it runs, answers health checks, on a local port, with the services fanfit uses
    assert status["running"] and status["healthy"]
    assert status["endpoint"] == local_stack.endpoint == f"http://127.0.0.1:{local_stack.port}"
    assert {"lambda", "stepfunctions", "s3", "dynamodb", "cloudformation"} <= set(
        status["services"]
    )


def test_a_function_runs_in_its_own_process_and_imports_its_layer(smoke: Smoke):
    # WHEN the worker reports on itself
    payload, error = smoke.invoke("WorkerFunctionName", {"action": "whoami"})
    # THEN it ran in another process, on Python 3.12, its library from the layer LocalStack
    # unzipped (not from the fixture sources), with Lambda's context and the gateway as endpoint
    assert error is None, payload
    assert payload["pid"] not in (os.getpid(), smoke.info.pid)
    assert payload["layer"] == "fixturelib-layer"
    assert str(FIXTURES) not in payload["layer_file"]
    assert payload["python"].startswith("3.12.")
    assert payload["function_name"] == smoke.outputs["WorkerFunctionName"]
    assert payload["memory_limit_in_mb"] == "1769"
    assert 0 < payload["remaining_ms"] <= 6000
    assert payload["endpoint"] == smoke.info.endpoint


def test_a_warm_environment_serves_the_next_invocation(smoke: Smoke):
    # GIVEN one invocation WHEN a second one follows THEN the same process serves it
    first, _ = smoke.invoke("WorkerFunctionName", {"action": "whoami"})
    second, _ = smoke.invoke("WorkerFunctionName", {"action": "whoami"})
    assert first["pid"] == second["pid"]
    assert first["request_id"] != second["request_id"]


def test_a_handler_exception_is_a_lambda_error_named_by_its_class(smoke: Smoke):
    # WHEN the handler raises
    payload, error = smoke.invoke("WorkerFunctionName", {"action": "raise", "message": "bad"})
    # THEN Lambda reports an unhandled error with the class name and message, as AWS does
    assert error == "Unhandled"
    assert payload["errorType"] == "ShardError" and payload["errorMessage"] == "bad"
    assert any("app.py" in frame for frame in payload["stackTrace"])


def test_step_functions_sees_the_exception_class_and_fails_with_it(smoke: Smoke):
    # WHEN a state machine's task raises, caught into a Fail state that re-throws it
    described = smoke.run("CatchStateMachineArn", {"action": "raise", "message": "no shard"})
    # THEN the execution fails with the exception's class name as error, its message in the cause
    assert described["status"] == "FAILED"
    assert described["error"] == "ShardError"
    assert json.loads(described["cause"])["errorMessage"] == "no shard"


def test_a_timed_out_invocation_fails_and_the_environment_restarts(smoke: Smoke):
    # GIVEN a warm environment
    before, _ = smoke.invoke("WorkerFunctionName", {"action": "whoami"})
    # WHEN an invocation runs past the function's 6 s timeout
    started = time.monotonic()
    payload, error = smoke.invoke("WorkerFunctionName", {"action": "sleep", "seconds": 30})
    # THEN it fails as Sandbox.Timedout after about the timeout, and the next one gets a new runtime
    assert error == "Unhandled" and payload["errorType"] == "Sandbox.Timedout"
    assert 5.5 < time.monotonic() - started < 20
    after, error = smoke.invoke("WorkerFunctionName", {"action": "whoami"})
    assert error is None and after["pid"] != before["pid"]


def test_a_dependency_missing_from_the_layers_fails_to_import(smoke: Smoke):
    # WHEN a function imports a library only another function's layer has
    payload, error = smoke.invoke("NoLayerFunctionName", {})
    # THEN the runtime cannot import the handler module, as on AWS
    assert error == "Unhandled"
    assert payload["errorType"] == "Runtime.ImportModuleError"
    assert "No module named 'fixturelib'" in payload["errorMessage"]


@pytest.mark.skipif(
    not os.access("/sys/fs/cgroup/memory", os.W_OK), reason="cgroup v1 memory not writable"
)
def test_a_function_past_its_memory_size_runs_out_of_memory(smoke: Smoke):
    # WHEN a 256 MB function allocates 1 GB THEN it is killed and reported as out of memory (its
    # timeout is generous: a 256 MB function gets only 256/1769 of a vCPU, less on a loaded machine)
    payload, error = smoke.invoke("HogFunctionName", {"mb": 1024})
    assert error == "Unhandled"
    assert payload["errorType"] == "Runtime.OutOfMemory", payload


def test_dynamodb_is_served_by_moto(smoke: Smoke):
    # GIVEN the table the template created (PROVIDER_OVERRIDE_DYNAMODB=moto)
    table = smoke.outputs["TableName"]
    assert smoke.dynamodb.describe_table(TableName=table)["Table"]["TableStatus"] == "ACTIVE"
    # WHEN an item is put THEN it is read back
    item = {"id": {"S": f"item-{uuid.uuid4().hex}"}, "value": {"N": "42"}}
    smoke.dynamodb.put_item(TableName=table, Item=item)
    got = smoke.dynamodb.get_item(TableName=table, Key={"id": item["id"]}, ConsistentRead=True)
    assert got["Item"] == item


def test_a_distributed_map_reads_s3_retries_and_writes_its_results(smoke: Smoke):
    # GIVEN five shards in S3, one failing its first attempt, at most two at a time
    shards = [{"id": i, "values": [i, 1.0, 2.0], "flaky": i == 1} for i in range(5)]
    execution_input = _put_shards(smoke, shards)
    # WHEN the Distributed Map runs
    described = smoke.run("MapStateMachineArn", execution_input)
    # THEN it succeeds, its state output names the ResultWriter manifest,
    assert described["status"] == "SUCCEEDED", described.get("cause")
    output = json.loads(described["output"])
    details = output["map_run"]["ResultWriterDetails"]
    assert details["Bucket"] == smoke.bucket
    assert details["Key"].startswith(execution_input["results_prefix"] + "/")
    assert details["Key"].endswith("/manifest.json")
    # the manifest lists the results file, which holds every child execution in AWS's format,
    manifest = smoke.read_json(details["Key"])
    assert manifest["MapRunArn"] == output["map_run"]["MapRunArn"]
    assert manifest["ResultFiles"]["FAILED"] == []
    [succeeded] = manifest["ResultFiles"]["SUCCEEDED"]
    entries = smoke.read_json(succeeded["Key"])
    assert len(entries) == 5 and all(e["Status"] == "SUCCEEDED" for e in entries)
    results = sorted((json.loads(e["Output"]) for e in entries), key=lambda r: r["id"])
    assert [r["total"] for r in results] == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert json.loads(entries[0]["Input"])["shard"] == shards[0]
    # the flaky shard was retried once, and no more than MaxConcurrencyPath environments ran
    assert [r["attempts"] for r in results] == [1, 2, 1, 1, 1]
    assert len({r["pid"] for r in results}) <= 2


def test_a_shard_that_keeps_failing_fails_the_map_run(smoke: Smoke):
    # GIVEN shards of which one always fails (no tolerated failures declared)
    shards = [{"id": i, "values": [1.0], "fail": i == 2} for i in range(4)]
    execution_input = _put_shards(smoke, shards)
    # WHEN the Distributed Map runs
    described = smoke.run("MapStateMachineArn", execution_input)
    # THEN the Map Run fails as on AWS, the Catch re-throws it through the Fail state,
    assert described["status"] == "FAILED"
    assert described["error"] == "States.ExceedToleratedFailureThreshold"
    # and the ResultWriter still records the failed child execution with its error
    keys = [
        o["Key"]
        for o in smoke.s3.list_objects_v2(
            Bucket=smoke.bucket, Prefix=execution_input["results_prefix"]
        ).get("Contents", [])
    ]
    [manifest_key] = [k for k in keys if k.endswith("manifest.json")]
    [failed] = smoke.read_json(manifest_key)["ResultFiles"]["FAILED"]
    [entry] = [
        e for e in smoke.read_json(failed["Key"]) if json.loads(e["Input"])["shard"]["id"] == 2
    ]
    assert entry["Status"] == "FAILED" and entry["Error"] == "ShardError"


def test_a_redeploy_without_changes_is_skipped(smoke: Smoke, local_stack: StackInfo):
    # GIVEN the deployed fixture WHEN it is deployed again unchanged
    deployer = Deployer(
        local_stack,
        FIXTURES / "template.yaml",
        stack_name="fanfit-smoke",
        parameters={"BucketName": smoke.bucket},
    )
    started = time.perf_counter()
    outputs = deployer.run()
    # THEN neither sam build nor sam deploy runs, and the outputs are the same
    assert outputs == smoke.outputs
    assert "build_s" not in deployer.timings and "deploy_s" not in deployer.timings
    assert time.perf_counter() - started < 10


def test_a_second_stack_gets_its_own_port_and_stops_by_pid(tmp_path: Path, local_stack: StackInfo):
    # GIVEN a second state dir WHEN a stack starts there
    stack = LocalStack(root=ROOT, home=tmp_path)
    info = stack.start()
    try:
        # THEN it runs on another free port, recorded in its state file
        assert info.port != local_stack.port and info.pid != local_stack.pid
        assert stack.status()["healthy"]
        assert json.loads(stack.state_file.read_text())["pid"] == info.pid
    finally:
        # WHEN it is stopped THEN its process is gone and the state file removed
        assert stack.stop()
    assert not stack.state_file.exists()
    assert not stack.status()["running"]
    assert _gone(info.pid)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_a_missing_interpreter_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN FANFIT_LOCALSTACK_PYTHON naming nothing WHEN a stack starts THEN the error says what to run
    monkeypatch.setenv("FANFIT_LOCALSTACK_PYTHON", str(tmp_path / "missing" / "python"))
    start: Callable[[], StackInfo] = LocalStack(root=ROOT, home=tmp_path).start
    with pytest.raises(StackError, match="make install-local"):
        start()
