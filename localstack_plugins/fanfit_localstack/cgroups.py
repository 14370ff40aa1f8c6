"""CPU and memory limits for local Lambda execution environments: cgroup v1, or v2 where delegated.

On AWS a function gets memory equal to its ``MemorySize`` and CPU in proportion to it: 1,769 MB buys
one vCPU (AWS Lambda developer guide, "Configuring Lambda function memory"). The local stack runs
without root and on either cgroup version; :func:`probe` finds which limits it can apply here, once:

- **cgroup v1** (the ``cpu`` and ``memory`` controllers mounted and writable, as for root on a v1
  host): each execution environment gets ``<own cgroup>/fanfit-lambda/<runtime-id>`` in both
  controllers, with ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where present, so
  it cannot swap) set to ``MemorySize`` MiB, ``cpu.cfs_quota_us`` set to ``cpu.cfs_period_us *
  MemorySize / 1769`` (a hard limit: 128 MB gets about 7 % of one core, 3,538 MB two cores) and
  ``cpu.shares`` in the same proportion, with a 20 ms period (:data:`CFS_PERIOD_US`).
- **cgroup v2, delegated** (the process's own cgroup lists ``cpu`` and ``memory`` in
  ``cgroup.controllers`` and its ``cgroup.subtree_control`` is writable: a systemd unit or scope
  with ``Delegate=yes``, ``systemd-run --user --scope -p Delegate=yes ...``, a container with its own
  cgroup namespace): the controllers are enabled below it (the processes of that cgroup move to a
  leaf ``fanfit-stack`` first, as cgroup v2 wants: no process in a cgroup that hands controllers
  down) and each environment gets ``<own cgroup>/fanfit-lambda/<runtime-id>`` with ``memory.max``
  (and ``memory.swap.max`` 0), and two leaves: ``init`` (no CPU limit) and ``run`` with ``cpu.max``
  (``"<quota> <period>"``, the same quota) and ``cpu.weight`` in proportion. Memory is charged to the
  environment's cgroup wherever the process is, so the limit holds in both leaves.
- **none**: neither is possible (no root on a v1 host, a v2 cgroup not delegated, no cgroup file
  system, ``FANFIT_LAMBDA_CGROUPS=0``). Environments run unthrottled; :func:`probe` says so once in
  LocalStack's log with the reason, and ``fanfit local status`` shows it (:func:`write_report`).

The runtime process joins the memory cgroup at start and the cpu cgroup after its init phase (AWS
runs init with boosted CPU).

``FANFIT_LAMBDA_VCPU_SCALE`` (default 1.0) is the number of local cores that 1,769 MB buys. On AWS
every environment has its own vCPUs; here they share the machine's cores, so once the environments
running at once ask for more cores than the machine has (four workers of 1,769, 1,769, 885 and
885 MB want three cores; a CI machine has two) they contend and the speed ratios that MemorySize
sets no longer hold. A scale below 1 (0.5 there) keeps every ratio exact at a lower absolute speed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

LOG = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
MB_PER_VCPU = 1769
"""Memory size that buys one vCPU on AWS Lambda, MB."""
_GROUP = "fanfit-lambda"
#: The leaf that a delegated cgroup v2's own processes move to, so it can hand controllers down.
_STACK_LEAF = "fanfit-stack"
SCALE_VARIABLE = "FANFIT_LAMBDA_VCPU_SCALE"
#: Environment variable: where :func:`write_report` writes what :func:`probe` found (JSON).
REPORT_VARIABLE = "FANFIT_CGROUP_REPORT"
#: CFS period of every environment, microseconds. The kernel's default, 100 ms, lets a quarter-core
#: environment run 25 ms and then stall 75 ms: a step of a few hundred ms then lands anywhere within
#: a period of its fair time. 20 ms keeps the share exact on short steps, and 128 MB's quota (0.072
#: of a core, 1.45 ms) above the kernel's 1 ms minimum.
CFS_PERIOD_US = 20_000

_lock = threading.Lock()
_found: Limits | None = None


@dataclass(frozen=True)
class Limits:
    """Which CPU and memory limits this process can give execution environments.

    Attributes
    ----------
    mode : str
        ``'v1'`` (cgroup v1 controllers), ``'v2'`` (a delegated cgroup v2) or ``'none'``.
    reason : str
        What was found: where the limits are set, or why there are none.
    memory_parent, cpu_parent : str
        The ``fanfit-lambda`` directories environments are created in (one directory for both on
        v2); empty for ``'none'``.
    """

    mode: str
    reason: str
    memory_parent: str = ""
    cpu_parent: str = ""

    @property
    def apply(self) -> bool:
        """Whether limits are applied."""
        return self.mode != "none"

    def summary(self) -> str:
        """One line for ``fanfit local status``."""
        names = {"v1": "cgroup v1", "v2": "cgroup v2 (delegated)", "none": "none"}
        return f"{names.get(self.mode, self.mode)}: {self.reason}"


@dataclass(frozen=True)
class EnvironmentCgroups:
    """The cgroup directories of one execution environment.

    Attributes
    ----------
    memory : pathlib.Path
        Directory the process joins at start (v1: in the memory controller; v2: the ``init`` leaf).
    cpu : pathlib.Path
        Directory it joins after init (v1: in the cpu controller; v2: the ``run`` leaf).
    top : pathlib.Path or None
        v2: the environment's own cgroup (``memory.max``), the leaves' parent; None on v1.
    """

    memory: Path
    cpu: Path
    top: Path | None = None

    def remove(self) -> None:
        """Remove the directories (the processes in them must have exited)."""
        for directory in (self.memory, self.cpu, self.top):
            if directory is None:
                continue
            try:
                directory.rmdir()
            except OSError as exc:
                LOG.debug("could not remove cgroup %s: %s", directory, exc)


def _own_cgroups(proc_cgroup: Path) -> dict[str, str]:
    """Hierarchy -> this process's path in it: v1 controller names, ``''`` for cgroup v2."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return {}
    own: dict[str, str] = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            own[""] = path
        for controller in controllers.split(","):
            if controller:
                own[controller] = path
    return own


