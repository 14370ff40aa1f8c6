"""CrossFit: fit the units of one shard and write their out-of-fold predictions to one object."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from fanfit import dml, storage
from fanfit.dml.models import model_def
from fanfit.errors import InvalidJobError, ShardStoppedError
from fanfit.jobs.documents.estimate import CrossFitOutput, Shard, ShardStats, StageInputs, fit_unit
from fanfit.jobs.documents.train import TrainStop
from fanfit.jobs.estimate.data import load, peak_rss_mb, read_plan
from fanfit.jobs.stop import StopReader, StopWatch
from fanfit.sched.resources import lambda_resource, resource_kind

log = logging.getLogger("fanfit")

_COLD = True

#: Between two units, a shard HEADs its job's stop marker once this many seconds have passed since
#: its last check (and before its first unit): one HEAD costs 6-8 ms on the local stack, so a
#: shard of many short units (a lasso unit fits in about 25 ms) pays at most about 1 % for it,
#: and a stopped job's shard ends within this plus one unit's fit.
STOP_CHECK_S = 1.0
#: During a unit, a watch thread (:class:`fanfit.jobs.stop.StopWatch`, main thread only) HEADs
#: the marker every this many seconds and interrupts the unit's fit when it is there: a unit that
#: fits for minutes stops within about this plus one tree or solver iteration.
UNIT_WATCH_S = 1.0


def crossfit_shard(
    store: storage.JobStore,
    job_id: str,
    plan_key: str,
    stage: int,
    shard: Shard | Mapping[str, Any],
    memory_mb: int = 0,
    resource_name: str | None = None,
    execution_arn: str = "",
) -> dict[str, Any]:
    """Fit every unit of one shard and write the out-of-fold predictions.

    The units are fitted by :func:`fanfit.dml.fit_predict_units`: those of a TorchMLP learner
    (the GPU worker's) together as one batched model per batch of fits, the others one by one.

    One ``.npz`` object per shard (:func:`fanfit.storage.preds_key`): each unit's predictions under
    its key and, for a unit with an auxiliary array (PQ/LPQ stage 0, :func:`fanfit.dml.
    fit_predict_aux`), that array under :func:`fanfit.storage.aux_array_name` of its key.

    Parameters
    ----------
    store : JobStore
    job_id, plan_key : str
    stage : int
    shard : Shard or dict
        One item of the wave's shard list (:class:`~fanfit.jobs.documents.estimate.Shard`; a dict is
        parsed into it).
    memory_mb : int
        The function's configured memory (for the shard's statistics).
    resource_name : str, optional
        Where the shard ran, for the throughput records: ``lambda-<MB>`` (the default) or the GPU
        worker's ``gpu:<instance type>``.
    execution_arn : str
        The execution the shard runs for: before its first unit and between two units (at most
        every :data:`STOP_CHECK_S` seconds) the shard reads the job's stop marker
        (:func:`fanfit.storage.estimate_stop_key`, :mod:`fanfit.jobs.stop`) and stops when it is
        there for this execution (empty: for any execution); during a unit, in the main thread,
        a :class:`~fanfit.jobs.stop.StopWatch` reads it every :data:`UNIT_WATCH_S` seconds and
        interrupts the unit.

    Returns
    -------
    dict
        The JSON of :class:`~fanfit.jobs.documents.estimate.CrossFitOutput` (what the Lambda and the
        GPU worker, :mod:`fanfit.jobs.gpu`, return): ``preds_key`` (:func:`fanfit.storage.
        preds_key`) and the shard's :class:`~fanfit.jobs.documents.estimate.ShardStats`, which are
        also stored in the predictions object (array ``__stats__``; there ``io_s`` does not count
        the write).

    Raises
    ------
    InvalidJobError
        A unit of another stage; InvalidDocumentError when the shard or the plan does not parse.
    ShardStoppedError
        The job's stop marker of this execution appeared (the job failed or was cancelled): no
        predictions are written, a log line says why.
    """
    global _COLD
    cold, _COLD = _COLD, False
    started = time.time()
    if not isinstance(shard, Shard):
        shard = Shard.parse(shard, source=f"shard of stage {stage}")
    plan = read_plan(store, plan_key)
    # each part's data (its spec's columns and dtypes) and stage inputs, read once per shard
    parts: dict[int, tuple[dml.DMLData, np.ndarray, dict[str, Any]]] = {}
    for part in sorted({doc.part for doc in shard.units}):
        data, folds = load(store, plan, part)
        # stage 0 has inputs only when the client sends them (RDFlex's kernel weights)
        from_client = model_def(plan.spec(part).model).client_inputs
        stage_inputs = (
            StageInputs.parse(store.get_json(storage.stage_inputs_key(job_id, stage, part)))
            if stage > 0 or from_client
            else StageInputs()
        )
        parts[part] = (data, folds, stage_inputs.to_json_dict())
    io_s = time.time() - started
    arrays: dict[str, np.ndarray] = {}
    unit_fit_s: dict[str, float] = {}
    t0 = time.perf_counter()
    units = [fit_unit(doc) for doc in shard.units]
    for unit in units:
        if unit.stage != stage:
            raise InvalidJobError(f"unit {unit.key} belongs to stage {unit.stage}, not {stage}")
    # the TorchMLP units of one learner train together (one batched model per batch of fits);
    # each unit's seconds are then its share of its batch's: the throughput table sees the
    # batch's rows per second. The units of a part run on that part's spec, data and inputs.
    # before every unit (or batch), at most every STOP_CHECK_S seconds, the job's stop marker
    stop = StopReader(store, storage.estimate_stop_key(job_id), execution_arn)
    checked = -math.inf
    done_before = 0  # units of the parts before this one
    done_now = 0  # units fitted when last checked (named in the stop's message)

    def stopped(marker: TrainStop, during: str = "after") -> ShardStoppedError:
        message = (
            f"job {job_id}: shard {shard.shard_id} (stage {stage}) stopped {during} "
            f"{done_now} of {len(shard.units)} units, writing no predictions: "
            f"{marker.describe()}; stop marker {stop.key}"
        )
        log.warning("%s", message)
        return ShardStoppedError(message)

    def check_stop(done: int) -> None:
        nonlocal checked, done_now
        done_now = done_before + done
        if time.perf_counter() - checked < STOP_CHECK_S:
            return
        checked = time.perf_counter()
        marker = stop.read()
        if marker is not None:
            raise stopped(marker)

    batched: dict[str, int] = {}
    fitted: list[tuple[list[Any], list[Any]]] = []  # each part's units and their results
    # a unit that runs long is interrupted by the watch when the marker appears during it (its
    # own reader: the watch thread reads while the main thread's check_stop may read too)
    watch = StopWatch(
        StopReader(store, stop.key, execution_arn),
        UNIT_WATCH_S,
        lambda marker: stopped(marker, "during a unit after"),
    )
    with watch:
        for part, (data, folds, inputs) in parts.items():
            members = [u for u in units if u.part == part]
            results = dml.fit_predict_units(
                plan.spec(part), members, data, folds, inputs, before_unit=check_stop
            )
            fitted.append((members, results))
            done_before += len(members)
    for members, results in fitted:
        for unit, result in zip(members, results, strict=True):
            arrays[unit.key] = result.values
            if result.aux is not None:  # PQ/LPQ stage 0: the fold's preliminary propensities
                arrays[storage.aux_array_name(unit.key)] = result.aux
            if result.model is not None:  # store_models: the fitted estimator (skops bytes)
                arrays[storage.model_array_name(unit.key)] = np.frombuffer(result.model, np.uint8)
            unit_fit_s[unit.key] = result.fit_s
            if result.batch > 1:
                batched[unit.key] = result.batch
    unit_fit_s = {u.key: unit_fit_s[u.key] for u in units}  # in the shard's order
    fit_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    key = storage.preds_key(job_id, stage, shard.shard_id)
    stats = ShardStats(
        shard_id=shard.shard_id,
        stage=stage,
        n_units=len(unit_fit_s),
        unit_fit_s=unit_fit_s,
        started_at=started,
        fit_s=fit_s,
        io_s=io_s,
        memory_mb=memory_mb,
        resource=resource_name or lambda_resource(memory_mb or 1),
        placement=resource_kind(resource_name) if resource_name else "lambda",
        peak_rss_mb=peak_rss_mb(),
        cold_start=cold,
        pid=os.getpid(),
        ended_at=time.time(),
        unit_batch=batched or None,
    )
    arrays["__stats__"] = np.array(json.dumps(stats.to_json_dict(), allow_nan=False))
    store.put_arrays(key, arrays)
    written_s = time.perf_counter() - t1
    output = CrossFitOutput(**{**stats.model_dump(), "io_s": io_s + written_s, "preds_key": key})
    return output.to_json_dict()
