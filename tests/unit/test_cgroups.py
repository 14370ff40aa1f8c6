"""CPU and memory limits of local Lambda environments: cgroup v1, a delegated cgroup v2, or none.

GIVEN :mod:`fanfit_localstack.cgroups` (loaded from its file: LocalStack is not installed here)
and a fake cgroup tree in ``tmp_path`` (a ``/sys/fs/cgroup`` and a ``/proc/self/cgroup``) WHEN it
probes and creates an environment's cgroups THEN v1 gets ``memory.limit_in_bytes`` and CFS quotas,
a delegated v2 gets ``memory.max`` and ``cpu.max`` (controllers handed down, the cgroup's own
processes moved to a leaf first where it must), and anything else runs without limits with the
reason, which ``fanfit local status`` shows.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def _load():
    name = "fanfit_localstack_cgroups"
    if name not in sys.modules:
        path = ROOT / "localstack_plugins" / "fanfit_localstack" / "cgroups.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


cg = _load()


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("FANFIT_LAMBDA_CGROUPS", raising=False)
    monkeypatch.delenv(cg.SCALE_VARIABLE, raising=False)
    monkeypatch.delenv(cg.REPORT_VARIABLE, raising=False)
    monkeypatch.setattr(cg, "_found", None)


def _write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _v1_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A cgroup v1 host: memory in /process_api/x, cpu at the root (as on this project's CI)."""
    root = tmp_path / "sys"
    proc = _write(tmp_path / "proc", "4:memory:/process_api/x\n1:cpu:/\n2:cpuacct:/\n0::/\n")
    _write(root / "memory" / "process_api" / "x" / "fanfit-lambda" / "memory.limit_in_bytes")
    _write(root / "cpu" / "fanfit-lambda" / "cpu.cfs_quota_us")
    return root, proc


def _v2_tree(tmp_path: Path, controllers: str = "cpu memory pids") -> tuple[Path, Path, Path]:
    """A cgroup v2 host; this process in /user.slice/app (delegated when it has cpu and memory)."""
    root = tmp_path / "sys"
    proc = _write(tmp_path / "proc", "0::/user.slice/app\n")
    _write(root / "cgroup.controllers", "cpuset cpu io memory pids")
    own = root / "user.slice" / "app"
    _write(own / "cgroup.controllers", controllers)
    _write(own / "cgroup.subtree_control", "")
    _write(own / "cgroup.procs", "4242\n")
    return root, proc, own


def test_cgroup_v1_limits_apply_where_the_controllers_are_writable(tmp_path, monkeypatch) -> None:
    # GIVEN a cgroup v1 tree with writable cpu and memory controllers
    root, proc = _v1_tree(tmp_path)
    # WHEN it probes
    found = cg.probe(root, proc)
    # THEN limits apply through v1
    assert found.mode == "v1" and found.apply
    assert found.memory_parent == str(root / "memory" / "process_api" / "x" / "fanfit-lambda")
    assert found.cpu_parent == str(root / "cpu" / "fanfit-lambda")
    # ... and the parent weighs as one busy thread per core against the host's processes
    parent_shares = root / "cpu" / "fanfit-lambda" / "cpu.shares"
    assert parent_shares.read_text() == str(1024 * os.cpu_count())
    # ... and an environment of 1,769 MB gets 1,769 MiB and one core (20 ms of each 20 ms)
    monkeypatch.setattr(cg, "_found", found)
    groups = cg.create("env-1", 1769)
    assert groups is not None and groups.top is None
    assert (groups.memory / "memory.limit_in_bytes").read_text() == str(1769 * MIB)
    assert (groups.cpu / "cpu.cfs_period_us").read_text() == str(cg.CFS_PERIOD_US)
    assert (groups.cpu / "cpu.cfs_quota_us").read_text() == str(cg.CFS_PERIOD_US)
    assert (groups.cpu / "cpu.shares").read_text() == "1024"


