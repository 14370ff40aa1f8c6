"""Release: a job that failed hands its partition of the shared capacity back to the running jobs."""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import ReleaseEvent, ReleaseOutput, parse_event
from fanfit.jobs.sharing import release_job
from fanfit.storage import Partitions

logger = Logger()
tracer = Tracer()
metrics = Metrics()
# the partition table (and its history table) as every function reads them; this function exists
# only to release a partition, so a stack without the table is a misconfiguration
partitions = Partitions.from_env()
if partitions is None:
    raise KeyError("FANFIT_PARTITION_TABLE")
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
idempotency = IdempotencyConfig(event_key_jmespath=ReleaseEvent.IDEMPOTENCY_KEY)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(ReleaseEvent)
def lambda_handler(event: ReleaseEvent, context: LambdaContext) -> dict:
    entry = release_job(partitions, event.job_id)
    metrics.add_metric(
        name="PartitionsReleased", unit=MetricUnit.Count, value=int(entry is not None)
    )
    out = ReleaseOutput(
        job_id=event.job_id,
        released=entry is not None,
        version=None if entry is None else int(entry["version"]),
    )
    logger.info("partition released", extra=out.to_json_dict())
    return out.to_json_dict()
