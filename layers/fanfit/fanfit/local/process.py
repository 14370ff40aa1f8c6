"""The LocalStack process of the embedded local stack: start, find and stop it (no Docker).

LocalStack core (``localstack-core``) runs as ``<.venv-localstack>/bin/python -m
localstack.runtime.main`` (the entry point of LocalStack's Docker image) on ``127.0.0.1`` and a free
port, with fanfit's LocalStack plugins (``localstack_plugins/``): Lambda functions run as local
processes on the Lambda interpreter (``.venv-lambda``), DynamoDB is served by moto. Its state
(files, logs, the state file ``stack.json``) lives in the state dir: ``$FANFIT_HOME`` or
``<project>/.fanfit/local``.

S3 outlives the process, as on AWS: every write is mirrored to ``<state dir>/s3`` before LocalStack
answers it, and a starting LocalStack puts the mirror back before :meth:`LocalStack.start` returns
(``fanfit_localstack.s3mirror``). A killed stack, started again, has every object a client was told
was written; ``fanfit resume`` then reruns only the shards without results. Delete that directory,
with the stack stopped, to start from empty buckets.

DynamoDB outlives it too: every table write is appended to ``<state dir>/dynamodb`` (one journal
per table, ``fanfit_localstack.dynamodb``) before LocalStack answers it, and a starting LocalStack
puts the tables and their items back before :meth:`LocalStack.start` returns, so job records
survive ``fanfit local down`` and ``up`` (but for Powertools' idempotency records:
:data:`DYNAMODB_SKIP`). Functions and state machines do not survive a restart: the next deploy
creates them again, and takes over the restored tables of its stack.

This module knows nothing of the template: :mod:`fanfit.local.deploy` deploys into a running
stack, and :mod:`fanfit.local.stack` puts the two together (``up``, ``down``, ``status``,
``ensure_local_stack``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fanfit.errors import StackError

LOGGER = logging.getLogger("fanfit")

DEFAULT_REGION = "us-east-1"
STATE_FILE = "stack.json"
LOG_FILE = "localstack.log"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
#: The S3 mirror under the state dir, and the file a restore writes when it is complete.
S3_MIRROR_DIR = "s3"
S3_RESTORED_FILE = "restored.json"
#: The DynamoDB journal under the state dir (it writes its own ``restored.json``).
DYNAMODB_DIR = "dynamodb"
#: Tables not written through (parts of their names): Powertools' idempotency records of
#: invocations a stopped stack cut short would hold their shards back from a resume until they
#: expire, and a completed one matters only while its execution runs.
DYNAMODB_SKIP = "IdempotencyTable"
#: What the Lambda executor found about CPU and memory limits (``fanfit_localstack.cgroups``).
LIMITS_FILE = "limits.json"
#: Name prefix of the buckets ``sam deploy`` uploads code and layers to (:mod:`fanfit.local.deploy`).
ARTIFACT_BUCKET_PREFIX = "fanfit-local-artifacts-"
INSTALL_HINT = "run `make install-local` (scripts/install_local_stack.sh) to build it"

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def project_root(start: str | os.PathLike[str] | None = None) -> Path:
    """The project root: the nearest directory holding ``template.yaml``.

    Searched from ``start`` (default: the working directory) upward, then from this package's
    location upward (``layers/fanfit/fanfit/local`` inside a checkout).

    Raises
    ------
    StackError
        When neither search finds ``template.yaml``.
    """
    origins = [Path(start) if start is not None else Path.cwd(), Path(__file__).resolve().parent]
    for origin in origins:
        for directory in (origin.resolve(), *origin.resolve().parents):
            if (directory / "template.yaml").is_file():
                return directory
    raise StackError(
        f"no template.yaml found in {origins[0]} or its parents: run this inside the fanfit project"
    )


def state_dir(root: Path | None = None) -> Path:
    """The local stack's state dir: ``$FANFIT_HOME`` or ``<project>/.fanfit/local``."""
    home = os.environ.get("FANFIT_HOME")
    if home:
        return Path(home).expanduser().resolve()
    return (root or project_root()) / ".fanfit" / "local"


def _interpreter(variable: str, venv: str, root: Path | None) -> Path:
    configured = os.environ.get(variable)
    path = Path(configured) if configured else (root or project_root()) / venv / "bin" / "python"
    if not os.access(path, os.X_OK):
        source = f"${variable}" if configured else venv
        raise StackError(f"{source}: no Python at {path}; {INSTALL_HINT}")
    return path


