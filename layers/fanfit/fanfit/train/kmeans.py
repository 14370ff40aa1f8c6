"""K-Means (Lloyd) in data-parallel rounds, step for step as scikit-learn 1.7's ``algorithm='lloyd'``.

One round, with centroids :math:`c^{(r)}`, for workers that each hold a piece of the rows
(:func:`fanfit.train.batches.row_range`; the pieces cover the data set, and may change between
rounds as LB-BSP resizes them):

1. worker: :func:`kmeans_step` assigns its rows to the nearest centroid (E-step) and returns per
   centroid the sum of its rows ``(k, d)`` and their count ``(k,)``, its inertia under
   :math:`c^{(r)}`, how many of its rows changed centroid since :math:`c^{(r-1)}`, and its rows
   farthest from their centroid (candidates for empty clusters);
2. reduce: :func:`kmeans_reduce` forms the exact new centroids :math:`c^{(r+1)} = \\text{sum} /
   \\text{count}` over all workers (M-step) and decides convergence.

This is scikit-learn's ``_kmeans_single_lloyd``: an empty cluster is relocated to the row farthest
from its own centroid (that row leaves its old cluster), as ``_relocate_empty_clusters_dense`` does;
the run stops when no label changed (strict convergence; the centroids of that round's M-step are
final) or when the squared centre shift is at most ``tol``, after which one more E-step gives the
inertia of the final centroids. ``tol`` here is absolute: scikit-learn's ``KMeans(tol=t)`` is
``t * mean(var(X, axis=0))``. Two corner cases differ: with several empty clusters in one round,
scikit-learn pairs them with the farthest rows in ``argpartition``'s order, fanfit in order of
distance (ties: lower row); and a cluster left empty (relocation impossible because every row
sits on its centroid, or emptied by a relocation) keeps its old centroid here, where
scikit-learn sets it to the data mean.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidDataError, InvalidJobError
from fanfit.train.batches import row_range

__all__ = [
    "KMeansPartial",
    "KMeansResult",
    "KMeansRound",
    "check_kmeans_inputs",
    "kmeans_fit",
    "kmeans_inertia",
    "kmeans_predict",
    "kmeans_reduce",
    "kmeans_step",
]


@dataclass(frozen=True)
class KMeansPartial:
    """A worker's contribution to one Lloyd round.

    Attributes
    ----------
    sums : numpy.ndarray, shape (k, d)
        Sum of the worker's rows assigned to each centroid.
    counts : numpy.ndarray of int64, shape (k,)
        Rows assigned to each centroid.
    inertia : float
        Sum of squared distances of its rows to their nearest centroid.
    n_changed : int
        Rows whose nearest centroid differs from that under the previous centroids (all rows in
        the first round).
    far_rows : numpy.ndarray, shape (m, d)
        Its ``m = min(k - 1, n_rows)`` rows farthest from their centroid.
    far_dist : numpy.ndarray, shape (m,)
        Their squared distances.
    far_labels : numpy.ndarray of int64, shape (m,)
        Their centroids.
    far_ids : numpy.ndarray of int64, shape (m,)
        Their global row numbers (``row_offset`` + position), for tie-breaking.
    """

    sums: np.ndarray
    counts: np.ndarray
    inertia: float
    n_changed: int
    far_rows: np.ndarray
    far_dist: np.ndarray
    far_labels: np.ndarray
    far_ids: np.ndarray

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat arrays for ``numpy.savez``."""
        return {name: np.asarray(getattr(self, name)) for name in self.__dataclass_fields__}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> KMeansPartial:
        """Inverse of :meth:`to_arrays` (e.g. from ``numpy.load``)."""
        a = {name: np.asarray(arrays[name]) for name in cls.__dataclass_fields__}
        return cls(
            sums=a["sums"],
            counts=a["counts"].astype(np.int64),
            inertia=float(a["inertia"]),
            n_changed=int(a["n_changed"]),
            far_rows=a["far_rows"],
            far_dist=a["far_dist"],
            far_labels=a["far_labels"].astype(np.int64),
            far_ids=a["far_ids"].astype(np.int64),
        )


