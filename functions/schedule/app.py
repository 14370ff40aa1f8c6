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

from fanfit.jobs.documents.events import ScheduleEvent, parse_event
from fanfit.jobs.estimate.failure import describe_failure
from fanfit.jobs.estimate.schedule import schedule_wave
from fanfit.jobs.sharing import capacity_from_env
from fanfit.sched.resources import crossfit_memory_sizes
from fanfit.storage import JobRecords, JobStore, Partitions, ThroughputRecords

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
throughput = ThroughputRecords(os.environ["FANFIT_THROUGHPUT_TABLE"])
partitions = Partitions.from_env()
crossfit_memory_mb = int(os.environ["FANFIT_CROSSFIT_MEMORY_MB"])
# The sizes the CrossFit functions offer (the first the default) and whether the GPU worker is on.
memory_sizes = crossfit_memory_sizes(default_mb=crossfit_memory_mb)
gpu_enabled = capacity_from_env()[1] > 0
account_concurrency = int(os.environ.get("FANFIT_ACCOUNT_CONCURRENCY", "1000"))
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
idempotency = IdempotencyConfig(event_key_jmespath=ScheduleEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(ScheduleEvent)
def lambda_handler(event: ScheduleEvent, context: LambdaContext) -> dict:
    if event.failure is not None:
        failed = describe_failure(
            store,
            records,
            event.job_id,
            event.stage,
            event.wave,
            error=event.failure.Error,
            cause=event.failure.Cause,
        )
        logger.warning("wave failed", extra=failed.to_json_dict())
        return failed.to_json_dict()
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
        partitions=partitions,
        memory_sizes=memory_sizes,
        gpu_enabled=gpu_enabled,
    )
    metrics.add_metric(name="ShardsScheduled", unit=MetricUnit.Count, value=out.n_shards or 0)
    logger.info("wave scheduled", extra=out.to_json_dict())
    return out.to_json_dict()
