"""``fanfit doctor [--stack NAME]``: check a deployed stack as its user meets it, and say what to fix.

Checks, one line each (``ok``, ``FAIL`` or ``skip``, the check, what was found; after a failure, what
to do):

1. **stack**: the CloudFormation stack exists, is complete, and has the outputs this client reads
   (a stack deployed from an older template lacks some: redeploy);
2. **GPU worker**: ``GpuWorkerEnabled``; when on, its job queue and compute environment are
   ENABLED and VALID (an INVALID compute environment's reason is quoted);
3. **permissions**: each action the client needs (:data:`CLIENT_ACTIONS`, what the template's
   ``ClientPolicy`` grants) on this stack's resources, through ``iam:SimulatePrincipalPolicy`` on
   the caller where that is allowed, else by a harmless call per action (describe an execution
   that does not exist, read a missing key, get a missing item: "not found" means allowed,
   AccessDenied means not);
4. **job**: a tiny estimate (PLR, 200 rows, linear learners, 2 folds) end to end, within
   ``--timeout`` seconds (``--no-job`` skips it).

Exit code 0 when nothing failed, 1 otherwise (4 when the stack cannot be reached at all).
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fanfit.cli import common

__all__ = ["CLIENT_ACTIONS", "REQUIRED_OUTPUTS", "Check", "add_parser", "run"]

#: Outputs the client reads; a stack without one was deployed from an older template.
REQUIRED_OUTPUTS = (
    "DataBucketName",
    "JobTableName",
    "PartitionTableName",
    "EstimateStateMachineArn",
    "TrainStateMachineArn",
    "TrainWorkerMemorySizes",
    "GpuWorkerEnabled",
    "ClientPolicyArn",
)
#: What the client does on a stack: (action, which resource), as the template's ClientPolicy grants.
CLIENT_ACTIONS = (
    ("cloudformation:DescribeStacks", "stack"),
    ("states:StartExecution", "estimate"),
    ("states:DescribeExecution", "execution"),
    ("states:StopExecution", "execution"),
    ("states:GetExecutionHistory", "execution"),
    ("s3:PutObject", "object"),
    ("s3:GetObject", "object"),
    ("s3:DeleteObject", "object"),
    ("s3:ListBucket", "bucket"),
    ("dynamodb:GetItem", "table"),
    ("dynamodb:UpdateItem", "table"),
    ("dynamodb:DeleteItem", "table"),
    ("lambda:GetFunctionConfiguration", "function"),
)
_DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden", "403")


@dataclass
class Check:
    """One line of the doctor's report."""

    name: str
    status: str  # "ok", "FAIL" or "skip"
    detail: str
    fix: str = ""

    def line(self) -> str:
        """``<status> <name>: <detail>`` and, after a failure, ``-> <fix>``."""
        text = f"{self.status:<4} {self.name}: {self.detail}"
        return text + (f"\n     -> {self.fix}" if self.fix and self.status == "FAIL" else "")


def add_parser(sub: Any) -> None:
    """Add ``fanfit doctor`` to the subcommands ``sub``."""
    p = sub.add_parser(
        "doctor",
        help="check a deployed stack (outputs, GPU worker, your permissions, a tiny job) and "
        "say what to fix",
    )
    common.add_stack_options(p)
    p.add_argument("--no-job", action="store_true",
                   help="skip the tiny estimate (default: run it end to end)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds the tiny estimate may take (default: 600)")  # fmt: skip
    p.set_defaults(func=run)


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", type(exc).__name__))


def _outputs(client: Any) -> tuple[dict[str, str], str]:
    cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    stack = cfn.describe_stacks(StackName=client.stack.name)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    return outputs, str(stack.get("StackStatus", ""))


def check_stack(client: Any) -> tuple[Check, dict[str, str]]:
    """The stack's status and outputs (:data:`REQUIRED_OUTPUTS`)."""
    name = client.stack.name
    try:
        outputs, status = _outputs(client)
    except Exception as exc:  # botocore ClientError, EndpointConnectionError
        return Check("stack", "FAIL", f"cannot read stack {name!r}: {_code(exc)}",
                     "deploy it (docs/deploy.md) or give its name and region with --stack, "
                     "--region"), {}  # fmt: skip
    missing = [o for o in REQUIRED_OUTPUTS if o not in outputs]
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status:
        return Check("stack", "FAIL", f"stack {name!r} is {status}",
                     "see its events in the CloudFormation console, fix, and deploy again"), outputs  # fmt: skip
    if missing:
        return Check("stack", "FAIL", f"stack {name!r} ({status}) lacks outputs {', '.join(missing)}",
                     "it was deployed from an older template.yaml: `sam build && sam deploy`"), outputs  # fmt: skip
    return Check("stack", "ok", f"{name!r} {status}, {len(outputs)} outputs"), outputs