def test_a_delegated_cgroup_v2_gets_cpu_max_and_memory_max(tmp_path, monkeypatch) -> None:
    # GIVEN a cgroup v2 tree whose cgroup of this process has cpu and memory delegated
    root, proc, own = _v2_tree(tmp_path)
    # WHEN it probes
    found = cg.probe(root, proc)
    # THEN limits apply through v2, the controllers handed down to fanfit-lambda
    assert found.mode == "v2" and found.apply, found
    parent = own / "fanfit-lambda"
    assert found.memory_parent == found.cpu_parent == str(parent)
    assert {"+cpu", "+memory"} <= set((own / "cgroup.subtree_control").read_text().split())
    assert {"+cpu", "+memory"} <= set((parent / "cgroup.subtree_control").read_text().split())
    assert (parent / "cpu.weight").read_text() == str(min(10_000, 100 * os.cpu_count()))
    # ... and an environment of 885 MB gets memory.max of 885 MiB on its cgroup, no swap, and
    # half a core (cpu.max) on the leaf it runs in after init
    _write(parent / "env-2" / "memory.swap.max", "max")
    monkeypatch.setattr(cg, "_found", found)
    groups = cg.create("env-2", 885)
    assert groups is not None and groups.top == parent / "env-2"
    assert (groups.top / "memory.max").read_text() == str(885 * MIB)
    assert (groups.top / "memory.swap.max").read_text() == "0"
    assert (groups.top / "cgroup.subtree_control").read_text() == "+cpu"
    quota = cg.cpu_quota_us(885, cg.CFS_PERIOD_US)
    assert (groups.cpu / "cpu.max").read_text() == f"{quota} {cg.CFS_PERIOD_US}"
    assert (groups.cpu / "cpu.weight").read_text() == str(round(100 * quota / cg.CFS_PERIOD_US))
    assert groups.memory == groups.top / "init" and groups.memory.is_dir()
    assert not (groups.memory / "cpu.max").exists()  # init runs with its CPU boosted
    # ... and removing it leaves no directory behind
    for leaf in (groups.memory, groups.cpu, groups.top):
        for f in leaf.iterdir():
            if f.is_file():
                f.unlink()
    groups.remove()
    assert not groups.top.exists()


@pytest.mark.parametrize(
    ("per_core", "most", "cores", "expected"),
    [
        (1024, 262_144, 2, 2048),
        (100, 10_000, 2, 200),
        (100, 10_000, 128, 10_000),
        (1024, 262_144, 1, 1024),
    ],
)
def test_the_parent_weighs_one_nice_0_thread_per_core_within_the_controllers_range(
    per_core, most, cores, expected
) -> None:
    # GIVEN a weight per core, the controller's range and a core count WHEN weighed THEN capped
    assert cg.parent_weight(per_core, most, cores) == expected


def test_a_v2_cgroup_with_processes_moves_them_to_a_leaf_before_handing_controllers_down(
    tmp_path, monkeypatch
) -> None:
    # GIVEN a delegated cgroup v2 whose own cgroup holds processes: the kernel refuses (EBUSY) to
    # enable controllers below it until they are in a leaf
    root, proc, own = _v2_tree(tmp_path)
    leaf_procs = own / "fanfit-stack" / "cgroup.procs"
    enable = cg._enable

    def kernel_like(directory: Path, controllers: str = "+cpu +memory") -> None:
        if directory == own and not leaf_procs.exists():
            raise OSError(errno.EBUSY, "Device or resource busy")
        enable(directory, controllers)

    monkeypatch.setattr(cg, "_enable", kernel_like)
    # WHEN it probes
    found = cg.probe(root, proc)
    # THEN the processes moved to the leaf and the limits apply
    assert found.mode == "v2", found
    assert leaf_procs.read_text() == "4242"


