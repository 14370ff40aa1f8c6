"""Estimate jobs: start one (:func:`submit_estimate`), follow it (:class:`EstimateJob`), read its
result (:class:`EstimateResult`, laid out as DoubleML lays out a fitted model)."""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from fanfit import dml, errors, storage
from fanfit.client.check import (
    CheckedEstimate,
    CheckedSource,
    check_estimate,
    check_estimate_in_place,
    check_gpu_worker,
)
from fanfit.client.data import read_table, to_matrix
from fanfit.client.jobs import JobHandle, StackClient, cost_or_none, record_submission
from fanfit.client.options import EstimateOptions, check_objective
from fanfit.dml.result import loss_from_json
from fanfit.jobs.documents.estimate import (
    EstimatePlan,
    EstimatePrediction,
    EstimateResultDoc,
    EstimateSpec,
    PartSelect,
    PlannedPart,
    PlanPart,
    SpecPart,
)
from fanfit.jobs.states import EstimateState

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EstimateJob",
    "EstimateResult",
    "PartJob",
    "plan_estimate",
    "plan_parts_estimate",
    "same_data",
    "submit_estimate",
    "submit_parts_job",
]

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


class EstimateJob(JobHandle):
    """A started estimate job: ``wait()``, ``result()``, ``status()``, ``stats()``."""

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


def submit_estimate(
    client: StackClient,
    data: Any = None,
    *,
    job_id: str | None = None,
    options: EstimateOptions | None = None,
    **kwargs: Any,
) -> EstimateJob:
    """Check, upload and start an estimate job (:meth:`fanfit.client.Client.submit_estimate`).

    Parameters
    ----------
    client : StackClient
        A :class:`fanfit.client.Client`.
    data : str, path, DataFrame, s3:// URI or CheckedEstimate
        An ``s3://`` URI of a ``.csv``, ``.npz`` or ``.npy`` object in the stack's bucket (or in
        the bucket of its ``ExternalDataBucketName`` parameter) is used in place: only its header
        is read here (:func:`~fanfit.client.check.check_estimate_in_place`) and Prepare reads the
        object. Any other data is read, checked and uploaded (once, by content hash). A
        :class:`~fanfit.client.check.CheckedEstimate` of ``options`` (what
        :func:`~fanfit.client.check.check_estimate` returned for them) is uploaded as checked,
        not checked again (:func:`fanfit.client.parts.submit_parts`).
    job_id : str, optional
        Default ``est-<date>-<time>-<8 hex>``.
    options : EstimateOptions, optional
        The options; or give them as keywords (those of :class:`EstimateOptions`).

    Returns
    -------
    EstimateJob

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
        Before anything is uploaded, when an option, a column, a learner or the folds are wrong.
    fanfit.errors.LambdaLimitError
        The data would not fit a function's memory (:meth:`Client.check_limits`).
    fanfit.errors.GpuWorkerDisabledError
        A Torch learner on a stack without the GPU worker (:func:`~fanfit.client.check.check_gpu_worker`).
    TypeError
        A CheckedEstimate without ``options`` or with keywords.
    """
    checked: CheckedEstimate | CheckedSource | None
    if isinstance(data, CheckedEstimate):  # checked by the caller (fanfit.client.parts)
        if options is None or kwargs:
            raise TypeError(
                "submit_estimate: a CheckedEstimate comes with options=, the options it was "
                "checked with, and no other keywords"
            )
        checked = data
    else:
        # s3:// data in the stack's (or the external) bucket: checked on its header, used in place.
        checked = check_estimate_in_place(client, data, options=options, **kwargs)
    if checked is None:
        checked = check_estimate(data, s3=client.s3, options=options, **kwargs)
    given = options if options is not None else EstimateOptions.from_keywords(data=data, **kwargs)
    return _launch(client, checked, given, job_id=job_id)


