"""What the steps of an estimate read: the plan, the data and folds (cached in a warm environment),
the shards' predictions and statistics, the workload signature of a unit, and what Schedule's
phases read of the stage being scheduled (:class:`StageContext`)."""

from __future__ import annotations

import dataclasses
import json
import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fanfit import dml, storage
from fanfit.dml.gt_subsets import gt_subset
from fanfit.dml.nuisance_params import unit_learner
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.estimate import EstimatePlan, PartSelect, ShardStats, StageSchedule
from fanfit.sched.throughput import workload_signature


@dataclass(frozen=True)
class StageContext:
    """What every phase of Schedule reads of the stage being scheduled (:mod:`fanfit.jobs.
    estimate.wave`; the job's completion figures, :func:`fanfit.jobs.estimate.demand.
    completion_figures`)."""

    job_id: str
    stage: int
    plan: EstimatePlan
    #: the job's folds, or each part's where the parts select their rows (:func:`stage_folds`)
    folds: np.ndarray | Mapping[int, np.ndarray]
    n_obs: int
    n_features: int
    units: list[dml.FitUnit]
    #: unit key -> workload signature
    signatures: dict[str, str]


@lru_cache(maxsize=8)
def cached_data(bucket: str, key: str) -> tuple[tuple[str, ...], np.ndarray]:
    """``(columns, values)`` of a data object, read-only; kept between shards of a warm environment
    (data objects are content-addressed, so a key's content never changes)."""
    columns, values = storage.JobStore(bucket).get_data(key)
    values.setflags(write=False)
    return tuple(columns), values


@lru_cache(maxsize=8)
def cached_folds(bucket: str, key: str) -> np.ndarray:
    """A job's folds, (n_obs, n_rep) int64, read-only (they never change once Prepare wrote them)."""
    folds = storage.JobStore(bucket).get_array(key)
    folds.setflags(write=False)
    return folds


def peak_rss_mb() -> float:
    """Peak resident memory of this process (the function's environment) so far, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def read_plan(store: storage.JobStore, key: str) -> EstimatePlan:
    """The plan at ``key`` (:func:`fanfit.storage.plan_key`).

    Raises
    ------
    JobNotFoundError
        There is no plan (no such job, or Prepare has not run).
    InvalidDocumentError
        The plan does not fit :class:`~fanfit.jobs.documents.estimate.EstimatePlan`.
    """
    return EstimatePlan.parse(store.get_json(key), source=key)


def read_schedule(store: storage.JobStore, job_id: str, stage: int) -> StageSchedule:
    """A stage's schedule (:func:`fanfit.storage.schedule_key`)."""
    key = storage.schedule_key(job_id, stage)
    return StageSchedule.parse(store.get_json(key), source=key)


@lru_cache(maxsize=32)
def cached_selection(
    bucket: str, key: str, select_json: str, x_cols: tuple[str, ...]
) -> tuple[tuple[str, ...], np.ndarray]:
    """``(columns, values)`` a part selects and derives from a data object (``select_json``: its
    :class:`~fanfit.jobs.documents.estimate.PartSelect` as JSON; :func:`select_part`), read-only;
    kept between shards of a warm environment as :func:`cached_data`."""
    columns, values = cached_data(bucket, key)
    select = PartSelect.parse(json.loads(select_json), source="the part's select")
    derived_cols, derived = select_part(select, columns, values, x_cols)
    derived.setflags(write=False)
    return tuple(derived_cols), derived


