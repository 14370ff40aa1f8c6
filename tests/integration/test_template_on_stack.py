"""template.yaml as a user deploys it, on the local stack.

- A second stack created from the template with no parameter overrides (the defaults
  `sam deploy --guided` offers; the local stack's own values left out too): it has no Batch, EC2 or
  GPU-worker resource, says ``GpuWorkerEnabled=false``, refuses a Torch learner before anything is
  uploaded, and passes ``fanfit doctor``, whose tiny CPU estimate runs on it.
- ``fanfit doctor`` on the session's stack (its GPU worker's queue and compute environment) and on
  a stack that does not exist.
- The session's stack (the GPU worker on, as the local stack deploys it) bounds its runs: both state
  machines and every Task state carry ``TimeoutSeconds`` from ``JobTimeoutSeconds``.
- A GPU worker's Batch job that stays RUNNABLE (its compute environment disabled: no instance can
  start, as with no vCPU quota on AWS) fails its job with ``GpuJobStuckRunnableError`` after
  ``GpuRunnableTimeoutSeconds``, and the Batch job is terminated.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit import errors, storage

pytestmark = pytest.mark.integration

TORCH_MLP = {"hidden_layer_sizes": [8], "epochs": 1, "batch_size": 64, "lr": 0.01}
#: Seconds a GPU job may wait in RUNNABLE on the stack that tests it.
RUNNABLE_TIMEOUT_S = 8


def _plr_data(n: int = 200, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    d = x[:, 0] + rng.normal(size=n)
    y = 0.5 * d + x[:, 1] + rng.normal(size=n)
    return pd.DataFrame({"y": y, "d": d, "x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2]})


def _resource_types(client: Any, stack_name: str) -> set[str]:
    cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    resources = cfn.describe_stack_resources(StackName=stack_name)["StackResources"]
    return {r["ResourceType"] for r in resources}


@pytest.fixture(scope="module")
def cpu_stack(redeploy, local_stack, client_of_stack) -> tuple[dict[str, str], Any]:
    """The template with no parameter overrides, as stack ``fanfit-defaults``: outputs and client."""
    outputs = redeploy(stack_name="fanfit-defaults", local_parameters=False)
    return outputs, client_of_stack(local_stack, "fanfit-defaults")


def test_a_stack_deployed_with_the_defaults_has_no_gpu_worker(cpu_stack):
    # GIVEN the template created with no parameter overrides
    outputs, client = cpu_stack
    # WHEN its resources and outputs are read
    types = _resource_types(client, "fanfit-defaults")
    # THEN it says it has no GPU worker, names no Batch resource, and creates none
    assert outputs["GpuWorkerEnabled"] == "false"
    assert "GpuJobQueueArn" not in outputs and "GpuWorkerJobDefinitionArn" not in outputs
    assert not {t for t in types if t.startswith(("AWS::Batch::", "AWS::EC2::", "AWS::ECR::"))}
    assert "AWS::IAM::InstanceProfile" not in types
    # ... while the pipeline and the client policy are there
    assert {"AWS::StepFunctions::StateMachine", "AWS::IAM::ManagedPolicy"} <= types
    assert outputs["ClientPolicyArn"].startswith("arn:")


def test_a_torch_learner_on_the_default_stack_is_refused_before_any_upload(cpu_stack):
    pytest.importorskip("torch")
    # GIVEN the stack without the GPU worker
    _, client = cpu_stack
    # WHEN an estimate with a Torch learner is submitted
    with pytest.raises(errors.GpuWorkerDisabledError) as info:
        client.submit_estimate(
            _plr_data(),
            model="plr",
            y="y",
            d="d",
            ml_l=f"TorchMLPRegressor:{json.dumps(TORCH_MLP)}",
            ml_m="LinearRegression",
            n_folds=2,
            seed=1,
        )
    # THEN the error names the learner and the parameter to set, and nothing was uploaded
    message = str(info.value)
    assert "ml_l" in message and "EnableGpuWorker=true" in message
    listed = client.s3.list_objects_v2(Bucket=client.stack.bucket)
    assert listed.get("KeyCount", 0) == 0, listed.get("Contents")
    # ... nor is a train job asking for GPU workers
    with pytest.raises(errors.GpuWorkerDisabledError, match="gpu_workers=1"):
        client.submit_train(
            _plr_data(), model="kmeans", features=["x0", "x1"], n_clusters=2, rounds=1,
            workers=2, gpu_workers=1, seed=1,
        )  # fmt: skip


def test_doctor_passes_the_default_stack_and_runs_a_cpu_estimate_on_it(cpu_stack, local_stack_env):
    # GIVEN the stack without the GPU worker, named with --stack through the local endpoint
    # WHEN `fanfit doctor` checks it (a tiny PLR with linear learners end to end included)
    done = _doctor(local_stack_env, "fanfit-defaults", "--timeout", "300")
    # THEN every check passes, one line each: the GPU worker is off and says what that means
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    for check in ("stack", "GPU worker", "permissions", "job"):
        assert any(line.startswith(f"ok   {check}: ") for line in lines), (check, lines)
    assert "GPU worker: off (EnableGpuWorker=false)" in done.stdout
    assert "a tiny estimate (est-" in done.stdout
    assert lines[-1] == "4 of 4 checks passed"


def _doctor(env: dict[str, str], stack: str, *options: str) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "fanfit.cli", "doctor", "--stack", stack, *options],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip


def test_both_state_machines_and_every_task_time_out_after_job_timeout_seconds(
    local_client, fanfit_outputs
):
    from fanfit.jobs.states import EstimateState

    # GIVEN the session's stack (JobTimeoutSeconds and ClientTimeoutSeconds at their defaults)
    sfn = local_client.sfn
    expected = int(fanfit_outputs["JobTimeoutSeconds"])
    assert expected == 4 * 3600
    client_waits = {EstimateState.WAIT_CLIENT_INPUTS, EstimateState.WAIT_CLIENT_ESTIMATE}
    client_timeout = int(fanfit_outputs["ClientTimeoutSeconds"])
    assert client_timeout == 3600
    for arn in (fanfit_outputs["EstimateStateMachineArn"], fanfit_outputs["TrainStateMachineArn"]):
        # WHEN its deployed definition is read (DefinitionSubstitutions applied)
        definition = json.loads(sfn.describe_state_machine(stateMachineArn=arn)["definition"])
        # THEN the machine and each Task state, in the Map too, carry the number; the waits for
        # a client (an rdflex job's) carry ClientTimeoutSeconds
        assert definition["TimeoutSeconds"] == expected, arn
        tasks = list(_tasks(definition["States"]))
        wrong = [
            n for n, s in tasks
            if s.get("TimeoutSeconds") != (client_timeout if n in client_waits else expected)
        ]  # fmt: skip
        assert tasks and not wrong, wrong


def _tasks(states: dict[str, Any]):
    for name, state in states.items():
        if state["Type"] == "Task":
            yield name, state
        if state["Type"] == "Map":
            yield from _tasks(state["ItemProcessor"]["States"])


def test_a_gpu_job_stuck_in_runnable_fails_with_the_named_error(
    redeploy, local_stack, client_of_stack, wait_until
):
    pytest.importorskip("torch")
    # GIVEN a stack with the GPU worker whose jobs may wait RUNNABLE_TIMEOUT_S seconds, and its
    # compute environment disabled (no instance can start, as without a vCPU quota on AWS)
    outputs = redeploy(
        stack_name="fanfit-runnable",
        parameters={"GpuRunnableTimeoutSeconds": str(RUNNABLE_TIMEOUT_S)},
    )
    client = client_of_stack(local_stack, "fanfit-runnable")
    batch = client.session.client("batch", endpoint_url=client.stack.endpoint_url)
    cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    environment = cfn.describe_stack_resource(
        StackName="fanfit-runnable", LogicalResourceId="GpuComputeEnvironment"
    )["StackResourceDetail"]["PhysicalResourceId"]
    batch.update_compute_environment(computeEnvironment=environment, state="DISABLED")
    # WHEN an estimate with a Torch learner (placed on the GPU worker) runs on it
    job = client.submit_estimate(
        _plr_data(), model="plr", y="y", d="d",
        ml_l=f"TorchMLPRegressor:{json.dumps(TORCH_MLP)}", ml_m="LinearRegression",
        n_folds=2, seed=1,
    )  # fmt: skip
    # THEN the job fails, naming the shard and GpuJobStuckRunnableError with its likely causes
    with pytest.raises(errors.JobFailedError):
        job.wait(timeout=240)
    record = job.record()
    assert record["status"] == "FAILED"
    text = json.dumps(record)
    assert "GpuJobStuckRunnableError" in text, record
    assert "GpuRunnableTimeoutSeconds" in text and "vCPU quota" in text, record
    # ... and the Batch job was terminated (FAILED), not left waiting
    queue = outputs["GpuJobQueueArn"]

    def failed_jobs() -> list[dict[str, Any]]:
        return batch.list_jobs(jobQueue=queue, jobStatus="FAILED")["jobSummaryList"]

    jobs = wait_until(failed_jobs, 30, "the stuck GPU job ended FAILED")
    assert any(j["jobName"] == "fanfit-crossfit" for j in jobs)
    assert not batch.list_jobs(jobQueue=queue, jobStatus="RUNNABLE")["jobSummaryList"]
    # ... the shard's predictions were never written
    schedule = client.store.get_json(storage.schedule_key(job.job_id, 0))
    gpu = [s for w in schedule["waves"] for s in w["shards"] if s["placement"] == "gpu"]
    assert gpu


def test_doctor_checks_the_sessions_stack_with_its_gpu_worker(local_stack_env, fanfit_outputs):
    # GIVEN the session's stack (the GPU worker on) WHEN `fanfit doctor --no-job` checks it
    done = _doctor(local_stack_env, "fanfit", "--no-job")
    # THEN the stack, its GPU worker's queue and compute environment and the permissions pass
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ok   stack: 'fanfit' ")
    assert lines[1] == "ok   GPU worker: on: queue ENABLED, 1 compute environment(s) VALID"
    assert lines[2].startswith("ok   permissions: ")
    assert lines[3] == "skip job: --no-job" and lines[-1] == "4 of 4 checks passed"


def test_doctor_names_a_missing_stack_and_exits_non_zero(local_stack_env, fanfit_outputs):
    # GIVEN a stack name that is not deployed WHEN doctor checks it
    done = _doctor(local_stack_env, "no-such-stack")
    # THEN the stack can't be read: one line on stderr naming it, and a non-zero exit
    assert done.returncode != 0
    assert "no-such-stack" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
