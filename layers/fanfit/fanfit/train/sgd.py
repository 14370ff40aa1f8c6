"""Data-parallel mini-batch SGD: a worker's gradient, the reduce, BSP and DS-Sync updates.

One round, for ``N`` workers with batch sizes ``b`` (``B = sum(b)``):

1. worker ``i`` takes its rows :func:`fanfit.train.batches.batch_rows` and returns
   :func:`worker_gradient`: the gradient ``g_i`` of the mean loss over its ``b_i`` rows;
2. the reduce forms :math:`g = \\sum_i (b_i / B)\\, g_i`, the gradient of the mean loss over all
   ``B`` rows, so a round is one SGD step on a global batch of ``B`` samples however LB-BSP split
   it (:func:`reduce_gradients`, :func:`sgd_step`);
3. with DS-Sync (Wang et al. 2020) each worker keeps its own model; in the round's groups
   (drawn by the scheduler, :func:`fanfit.sched.dssync.dssync_groups`) every worker steps its model with its own gradient
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
from fanfit.split import even_batches
from fanfit.train.batches import batch_rows
from fanfit.train.linear import Params, init_params, loss_gradient

__all__ = [
    "SYNC_MODES",
    "WorkerGradient",
    "average_params",
    "dssync_step",
    "is_penalised",
    "reduce_gradients",
    "sgd_step",
    "train_sgd",
    "worker_gradient",
]

#: Synchronisation modes of :func:`train_sgd`.
SYNC_MODES: tuple[str, ...] = ("bsp", "ds-sync")
#: A model's worker step: ``(params, X, y) -> (mean loss, gradient dict)`` over the rows given
#: (:func:`fanfit.train.linear.loss_gradient` with its model bound, or
#: :func:`fanfit.train.mlp.mlp_loss_gradient`).
LossGradient = Callable[[Params, np.ndarray, np.ndarray], tuple[float, Params]]


@dataclass(frozen=True)
class WorkerGradient:
    """What a worker returns for one round.

    Attributes
    ----------
    grads : dict of str to numpy.ndarray
        Gradient of the mean loss over the worker's rows, one array per parameter of the model
        and of its shape: ``W`` (n_features, n_outputs), ``b`` (n_outputs,) for the linear models
        (:mod:`fanfit.train.linear`); ``W0, b0, W1, b1, ...`` for an MLP
        (:mod:`fanfit.train.mlp`). No penalty term.
    loss : float
        Mean loss over its rows (0 for no rows).
    n_samples : int
        Its batch size ``b_i``.
    """

    grads: Params
    loss: float
    n_samples: int

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat arrays for ``numpy.savez``: ``grad_<key>`` per parameter (``grad_W``, ``grad_b``
        for a linear model), ``loss``, ``n_samples``."""
        return {
            **{f"grad_{key}": value for key, value in self.grads.items()},
            "loss": np.asarray(self.loss),
            "n_samples": np.asarray(self.n_samples),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> WorkerGradient:
        """Inverse of :meth:`to_arrays` (e.g. from ``numpy.load``)."""
        return cls(
            {k[len("grad_") :]: np.asarray(v) for k, v in arrays.items() if k.startswith("grad_")},
            float(arrays["loss"]),
            int(arrays["n_samples"]),
        )


def worker_gradient(
    model: str, params: Params, X: np.ndarray, y: np.ndarray, *, device: str | None = None
) -> WorkerGradient:
    """A worker's step: loss and gradient over its mini-batch.

    Parameters
    ----------
    model : {'logistic', 'least-squares'}
    params : dict
        The worker's current model.
    X : numpy.ndarray, shape (b_i, n_features)
        Its rows, ``X_train[batch_rows(...)]``.
    y : numpy.ndarray, shape (b_i,) or (b_i, n_outputs)
    device : {'auto', 'cpu', 'cuda'}, optional
        None: numpy (:func:`fanfit.train.linear.loss_gradient`); otherwise PyTorch on that device
        (:func:`fanfit.train.torch_steps.loss_gradient_torch`, the GPU worker's backend).

    Returns
    -------
    WorkerGradient
    """
    if device is None:
        loss, grads = loss_gradient(model, params, X, y)
    else:
        from fanfit.train.torch_steps import loss_gradient_torch

        loss, grads = loss_gradient_torch(model, params, X, y, device=device)
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
        No parts, or parts whose gradients do not hold the same parameters.
    """
    w = _weights(parts)
    keys = _same_keys([p.grads for p in parts])
    grads = {
        key: sum((wi * p.grads[key] for wi, p in zip(w, parts)), np.zeros_like(parts[0].grads[key]))
        for key in keys
    }
    loss = float(sum(wi * p.loss for wi, p in zip(w, parts)))
    return WorkerGradient(grads, loss, sum(p.n_samples for p in parts))


def _same_keys(dicts: Sequence[Params]) -> list[str]:
    """The parameter names of the first dict, in its order; every dict must hold the same."""
    keys = list(dicts[0])
    for d in dicts[1:]:
        if set(d) != set(keys):
            raise InvalidJobError(
                f"models hold different parameters: {sorted(keys)} and {sorted(d)}."
            )
    return keys


def is_penalised(value: np.ndarray) -> bool:
    """Whether :func:`sgd_step` penalises a parameter: weight matrices (2 or more dimensions)
    are, intercepts and biases (vectors) are not, as in scikit-learn."""
    return np.ndim(value) >= 2


def sgd_step(params: Params, grads: Params, lr: float, l2: float = 0.0) -> Params:
    """One gradient step on the mean loss plus ``l2 / 2`` times the squared norm of the weights.

    For every weight matrix ``W`` (any parameter of 2 or more dimensions: ``W`` of a linear model,
    ``W0, W1, ...`` of an MLP) ``W - lr * (g_W + l2 * W)``; for every vector ``b`` (intercepts,
    biases: not penalised) ``b - lr * g_b`` (:func:`is_penalised`).

    Parameters
    ----------
    params, grads : dict of str to numpy.ndarray
        The same keys and shapes: ``W`` (n_features, n_outputs), ``b`` (n_outputs,) for a linear
        model; ``W<l>`` (n_in, n_out), ``b<l>`` (n_out,) per layer ``l`` of an MLP.
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
        ``lr <= 0`` or ``l2 < 0``, or ``grads`` not holding the parameters of ``params``.
    """
    if not lr > 0 or not l2 >= 0:
        raise InvalidJobError(f"need lr > 0 and l2 >= 0, got lr={lr!r}, l2={l2!r}.")
    keys = _same_keys([params, grads])
    return {
        key: params[key] - lr * (grads[key] + l2 * params[key])
        if is_penalised(params[key])
        else params[key] - lr * grads[key]
        for key in keys
    }


def average_params(params: Sequence[Params], weights: ArrayLike | None = None) -> Params:
    """Weighted mean of models (equal weights by default); DS-Sync's final model.

    Parameters
    ----------
    params : sequence of dict of str to numpy.ndarray
        Models with the same parameters (any keys: ``W, b`` or ``W0, b0, ...``).
    weights : array_like of shape (len(params),), optional

    Returns
    -------
    dict
        Per key, the weighted mean of the models' arrays.

    Raises
    ------
    InvalidJobError
        No models, models with different parameters, or weights that are not non-negative with a
        positive sum.
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
        for key in _same_keys(params)
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
    init: Params | None = None,
    gradient: LossGradient | None = None,
    groups: Callable[[int], Sequence[Sequence[int]]] | None = None,
) -> Params:
    """Run the round protocol in this process: the reference for what a pipeline computes.

    Parameters
    ----------
    model : {'logistic', 'least-squares'}
        The linear model; ignored when ``gradient`` is given.
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
        DS-Sync's group size (unused: the groups come from ``groups``; kept for the callers that
        pass a job's options).
    batches : callable, optional
        ``round_index -> (n_workers,) batch sizes summing to global_batch`` (e.g. LB-BSP from
        measured throughputs); default the even split :func:`fanfit.split.even_batches`.
    init : dict, optional
        The round-0 model (e.g. :func:`fanfit.train.mlp.init_mlp_params`); default the linear
        model's zeros, :func:`fanfit.train.linear.init_params`.
    gradient : callable, optional
        The worker step (:data:`LossGradient`), e.g. :func:`fanfit.train.mlp.mlp_loss_gradient`
        for an MLP; default :func:`fanfit.train.linear.loss_gradient` of ``model``.
    groups : callable, optional
        DS-Sync only (required there): ``round_index -> partition of range(n_workers)``, the
        round's groups as the scheduler draws them, e.g. ``lambda r: dssync_groups(n_workers,
        group_size, seed, r)`` (:func:`fanfit.sched.dssync.dssync_groups`). This package does not
        import the scheduler: the schedule is an input.

    Returns
    -------
    dict
        The final model (for DS-Sync, the average of the workers' models).

    Raises
    ------
    InvalidJobError
        Unknown ``sync``, DS-Sync without ``groups``, or batches that do not sum to
        ``global_batch``.
    """
    if sync not in SYNC_MODES:
        raise InvalidJobError(f"sync must be one of {', '.join(SYNC_MODES)}; got {sync!r}.")
    if sync == "ds-sync" and groups is None:
        raise InvalidJobError("sync 'ds-sync' needs groups: round_index -> the round's groups.")
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    start = init_params(X.shape[1], n_outputs) if init is None else init
    params = [start] * (n_workers if sync == "ds-sync" else 1)
    for r in range(rounds):
        b = even_batches(global_batch, n_workers) if batches is None else np.asarray(batches(r))
        if b.shape != (n_workers,) or int(b.sum()) != global_batch:
            raise InvalidJobError(f"round {r}: batches {b!r} do not sum to {global_batch}.")
        parts = []
        for i in range(n_workers):
            rows = batch_rows(X.shape[0], b, seed, r, i)
            own = params[i if sync == "ds-sync" else 0]
            if gradient is None:
                parts.append(worker_gradient(model, own, X[rows], y[rows]))
            else:
                loss, grads = gradient(own, X[rows], y[rows])
                parts.append(WorkerGradient(grads, loss, int(rows.size)))
        if sync == "bsp":
            params = [sgd_step(params[0], reduce_gradients(parts).grads, lr, l2)]
        else:
            assert groups is not None  # checked above
            params = dssync_step(params, parts, groups(r), lr, l2)
    return average_params(params)
