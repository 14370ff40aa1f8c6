"""``fanfit doctor``'s checks on fake AWS clients: the stack's outputs, the caller's permissions by
IAM's simulation or by dry calls, and what each failure says to fix."""

from __future__ import annotations

from typing import Any

import pytest

from fanfit.cli import doctor

OUTPUTS = {
    **dict.fromkeys(doctor.REQUIRED_OUTPUTS, "x"),
    "EstimateStateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:fanfit-estimate",
    "ClientPolicyArn": "arn:aws:iam::123456789012:policy/fanfit-ClientPolicy-1A2B",
    "GpuWorkerEnabled": "false",
}


class _Error(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code}}


class _Any:
    """Every method call answers ``answer()`` (raise or return)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.answer()


class _Stack:
    name = "fanfit"
    bucket = "fanfit-data"
    job_table = "fanfit-jobs"
    endpoint_url = None


def _client(caller: str, *, iam: Any, others: Any, status: str = "CREATE_COMPLETE",
            outputs: dict[str, str] | None = None) -> Any:  # fmt: skip
    described = {"Stacks": [{"StackStatus": status, "Outputs": [
        {"OutputKey": k, "OutputValue": v} for k, v in (outputs or OUTPUTS).items()]}]}  # fmt: skip

    class _Sts:
        def get_caller_identity(self) -> dict[str, str]:
            return {"Arn": caller, "Account": "123456789012"}

    class _Cfn:
        def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 - boto3's
            return described

    class _Session:
        region_name = "us-east-1"

        def client(self, name: str, endpoint_url: str | None = None) -> Any:
            return {"sts": _Sts(), "iam": iam, "cloudformation": _Cfn()}.get(name, others)

    class _Client:
        stack = _Stack()
        session = _Session()
        sfn = others
        s3 = others

    return _Client()


def test_a_caller_iam_denies_is_told_which_actions_and_which_policy_to_attach():
    # GIVEN an assumed role whose simulated policy allows nothing
    deny = _Any(lambda: {"EvaluationResults": [{"EvalDecision": "implicitDeny"}]})
    client = _client("arn:aws:sts::123456789012:assumed-role/analyst/ana", iam=deny, others=None)
    # WHEN its permissions are checked
    check = doctor.check_permissions(client, OUTPUTS)
    # THEN it fails naming the actions, the way it checked, and the policy to attach
    assert check.status == "FAIL"
    assert "states:StopExecution" in check.detail and "iam:SimulatePrincipalPolicy" in check.detail
    assert OUTPUTS["ClientPolicyArn"] in check.fix
    assert check.line().splitlines()[1].strip().startswith("-> attach the managed policy")


def test_without_iam_simulation_a_dry_call_per_action_tells_denied_from_not_found():
    # GIVEN a caller who may not simulate, and whose calls answer "not found" except S3's 403
    class _Others:
        def __getattr__(self, name: str) -> Any:
            code = "AccessDenied" if name == "get_object" else "ExecutionDoesNotExist"

            def call(*args: Any, **kwargs: Any) -> Any:
                raise _Error(code)

            return call

    no_simulation = _Any(lambda: (_ for _ in ()).throw(_Error("AccessDenied")))
    client = _client("arn:aws:iam::123456789012:user/ana", iam=no_simulation, others=_Others())
    # WHEN checked THEN only s3:GetObject is denied, found by dry calls
    check = doctor.check_permissions(client, OUTPUTS)
    assert check.status == "FAIL" and "a dry call per action" in check.detail
    assert "may not s3:GetObject (" in check.detail


def test_the_root_user_is_allowed_everything_and_told_to_use_the_policy():
    client = _client("arn:aws:iam::123456789012:root", iam=None, others=None)
    check = doctor.check_permissions(client, OUTPUTS)
    assert check.status == "ok" and "ClientPolicyArn" in check.detail


@pytest.mark.parametrize(("status", "outputs", "found"), [
    ("CREATE_COMPLETE", {"DataBucketName": "b"}, "lacks outputs JobTableName"),
    ("ROLLBACK_COMPLETE", OUTPUTS, "is ROLLBACK_COMPLETE"),
])  # fmt: skip
def test_a_stack_from_an_older_template_or_rolled_back_fails_with_the_fix(status, outputs, found):
    client = _client("arn:aws:iam::123456789012:user/ana", iam=None, others=None, status=status,
                     outputs=outputs)  # fmt: skip
    check, _ = doctor.check_stack(client)
    assert check.status == "FAIL" and found in check.detail and check.fix


def test_a_complete_stack_with_every_output_passes_and_a_cpu_stack_says_what_is_off():
    client = _client("arn:aws:iam::123456789012:user/ana", iam=None, others=None)
    check, outputs = doctor.check_stack(client)
    assert check.status == "ok" and outputs == OUTPUTS
    gpu = doctor.check_gpu_worker(client, outputs)
    assert gpu.status == "ok" and "EnableGpuWorker=true" in gpu.detail
