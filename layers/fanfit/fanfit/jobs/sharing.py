"""Jobs sharing one account: Dorm partitions, kept live in the partition table.

Every running job holds a *partition* of the account's Lambda concurrency (and of the Batch GPUs):
the most invocations (GPU jobs) it may run at once. The partitions are recomputed with Dorm's
utilization-fairness optimizer (:func:`fanfit.sched.partition.dorm_partitions`, Sun et al. 2017)

- when a job arrives (:func:`register_job`: Prepare of an estimate's stage 0, TrainInit), and when
  its demand changes (Prepare of a later stage: another unit count);
- when a job ends (:func:`release_job`: Aggregate, TrainFinalize, and the Release function on the
  state machines' failure path).

A job reads its partition (:func:`read_partition`) at every barrier: Schedule before each wave of
cross-fitting shards, TrainSchedule before each round. It sizes the wave or sets the round's Map
``MaxConcurrencyPath`` to it, and so resizes at its next barrier without restarting.

Demand (what a job can use at once): an estimate stage's unit count capped by the job's
``max_concurrency``; a train job's Lambda worker count. GPU demand: the GPU workers a job asks for.
Capacity: the account's concurrency (template parameter ``AccountConcurrency``, environment
``FANFIT_ACCOUNT_CONCURRENCY``) and the GPUs of the Batch compute environment
(``BatchMaxvCpus`` / :data:`GPU_WORKER_VCPUS`, environment ``FANFIT_BATCH_MAX_VCPUS``).

Concurrent recomputations are serialised optimistically by the epoch item's version
(:class:`fanfit.storage.Partitions`): each reads a snapshot, solves, and commits in one transaction
conditioned on the version it read; a loser retries from a fresh snapshot, so no arrival or
departure is lost.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fanfit.errors import InvalidJobError, PartitionConflictError
from fanfit.sched.partition import DEFAULT_MAX_CHANGES, dorm_partitions
from fanfit.storage import Partitions

__all__ = [
    "GPU_WORKER_VCPUS",
    "Partition",
    "capacity_from_env",
    "read_partition",
    "recompute",
    "register_job",
    "release_job",
]

#: vCPUs of one GPU worker job (template.yaml's job definition: one GPU, 4 vCPUs on a g4dn.xlarge).
GPU_WORKER_VCPUS = 4
#: Most attempts of one recomputation against concurrent ones before giving up.
MAX_ATTEMPTS = 12


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
    """

    lambda_concurrency: int
    gpus: int
    demand: int
    version: int

    @property
    def concurrency(self) -> int:
        """The concurrency the job runs at: its partition, but at least 1 so it always progresses."""
        return max(1, self.lambda_concurrency)

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "concurrency": self.concurrency}


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
    )


def read_partition(partitions: Partitions | None, job_id: str) -> Partition | None:
    """The job's current partition; None without a partition table or when the job holds none
    (registered before partitions existed): it then runs at its own ``max_concurrency``."""
    if partitions is None:
        return None
    item = partitions.get(job_id)
    return None if item is None else _partition(item)


