"""Data-parallel mini-batch SGD: a worker's gradient, the reduce, BSP and DS-Sync updates.

One round, for ``N`` workers with batch sizes ``b`` (``B = sum(b)``):

1. worker ``i`` takes its rows :func:`fanfit.train.batches.batch_rows` and returns
   :func:`worker_gradient`: the gradient ``g_i`` of the mean loss over its ``b_i`` rows;
2. the reduce forms :math:`g = \\sum_i (b_i / B)\\, g_i`, the gradient of the mean loss over all
   ``B`` rows, so a round is one SGD step on a global batch of ``B`` samples however LB-BSP split
   it (:func:`reduce_gradients`, :func:`sgd_step`);
3. with DS-Sync (Wang et al. 2020) each worker keeps its own model; in the round's groups
   (:func:`fanfit.sched.dssync.dssync_groups`) every worker steps its model with its own gradient
   and the group averages the stepped models, weighted by batch size (:func:`dssync_step`).
   Members of a group then hold the same model; groups are reshuffled every round, so models mix
   across groups over rounds, and the final model is the plain average over workers
   (:func:`average_params`). A single group of all workers is BSP.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidJobError
from fanfit.sched.dssync import dssync_groups
from fanfit.sched.lbbsp import uniform_batches
from fanfit.train.batches import batch_rows
from fanfit.train.linear import Params, init_params, loss_gradient

__all__ = [
    "SYNC_MODES",
    "WorkerGradient",
    "average_params",
    "dssync_step",
    "reduce_gradients",
    "sgd_step",
    "train_sgd",
    "worker_gradient",
]

#: Synchronisation modes of :func:`train_sgd`.
SYNC_MODES: tuple[str, ...] = ("bsp", "ds-sync")


@dataclass(frozen=True)
class WorkerGradient:
    """What a worker returns for one round.

    Attributes
    ----------
    grads : dict
        Gradient of the mean loss over the worker's rows: ``W`` (n_features, n_outputs),
        ``b`` (n_outputs,). No penalty term.
    loss : float
        Mean loss over its rows (0 for no rows).
    n_samples : int
        Its batch size ``b_i``.
    """

    grads: Params
    loss: float
    n_samples: int

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat arrays for ``numpy.savez``: ``grad_W``, ``grad_b``, ``loss``, ``n_samples``."""
        return {
            "grad_W": self.grads["W"],
            "grad_b": self.grads["b"],
            "loss": np.asarray(self.loss),
            "n_samples": np.asarray(self.n_samples),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> WorkerGradient:
        """Inverse of :meth:`to_arrays` (e.g. from ``numpy.load``)."""
        return cls(
            {"W": np.asarray(arrays["grad_W"]), "b": np.asarray(arrays["grad_b"])},
            float(arrays["loss"]),
            int(arrays["n_samples"]),
        )


def worker_gradient(model: str, params: Params, X: np.ndarray, y: np.ndarray) -> WorkerGradient:
    """A worker's step: loss and gradient over its mini-batch.

    Parameters
    ----------
    model : {'logistic', 'least-squares'}
    params : dict
        The worker's current model.
    X : numpy.ndarray, shape (b_i, n_features)
        Its rows, ``X_train[batch_rows(...)]``.
    y : numpy.ndarray, shape (b_i,) or (b_i, n_outputs)

    Returns
    -------
    WorkerGradient
    """
    loss, grads = loss_gradient(model, params, X, y)
    return WorkerGradient(grads, loss, int(np.asarray(X).shape[0]))


def _weights(parts: Sequence[WorkerGradient]) -> np.ndarray:
    n = np.array([p.n_samples for p in parts], dtype=np.float64)
    if n.size == 0:
        raise InvalidJobError("a reduce needs at least one worker's gradient.")
    return n / n.sum() if n.sum() > 0 else np.full(n.size, 1.0 / n.size)


def reduce_gradients(parts: Sequence[WorkerGradient]) -> WorkerGradient:
    """BSP reduce: ``sum_i (b_i / B) g_i``, the gradient over the union of the workers' rows.

    Parameters
    ----------
    parts : sequence of WorkerGradient
        One per worker (>= 1).

    Returns
    -------
    WorkerGradient
        With ``n_samples = B`` and the batch-weighted mean loss.

    Raises
    ------
    InvalidJobError
        No parts.
    """
    w = _weights(parts)
    grads = {
        key: sum((wi * p.grads[key] for wi, p in zip(w, parts)), np.zeros_like(parts[0].grads[key]))
        for key in ("W", "b")
    }
    loss = float(sum(wi * p.loss for wi, p in zip(w, parts)))
    return WorkerGradient(grads, loss, sum(p.n_samples for p in parts))


def sgd_step(params: Params, grads: Params, lr: float, l2: float = 0.0) -> Params:
    """One gradient step on the mean loss plus ``l2 / 2 * ||W||^2``.

    ``W - lr * (g_W + l2 * W)`` and ``b - lr * g_b`` (the intercept is not penalised).

    Parameters
    ----------
    params, grads : dict
        ``W`` (n_features, n_outputs), ``b`` (n_outputs,).
    lr : float
        Learning rate (> 0).
    l2 : float, default 0
        Penalty (>= 0). scikit-learn's ``LogisticRegression(C=C)`` on ``n`` rows is ``1 / (C n)``.

    Returns
    -------
    dict
        New parameters (the inputs are not modified).

    Raises
    ------
    InvalidJobError
        ``lr <= 0`` or ``l2 < 0``.
    """
    if not lr > 0 or not l2 >= 0:
        raise InvalidJobError(f"need lr > 0 and l2 >= 0, got lr={lr!r}, l2={l2!r}.")
    return {
        "W": params["W"] - lr * (grads["W"] + l2 * params["W"]),
        "b": params["b"] - lr * grads["b"],
    }


def average_params(params: Sequence[Params], weights: ArrayLike | None = None) -> Params:
    """Weighted mean of models (equal weights by default); DS-Sync's final model.

    Raises
    ------
    InvalidJobError
        No models, or weights that are not non-negative with a positive sum.
    """
    if len(params) == 0:
        raise InvalidJobError("cannot average zero models.")
    w = np.full(len(params), 1.0) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(params),) or np.any(w < 0) or not w.sum() > 0:
        raise InvalidJobError(
            f"weights must be {len(params)} non-negative numbers, got {weights!r}."
        )
    w = w / w.sum()
    return {
        key: sum((wi * p[key] for wi, p in zip(w, params)), np.zeros_like(params[0][key]))
        for key in ("W", "b")
    }


