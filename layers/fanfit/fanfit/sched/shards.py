"""Shard sizing for cross-fitting: how many (repetition, fold, learner) units go into one invocation.

Every unit of a stage is an independent fit. A shard is one Lambda invocation holding one or more
units; it loads the data once and fits its units in turn. With ``n_shards`` shards and a cap of
``max_concurrency`` concurrent invocations, the makespan of a stage of ``n_units`` equal fits is
about ``ceil(n_units / min(n_shards, max_concurrency)) * t_fit`` plus one start-up per wave, so the
default uses as many shards as may run at once and no more: one wave, each invocation amortising its
start-up over ``n_units / n_shards`` fits. DoubleML-Serverless's two fixed choices (Kurz 2021) are
``units_per_shard=1`` (one invocation per fold, repetition and learner) and one shard per repetition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

from fanfit.errors import InvalidJobError

T = TypeVar("T")

#: Lambda's default account concurrency (AWS Lambda quotas).
DEFAULT_ACCOUNT_CONCURRENCY = 1000


def n_shards_for(n_units: int, max_concurrency: int, units_per_shard: int | None = None) -> int:
    """Number of shards for ``n_units`` units.

    Parameters
    ----------
    n_units : int
        Units in the stage (>= 1).
    max_concurrency : int
        Cap on concurrent invocations (>= 1).
    units_per_shard : int, optional
        Fixed shard size; when given it overrides the one-wave rule.

    Returns
    -------
    int
        ``ceil(n_units / units_per_shard)`` when a size is fixed, else ``min(n_units, max_concurrency)``.

    Raises
    ------
    InvalidJobError
        If a count is below 1.
    """
    if n_units < 1:
        raise InvalidJobError(f"a stage needs at least one unit, got {n_units}")
    if max_concurrency < 1:
        raise InvalidJobError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if units_per_shard is not None:
        if units_per_shard < 1:
            raise InvalidJobError(f"units_per_shard must be >= 1, got {units_per_shard}")
        return math.ceil(n_units / units_per_shard)
    return min(n_units, max_concurrency)


def share_concurrency(n_units: Sequence[int], max_concurrency: int) -> list[int]:
    """Share a job's concurrency between the Lambda resources of one wave, never past it.

    A wave whose units the placement put on several memory sizes runs one Map item list over all
    of them, so their concurrencies add up and must stay within the job's cap (its
    ``max_concurrency``, or its Dorm partition). Each of the ``min(k, max_concurrency)`` resources
    with the most units (ties: the given order) gets one invocation; the rest of the cap is shared
    between them in proportion to their units by the largest-remainder (Hamilton) method. A
    resource left at 0 runs nothing in this wave: its units wait for the stage's next wave.

    Parameters
    ----------
    n_units : sequence of int, shape (k,)
        Units placed on each resource (>= 1 each), in the wave's order.
    max_concurrency : int
        The job's cap on concurrent invocations (>= 1).

    Returns
    -------
    list of int, shape (k,)
        Concurrency per resource, summing to ``max_concurrency`` exactly (a share may exceed its
        resource's units; its sizing then runs fewer), 0 for a deferred resource.

    Raises
    ------
    InvalidJobError
        A count below 1.
    """
    if max_concurrency < 1:
        raise InvalidJobError(f"max_concurrency must be >= 1, got {max_concurrency}")
    if any(n < 1 for n in n_units):
        raise InvalidJobError(f"every resource needs at least one unit, got {list(n_units)}")
    order = sorted(range(len(n_units)), key=lambda i: -n_units[i])[:max_concurrency]
    shares = [0] * len(n_units)
    if not order:
        return shares
    spare = max_concurrency - len(order)
    total = sum(n_units[i] for i in order)
    quotas = {i: spare * n_units[i] / total for i in order}
    for i in order:
        shares[i] = 1 + math.floor(quotas[i])
    left = max_concurrency - sum(shares)
    for i in sorted(order, key=lambda i: -(quotas[i] - math.floor(quotas[i])))[:left]:
        shares[i] += 1
    return shares


def deal(units: Sequence[T], n_shards: int) -> list[list[T]]:
    """Deal ``units`` round-robin into ``n_shards`` non-empty lists (sizes differ by at most one).

    Round-robin mixes the learners of a stage, whose fits differ in cost, evenly across shards.
    """
    n_shards = max(1, min(n_shards, len(units)))
    return [list(units[i::n_shards]) for i in range(n_shards)]
