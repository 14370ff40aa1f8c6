"""Jobs sharing one account: Dorm partitions, kept live in the partition table.

Every running job holds a *partition* of the account's Lambda concurrency (and of the Batch GPUs):
the most invocations (GPU jobs) it may run at once. The partitions are recomputed with Dorm's
utilization-fairness optimizer (:func:`fanfit.sched.partition.dorm_partitions`, Sun et al. 2017)

- when a job arrives (:func:`register_job`: Prepare of an estimate's stage 0, TrainInit), and when
  its demand changes (Prepare of a later stage: another unit count; Schedule at each barrier: the
  next wave's shards, :mod:`fanfit.jobs.estimate.demand`);
- when a job ends (:func:`release_job`: Aggregate, TrainFinalize, and the Release function on the
  state machines' failure path).

A job reads its partition (:func:`partition_at_barrier`) at every barrier: Schedule before each
wave of cross-fitting shards, TrainSchedule before each round. It sizes the wave or sets the round's
Map ``MaxConcurrencyPath`` to it, and so resizes at its next barrier without restarting.

Stale jobs: a job whose execution is stopped from outside (``StopExecution``), times out or
vanishes never reaches Aggregate, TrainFinalize or Release. Each registration records the job's
Step Functions execution (``execution_arn``, from ``$$.Execution.Id``); every recomputation, and
every barrier where a job holds less than its demand while other jobs are registered, asks Step
Functions about the other registered jobs (``states:DescribeExecution``, at most one call per job
and check). A job whose execution no longer runs (or does not exist) is dropped as if released,
and the history entry lists it under ``dropped`` with reason ``"stale"``. Jobs registered without
an execution (before it was recorded) are never dropped this way.

Demand (what a job can use at once): an estimate stage's unit count capped by the job's
``max_concurrency`` when the stage starts, then the shards its next wave runs at once (capped the
same way, and by the units that remain); a train job's Lambda worker count. GPU demand: the GPU workers a job asks for.
Capacity: the account's concurrency (template parameter ``AccountConcurrency``, environment
``FANFIT_ACCOUNT_CONCURRENCY``) and the GPUs of the Batch compute environment
(``BatchMaxvCpus`` / :data:`GPU_WORKER_VCPUS`, environment ``FANFIT_BATCH_MAX_VCPUS``).

The policy is :func:`fanfit.sched.completion.dorm_policy`, the one benchmarks/sharing.py simulates:
Dorm's optimizer, then, when every registered job gave its ``remaining_s`` (slot-seconds of work
left) and ``critical_s`` (seconds it needs at least, at its whole demand), a completion pass
within Dorm's fairness-loss bound (shortest remaining work first, the makespan's critical path
before all, no fewer working slots). A job registered without them leaves every partition to
Dorm's optimizer alone. The jobs give them at their barriers (:func:`follow_job`): an estimate
from Schedule's first sized wave on (not while it probes: no unit has predicted seconds yet), a
train job from TrainSchedule's round 1 on (round 0 has measured nothing); Prepare and TrainInit
register without them, so the pass is off from a job's arrival to its first such barrier. A
barrier re-registers only when the job's demand changed or a figure moved by more than
:data:`FIGURE_TOLERANCE` since its last registration.

Concurrent recomputations are serialised optimistically by the epoch item's version
(:class:`fanfit.storage.Partitions`): each reads a snapshot, solves, and commits in one transaction
conditioned on the version it read; a loser retries from a fresh snapshot, so no arrival or
departure is lost.
"""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fanfit.errors import InvalidJobError, PartitionConflictError
from fanfit.limits import DEFAULT_WEIGHT, MAX_WEIGHT, check_weight
from fanfit.sched.completion import dorm_policy
from fanfit.sched.partition import DEFAULT_MAX_CHANGES
from fanfit.storage import Partitions

__all__ = [
    "ALIVE_STATUSES",
    "DEFAULT_WEIGHT",
    "GPU_WORKER_VCPUS",
    "MAX_WEIGHT",
    "MISSING",
    "Partition",
    "capacity_from_env",
    "check_weight",
    "FIGURE_TOLERANCE",
    "execution_status",
    "figures_moved",
    "follow_job",
    "partition_at_barrier",
    "read_partition",
    "recompute",
    "register_job",
    "release_job",
]

