"""The local stack's interference control: one train worker's CPU share cut from a round on.

GIVEN :mod:`fanfit_localstack.faults` and :mod:`fanfit_localstack.cgroups` (loaded from their files:
LocalStack is not installed here), a throttle file named by ``FANFIT_LOCAL_THROTTLE_FILE`` and a fake
cgroup tree in ``tmp_path`` WHEN an invocation of the named worker from the named round on arrives
THEN its factor is the file's ``cpu_factor`` and the environment's CFS quota is cut by it (and
restored for any other invocation); a bad file is refused naming its key, and throttles nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(module: str):
    name = f"fanfit_localstack_{module}"
    if name not in sys.modules:
        path = ROOT / "localstack_plugins" / "fanfit_localstack" / f"{module}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        spec.loader.exec_module(loaded)
    return sys.modules[name]


faults = _load("faults")
cg = _load("cgroups")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv(faults.THROTTLE_VARIABLE, raising=False)
    monkeypatch.delenv(cg.SCALE_VARIABLE, raising=False)
    monkeypatch.setattr(faults, "_throttle", None)


def _invocation(worker: int, round_index: int, job_id: str = "job-1") -> dict[str, object]:
    event = {"job_id": job_id, "round": round_index, "worker": worker, "function_arn": "arn"}
    return {"invoke-id": "x", "payload": json.dumps(event)}


def test_the_named_worker_is_throttled_from_its_round_on(tmp_path, monkeypatch) -> None:
    # GIVEN a throttle file: worker 2 of job-1 keeps a quarter of its CPU from round 3 on
    path = tmp_path / "throttle.json"
    path.write_text(
        json.dumps({"worker": 2, "from_round": 3, "cpu_factor": 0.25, "job_id": "job-1"})
    )
    monkeypatch.setenv(faults.THROTTLE_VARIABLE, str(path))
    # THEN only that worker's invocations from round 3 on are cut
    assert faults.throttle_factor(_invocation(2, 3)) == 0.25
    assert faults.throttle_factor(_invocation(2, 7)) == 0.25
    assert faults.throttle_factor(_invocation(2, 2)) == 1.0
    assert faults.throttle_factor(_invocation(1, 5)) == 1.0
    assert faults.throttle_factor(_invocation(2, 5, job_id="job-2")) == 1.0
    # AND an invocation that is no train worker's step (another function's event) is not
    assert faults.throttle_factor({"payload": json.dumps({"job_id": "job-1"})}) == 1.0
    assert faults.throttle_factor({"payload": "not json"}) == 1.0
    # WHEN the file changes while the stack runs THEN the new spec applies
    path.write_text(json.dumps({"worker": 1, "from_round": 0, "cpu_factor": 0.5}))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert faults.throttle_factor(_invocation(1, 0, job_id="any")) == 0.5
    assert faults.throttle_factor(_invocation(2, 5)) == 1.0
    # AND once it is removed nothing is throttled
    path.unlink()
    assert faults.throttle() == ()
    assert faults.throttle_factor(_invocation(1, 0)) == 1.0


def test_without_the_variable_nothing_is_throttled(tmp_path) -> None:
    # GIVEN no FANFIT_LOCAL_THROTTLE_FILE THEN no spec and factor 1
    assert faults.throttle() == ()
    assert faults.throttle_factor(_invocation(0, 9)) == 1.0


def test_a_list_throttles_several_workers_and_matching_factors_multiply(tmp_path, monkeypatch):
    # GIVEN worker 3 at half its CPU in every job, and worker 0 of job-1 at a quarter from round 2
    path = tmp_path / "throttle.json"
    specs = [
        {"worker": 3, "from_round": 0, "cpu_factor": 0.5},
        {"worker": 0, "from_round": 2, "cpu_factor": 0.25, "job_id": "job-1"},
        {"worker": 3, "from_round": 5, "cpu_factor": 0.5, "job_id": "job-1"},
    ]
    path.write_text(json.dumps(specs))
    monkeypatch.setenv(faults.THROTTLE_VARIABLE, str(path))
    # THEN each matching spec applies, and two that match multiply
    assert len(faults.throttle()) == 3
    assert faults.throttle_factor(_invocation(3, 0, job_id="job-9")) == 0.5
    assert faults.throttle_factor(_invocation(0, 1)) == 1.0
    assert faults.throttle_factor(_invocation(0, 2)) == 0.25
    assert faults.throttle_factor(_invocation(3, 5)) == 0.25
    # AND one bad item refuses the whole list, naming the key
    with pytest.raises(ValueError, match="cpu_factor"):
        faults.parse_throttles([specs[0], {**specs[1], "cpu_factor": 2}])


@pytest.mark.parametrize(
    ("document", "match"),
    [
        ([1, 2], "JSON object"),
        ({"worker": 0, "from_round": 1, "cpu_factor": 0.5, "speed": 2}, "unknown key"),
        ({"from_round": 1, "cpu_factor": 0.5}, "worker"),
        ({"worker": -1, "from_round": 1, "cpu_factor": 0.5}, "worker"),
        ({"worker": True, "from_round": 1, "cpu_factor": 0.5}, "worker"),
        ({"worker": 0, "from_round": 1.5, "cpu_factor": 0.5}, "from_round"),
        ({"worker": 0, "from_round": 1, "cpu_factor": 0}, "cpu_factor"),
        ({"worker": 0, "from_round": 1, "cpu_factor": 1.5}, "cpu_factor"),
        ({"worker": 0, "from_round": 1, "cpu_factor": 0.5, "job_id": 3}, "job_id"),
    ],
)
def test_a_bad_throttle_file_is_refused_naming_the_key(tmp_path, monkeypatch, document, match):
    # GIVEN a document with a bad key THEN parsing names it
    with pytest.raises(ValueError, match=match):
        faults.ThrottleSpec.parse(document)
    # AND the stack, reading it from the file, logs it and throttles nothing
    path = tmp_path / "throttle.json"
    path.write_text(json.dumps(document))
    monkeypatch.setenv(faults.THROTTLE_VARIABLE, str(path))
    assert faults.throttle() == ()
    assert faults.throttle_factor(_invocation(0, 5)) == 1.0


def _groups(tmp_path: Path, v2: bool):
    top = tmp_path / "env-1" if v2 else None
    cpu = (top / "run") if top is not None else tmp_path / "cpu" / "env-1"
    cpu.mkdir(parents=True)
    return cg.EnvironmentCgroups(memory=tmp_path / "memory", cpu=cpu, top=top)


def test_scale_cpu_cuts_and_restores_the_cfs_quota_on_v1(tmp_path, monkeypatch) -> None:
    # GIVEN a 1,769 MB environment at 0.4 local cores per 1,769 MB (8 ms of each 20 ms)
    monkeypatch.setenv(cg.SCALE_VARIABLE, "0.4")
    groups = _groups(tmp_path, v2=False)
    # WHEN its CPU is cut to a quarter THEN the quota is a quarter, and its shares stay those of
    # the full quota (a hard limit, not a lower priority under contention)
    assert cg.scale_cpu(groups, 1769, 0.25) == 2000
    assert (groups.cpu / "cpu.cfs_quota_us").read_text() == "2000"
    assert (groups.cpu / "cpu.shares").read_text() == str(int(1024 * 8000 / cg.CFS_PERIOD_US))
    # WHEN restored THEN the quota is what its MemorySize buys
    assert cg.scale_cpu(groups, 1769, 1.0) == cg.cpu_quota_us(1769, cg.CFS_PERIOD_US, 0.4) == 8000
    assert (groups.cpu / "cpu.cfs_quota_us").read_text() == "8000"
    # AND never below the kernel's 1 ms minimum
    assert cg.scale_cpu(groups, 885, 0.01) == 1000


def test_scale_cpu_writes_cpu_max_on_v2_and_refuses_a_bad_factor(tmp_path) -> None:
    # GIVEN a v2 environment of 1,769 MB (one core at the default scale)
    groups = _groups(tmp_path, v2=True)
    # WHEN cut to half THEN cpu.max holds half the period and cpu.weight stays the full quota's
    cg.scale_cpu(groups, 1769, 0.5)
    assert (groups.cpu / "cpu.max").read_text() == f"{cg.CFS_PERIOD_US // 2} {cg.CFS_PERIOD_US}"
    assert (groups.cpu / "cpu.weight").read_text() == "100"
    # AND a factor outside (0, 1] is refused
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="cpu factor"):
            cg.scale_cpu(groups, 1769, bad)
