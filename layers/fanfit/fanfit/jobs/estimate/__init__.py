"""The server-side steps of an estimate job, one module per Lambda function.

Each step takes S3 keys and small numbers, reads the job documents it needs
(:mod:`fanfit.jobs.documents.estimate`) through :class:`~fanfit.storage.JobStore`, calls into
:mod:`fanfit.dml` and :mod:`fanfit.sched`, and returns a small document into the state: no data and
no predictions travel in Step Functions state (its limit is 256 KB).

- :mod:`.prepare` (Prepare): :func:`~.prepare.prepare_stage`; stage 0 validates the spec and the
  data, draws or checks the folds and writes the plan; every stage writes its units.
- :mod:`.schedule` (Schedule): :func:`~.schedule.schedule_wave`, in four phases: observe the last
  wave's throughput, place the units (Lambda or the GPU worker, under the job's partition), size the
  Lambda shards (:mod:`fanfit.sched.sizing`; a probe wave without history), write the wave.
- :mod:`.crossfit` (CrossFit): :func:`~.crossfit.crossfit_shard` fits the units of one shard and
  writes their out-of-fold predictions to one object.
- :mod:`.aggregate` (Aggregate): :func:`~.aggregate.aggregate_job` gathers every shard's predictions,
  computes the estimate and writes ``result.json`` and the assembled out-of-fold predictions
  (``predictions.npz``, DoubleML's ``external_predictions`` layout).
- :mod:`.failure` (Schedule, on a failed wave): :func:`~.failure.describe_failure` names the shard.
- :mod:`.data`: what the steps share: the plan, the cached data and folds, the shards' predictions.

Lambda handlers import the submodule they need; this package re-exports the five step functions
for tests and benchmarks, each imported on first use, so that a handler's cold start loads only
its own step's dependencies (Schedule does not import the estimate's maths, nor Prepare the
partition solver).
"""

from typing import Any

__all__ = ["aggregate_job", "crossfit_shard", "describe_failure", "prepare_stage", "schedule_wave"]


def __getattr__(name: str) -> Any:
    if name == "aggregate_job":
        from fanfit.jobs.estimate.aggregate import aggregate_job

        return aggregate_job
    if name == "crossfit_shard":
        from fanfit.jobs.estimate.crossfit import crossfit_shard

        return crossfit_shard
    if name == "describe_failure":
        from fanfit.jobs.estimate.failure import describe_failure

        return describe_failure
    if name == "prepare_stage":
        from fanfit.jobs.estimate.prepare import prepare_stage

        return prepare_stage
    if name == "schedule_wave":
        from fanfit.jobs.estimate.schedule import schedule_wave

        return schedule_wave
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
