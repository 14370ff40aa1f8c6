"""TrainReduce: merge a round's partials into the next model and decide whether another round runs
(BSP, K-Means; DS-Sync has no reduce)."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import TrainRoundEvent, parse_event
from fanfit.jobs.train.reduce import reduce_round
from fanfit.storage import JobRecords, JobStore

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
# The key and why: TrainRoundEvent.IDEMPOTENCY_KEY (fanfit.jobs.documents.events).
idempotency = IdempotencyConfig(event_key_jmespath=TrainRoundEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(TrainRoundEvent)
def lambda_handler(event: TrainRoundEvent, context: LambdaContext) -> dict:
    out = reduce_round(store, records, event.job_id, event.round)
    metrics.add_metric(name="TrainRoundsReduced", unit=MetricUnit.Count, value=1)
    logger.info("round reduced", extra=out)
    return out
