"""TrainSchedule: fold the last round's throughput in and set each worker's batch for the next
(under DS-Sync first record the round before from its workers' records)."""

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
from fanfit.jobs.train.schedule import schedule_round
from fanfit.storage import JobRecords, JobStore, Partitions, ThroughputRecords

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
throughput = ThroughputRecords(os.environ["FANFIT_THROUGHPUT_TABLE"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
partitions = Partitions.from_env()
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
# The key and why: TrainRoundEvent.IDEMPOTENCY_KEY (fanfit.jobs.documents.events).
idempotency = IdempotencyConfig(event_key_jmespath=TrainRoundEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(TrainRoundEvent)
def lambda_handler(event: TrainRoundEvent, context: LambdaContext) -> dict:
    out = schedule_round(
        store, throughput, event.job_id, event.round, partitions=partitions, records=records
    )
    metrics.add_metric(name="TrainRoundsScheduled", unit=MetricUnit.Count, value=1)
    logger.info("round scheduled", extra={"job_id": event.job_id, "round": event.round})
    return out