log = logging.getLogger("fanfit.sharing")

#: vCPUs of one GPU worker job (template.yaml's job definition: one GPU, 4 vCPUs on a g4dn.xlarge).
GPU_WORKER_VCPUS = 4
#: Most attempts of one recomputation against concurrent ones before giving up.
MAX_ATTEMPTS = 12
#: Execution statuses of a job that still runs (or will again: a redrive is pending). Any other
#: status (SUCCEEDED, FAILED, TIMED_OUT, ABORTED), or no such execution, makes a job stale.
ALIVE_STATUSES = frozenset({"RUNNING", "PENDING_REDRIVE"})
#: ``execution_status`` of an execution Step Functions does not know (``ExecutionDoesNotExist``).
MISSING = "MISSING"
#: Relative change of a registered completion figure (``remaining_s`` or ``critical_s``) that makes
#: a barrier re-register the job (:func:`figures_moved`, :func:`follow_job`). The completion pass
#: reads ``remaining_s`` only through the jobs' order (shortest remaining work first) and through
#: the critical-path test ``critical_s >= share x sum(remaining_s) / capacity``
#: (``completion_values`` of the completion pass), so a figure off by less than half can only
#: misorder jobs whose remaining work is within a factor 2 of each other, while each
#: re-registration costs a recomputation (a scan, a MILP of 8-14 ms, a transactional write and the
#: history entry: 19-23 ms in-process on moto with 2-8 jobs, 82 ms with 18, docs/sharing.md). In
#: benchmarks/sharing.py's simulation (one trace, machine shared) tolerances 0.1, 0.25 and 0.5 gave
#: the same utilization (0.905-0.907), completion (1.45-1.46x static's) and fairness loss
#: (0.27-0.29 of static's), with 240, 108 and 50 recomputations from train barriers: 0.5 keeps the
#: policy's compute under 5 % of the makespan (4.3 %; 6.2 % at 0.25). A train job of ``R`` rounds
#: then re-registers about ``log2(R)`` times (6 of 99 measured barriers for ``R`` = 100), not
#: every round.
FIGURE_TOLERANCE = 0.5


#: Optional completion figures of a registered job (:func:`register_job`).
_COMPLETION_FIELDS = ("remaining_s", "critical_s")


def _figure(job: dict[str, Any], key: str) -> float | None:
    """A job's completion figure ``key`` as a float, None when it gave none."""
    value = job.get(key)
    return None if value is None else float(value)


@dataclass(frozen=True)
class Partition:
    """One job's partition as it reads it at a barrier.

    Attributes
    ----------
    lambda_concurrency : int
        Concurrent Lambda invocations the optimizer gave the job (may be 0 with more jobs than
        capacity).
    gpus : int
        Batch GPU jobs it may run at once.
    demand : int
        The Lambda demand it registered.
    version : int
        The recomputation that set it (the epoch's version).
    gpu_demand : int
        The GPU demand it registered.
    remaining_s, critical_s : float or None
        The completion figures it registered (:func:`register_job`); None: none. Not part of
        :meth:`to_dict` (what a barrier records of its partition).
    """

    lambda_concurrency: int
    gpus: int
    demand: int
    version: int
    gpu_demand: int = 0
    remaining_s: float | None = None
    critical_s: float | None = None

    @property
    def concurrency(self) -> int:
        """The concurrency the job runs at: its partition, but at least 1 so it always progresses."""
        return max(1, self.lambda_concurrency)

    @property
    def whole(self) -> bool:
        """Whether the job holds its whole demand, Lambda and GPUs."""
        return self.lambda_concurrency >= self.demand and self.gpus >= self.gpu_demand

    def to_dict(self) -> dict[str, int]:
        out = {k: v for k, v in asdict(self).items() if k not in _COMPLETION_FIELDS}
        return {**out, "concurrency": self.concurrency}


def capacity_from_env() -> tuple[int, int]:
    """``(Lambda concurrency, GPUs)`` of the stack, from ``FANFIT_ACCOUNT_CONCURRENCY`` (default
    1,000, AWS's default quota) and ``FANFIT_BATCH_MAX_VCPUS`` (default 0: no GPUs)."""
    concurrency = int(os.environ.get("FANFIT_ACCOUNT_CONCURRENCY", "1000"))
    gpus = int(os.environ.get("FANFIT_BATCH_MAX_VCPUS", "0")) // GPU_WORKER_VCPUS
    return concurrency, gpus


