"""Schedule: record what the last wave of shards measured and cut the next wave of a stage."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.estimate import schedule_wave
from fanfit.jobs.events import ScheduleEvent, parse_event
from fanfit.storage import JobRecords, JobStore, ThroughputRecords

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
throughput = ThroughputRecords(os.environ["FANFIT_THROUGHPUT_TABLE"])
crossfit_memory_mb = int(os.environ["FANFIT_CROSSFIT_MEMORY_MB"])
account_concurrency = int(os.environ.get("FANFIT_ACCOUNT_CONCURRENCY", "1000"))
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
idempotency = IdempotencyConfig(event_key_jmespath="[job_id, stage, wave]")


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(ScheduleEvent)
def lambda_handler(event: ScheduleEvent, context: LambdaContext) -> dict:
    out = schedule_wave(
        store,
        records,
        throughput,
        event.job_id,
        event.stage,
        event.wave,
        crossfit_memory_mb=crossfit_memory_mb,
        account_concurrency=account_concurrency,
        memory_mb=int(context.memory_limit_in_mb),
    )
    metrics.add_metric(name="ShardsScheduled", unit=MetricUnit.Count, value=out.get("n_shards", 0))
    logger.info("wave scheduled", extra=out)
    return out