def select_part(
    select: PartSelect, columns: Sequence[str], values: np.ndarray, x_cols: Sequence[str]
) -> tuple[list[str], np.ndarray]:
    """The rows and columns a part selects from the job's data: one group-time combination of a
    DIDMulti (:func:`fanfit.dml.gt_subsets.gt_subset`, DoubleML 0.11.4's
    ``DoubleMLDIDBinary._preprocess_data``, or ``DoubleMLDIDCSBinary``'s), with the covariates
    ``x_cols`` of the part's spec.

    Returns
    -------
    columns : list of str
        ``[*x_cols, 'G_indicator', 'y_diff']``; repeated cross-sections
        ``[*x_cols, y_col, 'G_indicator', 't_indicator']``.
    values : ndarray of shape (n_rows, n_cols), float64

    Raises
    ------
    InvalidDataError
        As :func:`~fanfit.dml.gt_subsets.gt_subset` (a column missing, no control unit, ...).
    """
    return gt_subset(
        columns, values, id_col=select.id_col, t_col=select.t_col, g_col=select.g_col,
        y_col=select.y_col, x_cols=x_cols, g_value=select.g_value,
        t_value_pre=select.t_value_pre, t_value_eval=select.t_value_eval,
        control_group=select.control_group, anticipation_periods=select.anticipation_periods,
        never_treated=select.never_treated, panel=select.panel,
    )  # fmt: skip


def part_data(store: storage.JobStore, plan: EstimatePlan, part: int = 0) -> dml.DMLData:
    """The validated data of one ``part`` of a plan (its spec's columns and dtypes; part 0 in a
    job of one): the data object's columns, or those the part selects and derives from it
    (:attr:`~fanfit.jobs.documents.estimate.PlanPart.select`, :func:`select_part`).

    Raises
    ------
    InvalidDataError
        As :func:`fanfit.dml.validate_data`, or :func:`select_part`.
    """
    spec = plan.spec(part)
    select = plan.parts[part].select if plan.parts else None
    if select is None:
        columns, values = cached_data(store.bucket, plan.data_key)
    else:
        select_json = json.dumps(select.to_json_dict(), sort_keys=True)
        columns, values = cached_selection(
            store.bucket, plan.data_key, select_json, tuple(spec.x_cols)
        )
    return dml.validate_data(spec, list(columns), values)


def load(
    store: storage.JobStore, plan: EstimatePlan, part: int = 0
) -> tuple[dml.DMLData, np.ndarray]:
    """The validated data of one ``part`` of a plan (:func:`part_data`) and its folds,
    (n_obs, n_rep): the job's, or the part's own where it selects its rows
    (:meth:`~fanfit.jobs.documents.estimate.EstimatePlan.part_folds_key`)."""
    data = part_data(store, plan, part)
    return data, cached_folds(store.bucket, plan.part_folds_key(part))


def shard_stats(arrays: dict[str, np.ndarray], source: str) -> ShardStats:
    """The statistics a shard stored in its predictions object (array ``__stats__``)."""
    if "__stats__" not in arrays:
        raise InvalidJobError(f"{source} has no __stats__: not a shard's predictions object")
    return ShardStats.parse(json.loads(str(arrays["__stats__"])), source=f"{source}:__stats__")


def read_shards(
    store: storage.JobStore, job_id: str, stage: int
) -> list[tuple[str, dict[str, np.ndarray]]]:
    """``(key, arrays)`` of every shard's predictions object in a stage's schedule."""
    schedule = read_schedule(store, job_id, stage)
    keys = [
        storage.preds_key(job_id, stage, shard.shard_id)
        for wave in schedule.waves
        for shard in wave.shards
    ]
    return [(key, store.get_arrays(key)) for key in keys]


def stage_outputs(
    store: storage.JobStore, job_id: str, stages: range
) -> dict[int, dict[str, np.ndarray]]:
    """Every array of the shards' predictions objects of ``stages`` (their ``__stats__`` and
    stored models left out), by stage: read once for all parts of a job (:func:`gather_outputs`)."""
    return {
        stage: {
            name: value
            for _, arrays in read_shards(store, job_id, stage)
            for name, value in arrays.items()
            if name != "__stats__" and not name.startswith(storage.MODEL_PREFIX)
        }
        for stage in stages
    }


