"""Named errors of fanfit.

Every error a user can trigger derives from :class:`FanfitError`. A message says which column, option
or file is wrong and what would be right. Handlers raise these too; Step Functions sees the class name
as the error name (``States.TaskFailed`` carries it in ``errorType``).
"""

from __future__ import annotations


class FanfitError(Exception):
    """Base class of every fanfit error."""


class InvalidJobError(FanfitError, ValueError):
    """The job spec is wrong: an option is missing, out of range or inconsistent with the model."""


class InvalidDataError(InvalidJobError):
    """The data is wrong: a missing or non-numeric column, NaN or inf, a non-binary treatment, ..."""


class OneSidedNoncomplianceError(InvalidDataError):
    """IIVM data without always takers (nobody with ``z == 0`` is treated) or without never takers
    (everybody with ``z == 1`` is treated) while ``subgroups`` says they exist: ``ml_r0`` (or
    ``ml_r1``) would be fitted on one class only. Set ``subgroups={'always_takers': False}`` (or
    ``{'never_takers': False}``), as DoubleML's documentation does for one-sided noncompliance."""


class InvalidLearnerError(InvalidJobError):
    """A learner spec names an estimator outside the allow-list, a parameter it does not take, or the
    wrong kind of estimator (a classifier where a regressor is needed, or the reverse)."""


class InvalidFoldsError(InvalidJobError):
    """A folds file (one column per repetition, one row per observation, 0-based test-fold index) does
    not fit the data or the options."""


class JobFailedError(FanfitError):
    """A job's execution ended without a result (failed, timed out or aborted)."""


class StackError(FanfitError):
    """The stack (local or deployed) cannot be reached, started or read."""


class InfeasiblePlacementError(InvalidJobError):
    """No placement of a job's stages on Lambda and Batch GPU meets the deadline or throughput floor
    within the concurrency cap (:mod:`fanfit.sched.placement`)."""


class InvalidEventError(InvalidJobError):
    """A Lambda function's event does not fit its model (:mod:`fanfit.jobs.documents.events`): a missing or unknown
    key, a value of the wrong type or out of range, or not a JSON object at all. Raised before any work."""


class InvalidDocumentError(InvalidJobError):
    """A job document in S3 or in a step's state (:mod:`fanfit.jobs.documents`: spec, plan, wave or
    round plan, step output) does not fit its model; the message names the document and the field."""


class LambdaLimitError(InvalidJobError):
    """A job's data would exceed a Lambda limit (memory, /tmp, Step Functions state size) in some
    function (:mod:`fanfit.limits`); the message says which limit and how to fix it (Batch, more memory)."""


class PartitionConflictError(FanfitError):
    """Recomputing the jobs' partitions (:mod:`fanfit.jobs.sharing`) kept losing to concurrent
    recomputations, or would change more partitions at once than one DynamoDB transaction holds."""


class JobNotFoundError(FanfitError, LookupError):
    """A job named by an event or a command has no object where it should be (its spec, plan or
    schedule in S3), or no record: the job id is wrong, or its objects were removed."""


class ShardFailedError(JobFailedError):
    """A shard of a job kept failing after its retries; the job ended without a result.

    The message names the shard (stage, wave and shard id) and its last error; the job record holds
    them as ``failed_shard`` and ``shard_error``. ``fanfit resume JOB`` reruns only the shards whose
    predictions are missing once the cause is fixed.

    Attributes
    ----------
    shard_id : str or None
    stage, wave : int or None
    last_error : str
        The shard's last error, ``'<name>: <message>'``.
    """

    def __init__(
        self,
        message: str,
        *,
        shard_id: str | None = None,
        stage: int | None = None,
        wave: int | None = None,
        last_error: str = "",
    ) -> None:
        super().__init__(message)
        self.shard_id = shard_id
        self.stage = stage
        self.wave = wave
        self.last_error = last_error


class UnsupportedArgumentError(InvalidJobError):
    """A DoubleML argument that fanfit's classes (:mod:`fanfit.client.doubleml`) cannot honour on a
    stack: a callable score, IRM weights, ``store_models``, ``external_predictions``, a
    propensity calibration, ...; the message names the argument and what fanfit does instead."""


class ParityError(FanfitError):
    """fanfit's estimate and DoubleML's on the same data, folds and out-of-fold predictions differ
    (more than a relative 1e-9): a bug in fanfit, never in the user's input; please report it."""


class JobCancelledError(JobFailedError):
    """A job was cancelled (``fanfit cancel JOB``, :meth:`fanfit.client.JobHandle.cancel`): its
    execution was stopped and it has no result; its record's status is ``CANCELLED``."""


class WaitTimeoutError(JobFailedError):
    """Waiting for a job ran past its ``timeout`` (``--timeout`` on the command line) while the job
    still runs: the job goes on; wait again (``fanfit wait JOB``) or cancel it."""