def _partition(item: dict[str, Any]) -> Partition:
    return Partition(
        lambda_concurrency=int(item.get("partition", 0)),
        gpus=int(item.get("gpus", 0)),
        demand=int(item.get("demand", 0)),
        version=int(item.get("version", 0)),
        gpu_demand=int(item.get("gpu_demand", 0)),
        remaining_s=_figure(item, "remaining_s"),
        critical_s=_figure(item, "critical_s"),
    )


#: Step Functions clients by (region, endpoint), created on first use (one per warm Lambda).
_SFN_CLIENTS: dict[tuple[str | None, str | None], Any] = {}


def _stepfunctions(execution_arn: str) -> Any:
    """A Step Functions client for the region of ``execution_arn`` (from the ARN, else the
    environment's), honouring ``AWS_ENDPOINT_URL`` (the local stack)."""
    parts = execution_arn.split(":")
    region = parts[3] if len(parts) > 3 and parts[3] else None
    key = (region, os.environ.get("AWS_ENDPOINT_URL"))
    client = _SFN_CLIENTS.get(key)
    if client is None:
        import boto3

        client = boto3.client("stepfunctions", region_name=region)
        _SFN_CLIENTS[key] = client
    return client


def execution_status(execution_arn: str, sfn: Any = None) -> str | None:
    """The status of a job's Step Functions execution (one ``DescribeExecution``).

    Parameters
    ----------
    execution_arn : str
    sfn : botocore client, optional
        A ``stepfunctions`` client; default one for the ARN's region.

    Returns
    -------
    str or None
        ``RUNNING``, ``SUCCEEDED``, ``FAILED``, ``TIMED_OUT``, ``ABORTED``, ``PENDING_REDRIVE``;
        :data:`MISSING` when Step Functions has no such execution; None when it cannot tell
        (no permission, throttled, unreachable, a malformed ARN): the caller keeps the job.
    """
    client = sfn if sfn is not None else _stepfunctions(execution_arn)
    try:
        return str(client.describe_execution(executionArn=execution_arn)["status"])
    except Exception as exc:  # botocore ClientError and connection errors alike
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code == "ExecutionDoesNotExist":
            return MISSING
        log.warning("cannot describe execution %s (%s: %s); keeping its job", execution_arn,
                    type(exc).__name__, exc)  # fmt: skip
        return None


def read_partition(partitions: Partitions | None, job_id: str) -> Partition | None:
    """The job's current partition; None without a partition table or when the job holds none
    (registered before partitions existed): it then runs at its own ``max_concurrency``."""
    if partitions is None:
        return None
    item = partitions.get(job_id)
    return None if item is None else _partition(item)


def _stale_jobs(
    jobs: list[dict[str, Any]],
    job_id: str,
    statuses: dict[str, str | None],
    sfn: Any,
) -> list[dict[str, Any]]:
    """The registered jobs other than ``job_id`` whose execution no longer runs.

    ``statuses`` caches ``execution_status`` by execution ARN over one check (its attempts), so a
    check makes at most one ``DescribeExecution`` per other registered job. Jobs registered
    without an execution, and those whose status cannot be read, are kept.
    """
    dropped = []
    for job in jobs:
        arn = str(job.get("execution_arn") or "")
        if job["job_id"] == job_id or not arn:
            continue
        if arn not in statuses:
            statuses[arn] = execution_status(arn, sfn)
        status = statuses[arn]
        if status is not None and status not in ALIVE_STATUSES:
            dropped.append(
                {"job_id": job["job_id"], "reason": "stale", "execution_arn": arn,
                 "execution_status": status}
            )  # fmt: skip
    return dropped


