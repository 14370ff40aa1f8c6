"""A model whose stage inputs and estimate come from the client (``ModelDef.client_inputs``): the
ClientInputs function, Prepare's flags, the state machine's waits and the client's side
(``EstimateJob.client_request``, ``send_stage_inputs``, ``send_estimate``, ``send_client_failure``).

No model of the registry sets ``client_inputs`` here: PLR does, patched into the registry for one
test at a time (``monkeypatch.setitem``, restored after it).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from fanfit import errors, storage
from fanfit.dml.registry import REGISTRY
from fanfit.jobs.documents.estimate import ClientRequest, PrepareOutput
from fanfit.jobs.states import EstimateState

ROOT = Path(__file__).resolve().parents[2]
JOB = "client-job"
ARN = "arn:aws:states:us-east-1:123456789012:execution:fanfit-estimate:client-job"


@pytest.fixture
def client_plr(monkeypatch):
    """PLR as a client-inputs model, for this test only."""
    monkeypatch.setitem(REGISTRY, "plr", dataclasses.replace(REGISTRY["plr"], client_inputs=True))


def _put_plr(store, job_id: str, score: str | None = None) -> str:
    """A PLR job (y on d and x1..x3, linear learners, 2 folds, 1 repetition); IV-type: 2 stages."""
    from conftest import _make_plr_frame

    from fanfit.client import build_spec
    from fanfit.client.data import to_matrix

    spec, columns = build_spec(
        y="y", d="d", x=["x1", "x2", "x3"], z=None, model="plr", score=score,
        learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression",
                  **({"ml_g": "LinearRegression"} if score == "IV-type" else {})},
        n_folds=2, n_rep=1, seed=3,
    )  # fmt: skip
    names, values = to_matrix(_make_plr_frame(200), columns)
    job = {"kind": "estimate", "dml": spec.to_dict(), "data_key": store.put_data(names, values),
           "folds_key": None, "max_concurrency": 2, "units_per_shard": None}  # fmt: skip
    return store.put_json(storage.spec_key(job_id), job)


def _storage():
    return (
        storage.JobStore("fanfit-unit"),
        storage.JobRecords("fanfit-jobs"),
        storage.ThroughputRecords("fanfit-throughput"),
    )


# --- keys and the ClientInputs function ------------------------------------------------------------


def test_the_request_keys_name_the_stage_or_the_estimate():
    assert storage.client_request_key("j", 2) == "jobs/j/stages/2/request.json"
    assert storage.client_request_key("j", "estimate") == "jobs/j/estimate-request.json"
    assert storage.client_estimate_key("j") == "jobs/j/client-estimate.json"
    assert storage.stage_inputs_key("j", 0) == "jobs/j/stages/0/inputs.json"
    for bad in (-1, "2", True, None):
        with pytest.raises(errors.InvalidJobError, match="a stage"):
            storage.client_request_key("j", bad)


@pytest.mark.parametrize("step", [0, 3, "estimate"])
def test_the_function_writes_the_request_with_its_token(moto_stack, load_handler, lambda_context,
                                                        step):  # fmt: skip
    with moto_stack():
        handler = load_handler("client_inputs", "fanfit_fn_client")
        # GIVEN the event the wait sends: the step, a token of AWS's longest length, the execution
        token = "t" * 1024
        event = {"job_id": JOB, "step": step, "task_token": token, "execution_arn": ARN}
        # WHEN the function runs
        out = handler(event, lambda_context())
        # THEN the request is at the step's key, parsed back with the token and the execution
        key = storage.client_request_key(JOB, step)
        assert out == {"job_id": JOB, "step": step, "request_key": key}
        store = storage.JobStore("fanfit-unit")
        request = ClientRequest.parse(store.get_json(key), source=key)
        assert (request.step, request.task_token, request.execution_arn) == (step, token, ARN)
        assert request.requested_at > 1.7e9
        # AND a retried invocation's new token replaces it (no idempotency record keeps the old)
        handler({**event, "task_token": "new"}, lambda_context())
        assert store.get_json(key)["task_token"] == "new"


def test_the_function_refuses_a_token_longer_than_aws_allows(moto_stack, load_handler,
                                                             lambda_context):  # fmt: skip
    with moto_stack():
        handler = load_handler("client_inputs", "fanfit_fn_client")
        event = {"job_id": JOB, "step": 0, "task_token": "t" * 1025, "execution_arn": ARN}
        with pytest.raises(errors.InvalidEventError, match="task_token"):
            handler(event, lambda_context())
        with pytest.raises(errors.InvalidEventError, match="step"):
            handler({**event, "task_token": "t", "step": "stage"}, lambda_context())


# --- Prepare's flags -------------------------------------------------------------------------------


def test_a_model_without_client_inputs_keeps_its_flags_off_and_its_stage_inputs(moto_stack):
    from fanfit.jobs.estimate.prepare import prepare_stage

    with moto_stack():
        store, records, _ = _storage()
        _put_plr(store, JOB, score="IV-type")
        # GIVEN PLR IV-type (two stages) WHEN both stages are prepared (stage 1 after stage 0's fits)
        from pipeline_steps import run_steps

        planned = run_steps(store, records, _storage()[2], JOB)
        # THEN no flag is on, and Prepare wrote stage 1's inputs (the preliminary estimate)
        assert [p.stage for p in planned] == [0, 1]
        for p in planned:
            assert not (p.client_inputs or p.client_inputs_ready or p.client_estimate_ready)
        assert "theta_initial" in store.get_json(storage.stage_inputs_key(JOB, 1))
        assert not store.exists(storage.stage_inputs_key(JOB, 0))
        assert not store.exists(storage.client_request_key(JOB, 0))
        # AND Prepare's output (the state's $.plan) has the flags as False
        again = prepare_stage(store, records, JOB, storage.spec_key(JOB), 0).to_json_dict()
        assert again["client_inputs"] is again["client_inputs_ready"] is False
        assert again["client_estimate_ready"] is False


def test_prepare_of_a_client_inputs_model_writes_no_inputs_and_says_what_is_ready(
    moto_stack, client_plr
):
    from fanfit.jobs.estimate.prepare import prepare_stage

    with moto_stack():
        store, records, _ = _storage()
        spec_key = _put_plr(store, JOB, score="IV-type")
        # GIVEN a two-stage client-inputs job WHEN stage 0 is prepared
        first = prepare_stage(store, records, JOB, spec_key, 0)
        # THEN the stage waits for the client's inputs: none are there yet
        assert first.client_inputs and not first.client_inputs_ready
        assert first.has_next_stage and not first.client_estimate_ready
        assert not store.exists(storage.stage_inputs_key(JOB, 0))
        # WHEN the client sent them and the job is resumed (Prepare of stage 0 again)
        store.put_json(storage.stage_inputs_key(JOB, 0), {})
        assert prepare_stage(store, records, JOB, spec_key, 0).client_inputs_ready
        # WHEN stage 1 is prepared (no fits needed: Prepare computes nothing for this model)
        last = prepare_stage(store, records, JOB, spec_key, 1)
        # THEN it writes no inputs, waits for the client's, and then for the estimate
        assert last.client_inputs and not last.client_inputs_ready and not last.has_next_stage
        assert not store.exists(storage.stage_inputs_key(JOB, 1))
        assert not last.client_estimate_ready
        # ... which a resumed job finds
        store.put_json(storage.client_estimate_key(JOB), {"d_cols": []})
        assert prepare_stage(store, records, JOB, spec_key, 1).client_estimate_ready


def test_the_steps_wait_for_the_client_before_each_stage_and_the_aggregate(moto_stack, client_plr):
    from pipeline_steps import EXECUTION_ARN, run_steps

    with moto_stack():
        store, records, throughput = _storage()
        _put_plr(store, JOB)
        calls: list[tuple[Any, PrepareOutput]] = []
        estimate = {
            "d_cols": ["d"], "coef": {"d": 0.5}, "se": {"d": 0.1}, "t_stat": {"d": 5.0},
            "pval": {"d": 0.0}, "ci_95": {"d": [0.3, 0.7]}, "all_coef": {"d": [0.5]},
            "all_se": {"d": [0.1]},
        }  # fmt: skip

        def client(step: Any, plan: PrepareOutput) -> None:
            # the request of the step is there when the client is called
            request = store.get_json(storage.client_request_key(JOB, step))
            assert request["task_token"] == f"token-{step}"
            assert request["execution_arn"] == EXECUTION_ARN
            calls.append((step, plan))
            if step == storage.CLIENT_ESTIMATE_STEP:
                store.put_json(storage.client_estimate_key(JOB), estimate)
            else:
                store.put_json(storage.stage_inputs_key(JOB, step), {})

        # GIVEN a one-stage client-inputs job WHEN its steps run with a client
        run_steps(store, records, throughput, JOB, client=client)
        # THEN the client was asked for stage 0's inputs, then for the estimate
        assert [step for step, _ in calls] == [0, "estimate"]
        assert all(plan.client_inputs for _, plan in calls)
        # AND the job's result carries the client's estimate
        result = store.get_json(storage.result_key(JOB))
        assert result["coef"] == {"d": 0.5}
        # AND without a client such a job stops at its first wait
        _put_plr(store, "client-job-2")
        with pytest.raises(AssertionError, match="client="):
            run_steps(store, records, throughput, "client-job-2")


# --- the state machine ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def asl() -> dict:
    return json.loads((ROOT / "orchestrator" / "estimate.asl.json").read_text())


def test_the_state_machine_waits_for_the_client_after_each_prepare_and_before_aggregate(asl):
    states = asl["States"]
    choice = states[EstimateState.IS_CLIENT_INPUTS_WAIT]
    # GIVEN both Prepare states WHEN they end THEN the Choice on the plan's flags follows
    for prepare in (EstimateState.PREPARE, EstimateState.PREPARE_NEXT_STAGE):
        assert states[prepare]["Next"] == EstimateState.IS_CLIENT_INPUTS_WAIT
        selector = states[prepare]["ResultSelector"]
        for flag in ("client_inputs", "client_inputs_ready", "client_estimate_ready"):
            assert selector[f"{flag}.$"] == f"$.Payload.{flag}"
    rule = choice["Choices"][0]
    assert rule["Next"] == EstimateState.WAIT_CLIENT_INPUTS
    assert rule["And"] == [
        {"Variable": "$.plan.client_inputs", "BooleanEquals": True},
        {"Variable": "$.plan.client_inputs_ready", "BooleanEquals": False},
    ]
    assert choice["Default"] == EstimateState.SCHEDULE_FIRST_WAVE
    # AND each wait invokes ClientInputs with the token and keeps $.plan (ResultPath null)
    waits = {
        EstimateState.WAIT_CLIENT_INPUTS: ("step.$", "$.plan.stage", EstimateState.SCHEDULE_FIRST_WAVE),
        EstimateState.WAIT_CLIENT_ESTIMATE: ("step", "estimate", EstimateState.AGGREGATE),
    }  # fmt: skip
    for name, (step_key, step, after) in waits.items():
        wait = states[name]
        assert wait["Resource"] == "arn:aws:states:::lambda:invoke.waitForTaskToken"
        assert wait["Parameters"]["FunctionName"] == "${ClientInputsFunctionArn}"
        payload = wait["Parameters"]["Payload"]
        assert payload[step_key] == step and payload["task_token.$"] == "$$.Task.Token"
        assert payload["execution_arn.$"] == "$$.Execution.Id"
        assert wait["ResultPath"] is None and wait["Next"] == after
        assert wait["Comment"].endswith("${ClientTimeoutSecondsField}")
        # ... its timeout named for the failure path: a format with one value per placeholder
        named = states[wait["Catch"][0]["Next"]]
        fmt = named["Parameters"]["Cause.$"]
        quoted, args = re.fullmatch(r"States\.Format\('([^']*)', (.*)\)", fmt).groups()
        assert quoted.count("{}") == len(args.split(", ")) and "ClientTimeoutSeconds" in quoted
    # AND after the last stage the estimate is waited for only where the client computes it
    another = states[EstimateState.IS_STAGE_LEFT]
    assert another["Choices"][0]["Next"] == EstimateState.PREPARE_NEXT_STAGE
    assert another["Choices"][1]["And"] == [
        {"Variable": "$.plan.client_inputs", "BooleanEquals": True},
        {"Variable": "$.plan.client_estimate_ready", "BooleanEquals": False},
    ]
    assert another["Choices"][1]["Next"] == EstimateState.WAIT_CLIENT_ESTIMATE
    assert another["Default"] == EstimateState.AGGREGATE


# --- the client's side -------------------------------------------------------------------------------


class FakeSfn:
    """The Step Functions calls the client makes, recorded; ``fail_with`` makes the next
    ``send_task_*`` raise that error code once."""

    class exceptions:  # noqa: N801 (botocore's attribute name)
        class ExecutionDoesNotExist(Exception):
            pass

    def __init__(self) -> None:
        self.status = "RUNNING"
        self.failure = {"error": "States.Timeout", "cause": "the job ran too long"}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail_with: list[str] = []

    def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803
        out = {"executionArn": executionArn, "status": self.status}
        if self.status == "FAILED":
            out |= self.failure
        return out

    def _send(self, name: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((name, kwargs))
        if self.fail_with:
            code = self.fail_with.pop(0)
            raise ClientError({"Error": {"Code": code, "Message": "stale"}}, name)
        return {}

    def send_task_success(self, **kwargs: Any) -> dict[str, Any]:
        return self._send("send_task_success", **kwargs)

    def send_task_failure(self, **kwargs: Any) -> dict[str, Any]:
        return self._send("send_task_failure", **kwargs)


@pytest.fixture
def job(moto_stack):
    """An EstimateJob of moto's bucket and a :class:`FakeSfn`."""
    from fanfit.client.estimate import EstimateJob

    with moto_stack():
        client = SimpleNamespace(store=storage.JobStore("fanfit-unit"), sfn=FakeSfn(),
                                 records=storage.JobRecords("fanfit-jobs"))  # fmt: skip
        yield EstimateJob(client, JOB, ARN)


