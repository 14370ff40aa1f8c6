"""The estimate state machine's steps run in-process on moto: Prepare, Schedule, CrossFit per
shard, Prepare of the next stage, ..., Aggregate (test_quantile_stages.py, test_parts_job.py).

Imported by name (``from pipeline_steps import run_steps``): pytest puts tests/unit on ``sys.path``.
"""

from __future__ import annotations

from typing import Any

from fanfit import storage


def run_steps(store: Any, records: Any, throughput: Any, job_id: str) -> list[Any]:
    """Run job ``job_id`` (its spec at :func:`fanfit.storage.spec_key`) as the state machine does,
    at most 50 waves a stage; returns what Prepare returned per stage."""
    from fanfit.jobs.estimate.aggregate import aggregate_job
    from fanfit.jobs.estimate.crossfit import crossfit_shard
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave

    stage, has_next, planned = 0, True, []
    while has_next:
        plan = prepare_stage(store, records, job_id, storage.spec_key(job_id), stage)
        planned.append(plan)
        for wave in range(50):
            out = schedule_wave(store, records, throughput, job_id, stage, wave, 1769)
            if not out.has_wave:
                break
            for shard in store.get_json(out.shards_key):
                crossfit_shard(store, job_id, plan.plan_key, stage, shard)
        stage, has_next = plan.next_stage, plan.has_next_stage
    aggregate_job(store, records, job_id, storage.plan_key(job_id))
    return planned
