"""The even split of a round's global batch between workers (plain BSP), shared by sched and train.

:mod:`fanfit.sched` (whose LB-BSP, :func:`fanfit.sched.lbbsp.lbbsp_batches`, is the uneven split)
and :mod:`fanfit.train` (whose SGD and K-Means split a round evenly by default) sit on the same
row of the layout and may not import each other, so the rule they share lives here, below both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fanfit.errors import InvalidJobError

__all__ = ["check_count", "even_batches"]


def check_count(name: str, value: Any, low: int) -> None:
    """Check that ``value`` is an integer (not a bool) of at least ``low``.

    Raises
    ------
    InvalidJobError
        Naming ``name``, the bound and the value given.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise InvalidJobError(f"{name} must be an integer of at least {low}, got {value!r}.")


def even_batches(global_batch: int, n_workers: int) -> np.ndarray:
    """Plain BSP's split of a round: ``global_batch`` split as evenly as possible.

    ``B // N + 1`` samples for the first ``B % N`` workers, ``B // N`` for the others: the sizes
    sum to ``B`` and differ by at most one sample (the uniform baseline of LB-BSP, Chen et al.,
    IEEE TCC 2021, :mod:`fanfit.sched.lbbsp`).

    Parameters
    ----------
    global_batch : int
        ``B`` (>= ``n_workers``), samples per round.
    n_workers : int
        ``N`` (>= 1).

    Returns
    -------
    numpy.ndarray of int64, shape (n_workers,)
        Samples per worker.

    Raises
    ------
    InvalidJobError
        If ``N`` is not an integer >= 1 or ``B`` not an integer >= ``N``, naming which.
    """
    check_count("n_workers", n_workers, 1)
    check_count("global_batch", global_batch, n_workers)
    batches = np.full(n_workers, global_batch // n_workers, dtype=np.int64)
    batches[: global_batch % n_workers] += 1
    return batches
