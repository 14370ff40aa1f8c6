"""The client's side of a job whose model takes its stage inputs and its estimate from the client.

A model with ``ModelDef.client_inputs`` (RDFlex: ``rdrobust``, GPL-3.0 and too heavy for a layer,
runs on the client) runs as one execution that waits for the client (Step Functions' callback
pattern): before each stage's first wave, for the stage's inputs (:class:`~fanfit.jobs.documents.
estimate.StageInputs`: the kernel weights), and before Aggregate, for the estimate
(:class:`~fanfit.jobs.documents.estimate.ClientEstimate`). The state machine's ClientInputs step
writes a request with the task token (:class:`~fanfit.jobs.documents.estimate.ClientRequest` at
:func:`fanfit.storage.client_request_key`); :class:`ClientCallbacks` (a base of
:class:`fanfit.client.estimate.EstimateJob`) reads it, writes what the client computed and resumes
the execution with ``states:SendTaskSuccess``, or fails it with ``states:SendTaskFailure``. Those two
actions take no resource-level permission: the client's IAM must allow them on ``"*"``
(docs/deploy.md).

A resumed job (``fanfit resume``) whose stage inputs or estimate are already in S3 does not wait
for them (``PrepareOutput.client_inputs_ready``, ``client_estimate_ready``): no request is written
for that step, and :meth:`ClientCallbacks.client_request` would wait for it until its timeout;
check :func:`fanfit.storage.stage_inputs_key` first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fanfit import errors, storage
from fanfit.jobs.documents.estimate import ClientEstimate, ClientRequest, StageInputs

if TYPE_CHECKING:
    from fanfit.client.jobs import StackClient

__all__ = ["ClientCallbacks"]

#: Step Functions' limits on ``SendTaskFailure``: ``error`` up to 256 characters, ``cause`` up to 32,768.
_MAX_ERROR = 256
_MAX_CAUSE = 32_768
#: Error codes of ``SendTaskSuccess`` / ``SendTaskFailure`` for a token the execution no longer
#: waits on (a retried ClientInputs invocation wrote a new one, or the wait timed out).
_STALE_TOKEN = ("TaskTimedOut", "InvalidToken", "TaskDoesNotExist")


def _what(step: int | str) -> str:
    """``'the inputs of stage 1'`` or ``'the estimate'``."""
    return "the estimate" if step == storage.CLIENT_ESTIMATE_STEP else f"the inputs of stage {step}"


class ClientCallbacks:
    """What :class:`~fanfit.client.estimate.EstimateJob` offers a client-inputs job: read the
    execution's request, send the stage's inputs, the estimate, or the client's failure.

    Needs ``client`` (``store``, ``sfn``), ``job_id``, ``execution_arn`` and
    ``_describe_execution()`` of :class:`fanfit.client.jobs.JobHandle`.
    """

    client: StackClient
    job_id: str
    execution_arn: str
    #: The job's plan, data and folds, read by the first :meth:`stage_predictions`.
    _stage_data: tuple[Any, Any, Any] | None = None
    #: Longest pause between two polls for a request, seconds: a stage's end reaches the client
    #: within half a second; an hour of polling is 7,200 S3 GETs, under a cent.
    _REQUEST_MAX_POLL_S = 0.5

    if TYPE_CHECKING:

        def _describe_execution(self) -> dict[str, Any]: ...

    def client_request(
        self, step: int | str, timeout: float = 3600.0, poll: float = 0.25
    ) -> ClientRequest:
        """Wait (bounded polling of S3) for the execution's request of ``step`` and read it.

        Parameters
        ----------
        step : int or str
            A stage (its inputs), or ``'estimate'`` (:data:`fanfit.storage.CLIENT_ESTIMATE_STEP`).
        timeout : float
            Seconds to wait for the request.
        poll : float
            First pause between polls, seconds; it grows by half each time, to at most 0.5 s.

        Returns
        -------
        ClientRequest
            The request of this job's execution (a request an earlier execution of a resumed job
            left is not taken): ``task_token`` (up to 1,024 characters), ``requested_at``
            (seconds since the epoch).

        Raises
        ------
        fanfit.errors.JobFailedError
            The execution ended (its status, error and cause named) before it asked.
        fanfit.errors.WaitTimeoutError
            No request within ``timeout`` seconds (a JobFailedError; the job goes on waiting
            until the state machine's ClientTimeoutSeconds).
        fanfit.errors.InvalidJobError
            ``step`` is neither a stage nor ``'estimate'``.
        fanfit.errors.InvalidDocumentError
            The request does not fit :class:`~fanfit.jobs.documents.estimate.ClientRequest`.
        """
        key = storage.client_request_key(self.job_id, step)
        store = self.client.store
        deadline = time.monotonic() + timeout
        for attempt in range(int(max(timeout, 0.0) / max(poll, 1e-3)) + 1):
            if attempt and time.monotonic() >= deadline:  # look at least once
                break
            if store.exists(key):
                request = ClientRequest.parse(store.get_json(key), source=key)
                if request.execution_arn in ("", self.execution_arn):
                    return request
            desc = self._describe_execution()
            if desc["status"] != "RUNNING":
                detail = ": ".join(str(desc[k]) for k in ("error", "cause") if desc.get(k))
                raise errors.JobFailedError(
                    f"job {self.job_id} ended {desc['status']} before it asked for "
                    f"{_what(step)}" + (f" ({detail})" if detail else "")
                )
            time.sleep(poll)
            poll = min(poll * 1.5, self._REQUEST_MAX_POLL_S)
        raise errors.WaitTimeoutError(
            f"job {self.job_id} did not ask for {_what(step)} within {timeout:g} s ({key}); "
            "it is still running"
        )

    def send_stage_inputs(
        self, stage: int, inputs: Mapping[str, Any], timeout: float = 3600.0
    ) -> str:
        """Send the client's inputs of ``stage`` and resume the execution.

        Waits for the execution's request (:meth:`client_request`), writes ``inputs`` to
        :func:`fanfit.storage.stage_inputs_key` ``(job, stage)`` (a job of one part) and calls
        ``SendTaskSuccess`` with the request's token (output ``{}``). The object is written only
        once the execution waits for it: an object written earlier would let Prepare skip the wait
        (``client_inputs_ready``) while the client waits for a request that never comes.

        Parameters
        ----------
        stage : int
        inputs : mapping
            A :class:`~fanfit.jobs.documents.estimate.StageInputs`: e.g. ``sample_weights[i_treat]
            [i_rep]``, one float per row (RDFlex: the kernel weights, n_obs per repetition).
        timeout : float
            Seconds to wait for the request.

        Returns
        -------
        str
            The key written.

        Raises
        ------
        fanfit.errors.InvalidDocumentError
            ``inputs`` does not fit StageInputs (the message names the field); nothing is sent.
        fanfit.errors.JobFailedError
            As :meth:`client_request`; or the execution no longer waits on the token.
        botocore.exceptions.ClientError
            A call was refused (e.g. AccessDenied: the client's IAM lacks states:SendTaskSuccess).
        """
        doc = StageInputs.parse(dict(inputs), source=f"the client's inputs of stage {stage}")
        return self._deliver(stage, storage.stage_inputs_key(self.job_id, stage), doc, timeout)

    def send_estimate(self, estimate: Mapping[str, Any], timeout: float = 3600.0) -> str:
        """Send the client's estimate and resume the execution (Aggregate then writes it into
        ``result.json``).

        Waits for the execution's request of ``'estimate'``, writes ``estimate`` to
        :func:`fanfit.storage.client_estimate_key` and calls ``SendTaskSuccess``.

        Parameters
        ----------
        estimate : mapping
            A :class:`~fanfit.jobs.documents.estimate.ClientEstimate` (``d_cols``, ``coef``,
            ``se``, ``t_stat``, ``pval``, ``ci_95``, ``all_coef``, ``all_se``; ``rdd``).
        timeout : float
            Seconds to wait for the request.

        Returns
        -------
        str
            The key written.

        Raises
        ------
        fanfit.errors.InvalidDocumentError
            ``estimate`` does not fit ClientEstimate; nothing is sent.
        fanfit.errors.JobFailedError, botocore.exceptions.ClientError
            As :meth:`send_stage_inputs`.
        """
        doc = ClientEstimate.parse(dict(estimate), source="the client's estimate")
        key = storage.client_estimate_key(self.job_id)
        return self._deliver(storage.CLIENT_ESTIMATE_STEP, key, doc, timeout)

    def _deliver(self, step: int | str, key: str, doc: Any, timeout: float) -> str:
        """Wait for the request of ``step``, write ``doc`` (a checked document) to ``key`` and
        resume the execution; returns the key (:meth:`send_stage_inputs`, :meth:`send_estimate`)."""
        request = self.client_request(step, timeout)
        written = self.client.store.put_json(key, doc.to_json_dict())
        self._send_success(step, request)
        return written

    def stage_predictions(self, stage: int) -> dict[str, Any]:
        """The out-of-fold predictions of one stage, once it has ended (the execution's request
        of the next step is there: :meth:`client_request`): prediction key -> array of shape
        (n_obs, n_rep, n_treat), float64 (:func:`fanfit.jobs.estimate.data.gather_outputs` of
        the job's plan, data and folds, read from S3 with the client's credentials, once per
        handle).

        Raises
        ------
        fanfit.errors.InvalidJobError
            A unit's predictions of the stage are missing.
        """
        from fanfit import dml
        from fanfit.jobs.estimate.data import gather_outputs, read_plan

        store = self.client.store
        if self._stage_data is None:
            plan = read_plan(store, storage.plan_key(self.job_id))
            columns, values = store.get_data(plan.data_key)
            data = dml.validate_data(plan.dml, list(columns), values)
            self._stage_data = (plan, data, store.get_array(plan.folds_key))
        plan, data, folds = self._stage_data
        preds, _ = gather_outputs(store, self.job_id, plan.dml, data, folds,
                                  range(stage, stage + 1))  # fmt: skip
        return preds

    def send_client_failure(
        self, step: int | str, error: str, cause: str, timeout: float = 600.0
    ) -> None:
        """Fail the execution waiting for ``step`` because the client's own computation failed
        (``SendTaskFailure``): the job ends FAILED with ``error``, its cause naming the step.

        Parameters
        ----------
        step : int or str
            The stage, or ``'estimate'``.
        error : str
            An error name, e.g. the exception's class name (cut to 256 characters).
        cause : str
            What went wrong (cut to 32,768 characters with the step's name before it).
        timeout : float
            Seconds to wait for the request.

        Raises
        ------
        fanfit.errors.JobFailedError
            As :meth:`client_request` (also when the execution ended already).
        botocore.exceptions.ClientError
            A call was refused (e.g. AccessDenied: no states:SendTaskFailure).
        """
        request = self.client_request(step, timeout)
        message = f"the client failed to compute {_what(step)}: {cause}"
        self._send(
            step,
            request,
            lambda token: self.client.sfn.send_task_failure(
                taskToken=token,
                error=(error or "ClientFailedError")[:_MAX_ERROR],
                cause=message[:_MAX_CAUSE],
            ),
        )

    def _send_success(self, step: int | str, request: ClientRequest) -> None:
        self._send(
            step,
            request,
            lambda token: self.client.sfn.send_task_success(taskToken=token, output=json.dumps({})),
        )

    def _send(self, step: int | str, request: ClientRequest, call: Any) -> None:
        """``call(token)``; when the token is stale (a retried ClientInputs wrote a new request),
        once more with the new request's token.

        Raises
        ------
        fanfit.errors.JobFailedError
            The execution waits on no token of this step any more (the wait timed out, or the
            execution ended).
        """
        for attempt in range(2):
            try:
                call(request.task_token)
                return
            except Exception as exc:
                code = getattr(exc, "response", {}).get("Error", {}).get("Code")
                if code not in _STALE_TOKEN:
                    raise
                key = storage.client_request_key(self.job_id, step)
                newer = ClientRequest.parse(self.client.store.get_json(key), source=key)
                if attempt or newer.task_token == request.task_token:
                    raise errors.JobFailedError(
                        f"job {self.job_id} no longer waits for {_what(step)} ({code}): its wait "
                        f"timed out or its execution ended; status {self._status_or_unknown()}"
                    ) from exc
                request = newer

    def _status_or_unknown(self) -> str:
        try:
            return str(self._describe_execution()["status"])
        except Exception:  # the message is the point; the status is a detail
            return "unknown"