@pytest.mark.parametrize(
    ("controllers", "why"),
    [("pids", "cpu and memory controller(s) are not delegated"),
     ("cpu pids", "memory controller(s) are not delegated")],
)  # fmt: skip
def test_a_cgroup_v2_not_delegated_runs_without_limits_and_says_why(
    tmp_path, controllers, why
) -> None:
    # GIVEN a cgroup v2 host whose cgroup of this process lacks the cpu or memory controller
    root, proc, _own = _v2_tree(tmp_path, controllers)
    # WHEN it probes THEN no limits apply, and the reason names v1's absence and v2's controllers
    found = cg.probe(root, proc)
    assert found.mode == "none" and not found.apply
    assert "no cgroup v1 'memory' controller mounted" in found.reason
    assert why in found.reason and "Delegate=yes" in found.reason
    assert found.summary().startswith("none: ")


def test_no_cgroup_file_system_and_the_switch_off_run_without_limits(tmp_path, monkeypatch) -> None:
    # GIVEN no cgroup file system at all
    proc = _write(tmp_path / "proc", "0::/\n")
    # WHEN it probes THEN none, naming both versions
    found = cg.probe(tmp_path / "empty", proc)
    assert found.mode == "none" and "no cgroup v2 mounted" in found.reason
    # GIVEN a v1 tree that would work, but FANFIT_LAMBDA_CGROUPS=0
    root, proc = _v1_tree(tmp_path)
    monkeypatch.setenv("FANFIT_LAMBDA_CGROUPS", "0")
    # THEN none, turned off
    assert cg.probe(root, proc).reason == "turned off (FANFIT_LAMBDA_CGROUPS=0)"


def test_without_limits_create_returns_none_and_the_finding_is_said_once(
    tmp_path, monkeypatch, caplog
) -> None:
    # GIVEN a host without usable cgroups, and a report file for `fanfit local status`
    proc = _write(tmp_path / "proc", "0::/\n")
    monkeypatch.setattr(cg, "CGROUP_ROOT", tmp_path / "empty")
    monkeypatch.setattr(cg, "PROC_CGROUP", proc)
    monkeypatch.setattr(cg, "probe", lambda: cg.Limits("none", "no cgroup v2 mounted"))
    report = tmp_path / "limits.json"
    monkeypatch.setenv(cg.REPORT_VARIABLE, str(report))
    # WHEN three environments start
    with caplog.at_level("INFO", logger=cg.LOG.name):
        results = [cg.create(f"env-{i}", 512) for i in range(3)]
    # THEN each runs unthrottled, the log says so once, and the report says why
    assert results == [None, None, None]
    said = [r for r in caplog.records if "without CPU/memory limits" in r.getMessage()]
    assert len(said) == 1
    document = json.loads(report.read_text())
    assert document["mode"] == "none" and document["apply"] is False
    assert document["summary"] == "none: no cgroup v2 mounted" and document["pid"] == os.getpid()


def test_local_status_shows_whether_limits_apply(tmp_path, monkeypatch, capsys) -> None:
    # GIVEN a recorded local stack (this process stands in for LocalStack; nothing listens on its
    # port) whose executor reported delegated cgroup v2 limits
    from fanfit.cli import main
    from fanfit.local import process

    home = tmp_path / "home"
    home.mkdir()
    info = {"pid": os.getpid(), "port": 9, "endpoint": "http://127.0.0.1:9", "region": "us-east-1",
            "state_dir": str(home), "log_file": str(home / "localstack.log"), "started_at": 0.0}  # fmt: skip
    (home / process.STATE_FILE).write_text(json.dumps(info))
    found = cg.Limits("v2", "cpu.max and memory.max per environment under /x/fanfit-lambda")
    cg.write_report(found, str(home / process.LIMITS_FILE))
    monkeypatch.setenv("FANFIT_HOME", str(home))
    # WHEN `fanfit local status` runs
    main(["local", "status"])
    out = capsys.readouterr().out.splitlines()
    # THEN it has a line on the limits and whether they apply
    assert "limits: applied (cgroup v2 (delegated): cpu.max and memory.max per environment " \
           "under /x/fanfit-lambda)" in out  # fmt: skip