def dssync_step(
    worker_params: Sequence[Params],
    parts: Sequence[WorkerGradient],
    groups: Sequence[Sequence[int]],
    lr: float,
    l2: float = 0.0,
) -> list[Params]:
    """DS-Sync update: each group averages its members' stepped models.

    For group ``G`` and member ``i``: :math:`w_i \\leftarrow \\sum_{j \\in G} (b_j / B_G)\\,
    \\mathrm{step}(w_j, g_j)`, with :func:`sgd_step` as ``step`` and ``B_G`` the group's samples
    (equal weights if it has none). When the members start from the same model this is one SGD
    step on the group's ``B_G`` rows; with one group of all workers it is the BSP update.

    Parameters
    ----------
    worker_params : sequence of dict
        Each worker's model, ``n_workers`` of them.
    parts : sequence of WorkerGradient
        Each worker's gradient on its own model, same order.
    groups : sequence of sequence of int
        A partition of ``range(n_workers)`` (:func:`fanfit.sched.dssync.dssync_groups`).
    lr, l2 : float
        As in :func:`sgd_step`.

    Returns
    -------
    list of dict
        Each worker's new model.

    Raises
    ------
    InvalidJobError
        Lengths differ, or ``groups`` is not a partition of the workers.
    """
    n = len(worker_params)
    members = sorted(int(i) for g in groups for i in g)
    if len(parts) != n or members != list(range(n)):
        raise InvalidJobError(
            f"need one gradient per model and groups partitioning range({n}); got {len(parts)} "
            f"gradients and groups {list(map(list, groups))}."
        )
    stepped = [sgd_step(p, g.grads, lr, l2) for p, g in zip(worker_params, parts)]
    new: list[Params] = [{} for _ in range(n)]
    for group in groups:
        merged = average_params([stepped[i] for i in group], _weights([parts[i] for i in group]))
        for i in group:
            new[i] = {key: value.copy() for key, value in merged.items()}
    return new


def train_sgd(
    model: str,
    X: np.ndarray,
    y: np.ndarray,
    n_outputs: int,
    *,
    global_batch: int,
    n_workers: int,
    rounds: int,
    lr: float,
    l2: float = 0.0,
    seed: int = 0,
    sync: str = "bsp",
    group_size: int = 2,
    batches: Callable[[int], ArrayLike] | None = None,
) -> Params:
    """Run the round protocol in this process: the reference for what a pipeline computes.

    Parameters
    ----------
    model : {'logistic', 'least-squares'}
    X : numpy.ndarray, shape (n_obs, n_features)
    y : numpy.ndarray, shape (n_obs,) or (n_obs, n_outputs)
    n_outputs : int
        Classes (logistic) or targets (least squares).
    global_batch : int
        ``B``, samples per round.
    n_workers : int
        ``N``.
    rounds : int
        Rounds (SGD steps) to run.
    lr, l2 : float
        As in :func:`sgd_step`.
    seed : int
        The job seed: batches (:func:`fanfit.train.batches.batch_rows`) and DS-Sync groups.
    sync : {'bsp', 'ds-sync'}
    group_size : int
        DS-Sync's group size.
    batches : callable, optional
        ``round_index -> (n_workers,) batch sizes summing to global_batch`` (e.g. LB-BSP from
        measured throughputs); default :func:`fanfit.sched.lbbsp.uniform_batches`.

    Returns
    -------
    dict
        The final model (for DS-Sync, the average of the workers' models).

    Raises
    ------
    InvalidJobError
        Unknown ``sync``, or batches that do not sum to ``global_batch``.
    """
    if sync not in SYNC_MODES:
        raise InvalidJobError(f"sync must be one of {', '.join(SYNC_MODES)}; got {sync!r}.")
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    params = [init_params(X.shape[1], n_outputs)] * (n_workers if sync == "ds-sync" else 1)
    for r in range(rounds):
        b = uniform_batches(global_batch, n_workers) if batches is None else np.asarray(batches(r))
        if b.shape != (n_workers,) or int(b.sum()) != global_batch:
            raise InvalidJobError(f"round {r}: batches {b!r} do not sum to {global_batch}.")
        parts = []
        for i in range(n_workers):
            rows = batch_rows(X.shape[0], b, seed, r, i)
            parts.append(
                worker_gradient(model, params[i if sync == "ds-sync" else 0], X[rows], y[rows])
            )
        if sync == "bsp":
            params = [sgd_step(params[0], reduce_gradients(parts).grads, lr, l2)]
        else:
            params = dssync_step(
                params, parts, dssync_groups(n_workers, group_size, seed, r), lr, l2
            )
    return average_params(params)