@dataclass(frozen=True)
class KMeansRound:
    """The reduce's outcome for one round.

    Attributes
    ----------
    centroids : numpy.ndarray, shape (k, d)
        New centroids :math:`c^{(r+1)}`.
    inertia : float
        Inertia under the centroids the workers were given, :math:`c^{(r)}`.
    n_changed : int
        Rows that changed centroid in this round's E-step.
    center_shift : float
        :math:`\\sum_j \\lVert c^{(r+1)}_j - c^{(r)}_j\\rVert^2`.
    strict : bool
        No row changed centroid: the run has converged and ``centroids`` are final.
    converged : bool
        ``strict`` or ``center_shift <= tol``. When not ``strict``, the final inertia is that of
        one more :func:`kmeans_step` round under ``centroids``.
    n_relocated : int
        Empty clusters moved to far rows.
    """

    centroids: np.ndarray
    inertia: float
    n_changed: int
    center_shift: float
    strict: bool
    converged: bool
    n_relocated: int


@dataclass(frozen=True)
class KMeansResult:
    """Outcome of :func:`kmeans_fit`: ``centroids`` (k, d), ``inertia``, ``n_iter`` (rounds, as
    scikit-learn's ``n_iter_``), ``converged``."""

    centroids: np.ndarray
    inertia: float
    n_iter: int
    converged: bool


