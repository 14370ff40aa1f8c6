"""The estimate state machine's steps run in-process on moto: Prepare, Schedule, CrossFit per
shard, Prepare of the next stage, ..., Aggregate (test_quantile_stages.py, test_parts_job.py), with
a stand-in for the client where a client-inputs model's execution waits (test_client_inputs.py);
:func:`run_estimate` submits a job of one spec first (test_external_predictions.py,
test_store_models.py).

Imported by name (``from pipeline_steps import run_steps``): pytest puts tests/unit on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fanfit import storage

#: ``client(step, plan)``: what stands in for the client of a client-inputs model (see
#: :func:`run_steps`).
ClientStep = Callable[[Any, Any], None]

#: The execution ARN of the steps run in-process (the ClientRequest's ``execution_arn``).
EXECUTION_ARN = "arn:aws:states:us-east-1:123456789012:execution:fanfit-estimate:in-process"


def run_steps(
    store: Any, records: Any, throughput: Any, job_id: str, client: ClientStep | None = None
) -> list[Any]:
    """Run job ``job_id`` (its spec at :func:`fanfit.storage.spec_key`) as the state machine does,
    at most 50 waves a stage; returns what Prepare returned per stage.

    A job whose model takes its stage inputs and its estimate from the client
    (``ModelDef.client_inputs``; Prepare's ``PrepareOutput.client_inputs``) waits where the state
    machine waits, and ``client`` stands in for the client there:

    - after Prepare of each stage, before its first wave (unless ``plan.client_inputs_ready``):
      ClientInputs' request is written (:class:`~fanfit.jobs.documents.events.ClientRequest` at
      ``client_request_key(job_id, stage)``, token ``"token-<stage>"``, execution
      :data:`EXECUTION_ARN`), then ``client(stage, plan)`` is called; it must write the stage's
      inputs to ``stage_inputs_key(job_id, stage)`` (what ``EstimateJob.send_stage_inputs`` writes);
    - after the last stage, before Aggregate (unless ``plan.client_estimate_ready``): the request
      of ``"estimate"`` (token ``"token-estimate"``), then ``client("estimate", plan)``; it must
      write the estimate to ``client_estimate_key(job_id)`` (what ``send_estimate`` writes).

    ``plan`` is that stage's :class:`~fanfit.jobs.documents.estimate.PrepareOutput` (the last
    stage's for the estimate). What ``client`` raises propagates (as ``send_client_failure``
    fails the job).

    Raises
    ------
    AssertionError
        The job's model takes client inputs and no ``client`` was given.
    """
    from fanfit.jobs.documents.events import ClientInputsEvent
    from fanfit.jobs.estimate.aggregate import aggregate_job
    from fanfit.jobs.estimate.client_inputs import request_client_inputs
    from fanfit.jobs.estimate.crossfit import crossfit_shard
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave

    def wait_for_client(step: Any, plan: Any) -> None:
        assert client is not None, f"job {job_id} takes client inputs: pass run_steps(client=...)"
        event = ClientInputsEvent(job_id=job_id, step=step, task_token=f"token-{step}",
                                  execution_arn=EXECUTION_ARN)  # fmt: skip
        request_client_inputs(store, event)
        client(step, plan)

    stage, has_next, planned = 0, True, []
    while has_next:
        plan = prepare_stage(store, records, job_id, storage.spec_key(job_id), stage)
        planned.append(plan)
        if plan.client_inputs and not plan.client_inputs_ready:
            wait_for_client(stage, plan)
        for wave in range(50):
            out = schedule_wave(store, records, throughput, job_id, stage, wave, 1769)
            if not out.has_wave:
                break
            for shard in store.get_json(out.shards_key):
                crossfit_shard(store, job_id, plan.plan_key, stage, shard)
        stage, has_next = plan.next_stage, plan.has_next_stage
    if plan.client_inputs and not plan.client_estimate_ready:
        wait_for_client(storage.CLIENT_ESTIMATE_STEP, plan)
    aggregate_job(store, records, job_id, storage.plan_key(job_id))
    return planned


def run_estimate(
    columns: list[str],
    values: Any,
    spec: Any,
    folds: Any,
    job_id: str,
    client: ClientStep | None = None,
) -> tuple[Any, list[Any], dict]:
    """Upload the data and folds to moto's S3 (inside ``moto_stack``), write job ``job_id`` of
    ``spec`` (2 concurrent shards of 4 units) and run it (:func:`run_steps`, with ``client`` for a
    client-inputs model).

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
    planned = run_steps(store, records, throughput, job_id, client)
    return store, planned, store.get_json(storage.result_key(job_id))