def test_cgroups_left_by_ended_stacks_are_swept_and_busy_or_young_ones_kept(tmp_path) -> None:
    # GIVEN a v1 tree with four environments' cgroups under the parents: an old empty one, an old
    # v2-style one with its empty leaves, an old one still in use (a file stands for the kernel's
    # EBUSY: rmdir refuses it) and a young empty one
    root, proc = _v1_tree(tmp_path)
    found = cg.probe(root, proc)
    cpu = Path(found.cpu_parent)
    old, leaves, busy, young = (cpu / n for n in ("old", "leaves", "busy", "young"))
    for d in (old, leaves / "init", leaves / "run", young):
        d.mkdir(parents=True)
    _write(busy / "tasks", "4242\n")
    for d in (old, leaves, busy):
        os.utime(d, (1_000.0, 1_000.0))
    os.utime(young, (1_000.0 + cg.STALE_AFTER_S, 1_000.0 + cg.STALE_AFTER_S))
    # WHEN swept at a time when only the first three are older than STALE_AFTER_S
    removed = cg.sweep_stale(found, now=1_000.0 + cg.STALE_AFTER_S + 1)
    # THEN the old empty ones are gone, the busy and the young one kept
    assert removed == 2
    assert not old.exists() and not leaves.exists()
    assert busy.is_dir() and young.is_dir()
    # ... and without limits nothing is touched
    assert cg.sweep_stale(cg.Limits("none", "off"), now=1e12) == 0 and busy.is_dir()


def test_a_cgroup_another_stacks_sweep_removes_meanwhile_is_skipped(tmp_path, monkeypatch) -> None:
    # GIVEN two old environments' cgroups, and another stack starting beside this one whose sweep
    # removes the first right after this sweep looked at its age (both session stacks of make
    # test start together)
    root, proc = _v1_tree(tmp_path)
    found = cg.probe(root, proc)
    cpu = Path(found.cpu_parent)
    gone, kept = cpu / "gone", cpu / "kept"
    for d in (gone / "leaf", kept / "leaf"):
        d.mkdir(parents=True)
    for d in (gone, kept):
        os.utime(d, (1_000.0, 1_000.0))
    stat = Path.stat
    looks: list[Path] = []

    def stat_then_removed(self, *args, **kwargs):
        out = stat(self, *args, **kwargs)
        if self == gone:
            looks.append(self)
            if len(looks) == 2:  # the sweep's look at its age (the first: is it a directory)
                (gone / "leaf").rmdir()
                gone.rmdir()
        return out

    monkeypatch.setattr(Path, "stat", stat_then_removed)
    # WHEN this stack sweeps THEN it does not fail (LocalStack would not start): it removes the
    # other one and skips the one that vanished
    assert cg.sweep_stale(found, now=1_000.0 + cg.STALE_AFTER_S + 1) == 1
    assert not gone.exists() and not kept.exists()


@pytest.mark.parametrize(
    ("memory_mb", "host_cpus", "scale", "threads"),
    [(1769, 2, None, 1), (3538, 2, None, 2), (10240, 2, None, 2), (10240, 16, None, 6),
     (128, 2, None, 1), (1769, 2, "2", 2), (1769, 1, "4", 1)],
)  # fmt: skip
def test_a_functions_thread_pools_are_its_vcpus_at_most_the_hosts(
    monkeypatch, memory_mb, host_cpus, scale, threads
) -> None:
    # GIVEN a function's MemorySize, the host's cores and the local vCPU scale
    if scale is not None:
        monkeypatch.setenv(cg.SCALE_VARIABLE, scale)
    # WHEN its BLAS/OpenMP pools are sized THEN they get the vCPUs it buys (one per 1,769 MB,
    # rounded up, at least one), never more than the host has
    assert cg.pool_threads(memory_mb, host_cpus) == threads