def check_kmeans_inputs(X: ArrayLike, centroids: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``X`` (n, d) and ``centroids`` (k, d) as float64, checked (both backends use it).

    Raises
    ------
    InvalidDataError
        Shapes that do not fit.
    """
    Xa = np.asarray(X, dtype=np.float64)
    C = np.asarray(centroids, dtype=np.float64)
    if C.ndim != 2 or C.shape[0] < 1 or Xa.ndim != 2 or Xa.shape[1] != C.shape[1]:
        raise InvalidDataError(
            f"X must have shape (n, d) and centroids (k, d); got {Xa.shape} and {C.shape}."
        )
    return Xa, C


def _labels(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    # argmin_j ||c_j||^2 - 2 x.c_j, the form scikit-learn's lloyd iteration compares
    return np.argmin((C * C).sum(axis=1) - 2.0 * (X @ C.T), axis=1)


def kmeans_predict(X: ArrayLike, centroids: ArrayLike) -> np.ndarray:
    """Index of the nearest centroid of each row, int64 of shape (n,)."""
    Xa, C = check_kmeans_inputs(X, centroids)
    return _labels(Xa, C).astype(np.int64)


def kmeans_inertia(X: ArrayLike, centroids: ArrayLike) -> float:
    """Sum of squared distances of the rows of ``X`` (n, d) to their nearest centroid (k, d)."""
    Xa, C = check_kmeans_inputs(X, centroids)
    return float(((Xa - C[_labels(Xa, C)]) ** 2).sum())


def kmeans_step(
    X: ArrayLike,
    centroids: ArrayLike,
    prev_centroids: ArrayLike | None = None,
    row_offset: int = 0,
) -> KMeansPartial:
    """A worker's E-step on its rows, with the partial sums of the M-step.

    Parameters
    ----------
    X : array_like, shape (n_rows, d)
        The worker's rows (may be empty).
    centroids : array_like, shape (k, d)
        The round's centroids :math:`c^{(r)}`.
    prev_centroids : array_like, shape (k, d), optional
        The previous round's :math:`c^{(r-1)}`, to count label changes without storing labels;
        None in the first round.
    row_offset : int, default 0
        Global number of the worker's first row.

    Returns
    -------
    KMeansPartial

    Raises
    ------
    InvalidDataError
        Shapes that do not fit.

    See Also
    --------
    fanfit.train.torch_steps.kmeans_step_torch : the same step in PyTorch (the GPU worker's).
    """
    Xa, C = check_kmeans_inputs(X, centroids)
    k = C.shape[0]
    labels = _labels(Xa, C)
    dist = ((Xa - C[labels]) ** 2).sum(axis=1)
    sums = np.zeros_like(C)
    np.add.at(sums, labels, Xa)
    if prev_centroids is None:
        n_changed = Xa.shape[0]
    else:
        n_changed = int((_labels(Xa, check_kmeans_inputs(Xa, prev_centroids)[1]) != labels).sum())
    m = min(k - 1, Xa.shape[0])
    far = np.lexsort((np.arange(dist.size), -dist))[:m]
    return KMeansPartial(
        sums=sums,
        counts=np.bincount(labels, minlength=k).astype(np.int64),
        inertia=float(dist.sum()),
        n_changed=n_changed,
        far_rows=Xa[far],
        far_dist=dist[far],
        far_labels=labels[far].astype(np.int64),
        far_ids=far.astype(np.int64) + int(row_offset),
    )


def kmeans_reduce(
    parts: Sequence[KMeansPartial], centroids: ArrayLike, tol: float = 0.0
) -> KMeansRound:
    """Merge the workers' partials into the new centroids (M-step) and decide convergence.

    Parameters
    ----------
    parts : sequence of KMeansPartial
        One per worker; together they cover every row once.
    centroids : array_like, shape (k, d)
        The centroids the workers were given.
    tol : float, default 0
        Absolute tolerance on the squared centre shift (>= 0).

    Returns
    -------
    KMeansRound

    Raises
    ------
    InvalidJobError
        No parts, or ``tol < 0``.
    """
    if len(parts) == 0 or not tol >= 0:
        raise InvalidJobError(f"need at least one partial and tol >= 0; got tol={tol!r}.")
    C = np.asarray(centroids, dtype=np.float64)
    sums = np.sum([p.sums for p in parts], axis=0)
    counts = np.sum([p.counts for p in parts], axis=0).astype(np.int64)
    empty = np.flatnonzero(counts == 0)
    n_relocated = 0
    if empty.size:
        dist = np.concatenate([p.far_dist for p in parts])
        if dist.size and dist.max() > 0:
            rows = np.concatenate([p.far_rows for p in parts])
            labels = np.concatenate([p.far_labels for p in parts])
            ids = np.concatenate([p.far_ids for p in parts])
            order = np.lexsort((ids, -dist))[: empty.size]
            for j, f in zip(empty, order):  # as _relocate_empty_clusters_dense
                sums[labels[f]] -= rows[f]
                counts[labels[f]] -= 1
                sums[j], counts[j] = rows[f], 1
                n_relocated += 1
    new = C.copy()
    filled = counts > 0
    new[filled] = sums[filled] * (1.0 / counts[filled])[:, None]
    n_changed = sum(p.n_changed for p in parts)
    shift = float(((new - C) ** 2).sum())
    strict = n_changed == 0
    return KMeansRound(
        centroids=new,
        inertia=float(sum(p.inertia for p in parts)),
        n_changed=n_changed,
        center_shift=shift,
        strict=strict,
        converged=strict or shift <= tol,
        n_relocated=n_relocated,
    )


def kmeans_fit(
    X: ArrayLike,
    init: ArrayLike,
    batches: ArrayLike | Callable[[int], ArrayLike],
    max_iter: int = 300,
    tol: float = 0.0,
) -> KMeansResult:
    """Run the round protocol in this process: the reference for what a pipeline computes.

    Parameters
    ----------
    X : array_like, shape (n_obs, d)
    init : array_like, shape (k, d)
        Initial centroids.
    batches : array_like of int, shape (n_workers,), or callable
        Rows per worker (summing to ``n_obs``), or ``round_index -> batches`` to resize them
        between rounds (LB-BSP).
    max_iter : int, default 300
        Most rounds (>= 1).
    tol : float, default 0
        Absolute tolerance on the squared centre shift.

    Returns
    -------
    KMeansResult
        Equal to scikit-learn's ``KMeans(init=init, n_init=1, algorithm='lloyd', max_iter=max_iter,
        tol=tol_relative)`` up to round-off, when no cluster empties.

    Raises
    ------
    InvalidJobError
        Batches that do not cover the rows, or ``max_iter < 1``.
    """
    Xa, C = check_kmeans_inputs(X, init)
    if max_iter < 1:
        raise InvalidJobError(f"max_iter must be >= 1, got {max_iter!r}.")

    def run(centroids: np.ndarray, prev: np.ndarray | None, r: int) -> list[KMeansPartial]:
        b = np.asarray(batches(r) if callable(batches) else batches)
        if int(np.sum(b)) != Xa.shape[0]:
            raise InvalidJobError(f"round {r}: batches {b!r} do not cover {Xa.shape[0]} rows.")
        pieces = [row_range(b, i) for i in range(b.size)]
        return [kmeans_step(Xa[s], centroids, prev, s.start) for s in pieces]

    prev: np.ndarray | None = None
    for r in range(max_iter):
        out = kmeans_reduce(run(C, prev, r), C, tol)
        prev, C = C, out.centroids
        if out.converged:
            break
    if out.strict:
        return KMeansResult(C, out.inertia, r + 1, True)
    inertia = float(sum(p.inertia for p in run(C, None, r + 1)))  # the final E-step
    return KMeansResult(C, inertia, r + 1, out.converged)
