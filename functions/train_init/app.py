"""TrainInit: validate a train job, resolve each worker's function, write the plan and round-0 model."""

import json
import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import TrainInitEvent, parse_event
from fanfit.jobs.train.init import init_job
from fanfit.storage import JobRecords, JobStore, Partitions

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
partitions = Partitions.from_env()
# Memory size (MB) -> ARN of the TrainShard function with that memory; the first is the default.
worker_functions = {
    int(mb): arn for mb, arn in json.loads(os.environ["FANFIT_TRAIN_WORKER_FUNCTIONS"]).items()
}
# Memory (MB) of the GPU worker's Batch job definition; unset: the stack has no Batch path.
gpu_memory_mb = int(os.environ.get("FANFIT_GPU_WORKER_MEMORY_MB") or 0) or None
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
# The key and why: TrainInitEvent.IDEMPOTENCY_KEY (fanfit.jobs.documents.events).
idempotency = IdempotencyConfig(event_key_jmespath=TrainInitEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(TrainInitEvent)
def lambda_handler(event: TrainInitEvent, context: LambdaContext) -> dict:
    out = init_job(
        store,
        records,
        event.job_id,
        event.spec_key,
        worker_functions,
        event.execution_arn,
        gpu_memory_mb=gpu_memory_mb,
        partitions=partitions,
        memory_mb=int(context.memory_limit_in_mb),
    )
    metrics.add_metric(name="TrainJobsStarted", unit=MetricUnit.Count, value=1)
    logger.info("train job planned", extra=out)
    return out