def _probe_v1(root: Path, own: dict[str, str]) -> Limits | str:
    """cgroup v1 limits, or why not."""
    parents: dict[str, Path] = {}
    for controller, limit_file in (
        ("memory", "memory.limit_in_bytes"),
        ("cpu", "cpu.cfs_quota_us"),
    ):
        if controller not in own or not (root / controller).is_dir():
            return f"no cgroup v1 '{controller}' controller mounted"
        directory = root / controller / own[controller].lstrip("/")
        if not directory.is_dir():
            return f"cgroup v1: {directory} not found"
        parent = directory / _GROUP
        try:
            parent.mkdir(exist_ok=True)
        except OSError as exc:
            return f"cgroup v1: cannot create {parent}: {exc.strerror or exc} (needs root)"
        if not os.access(parent / limit_file, os.W_OK):
            return f"cgroup v1: {parent / limit_file} is not writable (needs root)"
        parents[controller] = parent
    _weigh_parent(parents["cpu"] / "cpu.shares", 1024, 262_144)
    return Limits(
        "v1",
        f"cpu.cfs_quota_us and memory.limit_in_bytes per environment under {parents['cpu']} "
        f"and {parents['memory']}",
        memory_parent=str(parents["memory"]),
        cpu_parent=str(parents["cpu"]),
    )


def parent_weight(per_core: int, most: int, cores: int | None = None) -> int:
    """The ``fanfit-lambda`` parent's CPU weight: one nice-0 task's weight per core of the machine.

    The parent competes with the stack's own processes (LocalStack, the client, a benchmark's
    in-process baseline) as one entity. At the default weight (v1 ``cpu.shares`` 1024, v2
    ``cpu.weight`` 100) all the environments together weigh as much as one busy host thread, so
    two Lambda environments beside one busy LocalStack thread get one core between them on a
    two-core machine. On AWS every environment has vCPUs of its own; weighing the group as
    ``cores`` busy threads lets the environments use the machine's cores as the host's processes
    would, while each environment's CFS quota still caps it at its ``MemorySize``'s share (the
    kernel's CFS group scheduling: Documentation/scheduler/sched-design-CFS.rst, "Group scheduler
    extensions to CFS").

    Parameters
    ----------
    per_core : int
        The weight of one nice-0 task: 1024 (v1 ``cpu.shares``) or 100 (v2 ``cpu.weight``).
    most : int
        The controller's largest weight (v1 262,144; v2 10,000).
    cores : int, optional
        Cores of the machine; ``os.cpu_count()`` by default.

    Returns
    -------
    int
        ``per_core * cores``, at most ``most``.
    """
    return min(most, per_core * max(1, cores or os.cpu_count() or 1))


