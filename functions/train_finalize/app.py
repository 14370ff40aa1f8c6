"""TrainFinalize: write the trained model and the per-round records to result.json."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import TrainFinalizeEvent, parse_event
from fanfit.jobs.train.finalize import finalize_job
from fanfit.storage import JobRecords, JobStore, Partitions

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
partitions = Partitions.from_env()
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
# The key and why: TrainFinalizeEvent.IDEMPOTENCY_KEY (fanfit.jobs.documents.events).
idempotency = IdempotencyConfig(event_key_jmespath=TrainFinalizeEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(TrainFinalizeEvent)
def lambda_handler(event: TrainFinalizeEvent, context: LambdaContext) -> dict:
    out = finalize_job(
        store,
        records,
        event.job_id,
        event.round,
        event.execution_arn,
        memory_mb=int(context.memory_limit_in_mb),
        partitions=partitions,
    )
    metrics.add_metric(name="TrainJobsFinished", unit=MetricUnit.Count, value=1)
    logger.info("train job finished", extra=out)
    return out
