"""Prepare: validate an estimate job and write the plan and the fit units of a stage."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import PrepareEvent, parse_event
from fanfit.jobs.estimate.prepare import prepare_stage
from fanfit.storage import JobRecords, JobStore, Partitions

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
partitions = Partitions.from_env()
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
idempotency = IdempotencyConfig(event_key_jmespath=PrepareEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(PrepareEvent)
def lambda_handler(event: PrepareEvent, context: LambdaContext) -> dict:
    out = prepare_stage(
        store,
        records,
        event.job_id,
        event.spec_key,
        event.stage,
        event.execution_arn,
        memory_mb=int(context.memory_limit_in_mb),
        partitions=partitions,
    )
    metrics.add_metric(name="UnitsPlanned", unit=MetricUnit.Count, value=out.n_units)
    logger.info("stage planned", extra=out.to_json_dict())
    return out.to_json_dict()
