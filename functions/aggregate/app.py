"""Aggregate: turn the out-of-fold predictions into the DML estimate and write result.json."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import AggregateEvent, parse_event
from fanfit.jobs.estimate.aggregate import aggregate_job
from fanfit.storage import JobRecords, JobStore, Partitions

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
partitions = Partitions.from_env()
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
idempotency = IdempotencyConfig(event_key_jmespath=AggregateEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(AggregateEvent)
def lambda_handler(event: AggregateEvent, context: LambdaContext) -> dict:
    out = aggregate_job(
        store,
        records,
        event.job_id,
        event.plan_key,
        event.execution_arn,
        memory_mb=int(context.memory_limit_in_mb),
        partitions=partitions,
    )
    metrics.add_metric(name="JobsAggregated", unit=MetricUnit.Count, value=1)
    logger.info("job aggregated", extra=out.to_json_dict())
    return out.to_json_dict()