def _request(job, step: Any, token: str = "tok-1", arn: str = ARN) -> None:
    doc = ClientRequest(
        job_id=JOB, step=step, task_token=token, execution_arn=arn, requested_at=1.0
    )
    job.client.store.put_json(storage.client_request_key(JOB, step), doc.to_json_dict())


def test_the_client_reads_its_executions_request_only(job):
    # GIVEN the request an earlier execution of the job left WHEN the client asks THEN it waits
    _request(job, 1, arn=ARN + "-before")
    with pytest.raises(errors.WaitTimeoutError, match="inputs of stage 1 within 0.3 s"):
        job.client_request(1, timeout=0.3, poll=0.05)
    # GIVEN this execution's request THEN it is read
    _request(job, 1, token="tok-2")
    assert job.client_request(1, timeout=0.3).task_token == "tok-2"


def test_the_client_stops_waiting_when_the_execution_ended(job):
    job.client.sfn.status = "FAILED"
    with pytest.raises(errors.JobFailedError, match="ended FAILED before it asked for the "
                       "estimate .States.Timeout: the job ran too long"):  # fmt: skip
        job.client_request("estimate", timeout=5.0, poll=0.05)


def test_the_client_sends_a_stages_inputs_and_resumes_the_execution(job):
    _request(job, 0)
    # GIVEN inputs that do not fit StageInputs THEN nothing is written nor sent
    with pytest.raises(errors.InvalidDocumentError, match="sample_weight"):
        job.send_stage_inputs(0, {"sample_weight": [[[1.0]]]}, timeout=0.1)
    assert job.client.sfn.calls == []
    # WHEN the kernel weights are sent
    weights = {"sample_weights": [[[0.0, 0.5, 1.0]]]}
    key = job.send_stage_inputs(0, weights, timeout=0.1)
    # THEN they are at the stage's inputs key, and the execution resumed with the request's token
    assert key == storage.stage_inputs_key(JOB, 0)
    assert job.client.store.get_json(key) == weights
    assert job.client.sfn.calls == [("send_task_success", {"taskToken": "tok-1", "output": "{}"})]


