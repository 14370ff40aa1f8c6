"""CPU and memory limits for local Lambda execution environments through cgroup v1.

On AWS a function gets memory equal to its ``MemorySize`` and CPU in proportion to it: 1,769 MB buys
one vCPU (AWS Lambda developer guide, "Configuring Lambda function memory"). Where the cgroup v1
``cpu`` and ``memory`` controllers are writable, each execution environment gets its own cgroup under
``<this process's cgroup>/fanfit-lambda/<runtime-id>`` with

- ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where present, so it cannot swap)
  set to ``MemorySize`` MiB;
- ``cpu.cfs_quota_us`` set to ``cpu.cfs_period_us * MemorySize / 1769`` (a hard limit: 128 MB gets
  about 7 % of one core, 3,538 MB two cores) and ``cpu.shares`` in the same proportion.

The runtime process joins the memory cgroup at start and the cpu cgroup after its init phase (AWS
runs init with boosted CPU). Where the controllers are not writable, :func:`available` logs that
once and environments run unthrottled. ``FANFIT_LAMBDA_CGROUPS=0`` turns the limits off.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
MB_PER_VCPU = 1769
"""Memory size that buys one vCPU on AWS Lambda, MB."""
_GROUP = "fanfit-lambda"

_lock = threading.Lock()
_available: bool | None = None


@dataclass(frozen=True)
class EnvironmentCgroups:
    """The cgroup directories of one execution environment.

    Attributes
    ----------
    memory : pathlib.Path
        Directory in the memory controller.
    cpu : pathlib.Path
        Directory in the cpu controller.
    """

    memory: Path
    cpu: Path

    def remove(self) -> None:
        """Remove both directories (the processes in them must have exited)."""
        for directory in (self.memory, self.cpu):
            try:
                directory.rmdir()
            except OSError as exc:
                LOG.debug("could not remove cgroup %s: %s", directory, exc)


def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup directory in the v1 ``controller`` hierarchy, if mounted."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            directory = CGROUP_ROOT / controller / path.lstrip("/")
            return directory if directory.is_dir() else None
    return None


def _parent(controller: str) -> Path | None:
    own = _own_cgroup(controller)
    return None if own is None else own / _GROUP


def available() -> bool:
    """Whether cgroup v1 cpu and memory limits can be set here (checked once, logged once).

    Returns
    -------
    bool
        True when ``<own cgroup>/fanfit-lambda`` could be created in both controllers and the
        limit files are writable.
    """
    global _available
    with _lock:
        if _available is not None:
            return _available
        _available = False
        if os.environ.get("FANFIT_LAMBDA_CGROUPS", "1").lower() in ("0", "false", "no", "off"):
            LOG.info("fanfit: Lambda CPU/memory limits turned off (FANFIT_LAMBDA_CGROUPS=0)")
            return False
        reason = ""
        for controller, limit_file in (
            ("memory", "memory.limit_in_bytes"),
            ("cpu", "cpu.cfs_quota_us"),
        ):
            parent = _parent(controller)
            if parent is None:
                reason = f"no cgroup v1 '{controller}' controller mounted"
                break
            try:
                parent.mkdir(exist_ok=True)
                if not os.access(parent / limit_file, os.W_OK):
                    reason = f"{parent / limit_file} is not writable"
                    break
            except OSError as exc:
                reason = f"cannot create {parent}: {exc}"
                break
        else:
            _available = True
            LOG.info("fanfit: Lambda environments get the CPU and memory their MemorySize buys")
            return True
        LOG.warning(
            "fanfit: Lambda environments run without CPU/memory limits (%s); timings on this "
            "machine do not reflect MemorySize",
            reason,
        )
        return False


def create(runtime_id: str, memory_mb: int) -> EnvironmentCgroups | None:
    """Create the cgroups of one execution environment and set its limits.

    Parameters
    ----------
    runtime_id : str
        The execution environment's id (a directory name).
    memory_mb : int
        The function's ``MemorySize``, MB.

    Returns
    -------
    EnvironmentCgroups or None
        None when limits are not available or could not be set (then it runs unthrottled).
    """
    if not available():
        return None
    memory_parent, cpu_parent = _parent("memory"), _parent("cpu")
    if memory_parent is None or cpu_parent is None:
        return None
    groups = EnvironmentCgroups(memory=memory_parent / runtime_id, cpu=cpu_parent / runtime_id)
    try:
        groups.memory.mkdir(exist_ok=True)
        groups.cpu.mkdir(exist_ok=True)
        limit = str(memory_mb * 1024 * 1024)
        (groups.memory / "memory.limit_in_bytes").write_text(limit)
        memsw = groups.memory / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            memsw.write_text(limit)
        period = int((groups.cpu / "cpu.cfs_period_us").read_text())
        quota = max(1000, int(period * memory_mb / MB_PER_VCPU))
        (groups.cpu / "cpu.cfs_quota_us").write_text(str(quota))
        (groups.cpu / "cpu.shares").write_text(str(max(2, int(1024 * memory_mb / MB_PER_VCPU))))
    except OSError as exc:
        LOG.warning("fanfit: could not set limits for environment %s: %s", runtime_id, exc)
        groups.remove()
        return None
    return groups


def cleanup() -> None:
    """Remove the ``fanfit-lambda`` parent groups when empty (on shutdown)."""
    for controller in ("memory", "cpu"):
        parent = _parent(controller)
        if parent is not None and parent.is_dir():
            for child in parent.iterdir():
                if child.is_dir():
                    _rmdir(child)
            _rmdir(parent)


def _rmdir(directory: Path) -> None:
    try:
        directory.rmdir()
    except OSError as exc:
        LOG.debug("could not remove cgroup %s: %s", directory, exc)