def recompute(
    partitions: Partitions,
    capacity: tuple[int, int],
    *,
    arrive: dict[str, Any] | None = None,
    leave: str | None = None,
    reclaim: str | None = None,
    max_changes: int = DEFAULT_MAX_CHANGES,
    max_attempts: int = MAX_ATTEMPTS,
    check_stale: bool = True,
    sfn: Any = None,
) -> dict[str, Any] | None:
    """Add or remove one job, drop stale ones, and recompute every running job's partition with
    Dorm's optimizer.

    Parameters
    ----------
    partitions : Partitions
    capacity : (int, int)
        Lambda concurrency and GPUs to share.
    arrive : dict, optional
        The arriving (or re-registering) job: ``job_id, kind, demand, gpu_demand, weight``,
        ``execution_arn`` (its Step Functions execution; may be empty) and, optionally,
        ``remaining_s`` and ``critical_s`` (:func:`register_job`). A job already registered
        with the same demand, weight, completion figures and execution changes nothing; one registered by another
        execution (a resumed job) takes the new one (event ``"resume"``).
    leave : str, optional
        The id of a job that ended. A job not registered changes nothing.
    reclaim : str, optional
        The id of a registered job that holds less than its demand at a barrier: only the stale
        jobs are dropped (event ``"reclaim"``); without any, nothing changes.
    max_changes : int
        Dorm's ``theta``: most running jobs whose partition changes at once.
    max_attempts : int
        Snapshots to try before giving up against concurrent recomputations.
    check_stale : bool
        Ask Step Functions about the other registered jobs' executions
        (``states:DescribeExecution``, at most once per job and ARN over all attempts) and drop
        those no longer running (status not in :data:`ALIVE_STATUSES`, or no such execution).
    sfn : botocore client, optional
        The ``stepfunctions`` client for that; default one per region.

    Returns
    -------
    dict or None
        The history entry committed (``version, at, event`` (``arrive``, ``resize``, ``resume``,
        ``end``, ``reclaim``), ``job_id, capacity, jobs`` with each job's ``demand, gpu_demand,
        partition, gpus``, ``changed``, ``lambda_utilization`` (share of the concurrency handed
        out), Dorm's ``utilization`` (averaged over both resources) and ``fairness_loss``,
        ``bounded``, ``solve_s``, and ``dropped`` when stale jobs were dropped: each
        ``{job_id, reason: "stale", execution_arn, execution_status}`` (``MISSING``: no such
        execution)); None when nothing changed.

    Raises
    ------
    PartitionConflictError
        ``max_attempts`` snapshots in a row were overtaken by other recomputations.
    InvalidJobError
        Not exactly one of ``arrive``, ``leave``, ``reclaim``; negative demand or capacity, a
        non-positive weight.
    """
    if sum(x is not None for x in (arrive, leave, reclaim)) != 1:
        raise InvalidJobError("recompute takes exactly one of arrive=, leave= and reclaim=")
    statuses: dict[str, str | None] = {}
    for attempt in range(max_attempts):
        version, jobs = partitions.snapshot()
        by_id = {j["job_id"]: j for j in jobs}
        now = time.time()
        new: dict[str, Any] | None = None
        if leave is not None:
            if leave not in by_id:
                return None
            event, job_id = "end", leave
        elif reclaim is not None:
            if reclaim not in by_id:
                return None
            event, job_id = "reclaim", reclaim
        else:
            assert arrive is not None
            job_id = str(arrive["job_id"])
            old = by_id.get(job_id)
            arn = str(arrive.get("execution_arn") or "")
            fields = ("demand", "gpu_demand", "weight")
            same_demand = (
                old is not None
                and all(float(old.get(k, 0)) == float(arrive.get(k, 0)) for k in fields)
                and all(_figure(old, k) == _figure(arrive, k) for k in _COMPLETION_FIELDS)
            )
            if old is not None and same_demand and (not arn or arn == old.get("execution_arn")):
                return None
            event = "arrive" if old is None else "resize" if not same_demand else "resume"
            new = {
                "job_id": job_id,
                "kind": str(arrive.get("kind", "")),
                "demand": int(arrive["demand"]),
                "gpu_demand": int(arrive.get("gpu_demand", 0)),
                "weight": float(arrive.get("weight", DEFAULT_WEIGHT)),
                "partition": -1 if old is None else int(old.get("partition", 0)),
                "gpus": -1 if old is None else int(old.get("gpus", 0)),
                "registered_at": now if old is None else old.get("registered_at", now),
            }
            for k in _COMPLETION_FIELDS:
                if _figure(arrive, k) is not None:
                    new[k] = _figure(arrive, k)
            old_arn = "" if old is None else str(old.get("execution_arn") or "")
            if arn or old_arn:
                new["execution_arn"] = arn or old_arn
        dropped = _stale_jobs(jobs, job_id, statuses, sfn) if check_stale else []
        if reclaim is not None and not dropped:
            return None
        gone = {d["job_id"] for d in dropped} | ({leave} if leave is not None else set())
        jobs = [j for j in jobs if j["job_id"] not in gone]
        if new is not None:
            jobs = [new if j["job_id"] == job_id else j for j in jobs]
            if job_id not in by_id:
                jobs.append(new)
        entry: dict[str, Any] = {
            "version": version + 1,
            "at": now,
            "event": event,
            "job_id": job_id,
            "capacity": list(capacity),
        }
        if dropped:
            entry["dropped"] = dropped
        put: list[dict[str, Any]] = []
        if jobs:
            demand = np.array([[int(j["demand"]), int(j.get("gpu_demand", 0))] for j in jobs])
            current = np.array([[int(j["partition"]), int(j.get("gpus", 0))] for j in jobs])
            current[np.any(current < 0, axis=1)] = -1
            weight = np.array([float(j.get("weight", DEFAULT_WEIGHT)) for j in jobs])
            # a train job's rounds are bulk synchronous over its Lambda workers (its demand): only
            # partitions that waste no slot of a round's waves are offered to it
            bsp_workers = [int(j["demand"]) if j.get("kind") == "train" else 0 for j in jobs]
            figures = [(_figure(j, "remaining_s"), _figure(j, "critical_s")) for j in jobs]
            complete = all(r is not None and t is not None for r, t in figures)
            remaining = [float(r or 0.0) for r, _ in figures]
            critical = [float(t or 0.0) for _, t in figures]
            decision = dorm_policy(
                demand,
                list(capacity),
                weight,
                current,
                max_changes=max_changes,
                bsp_workers=bsp_workers,
                remaining_s=remaining if complete else None,
                critical_s=critical if complete else None,
            )
            for j, x, changed in zip(jobs, decision.partitions, decision.changed, strict=True):
                if changed or (new is not None and j["job_id"] == job_id):
                    put.append(
                        {
                            **j,
                            "partition": int(x[0]),
                            "gpus": int(x[1]),
                            "version": version + 1,
                            "updated_at": now,
                        }
                    )
            entry.update(
                lambda_utilization=float(decision.partitions[:, 0].sum() / max(capacity[0], 1)),
                utilization=decision.utilization,
                fairness_loss=decision.fairness_loss,
                bounded=decision.bounded,
                solve_s=decision.solve_s,
                changed=[j["job_id"] for j, c in zip(jobs, decision.changed, strict=True) if c],
                jobs={
                    j["job_id"]: {
                        "kind": j.get("kind", ""),
                        "demand": int(j["demand"]),
                        "gpu_demand": int(j.get("gpu_demand", 0)),
                        "partition": int(x[0]),
                        "gpus": int(x[1]),
                    }
                    for j, x in zip(jobs, decision.partitions, strict=True)
                },
            )
        else:
            entry.update(lambda_utilization=0.0, utilization=0.0, fairness_loss=0.0, bounded=True, solve_s=0.0,
                         changed=[], jobs={})  # fmt: skip
        if partitions.commit(version, put, sorted(gone), entry):
            for d in dropped:
                log.warning("dropped job %s: its execution %s is %s", d["job_id"],
                            d["execution_arn"], d["execution_status"])  # fmt: skip
            return entry
        # another recomputation committed first: back off (full jitter) and start again
        time.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))  # noqa: S311 - jitter only
    raise PartitionConflictError(
        f"recomputing partitions for job {arrive['job_id'] if arrive else leave or reclaim!r} was "
        f"overtaken {max_attempts} times by concurrent recomputations; retry the step"
    )


