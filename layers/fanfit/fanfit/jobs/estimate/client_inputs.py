"""ClientInputs: the execution asks the client for a stage's inputs or for its estimate.

A model with ``ModelDef.client_inputs`` (RDFlex: each iteration's kernel weights and the final
estimate come from ``rdrobust``, which runs on the client) keeps its job in one execution:
``orchestrator/estimate.asl.json`` invokes ClientInputs with ``lambda:invoke.waitForTaskToken``
before a stage's first wave and before Aggregate, and the execution waits there. ClientInputs
writes the request, with the task token, to :func:`fanfit.storage.client_request_key` and returns;
the client (:class:`fanfit.client.estimate.EstimateJob`'s ``client_request``, ``send_stage_inputs``,
``send_estimate``, ``send_client_failure``) reads it, writes what it computed and resumes the
execution with ``SendTaskSuccess`` (or fails it with ``SendTaskFailure``). ClientInputs never calls
``SendTaskSuccess`` itself (that action takes no resource-level permission): a resumed job whose
inputs already exist skips the wait in the state machine (``PrepareOutput.client_inputs_ready``,
``client_estimate_ready``).

Imports no :mod:`fanfit.dml`: the function needs only the fanfit layer's light modules.
"""

from __future__ import annotations

import time

from fanfit import storage
from fanfit.jobs.documents.events import ClientInputsEvent, ClientRequest


def request_client_inputs(store: storage.JobStore, event: ClientInputsEvent) -> ClientRequest:
    """Write the execution's request to the client, with its task token.

    A retried invocation (a new token for the same step) overwrites the request, so the client
    always reads the token the execution now waits on.

    Parameters
    ----------
    store : JobStore
    event : ClientInputsEvent
        The job, the step (a stage, or ``"estimate"``), the task token and the execution.

    Returns
    -------
    ClientRequest
        What was written to :func:`fanfit.storage.client_request_key` ``(job_id, step)``.
    """
    request = ClientRequest(
        job_id=event.job_id,
        step=event.step,
        task_token=event.task_token,
        execution_arn=event.execution_arn,
        requested_at=time.time(),
    )
    store.put_json(storage.client_request_key(event.job_id, event.step), request.to_json_dict())
    return request
