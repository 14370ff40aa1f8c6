"""Deploy the project's SAM template into the running local stack, through its CloudFormation.

``template.yaml`` is the single source of truth, locally as on AWS: the same ``sam build`` (no
Docker: zip functions and layers with ``Metadata: BuildMethod`` are built with the ``python3.12`` of
the Lambda interpreter on ``PATH``) and ``sam deploy`` (``AWS_ENDPOINT_URL`` pointing at LocalStack;
code and layers uploaded to an artifact bucket; LocalStack's CloudFormation with the SAM transform
creates the bucket, tables, layers, functions and state machines).

Both steps are cached: the build is skipped when the template, the parameters and the files under
every local path it names (``CodeUri``, ``ContentUri``, ``DefinitionUri``, ...) are unchanged since
the last build (and ``sam build --cached`` rebuilds only what changed otherwise); the deploy is
skipped when the same build is already deployed as a complete stack in the running LocalStack.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from fanfit.errors import StackError
from fanfit.local.process import (
    ARTIFACT_BUCKET_PREFIX,
    LocalStack,
    StackInfo,
    lambda_python,
    project_root,
)

DEFAULT_STACK_NAME = "fanfit"
BUILD_TIMEOUT_S = 1800.0
DEPLOY_TIMEOUT_S = 900.0
CAPABILITIES = ("CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND")
_PATH_KEYS = frozenset(
    {
        "CodeUri",
        "ContentUri",
        "DefinitionUri",
        "Code",
        "Content",
        "DefinitionS3Location",
        "BodyS3Location",
        "TemplateURL",
        "Location",
    }
)
_SKIP_NAMES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git"})
_COMPLETE = ("CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE")


def sam_executable() -> str:
    """The SAM CLI: ``$FANFIT_SAM``, ``sam`` beside this interpreter, or ``sam`` on ``PATH``.

    Raises
    ------
    StackError
        When none is found.
    """
    candidates = [
        os.environ.get("FANFIT_SAM", ""),
        str(Path(sys.executable).parent / "sam"),
        shutil.which("sam") or "",
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise StackError(
        "the SAM CLI (`sam`) was not found: install the local extra (`pip install -e '.[local]'`, "
        "aws-sam-cli) or set FANFIT_SAM"
    )


def load_template(path: Path) -> dict[str, Any]:
    """Parse a CloudFormation/SAM YAML template, its short-form tags as their long forms.

    ``!Ref X`` reads as ``{"Ref": "X"}`` and any other ``!Name value`` as ``{"Fn::Name": value}``
    (CloudFormation's JSON form of the intrinsic functions: ``!Sub``, ``!GetAtt``, ``!If``, ...), the
    value constructed in full (scalar, list or mapping). The paths :func:`local_paths` reads are
    plain strings in the project's template, and a test can still tell which layer a ``!Ref`` names
    (tests/integration/test_layer_budget.py).

    Parameters
    ----------
    path : pathlib.Path
        The template (``template.yaml``, or ``sam build``'s copy of it).

    Returns
    -------
    dict
        The template as plain JSON-like values.

    Raises
    ------
    StackError
        When PyYAML is missing, the file cannot be read or parsed, or it has no ``Resources``.
    """
    try:
        import yaml
    except ImportError as exc:  # pyyaml comes with aws-sam-cli and cfn-lint
        raise StackError(
            "deploying needs PyYAML: install the local extra (`pip install -e '.[local]'`)"
        ) from exc

    class _Loader(yaml.SafeLoader):
        pass

    def _tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
        value: Any
        if isinstance(node, yaml.ScalarNode):
            value = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
        return {"Ref" if suffix == "Ref" else f"Fn::{suffix}": value}

    _Loader.add_multi_constructor("!", _tag)
    try:
        document = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    except (OSError, yaml.YAMLError) as exc:
        raise StackError(f"{path}: cannot read the template: {exc}") from exc
    if not isinstance(document, dict) or "Resources" not in document:
        raise StackError(f"{path}: not a CloudFormation template (no Resources section)")
    return document


def _walk_local_paths(node: Any, base: Path) -> Iterator[Path]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in _PATH_KEYS and isinstance(value, str) and "://" not in value:
                candidate = (base / value).resolve()
                if candidate.exists():
                    yield candidate
            else:
                yield from _walk_local_paths(value, base)
    elif isinstance(node, list):
        for value in node:
            yield from _walk_local_paths(value, base)


def local_paths(template: Path) -> list[Path]:
    """The local files and directories a template names (code, layers, state machine definitions).

    Parameters
    ----------
    template : pathlib.Path
        The SAM/CloudFormation template.

    Returns
    -------
    list of pathlib.Path
        Existing paths, sorted, without duplicates.
    """
    document = load_template(template)
    base = template.parent
    found = set(_walk_local_paths(document.get("Resources", {}), base))
    found |= set(_walk_local_paths(document.get("Globals", {}), base))
    return sorted(found)


def _iter_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_NAMES and not d.endswith(".egg-info"))
        for name in sorted(files):
            if not name.endswith((".pyc", ".pyo")):
                yield Path(root) / name


def fingerprint(template: Path, parameters: Mapping[str, str] | None = None) -> str:
    """A hash of everything a build depends on: the template, the parameters and the files it names.

    Parameters
    ----------
    template : pathlib.Path
        The template.
    parameters : mapping of str to str, optional
        Parameter overrides.

    Returns
    -------
    str
        A SHA-256 hex digest.
    """
    return _digest(template, parameters, None, lambda file: file.read_bytes())


def _digest(
    template: Path,
    parameters: Mapping[str, str] | None,
    paths: list[Path] | None,
    content: Callable[[Path], bytes],
) -> str:
    """SHA-256 of the template, the parameters, and each file's path and ``content(file)``."""
    digest = hashlib.sha256()
    digest.update(template.read_bytes())
    digest.update(json.dumps(dict(parameters or {}), sort_keys=True).encode())
    for path in local_paths(template) if paths is None else paths:
        for file in _iter_files(path):
            digest.update(str(file.relative_to(template.parent)).encode())
            digest.update(b"\0")
            digest.update(content(file))
            digest.update(b"\0")
    return digest.hexdigest()


def file_stats_key(
    template: Path, parameters: Mapping[str, str] | None = None, paths: list[Path] | None = None
) -> str:
    """A hash of the template, the parameters and each file's path, size and modification time
    under the local paths the template names: equal keys mean :func:`fingerprint` need not read
    the files again (the deploy record keeps the fingerprint under this key).

    Parameters
    ----------
    template : pathlib.Path
    parameters : mapping of str to str, optional
    paths : list of pathlib.Path, optional
        :func:`local_paths` of the template (read from it when not given).

    Returns
    -------
    str
        A SHA-256 hex digest.
    """

    def stats(file: Path) -> bytes:
        st = file.stat()
        return f"{st.st_size}\0{st.st_mtime_ns}".encode()

    return _digest(template, parameters, paths, stats)


class Deployer:
    """Builds a template with ``sam build`` and deploys it into a running local stack.

    Parameters
    ----------
    info : StackInfo
        The running local stack.
    template : path-like
        The SAM template.
    stack_name : str
        CloudFormation stack name (default ``fanfit``).
    parameters : mapping of str to str, optional
        Parameter overrides.
    work_dir : path-like, optional
        Where builds and the deploy record go (default ``<state dir>/deploy/<stack_name>``).
    """

    def __init__(
        self,
        info: StackInfo,
        template: str | os.PathLike[str],
        stack_name: str = DEFAULT_STACK_NAME,
        parameters: Mapping[str, str] | None = None,
        work_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.info = info
        self.template = Path(template).resolve()
        if not self.template.is_file():
            raise StackError(f"{self.template}: no such template")
        self.stack_name = stack_name
        self.parameters = {str(k): str(v) for k, v in (parameters or {}).items()}
        default_dir = Path(info.state_dir) / "deploy" / stack_name
        self.work_dir = Path(work_dir).resolve() if work_dir is not None else default_dir
        self.build_dir = self.work_dir / "build"
        self.cache_dir = self.work_dir / "cache"
        self.log_file = self.work_dir / "sam.log"
        self.record_file = self.work_dir / "deployed.json"
        self.timings: dict[str, float] = {}

    # -- environment -------------------------------------------------------------------------
    def environment(self) -> dict[str, str]:
        """The SAM CLI's environment: pointed at the local stack, ``python3.12`` on ``PATH``."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AWS_", "SAM_CLI_"))
        }
        env.update(self.info.client_env())
        python = self.info.lambda_python or str(lambda_python())
        python_dir = str(Path(python).parent)
        env["PATH"] = os.pathsep.join([python_dir, env.get("PATH", "")])
        env["SAM_CLI_TELEMETRY"] = "0"
        env["SAM_CLI_CONTAINER_CONNECTION_TIMEOUT"] = "1"
        return env

    def _run(self, args: list[str], timeout_s: float, step: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with open(self.log_file, "ab") as log:
            log.write(f"\n=== fanfit: {' '.join(args)}\n".encode())
            log.flush()
            try:
                done = subprocess.run(  # noqa: S603 - the SAM CLI with our arguments
                    args,
                    cwd=str(self.template.parent),
                    env=self.environment(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired as exc:
                raise StackError(
                    f"`sam {step}` did not finish within {timeout_s:.0f} s; see {self.log_file}"
                ) from exc
        self.timings[f"{step}_s"] = round(time.perf_counter() - started, 2)
        if done.returncode != 0:
            raise StackError(
                f"`sam {step}` failed (exit {done.returncode}); end of {self.log_file}:\n"
                + self._log_tail()
            )

    def _log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- steps -------------------------------------------------------------------------------
    def build(self, digest: str, force: bool = False) -> Path:
        """Run ``sam build`` unless the last build had the same fingerprint.

        Returns
        -------
        pathlib.Path
            The built template.
        """
        built = self.build_dir / "template.yaml"
        stamp = self.build_dir / ".fanfit-fingerprint"
        if not force and built.is_file() and stamp.is_file() and stamp.read_text() == digest:
            self.timings["build_s"] = 0.0
            return built
        stamp.unlink(missing_ok=True)
        args = [
            sam_executable(),
            "build",
            "--template-file",
            str(self.template),
            "--build-dir",
            str(self.build_dir),
            "--cache-dir",
            str(self.cache_dir),
            "--base-dir",
            str(self.template.parent),
            "--cached",
            "--parallel",
        ]
        if self.parameters:
            args += ["--parameter-overrides", *self._overrides()]
        self._run(args, BUILD_TIMEOUT_S, "build")
        stamp.write_text(digest)
        return built

    def _overrides(self) -> list[str]:
        return [f"ParameterKey={k},ParameterValue={v}" for k, v in sorted(self.parameters.items())]

    def _artifact_bucket(self) -> str:

        name = f"{ARTIFACT_BUCKET_PREFIX}{int(self.info.started_at * 1000)}"
        s3 = _session(self.info).client("s3", endpoint_url=self.info.endpoint)
        try:
            s3.head_bucket(Bucket=name)
        except Exception:
            s3.create_bucket(Bucket=name)
        return name

    def deploy_built(self, built: Path) -> None:
        """Run ``sam deploy`` of the built template against the local stack."""
        args = [
            sam_executable(),
            "deploy",
            "--template-file",
            str(built),
            "--stack-name",
            self.stack_name,
            "--s3-bucket",
            self._artifact_bucket(),
            "--s3-prefix",
            self.stack_name,
            "--region",
            self.info.region,
            "--capabilities",
            *CAPABILITIES,
            "--no-confirm-changeset",
            "--no-fail-on-empty-changeset",
            "--no-progressbar",
        ]
        if self.parameters:
            args += ["--parameter-overrides", *self._overrides()]
        self._run(args, DEPLOY_TIMEOUT_S, "deploy")

    def outputs(self) -> dict[str, str] | None:
        """The stack's outputs, or None when it does not exist or is not complete."""
        from botocore.exceptions import ClientError

        cloudformation = _session(self.info).client(
            "cloudformation", endpoint_url=self.info.endpoint
        )
        try:
            stack = cloudformation.describe_stacks(StackName=self.stack_name)["Stacks"][0]
        except ClientError:
            return None
        if stack.get("StackStatus") not in _COMPLETE:
            return None
        return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}

    def run(self, force: bool = False, verify: bool = True) -> dict[str, str]:
        """Build (cached) and deploy (skipped when already deployed); return the outputs.

        Parameters
        ----------
        force : bool
            Build and deploy even when nothing changed.
        verify : bool
            When the deploy record says this build is deployed in the running stack, ask the
            stack whether it is complete (``DescribeStacks``); False: trust the record and return
            the outputs it holds (the caller reads the stack next and deploys again with
            ``force`` if it is gone: :func:`fanfit.cli.common.open_client`).

        Returns
        -------
        dict of str to str
            The stack's outputs (``OutputKey`` to ``OutputValue``).

        Raises
        ------
        StackError
            When a step fails (the message quotes the end of the SAM CLI's log).
        """
        started = time.perf_counter()
        record = self._read_record()
        same_stack = (
            record.get("localstack_started_at") == self.info.started_at
            and record.get("endpoint") == self.info.endpoint
        )
        # The stack's own parameters (its default VPC, its account) and the fingerprint of the
        # files are kept in the record: a command on a running stack whose files have not
        # changed reads neither EC2 nor every file again (seconds on a small machine).
        template_key = hashlib.sha256(self.template.read_bytes()).hexdigest()
        kept = record.get("local_parameters") or {}
        if not force and same_stack and kept.get("template") == template_key:
            local = dict(kept.get("values") or {})
        else:
            local = {
                **local_batch_parameters(self.info, self.template),
                **local_bucket_parameters(self.info, self.template, self.stack_name),
            }
        self.parameters = {**local, **self.parameters}
        kept_paths = record.get("local_paths") or {}
        if kept_paths.get("template") == template_key:  # parsing the template: about 0.5 s
            paths = [Path(p) for p in kept_paths.get("paths") or ()]
        else:
            paths = local_paths(self.template)
        stats_key = file_stats_key(self.template, self.parameters, paths)
        if not force and record.get("stats_key") == stats_key and record.get("fingerprint"):
            digest = str(record["fingerprint"])
        else:
            digest = fingerprint(self.template, self.parameters)
        self.timings["fingerprint_s"] = round(time.perf_counter() - started, 2)
        kept_now = {
            "stats_key": stats_key,
            "local_parameters": {"template": template_key, "values": local},
            "local_paths": {
                "template": template_key,
                "paths": [str(p) for p in paths],
            },
        }
        if not force and record.get("fingerprint") == digest and same_stack:
            outputs = self.outputs() if verify else record.get("outputs")
            if outputs is not None:
                if any(record.get(k) != v for k, v in kept_now.items()):
                    self._write_record({**record, **kept_now})
                self.timings["total_s"] = round(time.perf_counter() - started, 2)
                return outputs
        built = self.build(digest, force=force)
        self.deploy_built(built)
        outputs = self.outputs()
        if outputs is None:
            raise StackError(
                f"stack {self.stack_name} is not complete after `sam deploy`; see {self.log_file}"
            )
        self._write_record(
            {
                "fingerprint": digest,
                "localstack_started_at": self.info.started_at,
                "endpoint": self.info.endpoint,
                "outputs": outputs,
                "deployed_at": time.time(),
                **kept_now,
            }
        )
        self.timings["total_s"] = round(time.perf_counter() - started, 2)
        return outputs

    def _write_record(self, record: Mapping[str, Any]) -> None:
        self.record_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.record_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(record), indent=2) + "\n")
        os.replace(tmp, self.record_file)

    def _read_record(self) -> dict[str, Any]:
        return _read_json(self.record_file)


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; empty when it is missing or not JSON."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def deployed_record(info: StackInfo, stack_name: str = DEFAULT_STACK_NAME) -> dict[str, Any] | None:
    """What the last deploy into this running local stack recorded, without asking the stack.

    Parameters
    ----------
    info : StackInfo
        The running local stack.
    stack_name : str
        CloudFormation stack name (default ``fanfit``).

    Returns
    -------
    dict or None
        ``deployed_at`` (seconds since the epoch) and ``outputs`` (``OutputKey`` to
        ``OutputValue``) when :meth:`Deployer.run` deployed ``stack_name`` into this very stack
        (same start time and endpoint; the default work dir); None otherwise (never deployed, or
        deployed into an earlier run of the stack, whose resources a restart does not keep).
    """
    record = _read_json(Path(info.state_dir) / "deploy" / stack_name / "deployed.json")
    if (
        record.get("localstack_started_at") != info.started_at
        or record.get("endpoint") != info.endpoint
    ):
        return None
    return {"deployed_at": record.get("deployed_at"), "outputs": record.get("outputs") or {}}


