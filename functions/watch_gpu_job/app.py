"""WatchGpuJob: check a GPU worker's AWS Batch job once; fail it when it is stuck in RUNNABLE."""

import os

import boto3
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.errors import GpuJobStuckRunnableError
from fanfit.jobs.documents.events import WatchGpuJobEvent, parse_event
from fanfit.jobs.gpu_watch import check_gpu_job

logger = Logger()
tracer = Tracer()
metrics = Metrics()
batch = boto3.client("batch")
# GpuRunnableTimeoutSeconds (template.yaml; its default when unset)
runnable_timeout_s = float(os.environ.get("FANFIT_GPU_RUNNABLE_TIMEOUT_S", "900"))


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@parse_event(WatchGpuJobEvent)
def lambda_handler(event: WatchGpuJobEvent, context: LambdaContext) -> dict:
    # Only reads the job (and terminates a stuck one, idempotent on Batch): no idempotency record.
    try:
        out = check_gpu_job(batch, event.batch_job_id, runnable_timeout_s=runnable_timeout_s)
    except GpuJobStuckRunnableError:
        metrics.add_metric(name="GpuJobsStuckRunnable", unit=MetricUnit.Count, value=1)
        raise
    logger.info("GPU worker job checked", extra=out.to_json_dict())
    return out.to_json_dict()
