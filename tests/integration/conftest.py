"""Fixtures of the integration tests: one local stack per test session, the project deployed into it.

The stack runs in a state dir of its own (``FANFIT_HOME`` is set to it for the session, so
``fanfit.local.status()``, ``Client.local_stack()`` and the CLI in a subprocess find it), on a free
port, and is stopped when the session ends. It needs ``make install-local``
(``scripts/install_local_stack.sh``).

The project is built and deployed once (``sam build`` and ``sam deploy`` through
:class:`fanfit.local.deploy.Deployer`, as ``fanfit local up`` does). A module that needs the
template a second time (another stack name or parameters in the session's stack, or a stack of its
own: fault injection, a restart) creates it with :func:`deploy_again` from the template that first
deploy packaged: its code and layers are already zipped and uploaded, so no ``sam build`` or
``sam package`` runs again; only CloudFormation creates the resources.

Waiting is bounded polling on a condition (:func:`wait_until`), never a fixed sleep.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fanfit.local.deploy import Deployer, local_batch_parameters, local_bucket_parameters
from fanfit.local.process import ARTIFACT_BUCKET_PREFIX
from fanfit.local.stack import LocalStack, StackInfo

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SESSION_STACK = "fanfit"
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
STACK_CREATE_TIMEOUT_S = 600.0

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    timeout_s: float,
    message: str | Callable[[], str],
    interval_s: float = 0.25,
) -> T:
    """Poll ``condition`` until it returns a truthy value; return that value.

    Parameters
    ----------
    condition : callable
        Called every ``interval_s`` seconds until truthy.
    timeout_s : float
        Deadline, seconds from the call.
    message : str or callable
        What was awaited, for the assertion message (a callable is evaluated on timeout, so it can
        report the last state seen).
    interval_s : float
        Seconds between polls.

    Raises
    ------
    AssertionError
        When the deadline passes first (the message names what was awaited and for how long).
    """
    deadline = time.monotonic() + timeout_s
    value = condition()
    while not value and time.monotonic() < deadline:
        time.sleep(interval_s)
        value = condition()
    if not value:
        text = message() if callable(message) else message
        raise AssertionError(f"not within {timeout_s:.0f} s: {text}")
    return value


def _session(info: StackInfo) -> Any:
    import boto3

    return boto3.Session(
        aws_access_key_id="test",
        aws_secret_access_key="test",  # LocalStack's documented dummy
        region_name=info.region,
    )


def client_of(info: StackInfo, stack_name: str = SESSION_STACK) -> Any:
    """A :class:`fanfit.client.Client` of ``stack_name`` on the local stack ``info``."""
    from fanfit.client import Client

    return Client(stack_name, endpoint_url=info.endpoint, session=_session(info), local=True)


def deploy_again(
    source: StackInfo,
    target: StackInfo,
    stack_name: str = SESSION_STACK,
    parameters: Mapping[str, str] | None = None,
    local_parameters: bool = True,
) -> dict[str, str]:
    """Create the project's stack ``stack_name`` in ``target`` from what the session deployed.

    The template the session's ``sam deploy`` sent to CloudFormation (``TemplateStage=Original``:
    the SAM template, its code and layers as S3 URIs in ``source``'s artifact bucket) is created
    again with CloudFormation, with the local stack's parameters (as :class:`Deployer` sets them)
    and ``parameters``. When ``target`` is another LocalStack, the artifacts are first copied into a
    bucket of its own (named with the artifact prefix: the S3 mirror skips it).

    Parameters
    ----------
    source : StackInfo
        The session's stack, where ``fanfit`` is deployed.
    target : StackInfo
        Where to create the stack (``source`` itself, or another running LocalStack).
    stack_name : str
        CloudFormation stack name; it must not exist in ``target`` yet.
    parameters : mapping of str to str, optional
        Parameter overrides.
    local_parameters : bool
        False: none of the local stack's parameters either (the GPU worker's network and image,
        the fixed bucket name): the template's defaults, as `sam deploy --guided` offers them.

    Returns
    -------
    dict of str to str
        The stack's outputs.

    Raises
    ------
    AssertionError
        When the stack is not created within ``STACK_CREATE_TIMEOUT_S``, or fails.
    """
    source_cfn = _session(source).client("cloudformation", endpoint_url=source.endpoint)
    body = source_cfn.get_template(StackName=SESSION_STACK, TemplateStage="Original")
    text = body["TemplateBody"]
    if not isinstance(text, str):  # boto3 decodes a JSON template
        import json

        text = json.dumps(text)
    s3 = _session(target).client("s3", endpoint_url=target.endpoint)
    bucket = f"{ARTIFACT_BUCKET_PREFIX}again-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    if target.endpoint != source.endpoint:
        text = _copy_artifacts(source, target, text, bucket)
    key = f"templates/{stack_name}.yaml"  # CloudFormation takes at most 51,200 bytes inline
    s3.put_object(Bucket=bucket, Key=key, Body=text.encode())
    values = {
        **(local_batch_parameters(target, TEMPLATE) if local_parameters else {}),
        **(local_bucket_parameters(target, TEMPLATE, stack_name) if local_parameters else {}),
        **(parameters or {}),
    }
    cfn = _session(target).client("cloudformation", endpoint_url=target.endpoint)
    cfn.create_stack(
        StackName=stack_name,
        TemplateURL=f"{target.endpoint}/{bucket}/{key}",
        Parameters=[{"ParameterKey": k, "ParameterValue": str(v)} for k, v in values.items()],
        Capabilities=CAPABILITIES,
    )

    def created() -> dict[str, Any] | None:
        stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
        status = stack["StackStatus"]
        assert not status.endswith(("FAILED", "ROLLBACK_COMPLETE")), (status, stack)
        return stack if status == "CREATE_COMPLETE" else None

    stack = wait_until(
        created, STACK_CREATE_TIMEOUT_S, f"stack {stack_name} created", interval_s=1.0
    )
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def _copy_artifacts(source: StackInfo, target: StackInfo, template: str, bucket: str) -> str:
    """Copy every object of ``source``'s artifact buckets that the template names (``s3://B/K``
    URIs of code and layers, ``Bucket: B`` / ``Key: K`` of state machine definitions) into
    ``bucket`` of ``target``; return the template naming that bucket instead."""
    src = _session(source).client("s3", endpoint_url=source.endpoint)
    dst = _session(target).client("s3", endpoint_url=target.endpoint)
    buckets = set(re.findall(rf"{re.escape(ARTIFACT_BUCKET_PREFIX)}[a-z0-9-]+", template))
    assert buckets, "the deployed template names no artifact bucket"
    copied = 0
    for old_bucket in sorted(buckets):
        for page in src.get_paginator("list_objects_v2").paginate(Bucket=old_bucket):
            for item in page.get("Contents", []):
                if item["Key"] in template:
                    # downloaded whole first (s3transfer's download retries a read the loaded
                    # machine cut short; streaming the body into the upload did not), then uploaded
                    with tempfile.TemporaryFile() as buffer:
                        src.download_fileobj(old_bucket, item["Key"], buffer)
                        buffer.seek(0)
                        dst.upload_fileobj(buffer, bucket, item["Key"])
                    copied += 1
        template = template.replace(old_bucket, bucket)
    assert copied, f"no object of {sorted(buckets)} is named in the deployed template"
    return template


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackInfo]:
    """A running local stack for the whole session (started here, stopped at the end)."""
    home = tmp_path_factory.mktemp("fanfit-home")
    patch = pytest.MonkeyPatch()
    patch.setenv("FANFIT_HOME", str(home))
    stack = LocalStack(root=ROOT, home=home)
    started = time.perf_counter()
    info = stack.start()
    print(f"\nlocal stack up in {time.perf_counter() - started:.1f} s at {info.endpoint}")
    try:
        yield info
    finally:
        stack.stop()
        patch.undo()


@pytest.fixture(scope="session")
def local_stack_env(local_stack: StackInfo) -> dict[str, str]:
    """Environment for a subprocess (the CLI) that must use the session's stack."""
    env = dict(os.environ)
    env.update(local_stack.client_env())
    env["FANFIT_HOME"] = local_stack.state_dir
    return env


