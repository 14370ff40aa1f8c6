"""LB-BSP: per-worker batch sizes proportional to predicted throughput.

In bulk synchronous parallel training every round waits for its slowest worker. LB-BSP (Chen, Wang,
Zhou, Chen, Wang and Ma, "Accelerating Distributed Learning in Non-Dedicated Environments", IEEE
Transactions on Cloud Computing, 2021) keeps the global batch ``B`` fixed (so the optimisation is
unchanged) and gives worker ``i`` a share proportional to its predicted throughput ``v_i``:

.. math::

    b_i \\approx B \\, v_i / \\textstyle\\sum_j v_j, \\qquad \\sum_i b_i = B,

so that the workers' compute times ``b_i / v_i`` are equal. A worker's batch is also capped by its
memory. fanfit allocates the real-valued shares by water-filling (workers at a bound keep it, the
rest share the remainder in proportion to ``v``), then rounds to integers with the largest-remainder
method, which keeps the sum exactly ``B`` and every batch within one sample of its share.

Every worker gets at least ``min_batch`` samples (default 1): a worker in the round's Map that
computes on nothing still pays its start-up and its read of the model. Set ``min_batch=0`` to let
the slowest workers sit a round out.

Interference. A worker's speed can change in a step (a co-tenant takes its CPU). The predicted
throughput is an EWMA (:class:`fanfit.sched.throughput.EwmaThroughput`, weight 0.3), which would
take about five rounds to cross most of such a step; :func:`is_level_shift` tells a step from noise
(the newest measurement off the estimate by more than :data:`SHIFT_RATIO` either way), and the train
scheduler then restarts the worker's estimate from the newest measurement, so the next round's
batches follow at once. :func:`rounds_to_follow` measures how fast they do.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidJobError
from fanfit.split import check_count

__all__ = [
    "SHIFT_RATIO",
    "idle_fraction",
    "is_level_shift",
    "lbbsp_batches",
    "round_times",
    "rounds_to_follow",
]

#: A worker's newest throughput that differs from its estimate by more than this factor (faster or
#: slower) is a level shift, not noise: smaller round-to-round changes (shared cores, page cache)
#: are left to the EWMA, while a worker that loses a third of its CPU or more is followed at once.
SHIFT_RATIO = 1.5


def lbbsp_batches(
    global_batch: int,
    throughputs: ArrayLike,
    max_batch: ArrayLike | None = None,
    min_batch: int = 1,
) -> np.ndarray:
    """LB-BSP batch sizes: proportional to throughput, within bounds, summing to ``global_batch``.

    Parameters
    ----------
    global_batch : int
        ``B``, samples per round (>= 1).
    throughputs : array_like of float, shape (n_workers,)
        Predicted throughput ``v_i`` of each worker, samples/s (finite, > 0).
    max_batch : array_like of int, shape (n_workers,), optional
        Largest batch each worker can hold (its memory bound), samples. None: unbounded.
    min_batch : int, default 1
        Smallest batch of any worker (>= 0).

    Returns
    -------
    numpy.ndarray of int64, shape (n_workers,)
        ``b`` with ``b.sum() == B`` and ``min_batch <= b_i <= max_batch_i``. Where no bound binds,
        ``|b_i - B v_i / sum(v)| < 1``. Otherwise ``b`` rounds the water-filling shares
        ``clip(lambda v_i, min_batch, max_batch_i)`` (one ``lambda`` for all, chosen so they sum
        to ``B``): the excess over a bound goes to the unsaturated workers in proportion to ``v``.
        Remainders are broken towards the larger fraction, then the lower index: the result is a
        function of the arguments only.

    Raises
    ------
    InvalidJobError
        A throughput not finite and positive; a bound below ``min_batch``;
        ``B < n_workers * min_batch``; or ``sum(max_batch) < B``.
    """
    v = np.asarray(throughputs, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v) & (v > 0)):
        raise InvalidJobError(
            f"throughputs must be a non-empty 1-d array of positive samples/s, got {v!r}."
        )
    n = v.size
    check_count("min_batch", min_batch, 0)
    check_count("global_batch", global_batch, max(1, n * min_batch))
    lo: np.ndarray = np.full(n, float(min_batch))
    hi: np.ndarray
    if max_batch is None:
        hi = np.full(n, np.inf)
    else:
        hi = np.asarray(max_batch, dtype=np.float64)
        if hi.shape != (n,) or not np.all(hi == np.floor(hi)) or np.any(hi < min_batch):
            raise InvalidJobError(
                f"max_batch must be {n} integers of at least min_batch={min_batch}, got {max_batch!r}."
            )
        if hi.sum() < global_batch:
            raise InvalidJobError(
                f"The workers' memory bounds hold {int(hi.sum())} samples, fewer than the global "
                f"batch {global_batch}; lower the global batch or add workers."
            )
    share = _water_fill(float(global_batch), v, lo, hi)
    return _largest_remainder(share, global_batch, lo, hi)


def _water_fill(total: float, v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Real shares ``clip(lam * v, lo, hi)`` summing to ``total`` (``sum(lo) <= total <= sum(hi)``).

    Each pass shares what the free workers may take in proportion to ``v``; if the upper
    violations outweigh the lower ones the true ``lam`` is larger, so the workers over their upper
    bound stay there in the solution and are fixed; otherwise those under their lower bound are.
    At most ``n`` passes.
    """
    x = np.empty_like(v)
    free = np.ones(v.size, dtype=bool)
    while True:
        rest = total - x[~free].sum()
        x[free] = rest * v[free] / v[free].sum()
        over = free & (x > hi)
        under = free & (x < lo)
        if not over.any() and not under.any():
            return x
        if (x - hi)[over].sum() >= (lo - x)[under].sum():
            x[over], free[over] = hi[over], False
        else:
            x[under], free[under] = lo[under], False
        if not free.any():
            return x


