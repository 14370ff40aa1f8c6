"""The ASL state names of fanfit's state machines, one constant each.

``orchestrator/estimate.asl.json`` and ``orchestrator/train.asl.json`` name their states as sentences
(DESIGN.md, Conventions). Code that reads an execution's history (the client's phase timings,
:mod:`fanfit.progress`, :mod:`fanfit.cost`) refers to them through these enums, never by typing the
sentence again; ``tests/unit/test_states.py`` checks that each enum holds exactly the states of its
ASL file, nested Map states included. A :class:`~enum.StrEnum` member equals its string, so it can be
looked up in a history event's ``name`` directly.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["THROTTLE_RETRY", "EstimateState", "TrainState", "throttle_wait_bound_s"]


class EstimateState(StrEnum):
    """States of ``orchestrator/estimate.asl.json`` (the estimate job)."""

    PREPARE = "Validate the job and write its plan"
    #: A model with ``ModelDef.client_inputs`` (RDFlex): after each Prepare, the Choice whether
    #: the stage waits for the client's inputs (``$.plan.client_inputs`` and not
    #: ``client_inputs_ready``), the callback Task that waits (ClientInputs writes the request
    #: with the task token; the client resumes the execution with SendTaskSuccess), and the Pass
    #: that names a wait that timed out (``ClientTimeoutError``) for the failure path.
    IS_CLIENT_INPUTS_WAIT = "Does the stage wait for the client's inputs?"
    WAIT_CLIENT_INPUTS = "Wait for the client's inputs of the stage"
    NAME_CLIENT_INPUTS_TIMEOUT = "Name the client's inputs that did not come in time"
    SCHEDULE_FIRST_WAVE = "Size the first wave of shards from measured throughput"
    IS_WAVE_LEFT = "Is a wave of shards left to run?"
    CROSSFIT_WAVE = "Cross-fit every shard of the wave"
    #: Inside the Map: the Choice on the shard's placement and resource, its branches (the GPU
    #: worker's: submit the Batch job, then check it every ``poll_seconds`` until it ends; one
    #: CrossFit function per offered memory size) and the GPU result.
    WHERE_SHARD_RUNS = "Where does the shard run: the GPU worker, or which CrossFit memory size?"
    CROSSFIT_ON_GPU = "Fit the shard's learners on the GPU worker (AWS Batch)"
    CHECK_GPU_SHARD = "Check the GPU worker's job of the shard"
    IS_GPU_SHARD_ENDED = "Has the GPU worker's job of the shard ended?"
    WAIT_GPU_SHARD = "Wait for the GPU worker's job of the shard"
    REPORT_GPU_SHARD = "Report the GPU worker's shard"
    #: The CrossFit function of the first (default) memory size of ``CrossFitMemorySizes``.
    CROSSFIT = "Fit the shard's learners and predict the held-out folds"
    CROSSFIT_SIZE_2 = "Fit the shard's learners at the second CrossFit memory size"
    CROSSFIT_SIZE_3 = "Fit the shard's learners at the third CrossFit memory size"
    SCHEDULE_NEXT_WAVE = "Record the wave's throughput and size the next wave"
    IS_STAGE_LEFT = "Is there another stage?"
    PREPARE_NEXT_STAGE = "Plan the next stage from the predictions so far"
    #: A client-inputs model after its last stage: the wait for the client's estimate before
    #: Aggregate (unless ``$.plan.client_estimate_ready``), and the Pass naming its timeout.
    WAIT_CLIENT_ESTIMATE = "Wait for the client's estimate"
    NAME_CLIENT_ESTIMATE_TIMEOUT = "Name the client's estimate that did not come in time"
    AGGREGATE = "Aggregate the predictions into the estimate"
    NAME_FAILED_SHARD = "Name the shard that failed and its last error"
    RECORD_FAILURE = "Record that the job failed"
    #: The failure branch's stop marker (:func:`fanfit.storage.estimate_stop_key`): the wave's
    #: running CrossFit shards stop on it between two units (:mod:`fanfit.jobs.stop`).
    WRITE_STOP = "Tell the job's running shards that it failed"
    RELEASE = "Hand the job's partition back to the running jobs"
    FAILED = "The job failed"


class TrainState(StrEnum):
    """States of ``orchestrator/train.asl.json`` (the train job)."""

    INIT = "Validate the job and write its plan and first model"
    SCHEDULE_ROUND = "Size each worker's batch from its measured throughput"
    RUN_ROUND = "Run every worker's step of the round"
    #: Inside the Map: the Choice on the worker's placement, its two branches (the GPU worker's:
    #: submit the Batch job, then check it every ``poll_seconds`` until it ends) and the GPU result.
    IS_WORKER_ON_GPU = "Does the worker run on the GPU worker?"
    #: The GPU worker's task: the Map item and the execution (``$$.Execution.Id``), as the Lambda
    #: branch's payload, so a stop marker the GPU worker writes names its execution.
    GPU_TASK = "Name the execution in the GPU worker's task"
    WORKER_STEP_ON_GPU = "Compute the worker's partial on the GPU worker (AWS Batch)"
    CHECK_GPU_PARTIAL = "Check the GPU worker's job of the partial"
    IS_GPU_PARTIAL_ENDED = "Has the GPU worker's job of the partial ended?"
    WAIT_GPU_PARTIAL = "Wait for the GPU worker's job of the partial"
    REPORT_GPU_PARTIAL = "Report the GPU worker's partial"
    WORKER_STEP = "Compute the worker's partial on its batch"
    #: The Choice after the workers' Map: BSP's one reduce, or DS-Sync's Pass to the next round
    #: (no reducer: each worker averages its group's partials at the start of the next round).
    IS_REDUCE_NEEDED = "Does a reduce follow the workers' steps (BSP)?"
    REDUCE = "Merge the workers' partials into the next model"
    ADVANCE_ROUND = "Go on to the next round (DS-Sync: the workers average within their groups)"
    IS_ROUND_LEFT = "Is another round to run?"
    FINALIZE = "Write the trained model and the round records"
    RECORD_FAILURE = "Record that the job failed"
    #: The failure branch's stop marker (:class:`fanfit.jobs.documents.train.TrainStop`, written
    #: to :func:`fanfit.storage.train_stop_key`): a DS-Sync segment's running workers stop on it.
    WRITE_STOP = "Tell the job's running workers that it failed"
    RELEASE = "Hand the job's partition back to the running jobs"
    FAILED = "The job failed"


#: The Retry policy every Lambda Task of both state machines has for a throttled invocation
#: (``Lambda.TooManyRequestsException``, its first retrier), outside the failure path: waits of
#: ``interval_s * backoff_rate**k`` seconds capped at ``max_delay_s`` (each drawn uniformly below
#: that: ``JitterStrategy`` FULL), ``max_attempts`` retries. A wave that meets an account whose
#: concurrency is exhausted so waits for a free slot instead of failing; an account that stays
#: exhausted fails the step after at most :func:`throttle_wait_bound_s` seconds of waiting, with
#: the error the client raises as :class:`fanfit.errors.LambdaThrottledError`.
#: ``tests/unit/test_template.py`` checks the ASL files against it. Source: AWS Step Functions
#: developer guide, "Handling errors in Step Functions workflows" (Retry fields, MaxDelaySeconds,
#: JitterStrategy).
THROTTLE_RETRY: dict[str, float] = {
    "interval_s": 1.0,
    "max_attempts": 20,
    "backoff_rate": 2.0,
    "max_delay_s": 20.0,
}


def throttle_wait_bound_s(policy: dict[str, float] | None = None) -> float:
    """The longest a throttled step waits in total before it fails, seconds.

    Parameters
    ----------
    policy : dict, optional
        ``interval_s``, ``max_attempts``, ``backoff_rate``, ``max_delay_s`` (default
        :data:`THROTTLE_RETRY`).

    Returns
    -------
    float
        :math:`\\sum_{k=0}^{n-1} \\min(i b^k, m)` for interval :math:`i`, backoff rate :math:`b`,
        cap :math:`m` and :math:`n` attempts (FULL jitter only shortens each wait): 331 s for
        the default policy.
    """
    p = THROTTLE_RETRY if policy is None else policy
    return float(
        sum(
            min(p["interval_s"] * p["backoff_rate"] ** k, p["max_delay_s"])
            for k in range(int(p["max_attempts"]))
        )
    )