def register_job(
    partitions: Partitions | None,
    job_id: str,
    kind: str,
    demand: int,
    gpu_demand: int = 0,
    weight: float = DEFAULT_WEIGHT,
    capacity: tuple[int, int] | None = None,
    execution_arn: str = "",
    sfn: Any = None,
    remaining_s: float | None = None,
    critical_s: float | None = None,
) -> Partition | None:
    """Register a job that arrives (or whose demand changed) and recompute every partition.

    Parameters
    ----------
    partitions : Partitions or None
        None (no partition table: a stack deployed before partitions) does nothing.
    job_id, kind : str
    demand : int
        Concurrent Lambda invocations the job can use now (>= 0; with ``gpu_demand`` >= 1).
    gpu_demand : int
        Batch GPU jobs it can use.
    weight : float
        Its weight in the fair shares (> 0).
    capacity : (int, int), optional
        Default :func:`capacity_from_env`.
    execution_arn : str
        The job's Step Functions execution, recorded so that another job's recomputation can
        drop it once that execution no longer runs; empty: never dropped that way.
    sfn : botocore client, optional
        ``stepfunctions`` client for the stale check of the other jobs (see :func:`recompute`).
    remaining_s : float, optional
        Slot-seconds of work the job has left (an estimate: its units not yet run, this stage's
        and the later stages', x each unit's predicted seconds,
        :func:`fanfit.jobs.estimate.demand.completion_figures`; a train job: rounds left x its
        last round's seconds x its Lambda workers,
        :func:`fanfit.jobs.train.schedule.completion_figures`).
    critical_s : float, optional
        Seconds the job needs at least at its whole demand (an estimate: per stage still to run
        its longest unit, summed over the stages; a train job: rounds left x a round's
        seconds). With ``remaining_s``, and when every registered
        job gave both, the partitions get :func:`fanfit.sched.completion.dorm_policy`'s
        completion pass; new figures alone re-register the job (a ``"resize"``).

    Returns
    -------
    Partition or None
        The job's partition after the recomputation.

    Raises
    ------
    InvalidJobError
        A negative demand, no demand at all, a non-positive weight, or a completion figure
        that is negative or not finite (named).
    PartitionConflictError
        See :func:`recompute`.
    """
    if partitions is None:
        return None
    if int(demand) < 0 or int(gpu_demand) < 0 or int(demand) + int(gpu_demand) < 1:
        raise InvalidJobError(
            f"demand and gpu_demand must be >= 0 and not both 0, got {demand}, {gpu_demand}"
        )
    if not (np.isfinite(weight) and weight > 0):
        raise InvalidJobError(f"weight must be a positive number, got {weight!r}")
    figures: dict[str, float] = {}
    for name, value in (("remaining_s", remaining_s), ("critical_s", critical_s)):
        if value is None:
            continue
        if not (np.isfinite(value) and value >= 0):
            raise InvalidJobError(f"{name} must be a finite number >= 0, got {value!r}")
        figures[name] = float(value)
    recompute(
        partitions,
        capacity or capacity_from_env(),
        arrive={
            "job_id": job_id,
            "kind": kind,
            "demand": int(demand),
            "gpu_demand": int(gpu_demand),
            "weight": float(weight),
            "execution_arn": str(execution_arn or ""),
            **figures,
        },
        sfn=sfn,
    )
    return read_partition(partitions, job_id)


