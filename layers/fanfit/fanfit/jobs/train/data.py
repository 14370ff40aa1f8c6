"""What every step of a train job reads and writes: the plan, the cached data, the model state.

- :func:`read_plan`: the job's :class:`~fanfit.jobs.documents.train.TrainPlan` (``plan.json``).
- :func:`cached_data`, :func:`plan_xy`: the data object (content-addressed, so a warm environment
  keeps it between rounds) and the plan's features (standardised) and target (class indices).
- :func:`get_state`, :func:`put_state`: the model at the start of a round
  (``train/state/<r>.npz``: its arrays and a ``__meta__`` :class:`~fanfit.jobs.documents.train.StateMeta`)
  as a :class:`fanfit.train.model.ModelState`.
- :func:`put_group_state`, :func:`worker_params`, :func:`full_state`: DS-Sync's models, one per
  group (``train/state/<r>/groups/<g>.npz``), the state object holding only the meta and the groups;
  a worker reads only its own group's model, TrainFinalize every group's.
- :func:`signature`: the workload signature of one worker step (the throughput table's key).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.train import RoundPlan, StateMeta, TrainPlan
from fanfit.sched.throughput import workload_signature
from fanfit.train.model import ModelState
from fanfit.train.models import model_for
from fanfit.train.sgd import WorkerGradient, sgd_step

__all__ = [
    "cached_data",
    "full_state",
    "get_state",
    "get_state_groups",
    "plan_xy",
    "put_group_state",
    "put_state",
    "put_state_arrays",
    "read_plan",
    "read_round_plan",
    "signature",
    "stepped_parts",
    "stepped_partial",
    "worker_params",
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


def put_group_state(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    meta: dict[str, Any],
    groups: list[list[int]],
) -> str:
    """Write the DS-Sync state of round ``round_index`` whose models are in group objects.

    The group objects (:func:`fanfit.storage.train_group_state_key`, one per group, written first
    by each group's reduce, or by TrainInit for round 0) hold the models; this object holds only
    ``meta`` and ``groups`` (:attr:`StateMeta.groups`), and its presence marks the round's model as
    complete (resume starts at the first round without it).

    Parameters
    ----------
    meta : dict
        The :class:`StateMeta` fields (``phase``, ``n_iter``).
    groups : list of list of int
        The groups whose models the group objects hold, group ``g`` at index ``g``.

    Returns
    -------
    str
        The state object's key.
    """
    return put_state_arrays(store, job_id, round_index, {}, {**meta, "groups": groups})


def _group_of(groups: list[list[int]], worker: int) -> int:
    for g, members in enumerate(groups):
        if worker in members:
            return g
    raise InvalidJobError(f"worker {worker} is in none of the state's groups {groups}")


def worker_params(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    state: ModelState,
    worker: int,
    groups: list[list[int]] | None,
) -> dict[str, np.ndarray]:
    """Worker ``worker``'s DS-Sync model at the start of round ``round_index``.

    Parameters
    ----------
    state : ModelState
        :func:`get_state` of the round (its arrays stacked per worker when ``groups`` is None).
    groups : list of list of int or None
        :attr:`StateMeta.groups` of the state (:func:`get_state_groups`): the model is read from
        the object of the worker's group only (one model, not ``n_workers`` of them).

    Raises
    ------
    InvalidJobError
        The worker is in none of ``groups``.
    """
    if groups is None:
        return {k: v[worker] for k, v in state.arrays.items()}
    key = storage.train_group_state_key(job_id, round_index, _group_of(groups, worker))
    return store.get_arrays(key)


def get_state_groups(
    store: storage.JobStore, job_id: str, round_index: int
) -> tuple[ModelState, list[list[int]] | None]:
    """:func:`get_state` and the state's :attr:`StateMeta.groups` (None: arrays in the state)."""
    key = storage.train_state_key(job_id, round_index)
    arrays = store.get_arrays(key)
    meta = StateMeta.parse(json.loads(str(arrays.pop("__meta__"))), source=key)
    state = ModelState(arrays, meta.phase, meta.n_iter, meta.converged, meta.inertia)
    return state, meta.groups


def full_state(store: storage.JobStore, job_id: str, round_index: int) -> ModelState:
    """The model at the start of round ``round_index`` with every worker's arrays: a DS-Sync
    state held in group objects is read group by group and stacked per worker (the leading
    ``(n_workers,)`` axis of :class:`~fanfit.train.model.ModelState`); any other state as
    :func:`get_state`. TrainFinalize's global merge reads it."""
    state, groups = get_state_groups(store, job_id, round_index)
    if groups is None:
        return state
    models = [
        store.get_arrays(storage.train_group_state_key(job_id, round_index, g))
        for g in range(len(groups))
    ]
    n = sum(len(m) for m in groups)
    of = {i: g for g, members in enumerate(groups) for i in members}
    arrays = {k: np.stack([models[of[i]][k] for i in range(n)]) for k in models[0]}
    return state.with_arrays(arrays)


#: Prefix of a DS-Sync partial's arrays: the worker's stepped model (:func:`stepped_partial`).
STEPPED_PREFIX = "model_"


def stepped_partial(
    own: dict[str, np.ndarray], partial: dict[str, np.ndarray], lr: float, l2: float
) -> dict[str, np.ndarray]:
    """A DS-Sync worker's partial: its own model stepped with its gradient.

    :func:`fanfit.train.sgd.sgd_step` of ``own`` with the gradient of ``partial``
    (:meth:`fanfit.train.sgd.WorkerGradient.to_arrays`), the first half of
    :func:`fanfit.train.sgd.dssync_step` done by the worker; the group's reduce averages the
    members' stepped models (the second half). Same arithmetic, so the same model, bit for bit.

    Returns
    -------
    dict
        ``model_<key>`` per parameter (same shapes as ``own``), ``loss`` and ``n_samples``.
    """
    g = WorkerGradient.from_arrays(partial)
    stepped = sgd_step(own, g.grads, lr, l2)
    return {
        **{f"{STEPPED_PREFIX}{k}": v for k, v in stepped.items()},
        "loss": np.asarray(g.loss),
        "n_samples": np.asarray(g.n_samples),
    }


def stepped_parts(partial: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float, int]:
    """Inverse of :func:`stepped_partial`: the stepped model, the loss and the batch.

    Raises
    ------
    InvalidJobError
        A partial without a stepped model (a gradient's, :func:`stepped_partial` not applied).
    """
    model = {
        k[len(STEPPED_PREFIX) :]: v for k, v in partial.items() if k.startswith(STEPPED_PREFIX)
    }
    if not model:
        raise InvalidJobError(
            f"a DS-Sync partial must hold the worker's stepped model ({STEPPED_PREFIX}*); "
            f"got {sorted(partial)}"
        )
    return model, float(partial["loss"]), int(partial["n_samples"])


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
