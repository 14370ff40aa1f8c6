"""What every step of a train job reads and writes: the plan, the cached data, the model state.

- :func:`read_plan`: the job's :class:`~fanfit.jobs.documents.train.TrainPlan` (``plan.json``).
- :func:`cached_data`, :func:`plan_xy`: the data object (content-addressed, so a warm environment
  keeps it between rounds) and the plan's features (standardised) and target (class indices).
- :func:`get_state`, :func:`put_state`: the model at the start of a round
  (``train/state/<r>.npz``: its arrays and a ``__meta__`` :class:`~fanfit.jobs.documents.train.StateMeta`)
  as a :class:`fanfit.train.model.ModelState`.
- :func:`signature`: the workload signature of one worker step (the throughput table's key).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import numpy as np

from fanfit import storage
from fanfit.jobs.documents.train import RoundPlan, StateMeta, TrainPlan
from fanfit.sched.throughput import workload_signature
from fanfit.train.model import ModelState
from fanfit.train.models import model_for

__all__ = [
    "cached_data",
    "get_state",
    "plan_xy",
    "put_state",
    "put_state_arrays",
    "read_plan",
    "read_round_plan",
    "signature",
]


def read_plan(store: storage.JobStore, job_id: str) -> TrainPlan:
    """The job's plan.

    Raises
    ------
    JobNotFoundError
        No plan (TrainInit never ran).
    InvalidDocumentError
        A malformed plan, naming the field.
    """
    key = storage.plan_key(job_id)
    return TrainPlan.parse(store.get_json(key), source=key)


def read_round_plan(store: storage.JobStore, job_id: str, round_index: int) -> RoundPlan:
    """Round ``round_index``'s plan (TrainSchedule's)."""
    key = storage.train_round_plan_key(job_id, round_index)
    return RoundPlan.parse(store.get_json(key), source=key)


@lru_cache(maxsize=4)
def cached_data(bucket: str, key: str) -> tuple[tuple[str, ...], np.ndarray]:
    """The data object ``key``: column names and a read-only (n_obs, n_cols) array.

    Data objects are content-addressed: a warm environment keeps them between rounds."""
    columns, values = storage.JobStore(bucket).get_data(key)
    values.setflags(write=False)
    return tuple(columns), values


@lru_cache(maxsize=4)
def _cached_xy(bucket: str, plan_json: str) -> tuple[np.ndarray, np.ndarray | None]:
    plan = TrainPlan.model_validate_json(plan_json)
    columns, values = cached_data(bucket, plan.data_key)
    idx = [columns.index(c) for c in plan.spec.features]
    X = np.ascontiguousarray(values[:, idx])
    if plan.mean is not None:
        X = (X - np.asarray(plan.mean)) / np.asarray(plan.scale)
    X.setflags(write=False)
    y = None
    target = plan.spec.target
    if target:
        y = values[:, columns.index(target)]
        if plan.classes is not None:
            y = np.searchsorted(np.asarray(plan.classes, dtype=np.float64), y).astype(np.int64)
        y.setflags(write=False)
    return X, y


def plan_xy(store: storage.JobStore, plan: TrainPlan) -> tuple[np.ndarray, np.ndarray | None]:
    """Features (n_obs, d), standardised if the plan says so, and the target (n_obs,) or None;
    class labels are mapped to ``0..K-1`` for the classifiers. Cached per plan."""
    return _cached_xy(store.bucket, plan.model_dump_json())


def put_state(store: storage.JobStore, job_id: str, round_index: int, state: ModelState) -> str:
    """Write the model at the start of round ``round_index``; returns its key."""
    return put_state_arrays(store, job_id, round_index, state.arrays, state.meta())


def put_state_arrays(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    arrays: dict[str, np.ndarray],
    meta: dict[str, Any],
) -> str:
    """Write a model state from its arrays and its meta (a :class:`StateMeta` dict).

    Raises
    ------
    InvalidDocumentError
        A malformed meta.
    """
    checked = StateMeta.parse(meta).to_json_dict()
    return store.put_arrays(
        storage.train_state_key(job_id, round_index),
        {**arrays, "__meta__": np.array(json.dumps(checked, allow_nan=False))},
    )


def get_state(store: storage.JobStore, job_id: str, round_index: int) -> ModelState:
    """The model at the start of round ``round_index`` (:func:`put_state`)."""
    key = storage.train_state_key(job_id, round_index)
    arrays = store.get_arrays(key)
    meta = StateMeta.parse(json.loads(str(arrays.pop("__meta__"))), source=key)
    return ModelState(arrays, meta.phase, meta.n_iter, meta.converged, meta.inertia)


def signature(plan: TrainPlan) -> str:
    """The workload signature of one worker step: model, features, outputs (or clusters)."""
    spec = plan.spec
    return workload_signature(
        "train",
        spec.model,
        len(spec.features),
        n_outputs=plan.n_outputs,
        sync=spec.sync,
        **model_for(spec.model).workload_extra(spec),
    )
