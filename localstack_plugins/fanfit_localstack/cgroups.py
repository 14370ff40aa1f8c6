"""CPU and memory limits for local Lambda execution environments through cgroup v1.

On AWS a function gets memory equal to its ``MemorySize`` and CPU in proportion to it: 1,769 MB buys
one vCPU (AWS Lambda developer guide, "Configuring Lambda function memory"). Where the cgroup v1
``cpu`` and ``memory`` controllers are writable, each execution environment gets its own cgroup under
``<this process's cgroup>/fanfit-lambda/<runtime-id>`` with

- ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where present, so it cannot swap)
  set to ``MemorySize`` MiB;
- ``cpu.cfs_quota_us`` set to ``cpu.cfs_period_us * MemorySize / 1769`` (a hard limit: 128 MB gets
  about 7 % of one core, 3,538 MB two cores) and ``cpu.shares`` in the same proportion, with a
  20 ms period (:data:`CFS_PERIOD_US`).

The runtime process joins the memory cgroup at start and the cpu cgroup after its init phase (AWS
runs init with boosted CPU). Where the controllers are not writable, :func:`available` logs that
once and environments run unthrottled. ``FANFIT_LAMBDA_CGROUPS=0`` turns the limits off.

``FANFIT_LAMBDA_VCPU_SCALE`` (default 1.0) is the number of local cores that 1,769 MB buys. On AWS
every environment has its own vCPUs; here they share the machine's cores, so once the environments
running at once ask for more cores than the machine has (four workers of 1,769, 1,769, 885 and
885 MB want three cores; a CI machine has two) they contend and the speed ratios that MemorySize
sets no longer hold. A scale below 1 (0.5 there) keeps every ratio exact at a lower absolute speed.
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
SCALE_VARIABLE = "FANFIT_LAMBDA_VCPU_SCALE"
#: CFS period of every environment, microseconds. The kernel's default, 100 ms, lets a quarter-core
#: environment run 25 ms and then stall 75 ms: a step of a few hundred ms then lands anywhere within
#: a period of its fair time. 20 ms keeps the share exact on short steps, and 128 MB's quota (0.072
#: of a core, 1.45 ms) above the kernel's 1 ms minimum.
CFS_PERIOD_US = 20_000

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


def vcpu_scale() -> float:
    """Local cores per 1,769 MB: ``$FANFIT_LAMBDA_VCPU_SCALE`` (a number in (0, 64]), else 1.0.

    An unusable value is logged and ignored (1.0), so a typo cannot stop the stack.
    """
    raw = os.environ.get(SCALE_VARIABLE, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 64:  # also False for NaN
        LOG.warning(
            "fanfit: ignoring %s=%r (want a number in (0, 64]); using 1.0", SCALE_VARIABLE, raw
        )
        return 1.0
    return value


def vcpus_of(memory_mb: int) -> float:
    """Local cores an environment of ``memory_mb`` gets: ``memory_mb / 1769 * vcpu_scale()``."""
    return memory_mb / MB_PER_VCPU * vcpu_scale()


def cpu_quota_us(memory_mb: int, period_us: int, scale: float = 1.0) -> int:
    """CFS quota that gives ``memory_mb`` its Lambda CPU share, microseconds per ``period_us``.

    ``period_us * memory_mb / 1769 * scale``, at least 1,000 us (the kernel's minimum quota).
    """
    return max(1000, int(period_us * memory_mb / MB_PER_VCPU * scale))


def create(
    runtime_id: str, memory_mb: int, vcpus: float | None = None
) -> EnvironmentCgroups | None:
    """Create the cgroups of one execution environment (or Batch job) and set its limits.

    Parameters
    ----------
    runtime_id : str
        The execution environment's id (a directory name).
    memory_mb : int
        The function's ``MemorySize`` (a Batch job's ``MEMORY``), MB.
    vcpus : float, optional
        Local cores to allow; None: what ``memory_mb`` buys on Lambda (:func:`cpu_quota_us`).

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
        (groups.cpu / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        period = CFS_PERIOD_US
        quota = (
            cpu_quota_us(memory_mb, period, vcpu_scale())
            if vcpus is None
            else max(1000, int(period * vcpus))
        )
        (groups.cpu / "cpu.cfs_quota_us").write_text(str(quota))
        (groups.cpu / "cpu.shares").write_text(str(max(2, int(1024 * quota / period))))
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
