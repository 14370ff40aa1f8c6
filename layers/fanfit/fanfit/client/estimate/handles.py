"""The handles of an estimate job and the result they read: follow a job (:class:`EstimateJob`)
or one part of a job of several parts (:class:`PartJob`), read its result (:class:`EstimateResult`,
laid out as DoubleML lays out a fitted model).

A result keeps the job it was read from (:meth:`EstimateResult.to_doubleml`) and the handles build
results, so the three live in one module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from fanfit import dml, errors, storage
from fanfit.client.data import read_table, to_matrix
from fanfit.client.estimate.callbacks import ClientCallbacks
from fanfit.client.jobs import JobHandle, StackClient, cost_or_none
from fanfit.dml.result import loss_from_json
from fanfit.jobs.documents.estimate import EstimatePlan, EstimateResultDoc
from fanfit.jobs.states import EstimateState

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EstimateJob", "EstimateResult", "PartJob"]

#: States of orchestrator/estimate.asl.json (:class:`~fanfit.jobs.states.EstimateState`), grouped into the phases reported in ``timings``.
_PHASES: dict[str, str] = {
    EstimateState.PREPARE: "prepare_s",
    EstimateState.PREPARE_NEXT_STAGE: "prepare_s",
    EstimateState.SCHEDULE_FIRST_WAVE: "prepare_s",
    EstimateState.CROSSFIT_WAVE: "crossfit_s",
    EstimateState.SCHEDULE_NEXT_WAVE: "crossfit_s",
    EstimateState.AGGREGATE: "aggregate_s",
}


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
    doc : EstimateResultDoc
        ``raw`` parsed through its model (:class:`fanfit.jobs.documents.estimate.EstimateResultDoc`).
    cost : dict or None
        :meth:`fanfit.cost.JobCost.to_dict` of the job (USD), when it could be counted.
    job : EstimateJob or None
        The job the result was read from (for :meth:`to_doubleml`).
    nuisance_loss : dict of str to ndarray of shape (n_rep, n_treat), or None
        Out-of-sample loss of every nuisance learner in every repetition, as DoubleML's
        ``nuisance_loss``: RMSE for regressors, log loss for classifiers
        (:func:`fanfit.dml.losses.nuisance_loss`); None for a job aggregated before losses existed.
    nuisance_metric : dict of str to str
        ``'RMSE'`` or ``'Log Loss'`` per key of ``nuisance_loss``.
    y_col : str or None
    x_cols, z_cols : list of str
    learners : dict of str to dict
        The job's learners (``{"name", "params"}``, keyed ``ml_l``, ``ml_m``, ``ml_g``, ``ml_r``).
    seed : int or None
        Columns, learners and seed of the job, from ``result.json``'s ``spec`` (None / empty for
        a job aggregated before it was kept).

    ``str(result)`` is DoubleML's printout of a fitted model (data summary, score, learners with
    their out-of-sample losses, resampling, fit summary), then a section on the run.
    """

    raw: dict[str, Any]
    timings: dict[str, Any] = field(default_factory=dict)
    job: EstimateJob | None = field(default=None, repr=False, compare=False)
    cost: dict[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        r = self.doc = EstimateResultDoc.parse(self.raw, source="result.json")
        self.d_cols: list[str] = list(r.coef)
        self.coef = np.array([r.coef[d] for d in self.d_cols])
        self.se = np.array([r.se[d] for d in self.d_cols])
        self.t_stat = np.array([r.t_stat[d] for d in self.d_cols])
        self.pval = np.array([r.pval[d] for d in self.d_cols])
        self.all_coef = np.array([r.all_coef[d] for d in self.d_cols])
        self.all_se = np.array([r.all_se[d] for d in self.d_cols])
        self.n_obs, self.n_folds, self.n_rep = r.n_obs, r.n_folds, r.n_rep
        self.model, self.score = r.model, r.score
        self.execution_arn = r.execution_arn
        self.nuisance_loss: dict[str, np.ndarray] | None = loss_from_json(r.nuisance_loss)
        self.nuisance_metric: dict[str, str] = dict(r.nuisance_metric or {})
        spec = r.spec or {}
        self.y_col: str | None = spec.get("y_col")
        self.x_cols: list[str] = list(spec.get("x_cols", []))
        self.z_cols: list[str] = list(spec.get("z_cols", []))
        self.learners: dict[str, Any] = dict(spec.get("learners", {}))
        self.seed: int | None = spec.get("seed")

    def __str__(self) -> str:
        """DoubleML's printout of a fitted model (``print(dml_plr)`` in DoubleML 0.11), then fanfit's run."""
        from fanfit.client.printout import format_estimate

        return format_estimate(self)

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
            joint_ci = self.doc.ci_joint_95
            if joint_ci is None or not math.isclose(level, 0.95):
                raise errors.InvalidJobError(
                    "joint intervals need a job run with boot_method ('normal', 'Bayes' or 'wild') "
                    "and level=0.95"
                )
            ci = np.array([joint_ci[d] for d in self.d_cols])
        else:  # the normal quantile (Wichura's AS241, as scipy's ndtri to ~1e-15): no scipy import
            q = NormalDist().inv_cdf(1.0 - a)
            ci = np.column_stack([self.coef - q * self.se, self.coef + q * self.se])
        import pandas as pd

        return pd.DataFrame(ci, index=self.d_cols, columns=cols)

    @property
    def summary(self) -> pd.DataFrame:
        """DoubleML's summary table: ``coef, std err, t, P>|t|, 2.5 %, 97.5 %`` per treatment."""
        import pandas as pd

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
        """The ``--output json`` object: job_id, coef, se, t_stat, pval, ci_95, all_coef, all_se,
        n_obs, n_folds, n_rep, model, score, execution_arn, timings; ``nuisance_loss`` (learner ->
        ``n_rep`` lists of ``n_treat`` losses, DoubleML's layout, None for NaN) and
        ``nuisance_metric`` when the job has them; ``ci_joint_95``, ``boot_method`` after a
        bootstrap; ``spec`` (the job's columns, learners and seed) and ``propensity_overlap``
        (IRM, IIVM) as ``result.json`` has them; a job of several parts its ``parts`` and
        ``combined`` result."""
        keys = ("coef", "se", "t_stat", "pval", "ci_95", "all_coef", "all_se", "n_obs", "n_folds",
                "n_rep", "model", "score")  # fmt: skip
        doc = self.doc.to_json_dict()
        out = {"job_id": doc["job_id"], **{k: doc[k] for k in keys}}
        for k in ("ci_joint_95", "boot_method", "nuisance_loss", "nuisance_metric", "spec",
                  "propensity_overlap", "parts", "combined"):  # fmt: skip
            if k in doc:
                out[k] = doc[k]
        out["execution_arn"] = self.execution_arn
        out["timings"] = self.timings
        if self.cost is not None:
            out["cost"] = self.cost
        return out


class EstimateJob(JobHandle, ClientCallbacks):
    """A started estimate job: ``wait()``, ``result()``, ``status()``, ``stats()``; for a model that
    takes its stage inputs and estimate from the client (``ModelDef.client_inputs``), also
    ``client_request()``, ``send_stage_inputs()``, ``send_estimate()`` and ``send_client_failure()``
    (:class:`~fanfit.client.estimate.callbacks.ClientCallbacks`)."""

    kind = "estimate"

    def __init__(self, client: StackClient, job_id: str, execution_arn: str) -> None:
        super().__init__(client, job_id, execution_arn)
        self._result: EstimateResult | None = None

    def result(
        self, timeout: float = 3600.0, *, progress: bool | str | Any = False
    ) -> EstimateResult:
        """Wait for the job and read its result (cached); ``progress`` as in :meth:`wait`."""
        if self._result is None:
            self.wait(timeout, progress=progress)
            key = storage.result_key(self.job_id)
            raw = self.client.store.get_json(key)
            timings = EstimateResultDoc.parse(raw, source=key).timings.to_json_dict()
            timings.update(self.phase_seconds())
            self._result = EstimateResult(raw=raw, timings=timings, job=self)
            self._result.cost = cost_or_none(self)
        return self._result

    def spec(self) -> dml.DMLSpec:
        """The job's validated spec, from the plan Prepare wrote (the first part's in a job of
        several parts: :meth:`part`)."""
        return self._plan().dml

    def part(self, index: int, label: str = "") -> PartJob:
        """A handle on one part of a job of several parts (:func:`submit_parts_job`): its
        estimate, spec, folds and predictions, as a job of one has them.

        Parameters
        ----------
        index : int
            The part, in the order it was submitted.
        label : str
            How the part is named in messages (its label in the plan when empty).
        """
        return PartJob(self, index, label)

    def _plan(self) -> EstimatePlan:
        """The job's plan (``plan.json``, written by Prepare), parsed through its model."""
        key = storage.plan_key(self.job_id)
        return EstimatePlan.parse(self.client.store.get_json(key), source=key)

    def folds(self) -> np.ndarray:
        """The job's folds, int64 of shape (n_obs, n_rep): the test fold of each row and repetition."""
        return np.asarray(self.client.store.get_array(self._plan().folds_key))

    def _predictions_at(self, key: str) -> dict[str, dict[str, np.ndarray]]:
        from fanfit.dml.interop import predictions_from_arrays

        if not self.client.store.exists(key):
            raise errors.InvalidJobError(
                f"job {self.job_id} has no stored out-of-fold predictions ({key}); it was aggregated "
                "by an older fanfit: run it again"
            )
        return predictions_from_arrays(self.client.store.get_arrays(key))

    def predictions(self) -> dict[str, dict[str, np.ndarray]]:
        """The out-of-fold predictions the estimate was aggregated from, in DoubleML's
        ``external_predictions`` layout: ``{treatment: {"ml_l": ndarray (n_obs, n_rep), ...}}``.

        Raises
        ------
        fanfit.errors.InvalidJobError
            If the job has none stored (it was aggregated by a fanfit before they were kept).
        """
        return self._predictions_at(self.result().doc.predictions_key)

    def models(self) -> dict[str, Any]:
        """The fitted estimators of a job submitted with ``store_models=True``, by unit key
        (``'s0-t0-r1-f2-ml_l'``: :class:`fanfit.dml.FitUnit`), read from the shards' objects and
        built by :func:`fanfit.learners.persist.loads` (no pickle; only allow-listed types).

        Raises
        ------
        fanfit.errors.InvalidJobError
            The job stored none (it ran without ``store_models``).
        fanfit.errors.InvalidLearnerError
            A stored model holds a type outside the allow-list (it is not loaded).
        """
        from fanfit.learners.persist import loads

        out: dict[str, Any] = {}
        for stage in range(self._plan().n_stages):
            for key in self.client.store.list_keys(storage.preds_prefix(self.job_id, stage)):
                for name, value in self.client.store.get_arrays(key).items():
                    if name.startswith(storage.MODEL_PREFIX):
                        out[name[len(storage.MODEL_PREFIX) :]] = loads(np.asarray(value).tobytes())
        if not out:
            raise errors.InvalidJobError(
                f"job {self.job_id} stored no models: submit it with store_models=True"
            )
        return out

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
        plan = self._plan()
        spec = plan.dml
        if data is None:
            names, values = self.client.store.get_data(plan.data_key)
        else:
            names, values = to_matrix(read_table(data, self.client.s3), list(spec.used_cols))
            if storage.encode_data(names, values)[0] != plan.data_key:
                raise errors.InvalidDataError(
                    f"the columns {', '.join(spec.used_cols)} of this data differ from the data job "
                    f"{self.job_id} ran on; pass the same file, or no data to use the job's copy"
                )
        dml_data = dml.validate_data(spec, names, values)
        folds = self.client.store.get_array(plan.folds_key)
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
        """Wall seconds of prepare, cross-fitting and aggregate, from the execution's history;
        none when the execution is gone (a restarted local stack keeps job records and results,
        not executions)."""
        out = {"prepare_s": 0.0, "crossfit_s": 0.0, "aggregate_s": 0.0}
        entered: dict[str, Any] = {}
        sfn = self.client.sfn
        pages = sfn.get_paginator("get_execution_history").paginate(executionArn=self.execution_arn)
        try:
            events = [ev for page in pages for ev in page["events"]]
        except sfn.exceptions.ExecutionDoesNotExist:
            return {}
        for ev in events:
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


class PartJob:
    """One part of a job of several parts (:meth:`EstimateJob.part`): what a job of one offers
    of its estimate (``result``, ``spec``, ``folds``, ``predictions``), read from the job's
    ``result.json`` (:attr:`~fanfit.jobs.documents.estimate.EstimateResultDoc.parts`) and plan.

    Attributes
    ----------
    job : EstimateJob
    index : int
    job_id, execution_arn : str
        The job's.
    """

    def __init__(self, job: EstimateJob, index: int, label: str = "") -> None:
        self.job, self.index, self._label = job, index, label
        self.job_id, self.execution_arn = job.job_id, job.execution_arn

    @property
    def label(self) -> str:
        """The part's label (``"quantile 0.5 of treatment 1"``)."""
        return self._label or self.job._plan().labels[self.index]

    def result(
        self, timeout: float = 3600.0, *, progress: bool | str | Any = False
    ) -> EstimateResult:
        """Wait for the job (``timeout`` seconds; ``progress`` as :meth:`EstimateJob.wait`), then
        the part's estimate, with the job's timings.

        Raises
        ------
        fanfit.errors.JobFailedError
            The job failed or did not end within ``timeout``.
        fanfit.errors.InvalidJobError
            The job has no such part.
        """
        whole = self.job.result(timeout, progress=progress)
        parts = whole.doc.parts or []
        if not 0 <= self.index < len(parts):
            raise errors.InvalidJobError(
                f"job {self.job_id} has {len(parts)} parts, not part {self.index}"
            )
        raw = parts[self.index].to_json_dict()
        raw.pop("label")
        raw["timings"] = whole.raw["timings"]
        return EstimateResult(raw=raw, timings=whole.timings, job=self.job, cost=whole.cost)

    def wait(self, timeout: float = 3600.0, *, progress: bool | str | Any = False) -> Any:
        """Wait for the job (:meth:`EstimateJob.wait`)."""
        return self.job.wait(timeout, progress=progress)

    def spec(self) -> dml.DMLSpec:
        """The part's validated spec, from the plan."""
        return self.job._plan().spec(self.index)

    def folds(self) -> np.ndarray:
        """The part's folds, int64 of shape (n_obs, n_rep): the job's (every part's), or its own
        where it selects its rows (a DIDMulti's group-time combination)."""
        key = self.job._plan().part_folds_key(self.index)
        return np.asarray(self.job.client.store.get_array(key))

    def predictions(self) -> dict[str, dict[str, np.ndarray]]:
        """The part's out-of-fold predictions, in DoubleML's ``external_predictions`` layout."""
        return self.job._predictions_at(self.result().doc.predictions_key)
