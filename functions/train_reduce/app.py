"""TrainReduce: merge a round's partials into the next model and decide whether another round runs;
under DS-Sync, given a ``group``, merge only that group's partials into the group's model."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import TrainGroupEvent, TrainRoundEvent, parse_event
from fanfit.jobs.train.reduce import reduce_group, reduce_round
from fanfit.storage import JobRecords, JobStore

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
records = JobRecords(os.environ["FANFIT_JOB_TABLE"])
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
# The keys and why: TrainRoundEvent.IDEMPOTENCY_KEY and TrainGroupEvent.IDEMPOTENCY_KEY
# (fanfit.jobs.documents.events); a group's reduce and its round's reduce have different keys.
round_idempotency = IdempotencyConfig(event_key_jmespath=TrainRoundEvent.IDEMPOTENCY_KEY)
group_idempotency = IdempotencyConfig(event_key_jmespath=TrainGroupEvent.IDEMPOTENCY_KEY)


@idempotent(persistence_store=persistence, config=round_idempotency)
@parse_event(TrainRoundEvent)
def _reduce_round(event: TrainRoundEvent, context: LambdaContext) -> dict:
    out = reduce_round(store, records, event.job_id, event.round)
    metrics.add_metric(name="TrainRoundsReduced", unit=MetricUnit.Count, value=1)
    logger.info("round reduced", extra=out)
    return out


@idempotent(persistence_store=persistence, config=group_idempotency)
@parse_event(TrainGroupEvent)
def _reduce_group(event: TrainGroupEvent, context: LambdaContext) -> dict:
    out = reduce_group(store, event.job_id, event.round, event.group)
    metrics.add_metric(name="TrainGroupsReduced", unit=MetricUnit.Count, value=1)
    logger.info("group reduced", extra=out)
    return out


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    if isinstance(event, dict) and "group" in event:
        return _reduce_group(event, context)
    return _reduce_round(event, context)
