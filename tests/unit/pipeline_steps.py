"""The estimate state machine's steps run in-process on moto: Prepare, Schedule, CrossFit per
shard, Prepare of the next stage, ..., Aggregate (test_quantile_stages.py, test_parts_job.py);
:func:`run_estimate` submits a job of one spec first (test_external_predictions.py,
test_store_models.py).

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


def run_estimate(
    columns: list[str], values: Any, spec: Any, folds: Any, job_id: str
) -> tuple[Any, list[Any], dict]:
    """Upload the data and folds to moto's S3 (inside ``moto_stack``), write job ``job_id`` of
    ``spec`` (2 concurrent shards of 4 units) and run it (:func:`run_steps`).

    Returns
    -------
    (store, what Prepare returned per stage, the job's result.json)
    """
    import boto3

    store = storage.JobStore("fanfit-unit", boto3.client("s3"))
    records = storage.JobRecords("fanfit-jobs", boto3.client("dynamodb"))
    throughput = storage.ThroughputRecords("fanfit-throughput", boto3.client("dynamodb"))
    job = {"kind": "estimate", "dml": spec.to_dict(),
           "data_key": store.put_data(list(columns), values),
           "folds_key": store.put_array(storage.input_folds_key(job_id), folds),
           "max_concurrency": 2, "units_per_shard": 4}  # fmt: skip
    store.put_json(storage.spec_key(job_id), job)
    planned = run_steps(store, records, throughput, job_id)
    return store, planned, store.get_json(storage.result_key(job_id))
