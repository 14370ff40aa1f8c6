"""CrossFit: fit the units of one shard and write their out-of-fold predictions to S3."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import CrossFitEvent, parse_event
from fanfit.jobs.estimate.crossfit import crossfit_shard
from fanfit.storage import JobStore

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
idempotency = IdempotencyConfig(event_key_jmespath=CrossFitEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(CrossFitEvent)
def lambda_handler(event: CrossFitEvent, context: LambdaContext) -> dict:
    out = crossfit_shard(
        store,
        event.job_id,
        event.plan_key,
        event.stage,
        event.shard,
        memory_mb=int(context.memory_limit_in_mb),
        execution_arn=event.execution_arn,
    )
    metrics.add_metric(name="UnitsFitted", unit=MetricUnit.Count, value=out["n_units"])
    metrics.add_metric(name="FitSeconds", unit=MetricUnit.Seconds, value=out["fit_s"])
    logger.info("shard fitted", extra={k: out[k] for k in ("preds_key", "n_units", "fit_s")})
    return out
