"""The user side: start estimate jobs on a stack and read their results.

>>> client = fanfit.Client.local()                     # the running local stack
>>> client = fanfit.Client(stack="fanfit")             # a stack deployed with `sam deploy`
>>> res = client.estimate("sipp1991.dta", model="plr", y="net_tfa", d="e401", x=[...],
...                       ml_l="RandomForestRegressor", ml_m="RandomForestClassifier", n_rep=3)
>>> res.coef, res.se, res.summary

A job is uploaded once (the data keyed by its content hash), started as one Step Functions execution,
and followed by polling the execution; nothing but S3 keys and small numbers travels in its state.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import pandas as pd

from fanfit import dml, errors, storage
from fanfit.client.data import read_table, to_matrix
from fanfit.learners import LearnerSpec
from fanfit.sched.sizing import POLICIES

if TYPE_CHECKING:
    from fanfit.client.train import TrainJob, TrainResult
    from fanfit.cost import JobCost
    from fanfit.prices import PriceTable

__all__ = [
    "CheckedEstimate",
    "Client",
    "EstimateJob",
    "EstimateResult",
    "JobHandle",
    "Stack",
    "check_estimate",
]

log = logging.getLogger("fanfit")

#: Error names a failed execution may carry, mapped to the exception the client raises.
_ERRORS: dict[str, type[errors.FanfitError]] = {
    "InvalidJobError": errors.InvalidJobError,
    "InvalidDataError": errors.InvalidDataError,
    "InvalidLearnerError": errors.InvalidLearnerError,
    "InvalidFoldsError": errors.InvalidFoldsError,
}

#: State names of orchestrator/estimate.asl.json, grouped into the phases reported in ``timings``.
_PHASES = {
    "Validate the job and write its plan": "prepare_s",
    "Plan the next stage from the predictions so far": "prepare_s",
    "Size the first wave of shards from measured throughput": "prepare_s",
    "Cross-fit every shard of the wave": "crossfit_s",
    "Record the wave's throughput and size the next wave": "crossfit_s",
    "Aggregate the predictions into the estimate": "aggregate_s",
}


@dataclass(frozen=True)
class Stack:
    """The resources of one deployed fanfit stack, read from its CloudFormation outputs.

    Parameters
    ----------
    name : str
        The CloudFormation stack name.
    bucket, job_table, estimate_state_machine_arn : str
        Outputs ``DataBucketName``, ``JobTableName``, ``EstimateStateMachineArn``.
    endpoint_url : str or None
        The endpoint of a local stack; None for AWS.
    region_name : str or None
    train_state_machine_arn : str or None
        Output ``TrainStateMachineArn``; None on a stack deployed before train jobs existed.
    train_worker_memory_mb : tuple of int
        Output ``TrainWorkerMemorySizes``: the memory sizes (MB) with a TrainShard function, the
        default first.
    partition_table : str or None
        Output ``PartitionTableName`` (running jobs' partitions); None on a stack deployed before
        partitions existed.
    """

    name: str
    bucket: str
    job_table: str
    estimate_state_machine_arn: str
    endpoint_url: str | None = None
    region_name: str | None = None
    train_state_machine_arn: str | None = None
    train_worker_memory_mb: tuple[int, ...] = ()
    partition_table: str | None = None

    @classmethod
    def from_cloudformation(cls, name: str, session: Any, endpoint_url: str | None = None) -> Stack:
        """Read the stack's outputs.

        Raises
        ------
        fanfit.errors.StackError
            If the stack does not exist or lacks an output.
        """
        cfn = session.client("cloudformation", endpoint_url=endpoint_url)
        try:
            desc = cfn.describe_stacks(StackName=name)["Stacks"][0]
        except Exception as exc:  # botocore ClientError, EndpointConnectionError
            raise errors.StackError(
                f"cannot read stack {name!r}"
                + (f" at {endpoint_url}" if endpoint_url else "")
                + f": {exc}. Deploy it with `sam deploy --guided` (AWS) or `fanfit local up`."
            ) from exc
        outputs = {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}
        try:
            return cls(
                name=name,
                bucket=outputs["DataBucketName"],
                job_table=outputs["JobTableName"],
                estimate_state_machine_arn=outputs["EstimateStateMachineArn"],
                endpoint_url=endpoint_url,
                region_name=session.region_name,
                train_state_machine_arn=outputs.get("TrainStateMachineArn"),
                train_worker_memory_mb=tuple(
                    int(m) for m in outputs.get("TrainWorkerMemorySizes", "").split(",") if m
                ),
                partition_table=outputs.get("PartitionTableName"),
            )
        except KeyError as exc:
            raise errors.StackError(
                f"stack {name!r} has no output {exc}; is it a fanfit stack?"
            ) from exc


@dataclass
class EstimateResult:
    """The estimate of a finished job, laid out as DoubleML lays out a fitted model.

    Attributes
    ----------
    coef, se, t_stat, pval : ndarray of shape (n_treat,)
    all_coef, all_se : ndarray of shape (n_treat, n_rep)
        Per-repetition estimates.
    d_cols : list of str
    n_obs, n_folds, n_rep : int
    model, score : str
    execution_arn : str
    timings : dict
        Wall seconds of the phases, per-shard statistics, billed GB-seconds and estimated USD.
    raw : dict
        ``result.json`` as the Aggregate step wrote it.
    cost : dict or None
        :meth:`fanfit.cost.JobCost.to_dict` of the job (USD), when it could be counted.
    job : EstimateJob or None
        The job the result was read from (for :meth:`to_doubleml`).
    """

    raw: dict[str, Any]
    timings: dict[str, Any] = field(default_factory=dict)
    job: EstimateJob | None = field(default=None, repr=False, compare=False)
    cost: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        r = self.raw
        self.d_cols: list[str] = list(r["coef"])
        self.coef = np.array([r["coef"][d] for d in self.d_cols])
        self.se = np.array([r["se"][d] for d in self.d_cols])
        self.t_stat = np.array([r["t_stat"][d] for d in self.d_cols])
        self.pval = np.array([r["pval"][d] for d in self.d_cols])
        self.all_coef = np.array([r["all_coef"][d] for d in self.d_cols])
        self.all_se = np.array([r["all_se"][d] for d in self.d_cols])
        self.n_obs, self.n_folds, self.n_rep = r["n_obs"], r["n_folds"], r["n_rep"]
        self.model, self.score = r["model"], r["score"]
        self.execution_arn = r.get("execution_arn", "")

    def confint(self, joint: bool = False, level: float = 0.95) -> pd.DataFrame:
        """Confidence intervals, as DoubleML's ``confint``.

        Parameters
        ----------
        joint : bool
            Joint intervals from the multiplier bootstrap (needs ``boot_method`` on the job; level 0.95).
        level : float
            Coverage in (0, 1).

        Returns
        -------
        DataFrame of shape (n_treat, 2), columns ``'2.5 %'``, ``'97.5 %'`` (for level 0.95).

        Raises
        ------
        fanfit.errors.InvalidJobError
            For a level outside (0, 1), or joint intervals of a job run without bootstrap or at a level
            other than 0.95.
        """
        if not 0.0 < level < 1.0:
            raise errors.InvalidJobError(f"level must be in (0, 1), got {level}")
        a = (1.0 - level) / 2.0
        cols = [f"{100 * a:.1f} %", f"{100 * (1 - a):.1f} %"]
        if joint:
            if "ci_joint_95" not in self.raw or not math.isclose(level, 0.95):
                raise errors.InvalidJobError(
                    "joint intervals need a job run with boot_method ('normal', 'Bayes' or 'wild') "
                    "and level=0.95"
                )
            ci = np.array([self.raw["ci_joint_95"][d] for d in self.d_cols])
        else:
            from scipy.stats import norm

            q = norm.ppf(1.0 - a)
            ci = np.column_stack([self.coef - q * self.se, self.coef + q * self.se])
        return pd.DataFrame(ci, index=self.d_cols, columns=cols)

    @property
    def summary(self) -> pd.DataFrame:
        """DoubleML's summary table: ``coef, std err, t, P>|t|, 2.5 %, 97.5 %`` per treatment."""
        table = pd.DataFrame(
            {"coef": self.coef, "std err": self.se, "t": self.t_stat, "P>|t|": self.pval},
            index=self.d_cols,
        )
        return pd.concat([table, self.confint()], axis=1)

    def to_doubleml(self, data: Any = None, *, bootstrap: bool = True) -> Any:
        """The fitted DoubleML object of this result: see :meth:`EstimateJob.to_doubleml`.

        Raises
        ------
        fanfit.errors.InvalidJobError
            If the result was not read through a job handle (``job`` is None), or as
            :meth:`EstimateJob.to_doubleml`.
        """
        if self.job is None:
            raise errors.InvalidJobError(
                "this result has no job handle; use client.job(JOB_ID).to_doubleml() instead"
            )
        return self.job.to_doubleml(data, bootstrap=bootstrap)

    def to_dict(self) -> dict[str, Any]:
        """The ``--output json`` object: coef, se, t_stat, pval, ci_95, all_coef, all_se, n_obs,
        n_folds, n_rep, model, score, execution_arn, timings."""
        keys = ("coef", "se", "t_stat", "pval", "ci_95", "all_coef", "all_se", "n_obs", "n_folds",
                "n_rep", "model", "score")  # fmt: skip
        out = {k: self.raw[k] for k in keys}
        for k in ("ci_joint_95", "boot_method"):
            if k in self.raw:
                out[k] = self.raw[k]
        out["execution_arn"] = self.execution_arn
        out["timings"] = self.timings
        if self.cost is not None:
            out["cost"] = self.cost
        return out


class JobHandle:
    """What estimate and train job handles share: ``status()``, ``wait()``, ``cost()``.

    Parameters
    ----------
    client : Client
    job_id : str
    execution_arn : str
        The job's Step Functions execution.
    """

    #: ``'estimate'`` or ``'train'``: what the progress bar counts (shards or rounds).
    kind = "estimate"
    #: Error names a failed execution may carry, mapped to the exception :meth:`wait` raises.
    _ERRORS: dict[str, type[errors.FanfitError]] = _ERRORS
    #: Longest pause between two polls of the execution, seconds.
    _MAX_POLL_S = 2.0

    def __init__(self, client: Client, job_id: str, execution_arn: str) -> None:
        self.client = client
        self.job_id = job_id
        self.execution_arn = execution_arn

    def status(self) -> str:
        """The execution's status: RUNNING, SUCCEEDED, FAILED, TIMED_OUT or ABORTED."""
        return self.client.sfn.describe_execution(executionArn=self.execution_arn)["status"]

    def wait(
        self, timeout: float = 3600.0, poll: float = 0.25, *, progress: bool | str | Any = False
    ) -> Self:
        """Poll until the execution ends (at most ``timeout`` seconds).

        The pause between polls starts at ``poll`` seconds and grows by half each time, to 2 s
        (estimate) or 1 s (train); the loop makes at most ``timeout / poll + 1`` polls, whatever
        the clock does.

        Parameters
        ----------
        timeout : float
            Seconds.
        poll : float
            First pause, seconds.
        progress : bool or str
            Show live progress on stderr (:mod:`fanfit.progress`): True for a rich bar on a
            terminal or in Jupyter and plain lines otherwise, ``'plain'`` or ``'rich'`` for one of
            them; a snapshot is read at most every second (pauses are then at most 1 s).

        Returns
        -------
        self

        Raises
        ------
        fanfit.errors.InvalidJobError (or a subclass)
            If the job was rejected; the message names the option or column.
        fanfit.errors.JobFailedError
            If the execution failed otherwise, timed out, was aborted, or did not end in time.
        """
        from fanfit.progress import PROGRESS_INTERVAL_S, ProgressTracker, make_renderer

        renderer = make_renderer(progress)
        tracker = ProgressTracker(self, self.kind) if renderer is not None else None
        max_poll = (
            self._MAX_POLL_S if tracker is None else min(self._MAX_POLL_S, PROGRESS_INTERVAL_S)
        )
        deadline = time.monotonic() + timeout
        shown_at = -math.inf
        try:
            for _ in range(int(max(timeout, 0.0) / max(poll, 1e-3)) + 1):
                if time.monotonic() >= deadline:
                    break
                desc = self.client.sfn.describe_execution(executionArn=self.execution_arn)
                status = desc["status"]
                due = status != "RUNNING" or time.monotonic() - shown_at >= PROGRESS_INTERVAL_S
                if renderer is not None and tracker is not None and due:
                    shown_at = time.monotonic()
                    renderer.update(tracker.snapshot(desc))
                if status == "SUCCEEDED":
                    return self
                if status != "RUNNING":
                    raise self._failure(desc)
                time.sleep(poll)
                poll = min(poll * 1.5, max_poll)
        finally:
            if renderer is not None:
                renderer.close()
        raise errors.JobFailedError(f"job {self.job_id} did not end within {timeout:.0f} s")

    def _failure(self, desc: dict[str, Any]) -> errors.FanfitError:
        name = desc.get("error") or desc["status"]
        cause = desc.get("cause") or ""
        try:
            message = json.loads(cause).get("errorMessage", cause)
        except (ValueError, AttributeError):
            message = cause
        if name == "ShardFailedError":
            return self._shard_failure(message)
        exc_type = self._ERRORS.get(name, errors.JobFailedError)
        if exc_type is errors.JobFailedError:
            return errors.JobFailedError(
                f"job {self.job_id} ended {desc['status']}: {name}: {message}"
            )
        return exc_type(message)

    def _shard_failure(self, message: str) -> errors.ShardFailedError:
        """The :class:`~fanfit.errors.ShardFailedError` of a job whose shard kept failing: the shard
        and its last error from the job record (``failed_shard``, ``shard_error``), else from the
        execution's cause."""
        import re

        try:
            record = self.client.records.get(self.job_id) or {}
        except Exception:  # a record that cannot be read: the cause still names the shard
            record = {}
        found = re.search(r"shard (\d+) \(stage (\d+), wave (\d+)\)", message)
        shard_id = record.get("failed_shard") or (found.group(1) if found else None)
        stage = record.get("failed_stage", int(found.group(2)) if found else None)
        wave = record.get("failed_wave", int(found.group(3)) if found else None)
        return errors.ShardFailedError(
            f"job {self.job_id} failed: {message}",
            shard_id=None if shard_id is None else str(shard_id),
            stage=stage,
            wave=wave,
            last_error=str(record.get("shard_error") or ""),
        )

    def cost(self, prices: PriceTable | None = None, *, refresh: bool = False) -> JobCost:
        """What the job cost on AWS (so far, while it runs): see :mod:`fanfit.cost`.

        Counted from the execution history (Lambda invocations, state transitions, Batch jobs) and
        the job's shard records, priced from ``prices`` (default :data:`fanfit.prices.DEFAULT_PRICES`).
        The cost of an ended job at the default prices is kept in its record (``cost``) and read
        from there next time, unless ``refresh``.

        Returns
        -------
        fanfit.cost.JobCost

        Raises
        ------
        botocore.exceptions.ClientError
            If the execution history cannot be read.
        """
        return _collect_cost(self.client, self.job_id, self.execution_arn, prices, refresh)

    def record(self) -> dict[str, Any]:
        """The job record in the job table (``{"job_id": ...}`` when there is none)."""
        return self.client.records.get(self.job_id) or {"job_id": self.job_id}


class EstimateJob(JobHandle):
    """A started estimate job: ``wait()``, ``result()``, ``status()``, ``stats()``."""

    kind = "estimate"

    def __init__(self, client: Client, job_id: str, execution_arn: str) -> None:
        super().__init__(client, job_id, execution_arn)
        self._result: EstimateResult | None = None

    def result(
        self, timeout: float = 3600.0, *, progress: bool | str | Any = False
    ) -> EstimateResult:
        """Wait for the job and read its result (cached); ``progress`` as in :meth:`wait`."""
        if self._result is None:
            self.wait(timeout, progress=progress)
            raw = self.client.store.get_json(storage.result_key(self.job_id))
            timings = dict(raw.get("timings", {}))
            timings.update(self.phase_seconds())
            self._result = EstimateResult(raw=raw, timings=timings, job=self)
            self._result.cost = _cost_or_none(self)
        return self._result

    def spec(self) -> dml.DMLSpec:
        """The job's validated spec, from the plan Prepare wrote."""
        return dml.DMLSpec.from_dict(
            self.client.store.get_json(storage.plan_key(self.job_id))["dml"]
        )

    def folds(self) -> np.ndarray:
        """The job's folds, int64 of shape (n_obs, n_rep): the test fold of each row and repetition."""
        plan = self.client.store.get_json(storage.plan_key(self.job_id))
        return np.asarray(self.client.store.get_array(plan["folds_key"]))

    def predictions(self) -> dict[str, dict[str, np.ndarray]]:
        """The out-of-fold predictions the estimate was aggregated from, in DoubleML's
        ``external_predictions`` layout: ``{treatment: {"ml_l": ndarray (n_obs, n_rep), ...}}``.

        Raises
        ------
        fanfit.errors.InvalidJobError
            If the job has none stored (it was aggregated by a fanfit before they were kept).
        """
        from fanfit.dml.interop import predictions_from_arrays

        key = self.result().raw.get("predictions_key") or storage.predictions_key(self.job_id)
        if not self.client.store.exists(key):
            raise errors.InvalidJobError(
                f"job {self.job_id} has no stored out-of-fold predictions ({key}); it was aggregated "
                "by an older fanfit: run it again"
            )
        return predictions_from_arrays(self.client.store.get_arrays(key))

    def to_doubleml(self, data: Any = None, *, bootstrap: bool = True) -> Any:
        """A fitted DoubleML object (DoubleMLPLR, -IRM, -PLIV or -IIVM) of this job.

        Built by :func:`fanfit.dml.interop.to_doubleml` from the job's data, its folds (DoubleML's
        ``set_sample_splitting``) and its out-of-fold predictions (``fit(external_predictions=...)``):
        no learner is fitted again, ``coef`` and ``se`` equal the job's, and DoubleML's
        ``summary``, ``sensitivity_analysis()`` and plots work on it. Needs DoubleML on the client
        (``pip install 'fanfit[doubleml]'``).

        Parameters
        ----------
        data : str, path, DataFrame or s3:// URI, optional
            The data the job ran on, read locally; default: the copy the job uploaded (downloaded).
        bootstrap : bool
            Run DoubleML's bootstrap with the job's ``boot_method`` and seed (then
            ``confint(joint=True)`` equals the job's ``ci_joint_95``).

        Returns
        -------
        doubleml.DoubleMLPLR, DoubleMLIRM, DoubleMLPLIV or DoubleMLIIVM

        Raises
        ------
        fanfit.dml.interop.MissingDependencyError
            DoubleML is not installed (the message gives the pip command).
        fanfit.errors.InvalidDataError
            ``data`` is not the data the job ran on.
        fanfit.errors.InvalidJobError
            The job has no stored predictions (see :meth:`predictions`), or did not succeed.
        """
        from fanfit.dml.interop import import_doubleml, to_doubleml

        import_doubleml()  # fail before downloading anything
        result = self.result()
        plan = self.client.store.get_json(storage.plan_key(self.job_id))
        spec = dml.DMLSpec.from_dict(plan["dml"])
        if data is None:
            names, values = self.client.store.get_data(plan["data_key"])
        else:
            names, values = to_matrix(read_table(data, self.client.s3), list(spec.used_cols))
            if storage.encode_data(names, values)[0] != plan["data_key"]:
                raise errors.InvalidDataError(
                    f"the columns {', '.join(spec.used_cols)} of this data differ from the data job "
                    f"{self.job_id} ran on; pass the same file, or no data to use the job's copy"
                )
        dml_data = dml.validate_data(spec, names, values)
        folds = self.client.store.get_array(plan["folds_key"])
        obj = to_doubleml(spec, dml_data, folds, self.predictions(), bootstrap=bootstrap)
        if not np.allclose(obj.coef, result.coef, rtol=1e-9, atol=0.0):
            raise errors.InvalidDataError(
                f"DoubleML's estimate {obj.coef} differs from job {self.job_id}'s {result.coef}; "
                "the data, folds or predictions read back are not the job's"
            )
        return obj

    def record(self) -> dict[str, Any]:
        """The job record in the job table: ``status``, ``model``, ``score``, ``execution_arn``,
        ``result_key`` or ``error``/``cause``, and ``schedule`` (the scheduler's decision per wave
        of the current stage with the throughput figures it used)."""
        return self.client.records.get(self.job_id) or {"job_id": self.job_id}

    def stats(self) -> list[dict[str, Any]]:
        """Per-shard statistics: start/end (epoch s), fit and I/O seconds, memory, peak RSS, billed
        GB-seconds, cold start."""
        return list(self.result().timings.get("shards", []))

    def phase_seconds(self) -> dict[str, float]:
        """Wall seconds of prepare, cross-fitting and aggregate, from the execution's history."""
        out = {"prepare_s": 0.0, "crossfit_s": 0.0, "aggregate_s": 0.0}
        entered: dict[str, Any] = {}
        pages = self.client.sfn.get_paginator("get_execution_history").paginate(
            executionArn=self.execution_arn
        )
        for page in pages:
            for ev in page["events"]:
                kind = ev["type"]
                if kind.endswith("StateEntered"):
                    details = ev.get("stateEnteredEventDetails", {})
                    entered[details.get("name", "")] = ev["timestamp"]
                elif kind.endswith("StateExited"):
                    name = ev.get("stateExitedEventDetails", {}).get("name", "")
                    if name in _PHASES and name in entered:
                        out[_PHASES[name]] += (ev["timestamp"] - entered.pop(name)).total_seconds()
        out["total_s"] = sum(out.values())
        return out


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
                self.stack.partition_table, session.client("dynamodb", endpoint_url=endpoint_url)
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
        data: Any,
        *,
        y: str,
        d: str | Sequence[str],
        x: Sequence[str],
        model: str = "plr",
        score: str | None = None,
        z: str | Sequence[str] | None = None,
        ml_l: str | LearnerSpec | None = None,
        ml_m: str | LearnerSpec | None = None,
        ml_g: str | LearnerSpec | None = None,
        ml_r: str | LearnerSpec | None = None,
        n_folds: int = 5,
        n_rep: int = 1,
        seed: int = 0,
        folds: Any = None,
        trimming_threshold: float = 0.01,
        boot_method: str | None = None,
        n_rep_boot: int = 500,
        max_concurrency: int | None = None,
        units_per_shard: int | None = None,
        sharding: str = "auto",
        weight: float = 1.0,
        job_id: str | None = None,
    ) -> EstimateJob:
        """Validate and start an estimate job; returns at once with its handle.

        Parameters are named as DoubleML names them. ``data`` is a path (.csv, .parquet, .dta), an
        ``s3://`` URI or a DataFrame; ``d`` and ``z`` take one column or several; learners are
        ``"NAME"`` or ``"NAME:{json params}"`` from the allow-list (:mod:`fanfit.learners`); ``folds``
        is an array or CSV path of shape (n_obs, n_rep) holding each row's 0-based test fold.

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
        """
        checked = check_estimate(
            data, s3=self.s3, y=y, d=d, x=x, z=z, model=model, score=score,
            ml_l=ml_l, ml_m=ml_m, ml_g=ml_g, ml_r=ml_r, n_folds=n_folds, n_rep=n_rep, seed=seed,
            folds=folds, trimming_threshold=trimming_threshold, boot_method=boot_method,
            n_rep_boot=n_rep_boot, max_concurrency=max_concurrency,
            units_per_shard=units_per_shard, sharding=sharding, weight=weight,
        )  # fmt: skip
        spec, names, values, fold_array = (
            checked.spec, checked.columns, checked.values, checked.folds
        )  # fmt: skip
        if max_concurrency is None:
            max_concurrency = (os.cpu_count() or 1) if self.local else None
        # Data over a function's memory (or /tmp, or the state limit) is rejected before launch.
        self.check_limits("estimate", n_rows=int(values.shape[0]), n_cols=int(values.shape[1]))

        job_id = job_id or f"est-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        job: dict[str, Any] = {
            "kind": "estimate",
            "dml": spec.to_dict(),
            "data_key": self.store.put_data(names, values),
            "folds_key": None,
            "max_concurrency": max_concurrency,
            "units_per_shard": units_per_shard,
            "sharding": sharding,
            "weight": checked.weight,
        }
        if fold_array is not None:
            job["folds_key"] = self.store.put_array(
                f"{storage.job_prefix(job_id)}input-folds.npy", fold_array
            )
        key = self.store.put_json(storage.spec_key(job_id), job)
        started = self.sfn.start_execution(
            stateMachineArn=self.stack.estimate_state_machine_arn,
            name=job_id,
            input=json.dumps({"job_id": job_id, "spec_key": key}),
        )
        return EstimateJob(self, job_id, started["executionArn"])

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

    def submit_train(self, data: Any, **options: Any) -> TrainJob:
        """Start a train job; see :func:`fanfit.client.train.submit_train` for the options.

        Raises
        ------
        fanfit.errors.InvalidJobError, InvalidDataError
            Before anything is uploaded, naming the option or column.
        """
        from fanfit.client.train import submit_train

        return submit_train(self, data, **options)

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
            record = self.records.get(item["job_id"]) or {}
            out.append(
                {
                    "job_id": item["job_id"],
                    "kind": item.get("kind", ""),
                    "status": record.get("status", "UNKNOWN"),
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
            The job's execution is still running, or its spec names no known kind.
        fanfit.errors.StackError
            A train job on a stack without a train state machine.
        """
        key = storage.spec_key(job_id)
        job = self.store.get_json(key)  # JobNotFoundError when there is no such job
        kind = job.get("kind", "estimate") if isinstance(job, dict) else None
        if kind not in ("estimate", "train"):
            raise errors.InvalidJobError(
                f"job {job_id!r}: {key} names no job kind fanfit resumes (estimate or train); "
                f"got {kind!r}"
            )
        machine = self.stack.estimate_state_machine_arn
        if kind == "train":
            if not self.stack.train_state_machine_arn:
                raise errors.StackError(
                    f"stack {self.stack.name!r} has no TrainStateMachineArn output; redeploy it"
                )
            machine = self.stack.train_state_machine_arn
        record = self.records.get(job_id) or {}
        if record.get("execution_arn"):
            try:
                running = (
                    self.sfn.describe_execution(executionArn=record["execution_arn"])["status"]
                    == "RUNNING"
                )
            except Exception:  # the execution is gone (a restarted local stack)
                running = False
            if running:
                raise errors.InvalidJobError(
                    f"job {job_id!r} is still running ({record['execution_arn']}); wait for it or "
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
            from fanfit.client.train import TrainJob

            return TrainJob(self, job_id, started["executionArn"])
        return EstimateJob(self, job_id, started["executionArn"])

    def job(self, job_id: str) -> EstimateJob:
        """The handle of an earlier job, from its record."""
        record = self.records.get(job_id)
        if record is None or "execution_arn" not in record:
            raise errors.InvalidJobError(f"no job {job_id!r} on stack {self.stack.name!r}")
        return EstimateJob(self, job_id, record["execution_arn"])


def _collect_cost(
    client: Client, job_id: str, execution_arn: str, prices: PriceTable | None, refresh: bool
) -> JobCost:
    """:meth:`EstimateJob.cost` and :meth:`fanfit.client.train.TrainJob.cost` of any job kind."""
    from fanfit.cost import JobCost, collect_job_cost
    from fanfit.prices import DEFAULT_PRICES

    record = client.records.get(job_id) or {}
    if prices is None and not refresh and isinstance(record.get("cost"), dict):
        return JobCost.from_dict(record["cost"])
    status = client.sfn.describe_execution(executionArn=execution_arn)["status"]
    shards = None
    if status == "SUCCEEDED" and client.store.exists(storage.result_key(job_id)):
        shards = client.store.get_json(storage.result_key(job_id)).get("timings", {}).get("shards")
    cost = collect_job_cost(
        client.sfn,
        execution_arn,
        lambda_client=client.session.client("lambda", endpoint_url=client.stack.endpoint_url),
        shard_records=shards,
        prices=prices or DEFAULT_PRICES,
    )
    if prices is None and status != "RUNNING":
        try:
            client.records.update(job_id, cost=cost.to_dict())
        except Exception as exc:  # a read-only role: the cost is still returned
            log.warning("cannot keep the cost in the record of job %s: %s", job_id, exc)
    return cost


def _cost_or_none(job: Any) -> dict[str, Any] | None:
    """The job's cost as a dict, or None (logged) when it cannot be counted: a result never
    fails for want of its cost."""
    try:
        return dict(job.cost().to_dict())
    except Exception as exc:  # history not readable, no permission
        log.warning("cannot count the cost of job %s: %s", job.job_id, exc)
        return None


@dataclass(frozen=True)
class CheckedEstimate:
    """An estimate job checked on the client, before anything is uploaded (:func:`check_estimate`).

    Attributes
    ----------
    spec : fanfit.dml.DMLSpec
        The validated spec.
    columns : list of str
        The data columns the job uses (y, d, x, z).
    values : ndarray of shape (n_obs, n_cols), float64
        Those columns, as they would be uploaded.
    data : fanfit.dml.DMLData
        The validated arrays.
    folds : ndarray of int64, shape (n_obs, n_rep), or None
        The user's folds, validated; None when Prepare draws them from the seed.
    sharding : str
    max_concurrency, units_per_shard : int or None
    weight : float
        The job's weight in the fair shares of the account's concurrency, in (0, 100].
    """

    spec: dml.DMLSpec
    columns: list[str]
    values: np.ndarray
    data: dml.DMLData
    folds: np.ndarray | None
    sharding: str = "auto"
    max_concurrency: int | None = None
    units_per_shard: int | None = None
    weight: float = 1.0

    @property
    def n_fits(self) -> int:
        """Nuisance fits the job runs: n_treat x n_rep x prediction keys x n_folds, over all stages."""
        return sum(len(dml.fit_units(self.spec, s)) for s in range(dml.n_stages(self.spec)))

    def describe(self) -> dict[str, Any]:
        """What would run, JSON-safe: ``model, score, n_obs, y_col, d_cols, x_cols, z_cols, n_folds,
        n_rep, n_treat, prediction_keys, n_fits, fits`` (the product spelled out), ``learners``
        (name -> canonical spec string),
        ``folds`` (``'drawn from seed <seed>'`` or ``'given'``), ``seed``, ``sharding``,
        ``max_concurrency``, ``units_per_shard``, ``weight``, ``boot_method``, ``n_rep_boot``."""
        spec = self.spec
        keys = dml.prediction_keys(spec)
        fits = f"{spec.n_folds} folds x {spec.n_rep} repetitions x {len(keys)} learners ({', '.join(keys)})"
        if spec.n_treat > 1:
            fits += f" x {spec.n_treat} treatments"
        return {
            "model": spec.model,
            "score": spec.score,
            "n_obs": self.data.n_obs,
            "y_col": spec.y_col,
            "d_cols": list(spec.d_cols),
            "x_cols": list(spec.x_cols),
            "z_cols": list(spec.z_cols),
            "n_folds": spec.n_folds,
            "n_rep": spec.n_rep,
            "n_treat": spec.n_treat,
            "prediction_keys": list(dml.prediction_keys(spec)),
            "n_fits": self.n_fits,
            "fits": f"{fits} = {self.n_fits} fits",
            "learners": {k: str(spec.learners[k]) for k in sorted(spec.learners)},
            "folds": "given" if self.folds is not None else f"drawn from seed {spec.seed}",
            "seed": spec.seed,
            "sharding": self.sharding,
            "max_concurrency": self.max_concurrency,
            "units_per_shard": self.units_per_shard,
            "weight": self.weight,
            "boot_method": spec.boot_method,
            "n_rep_boot": spec.n_rep_boot if spec.boot_method else None,
        }


def check_estimate(
    data: Any,
    *,
    s3: Any = None,
    y: str,
    d: str | Sequence[str],
    x: Sequence[str] | str,
    z: str | Sequence[str] | None = None,
    model: str = "plr",
    score: str | None = None,
    ml_l: str | LearnerSpec | None = None,
    ml_m: str | LearnerSpec | None = None,
    ml_g: str | LearnerSpec | None = None,
    ml_r: str | LearnerSpec | None = None,
    n_folds: int = 5,
    n_rep: int = 1,
    seed: int = 0,
    folds: Any = None,
    trimming_threshold: float = 0.01,
    boot_method: str | None = None,
    n_rep_boot: int = 500,
    max_concurrency: int | None = None,
    units_per_shard: int | None = None,
    sharding: str = "auto",
    weight: float = 1.0,
) -> CheckedEstimate:
    """Check an estimate job's spec and data without any stack: what :meth:`Client.submit_estimate`
    checks before it uploads, and what ``fanfit estimate --dry-run`` runs.

    Reads the data (a local file or DataFrame; an ``s3://`` URI through ``s3``), keeps the columns
    the job uses, and validates them (:func:`fanfit.dml.validate_data`) with the spec
    (:func:`build_spec`), the folds (:func:`fanfit.dml.validate_folds`), the sharding options and
    the weight (:func:`fanfit.client.options.check_weight`). Options are those of
    :meth:`Client.submit_estimate`.

    Returns
    -------
    CheckedEstimate

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
        Naming the option, column, learner or fold that is wrong.
    """
    spec, columns = build_spec(
        y=y, d=d, x=x, z=z, model=model, score=score,
        learners={"ml_l": ml_l, "ml_m": ml_m, "ml_g": ml_g, "ml_r": ml_r},
        n_folds=n_folds, n_rep=n_rep, seed=seed, trimming_threshold=trimming_threshold,
        boot_method=boot_method, n_rep_boot=n_rep_boot,
    )  # fmt: skip
    if sharding not in POLICIES:
        raise errors.InvalidJobError(
            f"sharding must be one of {', '.join(POLICIES)}; got {sharding!r}"
        )
    for name, value in (("max_concurrency", max_concurrency), ("units_per_shard", units_per_shard)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise errors.InvalidJobError(f"{name} must be an integer of at least 1, got {value!r}")
    from fanfit.client import options as opt

    weight = opt.check_weight(weight)
    names, values = to_matrix(read_table(data, s3), columns)
    dml_data = dml.validate_data(spec, names, values)
    fold_array = None
    if folds is not None:
        raw = folds if isinstance(folds, np.ndarray) else dml.read_folds_csv(folds)
        fold_array = dml.validate_folds(raw, dml_data.y.shape[0], spec.n_folds, spec.n_rep)
    return CheckedEstimate(
        spec=spec,
        columns=names,
        values=values,
        data=dml_data,
        folds=fold_array,
        sharding=sharding,
        max_concurrency=max_concurrency,
        units_per_shard=units_per_shard,
        weight=weight,
    )


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [c.strip() for c in value.split(",") if c.strip()]
    return [str(c) for c in value]


def build_spec(
    *,
    y: str,
    d: str | Sequence[str],
    x: Sequence[str] | str,
    z: str | Sequence[str] | None,
    model: str,
    score: str | None,
    learners: dict[str, str | LearnerSpec | None],
    n_folds: int,
    n_rep: int,
    seed: int,
    trimming_threshold: float = 0.01,
    boot_method: str | None = None,
    n_rep_boot: int = 500,
) -> tuple[dml.DMLSpec, list[str]]:
    """Build and validate a :class:`fanfit.dml.DMLSpec` from user options.

    Returns
    -------
    (spec, columns) : DMLSpec, list of str
        The spec and the data columns it uses (y, d, x, z in that order).

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidLearnerError
        Also for an option of the wrong type (``learners=0``, ``d=0``), naming it.
    """
    from fanfit.client import options as opt

    opt.check_str("y", y)
    opt.check_columns("d", d)
    opt.check_columns("x", x)
    opt.check_columns("z", z, optional=True)
    opt.check_str("model", model)
    opt.check_str("score", score, optional=True)
    opt.check_str("boot_method", boot_method, optional=True)
    opt.check_learners(learners)
    for name, value in (("n_folds", n_folds), ("n_rep", n_rep), ("seed", seed),
                        ("n_rep_boot", n_rep_boot)):  # fmt: skip
        opt.check_int(name, value)
    opt.check_number("trimming_threshold", trimming_threshold)
    parsed = {
        k: (v if isinstance(v, LearnerSpec) else LearnerSpec.parse(v))
        for k, v in learners.items()
        if v is not None
    }
    model = str(model).lower()
    spec = dml.DMLSpec(
        model=model,
        score=score or dml.DEFAULT_SCORE.get(model, ""),
        y_col=y,
        d_cols=tuple(_as_list(d)),
        x_cols=tuple(_as_list(x)),
        z_cols=tuple(_as_list(z)),
        n_folds=int(n_folds),
        n_rep=int(n_rep),
        seed=int(seed),
        learners=parsed,
        trimming_threshold=float(trimming_threshold),
        n_rep_boot=int(n_rep_boot),
        boot_method=boot_method,
    )
    spec.validate()
    columns = [spec.y_col, *spec.d_cols, *spec.x_cols, *spec.z_cols]
    return spec, columns
