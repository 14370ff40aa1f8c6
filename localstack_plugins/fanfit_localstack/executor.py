"""A LocalStack Lambda runtime executor that runs each execution environment as a local process.

Selected with ``LAMBDA_RUNTIME_EXECUTOR=local``. LocalStack's own executor (``docker``) starts a
container per execution environment and copies its ``lambda-runtime-init`` binary into it; this one
starts :mod:`fanfit_localstack.lambda_init` on the Lambda interpreter (``FANFIT_LAMBDA_PYTHON``,
a virtualenv with only what AWS's ``python3.12`` runtime bundles) and speaks the same protocol with
LocalStack (:class:`localstack.services.lambda_.invocation.executor_endpoint.ExecutorEndpoint`).

What the process gets, as on AWS:

- ``sys.path``: the function's unzipped code dir first, then each layer's ``python/lib/pythonX.Y/
  site-packages`` and ``python/`` (the last layer first, as later layers overwrite earlier ones in
  ``/opt``), then the interpreter's own site-packages (boto3/botocore);
- the environment LocalStack computes (``AWS_LAMBDA_FUNCTION_NAME``, ``..._MEMORY_SIZE``,
  ``AWS_REGION``, credentials from LocalStack's STS, ``AWS_ENDPOINT_URL`` pointing at the gateway,
  the function's ``Environment``), with ``LAMBDA_TASK_ROOT`` set to the code dir, the working
  directory in the code dir and ``TMPDIR`` private to the environment;
- the CPU share and memory limit its ``MemorySize`` buys (:mod:`fanfit_localstack.cgroups`).

LocalStack keeps environments warm between invocations and starts one per concurrent invocation.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from localstack import config
from localstack.aws.api.lambda_ import PackageType
from localstack.runtime import hooks
from localstack.services.lambda_.invocation.executor_endpoint import (
    ExecutorEndpoint,
    StatusErrorException,
)
from localstack.services.lambda_.invocation.lambda_models import FunctionVersion, InvocationResult
from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin
from localstack.services.lambda_.invocation.runtime_executor import (
    LambdaRuntimeException,
    RuntimeExecutor,
)

from fanfit_localstack import cgroups, faults

LOG = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
INIT_SCRIPT = HERE / "lambda_init.py"
BOOTSTRAP_SCRIPT = HERE / "lambda_bootstrap.py"
LOCAL_ADDRESS = "127.0.0.1"
STOP_TIMEOUT_S = 5.0
_LOG_TAIL_BYTES = 256 * 1024


def lambda_python() -> str:
    """The Lambda interpreter (``FANFIT_LAMBDA_PYTHON``).

    Raises
    ------
    LambdaRuntimeException
        When the variable is unset or does not name an executable.
    """
    python = os.environ.get("FANFIT_LAMBDA_PYTHON", "")
    if not python or not os.access(python, os.X_OK):
        raise LambdaRuntimeException(
            f"FANFIT_LAMBDA_PYTHON={python!r} is not an executable Python: build the Lambda "
            "interpreter with scripts/install_local_stack.sh (make install-local)"
        )
    return python


def _environment_dir(runtime_id: str) -> Path:
    return Path(config.dirs.tmp) / "fanfit-lambda" / runtime_id


def _python_version(function_version: FunctionVersion) -> str:
    runtime = str(function_version.config.runtime or "python3.12")
    return runtime if runtime.startswith("python") else "python3.12"


def runtime_path(function_version: FunctionVersion) -> list[str]:
    """The ``sys.path`` entries of a function: its code dir, then its layers (last layer first).

    Parameters
    ----------
    function_version : FunctionVersion
        The function version, its code and layers prepared (unzipped).

    Returns
    -------
    list of str
        Absolute directories, code dir first.
    """
    code = function_version.config.code
    entries = [str(code.get_unzipped_code_location())] if code else []
    python = _python_version(function_version)
    for layer in reversed(function_version.config.layers or []):
        if layer.code is None:
            continue
        root = Path(layer.code.get_unzipped_code_location())
        entries += [str(root / "python" / "lib" / python / "site-packages"), str(root / "python")]
    return entries


def layer_library_path(function_version: FunctionVersion) -> list[str]:
    """The layers' ``lib`` directories (Lambda's ``/opt/lib``, on ``LD_LIBRARY_PATH`` after the
    system's own directories: AWS Lambda developer guide, "Defined runtime environment variables").

    Parameters
    ----------
    function_version : FunctionVersion
        The function version, its layers prepared (unzipped).

    Returns
    -------
    list of str
        Absolute directories, the last layer first.
    """
    return [
        str(Path(layer.code.get_unzipped_code_location()) / "lib")
        for layer in reversed(function_version.config.layers or [])
        if layer.code is not None
    ]


class LocalRuntimeExecutor(RuntimeExecutor):
    """Runs one execution environment as a process tree: ``lambda_init`` and the handler's child.

    Parameters
    ----------
    id : str
        The execution environment's (runtime's) id.
    function_version : FunctionVersion
        The function version it runs.
    """

    def __init__(self, id: str, function_version: FunctionVersion) -> None:  # noqa: A002
        super().__init__(id=id, function_version=function_version)
        self.executor_endpoint = ExecutorEndpoint(self.id, container_address=LOCAL_ADDRESS)
        self.process: subprocess.Popen[bytes] | None = None
        self.cgroups: cgroups.EnvironmentCgroups | None = None
        self.directory = _environment_dir(self.id)
        self.log_path = self.directory / "environment.log"
        self._log_file: IO[bytes] | None = None
        self._cpu_factor = 1.0  # FANFIT_LOCAL_THROTTLE_FILE (fanfit_localstack.faults)

    def start(self, env_vars: dict[str, str]) -> None:
        """Start the environment and wait until its init phase reports ready (or fails).

        Raises
        ------
        StatusErrorException
            When the handler cannot be imported (the payload is the error AWS reports) or the
            process exits before it reports.
        """
        if self.function_version.config.package_type != PackageType.Zip:
            raise LambdaRuntimeException("the local executor runs zip functions only")
        python = lambda_python()
        self.executor_endpoint.start()
        tmp_dir = self.directory / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        code_dir = self.function_version.config.code.get_unzipped_code_location()
        memory_mb = int(self.function_version.config.memory_size)
        self.cgroups = cgroups.create(self.id, memory_mb)

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((LOCAL_ADDRESS, 0))
        listener.listen(16)
        self.executor_endpoint.container_port = listener.getsockname()[1]

        env = {str(key): str(value) for key, value in env_vars.items()}
        env.update(
            {
                "LAMBDA_TASK_ROOT": str(code_dir),
                "LAMBDA_RUNTIME_DIR": str(HERE),
                "PATH": f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin",
                "LANG": "en_US.UTF-8",
                "TMPDIR": str(tmp_dir),
                "PYTHONUNBUFFERED": "1",
                "PYTHONNOUSERSITE": "1",
                "FANFIT_LISTEN_FD": str(listener.fileno()),
                "FANFIT_BOOTSTRAP": str(BOOTSTRAP_SCRIPT),
                "FANFIT_PARENT_PID": str(os.getpid()),
                "FANFIT_RUNTIME_PATH": os.pathsep.join(runtime_path(self.function_version)),
                "FANFIT_INIT_TIMEOUT": str(config.LAMBDA_RUNTIME_ENVIRONMENT_TIMEOUT),
            }
        )
        library_path = [
            os.environ.get("LD_LIBRARY_PATH", ""),
            *layer_library_path(self.function_version),
        ]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in library_path if p)
        if self.cgroups is not None:
            env["FANFIT_CGROUP_MEMORY"] = str(self.cgroups.memory)
            env["FANFIT_CGROUP_CPU"] = str(self.cgroups.cpu)
        # A function's BLAS and OpenMP thread pools are as large as the vCPUs its MemorySize buys
        # (AWS: one per 1,769 MB), at most the host's cores, unless it sets them itself. Sized to
        # the host instead, the stack's concurrent invocations (one per core) would each start a
        # pool of every core and spin against each other (or against the CFS quota with limits):
        # a logistic regression on 8,000 rows took 4.7 s instead of 0.4 s on a loaded 2-core host.
        threads = cgroups.pool_threads(memory_mb, os.cpu_count() or 1)
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(name, str(threads))
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            self.process = subprocess.Popen(  # noqa: S603 - our interpreter and script
                [python, "-P", str(INIT_SCRIPT)],
                cwd=str(code_dir),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                pass_fds=(listener.fileno(),),
                start_new_session=True,
            )
        finally:
            listener.close()
        LOG.debug(
            "started local Lambda environment %s for %s (pid %s)",
            self.id,
            self.function_version.qualified_arn,
            self.process.pid,
        )
        threading.Thread(
            target=self._watch_startup, name=f"lambda-local-watch-{self.id}", daemon=True
        ).start()
        self.executor_endpoint.wait_for_startup()

    def _watch_startup(self) -> None:
        """Fail the startup when the process exits before it reported ready or error."""
        process = self.process
        future = self.executor_endpoint.startup_future
        if process is None or future is None:
            return
        code = process.wait()
        if not future.done():
            error = {
                "errorType": "Runtime.ExitError",
                "errorMessage": f"Error: the local Lambda runtime exited with status {code} "
                f"during init; see {self.log_path}",
            }
            try:
                future.set_exception(
                    StatusErrorException(
                        "Environment startup failed", payload=json.dumps(error).encode()
                    )
                )
            except Exception as exc:  # the future may have been resolved concurrently
                LOG.debug("startup future of %s already resolved: %s", self.id, exc)

    def stop(self) -> None:
        """Stop the environment: SIGTERM to its process group, SIGKILL after a timeout."""
        process = self.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT_S)
            except ProcessLookupError:
                pass
        try:
            self.executor_endpoint.shutdown()
        except Exception as exc:
            LOG.debug("error stopping the executor endpoint of %s: %s", self.id, exc)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self.cgroups is not None:
            self.cgroups.remove()
            self.cgroups = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def get_address(self) -> str:
        """The address the environment listens on (always local)."""
        return LOCAL_ADDRESS

    def get_endpoint_from_executor(self) -> str:
        """The address at which the environment reaches LocalStack (always local)."""
        return LOCAL_ADDRESS

    def get_runtime_endpoint(self) -> str:
        """The callback URL of this environment's executor endpoint."""
        port = config.GATEWAY_LISTEN[0].port
        return f"http://{LOCAL_ADDRESS}:{port}{self.executor_endpoint.get_endpoint_prefix()}"

    def invoke(self, payload: dict[str, Any]) -> InvocationResult:
        """Send one invocation (``invoke-id``, ``invoked-function-arn``, ``payload``, ...).

        With ``FANFIT_LOCAL_FAULTS`` set, some invocations carry a fault for the environment to
        enact (:mod:`fanfit_localstack.faults`). With ``FANFIT_LOCAL_THROTTLE_FILE`` set, a
        throttled train worker's invocation runs with a cut CPU quota (and the next one of another
        worker in this environment with the normal quota again).
        """
        factor = faults.throttle_factor(payload)
        if self.cgroups is not None and factor != self._cpu_factor:
            memory_mb = int(self.function_version.config.memory_size)
            try:
                cgroups.scale_cpu(self.cgroups, memory_mb, factor)
                self._cpu_factor = factor
            except OSError as exc:
                LOG.warning("fanfit: could not scale the CPU of environment %s: %s", self.id, exc)
        injector = faults.injector()
        fault = injector.draw() if injector is not None else None
        if fault is not None:
            payload = {**payload, "fanfit-fault": fault}
        return self.executor_endpoint.invoke(payload)

    def get_logs(self) -> str:
        """The tail of the environment's log (init and runtime output)."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - _LOG_TAIL_BYTES))
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return "Environment was not started"

    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        """Unzip the function's code and its layers (once per version)."""
        if function_version.config.code:
            function_version.config.code.prepare_for_execution()
        for layer in function_version.config.layers or []:
            if layer.code is not None:
                layer.code.prepare_for_execution()

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        """Nothing to clean: LocalStack owns the unzipped code."""

    @classmethod
    def validate_environment(cls) -> bool:
        """Warn when the Lambda interpreter is missing."""
        try:
            lambda_python()
        except LambdaRuntimeException as exc:
            LOG.warning("fanfit: %s", exc)
            return False
        cgroups.available()
        return True


@hooks.on_infra_ready()
def report_lambda_limits() -> None:
    """Find at start-up which CPU and memory limits Lambda environments get, say it once, and
    write it for ``fanfit local status`` (:func:`fanfit_localstack.cgroups.limits`)."""
    cgroups.limits()


class LocalRuntimeExecutorPlugin(RuntimeExecutorPlugin):
    """The ``local`` runtime executor (``LAMBDA_RUNTIME_EXECUTOR=local``)."""

    name = "local"

    def load(self, *args: Any, **kwargs: Any) -> type[RuntimeExecutor]:
        return LocalRuntimeExecutor