def submit_parts_job(
    client: StackClient,
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
    """Start one job of several parts: a model DoubleML fits as several models (``'qte'``: one
    ``pq``/``cvar``/``lpq`` part per quantile and treatment level; ``'apos'``: one ``apo`` part
    per level) on one data upload, one sample splitting and one set of learners; its units fan out
    together, one barrier per stage serves every part (:attr:`fanfit.jobs.documents.estimate.
    EstimatePlan.parts`). :meth:`EstimateJob.part` gives each part's estimate, spec and predictions.

    With ``selects`` and ``data`` (``'did_multi'``: one ``did`` part per group-time combination)
    the job's one upload is ``data`` (the panel in long format), from which each part selects its
    rows and derives its columns in the pipeline (:class:`~fanfit.jobs.documents.estimate.
    PartSelect`); each part's ``checked`` is then its derived data as the client checked it, and
    its folds (over its own rows) are uploaded per part.

    Parameters
    ----------
    client : StackClient
    model : str
        The job's model (``'qte'``, ``'apos'``).
    labels : sequence of str
        Each part's label (``"quantile 0.5 of treatment 1"``).
    checked : sequence of CheckedEstimate
        Each part checked (:func:`fanfit.client.parts.check_parts`), the same columns, folds and
        learners in each; the first part's data, folds and job options are the job's.
    options : sequence of EstimateOptions
        Each part's options, as checked; the first part's job options (``deadline``,
        ``budget``) are the job's.
    job_id : str, optional
    selects : sequence of PartSelect, optional
        Each part's selection from ``data``, in the parts' order.
    data : (columns, values), optional
        The job's data with ``selects``: column names and an (n_rows, n_cols) float64 array.
    boot_method : {'normal', 'Bayes', 'wild'} or None
        The multiplier bootstrap of the combined result (QTE's effects, APOS's levels and
        contrasts: their joint bands), seeded by the job's seed; None: none.
    n_rep_boot : int, optional
        Its draws (default 500).

    Returns
    -------
    EstimateJob

    Raises
    ------
    fanfit.errors.InvalidJobError
        No part, a label missing, parts on other columns, a bad bootstrap option, ``selects``
        without ``data`` (or not one per part), or a part without folds next to ``selects``.
    fanfit.errors.LambdaLimitError, fanfit.errors.GpuWorkerDisabledError
        As :func:`submit_estimate`.
    """
    selecting = selects is not None or data is not None
    _check_parts(labels, checked, options, one_data=not selecting)
    first = checked[0]
    if boot_method is not None:
        from fanfit.dml.combined import check_bootstrap

        n_rep_boot = 500 if n_rep_boot is None else n_rep_boot
        check_bootstrap(boot_method, n_rep_boot)
    boot = (boot_method, None if boot_method is None else n_rep_boot)
    if selecting:
        if selects is None or data is None or len(selects) != len(checked):
            raise errors.InvalidJobError(
                "parts that select their rows need the data and one selection per part"
            )
        if any(c.folds is None for c in checked):
            raise errors.InvalidJobError("parts that select their rows are given their folds")
        parts = [
            SpecPart(label=label, dml=c.spec.to_dict(), select=select)
            for label, c, select in zip(labels, checked, selects)
        ]
        part_folds = [np.asarray(c.folds) for c in checked]
        return _launch(client, first, options[0], job_id=job_id, model=model, parts=parts,
                       data=(list(data[0]), np.asarray(data[1])), part_folds=part_folds,
                       boot=boot)  # fmt: skip
    parts = [SpecPart(label=label, dml=c.spec.to_dict()) for label, c in zip(labels, checked)]
    return _launch(client, first, options[0], job_id=job_id, model=model, parts=parts, boot=boot)


def _check_parts(
    labels: Sequence[str],
    checked: Sequence[CheckedEstimate],
    options: Sequence[EstimateOptions],
    *,
    one_data: bool = True,
) -> None:
    """One label and one options per checked part and, with ``one_data``, every part on the first
    part's data.

    Raises
    ------
    fanfit.errors.InvalidJobError
        No part, a label or options missing, or a part on other data (naming it).
    """
    if not checked or not len(labels) == len(checked) == len(options):
        raise errors.InvalidJobError(
            f"a job of several parts needs one label and one options per part, got "
            f"{len(labels)} labels and {len(options)} options for {len(checked)} parts"
        )
    first = checked[0]
    for label, part in zip(labels, checked):
        if one_data and not same_data(first, part):
            raise errors.InvalidJobError(
                f"part {label!r} runs on other data than the first part (columns {part.columns} "
                f"against {first.columns}): the parts of one job run on one data object"
            )


def same_data(a: CheckedEstimate, b: CheckedEstimate) -> bool:
    """Whether two checked parts run on the same data object: the same columns and values."""
    return a.columns == b.columns and np.array_equal(a.values, b.values, equal_nan=True)


def _launch(
    client: StackClient,
    checked: CheckedEstimate | CheckedSource,
    given: EstimateOptions,
    *,
    job_id: str | None = None,
    model: str | None = None,
    parts: list[SpecPart] | None = None,
    data: tuple[list[str], np.ndarray] | None = None,
    part_folds: list[np.ndarray] | None = None,
    boot: tuple[str | None, int | None] = (None, None),
) -> EstimateJob:
    """Upload the checked data and folds, write the spec and start the execution; ``data`` in
    place of the checked data (parts that select their rows from it), with each part's folds
    (``part_folds``) in place of the job's."""
    deadline_s, budget_usd = check_objective(given.deadline, given.budget)
    spec, fold_array = checked.spec, checked.folds
    check_gpu_worker(client, learners=spec.learners)  # a Torch learner needs EnableGpuWorker=true
    max_concurrency = checked.max_concurrency
    if max_concurrency is None:
        max_concurrency = (os.cpu_count() or 1) if client.local else None
    if isinstance(checked, CheckedEstimate):
        # Data over a function's memory (or /tmp, or the state limit) is rejected before launch;
        # data used in place is checked by Prepare, which reads it.
        n_rows, n_cols = (data[1] if data is not None else checked.values).shape
        client.check_limits("estimate", n_rows=int(n_rows), n_cols=int(n_cols))

    job_id = job_id or f"est-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    folds_key = None
    if part_folds is not None and parts is not None:
        parts = [
            part.model_copy(update={"folds_key": client.store.put_array(
                storage.input_folds_key(job_id, k), folds)})
            for k, (part, folds) in enumerate(zip(parts, part_folds, strict=True))
        ]  # fmt: skip
    elif fold_array is not None:
        folds_key = client.store.put_array(storage.input_folds_key(job_id), fold_array)
    if data is not None:
        data_key, source = client.store.put_data(*data), None
    elif isinstance(checked, CheckedEstimate):
        data_key, source = client.store.put_data(checked.columns, checked.values), None
    else:
        data_key, source = None, checked.source
    # The document Prepare validates (EstimateSpec), written through its model.
    job = EstimateSpec(
        dml=spec.to_dict(),
        model=model,
        parts=parts,
        data_key=data_key,
        data_source=source,
        folds_key=folds_key,
        max_concurrency=max_concurrency,
        units_per_shard=checked.units_per_shard,
        sharding=checked.sharding,
        weight=checked.weight,
        deadline_s=deadline_s,
        budget_usd=budget_usd,
        boot_method=boot[0],
        n_rep_boot=boot[1],
    )
    key = client.store.put_json(storage.spec_key(job_id), job.to_json_dict())
    started = client.sfn.start_execution(
        stateMachineArn=client.stack.estimate_state_machine_arn,
        name=job_id,
        input=json.dumps({"job_id": job_id, "spec_key": key}),
    )
    record_submission(client, job_id, "estimate", started["executionArn"])
    return EstimateJob(client, job_id, started["executionArn"])


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


def _stack_outputs(client: StackClient) -> dict[str, str]:
    cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    try:
        desc = cfn.describe_stacks(StackName=client.stack.name)["Stacks"][0]
    except Exception as exc:  # botocore ClientError, EndpointConnectionError
        raise errors.StackError(f"cannot read stack {client.stack.name!r}: {exc}") from exc
    return {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}


def _account_concurrency(client: StackClient) -> int:
    """The account's Lambda concurrency (``GetAccountSettings``); AWS's default 1,000 when the
    endpoint does not say."""
    from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY

    lam = client.session.client("lambda", endpoint_url=client.stack.endpoint_url)
    try:
        limit = lam.get_account_settings()["AccountLimit"]["ConcurrentExecutions"]
    except Exception:  # noqa: BLE001 - a stack that does not answer: the default quota
        return DEFAULT_ACCOUNT_CONCURRENCY
    return int(limit) if limit else DEFAULT_ACCOUNT_CONCURRENCY


def plan_estimate(
    client: StackClient,
    data: Any = None,
    *,
    options: EstimateOptions | None = None,
    **kwargs: Any,
) -> EstimatePrediction:
    """Plan an estimate job on the stack without running anything (``fanfit estimate --plan-only``).

    The options and the data are checked as :func:`submit_estimate` checks them; nothing is
    uploaded or started. The plan is Schedule's own (:func:`fanfit.jobs.estimate.wave.
    plan_job`: :func:`~fanfit.jobs.estimate.wave.place` then
    :func:`~fanfit.jobs.estimate.wave.size_placed`), fed with the stack's ThroughputTable
    (output ``ThroughputTableName``), its CrossFit memory sizes (``CrossFitFunctionMemorySizes``),
    whether it has the GPU worker (``GpuWorkerEnabled``) and the account's Lambda concurrency.
    On the local stack the predicted seconds are the sizing's (the local model); on any other
    stack they and the cost come from a simulation of the AWS account (its concurrency, cold
    starts, the Distributed Map's child start rate, state transitions and S3 round trips:
    :func:`fanfit.jobs.estimate.projection.project_prediction`, :mod:`fanfit.sched.simulate`).

    Returns
    -------
    EstimatePrediction
        Each stage's placement and shards, ``predicted_wall_s`` and ``predicted_cost_usd``
        (``simulation``: the account model and the simulated stages, off the local stack).

    Raises
    ------
    fanfit.errors.InvalidJobError, fanfit.errors.InvalidLearnerError, fanfit.errors.InvalidDataError
        As :func:`submit_estimate`.
    fanfit.errors.StackError
        The stack's outputs cannot be read.
    """
    checked = check_estimate(data, s3=client.s3, options=options, **kwargs)
    given = options if options is not None else EstimateOptions.from_keywords(data=data, **kwargs)
    return _plan_checked(client, checked, given)


def plan_parts_estimate(
    client: StackClient,
    model: str,
    labels: Sequence[str],
    checked: Sequence[CheckedEstimate],
    options: Sequence[EstimateOptions],
) -> EstimatePrediction:
    """Plan a job of several parts without running anything (``fanfit estimate --model qte|apos
    --plan-only``): as :func:`plan_estimate`, with the plan the job would run (every part's units
    in each stage's waves together, :attr:`~fanfit.jobs.documents.estimate.EstimatePlan.parts`).

    Parameters
    ----------
    client : StackClient
    model : str
        ``'qte'`` or ``'apos'``.
    labels, checked, options
        As :func:`submit_parts_job`.

    Returns
    -------
    EstimatePrediction
        With ``model`` and ``parts`` (each part's units per stage).

    Raises
    ------
    fanfit.errors.InvalidJobError
        As :func:`submit_parts_job` (a label missing, parts on other data).
    fanfit.errors.StackError
        The stack's outputs cannot be read.
    """
    _check_parts(labels, checked, options)
    parts = [PlanPart(label=label, dml=c.spec) for label, c in zip(labels, checked)]
    return _plan_checked(client, checked[0], options[0], model=model, parts=parts)


def _plan_checked(
    client: StackClient,
    checked: CheckedEstimate,
    given: EstimateOptions,
    *,
    model: str | None = None,
    parts: list[PlanPart] | None = None,
) -> EstimatePrediction:
    """The prediction of a checked job (of one, or of ``parts``) on the client's stack."""
    from fanfit.jobs.estimate.data import unit_signature
    from fanfit.jobs.estimate.projection import project_prediction
    from fanfit.jobs.estimate.wave import plan_job
    from fanfit.sched.resources import crossfit_memory_sizes
    from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY
    from fanfit.sched.throughput import EwmaThroughput, ThroughputEntry

    deadline_s, budget_usd = check_objective(given.deadline, given.budget)
    spec = checked.spec
    validated = checked.data
    folds = checked.folds if checked.folds is not None else dml.draw_spec_folds(spec, validated)
    n_obs = int(validated.y.shape[0])
    max_concurrency = checked.max_concurrency
    if max_concurrency is None:  # as submit_estimate and Prepare choose it
        max_concurrency = (os.cpu_count() or 1) if client.local else DEFAULT_ACCOUNT_CONCURRENCY
    specs = [p.dml for p in parts] if parts else [spec]
    plan = EstimatePlan(
        job_id="plan-only", dml=spec, model=model, parts=parts, data_key="", folds_key="",
        n_obs=n_obs, n_stages=max(dml.n_stages(s) for s in specs),
        max_concurrency=max_concurrency, units_per_shard=checked.units_per_shard,
        sharding=checked.sharding or "auto", weight=checked.weight, spec_sha256="",
        deadline_s=deadline_s, budget_usd=budget_usd,
    )  # fmt: skip
    outputs = _stack_outputs(client)
    sizes = crossfit_memory_sizes(outputs.get("CrossFitFunctionMemorySizes") or "1769")
    n_features = len(spec.x_cols) + spec.n_treat - 1
    signatures = {
        unit_signature(spec, u, n_obs, n_features)
        for stage in range(plan.n_stages)
        for u in plan.units(stage)
    }
    entries: list[ThroughputEntry] = []
    table = outputs.get("ThroughputTableName")
    if table:
        ddb = client.session.client("dynamodb", endpoint_url=client.stack.endpoint_url)
        loaded = storage.ThroughputRecords(table, ddb).load(signatures)
        entries = [ThroughputEntry.from_dict(e) for e in loaded]
    prediction = plan_job(
        plan,
        folds,
        EwmaThroughput(entries=entries),
        stack=client.stack.name,
        memory_sizes=sizes,
        gpu_enabled=outputs.get("GpuWorkerEnabled") == "true",
        account_concurrency=_account_concurrency(client),
    )
    if parts:
        planned = [
            PlannedPart(label=p.label, n_units=[sum(1 for u in plan.units(s) if u.part == k)
                                                for s in range(plan.n_stages)])
            for k, p in enumerate(parts)
        ]  # fmt: skip
        prediction = prediction.model_copy(update={"model": model, "parts": planned})
    if client.local:
        return prediction
    return project_prediction(prediction, spec)[0]
