"""TrainShard: one worker's step of a training round; deployed once per worker memory size."""

import os
import time

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import TrainShardEvent, parse_event
from fanfit.jobs.train.shard import stop_on_unfinished_attempt, train_shard
from fanfit.storage import JobStore

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])
persistence = DynamoDBPersistenceLayer(table_name=os.environ["FANFIT_IDEMPOTENCY_TABLE"])
# The key and why: TrainShardEvent.IDEMPOTENCY_KEY (fanfit.jobs.documents.events).
idempotency = IdempotencyConfig(event_key_jmespath=TrainShardEvent.IDEMPOTENCY_KEY)
#: Seconds before the invocation's timeout at which a DS-Sync segment stops waiting for its group.
DEADLINE_MARGIN_S = 10.0


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
# a retry finding its earlier attempt INPROGRESS (that process died) stops the job's segment
@stop_on_unfinished_attempt(store)
@idempotent(persistence_store=persistence, config=idempotency)
@parse_event(TrainShardEvent)
def lambda_handler(event: TrainShardEvent, context: LambdaContext) -> dict:
    # a DS-Sync segment's waits for the group end before the invocation's own timeout, so the
    # worker fails with GroupPartialTimeoutError (naming the missing members), not Sandbox.Timedout
    deadline = time.time() + context.get_remaining_time_in_millis() / 1000.0 - DEADLINE_MARGIN_S
    out = train_shard(
        store,
        event.job_id,
        event.round,
        event.worker,
        memory_mb=int(context.memory_limit_in_mb),
        rounds=event.rounds,
        deadline=deadline,
        # a step that raises writes the job's stop marker, then re-raises its error unchanged;
        # a segment stops early on its execution's marker (a member failed, the job cancelled)
        execution_arn=event.execution_arn,
    )
    metrics.add_metric(name="TrainSamples", unit=MetricUnit.Count, value=out["batch"])
    metrics.add_metric(name="TrainComputeSeconds", unit=MetricUnit.Seconds, value=out["compute_s"])
    logger.info(
        "worker step done", extra={k: out[k] for k in ("partial_key", "batch", "compute_s")}
    )
    return out