def check_gpu_worker(client: Any, outputs: dict[str, str]) -> Check:
    """The GPU worker: off (what that means), or its queue and compute environment usable."""
    from fanfit.client.check import stack_has_gpu_worker

    if not stack_has_gpu_worker(outputs):
        return Check("GPU worker", "ok", "off (EnableGpuWorker=false): Torch learners and GPU "
                     "workers are refused; redeploy with EnableGpuWorker=true for them")  # fmt: skip
    batch = client.session.client("batch", endpoint_url=client.stack.endpoint_url)
    try:
        queues = batch.describe_job_queues(jobQueues=[outputs["GpuJobQueueArn"]])["jobQueues"]
        envs = [e["computeEnvironment"] for q in queues for e in q["computeEnvironmentOrder"]]
        described = batch.describe_compute_environments(computeEnvironments=envs)
    except Exception as exc:  # botocore ClientError
        return Check("GPU worker", "FAIL", f"cannot describe its job queue: {_code(exc)}",
                     "allow batch:DescribeJobQueues and DescribeComputeEnvironments")  # fmt: skip
    bad = [
        f"{e.get('computeEnvironmentName')} {e.get('state')}/{e.get('status')}"
        + (f" ({e['statusReason']})" if e.get("statusReason") else "")
        for e in described["computeEnvironments"]
        if e.get("state") != "ENABLED" or e.get("status", "VALID") != "VALID"
    ]
    if not queues or queues[0].get("state") != "ENABLED" or bad:
        return Check("GPU worker", "FAIL",
                     f"queue {queues[0].get('state') if queues else 'missing'}; " + "; ".join(bad),
                     "enable the compute environment, or fix its subnets, security groups or "
                     "instance types (docs/deploy.md, 'The GPU worker')")  # fmt: skip
    return Check("GPU worker", "ok", f"on: queue ENABLED, {len(envs)} compute environment(s) VALID")


def _resources(client: Any, outputs: dict[str, str], region: str, account: str) -> dict[str, str]:
    estimate = outputs.get("EstimateStateMachineArn", "")
    partition = estimate.split(":")[1] if estimate.count(":") > 2 else "aws"
    return {
        "stack": f"arn:{partition}:cloudformation:{region}:{account}:stack/{client.stack.name}/*",
        "estimate": estimate,
        "execution": estimate.replace(":stateMachine:", ":execution:") + ":doctor",
        "object": f"arn:{partition}:s3:::{client.stack.bucket}/jobs/doctor",
        "bucket": f"arn:{partition}:s3:::{client.stack.bucket}",
        "table": f"arn:{partition}:dynamodb:{region}:{account}:table/{client.stack.job_table}",
        "function": f"arn:{partition}:lambda:{region}:{account}:function:"
        + outputs.get("PrepareFunctionName", f"{client.stack.name}-*"),
    }


def _principal(arn: str) -> str:
    """The IAM principal to simulate: an assumed role's session ARN becomes the role's ARN."""
    if ":assumed-role/" in arn:
        head, rest = arn.split(":assumed-role/", 1)
        return f"{head.replace(':sts:', ':iam:')}:role/{rest.split('/')[0]}"
    return arn


def _simulate(client: Any, caller: str, resources: dict[str, str]) -> dict[str, bool] | None:
    """``{action: allowed}`` by iam:SimulatePrincipalPolicy; None when that call is not allowed."""
    iam = client.session.client("iam", endpoint_url=client.stack.endpoint_url)
    allowed: dict[str, bool] = {}
    try:
        for action, kind in CLIENT_ACTIONS:
            result = iam.simulate_principal_policy(
                PolicySourceArn=_principal(caller), ActionNames=[action],
                ResourceArns=[resources[kind]],
            )["EvaluationResults"]  # fmt: skip
            allowed[action] = all(r.get("EvalDecision") == "allowed" for r in result)
    except Exception:  # noqa: BLE001 - not allowed or not supported: probe instead
        return None
    return allowed


