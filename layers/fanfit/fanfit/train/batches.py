"""Which rows a worker processes in a round, from the round's batch sizes alone.

A round's per-worker batch sizes ``b`` (the scheduler's, :func:`fanfit.sched.lbbsp.lbbsp_batches`,
or the even split :func:`fanfit.split.even_batches`) cut a sequence of rows into consecutive pieces,
worker ``i`` taking ``[offset_i, offset_i + b_i)`` with ``offset_i = b_0 + ... + b_{i-1}``:

- full-batch models (K-Means) cut the data set itself (``sum(b) == n_obs``): :func:`row_range`;
- mini-batch SGD cuts the round's global batch, ``B = sum(b)`` distinct rows drawn from
  ``(seed, round)`` only: :func:`batch_rows`. The global batch does not depend on how it is split,
  so a round is one SGD step on the same ``B`` rows whatever LB-BSP decides.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidJobError

__all__ = ["BATCH_STREAM", "batch_rows", "global_batch_rows", "row_range"]

#: First word of the SeedSequence spawn key of mini-batch draws (0 folds, 1 fit units, 2 DS-Sync).
BATCH_STREAM = 3


def _checked(batches: ArrayLike, worker: int) -> np.ndarray:
    b = np.asarray(batches)
    if b.ndim != 1 or b.size == 0 or not np.issubdtype(b.dtype, np.integer) or np.any(b < 0):
        raise InvalidJobError(f"batches must be non-negative integers, one per worker; got {b!r}.")
    if not 0 <= worker < b.size:
        raise InvalidJobError(f"worker must be in [0, {b.size}), got {worker!r}.")
    return b.astype(np.int64)


def row_range(batches: ArrayLike, worker: int) -> slice:
    """Worker ``worker``'s consecutive piece ``[offset, offset + b[worker])``.

    Parameters
    ----------
    batches : array_like of int, shape (n_workers,)
        Rows per worker.
    worker : int
        0-based worker index.

    Returns
    -------
    slice

    Raises
    ------
    InvalidJobError
        Malformed batches or worker index.
    """
    b = _checked(batches, worker)
    start = int(b[:worker].sum())
    return slice(start, start + int(b[worker]))


def global_batch_rows(n_obs: int, global_batch: int, seed: int, round_index: int) -> np.ndarray:
    """The round's global batch: ``global_batch`` distinct row indices drawn uniformly.

    ``numpy.random.default_rng(SeedSequence(seed, spawn_key=(3, round_index))).choice(n_obs,
    global_batch, replace=False)``; rounds draw independently.

    Returns
    -------
    numpy.ndarray of int64, shape (global_batch,)

    Raises
    ------
    InvalidJobError
        ``global_batch`` outside ``[1, n_obs]``, or a negative seed or round.
    """
    if not 1 <= global_batch <= n_obs or seed < 0 or round_index < 0:
        raise InvalidJobError(
            f"need 1 <= global_batch <= n_obs and seed, round_index >= 0; got global_batch="
            f"{global_batch!r}, n_obs={n_obs!r}, seed={seed!r}, round_index={round_index!r}."
        )
    rng = np.random.default_rng(
        np.random.SeedSequence(int(seed), spawn_key=(BATCH_STREAM, int(round_index)))
    )
    return rng.choice(int(n_obs), size=int(global_batch), replace=False).astype(np.int64)


def batch_rows(
    n_obs: int, batches: ArrayLike, seed: int, round_index: int, worker: int
) -> np.ndarray:
    """The rows worker ``worker`` computes its gradient on in round ``round_index``.

    Parameters
    ----------
    n_obs : int
        Rows of the training data.
    batches : array_like of int, shape (n_workers,)
        The round's batch sizes; their sum is the global batch ``B <= n_obs``.
    seed : int
        The job seed (>= 0).
    round_index : int
        The round (>= 0).
    worker : int
        0-based worker index.

    Returns
    -------
    numpy.ndarray of int64, shape (batches[worker],)
        Its piece (:func:`row_range`) of :func:`global_batch_rows`.

    Raises
    ------
    InvalidJobError
        Malformed arguments.
    """
    b = _checked(batches, worker)
    return global_batch_rows(n_obs, int(b.sum()), seed, round_index)[row_range(b, worker)]