def recompute(
    partitions: Partitions,
    capacity: tuple[int, int],
    *,
    arrive: dict[str, Any] | None = None,
    leave: str | None = None,
    max_changes: int = DEFAULT_MAX_CHANGES,
    max_attempts: int = MAX_ATTEMPTS,
) -> dict[str, Any] | None:
    """Add or remove one job and recompute every running job's partition with Dorm's optimizer.

    Parameters
    ----------
    partitions : Partitions
    capacity : (int, int)
        Lambda concurrency and GPUs to share.
    arrive : dict, optional
        The arriving (or re-registering) job: ``job_id, kind, demand, gpu_demand, weight``. A job
        already registered with the same demand and weight changes nothing.
    leave : str, optional
        The id of a job that ended. A job not registered changes nothing.
    max_changes : int
        Dorm's ``theta``: most running jobs whose partition changes at once.
    max_attempts : int
        Snapshots to try before giving up against concurrent recomputations.

    Returns
    -------
    dict or None
        The history entry committed (``version, at, event, job_id, capacity, jobs`` with each
        job's ``demand, gpu_demand, partition, gpus``, ``changed``, ``lambda_utilization`` (share
        of the concurrency handed out), Dorm's ``utilization`` (averaged over both resources) and
        ``fairness_loss``, ``bounded``, ``solve_s``); None when nothing changed.

    Raises
    ------
    PartitionConflictError
        ``max_attempts`` snapshots in a row were overtaken by other recomputations.
    InvalidJobError
        Negative demand or capacity, a non-positive weight.
    """
    if (arrive is None) == (leave is None):
        raise InvalidJobError("recompute takes exactly one of arrive= and leave=")
    for attempt in range(max_attempts):
        version, jobs, history = partitions.snapshot()
        by_id = {j["job_id"]: j for j in jobs}
        now = time.time()
        if leave is not None:
            if leave not in by_id:
                return None
            event, job_id = "end", leave
            jobs = [j for j in jobs if j["job_id"] != leave]
        else:
            assert arrive is not None
            job_id = str(arrive["job_id"])
            old = by_id.get(job_id)
            fields = ("demand", "gpu_demand", "weight")
            if old is not None and all(
                float(old.get(k, 0)) == float(arrive.get(k, 0)) for k in fields
            ):
                return None
            event = "arrive" if old is None else "resize"
            new = {
                "job_id": job_id,
                "kind": str(arrive.get("kind", "")),
                "demand": int(arrive["demand"]),
                "gpu_demand": int(arrive.get("gpu_demand", 0)),
                "weight": float(arrive.get("weight", 1.0)),
                "partition": -1 if old is None else int(old.get("partition", 0)),
                "gpus": -1 if old is None else int(old.get("gpus", 0)),
                "registered_at": now if old is None else old.get("registered_at", now),
            }
            jobs = [new if j["job_id"] == job_id else j for j in jobs]
            if old is None:
                jobs.append(new)
        entry: dict[str, Any] = {
            "version": version + 1,
            "at": now,
            "event": event,
            "job_id": job_id,
            "capacity": list(capacity),
        }
        put: list[dict[str, Any]] = []
        if jobs:
            demand = np.array([[int(j["demand"]), int(j.get("gpu_demand", 0))] for j in jobs])
            current = np.array([[int(j["partition"]), int(j.get("gpus", 0))] for j in jobs])
            current[np.any(current < 0, axis=1)] = -1
            weight = np.array([float(j.get("weight", 1.0)) for j in jobs])
            decision = dorm_partitions(
                demand, list(capacity), weight, current, max_changes=max_changes
            )
            for j, x, changed in zip(jobs, decision.partitions, decision.changed, strict=True):
                if changed or j["job_id"] == job_id:
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
        delete = [leave] if leave is not None else []
        if partitions.commit(version, put, delete, [*history, entry]):
            return entry
        # another recomputation committed first: back off (full jitter) and start again
        time.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))  # noqa: S311 - jitter only
    raise PartitionConflictError(
        f"recomputing partitions for job {arrive['job_id'] if arrive else leave!r} was overtaken "
        f"{max_attempts} times by concurrent recomputations; retry the step"
    )


def register_job(
    partitions: Partitions | None,
    job_id: str,
    kind: str,
    demand: int,
    gpu_demand: int = 0,
    weight: float = 1.0,
    capacity: tuple[int, int] | None = None,
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

    Returns
    -------
    Partition or None
        The job's partition after the recomputation.

    Raises
    ------
    InvalidJobError
        A negative demand, no demand at all, or a non-positive weight.
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
    recompute(
        partitions,
        capacity or capacity_from_env(),
        arrive={
            "job_id": job_id,
            "kind": kind,
            "demand": int(demand),
            "gpu_demand": int(gpu_demand),
            "weight": float(weight),
        },
    )
    return read_partition(partitions, job_id)


def release_job(
    partitions: Partitions | None, job_id: str, capacity: tuple[int, int] | None = None
) -> dict[str, Any] | None:
    """Remove a job that ended (succeeded or failed) and hand its partition to the others.

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
    return recompute(partitions, capacity or capacity_from_env(), leave=job_id)
