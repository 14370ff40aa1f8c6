"""TrainShard (one function per memory size, or the GPU worker): one worker's step of one round."""

from __future__ import annotations

import json
import os
import resource
import time

import numpy as np

from fanfit import storage
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.train import ShardOutput, ShardRecord, ShardStats
from fanfit.jobs.train.data import (
    get_state_groups,
    group_of,
    own_partial,
    plan_xy,
    read_plan,
    read_round_plan,
    remember_partial,
    signature,
    stepped_partial,
    worker_params,
)
from fanfit.sched.resources import lambda_resource, resource_kind
from fanfit.train.models import model_for

__all__ = ["train_shard"]

_COLD = True


def train_shard(
    store: storage.JobStore,
    job_id: str,
    round_index: int,
    worker: int,
    memory_mb: int = 0,
    resource_name: str | None = None,
) -> dict:
    """One worker's step of one round; writes its partial to ``rounds/<r>/workers/<i>.npz``.

    Under DS-Sync the worker first computes its own model: the average of its round-``r - 1``
    group's partials (:func:`fanfit.jobs.train.data.worker_params`), its part of the group's
    all-reduce; it then steps that model with its gradient and writes the stepped model.

    The step is the model's :meth:`fanfit.train.model.TrainModel.worker_step`:

    On the GPU worker (``resource_name`` of kind ``gpu``) K-Means and the linear models compute in
    PyTorch (:mod:`fanfit.train.torch_steps`; CUDA when present), on a Lambda worker in numpy.

    - K-Means: :func:`fanfit.train.kmeans.kmeans_step` on the worker's consecutive rows
      (:func:`fanfit.train.batches.row_range`; the round's batches cover every row).
    - logreg / linreg: :func:`fanfit.train.sgd.worker_gradient` on its rows of the round's global
      batch (:func:`fanfit.train.batches.batch_rows`), with its own model under DS-Sync.
    - mlp (on the GPU worker): :func:`fanfit.train.mlp.mlp_loss_gradient` on those rows (PyTorch,
      imported by the model's ``device()`` only: float64 on the CPU, float32 on CUDA;
      ``$FANFIT_MLP_DEVICE``).

    Parameters
    ----------
    store : JobStore
    job_id : str
    round_index, worker : int
    memory_mb : int
        The function's configured memory, MB.
    resource_name : str, optional
        Where the step ran: ``lambda-<MB>`` (the default) or the GPU worker's
        ``gpu:<instance type>``.

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.ShardOutput`: ``partial_key``, ``worker``,
        ``round``, ``batch`` (samples), ``compute_s`` (seconds of computation, no I/O), ``io_s``
        (seconds reading the plan, data and model and writing the partial), ``memory_mb``,
        ``resource``, ``cold_start``, ``signature``, ``started_at``, ``ended_at`` (epoch s),
        ``peak_rss_mb``; under DS-Sync ``sync_s`` (seconds averaging the group's partials of the
        round before, :func:`fanfit.jobs.train.data.group_average`, part of ``io_s``).

    Under DS-Sync the worker also writes its :class:`~fanfit.jobs.documents.train.ShardRecord`
    (``train_worker_record_key``: statistics, loss, batch) for the round's record.

    Raises
    ------
    InvalidJobError
        A worker index outside the job.
    """
    global _COLD
    cold, _COLD = _COLD, False
    started = time.time()
    t_io = time.perf_counter()
    plan = read_plan(store, job_id)
    spec = plan.spec
    if not 0 <= worker < len(plan.workers):
        raise InvalidJobError(f"worker must be in 0..{len(plan.workers) - 1}, got {worker}")
    round_plan = read_round_plan(store, job_id, round_index)
    state, meta = get_state_groups(store, job_id, round_index)
    groups = meta.groups
    sync_s = None
    sync_held = None
    if groups is not None and meta.from_partials:
        prior = [
            storage.train_partial_key(job_id, round_index - 1, i)
            for i in groups[group_of(groups, worker)]
        ]
        sync_held = sum(own_partial(store.bucket, k) is not None for k in prior)
    if groups is not None:
        # DS-Sync: this worker's part of its group's all-reduce (no reducer): read the partials of
        # its group of the round before and average them (round 0: the first model), seen as every
        # worker's (a read-only broadcast view, no copy), so the model's worker_step picks it as
        # the worker's own.
        t_sync = time.perf_counter()
        own = worker_params(store, job_id, round_index, state, worker, meta)
        sync_s = time.perf_counter() - t_sync
        n = len(plan.workers)
        state = state.with_arrays({k: np.broadcast_to(v, (n, *v.shape)) for k, v in own.items()})
    X, y = plan_xy(store, plan)
    io_s = time.perf_counter() - t_io
    batches = np.asarray(round_plan.batches, dtype=np.int64)

    model = model_for(spec.model)
    placement = resource_kind(resource_name) if resource_name else "lambda"
    # The GPU worker computes in PyTorch, a Lambda worker in numpy; torch is imported here,
    # before the timing: compute_s counts computation only.
    device = model.device("torch" if placement == "gpu" else "numpy")
    t0 = time.perf_counter()
    out = model.worker_step(spec, state, X, y, batches, worker, round_index, device)
    compute_s = time.perf_counter() - t0
    if groups is not None:
        # DS-Sync: the worker steps its own model (the first half of dssync_step), so that its
        # next round's group reads one object per member (the stepped model), not two.
        out = stepped_partial(own, out, float(spec.lr), float(spec.l2))

    stats = ShardStats(
        worker=worker,
        round=round_index,
        batch=int(batches[worker]),
        compute_s=compute_s,
        io_s=io_s,
        memory_mb=memory_mb,
        resource=resource_name or lambda_resource(memory_mb or 1),
        placement=placement,
        cold_start=cold,
        signature=signature(plan),
        started_at=started,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        pid=os.getpid(),
    )
    if device is not None:
        stats.device = device  # where the torch step ran: cpu (float64) or cuda (float32)
    if sync_s is not None:
        stats.sync_s = sync_s
    if sync_held is not None:
        stats.sync_held = sync_held
    t1 = time.perf_counter()
    key = storage.train_partial_key(job_id, round_index, worker)
    stats.ended_at = time.time()
    body = json.dumps(stats.to_json_dict(), allow_nan=False)
    payload = {**out, "__stats__": np.array(body)}
    store.put_arrays(key, payload)
    if groups is not None:
        remember_partial(store.bucket, key, payload)
        # DS-Sync: the round's record is merged by the next TrainSchedule (or TrainFinalize) from
        # the workers' small records, not from their partials (fanfit.jobs.train.reduce.record_round)
        stats.io_s = io_s + time.perf_counter() - t1
        stats.ended_at = time.time()
        record = ShardRecord(stats=stats, loss=float(out["loss"]), n_samples=int(out["n_samples"]))
        store.put_json(
            storage.train_worker_record_key(job_id, round_index, worker), record.to_json_dict()
        )
    stats.io_s = io_s + time.perf_counter() - t1
    stats.ended_at = time.time()
    return ShardOutput(partial_key=key, **stats.to_json_dict()).to_json_dict()
