"""The embedded local stack as users drive it: start it and deploy the project, stop it, ask it.

:func:`up`, :func:`down` and :func:`status` are ``fanfit local up|down|status``;
:func:`ensure_local_stack` uses the running stack or starts one, which it leaves running for the next
command (saying once, on stderr, how to stop it). The
parts underneath: :mod:`fanfit.local.process` (the LocalStack process: :class:`LocalStack`,
:class:`StackInfo`) and :mod:`fanfit.local.deploy` (the template, through SAM); this module imports
both, and neither imports it.

Settings (read by :mod:`fanfit.local.process`): ``FANFIT_HOME`` (the state dir, default
``<project>/.fanfit/local``), ``FANFIT_LOCALSTACK_PYTHON`` (LocalStack's interpreter, default
``<project>/.venv-localstack``), ``FANFIT_LAMBDA_PYTHON`` (the Lambda functions' interpreter,
default ``<project>/.venv-lambda``) and ``FANFIT_BATCH_PYTHON`` (the GPU worker's jobs'
interpreter, default this one). docs/local.md has the full table.

Examples
--------
>>> with ensure_local_stack() as info:  # doctest: +SKIP
...     boto3.client("s3", endpoint_url=info.endpoint).list_buckets()
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from fanfit.local.deploy import DEFAULT_STACK_NAME, Deployer, deployed_record
from fanfit.local.process import START_TIMEOUT_S, LocalStack, StackInfo

__all__ = ["LocalStack", "StackInfo", "down", "ensure_local_stack", "status", "up"]

#: What a command that started the local stack says (on stderr) as it leaves it running.
KEPT_RUNNING = (
    "fanfit: the local stack keeps running at {endpoint} for the next command; "
    "stop it with: fanfit local down"
)


@contextlib.contextmanager
def ensure_local_stack(
    root: str | os.PathLike[str] | None = None,
    home: str | os.PathLike[str] | None = None,
    timeout_s: float = START_TIMEOUT_S,
    deploy: bool = True,
    keep_running: bool = True,
    verify: bool = True,
) -> Iterator[StackInfo]:
    """Use the running local stack, or start one and leave it running for the next command.

    Parameters
    ----------
    root, home : path-like, optional
        Project root and state dir (see :class:`LocalStack`).
    timeout_s : float
        Start-up timeout, seconds.
    deploy : bool
        Deploy the project's ``template.yaml`` as stack ``fanfit`` first (cached: quick when it is
        already deployed and unchanged).
    keep_running : bool
        Leave a stack started here running on exit, and say so once on stderr
        (:data:`KEPT_RUNNING`: where it runs and ``fanfit local down`` to stop it), so that the
        next command (``fanfit status JOB``, ``fanfit report JOB``) finds the job; False: stop it
        on exit. A stack that was already running is always left running.
    verify : bool
        Ask the stack whether the deployed stack is complete even when the deploy record says
        it is (:meth:`Deployer.run`'s ``verify``).

    Yields
    ------
    StackInfo
        The running stack.

    Raises
    ------
    StackError
        When the stack cannot be started or the template not deployed.
    """
    stack = LocalStack(root=root, home=home)
    running = stack.running()
    info = running if running is not None else stack.start(timeout_s=timeout_s)
    try:
        if deploy:
            Deployer(info, stack.root / "template.yaml").run(verify=verify)
        yield info
    finally:
        if running is None:
            if keep_running:
                print(KEPT_RUNNING.format(endpoint=info.endpoint), file=sys.stderr)
            else:
                stack.stop()


def up(deploy: bool = True, root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Start the local stack (or reuse the running one) and deploy the project into it.

    The stack keeps running after this returns; :func:`down` stops it.

    Parameters
    ----------
    deploy : bool
        Deploy the project's ``template.yaml`` as stack ``fanfit`` (cached).
    root : path-like, optional
        Project root (default: :func:`project_root`).

    Returns
    -------
    dict
        :meth:`LocalStack.status` plus ``stack_name``, ``deployed`` and ``outputs`` (the stack
        outputs) when deployed, and ``timings`` (seconds: ``start_s``, and
        ``build_s``/``deploy_s``/... when deployed).

    Raises
    ------
    StackError
        When the stack cannot be started or the template not deployed.
    """
    stack = LocalStack(root=root)
    started = time.perf_counter()
    info = stack.start()
    timings: dict[str, float] = {"start_s": round(time.perf_counter() - started, 2)}
    result = stack.status()
    if deploy:
        deployer = Deployer(info, stack.root / "template.yaml")
        result["outputs"] = deployer.run()
        timings.update(deployer.timings)
        result.update(stack_name=deployer.stack_name, deployed=True)
    result["timings"] = timings
    return result


def down(root: str | os.PathLike[str] | None = None) -> None:
    """Stop the running local stack, if any (SIGTERM, then SIGKILL after a timeout).

    Parameters
    ----------
    root : path-like, optional
        Project root (default: :func:`project_root`).
    """
    LocalStack(root=root).stop()


def status(root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Where the local stack stands (see :meth:`LocalStack.status`).

    Parameters
    ----------
    root : path-like, optional
        Project root (default: :func:`project_root`).

    Returns
    -------
    dict
        ``running``, ``healthy``, ``state_dir`` and, when one was started, ``pid``, ``port``,
        ``endpoint``, ``region``, ``log_file``, ``started_at``, ``uptime_s``, ``services``,
        ``limits`` and ``limits_apply`` (:meth:`LocalStack.status`); while it runs also
        ``stack_name`` and ``deployed`` (whether the deploy record says the project is deployed
        into this run of the stack: :func:`fanfit.local.deploy.deployed_record`), and when it is,
        ``deployed_at`` (seconds since the epoch) and ``outputs``.
    """
    stack = LocalStack(root=root)
    result = stack.status()
    info = stack.read_state()
    if result["running"] and info is not None:
        record = deployed_record(info)
        result.update(stack_name=DEFAULT_STACK_NAME, deployed=record is not None)
        if record is not None:
            result.update(record)
    return result