def _probes(client: Any, resources: dict[str, str]) -> dict[str, Callable[[], Any]]:
    """One harmless call per action: it reads or stops nothing that exists."""
    sfn, s3 = client.sfn, client.s3
    ddb = client.session.client("dynamodb", endpoint_url=client.stack.endpoint_url)
    lam = client.session.client("lambda", endpoint_url=client.stack.endpoint_url)
    cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    missing_key = {"job_id": {"S": f"doctor-{uuid.uuid4().hex[:8]}"}}
    missing_execution = resources["execution"] + f"-{uuid.uuid4().hex[:8]}"
    function = resources["function"].rsplit(":", 1)[-1]
    return {
        "cloudformation:DescribeStacks": lambda: cfn.describe_stacks(StackName=client.stack.name),
        "states:StartExecution": lambda: sfn.list_executions(
            stateMachineArn=resources["estimate"], maxResults=1
        ),
        "states:DescribeExecution": lambda: sfn.describe_execution(executionArn=missing_execution),
        "states:StopExecution": lambda: sfn.stop_execution(executionArn=missing_execution),
        "states:GetExecutionHistory": lambda: sfn.get_execution_history(
            executionArn=missing_execution, maxResults=1
        ),
        "s3:GetObject": lambda: s3.get_object(Bucket=client.stack.bucket, Key="jobs/doctor/none"),
        "s3:ListBucket": lambda: s3.list_objects_v2(
            Bucket=client.stack.bucket, Prefix="jobs/doctor/", MaxKeys=1
        ),
        "dynamodb:GetItem": lambda: ddb.get_item(TableName=client.stack.job_table, Key=missing_key),
        "lambda:GetFunctionConfiguration": lambda: lam.get_function_configuration(
            FunctionName=function
        ),
    }


def check_permissions(client: Any, outputs: dict[str, str]) -> Check:
    """The caller's permissions on this stack (see the module doc)."""
    sts = client.session.client("sts", endpoint_url=client.stack.endpoint_url)
    try:
        identity = sts.get_caller_identity()
    except Exception as exc:  # botocore NoCredentialsError, ClientError
        return Check("permissions", "FAIL", f"no usable AWS credentials: {_code(exc)}",
                     "configure credentials (aws configure, AWS_PROFILE)")  # fmt: skip
    caller, account = str(identity["Arn"]), str(identity["Account"])
    if caller.endswith(":root"):  # may do anything; IAM cannot simulate the root user
        return Check("permissions", "ok", f"{caller} is the account's root user: every action "
                     "is allowed (run jobs as a user or role with the stack's ClientPolicyArn "
                     "instead)")  # fmt: skip
    region = client.session.region_name or "us-east-1"
    resources = _resources(client, outputs, region, account)
    simulated = _simulate(client, caller, resources)
    if simulated is not None:
        how, denied = "iam:SimulatePrincipalPolicy", [a for a, ok in simulated.items() if not ok]
    else:
        how, denied = "a dry call per action", []
        for action, probe in _probes(client, resources).items():
            try:
                probe()
            except Exception as exc:  # noqa: BLE001 - "not found" is allowed, denied is not
                if _code(exc) in _DENIED:
                    denied.append(action)
    policy = outputs.get("ClientPolicyArn", "the stack's ClientPolicyArn output")
    if denied:
        return Check("permissions", "FAIL", f"{caller} may not {', '.join(denied)} ({how})",
                     f"attach the managed policy {policy} to {caller}")  # fmt: skip
    return Check("permissions", "ok", f"{caller} may run, watch, cancel and delete jobs ({how})")


def check_job(client: Any, timeout_s: float) -> Check:
    """A tiny estimate end to end (a seeded PLR with a true effect of 0.5)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 2))
    d = x[:, 0] + rng.normal(size=200)
    y = 0.5 * d + x[:, 1] + rng.normal(size=200)
    frame = pd.DataFrame({"y": y, "d": d, "x0": x[:, 0], "x1": x[:, 1]})
    started = time.perf_counter()
    try:
        job = client.submit_estimate(frame, model="plr", y="y", d="d", ml_l="LinearRegression",
                                     ml_m="LinearRegression", n_folds=2, seed=1)  # fmt: skip
        result = job.result(timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - any failure is the finding
        return Check("job", "FAIL", f"a tiny estimate failed: {type(exc).__name__}: {exc}",
                     "run `fanfit status JOB` and the functions' logs; check the permissions "
                     "above")  # fmt: skip
    coef = float(np.ravel(result.coef)[0])
    seconds = time.perf_counter() - started
    return Check("job", "ok", f"a tiny estimate ({job.job_id}) ran in {seconds:.0f} s, coef "
                 f"{coef:.3f} (true effect 0.5)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit doctor``; returns 0 when every check passed, 1 otherwise."""
    checks: list[Check] = []

    def report(check: Check) -> None:
        checks.append(check)
        print(check.line(), flush=True)

    with common.stack_client(args) as client:
        stack, outputs = check_stack(client)
        report(stack)
        if outputs:
            report(check_gpu_worker(client, outputs))
            report(check_permissions(client, outputs))
        if args.no_job:
            report(Check("job", "skip", "--no-job"))
        elif stack.status == "ok":
            report(check_job(client, args.timeout))
        else:
            report(Check("job", "skip", "the stack check failed"))
    failed = [c.name for c in checks if c.status == "FAIL"]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed"
          + (f"; fix: {', '.join(failed)}" if failed else ""))  # fmt: skip
    return 1 if failed else 0
