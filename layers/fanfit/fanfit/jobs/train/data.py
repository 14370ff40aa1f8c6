"""What every step of a train job reads and writes: the plan, the cached data, the model state.

- :func:`read_plan`: the job's :class:`~fanfit.jobs.documents.train.TrainPlan` (``plan.json``).
- :func:`cached_data`, :func:`plan_xy`: the data object (content-addressed, so a warm environment
  keeps it between rounds) and the plan's features (standardised) and target (class indices).
- :func:`get_state`, :func:`put_state`: the model at the start of a round
  (``train/state/<r>.npz``: its arrays and a ``__meta__`` :class:`~fanfit.jobs.documents.train.StateMeta`)
  as a :class:`fanfit.train.model.ModelState`.
- :func:`put_group_state`, :func:`worker_params`, :func:`group_average`, :func:`full_state`:
  DS-Sync's models, one per group, the state object holding only the meta and the groups: round 0's
  in one object (``train/state/0/groups/0.npz``), a later round's not stored at all but the
  batch-weighted average of the group's partials of the round before (each member's stepped
  model), which each member computes at the start of its step (a group all-reduce, no reducer);
  TrainFinalize computes every group's.
- :func:`signature`: the workload signature of one worker step (the throughput table's key).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidJobError, JobNotFoundError
from fanfit.jobs.documents.train import RoundPlan, StateMeta, TrainPlan
from fanfit.sched.throughput import workload_signature
from fanfit.train.model import ModelState
from fanfit.train.models import model_for
from fanfit.train.sgd import WorkerGradient, average_params, sgd_step

__all__ = [
    "cached_data",
    "full_state",
    "get_state",
    "get_state_groups",
    "group_average",
    "group_of",
    "own_partial",
    "plan_xy",
    "put_group_state",
    "put_state",
    "put_state_arrays",
    "read_plan",
    "read_round_plan",
    "remember_partial",
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
    from_partials: bool = False,
) -> str:
    """Write the DS-Sync state of round ``round_index`` whose models are not in this object.

    Round 0 (TrainInit): the group objects (:func:`fanfit.storage.train_group_state_key`, one group
    of every worker) hold the model. A later round (``from_partials``, written by the TrainSchedule
    of the round or by TrainFinalize, once the round before's record is merged): group ``g``'s model
    is :func:`group_average` of its members' partials of round ``round_index - 1``. This object
    holds only ``meta``, ``groups`` (:attr:`StateMeta.groups`) and the flag, and its presence marks
    the round's model as complete (resume starts at the first round without it).

    Parameters
    ----------
    meta : dict
        The :class:`StateMeta` fields (``phase``, ``n_iter``).
    groups : list of list of int
        The groups whose models the state holds, group ``g`` at index ``g``.
    from_partials : bool
        The groups' models are their averaged partials of round ``round_index - 1``.

    Returns
    -------
    str
        The state object's key.
    """
    extra: dict[str, Any] = {"groups": groups}
    if from_partials:
        extra["from_partials"] = True
    return put_state_arrays(store, job_id, round_index, {}, {**meta, **extra})


def group_of(groups: list[list[int]], worker: int) -> int:
    """The index of the group holding ``worker``.

    Raises
    ------
    InvalidJobError
        The worker is in none of ``groups``.
    """
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
    meta: StateMeta,
) -> dict[str, np.ndarray]:
    """Worker ``worker``'s DS-Sync model at the start of round ``round_index``.

    Parameters
    ----------
    state : ModelState
        :func:`get_state` of the round (its arrays stacked per worker when ``meta.groups`` is None).
    meta : StateMeta
        The state's meta (:func:`get_state_groups`): with ``groups``, the model of the worker's
        group only: round 0's group object, or (``from_partials``) :func:`group_average` of its
        group's partials of the round before (one model, not ``n_workers`` of them).

    Raises
    ------
    InvalidJobError
        The worker is in none of the groups, or a member's partial is missing.
    """
    if meta.groups is None:
        return {k: v[worker] for k, v in state.arrays.items()}
    group = group_of(meta.groups, worker)
    if meta.from_partials:
        return group_average(store, job_id, round_index - 1, meta.groups[group])
    return store.get_arrays(storage.train_group_state_key(job_id, round_index, group))


def group_average(
    store: storage.JobStore, job_id: str, round_index: int, members: list[int]
) -> dict[str, np.ndarray]:
    """DS-Sync's group all-reduce: the model of a group after round ``round_index``.

    Reads the members' partials of the round (``train_partial_key``, each the member's model
    stepped with its gradient, :func:`stepped_partial`) and averages them weighted by their
    batches, :math:`\\sum_{j \\in G} (b_j / B_G)\\, \\mathrm{step}(w_j, g_j)` (equal weights when
    the group had no samples): the second half of :func:`fanfit.train.sgd.dssync_step`, in the
    members' ascending order, so every member computes the same model, bit for bit that of the
    in-process reference.

    Parameters
    ----------
    round_index : int
        The round whose partials are averaged (the model is that of round ``round_index + 1``).
    members : list of int
        The group's workers, ascending (:attr:`StateMeta.groups`).

    Returns
    -------
    dict
        The group's parameters (same shapes as a worker's model).

    A partial this environment wrote last (:func:`remember_partial`) is taken from memory, not
    read back: a worker keeps its own model, as in an all-reduce; when a warm environment runs a
    member of the group whose partial it wrote, one read fewer.

    Raises
    ------
    InvalidJobError
        A member's partial is missing or holds no stepped model.
    """
    keys = [storage.train_partial_key(job_id, round_index, int(i)) for i in members]
    held = {k: v for k in keys if (v := own_partial(store.bucket, k)) is not None}
    missing = [k for k in keys if k not in held]

    def read(key: str) -> dict[str, np.ndarray]:
        try:
            return store.get_arrays(key)
        except JobNotFoundError as exc:
            worker = members[keys.index(key)]
            raise InvalidJobError(
                f"round {round_index}: worker {worker} wrote no partial ({key})"
            ) from exc

    # the members' partials are read at once (S3 GETs in threads), then averaged in members' order
    with ThreadPoolExecutor(max_workers=max(1, len(missing))) as pool:
        held.update(zip(missing, pool.map(read, missing)))
    stepped: list[dict[str, np.ndarray]] = []
    n_samples: list[int] = []
    for key in keys:
        model, _, n = stepped_parts(held[key])
        stepped.append(model)
        n_samples.append(n)
    b = np.asarray(n_samples, dtype=np.float64)
    weights = b / b.sum() if b.sum() > 0 else np.full(b.size, 1.0 / b.size)
    return average_params(stepped, weights)


def get_state_groups(
    store: storage.JobStore, job_id: str, round_index: int
) -> tuple[ModelState, StateMeta]:
    """:func:`get_state` and the state's :class:`StateMeta` (its ``groups`` None: the arrays are
    in the state)."""
    key = storage.train_state_key(job_id, round_index)
    arrays = store.get_arrays(key)
    meta = StateMeta.parse(json.loads(str(arrays.pop("__meta__"))), source=key)
    state = ModelState(arrays, meta.phase, meta.n_iter, meta.converged, meta.inertia)
    return state, meta


def full_state(store: storage.JobStore, job_id: str, round_index: int) -> ModelState:
    """The model at the start of round ``round_index`` with every worker's arrays: a DS-Sync
    state is computed group by group (:func:`worker_params` of each group's first member) and
    stacked per worker (the leading ``(n_workers,)`` axis of
    :class:`~fanfit.train.model.ModelState`); any other state as :func:`get_state`.
    TrainFinalize's global merge reads it."""
    state, meta = get_state_groups(store, job_id, round_index)
    if meta.groups is None:
        return state
    groups = meta.groups
    models = [worker_params(store, job_id, round_index, state, g[0], meta) for g in groups]
    n = sum(len(m) for m in groups)
    of = {i: g for g, members in enumerate(groups) for i in members}
    arrays = {k: np.stack([models[of[i]][k] for i in range(n)]) for k in models[0]}
    return state.with_arrays(arrays)


#: DS-Sync: the partial this environment wrote last, ``(bucket, key) -> arrays`` (one entry).
_OWN_PARTIAL: dict[tuple[str, str], dict[str, np.ndarray]] = {}


def remember_partial(bucket: str, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Keep the DS-Sync partial just written to ``key`` (its arrays, as written) in this
    environment's memory for :func:`group_average`; it replaces the one kept before. A partial's
    key names its job, round and worker, and a step rewrites it only with the same arrays (the
    step is deterministic), so what is kept cannot go stale."""
    _OWN_PARTIAL.clear()
    _OWN_PARTIAL[(bucket, key)] = arrays


def own_partial(bucket: str, key: str) -> dict[str, np.ndarray] | None:
    """The partial kept by :func:`remember_partial` when it is ``key``'s; None otherwise."""
    return _OWN_PARTIAL.get((bucket, key))


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