def test_a_stale_token_is_sent_again_with_the_newer_request(job):
    # GIVEN a request whose token went stale (a retried ClientInputs wrote a new one)
    _request(job, "estimate", token="old")
    sfn = job.client.sfn
    sfn.fail_with = ["InvalidToken"]

    def newer(*args: Any, **kwargs: Any) -> None:
        _request(job, "estimate", token="new")

    estimate = {"d_cols": ["Conventional"], "coef": {"Conventional": 1.0},
                "se": {"Conventional": 0.5}, "t_stat": {"Conventional": 2.0},
                "pval": {"Conventional": 0.05}, "ci_95": {"Conventional": [0.0, 2.0]},
                "all_coef": {"Conventional": [1.0]}, "all_se": {"Conventional": [0.5]}}  # fmt: skip
    original = sfn._send

    def send(name: str, **kwargs: Any) -> dict[str, Any]:
        if kwargs["taskToken"] == "old":
            newer()
        return original(name, **kwargs)

    sfn._send = send
    # WHEN the estimate is sent
    key = job.send_estimate(estimate, timeout=0.1)
    # THEN it is written, and sent again with the new token
    assert key == storage.client_estimate_key(JOB)
    assert job.client.store.get_json(key)["coef"] == {"Conventional": 1.0}
    assert [c[1]["taskToken"] for c in sfn.calls] == ["old", "new"]
    # AND a token that stays stale names the step and the execution's status
    sfn.fail_with = ["TaskTimedOut"]
    with pytest.raises(
        errors.JobFailedError, match="no longer waits for the estimate .TaskTimedOut"
    ):
        job.send_estimate(estimate, timeout=0.1)
    # AND another refusal passes through as it is
    sfn.fail_with = ["AccessDeniedException"]
    with pytest.raises(ClientError, match="AccessDenied"):
        job.send_estimate(estimate, timeout=0.1)


