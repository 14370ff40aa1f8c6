"""The init of a local Lambda execution environment: fanfit's stand-in for ``lambda-runtime-init``.

This file is run as a script by :class:`fanfit_localstack.executor.LocalRuntimeExecutor` on the
Lambda interpreter (``.venv-lambda``), so it uses the standard library only. It speaks LocalStack's
executor protocol, as the ``lambda-runtime-init`` binary in LocalStack's Lambda containers does:

- it serves ``POST /invoke`` (body: ``invoke-id``, ``invoked-function-arn``, ``payload``,
  ``trace-id``) on a listening socket it inherits from the executor (``FANFIT_LISTEN_FD``);
- it calls back ``LOCALSTACK_RUNTIME_ENDPOINT`` at ``/status/<runtime-id>/ready`` or ``/error``
  once the function's init phase is done, and at ``/invocations/<request-id>/logs`` then
  ``/invocations/<request-id>/response`` or ``/error`` for each invocation.

The handler runs in a child process (:mod:`fanfit_localstack.lambda_bootstrap`), so a timeout can be
enforced the way AWS does it: the child is killed, the invocation fails with ``Sandbox.Timedout``,
and the next invocation starts a fresh runtime (a new init) in the same environment. A child that
dies (``os._exit``, a signal, the memory limit) fails its invocation with ``Runtime.ExitError`` or
``Runtime.OutOfMemory``. Logs carry AWS's ``START``/``END``/``REPORT`` lines (duration, billed
duration, memory size, max memory used, init duration).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

LOG_MARKER = "\x1ffanfit-end-of-invocation\x1f"
"""Must equal ``lambda_bootstrap.LOG_MARKER``."""

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _post(url: str, body: bytes, content_type: str = "application/json") -> None:
    """POST ``body`` to LocalStack; errors are printed, not raised (LocalStack may be stopping)."""
    if not url.startswith("http://"):
        raise ValueError(f"not a LocalStack callback URL: {url}")
    request = urllib.request.Request(  # noqa: S310 - an http:// URL, checked above
        url, data=body, method="POST", headers={"Content-Type": content_type}
    )
    try:
        with _OPENER.open(request, timeout=30) as response:
            response.read()
    except OSError as exc:
        print(f"fanfit init: POST {url} failed: {exc}", file=sys.stderr, flush=True)


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class LogBuffer:
    """Collects the child's output line by line and mirrors it to this process's stderr.

    The environment's log file (this process's stderr) gets everything; each invocation gets the
    lines written since the previous invocation ended, up to the child's end-of-invocation marker.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._markers: set[str] = set()
        self._changed = threading.Condition(self._lock)

    def reader(self, stream: Any, eof_token: str) -> None:
        """Read ``stream`` (the child's stdout+stderr) until EOF, then mark ``eof_token``."""
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            with self._lock:
                if LOG_MARKER in line:
                    before, _, request_id = line.partition(LOG_MARKER)
                    if before:
                        self._lines.append(before + "\n")
                    self._markers.add(request_id.strip())
                else:
                    self._lines.append(line)
                    sys.stderr.write(line)
                    sys.stderr.flush()
                self._changed.notify_all()
        with self._lock:
            self._markers.add(eof_token)
            self._changed.notify_all()

    def wait_marker(self, request_id: str, eof_token: str, timeout_s: float) -> None:
        """Wait (bounded) until the marker for ``request_id`` or ``eof_token`` has been read."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while request_id not in self._markers and eof_token not in self._markers:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)
            self._markers.discard(request_id)

    def take(self) -> str:
        """Return and clear the lines collected so far."""
        with self._lock:
            text = "".join(self._lines)
            self._lines.clear()
            return text

    def add(self, text: str) -> None:
        """Append a line of the runtime's own (``START``, ``Task timed out``, ...)."""
        with self._lock:
            self._lines.append(text)
        sys.stderr.write(text)
        sys.stderr.flush()