class JobRunningError(InvalidJobError):
    """An operation that needs an ended job (``fanfit delete JOB``, :meth:`fanfit.client.Client.delete`)
    was asked of a job whose execution still runs: cancel it first (``fanfit cancel JOB``)."""


class GpuWorkerDisabledError(InvalidJobError):
    """A job needs the GPU worker (a Torch learner, ``--gpu-workers`` / ``gpu_workers``) but the stack
    was deployed without it (template parameter ``EnableGpuWorker=false``, the default). Raised by the
    client before anything is uploaded; the message names the learner or option and says to redeploy
    with ``EnableGpuWorker=true`` (docs/deploy.md)."""


class GpuJobFailedError(JobFailedError):
    """A GPU worker's AWS Batch job ended FAILED (or disappeared); the message names the Batch job, its
    status reason and exit code, and where its log is."""


class GpuJobStuckRunnableError(GpuJobFailedError):
    """A GPU worker's AWS Batch job stayed RUNNABLE (no instance started for it) longer than the
    template's ``GpuRunnableTimeoutSeconds``; it was terminated. The message gives the likely causes:
    no G-instance vCPU quota, no route from the subnets to ECR, ECS, S3 and CloudWatch Logs, an
    instance type not offered in the subnets' Availability Zones, a disabled compute environment."""


class DataBucketNotAllowedError(InvalidDataError):
    """A job's data source (``s3://bucket/key`` used in place) lies in a bucket the stack may not
    read: neither its own data bucket nor the one named by the template parameter
    ``ExternalDataBucketName``. The message names the bucket and the parameter to set."""


class DataSourceChangedError(InvalidDataError):
    """A job's data source (``s3://bucket/key`` used in place) changed, or was removed, between the
    client's check and the server's read: its ETag (or version) is no longer the one submitted.
    Submit the job again to use the new object."""


class GroupPartialTimeoutError(JobFailedError):
    """A DS-Sync worker running a segment of rounds (one invocation, several rounds) waited past its
    deadline for the partials of its group of the round before: a member failed, or was not
    started (the segment needs every worker running at once). The message names the job, the
    round, the worker and the members whose partials are missing."""


class TrainJobStoppedError(JobFailedError):
    """A DS-Sync worker running a segment of rounds found its train job's stop marker
    (:func:`fanfit.storage.train_stop_key`) of its own execution: a member of the job failed (its
    step raised, or the state machine's failure branch ran after it ran out of memory or time) or
    the job was cancelled (``fanfit cancel``). The worker stops at once instead of waiting for its
    group until its deadline. The message names the job, the worker, the round and the marker's
    reason (the failed worker, its round and error class, or the cancel)."""


class ClientTimeoutError(JobFailedError):
    """A job of a model whose stage inputs and estimate the client computes (``ModelDef.
    client_inputs``: RDFlex) waited longer than the template's ``ClientTimeoutSeconds`` for the
    client at one step (a stage's inputs, or the estimate): the client stopped or never ran. The
    message names the job, the step and the timeout; run the client again on the resumed job
    (``fanfit resume JOB``)."""


#: The error name Step Functions gives a Lambda invocation refused because the account's (or the
#: function's reserved) concurrency is exhausted (HTTP 429, ``TooManyRequestsException``).
LAMBDA_THROTTLE_ERROR = "Lambda.TooManyRequestsException"


class LambdaThrottledError(JobFailedError):
    """A step of a job stayed throttled by Lambda (``Lambda.TooManyRequestsException``: the
    account's concurrent executions, 1,000 by default, were all in use) through every retry of the
    state machines' throttle policy (:data:`fanfit.jobs.states.THROTTLE_RETRY`, at most about
    5.5 minutes of waiting per step), so the job ended without a result. Raise the account's
    concurrency quota (Service Quotas, "Concurrent executions"), or run fewer jobs or smaller
    waves at once (``max_concurrency``), then ``fanfit resume JOB``. The message names the step or
    shard that was throttled."""


class ShardStoppedError(JobFailedError):
    """A CrossFit shard (on Lambda or the GPU worker) found its estimate job's stop marker
    (:func:`fanfit.storage.estimate_stop_key`) of its own execution between two units: the job
    failed or was cancelled, so the shard stops at once and writes no predictions (a resume fits
    its units again). The message names the job, the shard, the units done and the marker's
    reason."""


class Float32DataWarning(UserWarning):
    """A DoubleML object's data hold float32 columns, so DoubleML (and fanfit's DoubleML class,
    which must equal it) computes in float32: on columns of magnitude 1e5-1e6 (the 401(k) Stata
    file's ``net_tfa``, ``inc``, ``tw``) least squares loses most of its digits. Cast the frame
    (``df.astype("float64")``) before building the DoubleMLData; files and frames given to the
    client or the CLI compute in float64 anyway."""
