"""DS-Sync: synchronise workers only within groups, and reshuffle the groups every round.

Divide-and-Shuffle Synchronization (Wang, Zhang, Yang, Xia, Chen and Tan, "Divide-and-Shuffle
Synchronization for Distributed Machine Learning", arXiv:2007.03298, 2020) divides the ``N`` workers
into non-overlapping groups that synchronise independently (a smaller all-reduce, no global
barrier), and shuffles the membership every round so that models mix across groups and reach a
global consensus. fanfit draws a round's groups from ``(job seed, round index)`` alone, so the
scheduler, every worker and a rerun all compute the same groups without storing them.

How a train job runs it (``orchestrator/train.asl.json``), as a group all-reduce with no central
reducer: a DS-Sync round is the round's TrainSchedule and the workers' Map, and nothing else (a
Pass state hands the next round to the execution). Each worker steps its own model with its
gradient and writes the stepped model as its partial; at the start of round ``r + 1`` each worker
reads the partials of the members of its round-``r`` group (``G`` objects) and averages them,
weighted by their batches (:func:`fanfit.jobs.train.data.group_average`); every member computes the
same average, as an all-reduce gives every member the same result, and no model is written for
the group. The round's record (per-worker statistics, the loss) is merged by the next
TrainSchedule, or by TrainFinalize after the last round, from the workers' small records
(:func:`fanfit.jobs.train.reduce.record_round`; no model is read).

No global barrier between rounds (segments): when it can, TrainSchedule plans ``K`` rounds at once
(:func:`fanfit.jobs.train.schedule.segment_rounds`) and one Map invocation of each worker runs
them (:func:`fanfit.jobs.train.shard.train_shard`). Within the segment a worker synchronises only
with its group: before round ``r`` it polls S3 until its round-``r - 1`` group's partials exist
(:func:`fanfit.jobs.train.shard.wait_for_group`; ``GroupPartialTimeoutError`` at its deadline),
then averages them as above. The execution's barrier (the Map's end, the next TrainSchedule)
comes every ``K`` rounds; ``K = 1`` (one Map per round) in round 0, under LB-BSP, with a GPU worker
or when the job's partition runs fewer workers than it has. The arithmetic is the same, so the
model is the same bit for bit.

The only global merge of models is the last one: TrainFinalize's average over the workers' final
models (each its group's average of the last round's partials, :func:`fanfit.jobs.train.data.
full_state`), written as the trained model (:func:`fanfit.train.sgd.average_params`). No round
merges the models globally: as in the paper, consensus comes from the reshuffling alone.
"""

from __future__ import annotations

import math

import numpy as np

from fanfit.errors import InvalidJobError

__all__ = ["DSSYNC_STREAM", "dssync_groups"]

#: First word of the SeedSequence spawn key of DS-Sync's shuffles (the job seed's other streams:
#: 0 folds, 1 fit units in :mod:`fanfit.dml`; 3 training batches in :mod:`fanfit.train`).
DSSYNC_STREAM = 2


def dssync_groups(n_workers: int, group_size: int, seed: int, round_index: int) -> list[list[int]]:
    """The groups of workers that synchronise together in one round.

    The workers are permuted with ``numpy.random.default_rng(SeedSequence(seed, spawn_key=(2,
    round_index)))`` and the permutation is cut into ``ceil(n_workers / group_size)`` consecutive
    groups whose sizes differ by at most one (``numpy.array_split``), so no group exceeds
    ``group_size`` and a remainder is spread over the groups rather than left as one small group
    (7 workers in groups of 3 give sizes 3, 2, 2, not 3, 3, 1).

    Parameters
    ----------
    n_workers : int
        ``N`` (>= 1).
    group_size : int
        ``G``, largest group (>= 1); ``G >= N`` gives one group (plain BSP).
    seed : int
        The job seed (>= 0).
    round_index : int
        The round (>= 0).

    Returns
    -------
    list of list of int
        Worker indices; each group sorted ascending, groups ordered by their smallest index. Every
        worker is in exactly one group.

    Raises
    ------
    InvalidJobError
        An argument out of range.
    """
    for name, value, low in (
        ("n_workers", n_workers, 1),
        ("group_size", group_size, 1),
        ("seed", seed, 0),
        ("round_index", round_index, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
            raise InvalidJobError(f"{name} must be an integer of at least {low}, got {value!r}.")
    rng = np.random.default_rng(
        np.random.SeedSequence(int(seed), spawn_key=(DSSYNC_STREAM, int(round_index)))
    )
    perm = rng.permutation(n_workers)
    groups = [
        sorted(int(i) for i in g) for g in np.array_split(perm, math.ceil(n_workers / group_size))
    ]
    return sorted(groups)