def figures_moved(
    held: Partition,
    remaining_s: float | None,
    critical_s: float | None,
    tolerance: float = FIGURE_TOLERANCE,
) -> bool:
    """Whether a job's new completion figures differ materially from those it registered.

    Parameters
    ----------
    held : Partition
        The job's registration (its ``remaining_s`` and ``critical_s``, None when it gave none).
    remaining_s, critical_s : float or None
        The figures at this barrier (None: the job cannot tell).
    tolerance : float
        Relative change that counts (default :data:`FIGURE_TOLERANCE`).

    Returns
    -------
    bool
        True when a figure appeared or disappeared (None against a number), or moved by more than
        ``tolerance`` of its registered value: ``|new - old| > tolerance x old`` (so any change
        from 0 counts).
    """
    for old, new in ((held.remaining_s, remaining_s), (held.critical_s, critical_s)):
        if (old is None) != (new is None):
            return True
        if old is not None and new is not None and abs(new - old) > tolerance * old:
            return True
    return False


def follow_job(
    partitions: Partitions | None,
    job_id: str,
    kind: str,
    *,
    demand: int,
    gpu_demand: int = 0,
    weight: float = DEFAULT_WEIGHT,
    remaining_s: float | None = None,
    critical_s: float | None = None,
    tolerance: float = FIGURE_TOLERANCE,
    capacity: tuple[int, int] | None = None,
    sfn: Any = None,
) -> Partition | None:
    """Re-register a job at a barrier when its demand changed or its completion figures moved.

    Schedule (an estimate's wave, :func:`fanfit.jobs.estimate.demand.follow_wave`) and
    TrainSchedule (a train round) call it. A job that holds no partition (never registered, or
    already released) is left alone: only Prepare and TrainInit register a job's arrival, with its
    execution. The job is re-registered (:func:`register_job`, a ``"resize"`` recomputation
    keeping its execution) only when its Lambda or GPU demand differs from the registered one or
    :func:`figures_moved` says so; otherwise nothing is written and the registered figures stay,
    each within ``tolerance`` of the new ones.

    Parameters
    ----------
    partitions : Partitions or None
        None (no partition table) does nothing.
    job_id, kind : str
    demand, gpu_demand : int
        The job's demand now.
    weight : float
        Its weight (unchanged since it arrived).
    remaining_s, critical_s : float or None
        Its completion figures now (:func:`register_job`); None: it cannot tell, and a
        registration then drops the ones it gave, which turns the completion pass off for every
        job until it gives them again.
    tolerance : float
        See :func:`figures_moved`.
    capacity : (int, int), optional
    sfn : botocore client, optional
        As :func:`register_job`.

    Returns
    -------
    Partition or None
        The job's partition (after the recomputation when there was one); None without a table
        or a registration.

    Raises
    ------
    InvalidJobError, PartitionConflictError
        See :func:`register_job`.
    """
    held = read_partition(partitions, job_id)
    if held is None:
        return None
    same_demand = (held.demand, held.gpu_demand) == (int(demand), int(gpu_demand))
    if same_demand and not figures_moved(held, remaining_s, critical_s, tolerance):
        return held
    return register_job(
        partitions, job_id, kind, demand=demand, gpu_demand=gpu_demand, weight=weight,
        capacity=capacity, sfn=sfn, remaining_s=remaining_s, critical_s=critical_s,
    )  # fmt: skip


