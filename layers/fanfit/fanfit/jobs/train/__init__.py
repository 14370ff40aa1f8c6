"""The server-side steps of a train job, one module per Lambda.

A train job is data-parallel training in synchronous rounds (bulk synchronous parallel). Its state
machine (orchestrator/train.asl.json) runs

    Init -> loop { Schedule -> Map(TrainShard over workers) -> Reduce -> more rounds? } -> Finalize

and every step reads and writes S3 through :class:`~fanfit.storage.JobStore` (keys from
:mod:`fanfit.storage`, documents from :mod:`fanfit.jobs.documents.train`): the model between
rounds lives in ``state/<r>.npz``, the execution state carries keys and small numbers only. The
model itself is reached only through :class:`fanfit.train.model.TrainModel`
(:func:`fanfit.train.models.model_for`).

- :mod:`.init` (TrainInit) :func:`init_job`: validates the spec and the data, resolves each
  worker's TrainShard function from its memory size, writes the plan and the round-0 model.
- :mod:`.resume` :func:`resume_point`: for a resumed job (``fanfit resume``), TrainInit keeps the
  plan and starts at the first round whose reduced model is not in S3.
- :mod:`.schedule` (TrainSchedule) :func:`schedule_round`: folds the last round's throughput into
  the job's and the stack's averages, sets each worker's batch (LB-BSP or uniform) and the
  DS-Sync groups; :func:`max_batches`, each worker's memory bound.
- :mod:`.shard` (TrainShard, one function per memory size) :func:`train_shard`: one worker's step.
- :mod:`.reduce` (TrainReduce) :func:`reduce_round`: merges the partials into the next model,
  records the round and decides whether another round runs.
- :mod:`.finalize` (TrainFinalize) :func:`finalize_job`: writes ``result.json``, marks the job
  SUCCEEDED and releases its partition.
- :mod:`.data`: the plan, the cached data and the model state, shared by the steps.

Lambda handlers import the submodule of their step; this package re-exports the public names for
tests and benchmarks, each imported on first use, so that a handler's cold start loads only its own
step's dependencies (TrainShard does not import Finalize's cost accounting, :mod:`fanfit.cost`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fanfit.jobs.documents.train import BALANCES, MAX_WORKERS, TRAIN_MODELS, TrainSpec
    from fanfit.jobs.train.finalize import finalize_job
    from fanfit.jobs.train.init import init_job
    from fanfit.jobs.train.reduce import reduce_round
    from fanfit.jobs.train.resume import ResumePoint, resume_point
    from fanfit.jobs.train.schedule import RUNTIME_BASE_MB, max_batches, schedule_round
    from fanfit.jobs.train.shard import train_shard

#: Each re-exported name and the module it comes from.
_EXPORTS = {
    "BALANCES": "fanfit.jobs.documents.train",
    "MAX_WORKERS": "fanfit.jobs.documents.train",
    "TRAIN_MODELS": "fanfit.jobs.documents.train",
    "TrainSpec": "fanfit.jobs.documents.train",
    "finalize_job": "fanfit.jobs.train.finalize",
    "init_job": "fanfit.jobs.train.init",
    "reduce_round": "fanfit.jobs.train.reduce",
    "ResumePoint": "fanfit.jobs.train.resume",
    "resume_point": "fanfit.jobs.train.resume",
    "RUNTIME_BASE_MB": "fanfit.jobs.train.schedule",
    "max_batches": "fanfit.jobs.train.schedule",
    "schedule_round": "fanfit.jobs.train.schedule",
    "train_shard": "fanfit.jobs.train.shard",
}

__all__ = [
    "BALANCES",
    "MAX_WORKERS",
    "RUNTIME_BASE_MB",
    "TRAIN_MODELS",
    "ResumePoint",
    "TrainSpec",
    "finalize_job",
    "init_job",
    "max_batches",
    "reduce_round",
    "resume_point",
    "schedule_round",
    "train_shard",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