def gather_outputs(
    store: storage.JobStore,
    job_id: str,
    spec: dml.DMLSpec,
    data: dml.DMLData,
    folds: np.ndarray,
    stages: range,
    part: int = 0,
    outputs: dict[int, dict[str, np.ndarray]] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Assemble every unit's predictions of ``stages`` into DoubleML's layout, and the units'
    auxiliary arrays read from the same objects (``outputs``, :func:`stage_outputs`, when read
    already): those of ``part`` (whose spec ``spec`` is) in a job of several parts.

    Returns
    -------
    preds : dict
        learner key -> ndarray of shape (n_obs, n_rep, n_treat).
    aux : dict
        unit key -> the unit's auxiliary array (:func:`fanfit.storage.aux_array_name`; PQ/LPQ
        stage 0: the fold's preliminary propensities), for the units that stored one; keyed as
        in a job of one (without the part), as :func:`fanfit.dml.stage_inputs` looks them up.

    Raises
    ------
    InvalidJobError
        If a unit's predictions are missing (a shard did not write its object).
    """
    n_obs, n_rep, n_treat = data.y.shape[0], folds.shape[1], data.d.shape[1]
    # the given predictions (DoubleML's external_predictions), which no unit fits
    preds: dict[str, np.ndarray] = dml.put_external_predictions({}, spec, data)
    aux: dict[str, np.ndarray] = {}
    if outputs is None:
        outputs = stage_outputs(store, job_id, stages)
    for stage in stages:
        found = outputs[stage]
        if stage >= dml.n_stages(spec):
            continue  # a part with fewer stages than the job
        for unit in dml.fit_units(spec, stage):
            key = dataclasses.replace(unit, part=part).key
            if key not in found:
                raise InvalidJobError(f"predictions of unit {key} are missing")
            for name in (unit.learner, *dml.fold_scalar_keys(spec)):
                preds.setdefault(name, np.full((n_obs, n_rep, n_treat), np.nan))
            # also unpacks a fold procedure's unit (PQ, CVaR, LPQ: its keys and the fold scalars)
            dml.put_predictions(preds, unit, folds, found[key], spec)
            aux_name = storage.aux_array_name(key)
            if aux_name in found:
                aux[unit.key] = found[aux_name]
    return preds, aux


def unit_signature(spec: dml.DMLSpec, unit: dml.FitUnit, n_obs: int, n_features: int) -> str:
    """The workload signature of a unit: its learner spec (with the unit's nuisance parameters,
    :func:`fanfit.dml.nuisance_params.unit_learner`), role, model and data shape
    (:func:`fanfit.sched.throughput.workload_signature`)."""
    role = dml.learner_name(unit.learner)
    learner = unit_learner(spec, unit.learner, unit.i_treat, unit.i_rep, unit.i_fold, role)
    return workload_signature(
        "estimate",
        {"role": role, **learner.to_dict()},
        n_features,
        n_obs=n_obs,
        model=spec.model,
    )


def stage_folds(store: storage.JobStore, plan: EstimatePlan) -> np.ndarray | dict[int, np.ndarray]:
    """The folds Schedule counts the units' training rows on (:func:`n_train`): the job's, or,
    where the parts select their rows (DIDMulti's combinations), each part's by part index."""
    if plan.parts and plan.parts[0].folds_key:
        return {
            k: cached_folds(store.bucket, plan.part_folds_key(k)) for k in range(len(plan.parts))
        }
    return cached_folds(store.bucket, plan.folds_key)


def n_train(
    folds: np.ndarray | Mapping[int, np.ndarray],
    unit: dml.FitUnit,
    spec: dml.DMLSpec | None = None,
) -> int:
    """Training rows of a unit: the rows of its repetition outside its fold (with the spec's
    ``cluster_cols``: outside its test clusters, :func:`fanfit.dml.train_mask`); ``folds`` the
    job's, or per part (:func:`stage_folds`)."""
    if isinstance(folds, Mapping):
        folds = folds[unit.part]
    if spec is not None and spec.cluster_cols:
        return int(np.count_nonzero(dml.train_mask(spec, folds, unit.i_rep, unit.i_fold)))
    return int(np.count_nonzero(folds[:, unit.i_rep] != unit.i_fold))