class Runtime:
    """The child process that runs the handler, restarted after a timeout or a crash."""

    def __init__(self, bootstrap: str, logs: LogBuffer) -> None:
        self.bootstrap = bootstrap
        self.logs = logs
        self.process: subprocess.Popen[bytes] | None = None
        self.results: Any = None
        self.init_ms: float | None = None
        self.eof_token = ""
        self.memory_cgroup = os.environ.get("FANFIT_CGROUP_MEMORY") or ""

    def start(self, deadline: float) -> dict[str, Any] | None:
        """Start the child and wait for its init phase until ``deadline`` (``time.monotonic``).

        Returns
        -------
        dict or None
            None when the handler was imported, else the error object AWS would report.
        """
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        for name in ("FANFIT_LISTEN_FD", "FANFIT_BOOTSTRAP", "FANFIT_PARENT_PID"):
            env.pop(name, None)
        env["FANFIT_RESULT_FD"] = str(write_fd)
        started = time.perf_counter()
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, "-P", self.bootstrap],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            pass_fds=(write_fd,),
        )
        os.close(write_fd)
        self.results = os.fdopen(read_fd, "r", encoding="utf-8")
        self.eof_token = f"<eof {self.process.pid}>"
        threading.Thread(
            target=self.logs.reader, args=(self.process.stdout, self.eof_token), daemon=True
        ).start()
        message = self.read(deadline)
        if message is None:
            error = self.exit_error("", init=True)
            if self.process.poll() is None:
                error = {
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": "Error: the function's init phase timed out",
                }
            self.kill()
            return error
        if message.get("type") == "init_error":
            self.kill()
            return message["error"]
        self.init_ms = message.get("init_ms", (time.perf_counter() - started) * 1000.0)
        return None

    def read(self, deadline: float) -> dict[str, Any] | None:
        """Read the child's next message, or None on EOF or when ``deadline`` passes."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.results], [], [], left)
            if ready:
                line = self.results.readline()
                if not line:
                    return None
                return json.loads(line)

    def send(self, message: dict[str, Any]) -> bool:
        """Send one invocation to the child; False when it is gone."""
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def exit_error(self, request_id: str, init: bool = False) -> dict[str, Any]:
        """The error AWS reports when the runtime process exits: ExitError or OutOfMemory."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            reason = "unknown"
        elif code < 0:
            reason = f"signal: {signal.Signals(-code).name.removeprefix('SIG').lower()}"
            if -code == signal.SIGKILL:
                reason = "signal: killed"
        else:
            reason = f"exit status {code}"
        error_type = "Runtime.OutOfMemory" if self._oom_killed() else "Runtime.ExitError"
        prefix = f"RequestId: {request_id} " if request_id else ""
        phase = "Runtime exited with error" if not init else "Runtime exited during init"
        return {"errorType": error_type, "errorMessage": f"{prefix}Error: {phase}: {reason}"}

    def _oom_killed(self) -> bool:
        if not self.memory_cgroup:
            return False
        # cgroup v1: memory.oom_control of its memory cgroup; v2: memory.events of the
        # environment's cgroup (the parent of the leaf it joined), where memory.max is set
        for path in (
            os.path.join(self.memory_cgroup, "memory.oom_control"),
            os.path.join(os.path.dirname(self.memory_cgroup), "memory.events"),
        ):
            try:
                with open(path) as fh:
                    fields = dict(line.split() for line in fh if line.strip())
                return int(fields.get("oom_kill", "0")) > 0
            except (OSError, ValueError):
                continue
        return False

    def kill(self) -> None:
        """Kill the child (SIGKILL) and forget it; the next invocation starts a new one."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)
            if self.process.stdin is not None:
                self.process.stdin.close()
        if self.results is not None:
            self.results.close()
        self.process = None
        self.results = None


class Environment:
    """One execution environment: serves invocations one at a time, as LocalStack sends them."""

    def __init__(self) -> None:
        self.endpoint = os.environ["LOCALSTACK_RUNTIME_ENDPOINT"].rstrip("/")
        self.runtime_id = os.environ["LOCALSTACK_RUNTIME_ID"]
        self.timeout_s = float(os.environ.get("AWS_LAMBDA_FUNCTION_TIMEOUT", "3"))
        self.memory_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128"))
        self.version = os.environ.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        self.logs = LogBuffer()
        self.runtime = Runtime(os.environ["FANFIT_BOOTSTRAP"], self.logs)
        self.invocations: queue.Queue[dict[str, Any]] = queue.Queue()
        self.cold = True

    def init(self) -> bool:
        """Run the init phase and report ready or error to LocalStack."""
        startup_s = float(os.environ.get("FANFIT_INIT_TIMEOUT", "600"))
        error = self.runtime.start(time.monotonic() + startup_s)
        status = "error" if error else "ready"
        body = json.dumps(error or {}).encode()
        _post(f"{self.endpoint}/status/{self.runtime_id}/{status}", body)
        return error is None

    def serve(self) -> None:
        """Process queued invocations forever (run in a thread)."""
        while True:
            invocation = self.invocations.get()
            try:
                self.invoke(invocation)
            except Exception as exc:  # never let the worker die: report and go on
                request_id = invocation.get("invoke-id", "")
                error = {"errorType": "Runtime.Unknown", "errorMessage": f"fanfit init: {exc!r}"}
                _post(f"{self.endpoint}/invocations/{request_id}/error", json.dumps(error).encode())

    def invoke(self, invocation: dict[str, Any]) -> None:
        """Run one invocation and post its logs and its response or error."""
        request_id = invocation["invoke-id"]
        started_wall = time.time()
        started = time.monotonic()
        deadline = started + self.timeout_s
        init_ms: float | None = self.runtime.init_ms if self.cold else None
        error: dict[str, Any] | None = None
        payload: str | None = None
        max_memory_mb = 0
        fault = invocation.get("fanfit-fault")  # FANFIT_LOCAL_FAULTS (fanfit_localstack.faults)
        if self.runtime.process is None:  # restarted after a timeout or a crash: init again
            error = self.runtime.start(deadline)
            init_ms = self.runtime.init_ms
        self.cold = False
        preamble = self.logs.take()
        self.logs.add(f"START RequestId: {request_id} Version: {self.version}\n")
        if error is None and fault == "error":
            error = {
                "errorType": "Lambda.ServiceException",
                "errorMessage": "fanfit fault injection: Lambda service error",
            }
        elif error is None and fault == "timeout":
            self.runtime.kill()  # the next invocation starts a new runtime, as after a timeout
            error = {
                "errorType": "Sandbox.Timedout",
                "errorMessage": f"RequestId: {request_id} Error: Task timed out (fanfit fault injection)",
            }
        if error is None:
            sent = self.runtime.send(
                {
                    "request_id": request_id,
                    "invoked_function_arn": invocation.get("invoked-function-arn", ""),
                    "payload": invocation.get("payload", ""),
                    "trace_id": invocation.get("trace-id", ""),
                    "deadline_ms": int((started_wall + self.timeout_s) * 1000),
                }
            )
            message = self.runtime.read(deadline) if sent else None
            if message is not None:
                self.logs.wait_marker(request_id, self.runtime.eof_token, timeout_s=5.0)
                max_memory_mb = int(message.get("max_memory_mb", 0))
                if fault == "crash":  # the handler's work is done; the response is lost
                    self.runtime.kill()
                    error = {
                        "errorType": "Runtime.ExitError",
                        "errorMessage": f"RequestId: {request_id} Error: Runtime exited with "
                        "error: signal: killed (fanfit fault injection)",
                    }
                elif message.get("ok"):
                    payload = message["payload"]
                else:
                    error = message["error"]
            elif (
                self.runtime.process is not None
                and self.runtime.process.poll() is None
                and time.monotonic() >= deadline  # not an EOF: a dying child closes its pipe
            ):  # before waitpid can see it exit, so only a passed deadline means a timeout
                eof_token = self.runtime.eof_token
                self.runtime.kill()
                self.logs.wait_marker("", eof_token, timeout_s=2.0)
                self.logs.add(
                    f"{_utc_now()} {request_id} Task timed out after {self.timeout_s:.2f} seconds\n"
                )
                error = {
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": (
                        f"RequestId: {request_id} Error: Task timed out after "
                        f"{self.timeout_s:.2f} seconds"
                    ),
                }
            else:
                error = self.runtime.exit_error(request_id)
                self.logs.wait_marker("", self.runtime.eof_token, timeout_s=2.0)
                self.runtime.kill()
                self.logs.add(f"{_utc_now()} {request_id} {error['errorMessage']}\n")
        duration_ms = (time.monotonic() - started) * 1000.0
        report = (
            f"REPORT RequestId: {request_id}\tDuration: {duration_ms:.2f} ms\t"
            f"Billed Duration: {max(1, math.ceil(duration_ms))} ms\t"
            f"Memory Size: {self.memory_mb} MB\tMax Memory Used: {max_memory_mb} MB\t"
        )
        if init_ms is not None:
            report += f"Init Duration: {init_ms:.2f} ms\t"
        self.logs.add(f"END RequestId: {request_id}\n")
        self.logs.add(report + "\n")
        logs = preamble + self.logs.take()
        base = f"{self.endpoint}/invocations/{request_id}"
        _post(f"{base}/logs", json.dumps({"logs": logs}).encode())
        if error is None:
            _post(f"{base}/response", (payload or "null").encode())
        else:
            _post(f"{base}/error", json.dumps(error).encode())


class _InvokeHandler(http.server.BaseHTTPRequestHandler):
    environment: Environment

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path.rstrip("/") != "/invoke":
            self.send_response(404)
            self.end_headers()
            return
        self.environment.invocations.put(json.loads(body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base
        return


def _watch_parent(parent_pid: int) -> None:
    """Exit when LocalStack (our parent) is gone, taking the runtime child along."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os.killpg(os.getpgid(0), signal.SIGKILL)


def main() -> int:
    """Serve ``/invoke`` on the inherited socket; report the init phase to LocalStack."""
    listen = socket.socket(fileno=int(os.environ["FANFIT_LISTEN_FD"]))
    parent_pid = int(os.environ.get("FANFIT_PARENT_PID") or os.getppid())
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(os.getpgid(0), signal.SIGKILL))

    environment = Environment()
    _InvokeHandler.environment = environment
    server = http.server.ThreadingHTTPServer(
        listen.getsockname()[:2], _InvokeHandler, bind_and_activate=False
    )
    server.socket.close()
    server.socket = listen
    if not environment.init():
        return 1
    threading.Thread(target=environment.serve, daemon=True).start()
    server.serve_forever(poll_interval=0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