@pytest.fixture(scope="session")
def fanfit_outputs(local_stack: StackInfo) -> dict[str, str]:
    """The project's ``template.yaml`` deployed as stack ``fanfit``; its outputs."""
    deployer = Deployer(local_stack, TEMPLATE)
    outputs = deployer.run()
    print(f"\nfanfit deployed: {deployer.timings}")
    return outputs


@pytest.fixture(scope="session")
def local_client(fanfit_outputs: dict[str, str]) -> Any:
    """A :class:`fanfit.client.Client` of the deployed project on the session's stack."""
    from fanfit.client import Client

    return Client.local_stack()


@pytest.fixture(scope="session")
def redeploy(
    local_stack: StackInfo, fanfit_outputs: dict[str, str]
) -> Callable[..., dict[str, str]]:
    """:func:`deploy_again` from the session's deployed project: ``redeploy(target, stack_name,
    parameters)`` (``target`` defaults to the session's stack)."""

    def run(
        target: StackInfo | None = None,
        stack_name: str = SESSION_STACK,
        parameters: Mapping[str, str] | None = None,
        local_parameters: bool = True,
    ) -> dict[str, str]:
        started = time.perf_counter()
        outputs = deploy_again(
            local_stack, target or local_stack, stack_name, parameters, local_parameters
        )
        print(f"\n{stack_name} created in {time.perf_counter() - started:.1f} s")
        return outputs

    return run


