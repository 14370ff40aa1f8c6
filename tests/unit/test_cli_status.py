"""``fanfit status JOB``: the job record read through :class:`fanfit.jobs.documents.record.JobRecord`.

GIVEN a fake client whose job record holds a schedule of a sized wave and of a wave placed only on
the GPU worker (its decision has no ``units_per_shard`` nor ``n_units``), WHEN ``fanfit status``
prints it, THEN every wave has its line and nothing raises.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from fanfit import cli
from fanfit.cli import main
from fanfit.jobs.documents.estimate import ScheduleSummary
from fanfit.jobs.documents.record import JobRecord


def _wave(wave: int, decision: dict[str, Any], resource: str, **extra: Any) -> dict[str, Any]:
    return {"stage": 0, "wave": wave, "decision": decision, "resource": resource,
            "predicted_samples_per_s": {"plr-lasso": 12000.0}, "startup_s": 0.5,
            "started_at": 1.0, "ended_at": 1.5, "memory_mb": 512, "peak_rss_mb": 90.0,
            **extra}  # fmt: skip


SIZED = {"policy": "auto", "units_per_shard": 3, "n_shards": 4, "max_concurrency": 8,
         "n_units": 12, "seconds_per_unit": 0.25, "predicted_makespan_s": 2.0, "probe": False}  # fmt: skip
GPU_ONLY = {"policy": "gpu", "n_shards": 2, "max_concurrency": 2}

RECORD = {
    "job_id": "est-1", "kind": "estimate", "status": "RUNNING", "execution_arn": "arn:x",
    "model": "plr", "score": "partialling out", "updated_at": 1.0,
    "schedule": {"stage": 0, "waves": [
        _wave(0, SIZED, "lambda-1769", n_gpu_shards=0,
              partition={"lambda_concurrency": 8, "gpus": 0, "demand": 8, "version": 3,
                         "gpu_demand": 0, "concurrency": 8}),
        _wave(1, GPU_ONLY, "gpu:g4dn.xlarge", n_gpu_shards=2),
    ]},
}  # fmt: skip


class _Job:
    def record(self) -> dict[str, Any]:
        return json.loads(json.dumps(RECORD))

    def cost(self) -> Any:
        raise RuntimeError("no history here")


class _Client:
    def job(self, job_id: str) -> _Job:
        return _Job()


def test_the_record_parses_into_its_model_with_the_steps_extra_fields() -> None:
    record = JobRecord.parse(RECORD)
    assert record.schedule == ScheduleSummary.parse(RECORD["schedule"])
    assert record.schedule.waves[1].decision.units_per_shard is None
    assert record.model_extra == {"updated_at": 1.0}


def test_status_prints_a_wave_placed_only_on_the_gpu_worker(monkeypatch, capsys) -> None:
    # GIVEN a record whose second wave ran on the GPU worker only
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(_Client()))
    # WHEN fanfit status prints it
    assert main(["status", "est-1"]) == 0
    out = capsys.readouterr().out.splitlines()
    # THEN the sized wave names its shard size and fits left, the GPU wave what it has
    waves = [line for line in out if line.startswith("stage 0 wave")]
    assert waves[0].startswith(
        "stage 0 wave 0: policy auto, 4 shard(s) of <= 3 fit(s), max concurrency 8, 12 fit(s) "
        "left; seconds per fit 0.25"
    )
    assert waves[1] == (
        "stage 0 wave 1: policy gpu, 2 shard(s), max concurrency 2, seconds per fit n/a, "
        "start-up 0.5 s, predicted makespan n/a s on gpu:g4dn.xlarge"
    )
    assert "    partition 8 of demand 8 (gpus 0, version 3)" in out
    assert "status: RUNNING" in out and "cost: n/a (RuntimeError: no history here)" in out
