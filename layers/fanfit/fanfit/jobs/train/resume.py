"""Resume: where a train job that already ran stands (:func:`resume_point`), and TrainInit's path
for such a job (:func:`resume_job`: keep its plan and models, start at the first round not reduced)."""

from __future__ import annotations

from dataclasses import dataclass

from fanfit import storage
from fanfit.errors import InvalidDataError, InvalidJobError
from fanfit.jobs import sharing
from fanfit.jobs.documents.train import InitOutput, TrainPlan, TrainSpec
from fanfit.jobs.train.data import get_state, read_plan

__all__ = ["ResumePoint", "register_partition", "resume_job", "resume_point"]


@dataclass(frozen=True)
class ResumePoint:
    """Where a train job that already ran stands, read from S3 alone (:func:`resume_point`).

    Attributes
    ----------
    round : int
        The first round whose reduced model (``state/<round + 1>.npz``) is not in S3: a resumed
        execution runs rounds ``round, round + 1, ...`` from the model ``state/<round>.npz``;
        rounds ``0 .. round - 1`` are reduced and neither run nor written again. 0 when no round
        was reduced.
    phase : {'train', 'final', 'done'}
        The phase of that model: ``'done'`` when it is the final model (every round ran; only
        TrainFinalize is left).
    has_next_round : bool
        ``phase != 'done'``: another round runs before TrainFinalize.
    """

    round: int
    phase: str
    has_next_round: bool


def resume_point(store: storage.JobStore, job_id: str) -> ResumePoint | None:
    """Where an earlier execution of train job ``job_id`` left it, from what S3 holds.

    A round ``r`` counts as reduced when its next model ``train/state/<r + 1>.npz`` exists:
    TrainReduce writes the round's record (``rounds/<r>/record.json``) before that model, so a
    reduced round always has its record, and a round whose reduce did not finish runs again
    whole (its schedule is kept, :func:`fanfit.jobs.train.schedule.schedule_round`). S3 is the
    source of truth: the job's execution may have failed or been stopped, or the stack restarted
    with empty tables.

    Parameters
    ----------
    store : JobStore
    job_id : str

    Returns
    -------
    ResumePoint or None
        None when the job has no plan or no round-0 model yet (TrainInit never finished): it
        starts from scratch.

    Raises
    ------
    InvalidJobError
        A reduced round has no record (an object was removed by hand): the job cannot resume.
    """
    if not store.exists(storage.plan_key(job_id)):
        return None
    indices = set()
    for key in store.list_keys(storage.train_state_prefix(job_id)):
        index = storage.train_state_index(job_id, key)
        if index is not None:
            indices.add(index)
    if 0 not in indices:
        return None
    r = 0
    while r + 1 in indices:
        r += 1
    if r and not store.exists(storage.train_round_key(job_id, r - 1)):
        raise InvalidJobError(
            f"job {job_id!r}: round {r - 1} is reduced but its record "
            f"{storage.train_round_key(job_id, r - 1)} is missing; the job cannot resume: "
            "start it again as a new job"
        )
    phase = get_state(store, job_id, r).phase
    return ResumePoint(round=r, phase=phase, has_next_round=phase != "done")


def _check_same_job(plan: TrainPlan, data_key: str, given: TrainSpec, spec: TrainSpec) -> None:
    """A resumed job's spec must be the one its plan was written from.

    Parameters
    ----------
    plan : TrainPlan
    data_key : str
        The job file's data.
    given, spec : TrainSpec
        The spec as the job file gives it and as validated (``worker_memory_mb`` filled in).

    Raises
    ------
    InvalidJobError
        The spec or the data differ from the plan's.
    """
    names = list(TrainSpec.model_fields)
    if not given.worker_memory_mb:
        # sizes left to the stack's default: the plan's workers keep the sizes they ran with
        names.remove("worker_memory_mb")
    changed = sorted(n for n in names if getattr(spec, n) != getattr(plan.spec, n))
    if plan.data_key != data_key:
        changed.append("data_key")
    if changed:
        raise InvalidJobError(
            f"job {plan.job_id!r}: its spec differs from the plan its first execution "
            f"wrote (in {', '.join(changed)}); a train job resumes with the spec it started "
            "with: submit a new job to train with other options"
        )


def register_partition(
    partitions: storage.Partitions | None,
    job_id: str,
    spec: TrainSpec,
    weight: float,
    execution_arn: str,
) -> None:
    """Register the train job's partition: its Lambda workers and its Batch GPU workers
    (:func:`fanfit.jobs.sharing.register_job`)."""
    sharing.register_job(
        partitions,
        job_id,
        "train",
        demand=spec.workers - spec.gpu_workers,
        gpu_demand=spec.gpu_workers,
        weight=weight,
        execution_arn=execution_arn,
    )


def resume_job(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    data_key: str,
    given: TrainSpec,
    spec: TrainSpec,
    point: ResumePoint,
    worker_functions: dict[int, str],
    execution_arn: str,
    gpu_memory_mb: int | None,
    partitions: storage.Partitions | None,
    weight: float,
) -> dict:
    """TrainInit of a job that already ran: keep its plan and models, start at ``point``.

    ``given`` is the spec as its job file gives it, ``spec`` as validated.

    Returns
    -------
    dict
        :class:`~fanfit.jobs.documents.train.InitOutput` with ``resumed`` True.

    Raises
    ------
    InvalidJobError, InvalidDataError
        A spec that differs from the plan's, missing data, a worker memory size the stack no
        longer has, or GPU workers on a stack without the GPU worker.
    """
    plan = read_plan(store, job_id)
    _check_same_job(plan, data_key, given, spec)
    if not store.exists(data_key):
        raise InvalidDataError(
            f"data object {data_key} of job {job_id!r} does not exist in bucket "
            f"{store.bucket}; the job cannot resume without it"
        )
    if spec.gpu_workers and not gpu_memory_mb:
        raise InvalidJobError(
            "--gpu-workers needs the stack's GPU worker (AWS Batch); this stack has none"
        )
    # The workers keep their memory sizes; their functions are this stack's (a redeployed stack
    # may name them differently).
    workers = []
    for w in plan.workers:
        if w.placement == "gpu":
            workers.append(w)
            continue
        arn = worker_functions.get(int(w.memory_mb or 0))
        if arn is None:
            raise InvalidJobError(
                f"--worker-memory {w.memory_mb} (worker {w.worker}) has no TrainShard "
                f"function on this stack any more; valid sizes (MB): "
                f"{', '.join(str(m) for m in sorted(worker_functions))}; the job cannot resume here"
            )
        workers.append(w.model_copy(update={"function_arn": arn}))
    if workers != plan.workers:
        plan = plan.model_copy(update={"workers": workers})
        store.put_json(storage.plan_key(job_id), plan.to_json_dict())
    # A resumed job runs again without the error of its failed execution.
    records.mark_running(
        job_id,
        execution_arn=execution_arn,
        kind="train",
        model=spec.model,
        error=None,
        cause=None,
        resumed_at_round=point.round,
    )
    register_partition(partitions, job_id, spec, weight, execution_arn)
    return InitOutput(
        job_id=job_id,
        plan_key=storage.plan_key(job_id),
        round=point.round,
        n_workers=len(workers),
        has_next_round=point.has_next_round,
        resumed=True,
    ).to_json_dict()