def release_job(
    partitions: Partitions | None,
    job_id: str,
    capacity: tuple[int, int] | None = None,
    sfn: Any = None,
) -> dict[str, Any] | None:
    """Remove a job that ended (succeeded or failed) and hand its partition to the others.

    Other registered jobs whose execution no longer runs are dropped in the same recomputation
    (see :func:`recompute`).

    Returns
    -------
    dict or None
        The history entry of the recomputation; None when the job held no partition (already
        released, or no partition table).

    Raises
    ------
    PartitionConflictError
        See :func:`recompute`.
    """
    if partitions is None:
        return None
    return recompute(partitions, capacity or capacity_from_env(), leave=job_id, sfn=sfn)


def partition_at_barrier(
    partitions: Partitions | None,
    job_id: str,
    capacity: tuple[int, int] | None = None,
    sfn: Any = None,
) -> Partition | None:
    """The job's partition as it reads it at a barrier, after reclaiming stale jobs' shares.

    When the job holds less than its demand (Lambda or GPUs) and other jobs are registered, their
    executions are checked (one ``DescribeExecution`` each): those no longer running are dropped
    as if released (a ``"reclaim"`` recomputation, see :func:`recompute`) and the job reads its
    partition again. A job holding its whole demand makes no call beyond the read.

    Parameters
    ----------
    partitions : Partitions or None
    job_id : str
    capacity : (int, int), optional
        Default :func:`capacity_from_env`.
    sfn : botocore client, optional
        ``stepfunctions`` client; default one per region.

    Returns
    -------
    Partition or None
        As :func:`read_partition`.

    Raises
    ------
    PartitionConflictError
        See :func:`recompute`.
    """
    partition = read_partition(partitions, job_id)
    if partitions is None or partition is None or partition.whole:
        return partition
    entry = recompute(partitions, capacity or capacity_from_env(), reclaim=job_id, sfn=sfn)
    return partition if entry is None else read_partition(partitions, job_id)
