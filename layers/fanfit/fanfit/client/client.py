"""The :class:`Client` of a fanfit stack: start estimate and train jobs, find and resume them.

>>> client = fanfit.Client.local_stack()               # the running local stack
>>> client = fanfit.Client(stack="fanfit")             # a stack deployed with `sam deploy`
>>> res = client.estimate("sipp1991.dta", model="plr", y="net_tfa", d="e401", x=[...],
...                       ml_l="RandomForestRegressor", ml_m="RandomForestClassifier", n_rep=3)
>>> res.coef, res.se, res.summary

A job is uploaded once (the data keyed by its content hash), started as one Step Functions execution,
and followed by polling the execution; nothing but S3 keys and small numbers travels in its state.
The work of each job kind is in its module (:mod:`fanfit.client.estimate`,
:mod:`fanfit.client.train`); the client holds the stack's AWS clients and delegates to them.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fanfit import errors, storage
from fanfit.client.check import CheckedEstimate
from fanfit.client.estimate import (
    EstimateJob,
    EstimateResult,
    plan_estimate,
    plan_parts_estimate,
    submit_estimate,
    submit_parts_job,
)
from fanfit.client.jobs import JobHandle
from fanfit.client.options import EstimateOptions, TrainOptions, with_option_parameters
from fanfit.client.stack import Stack
from fanfit.client.train import TrainJob, TrainResult, submit_train
from fanfit.dml.models import REGISTRY, model_def
from fanfit.jobs.documents.estimate import EstimatePrediction, PartSelect
from fanfit.jobs.documents.record import JobRecord, SpecKind

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Client"]

log = logging.getLogger("fanfit")

#: The handle of each job kind, by the ``kind`` of its spec and record.
_HANDLES: dict[str, type[JobHandle]] = {"estimate": EstimateJob, "train": TrainJob}


class Client:
    """Starts estimate jobs on a fanfit stack.

    Parameters
    ----------
    stack : str
        CloudFormation stack name (default ``"fanfit"``).
    endpoint_url : str, optional
        Endpoint of a local stack; omit for AWS.
    region_name : str, optional
    session : boto3.Session, optional
    local : bool
        True when the stack is the embedded local stack (the default ``max_concurrency`` is then the
        machine's core count rather than Lambda's account concurrency).
    """

    def __init__(
        self,
        stack: str = "fanfit",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        session: Any = None,
        local: bool = False,
    ) -> None:
        import boto3

        if session is None:
            session = boto3.Session(region_name=region_name or os.environ.get("AWS_DEFAULT_REGION"))
        self.session = session
        self.local = local
        self.stack = Stack.from_cloudformation(stack, session, endpoint_url)
        self.s3 = session.client("s3", endpoint_url=endpoint_url)
        self.sfn = session.client("stepfunctions", endpoint_url=endpoint_url)
        self.store = storage.JobStore(self.stack.bucket, self.s3)
        self.records = storage.JobRecords(
            self.stack.job_table, session.client("dynamodb", endpoint_url=endpoint_url)
        )
        self.partitions = (
            storage.Partitions(
                self.stack.partition_table,
                session.client("dynamodb", endpoint_url=endpoint_url),
                history_table=self.stack.partition_history_table,
            )
            if self.stack.partition_table
            else None
        )

    @classmethod
    def local_stack(cls, stack: str = "fanfit") -> Client:
        """A client of the running local stack (``fanfit local up``).

        Raises
        ------
        fanfit.errors.StackError
            If no local stack is running.
        """
        from fanfit.local import stack as local_stack

        info = local_stack.status()
        if not info.get("running"):
            raise errors.StackError("no local stack is running; start one with `fanfit local up`")
        import boto3

        session = boto3.Session(
            aws_access_key_id="test",
            aws_secret_access_key="test",  # noqa: S106 - LocalStack's fixed test credentials
            region_name=info.get("region", "us-east-1"),
        )
        return cls(stack, endpoint_url=info["endpoint"], session=session, local=True)

    def submit_estimate(
        self,
        data: Any = None,
        *,
        job_id: str | None = None,
        options: EstimateOptions | None = None,
        **kwargs: Any,
    ) -> EstimateJob:
        """Validate and start an estimate job; returns at once with its handle.

        The options are those of :class:`fanfit.client.options.EstimateOptions`, as keywords (or
        one ``options=EstimateOptions(...)``), named as DoubleML names them. ``data`` is a path (.csv, .parquet, .dta), an
        ``s3://`` URI or a DataFrame; ``d`` and ``z`` take one column or several; ``x`` defaults to
        every other column (DoubleML's ``x_cols=None``); DoubleML's ``y_col``, ``d_cols``,
        ``x_cols`` and ``z_cols`` are aliases of ``y``, ``d``, ``x`` and ``z``; learners are
        ``"NAME"`` or ``"NAME:{json params}"`` from the allow-list (:mod:`fanfit.learners`); ``folds``
        is an array or CSV path of shape (n_obs, n_rep) holding each row's 0-based test fold.
        ``data`` may also be a :class:`~fanfit.client.check.CheckedEstimate` of ``options``
        (what :func:`~fanfit.client.check.check_estimate` returned for them): it is uploaded as
        checked, not checked again (:mod:`fanfit.client.parts`, the jobs of ``apos`` and ``qte``).

        Sharding: ``sharding='auto'`` (default) lets the scheduler size shards from measured
        throughput (a probe wave first when there is no history); ``'per-fold'`` and
        ``'per-repetition'`` are DoubleML-Serverless's fixed layouts (one invocation per fold and
        repetition, or per repetition); ``units_per_shard`` fixes the fits per invocation.
        ``max_concurrency`` caps the job's concurrent invocations (default: the account's 1,000 on
        AWS, the number of cores on the local stack).

        Sharing: ``weight`` (a positive number, at most 100; default 1) is the job's weight in the
        fair shares when several jobs run at once: each running job's partition of the account's
        concurrency is drawn toward a share proportional to its weight (Dorm,
        :mod:`fanfit.jobs.sharing`); ``client.jobs()`` lists it.

        Raises
        ------
        fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
            Before anything is uploaded, when an option, a column, a learner or the folds are wrong.
        TypeError
            An unknown option, or a required one (y, d) missing.
        """
        return submit_estimate(self, data, job_id=job_id, options=options, **kwargs)

    def submit_parts_job(
        self,
        model: str,
        labels: Sequence[str],
        checked: Sequence[CheckedEstimate],
        options: Sequence[EstimateOptions],
        *,
        job_id: str | None = None,
        selects: Sequence[PartSelect] | None = None,
        data: tuple[Sequence[str], np.ndarray] | None = None,
        boot_method: str | None = None,
        n_rep_boot: int | None = None,
    ) -> EstimateJob:
        """Start one job of several parts (a QTE's quantiles and levels, an APOS's levels; with
        ``selects`` and ``data``, a DIDMulti's group-time combinations, each selecting its rows
        from the one upload), each part checked (:func:`fanfit.client.parts.check_parts`); its
        parts' handles are :meth:`EstimateJob.part` (:func:`fanfit.client.estimate.
        submit_parts_job`); ``boot_method`` and ``n_rep_boot`` bootstrap its combined result.

        Raises
        ------
        fanfit.errors.InvalidJobError
            A label missing, parts on other columns, or a bad bootstrap option; then as
            :meth:`submit_estimate`.
        """
        return submit_parts_job(self, model, labels, checked, options, job_id=job_id,
                                selects=selects, data=data, boot_method=boot_method,
                                n_rep_boot=n_rep_boot)  # fmt: skip

    def plan_parts_estimate(
        self,
        model: str,
        labels: Sequence[str],
        checked: Sequence[CheckedEstimate],
        options: Sequence[EstimateOptions],
    ) -> EstimatePrediction:
        """Plan a job of several parts on this stack without running anything: each stage's
        placement and shards with every part's units, and each part's units per stage
        (:func:`fanfit.client.estimate.plan_parts_estimate`).

        Raises
        ------
        fanfit.errors.InvalidJobError
            A label missing, or parts on other data.
        fanfit.errors.StackError
            The stack's outputs cannot be read.
        """
        return plan_parts_estimate(self, model, labels, checked, options)

    def plan_estimate(
        self, data: Any = None, *, options: EstimateOptions | None = None, **kwargs: Any
    ) -> EstimatePrediction:
        """Plan an estimate job on this stack without running anything.

        Takes the options of :meth:`submit_estimate` (``deadline``, ``budget`` included) and
        returns each stage's placement and shards with ``predicted_wall_s`` and
        ``predicted_cost_usd``, planned by the Schedule step's own code from the stack's
        ThroughputTable (:func:`fanfit.client.estimate.plan_estimate`).

        Raises
        ------
        fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
            As :meth:`submit_estimate`.
        """
        return plan_estimate(self, data, options=options, **kwargs)

    def estimate(
        self,
        data: Any,
        *,
        timeout: float = 3600.0,
        progress: bool | str | Any = False,
        **options: Any,
    ) -> EstimateResult:
        """Run an estimate job to the end and return its result.

        Takes the options of :meth:`submit_estimate`; ``progress=True`` shows live progress on
        stderr while it runs (a rich bar on a terminal or in Jupyter; see
        :meth:`EstimateJob.wait`).

        Raises
        ------
        fanfit.errors.InvalidJobError (or a subclass)
            When the job is rejected, before or during the run.
        fanfit.errors.JobFailedError
            When the run fails otherwise or does not end within ``timeout`` seconds.
        """
        return self.submit_estimate(data, **options).result(timeout=timeout, progress=progress)

    def submit_train(
        self, data: Any, *, init: Any = None, job_id: str | None = None, **options: Any
    ) -> TrainJob:
        """Start a train job; see :func:`fanfit.client.train.submit_train` for the options.

        Raises
        ------
        fanfit.errors.InvalidJobError, InvalidDataError
            Before anything is uploaded, naming the option or column.
        """
        return submit_train(self, data, init=init, job_id=job_id, **options)

    def train(
        self,
        data: Any,
        *,
        timeout: float = 3600.0,
        progress: bool | str | Any = False,
        **options: Any,
    ) -> TrainResult:
        """Run a train job to the end and return its result (options of :meth:`submit_train`);
        ``progress=True`` shows live progress (rounds) on stderr, as :meth:`EstimateJob.wait`.

        Raises
        ------
        fanfit.errors.InvalidJobError (or a subclass)
            When the job is rejected, before or during the run.
        fanfit.errors.JobFailedError
            When the run fails otherwise or does not end within ``timeout`` seconds.
        """
        return self.submit_train(data, **options).result(timeout=timeout, progress=progress)

    def jobs(self) -> list[dict[str, Any]]:
        """The running jobs and their partitions of the shared capacity (Dorm), in arrival order.

        Returns
        -------
        list of dict
            One per job holding a partition: ``job_id``, ``kind`` (``estimate`` / ``train``),
            ``status`` (from the job record), ``demand`` and ``partition`` (concurrent Lambda
            invocations), ``gpu_demand`` and ``gpus`` (Batch GPU jobs), ``weight``, ``version``
            (the recomputation that set the partition) and ``updated_at`` (epoch seconds).

        Raises
        ------
        fanfit.errors.StackError
            The stack has no partition table (deployed before partitions existed).
        """
        if self.partitions is None:
            raise errors.StackError(
                f"stack {self.stack.name!r} has no PartitionTableName output; redeploy it"
            )
        out = []
        for item in self.partitions.jobs():
            got = self.records.get(item["job_id"])
            record = (
                None
                if got is None
                else JobRecord.parse(got, source=f"the job record of {item['job_id']}")
            )
            out.append(
                {
                    "job_id": item["job_id"],
                    "kind": item.get("kind", ""),
                    "status": (record.status if record is not None else None) or "UNKNOWN",
                    "demand": int(item.get("demand", 0)),
                    "partition": int(item.get("partition", 0)),
                    "gpu_demand": int(item.get("gpu_demand", 0)),
                    "gpus": int(item.get("gpus", 0)),
                    "weight": float(item.get("weight", 1.0)),
                    "version": int(item.get("version", 0)),
                    "updated_at": item.get("updated_at"),
                }
            )
        return out

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every job on the stack, running or ended, newest first, with its status, duration and
        cost (:func:`fanfit.client.lifecycle.job_history`; ``fanfit jobs --all``).

        Parameters
        ----------
        limit : int, optional
            At most this many (the newest).

        Returns
        -------
        list of dict
            ``job_id``, ``kind``, ``status``, ``started_at``, ``ended_at`` (epoch s),
            ``duration_s`` (s), ``cost_usd`` (USD at AWS list prices, None when unknown),
            ``execution_arn``.
        """
        from fanfit.client.lifecycle import job_history

        return job_history(self, limit=limit)

    def delete(self, job_id: str) -> dict[str, Any]:
        """Remove a job that has ended: every object under its prefix ``jobs/<job>/`` (every
        version, in a versioned bucket), its uploaded data unless another job's spec names the
        same content-hash key, and its records (``fanfit delete JOB``).

        Parameters
        ----------
        job_id : str

        Returns
        -------
        dict
            ``job_id``, ``objects_removed``, ``data_removed``, ``data_kept``, ``record_removed``.

        Raises
        ------
        fanfit.errors.JobRunningError
            The job still runs: cancel it first (``client.job(job_id).cancel()``).
        fanfit.errors.JobNotFoundError
            The stack has neither a record nor an object of the job.
        """
        from fanfit.client.lifecycle import delete_job

        return delete_job(self, job_id)

    def logs(self, job_id: str, shard_id: str | None = None) -> list[dict[str, Any]]:
        """The CloudWatch Logs events of a job's functions and Batch jobs, oldest first
        (:func:`fanfit.client.lifecycle.job_logs`; ``fanfit logs JOB [--shard ID]``).

        Parameters
        ----------
        job_id : str
        shard_id : str, optional
            Only the lines naming this shard.

        Returns
        -------
        list of dict
            ``timestamp`` (epoch ms), ``log_group``, ``log_stream``, ``message``.

        Raises
        ------
        fanfit.errors.InvalidJobError
            The stack has no record of the job.
        """
        from fanfit.client.lifecycle import job_logs

        job = self.job(job_id)
        return job_logs(self, job_id, job.execution_arn, shard_id=shard_id)

    def partition_history(self) -> list[dict[str, Any]]:
        """The recorded recomputations of the partitions, oldest first (the last 100); see
        :func:`fanfit.jobs.sharing.recompute` for an entry's fields.

        Raises
        ------
        fanfit.errors.StackError
            The stack has no partition table.
        """
        if self.partitions is None:
            raise errors.StackError(
                f"stack {self.stack.name!r} has no PartitionTableName output; redeploy it"
            )
        return self.partitions.history()

    #: The stack's functions that hold a job's data, by job kind: ``(name, CloudFormation output)``.
    _DATA_FUNCTIONS: dict[str, tuple[tuple[str, str], ...]] = {
        "estimate": (
            ("Prepare", "PrepareFunctionName"),
            ("CrossFit", "CrossFitFunctionName"),
            ("Aggregate", "AggregateFunctionName"),
        ),
        "train": (
            ("TrainInit", "TrainInitFunctionName"),
            ("TrainShardSmall", "TrainShardSmallFunctionName"),
            ("TrainShardLarge", "TrainShardLargeFunctionName"),
            ("TrainReduce", "TrainReduceFunctionName"),
        ),
    }

    def function_memory_mb(self, kind: str = "estimate") -> dict[str, int]:
        """MemorySize (MB) of each of the stack's functions that hold a job's data.

        Read once per client from the stack's outputs (``<Name>FunctionName``) and Lambda's
        ``GetFunctionConfiguration``; a function the stack does not name is left out.

        Parameters
        ----------
        kind : {'estimate', 'train'}

        Returns
        -------
        dict of str to int
            e.g. ``{"Prepare": 1769, "CrossFit": 1769, "Aggregate": 1769}``.

        Raises
        ------
        fanfit.errors.StackError
            If the stack's outputs or a function's configuration cannot be read.
        """
        cache: dict[str, dict[str, int]] = self.__dict__.setdefault("_memory_mb", {})
        if kind in cache:
            return cache[kind]
        endpoint = self.stack.endpoint_url
        try:
            cfn = self.session.client("cloudformation", endpoint_url=endpoint)
            desc = cfn.describe_stacks(StackName=self.stack.name)["Stacks"][0]
            outputs = {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}
            lam = self.session.client("lambda", endpoint_url=endpoint)
            sizes = {
                name: int(lam.get_function_configuration(FunctionName=outputs[out])["MemorySize"])
                for name, out in self._DATA_FUNCTIONS[kind]
                if out in outputs
            }
        except Exception as exc:  # botocore ClientError, EndpointConnectionError
            raise errors.StackError(
                f"cannot read the memory sizes of stack {self.stack.name!r}'s functions: {exc}"
            ) from exc
        cache[kind] = sizes
        return sizes

    def check_limits(self, kind: str, *, n_rows: int, n_cols: int) -> dict[str, float]:
        """Check a job's data against the stack's functions before launch (:func:`fanfit.limits.
        check_job` with :meth:`function_memory_mb`).

        Parameters
        ----------
        kind : {'estimate', 'train'}
        n_rows, n_cols : int
            Shape of the data the job uploads (observations x columns used).

        Returns
        -------
        dict of str to float
            Each function's estimated peak memory, MB.

        Raises
        ------
        fanfit.errors.LambdaLimitError
            The data would not fit a function's memory: the message names the function, both
            sizes and the fix (a larger MemorySize, AWS Batch, less data).
        fanfit.errors.StackError
            The memory sizes cannot be read.
        """
        from fanfit import limits

        return limits.check_job(
            n_rows=n_rows,
            n_cols=n_cols,
            memory_mb=self.function_memory_mb(kind),
            spec={"job_id": "x" * 80, "spec_key": "jobs/" + "x" * 80 + "/spec.json"},
        )

    def resume(self, job_id: str) -> EstimateJob | TrainJob:
        """Start a job again where it stopped: only the work whose output is not in S3 runs.

        A new execution of the same job (named ``<job_id>-r<epoch s>``) on the state machine of
        its kind. S3 is the source of truth: this works after the job's execution failed, was
        stopped, or the stack itself was restarted and its tables are empty.

        - estimate: Prepare keeps the plan and folds it wrote from the same spec, and Schedule
          treats every shard whose predictions object exists in S3 as done.
        - train: TrainInit keeps the plan and every reduced round (its record and its model in
          S3, neither run nor written again) and starts at the first round whose reduced model
          is not in S3, from the last reduced model (:func:`fanfit.jobs.train.resume_point`); a
          job whose final model is already in S3 only writes its result. With a fixed seed and
          ``balance`` ``'uniform'`` or ``'static'`` the result equals an uninterrupted run's.

        Parameters
        ----------
        job_id : str

        Returns
        -------
        EstimateJob or fanfit.client.train.TrainJob
            The handle of the new execution, of the job's kind.

        Raises
        ------
        fanfit.errors.JobNotFoundError
            The stack's bucket has no spec of ``job_id``.
        fanfit.errors.InvalidJobError
            The job's execution is still running, or its spec names no known kind; a job whose
            model takes its stage inputs from the client (``ModelDef.client_inputs``: RDFlex),
            which only its client can drive (fit it again with :class:`fanfit.RDFlex`).
        fanfit.errors.StackError
            A train job on a stack without a train state machine.
        """
        key = storage.spec_key(job_id)
        job = self.store.get_json(key)  # JobNotFoundError when there is no such job
        try:
            kind = SpecKind.parse(job, source=key).kind
        except errors.InvalidDocumentError as exc:
            raise errors.InvalidJobError(
                f"job {job_id!r}: {key} names no job kind fanfit resumes (estimate or train): {exc}"
            ) from None
        model = (job.get("dml") or {}).get("model") if kind == "estimate" else None
        if isinstance(model, str) and model in REGISTRY and model_def(model).client_inputs:
            raise errors.InvalidJobError(
                f"job {job_id!r} is a {model} job: its stages wait for its client's rdrobust "
                "between them, which a resume cannot run; fit it again with fanfit.RDFlex"
            )
        machine = self.stack.estimate_state_machine_arn
        if kind == "train":
            if not self.stack.train_state_machine_arn:
                raise errors.StackError(
                    f"stack {self.stack.name!r} has no TrainStateMachineArn output; redeploy it"
                )
            machine = self.stack.train_state_machine_arn
        got = self.records.get(job_id)
        record = JobRecord.parse(got or {"job_id": job_id}, source=f"the job record of {job_id}")
        if record.execution_arn:
            try:
                running = (
                    self.sfn.describe_execution(executionArn=record.execution_arn)["status"]
                    == "RUNNING"
                )
            except Exception:  # the execution is gone (a restarted local stack)
                running = False
            if running:
                raise errors.InvalidJobError(
                    f"job {job_id!r} is still running ({record.execution_arn}); wait for it or "
                    "stop it before resuming"
                )
        started = self.sfn.start_execution(
            stateMachineArn=machine,
            name=f"{job_id[:66]}-r{int(time.time())}",
            input=json.dumps({"job_id": job_id, "spec_key": key}),
        )
        log.info("resumed %s job %s (%s)", kind, job_id, started["executionArn"])
        try:  # a second resume before the new execution's first step must see it running
            self.records.update(job_id, execution_arn=started["executionArn"])
        except Exception as exc:  # a role that cannot write the table: the first step records it
            log.warning("cannot record the execution of job %s: %s", job_id, exc)
        if kind == "train":
            return TrainJob(self, job_id, started["executionArn"])
        return EstimateJob(self, job_id, started["executionArn"])

    def job(self, job_id: str) -> EstimateJob | TrainJob:
        """The handle of an earlier job, of the job's kind.

        The kind is read from the job record (``kind``), or else from the job's spec in S3; a job
        whose kind neither names is an estimate (jobs written before train jobs existed).

        Parameters
        ----------
        job_id : str

        Returns
        -------
        EstimateJob or fanfit.client.train.TrainJob

        Raises
        ------
        fanfit.errors.InvalidJobError
            The stack has no record of the job, or none with an execution.
        """
        got = self.records.get(job_id)
        record = None if got is None else JobRecord.parse(got, source=f"the job record of {job_id}")
        if record is None or record.execution_arn is None:
            raise errors.InvalidJobError(f"no job {job_id!r} on stack {self.stack.name!r}")
        kind = record.kind
        if kind not in _HANDLES:
            key = storage.spec_key(job_id)
            try:
                kind = SpecKind.parse(self.store.get_json(key), source=key).kind
            except errors.FanfitError:  # no spec (a record from elsewhere): an estimate
                kind = "estimate"
        handle = _HANDLES.get(str(kind), EstimateJob)
        return handle(self, job_id, record.execution_arn)  # type: ignore[return-value]


# The keyword options, written out for help(), Jupyter and IDEs (defined once, on the models).
for _method, _options in (
    (Client.submit_estimate, EstimateOptions),
    (Client.estimate, EstimateOptions),
    (Client.plan_estimate, EstimateOptions),
    (Client.submit_train, TrainOptions),
    (Client.train, TrainOptions),
):
    setattr(_method, "__signature__", with_option_parameters(_method, _options))  # noqa: B010
