"""The Python runtime of a local Lambda execution environment: the process that runs the handler.

This file is run as a script by :mod:`fanfit_localstack.lambda_init` on the Lambda interpreter
(``.venv-lambda``: Python 3.12 with only boto3/botocore, like AWS's ``python3.12`` runtime), so it
uses the standard library only and never imports anything of fanfit or LocalStack.

It plays the part of AWS's Python runtime interface client: it puts the function's code dir and its
layers first on ``sys.path``, imports the handler once (the init phase), then runs one invocation per
line read from its control channel, passing a context object like AWS's, and reports the handler's
return value or exception in the same shape AWS does (``errorType`` is the exception's class name).

Protocol with the supervisor (:mod:`fanfit_localstack.lambda_init`):

- environment ``FANFIT_RUNTIME_PATH``: ``os.pathsep``-joined entries to put first on ``sys.path``;
- environment ``FANFIT_RESULT_FD``: a file descriptor to write JSON lines to the supervisor
  (``{"type": "ready", ...}``, ``{"type": "init_error", "error": {...}}``,
  ``{"type": "result", ...}``);
- environment ``FANFIT_CGROUP_MEMORY`` / ``FANFIT_CGROUP_CPU``: cgroup (v1 or v2) directories the process
  joins: memory at start, cpu after the init phase (AWS boosts CPU during init);
- standard input: one JSON line per invocation (``request_id``, ``invoked_function_arn``,
  ``payload``, ``deadline_ms``, ``trace_id``);
- standard output and error: the function's log stream; after each invocation a marker line
  ``LOG_MARKER + request_id`` so the supervisor knows it has read all of that invocation's logs.
"""

from __future__ import annotations

import decimal
import importlib
import json
import logging
import os
import resource
import sys
import time
import traceback
from typing import Any

LOG_MARKER = "\x1ffanfit-end-of-invocation\x1f"


class LambdaContext:
    """The context object AWS passes to a Python handler (same attribute names and types).

    Parameters
    ----------
    request_id : str
        The invocation's request id.
    invoked_function_arn : str
        The ARN the function was invoked with (qualified or not).
    deadline_ms : int
        Wall-clock deadline of the invocation, milliseconds since the epoch.
    """

    def __init__(self, request_id: str, invoked_function_arn: str, deadline_ms: int) -> None:
        self.aws_request_id = request_id
        self.invoked_function_arn = invoked_function_arn
        self.function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "")
        self.function_version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        # AWS's runtime passes the memory size as the string it finds in the environment.
        self.memory_limit_in_mb = os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "")
        self.log_group_name = os.environ.get("AWS_LAMBDA_LOG_GROUP_NAME", "")
        self.log_stream_name = os.environ.get("AWS_LAMBDA_LOG_STREAM_NAME", "")
        self.identity = None
        self.client_context = None
        self.tenant_id = None
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function times out (never negative)."""
        return max(0, self._deadline_ms - int(time.time() * 1000))

    def log(self, message: str) -> None:
        """Write ``message`` to the function's log stream, as AWS's ``context.log`` does."""
        sys.stdout.write(message)
        sys.stdout.flush()

    def __repr__(self) -> str:
        return (
            f"LambdaContext(aws_request_id={self.aws_request_id!r}, "
            f"function_name={self.function_name!r}, memory_limit_in_mb={self.memory_limit_in_mb!r})"
        )


class _RequestIdFilter(logging.Filter):
    """Adds ``aws_request_id`` to every record, like AWS's runtime logging handler."""

    request_id = ""

    def filter(self, record: logging.LogRecord) -> bool:
        record.aws_request_id = self.request_id
        return True


_REQUEST_ID_FILTER = _RequestIdFilter()