@pytest.fixture(name="wait_until", scope="session")
def _wait_until() -> Callable[..., Any]:
    """:func:`wait_until` for the test modules: bounded polling on a condition."""
    return wait_until


@pytest.fixture(scope="session")
def client_of_stack() -> Callable[..., Any]:
    """:func:`client_of`: a client of a stack on another local stack than the session's."""
    return client_of


def steps_in_progress(client: Any, table: str) -> set[str]:
    """The ids of the Powertools Idempotency records of ``table`` that are INPROGRESS.

    Every fanfit function that writes is idempotent on this table: a record is INPROGRESS from the
    handler's start until it returns (then COMPLETED; deleted when it raises). A step of a stopped
    execution that is still running, and may still write, therefore has one.
    """
    dynamodb = client.session.client("dynamodb", endpoint_url=client.stack.endpoint_url)
    ids: set[str] = set()
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page["Items"]:
            if item.get("status", {}).get("S") == "INPROGRESS":
                ids.add(item["id"]["S"])
    return ids


class StoppedJobs:
    """Waits for a job stopped with ``StopExecution`` to be over, Lambda steps included.

    The execution ends at once (ABORTED; the local stack reports FAILED when the stop lands in a
    Distributed Map, whose aborted children count as failures), but a Lambda step it had started
    runs on and may still write to S3. :meth:`snapshot` (before the job is submitted) records the
    steps already in progress on the stack; :meth:`wait` then polls until the execution no longer
    runs and no other step is in progress (:func:`steps_in_progress`).
    """

    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table

    def snapshot(self) -> set[str]:
        """The idempotency records in progress now."""
        return steps_in_progress(self.client, self.table)

    def wait(self, execution_arn: str, before: set[str], timeout_s: float = 120.0) -> None:
        """Poll (bounded) until ``execution_arn`` has ended and no step outside ``before`` runs.

        Raises
        ------
        AssertionError
            When that is not so within ``timeout_s`` seconds (the message says what was seen).
        """
        last: dict[str, Any] = {}

        def over() -> bool:
            status = self.client.sfn.describe_execution(executionArn=execution_arn)["status"]
            running = self.snapshot() - before
            last.update(status=status, steps_in_progress=sorted(running))
            return status != "RUNNING" and not running

        wait_until(
            over, timeout_s, lambda: f"{execution_arn} ended, no step in progress; saw {last}"
        )


@pytest.fixture(scope="session")
def stopped_jobs(local_client: Any, fanfit_outputs: dict[str, str]) -> StoppedJobs:
    """:class:`StoppedJobs` of the session's ``fanfit`` stack."""
    return StoppedJobs(local_client, fanfit_outputs["IdempotencyTableName"])
