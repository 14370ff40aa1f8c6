"""ClientInputs: the execution waits for the client's inputs of a stage, or for its estimate.

Invoked with ``lambda:invoke.waitForTaskToken``: writes the request with the task token for the
client (:mod:`fanfit.jobs.estimate.client_inputs`) and returns; the client resumes the execution.
No idempotency record: a retried invocation carries a new token, which must replace the request's.
"""

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from fanfit.jobs.documents.events import ClientInputsEvent, parse_event
from fanfit.jobs.estimate.client_inputs import request_client_inputs
from fanfit.storage import JobStore, client_request_key

logger = Logger()
tracer = Tracer()
metrics = Metrics()
store = JobStore(os.environ["FANFIT_BUCKET"])


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
@parse_event(ClientInputsEvent)
def lambda_handler(event: ClientInputsEvent, context: LambdaContext) -> dict:
    request = request_client_inputs(store, event)
    metrics.add_metric(name="ClientRequests", unit=MetricUnit.Count, value=1)
    key = client_request_key(event.job_id, event.step)
    logger.info("client request written", extra={"job_id": event.job_id, "step": event.step,
                                                  "request_key": key})  # fmt: skip
    return {"job_id": request.job_id, "step": request.step, "request_key": key}
