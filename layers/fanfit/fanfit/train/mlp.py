"""A multi-layer perceptron classifier for data-parallel SGD rounds on the GPU worker.

The network maps ``d`` features through ``L - 1`` ReLU hidden layers to ``K`` class scores:

.. math::

    h_0 = x, \\quad h_l = \\mathrm{relu}(h_{l-1} W_{l-1} + b_{l-1}) \\ (l = 1, \\dots, L - 1),
    \\quad z = h_{L-1} W_{L-1} + b_{L-1},

with softmax cross-entropy :math:`-\\frac1n \\sum_i \\log \\mathrm{softmax}(z_i)_{y_i}` as the loss
(scikit-learn's ``MLPClassifier(activation='relu')`` with a softmax output). Parameters are a dict
of arrays, one weight matrix and one bias per layer: ``W0`` (d, h_1), ``b0`` (h_1,), ``W1``
(h_1, h_2), ``b1`` (h_2,), ..., ``W<L-1>`` (h_{L-1}, K), ``b<L-1>`` (K,), the same orientation as
the linear models' ``W`` (:mod:`fanfit.train.linear`), stored between rounds with ``numpy.savez``.

One round is exactly as for logistic regression (:mod:`fanfit.train.sgd`): each worker returns
:func:`mlp_loss_gradient`, the gradient of the mean loss over its rows (PyTorch autograd); the
reduce weights the gradients by ``b_i / B`` (:func:`fanfit.train.sgd.reduce_gradients`), so a round
is one SGD step on the global batch however it was split; :func:`fanfit.train.sgd.sgd_step` applies
the L2 penalty to the weight matrices only.

Precision: on the CPU the step runs in float64, so a round equals the in-process reference
(:func:`train_mlp`) to rounding; on CUDA (when ``torch.cuda.is_available()`` and the device is
``'auto'`` or ``'cuda'``) it runs in float32, the GPU's fast type, and the gradient is returned as
float64 (agreement with the CPU is then ~1e-6 relative per step, not bit-for-bit).

PyTorch is imported inside :func:`mlp_loss_gradient` only: importing this module needs numpy alone,
so the Lambda functions (whose layer has no torch) import :mod:`fanfit.jobs.train` and initialise,
reduce and predict MLPs (:func:`init_mlp_params`, :func:`mlp_predict`) without it. A train job
runs every ``mlp`` worker on the GPU worker (AWS Batch), whose image has torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidDataError, InvalidJobError
from fanfit.train.linear import Params
from fanfit.train.torch_steps import TORCH_DEVICES, import_torch, resolve_device

__all__ = [
    "MAX_HIDDEN_LAYERS",
    "MAX_HIDDEN_WIDTH",
    "MLP_DEVICES",
    "init_mlp_params",
    "layer_sizes",
    "mlp_accuracy",
    "mlp_device",
    "mlp_loss_gradient",
    "mlp_predict",
    "mlp_predict_proba",
    "mlp_scores",
    "train_mlp",
]

#: Most hidden layers of an ``mlp`` train job.
MAX_HIDDEN_LAYERS = 16
#: Widest hidden layer of an ``mlp`` train job.
MAX_HIDDEN_WIDTH = 8192
#: Where :func:`mlp_loss_gradient` runs: ``'auto'`` (CUDA when available, else the CPU).
MLP_DEVICES: tuple[str, ...] = TORCH_DEVICES
#: Environment variable the GPU worker reads for the device (default ``'auto'``).
DEVICE_VARIABLE = "FANFIT_MLP_DEVICE"


def _check_hidden(hidden: Sequence[int]) -> tuple[int, ...]:
    sizes = tuple(hidden)
    if not (
        1 <= len(sizes) <= MAX_HIDDEN_LAYERS
        and all(
            isinstance(h, int | np.integer)
            and not isinstance(h, bool)
            and 1 <= h <= MAX_HIDDEN_WIDTH
            for h in sizes
        )
    ):
        raise InvalidJobError(
            f"--hidden must be 1..{MAX_HIDDEN_LAYERS} layer widths, integers in "
            f"1..{MAX_HIDDEN_WIDTH} (e.g. 256,256,256); got {list(sizes)!r}"
        )
    return tuple(int(h) for h in sizes)


def layer_sizes(n_features: int, hidden: Sequence[int], n_outputs: int) -> tuple[int, ...]:
    """``(d, h_1, ..., h_{L-1}, K)``: the widths the network's ``L`` layers map between.

    Raises
    ------
    InvalidJobError
        Hidden widths out of range (naming ``--hidden``), or ``d`` or ``K`` below 1.
    """
    if n_features < 1 or n_outputs < 1:
        raise InvalidJobError(
            f"n_features and n_outputs must be >= 1, got {n_features!r}, {n_outputs!r}."
        )
    return (int(n_features), *_check_hidden(hidden), int(n_outputs))


def init_mlp_params(n_features: int, hidden: Sequence[int], n_outputs: int, seed: int) -> Params:
    """The round-0 model: Glorot-uniform weights and biases drawn from the job seed.

    Every ``W<l>`` (n_in, n_out) and ``b<l>`` (n_out,) is uniform on
    :math:`\\pm\\sqrt{6 / (n_{in} + n_{out})}` (Glorot and Bengio 2010), as scikit-learn's
    ``MLPClassifier`` initialises a ReLU network (``_init_coef``), drawn in layer order from
    ``numpy.random.default_rng(seed)``: the same seed gives the same model everywhere (numpy's
    PCG64 stream does not depend on the platform), without torch.

    Parameters
    ----------
    n_features : int
        ``d``.
    hidden : sequence of int
        Hidden layer widths, e.g. ``(256, 256, 256)``.
    n_outputs : int
        ``K``, classes.
    seed : int
        The job seed (>= 0).

    Returns
    -------
    dict of str to numpy.ndarray (float64)
        ``W0, b0, ..., W<L-1>, b<L-1>`` with ``L = len(hidden) + 1``.

    Raises
    ------
    InvalidJobError
        Sizes out of range.
    """
    sizes = layer_sizes(n_features, hidden, n_outputs)
    rng = np.random.default_rng(int(seed))
    params: Params = {}
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        bound = np.sqrt(6.0 / (fan_in + fan_out))
        params[f"W{layer}"] = rng.uniform(-bound, bound, (fan_in, fan_out))
        params[f"b{layer}"] = rng.uniform(-bound, bound, fan_out)
    return params


def _n_layers(params: Params) -> int:
    n = 0
    while f"W{n}" in params:
        n += 1
    if n == 0 or set(params) != {f"{p}{i}" for i in range(n) for p in "Wb"}:
        raise InvalidJobError(
            f"an MLP's parameters are W0, b0, ..., W<L-1>, b<L-1>; got {sorted(params)}."
        )
    return n


def _labels(y: ArrayLike, n_classes: int) -> np.ndarray:
    labels = np.asarray(y)
    if labels.ndim != 1 or not np.all((labels == np.round(labels)) & (labels >= 0)):
        raise InvalidDataError("y must hold class labels 0, 1, ..., n_outputs - 1.")
    if labels.size and labels.max() >= n_classes:
        raise InvalidDataError(
            f"y holds class {int(labels.max())}, but the model has {n_classes} classes."
        )
    return labels.astype(np.int64)


def _check_x(params: Params, X: ArrayLike) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    d = params["W0"].shape[0]
    if X.ndim != 2 or X.shape[1] != d:
        raise InvalidDataError(f"X must have shape (n, {d}), got {X.shape}.")
    return X


def mlp_scores(params: Params, X: ArrayLike) -> np.ndarray:
    """Class scores (logits) ``z`` of rows ``X`` (n, d), shape (n, K), in numpy (float64)."""
    n_layers = _n_layers(params)
    h = _check_x(params, X)
    for layer in range(n_layers):
        h = h @ params[f"W{layer}"] + params[f"b{layer}"]
        if layer < n_layers - 1:
            h = np.maximum(h, 0.0)
    return h


def mlp_predict_proba(params: Params, X: ArrayLike) -> np.ndarray:
    """Class probabilities ``softmax(z)``, shape (n, K), in numpy."""
    Z = mlp_scores(params, X)
    Z = Z - Z.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)


def mlp_predict(params: Params, X: ArrayLike) -> np.ndarray:
    """Most probable class index per row, int64, shape (n,), in numpy."""
    return mlp_scores(params, X).argmax(axis=1).astype(np.int64)


def mlp_accuracy(params: Params, X: ArrayLike, y: ArrayLike) -> float:
    """Share of rows whose most probable class index is ``y`` (n,)."""
    return float(np.mean(mlp_predict(params, X) == np.asarray(y)))


_WHY = (
    "the mlp model's worker step needs PyTorch, which is not installed here (the Lambda "
    "layer does not ship it): run every mlp worker on the GPU worker (--gpu-workers "
    "equal to --workers), or `pip install torch` where it runs."
)


def mlp_device(device: str | None = None) -> str:
    """Where :func:`mlp_loss_gradient` runs: ``'cpu'`` or ``'cuda'``.

    Parameters
    ----------
    device : {'auto', 'cpu', 'cuda'}, optional
        Default ``$FANFIT_MLP_DEVICE``, else ``'auto'``: CUDA when ``torch.cuda.is_available()``.

    Raises
    ------
    InvalidJobError
        An unknown device, or ``'cuda'`` without a visible GPU.
    """
    return resolve_device(device, (DEVICE_VARIABLE,), "MLP", _WHY)


def mlp_loss_gradient(
    params: Params, X: ArrayLike, y: ArrayLike, *, device: str | None = None
) -> tuple[float, Params]:
    """Mean softmax cross-entropy over the rows of ``X`` and its gradient (PyTorch autograd).

    Parameters
    ----------
    params : dict of str to numpy.ndarray
        ``W0, b0, ..., W<L-1>, b<L-1>`` (:func:`init_mlp_params`).
    X : array_like of float, shape (n, d)
        The worker's rows.
    y : array_like of int, shape (n,)
        Class indices ``0..K-1``.
    device : {'auto', 'cpu', 'cuda'}, optional
        :func:`mlp_device`. The CPU computes in float64, CUDA in float32.

    Returns
    -------
    (float, dict)
        The mean loss and one float64 gradient per parameter, of its shape; for ``n = 0`` a loss
        of 0 and zero gradients. No penalty term (:func:`fanfit.train.sgd.sgd_step` adds it).

    Raises
    ------
    InvalidJobError
        Malformed parameters, an unknown device, or no torch here.
    InvalidDataError
        Shapes or labels that do not fit the parameters.
    """
    n_layers = _n_layers(params)
    X = _check_x(params, X)
    labels = _labels(y, params[f"W{n_layers - 1}"].shape[1])
    if labels.shape[0] != X.shape[0]:
        raise InvalidDataError(f"X has {X.shape[0]} rows but y has {labels.shape[0]}.")
    if X.shape[0] == 0:
        return 0.0, {k: np.zeros_like(v, dtype=np.float64) for k, v in params.items()}
    where = mlp_device(device)
    torch = import_torch(_WHY)
    dev = torch.device(where)
    dtype = torch.float64 if where == "cpu" else torch.float32
    leaves = {
        k: torch.tensor(np.asarray(v), dtype=dtype, device=dev, requires_grad=True)
        for k, v in params.items()
    }
    h = torch.as_tensor(X, dtype=dtype, device=dev)
    for layer in range(n_layers):
        h = h @ leaves[f"W{layer}"] + leaves[f"b{layer}"]
        if layer < n_layers - 1:
            h = torch.relu(h)
    loss = torch.nn.functional.cross_entropy(h, torch.as_tensor(labels, device=dev))
    loss.backward()
    grads = {k: t.grad.detach().cpu().numpy().astype(np.float64) for k, t in leaves.items()}
    return float(loss.detach().cpu()), grads


def train_mlp(
    X: ArrayLike,
    y: ArrayLike,
    n_outputs: int,
    hidden: Sequence[int],
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
    device: str | None = "cpu",
    groups: Callable[[int], Sequence[Sequence[int]]] | None = None,
) -> Params:
    """The rounds of an ``mlp`` train job in this process: the reference a pipeline must equal.

    :func:`fanfit.train.sgd.train_sgd` from :func:`init_mlp_params` with
    :func:`mlp_loss_gradient` as the worker step; the same seed draws the same batches
    (:func:`fanfit.train.batches.batch_rows`) and DS-Sync groups as the job.

    Parameters
    ----------
    X : array_like, shape (n_obs, d)
        Features (standardised as the job standardised them).
    y : array_like of int, shape (n_obs,)
        Class indices ``0..K-1``.
    n_outputs : int
        ``K``.
    hidden : sequence of int
        Hidden layer widths.
    global_batch, n_workers, rounds, lr, l2, seed, sync, group_size, batches, groups
        As in :func:`fanfit.train.sgd.train_sgd` (DS-Sync needs ``groups``).
    device : {'auto', 'cpu', 'cuda'}, optional
        Default ``'cpu'`` (float64).

    Returns
    -------
    dict
        The final model.
    """
    from fanfit.train.sgd import train_sgd

    X = np.asarray(X, dtype=np.float64)
    init = init_mlp_params(X.shape[1], hidden, n_outputs, seed)

    def gradient(params: Params, Xb: np.ndarray, yb: np.ndarray) -> tuple[float, Params]:
        return mlp_loss_gradient(params, Xb, yb, device=device)

    return train_sgd(
        "logistic",
        X,
        np.asarray(y),
        n_outputs,
        global_batch=global_batch,
        n_workers=n_workers,
        rounds=rounds,
        lr=lr,
        l2=l2,
        seed=seed,
        sync=sync,
        group_size=group_size,
        batches=batches,
        init=init,
        gradient=gradient,
        groups=groups,
    )