def _largest_remainder(share: np.ndarray, total: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Integers within ``[lo, hi]`` summing to ``total``, each within one of ``share``."""
    b = np.clip(np.floor(share), lo, hi).astype(np.int64)
    frac = share - b
    order = np.lexsort((np.arange(share.size), -frac))  # larger fraction first, then lower index
    short = total - int(b.sum())
    if short > 0:
        order = order[b[order] < hi[order]]
        b[order[:short]] += 1
    elif short < 0:  # only from float round-off in share: take from the smallest fractions
        order = order[::-1]
        order = order[b[order] > lo[order]]
        b[order[:-short]] -= 1
    return b


def round_times(batches: ArrayLike, throughputs: ArrayLike) -> np.ndarray:
    """Predicted compute seconds of each worker, ``b_i / v_i``.

    Parameters
    ----------
    batches : array_like of int, shape (n_workers,)
        Samples per worker.
    throughputs : array_like of float, shape (n_workers,)
        Samples/s per worker.

    Returns
    -------
    numpy.ndarray of float64, shape (n_workers,)
        Seconds.
    """
    return np.asarray(batches, dtype=np.float64) / np.asarray(throughputs, dtype=np.float64)


def idle_fraction(times: ArrayLike) -> float:
    """Share of the workers' time a round's barrier leaves idle: ``1 - mean(t) / max(t)``.

    Parameters
    ----------
    times : array_like of float, shape (n_workers,)
        Seconds each worker computed in the round (measured, or :func:`round_times`).

    Returns
    -------
    float
        In ``[0, 1)``; 0 when all workers finish together (LB-BSP's aim; Chen et al. 2021).

    Raises
    ------
    InvalidJobError
        Empty, negative or non-finite times, or all zero.
    """
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t) & (t >= 0)) or t.max() == 0:
        raise InvalidJobError(f"times must be non-negative seconds, not all zero; got {t!r}.")
    if t.min() == t.max():
        return 0.0
    return max(0.0, float(1.0 - t.mean() / t.max()))  # round-off can push mean over max


def is_level_shift(estimate: float | None, observed: float, ratio: float = SHIFT_RATIO) -> bool:
    """Whether a worker's newest throughput is a new level rather than noise around ``estimate``.

    Parameters
    ----------
    estimate : float or None
        The predicted throughput before this observation, samples/s (None: no estimate yet).
    observed : float
        The newest measured throughput, samples/s (> 0).
    ratio : float, default :data:`SHIFT_RATIO`
        Factor beyond which the two differ in level (> 1).

    Returns
    -------
    bool
        ``observed > ratio * estimate`` or ``observed < estimate / ratio``; False without an
        estimate.

    Raises
    ------
    InvalidJobError
        ``ratio <= 1``, or ``observed`` or ``estimate`` not finite and positive.
    """
    if not ratio > 1:
        raise InvalidJobError(f"ratio must be > 1, got {ratio!r}.")
    if not (np.isfinite(observed) and observed > 0):
        raise InvalidJobError(
            f"observed must be a positive throughput (samples/s), got {observed!r}."
        )
    if estimate is None:
        return False
    if not (np.isfinite(estimate) and estimate > 0):
        raise InvalidJobError(
            f"estimate must be a positive throughput (samples/s), got {estimate!r}."
        )
    return bool(observed > ratio * estimate or observed < estimate / ratio)


def rounds_to_follow(
    batch_shares: ArrayLike, target_share: float, from_round: int, tolerance: float = 0.1
) -> int | None:
    """Rounds until a worker's batch share comes within ``tolerance`` of its new throughput share.

    Parameters
    ----------
    batch_shares : array_like of float, shape (n_rounds,)
        The worker's ``b_i / B`` in rounds 0, 1, ...
    target_share : float
        Its throughput share after the change, ``v_i / sum_j v_j`` (in ``(0, 1]``).
    from_round : int
        The first round run at the new speed (the interference round ``k``). Its batches were set
        before anything was measured at the new speed, so the soonest a batch can follow is
        round ``k + 1``: 1 round.
    tolerance : float, default 0.1
        Relative tolerance: ``|share - target| <= tolerance * target``.

    Returns
    -------
    int or None
        ``r - k`` for the first round ``r >= k`` within the tolerance, None if no round is.

    Raises
    ------
    InvalidJobError
        ``target_share`` outside ``(0, 1]``, ``tolerance`` negative, ``from_round`` outside the
        rounds given, or shares not 1-d.
    """
    shares = np.asarray(batch_shares, dtype=np.float64)
    if shares.ndim != 1:
        raise InvalidJobError(
            f"batch_shares must be one share per round, got shape {shares.shape}."
        )
    if not 0 < target_share <= 1:
        raise InvalidJobError(f"target_share must be in (0, 1], got {target_share!r}.")
    if not tolerance >= 0:
        raise InvalidJobError(f"tolerance must be >= 0, got {tolerance!r}.")
    check_count("from_round", from_round, 0)
    if from_round >= shares.size:
        raise InvalidJobError(
            f"from_round={from_round} is past the {shares.size} rounds of batch_shares."
        )
    close = np.abs(shares[from_round:] - target_share) <= tolerance * target_share
    hits = np.flatnonzero(close)
    return int(hits[0]) if hits.size else None