def test_the_clients_own_failure_fails_the_execution_naming_the_step(job):
    _request(job, 2)
    job.send_client_failure(2, "RdrobustError", "bandwidth selection did not converge", timeout=0.1)
    name, kwargs = job.client.sfn.calls[0]
    assert name == "send_task_failure" and kwargs["taskToken"] == "tok-1"
    assert kwargs["error"] == "RdrobustError"
    assert kwargs["cause"] == (
        "the client failed to compute the inputs of stage 2: bandwidth selection did not converge"
    )
    # ... cut to Step Functions' limits
    job.send_client_failure(2, "E" * 300, "c" * 40_000, timeout=0.1)
    kwargs = job.client.sfn.calls[1][1]
    assert len(kwargs["error"]) == 256 and len(kwargs["cause"]) == 32_768


def test_a_wait_that_timed_out_fails_the_job_with_its_named_error(job, asl):
    # GIVEN the execution failed at the Pass that names a timed-out wait
    named = asl["States"][EstimateState.NAME_CLIENT_INPUTS_TIMEOUT]["Parameters"]
    cause = f"job {JOB} waited 3600 s (the template parameter ClientTimeoutSeconds) for the inputs"
    job.client.sfn.status = "FAILED"
    job.client.sfn.failure = {"error": named["Error"], "cause": cause}
    # WHEN the client waits for the job THEN it raises ClientTimeoutError with that cause
    with pytest.raises(errors.ClientTimeoutError, match="ClientTimeoutSeconds"):
        job.wait(timeout=0)