def _session(info: StackInfo) -> Any:
    """A boto3 session with the local stack's region and credentials."""
    import boto3

    env = info.client_env()
    return boto3.Session(
        region_name=info.region,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def deploy(
    template: str | os.PathLike[str] | None = None,
    stack_name: str = DEFAULT_STACK_NAME,
    parameters: Mapping[str, str] | None = None,
    info: StackInfo | None = None,
    force: bool = False,
) -> dict[str, str]:
    """Deploy a SAM template (default: the project's ``template.yaml``) into the local stack.

    Parameters
    ----------
    template : path-like, optional
        The template; default ``<project>/template.yaml``.
    stack_name : str
        CloudFormation stack name (default ``fanfit``).
    parameters : mapping of str to str, optional
        Parameter overrides.
    info : StackInfo, optional
        The local stack; default the running one of the project.
    force : bool
        Build and deploy even when nothing changed.

    Returns
    -------
    dict of str to str
        The stack's outputs.

    Raises
    ------
    StackError
        When no local stack runs, the SAM CLI is missing, or the build or deploy fails.
    """
    if info is None:
        info = LocalStack().running()
        if info is None:
            raise StackError("no local stack is running; start one with `fanfit local up`")
    if template is None:
        template = project_root() / "template.yaml"
    return Deployer(info, template, stack_name=stack_name, parameters=parameters).run(force=force)


#: The GPU worker's image name on the local stack: its jobs run the command on the host
#: (``fanfit_localstack.batch``), so no image is pulled.
LOCAL_WORKER_IMAGE = "fanfit-gpu-worker:local"


def local_bucket_parameters(
    info: StackInfo, template: str | os.PathLike[str], stack_name: str
) -> dict[str, str]:
    """The data bucket's name on the local stack: fixed, so that the bucket the S3 mirror restores
    after a restart (:mod:`fanfit.local.process`) is the bucket the redeployed stack uses.

    Parameters
    ----------
    info : StackInfo
    template : path-like
        Nothing is returned unless the template declares ``FixedDataBucketName``.
    stack_name : str

    Returns
    -------
    dict of str to str
        ``FixedDataBucketName``: ``<stack name>-data-<account>-<region>`` in S3's bucket alphabet
        (lower case, digits, hyphens), at most 63 characters.
    """
    if "FixedDataBucketName:" not in Path(template).read_text():
        return {}
    sts = _session(info).client("sts", endpoint_url=info.endpoint)
    account = sts.get_caller_identity()["Account"]
    stem = re.sub(r"[^a-z0-9-]+", "-", stack_name.lower()).strip("-") or "fanfit"
    suffix = f"-data-{account}-{info.region}"
    return {"FixedDataBucketName": stem[: 63 - len(suffix)].rstrip("-") + suffix}


def local_batch_parameters(info: StackInfo, template: str | os.PathLike[str]) -> dict[str, str]:
    """Values of the template's Batch network and image parameters on the local stack.

    A compute environment needs subnets and security groups that exist (moto checks them as AWS
    does): the local stack's default VPC (its EC2 emulation creates one per region) provides them.

    Parameters
    ----------
    info : StackInfo
    template : path-like
        Only parameters the template declares are returned.

    Returns
    -------
    dict of str to str
        ``BatchSubnetIds``, ``BatchSecurityGroupIds`` (comma-separated), ``GpuWorkerImageUri``, and
        ``EnableGpuWorker=true``: the local stack has the GPU worker (its jobs run on the host).
    """
    text = Path(template).read_text()
    if "BatchSubnetIds:" not in text:
        return {}
    ec2 = _session(info).client("ec2", endpoint_url=info.endpoint)
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise StackError(
            "the local stack's EC2 has no default VPC for the Batch compute environment"
        )
    vpc = vpcs[0]["VpcId"]
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"]
    return {
        "BatchSubnetIds": ",".join(sorted(s["SubnetId"] for s in subnets)[:2]),
        "BatchSecurityGroupIds": groups[0]["GroupId"],
        "GpuWorkerImageUri": LOCAL_WORKER_IMAGE,
        **({"EnableGpuWorker": "true"} if "EnableGpuWorker:" in text else {}),
    }