def localstack_python(root: Path | None = None) -> Path:
    """LocalStack's interpreter: ``$FANFIT_LOCALSTACK_PYTHON`` or ``<project>/.venv-localstack``.

    Raises
    ------
    StackError
        When it does not exist.
    """
    return _interpreter("FANFIT_LOCALSTACK_PYTHON", ".venv-localstack", root)


def lambda_python(root: Path | None = None) -> Path:
    """The Lambda functions' interpreter: ``$FANFIT_LAMBDA_PYTHON`` or ``<project>/.venv-lambda``.

    Raises
    ------
    StackError
        When it does not exist.
    """
    return _interpreter("FANFIT_LAMBDA_PYTHON", ".venv-lambda", root)


@dataclass(frozen=True)
class StackInfo:
    """A running local stack, as recorded in its state file.

    Attributes
    ----------
    pid : int
        Process id of LocalStack.
    port : int
        Port of its gateway on 127.0.0.1.
    endpoint : str
        Its endpoint URL (``http://127.0.0.1:<port>``): pass it as ``endpoint_url`` or
        ``AWS_ENDPOINT_URL``.
    region : str
        The region its resources are created in.
    state_dir : str
        Its state dir.
    log_file : str
        LocalStack's log.
    started_at : float
        Start time, seconds since the epoch.
    lambda_python : str
        The Lambda functions' interpreter (``python3.12``) it runs them with.
    """

    pid: int
    port: int
    endpoint: str
    region: str
    state_dir: str
    log_file: str
    started_at: float
    lambda_python: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)

    def client_env(self) -> dict[str, str]:
        """Environment variables that point boto3 (and the AWS CLI, SAM CLI) at this stack."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",  # noqa: S105 - LocalStack's documented dummy
        }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def health(endpoint: str, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """LocalStack's ``/_localstack/health`` document, or None when it does not answer.

    Parameters
    ----------
    endpoint : str
        The stack's endpoint URL.
    timeout_s : float
        Timeout of the request, seconds.
    """
    try:
        with _OPENER.open(f"{endpoint}/_localstack/health", timeout=timeout_s) as response:
            document: dict[str, Any] = json.loads(response.read())
            return document
    except (OSError, ValueError, urllib.error.URLError):
        return None


#: The LocalStack hook (entry point) that restores DynamoDB from its journal at start-up.
DYNAMODB_RESTORE_HOOK = "fanfit_dynamodb_restore"


def plugin_hooks(python: Path) -> set[str]:
    """The entry-point names of the fanfit LocalStack plugins that LocalStack's interpreter
    ``python`` finds: in its virtualenv's site-packages and in ``$PYTHONPATH``.

    A virtualenv built before a hook was added lacks it until ``make install-local`` installs the
    plugins again, and :meth:`LocalStack.start` must not wait for what such a hook would write.
    """
    venv = python.parent.parent
    places = [*venv.glob("lib/python*/site-packages")]
    places += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    names: set[str] = set()
    for place in places:
        for entry_points in place.glob("fanfit_localstack-*.dist-info/entry_points.txt"):
            with contextlib.suppress(OSError):
                for line in entry_points.read_text().splitlines():
                    name, _, target = line.partition("=")
                    if target:
                        names.add(name.strip())
    return names


def _restore_record(path: Path, pid: int | None) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or (pid is not None and record.get("pid") != pid):
        return None
    return record


class LocalStack:
    """The embedded local stack of one project (one state dir).

    Parameters
    ----------
    root : path-like, optional
        Project root (default: :func:`project_root`).
    home : path-like, optional
        State dir (default: :func:`state_dir`).
    region : str
        Region of the resources (default ``us-east-1``).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        home: str | os.PathLike[str] | None = None,
        region: str = DEFAULT_REGION,
    ) -> None:
        self.root = Path(root).resolve() if root is not None else project_root()
        self.home = Path(home).resolve() if home is not None else state_dir(self.root)
        self.region = region
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def state_file(self) -> Path:
        """Path of the state file (``stack.json`` in the state dir)."""
        return self.home / STATE_FILE

    @property
    def log_file(self) -> Path:
        """Path of LocalStack's log."""
        return self.home / LOG_FILE

    @property
    def s3_mirror(self) -> Path:
        """The directory S3 is mirrored to (``s3`` in the state dir)."""
        return self.home / S3_MIRROR_DIR

    def s3_restored(self, pid: int | None = None) -> dict[str, Any] | None:
        """The record of the last S3 restore (``pid``, ``buckets``, ``objects``, ``skipped``,
        ``seconds``, or ``error``), or None when there is none, or none by process ``pid``."""
        return _restore_record(self.s3_mirror / S3_RESTORED_FILE, pid)

    @property
    def dynamodb_journal(self) -> Path:
        """The directory DynamoDB is written through to (``dynamodb`` in the state dir)."""
        return self.home / DYNAMODB_DIR

    def dynamodb_restored(self, pid: int | None = None) -> dict[str, Any] | None:
        """The record of the last DynamoDB restore (``pid``, ``tables``, ``items``, ``skipped``,
        ``seconds``, or ``error``), or None when there is none, or none by process ``pid``."""
        return _restore_record(self.dynamodb_journal / S3_RESTORED_FILE, pid)

    def limits(self, pid: int | None = None) -> dict[str, Any] | None:
        """What the stack's Lambda executor found about CPU and memory limits: ``mode``
        (``v1``, ``v2``, ``none``), ``apply``, ``reason``, ``summary``; None when it has not said,
        or not by process ``pid``."""
        return _restore_record(self.home / LIMITS_FILE, pid)

    def read_state(self) -> StackInfo | None:
        """The recorded stack, or None when there is no (readable) state file."""
        try:
            return StackInfo(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def running(self) -> StackInfo | None:
        """The recorded stack if its process is alive and healthy, else None."""
        info = self.read_state()
        if info is None or not _pid_alive(info.pid) or health(info.endpoint) is None:
            return None
        return info

    def environment(self, port: int) -> dict[str, str]:
        """The environment LocalStack runs with (see DESIGN.md, "The local stack").

        Parameters
        ----------
        port : int
            Gateway port on 127.0.0.1.
        """
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AWS_", "LOCALSTACK_", "PROVIDER_OVERRIDE_"))
        }
        for name in ("filesystem", "volume", "tmp"):
            (self.home / name).mkdir(parents=True, exist_ok=True)
        env.update(
            {
                "GATEWAY_LISTEN": f"127.0.0.1:{port}",
                "LOCALSTACK_HOST": f"127.0.0.1:{port}",
                "GATEWAY_SERVER": "hypercorn",
                "OVERRIDE_IN_DOCKER": "0",
                "DNS_ADDRESS": "0",
                "DISABLE_EVENTS": "1",
                "SKIP_SSL_CERT_DOWNLOAD": "1",
                "LAMBDA_RUNTIME_EXECUTOR": "local",
                "PROVIDER_OVERRIDE_DYNAMODB": "moto",
                "PROVIDER_OVERRIDE_BATCH": "local",
                "FILESYSTEM_ROOT": str(self.home / "filesystem"),
                "LOCALSTACK_VOLUME_DIR": str(self.home / "volume"),
                "TMPDIR": str(self.home / "tmp"),
                "FANFIT_S3_MIRROR_DIR": str(self.s3_mirror),
                # what every deploy uploads again: LocalStack's Lambda code, the SAM artifacts
                "FANFIT_S3_MIRROR_SKIP": f"awslambda-,{ARTIFACT_BUCKET_PREFIX}",
                "FANFIT_DYNAMODB_DIR": str(self.dynamodb_journal),
                "FANFIT_DYNAMODB_SKIP": DYNAMODB_SKIP,
                "FANFIT_CGROUP_REPORT": str(self.home / LIMITS_FILE),
                "FANFIT_LAMBDA_PYTHON": str(lambda_python(self.root)),
                # Batch jobs run on the client's interpreter (it has PyTorch), as the worker image does.
                "FANFIT_BATCH_PYTHON": os.environ.get("FANFIT_BATCH_PYTHON") or sys.executable,
                "AWS_DEFAULT_REGION": self.region,
            }
        )
        env.setdefault("LAMBDA_RUNTIME_ENVIRONMENT_TIMEOUT", "120")
        return env

    def start(self, timeout_s: float = START_TIMEOUT_S) -> StackInfo:
        """Start LocalStack and wait (bounded) until it is healthy; reuse a running one.

        Parameters
        ----------
        timeout_s : float
            How long to wait for ``/_localstack/health``, seconds.

        Returns
        -------
        StackInfo
            The running stack (also written to the state file).

        Raises
        ------
        StackError
            When an interpreter is missing, LocalStack exits, does not become healthy and restore
            S3 and DynamoDB in time, or cannot restore them (the message quotes the end of its
            log).
        """
        info = self.running()
        if info is not None:
            return info
        python = localstack_python(self.root)
        self.home.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        env = self.environment(port)
        started_at = time.time()
        lambda_interpreter = env["FANFIT_LAMBDA_PYTHON"]
        journal = DYNAMODB_RESTORE_HOOK in plugin_hooks(python)
        if not journal:
            LOGGER.warning(
                "the local stack's plugins in %s predate the DynamoDB journal: job records will "
                "not survive a restart; %s",
                python.parent.parent,
                INSTALL_HINT.replace("build it", "update them"),
            )
        with open(self.log_file, "ab") as log:
            log.write(f"\n=== fanfit: starting LocalStack on port {port}\n".encode())
            log.flush()
            self._process = subprocess.Popen(  # noqa: S603 - our interpreter
                [str(python), "-m", "localstack.runtime.main"],
                cwd=str(self.home),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        endpoint = f"http://127.0.0.1:{port}"
        info = StackInfo(
            pid=self._process.pid,
            port=port,
            endpoint=endpoint,
            region=self.region,
            state_dir=str(self.home),
            log_file=str(self.log_file),
            started_at=started_at,
            lambda_python=lambda_interpreter,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise StackError(
                    f"LocalStack exited with status {self._process.returncode} while starting; "
                    f"end of {self.log_file}:\n{self._log_tail()}"
                )
            restored = self.s3_restored(self._process.pid)
            tables = self.dynamodb_restored(self._process.pid)
            for record, source in ((restored, self.s3_mirror), (tables, self.dynamodb_journal)):
                if record is not None and "error" in record:
                    self._terminate(self._process.pid)
                    raise StackError(
                        f"LocalStack could not restore {source.name} from {source}: "
                        f"{record['error']}; end of {self.log_file}:\n{self._log_tail()}"
                    )
            if (
                restored is not None
                and (tables is not None or not journal)
                and health(endpoint, timeout_s=1.0) is not None
            ):
                self.state_file.write_text(json.dumps(info.to_dict(), indent=2) + "\n")
                return info
            time.sleep(0.1)
        self._terminate(self._process.pid)
        raise StackError(
            f"LocalStack did not become healthy within {timeout_s:.0f} s; "
            f"end of {self.log_file}:\n{self._log_tail()}"
        )

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Stop the recorded stack: SIGTERM, wait, SIGKILL after ``timeout_s``.

        Returns
        -------
        bool
            True when a running stack was stopped, False when none was running.
        """
        info = self.read_state()
        stopped = False
        if info is not None and _pid_alive(info.pid):
            self._terminate(info.pid, timeout_s)
            stopped = True
        self.state_file.unlink(missing_ok=True)
        return stopped

    def _terminate(self, pid: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_gone(pid, timeout_s):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._wait_gone(pid, 5.0)

    def _wait_gone(self, pid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process is not None and self._process.pid == pid:
                if self._process.poll() is not None:
                    return True
            elif not _pid_alive(pid):
                return True
            time.sleep(0.1)
        return False

    def status(self) -> dict[str, Any]:
        """Where the stack stands.

        Returns
        -------
        dict
            ``running`` (bool), ``healthy`` (bool), ``state_dir``, and when recorded ``pid``,
            ``port``, ``endpoint``, ``region``, ``log_file``, ``started_at``, ``uptime_s``,
            ``services`` (LocalStack's per-service states), ``s3_restored`` and
            ``dynamodb_restored`` (what the start put back into S3 and DynamoDB from disk),
            ``limits`` (whether Lambda environments get the CPU and memory their ``MemorySize``
            buys: ``cgroup v1: ...``, ``cgroup v2 (delegated): ...`` or ``none: <reason>``) and
            ``limits_apply``.
        """
        info = self.read_state()
        result: dict[str, Any] = {"running": False, "healthy": False, "state_dir": str(self.home)}
        if info is None:
            return result
        alive = _pid_alive(info.pid)
        document = health(info.endpoint) if alive else None
        result.update(info.to_dict())
        result.update(
            running=alive,
            healthy=document is not None,
            uptime_s=round(time.time() - info.started_at, 1),
        )
        if document is not None:
            result["services"] = document.get("services", {})
        restored = self.s3_restored(info.pid)
        if restored is not None:
            result["s3_restored"] = restored
        tables = self.dynamodb_restored(info.pid)
        if tables is not None:
            result["dynamodb_restored"] = tables
        found = self.limits(info.pid)
        if found is not None:
            result["limits"] = found.get("summary")
            result["limits_apply"] = bool(found.get("apply"))
        return result

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