def _weigh_parent(weight_file: Path, per_core: int, most: int) -> None:
    """Write :func:`parent_weight` to the parent's weight file; a failure only logs."""
    try:
        weight_file.write_text(str(parent_weight(per_core, most)))
    except OSError as exc:
        LOG.warning("could not set %s: %s", weight_file, exc)


def _tokens(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _enable(directory: Path, controllers: str = "+cpu +memory") -> None:
    (directory / "cgroup.subtree_control").write_text(controllers)


def _probe_v2(root: Path, own: dict[str, str]) -> Limits | str:
    """Limits in a delegated cgroup v2, or why not."""
    mount = next(
        (m for m in (root, root / "unified") if (m / "cgroup.controllers").is_file()), None
    )
    if mount is None:
        return "no cgroup v2 mounted"
    if "" not in own:
        return "cgroup v2: this process is in no cgroup v2"
    directory = mount / own[""].lstrip("/")
    available = _tokens(directory / "cgroup.controllers")
    missing = sorted({"cpu", "memory"} - available)
    if missing:
        return (
            f"cgroup v2: the {' and '.join(missing)} controller(s) are not delegated to {directory} "
            "(start the stack in a cgroup with Delegate=yes, e.g. systemd-run --user --scope "
            "-p Delegate=yes)"
        )
    control = directory / "cgroup.subtree_control"
    if not os.access(control, os.W_OK):
        return f"cgroup v2: {control} is not writable (the cgroup is not delegated to this user)"
    try:
        if not {"cpu", "memory"} <= _tokens(control):
            try:
                _enable(directory)
            except OSError:  # EBUSY: processes in the cgroup; move them to a leaf first
                leaf = directory / _STACK_LEAF
                leaf.mkdir(exist_ok=True)
                for pid in (directory / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, OSError):
                        (leaf / "cgroup.procs").write_text(pid)
                _enable(directory)
        parent = directory / _GROUP
        parent.mkdir(exist_ok=True)
        _enable(parent)
        _weigh_parent(parent / "cpu.weight", 100, 10_000)
    except OSError as exc:
        return f"cgroup v2: cannot hand the cpu and memory controllers down from {directory}: {exc}"
    return Limits(
        "v2",
        f"cpu.max and memory.max per environment under {parent}",
        memory_parent=str(parent),
        cpu_parent=str(parent),
    )


def probe(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> Limits:
    """Find which limits can be applied here (no cache, no log: :func:`limits` is the cached one).

    Parameters
    ----------
    root : pathlib.Path
        Where the cgroup file systems are mounted (``/sys/fs/cgroup``).
    proc_cgroup : pathlib.Path
        This process's ``/proc/self/cgroup``.

    Returns
    -------
    Limits
        cgroup v1 where its controllers are writable, else a delegated cgroup v2, else none, with
        the reasons.
    """
    if os.environ.get("FANFIT_LAMBDA_CGROUPS", "1").lower() in ("0", "false", "no", "off"):
        return Limits("none", "turned off (FANFIT_LAMBDA_CGROUPS=0)")
    own = _own_cgroups(proc_cgroup)
    if not own:
        return Limits("none", f"cannot read {proc_cgroup}")
    v1 = _probe_v1(root, own)
    if isinstance(v1, Limits):
        return v1
    v2 = _probe_v2(root, own)
    if isinstance(v2, Limits):
        return v2
    return Limits("none", f"{v1}; {v2}")


def limits() -> Limits:
    """:func:`probe` of this process, once: logged once, and reported (:func:`write_report`)."""
    global _found
    with _lock:
        if _found is not None:
            return _found
        _found = probe()
        if _found.apply:
            LOG.info("fanfit: Lambda environments get the CPU and memory their MemorySize buys "
                     "(%s)", _found.summary())  # fmt: skip
            swept = sweep_stale(_found)
            if swept:
                LOG.info("fanfit: removed %d cgroups left by stacks that ended", swept)
        else:
            LOG.warning(
                "fanfit: Lambda environments run without CPU/memory limits (%s); timings on "
                "this machine do not reflect MemorySize",
                _found.reason,
            )
        write_report(_found)
        return _found


def write_report(found: Limits, path: str | None = None) -> None:
    """Write ``found`` (and this process's id) as JSON to ``path`` (default
    ``$FANFIT_CGROUP_REPORT``; nothing when unset), for ``fanfit local status``."""
    target = path or os.environ.get(REPORT_VARIABLE)
    if not target:
        return
    document = {
        **asdict(found),
        "apply": found.apply,
        "summary": found.summary(),
        "pid": os.getpid(),
    }
    try:
        tmp = Path(f"{target}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(document))
        os.replace(tmp, target)
    except OSError as exc:
        LOG.debug("could not write %s: %s", target, exc)


def available() -> bool:
    """Whether CPU and memory limits can be set here (:func:`limits`: checked once, logged once)."""
    return limits().apply


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


def pool_threads(memory_mb: int, host_cpus: int) -> int:
    """Threads of a function's BLAS/OpenMP pools: the vCPUs ``memory_mb`` buys
    (:func:`vcpus_of`, rounded up), at least 1, at most ``host_cpus``."""
    return min(max(1, host_cpus), max(1, math.ceil(vcpus_of(memory_mb))))


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
    found = limits()
    if not found.apply:
        return None
    period = CFS_PERIOD_US
    quota = (
        cpu_quota_us(memory_mb, period, vcpu_scale())
        if vcpus is None
        else max(1000, int(period * vcpus))
    )
    limit = str(memory_mb * 1024 * 1024)
    if found.mode == "v2":
        top = Path(found.memory_parent) / runtime_id
        groups = EnvironmentCgroups(memory=top / "init", cpu=top / "run", top=top)
    else:
        groups = EnvironmentCgroups(
            memory=Path(found.memory_parent) / runtime_id, cpu=Path(found.cpu_parent) / runtime_id
        )
    try:
        if groups.top is not None:
            set_v2_limits(groups, limit, quota, period)
        else:
            set_v1_limits(groups, limit, quota, period)
    except OSError as exc:
        LOG.warning("fanfit: could not set limits for environment %s: %s", runtime_id, exc)
        groups.remove()
        return None
    return groups


def scale_cpu(groups: EnvironmentCgroups, memory_mb: int, factor: float) -> int:
    """Set an environment's CPU quota to ``factor`` times what ``memory_mb`` buys (interference).

    Test-only control for :class:`fanfit_localstack.faults.ThrottleSpec`: ``factor`` 1.0 restores
    the quota :func:`create` set. The period stays :data:`CFS_PERIOD_US`; ``cpu.shares``
    (``cpu.weight`` on v2) stay what :func:`create` set for the full quota: the cut is a hard
    limit, as a Lambda function's CPU share is, not also a lower priority. With the weight cut too,
    a throttled environment got less than its quota while the other environments ran and its quota
    once they had finished: in ``benchmarks/straggler.py`` the cut worker ran about twice as fast
    in the round it ended alone as in the balanced rounds after, so its measured speed misled
    LB-BSP for a round.

    Parameters
    ----------
    groups : EnvironmentCgroups
        The environment's cgroups (from :func:`create`).
    memory_mb : int
        Its ``MemorySize``, MB.
    factor : float
        Share of the normal quota, in ``(0, 1]``.

    Returns
    -------
    int
        The quota set, microseconds per period (at least 1,000, the kernel's minimum).

    Raises
    ------
    ValueError
        ``factor`` outside ``(0, 1]``.
    OSError
        The cgroup files cannot be written.
    """
    if not 0 < factor <= 1:
        raise ValueError(f"cpu factor must be in (0, 1], got {factor!r}")
    period = CFS_PERIOD_US
    normal = cpu_quota_us(memory_mb, period, vcpu_scale())
    quota = max(1000, int(normal * factor))
    if groups.top is not None:
        (groups.cpu / "cpu.max").write_text(f"{quota} {period}")
        weight = min(10000, max(1, round(100 * normal / period)))
        (groups.cpu / "cpu.weight").write_text(str(weight))
    else:
        (groups.cpu / "cpu.cfs_quota_us").write_text(str(quota))
        (groups.cpu / "cpu.shares").write_text(str(max(2, int(1024 * normal / period))))
    return quota


def set_v1_limits(groups: EnvironmentCgroups, limit: str, quota: int, period: int) -> None:
    """cgroup v1: memory limit (bytes, no swap), CFS quota and period (us), shares."""
    groups.memory.mkdir(exist_ok=True)
    groups.cpu.mkdir(exist_ok=True)
    (groups.memory / "memory.limit_in_bytes").write_text(limit)
    memsw = groups.memory / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        memsw.write_text(limit)
    (groups.cpu / "cpu.cfs_period_us").write_text(str(period))
    (groups.cpu / "cpu.cfs_quota_us").write_text(str(quota))
    (groups.cpu / "cpu.shares").write_text(str(max(2, int(1024 * quota / period))))


def set_v2_limits(groups: EnvironmentCgroups, limit: str, quota: int, period: int) -> None:
    """cgroup v2: ``memory.max`` (bytes; ``memory.swap.max`` 0) on the environment's cgroup,
    ``cpu.max`` (``"<quota> <period>"``, us) and ``cpu.weight`` on its ``run`` leaf."""
    assert groups.top is not None
    groups.top.mkdir(exist_ok=True)
    (groups.top / "memory.max").write_text(limit)
    swap = groups.top / "memory.swap.max"
    if swap.exists():
        swap.write_text("0")
    _enable(groups.top, "+cpu")
    groups.memory.mkdir(exist_ok=True)
    groups.cpu.mkdir(exist_ok=True)
    (groups.cpu / "cpu.max").write_text(f"{quota} {period}")
    # cpu.weight 100 is v1's 1024 shares; range 1..10000
    (groups.cpu / "cpu.weight").write_text(str(min(10000, max(1, round(100 * quota / period)))))


#: Age (seconds since the directory was made) after which an environment's cgroup with no process
#: in it is taken for one left by a stack that ended without stopping its environments. An
#: environment's process joins its cgroup seconds after :func:`create`.
STALE_AFTER_S = 600.0


def sweep_stale(
    found: Limits, stale_after_s: float = STALE_AFTER_S, now: float | None = None
) -> int:
    """Remove the environments' cgroups that stacks which ended left under the parent groups.

    A stack stopped by a signal (``kill``, a test runner's timeout) leaves its environments'
    directories behind, and every stack on the machine shares the parent. Only directories made
    more than ``stale_after_s`` ago are tried, and the kernel refuses to remove a cgroup with a
    process or a child group in it (EBUSY), so a running environment of this or another stack
    keeps its own.

    Parameters
    ----------
    found : Limits
        What :func:`probe` found; nothing is done without limits.
    stale_after_s : float
        Seconds since a directory's mtime before it is tried.
    now : float, optional
        Epoch seconds, ``time.time()`` by default.

    Returns
    -------
    int
        Environments' directories removed.
    """
    if not found.apply:
        return 0
    cutoff = (time.time() if now is None else now) - stale_after_s
    removed = 0
    for parent in {Path(found.memory_parent), Path(found.cpu_parent)}:
        for child in _subdirs(parent):
            try:
                if child.stat().st_mtime > cutoff:
                    continue
            except OSError:  # another stack's sweep removed it meanwhile
                continue
            for leaf in _subdirs(child):
                _rmdir(leaf)
            removed += _rmdir(child)
    return removed


def cleanup() -> None:
    """Remove the ``fanfit-lambda`` parent groups when empty (on shutdown)."""
    found = _found
    if found is None or not found.apply:
        return
    for parent in {Path(found.memory_parent), Path(found.cpu_parent)}:
        if parent.is_dir():
            for child in _subdirs(parent):
                for leaf in _subdirs(child):
                    _rmdir(leaf)
                _rmdir(child)
            _rmdir(parent)


def _subdirs(directory: Path) -> list[Path]:
    """The directories in ``directory``; none when it is gone: every stack on the machine sweeps
    the shared parents, so a directory listed a moment ago may have been removed by another."""
    try:
        return [c for c in directory.iterdir() if c.is_dir()]
    except OSError:
        return []


def _rmdir(directory: Path) -> bool:
    try:
        directory.rmdir()
    except OSError as exc:
        LOG.debug("could not remove cgroup %s: %s", directory, exc)
        return False
    return True