def _setup_logging() -> None:
    """Install a root handler in AWS's Python runtime format (level, UTC time, request id)."""
    handler = logging.StreamHandler(sys.stdout)
    formatter = logging.Formatter(
        "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s",
        "%Y-%m-%dT%H:%M:%S",
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    handler.addFilter(_REQUEST_ID_FILTER)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def _join_cgroup(directory: str | None) -> None:
    """Move this process into the cgroup (v1 or v2) ``directory``; say so when not possible."""
    if not directory:
        return
    try:
        with open(os.path.join(directory, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    except OSError as exc:
        print(f"fanfit runtime: could not join cgroup {directory}: {exc}", file=sys.stderr)


def _error(error_type: str, message: str, exc: BaseException | None = None) -> dict[str, Any]:
    """An error object in AWS's shape (``errorMessage``, ``errorType``, ``stackTrace``)."""
    stack: list[str] = []
    if exc is not None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != __file__]
        stack = traceback.format_list(frames)
    return {"errorMessage": message, "errorType": error_type, "requestId": "", "stackTrace": stack}


def _load_handler(handler: str) -> Any:
    """Import ``module.function`` (``dir/module.function`` too) as AWS's runtime does.

    Raises
    ------
    _InitError
        With the errorType AWS reports: ``Runtime.MalformedHandlerName``,
        ``Runtime.ImportModuleError``, ``Runtime.UserCodeSyntaxError`` or
        ``Runtime.HandlerNotFound``.
    """
    try:
        module_name, function_name = handler.rsplit(".", 1)
    except ValueError as exc:
        raise _InitError(
            _error("Runtime.MalformedHandlerName", f"Bad handler '{handler}': {exc}", exc)
        ) from exc
    module_name = module_name.replace("/", ".")
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as exc:
        raise _InitError(
            _error("Runtime.UserCodeSyntaxError", f"Syntax error in module '{module_name}': {exc}")
        ) from exc
    except ImportError as exc:
        raise _InitError(
            _error(
                "Runtime.ImportModuleError",
                f"Unable to import module '{module_name}': {exc}",
                exc,
            )
        ) from exc
    except Exception as exc:  # an exception raised by the module's own top-level code
        raise _InitError(_error(type(exc).__name__, str(exc), exc)) from exc
    function = getattr(module, function_name, None)
    if function is None:
        raise _InitError(
            _error(
                "Runtime.HandlerNotFound",
                f"Handler '{function_name}' missing on module '{module_name}'",
            )
        )
    return function


class _InitError(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["errorMessage"])
        self.error = error


def _json_default(obj: Any) -> Any:
    """Serialize what AWS's runtime serializes beyond plain JSON (``Decimal``)."""
    if isinstance(obj, decimal.Decimal):
        return int(obj) if obj == obj.to_integral_value() else float(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _max_memory_mb() -> int:
    """Peak resident memory of this process and its children, MB (``ru_maxrss`` is KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return int(max(own, children) / 1024) + 1


def _invoke(function: Any, invocation: dict[str, Any]) -> dict[str, Any]:
    """Run the handler once and return the result message for the supervisor."""
    request_id = invocation["request_id"]
    _REQUEST_ID_FILTER.request_id = request_id
    os.environ["_X_AMZN_TRACE_ID"] = invocation.get("trace_id") or ""
    context = LambdaContext(
        request_id, invocation["invoked_function_arn"], int(invocation["deadline_ms"])
    )
    started = time.perf_counter()
    try:
        event = json.loads(invocation["payload"]) if invocation["payload"] else {}
        result = function(event, context)
        try:
            body = json.dumps(result, default=_json_default)
        except (TypeError, ValueError) as exc:
            message = {
                "ok": False,
                "error": _error("Runtime.MarshalError", f"Unable to marshal response: {exc}"),
            }
        else:
            message = {"ok": True, "payload": body}
    except Exception as exc:
        error = _error(type(exc).__name__, str(exc), exc)
        error["requestId"] = request_id
        print(
            f"[ERROR] {error['errorType']}: {error['errorMessage']}\nTraceback (most recent call "
            f"last):\n{''.join(error['stackTrace'])}",
            end="",
            flush=True,
        )
        message = {"ok": False, "error": error}
    duration_ms = (time.perf_counter() - started) * 1000.0
    message.update(type="result", duration_ms=duration_ms, max_memory_mb=_max_memory_mb())
    return message


def main() -> int:
    """Run the init phase, then one invocation per control line until the channel closes."""
    _join_cgroup(os.environ.pop("FANFIT_CGROUP_MEMORY", None))
    cpu_cgroup = os.environ.pop("FANFIT_CGROUP_CPU", None)
    result_fd = int(os.environ.pop("FANFIT_RESULT_FD"))
    entries = [p for p in os.environ.pop("FANFIT_RUNTIME_PATH", "").split(os.pathsep) if p]
    sys.path[0:0] = entries
    results = os.fdopen(result_fd, "w", buffering=1, encoding="utf-8")
    # The control channel is this process's stdin; the handler gets /dev/null as on AWS.
    control = os.fdopen(os.dup(0), "r", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _setup_logging()

    started = time.perf_counter()
    try:
        function = _load_handler(os.environ.get("_HANDLER", ""))
    except _InitError as exc:
        sys.stdout.flush()
        sys.stderr.flush()
        results.write(json.dumps({"type": "init_error", "error": exc.error}) + "\n")
        return 1
    init_ms = (time.perf_counter() - started) * 1000.0
    _join_cgroup(cpu_cgroup)
    results.write(json.dumps({"type": "ready", "init_ms": init_ms}) + "\n")

    for line in control:
        if not line.strip():
            continue
        invocation = json.loads(line)
        message = _invoke(function, invocation)
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(1, f"{LOG_MARKER}{invocation['request_id']}\n".encode())
        results.write(json.dumps(message) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
