"""The K-Means and linear worker steps in PyTorch: what the GPU worker computes.

The GPU worker (:mod:`fanfit.jobs.gpu`, an AWS Batch job; locally a host process) runs a train
job's worker step on the ``'torch'`` backend (:data:`fanfit.train.model.BACKENDS`); the Lambda
workers run the numpy step (their layer has no PyTorch). The maths is the numpy step's, operation
for operation:

- :func:`kmeans_step_torch` is :func:`fanfit.train.kmeans.kmeans_step` (labels by
  :math:`\\arg\\min_j \\lVert c_j\\rVert^2 - 2 x \\cdot c_j`, first index on ties, as
  ``numpy.argmin``; partial sums by ``index_add_``; the farthest rows by a stable sort on the
  negated distance, ties to the lower row, as the numpy step's ``lexsort``);
- :func:`loss_gradient_torch` is :func:`fanfit.train.linear.loss_gradient` (softmax
  cross-entropy or least squares; gradient :math:`\\frac1n X^\\top R`, :math:`\\frac1n \\sum R`).

Precision, as the MLP's step (:mod:`fanfit.train.mlp`): on the CPU everything runs in float64, so
the torch step equals the numpy step to rounding (the unit tests compare them at ``rtol=1e-12``);
on CUDA the matrix products run in float32, the GPU's fast type (K-Means' labels; the linear
scores and gradient), while K-Means' sums, distances and inertia accumulate in float64, and every
result returns as float64 numpy arrays.

PyTorch is imported inside :func:`torch_device` only (each step calls it first): importing this
module needs numpy alone (``tests/unit/test_cold_start_imports.py``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidJobError
from fanfit.train.kmeans import KMeansPartial, check_kmeans_inputs
from fanfit.train.linear import Params, check_linear_inputs

__all__ = ["TORCH_DEVICES", "kmeans_step_torch", "loss_gradient_torch", "torch_device"]

#: Where the torch steps run: ``'auto'`` (CUDA when available, else the CPU), ``'cpu'``, ``'cuda'``.
TORCH_DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
#: Environment variable the GPU worker reads for the device (then ``$FANFIT_MLP_DEVICE``, the
#: MLP's; default ``'auto'``).
DEVICE_VARIABLE = "FANFIT_TORCH_DEVICE"


def import_torch(why: str) -> Any:
    """``import torch``, or :class:`InvalidJobError` saying ``why`` it is needed (the Lambda layer
    has no PyTorch)."""
    try:
        import torch
    except ImportError as exc:  # the Lambda layer has no torch
        raise InvalidJobError(why) from exc
    return torch


def resolve_device(device: str | None, variables: Sequence[str], what: str, why: str) -> str:
    """Where a PyTorch step runs: ``'cpu'`` or ``'cuda'``; imports torch (the step needs it next).

    Parameters
    ----------
    device : {'auto', 'cpu', 'cuda'}, optional
        Default: the first of ``variables`` set in the environment, else ``'auto'``: CUDA when
        ``torch.cuda.is_available()``.
    variables : sequence of str
        Environment variables read in order (the first is named in errors).
    what : str
        The step's name in the messages (``'torch'``, ``'MLP'``).
    why : str
        The message when torch is not installed (:func:`import_torch`).

    Raises
    ------
    InvalidJobError
        An unknown device, ``'cuda'`` without a visible GPU, or no torch here.
    """
    chosen = device or next((os.environ[v] for v in variables if os.environ.get(v)), None)
    name = (chosen or "auto").lower()
    if name not in TORCH_DEVICES:
        raise InvalidJobError(
            f"the {what} device must be one of {', '.join(TORCH_DEVICES)} (${variables[0]}); "
            f"got {name!r}"
        )
    torch = import_torch(why)
    if name == "cpu":
        return "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise InvalidJobError(f"${variables[0]}=cuda, but torch sees no CUDA device here")
    return "cuda" if torch.cuda.is_available() else "cpu"


_WHY = (
    "the torch backend of a train worker step needs PyTorch, which is not installed here "
    "(the Lambda layer does not ship it): it runs on the GPU worker only."
)


def torch_device(device: str | None = None) -> str:
    """Where the torch steps run: ``'cpu'`` or ``'cuda'``; imports torch.

    Parameters
    ----------
    device : {'auto', 'cpu', 'cuda'}, optional
        Default ``$FANFIT_TORCH_DEVICE``, else ``$FANFIT_MLP_DEVICE``, else ``'auto'``: CUDA when
        ``torch.cuda.is_available()``.

    Raises
    ------
    InvalidJobError
        An unknown device, ``'cuda'`` without a visible GPU, or no torch here.
    """
    return resolve_device(device, (DEVICE_VARIABLE, "FANFIT_MLP_DEVICE"), "torch", _WHY)


def _fast_dtype(torch: Any, where: str) -> Any:
    """The matrix products' type: float64 on the CPU, float32 on CUDA."""
    return torch.float64 if where == "cpu" else torch.float32


def kmeans_step_torch(
    X: ArrayLike,
    centroids: ArrayLike,
    prev_centroids: ArrayLike | None = None,
    row_offset: int = 0,
    *,
    device: str | None = None,
) -> KMeansPartial:
    """:func:`fanfit.train.kmeans.kmeans_step` in torch: a worker's E-step and M-step sums.

    ``X``, ``centroids``, ``prev_centroids``, ``row_offset``, the result (float64 numpy arrays)
    and the :class:`~fanfit.errors.InvalidDataError` on shapes are the numpy step's; ``device``
    is :func:`torch_device`'s (an unknown one, or no torch here: ``InvalidJobError``).
    """
    Xa, C = check_kmeans_inputs(X, centroids)
    prev = None if prev_centroids is None else check_kmeans_inputs(Xa, prev_centroids)[1]
    where = torch_device(device)
    torch = import_torch(_WHY)
    dev = torch.device(where)
    fast = _fast_dtype(torch, where)
    Xt = torch.as_tensor(Xa, device=dev)
    Ct = torch.as_tensor(C, device=dev)
    Xf = Xt if fast == torch.float64 else Xt.to(fast)

    def labels_of(Cm: Any) -> Any:
        Cf = Cm.to(fast)
        return torch.argmin((Cf * Cf).sum(dim=1) - 2.0 * (Xf @ Cf.T), dim=1)

    k, n = C.shape[0], Xa.shape[0]
    labels = labels_of(Ct)
    dist = ((Xt - Ct[labels]) ** 2).sum(dim=1)
    sums = torch.zeros_like(Ct).index_add_(0, labels, Xt)
    counts = torch.bincount(labels, minlength=k)
    if prev is None:
        n_changed = n
    else:
        n_changed = int((labels_of(torch.as_tensor(prev, device=dev)) != labels).sum())
    m = min(k - 1, n)
    far = torch.sort(-dist, stable=True).indices[:m]
    far_np = far.cpu().numpy().astype(np.int64)
    return KMeansPartial(
        sums=sums.cpu().numpy(),
        counts=counts.cpu().numpy().astype(np.int64),
        inertia=float(dist.sum()),
        n_changed=n_changed,
        far_rows=Xa[far_np],
        far_dist=dist[far].cpu().numpy(),
        far_labels=labels[far].cpu().numpy().astype(np.int64),
        far_ids=far_np + int(row_offset),
    )


def loss_gradient_torch(
    model: str, params: Params, X: np.ndarray, y: np.ndarray, *, device: str | None = None
) -> tuple[float, Params]:
    """:func:`fanfit.train.linear.loss_gradient` in torch: mean loss and gradient over the rows.

    ``model``, ``params``, ``X``, ``y``, the result (the mean loss and float64 ``W``, ``b``
    gradients; 0 and zeros for no rows) and the errors are the numpy step's; ``device`` is
    :func:`torch_device`'s (an unknown one, or no torch here: ``InvalidJobError``).
    """
    Xa, Y = check_linear_inputs(model, params, X, y)
    n = Xa.shape[0]
    if n == 0:
        return 0.0, {"W": np.zeros_like(params["W"]), "b": np.zeros_like(params["b"])}
    where = torch_device(device)
    torch = import_torch(_WHY)
    dev = torch.device(where)
    fast = _fast_dtype(torch, where)
    Xt = torch.as_tensor(Xa, device=dev).to(fast)
    Yt = torch.as_tensor(Y, device=dev).to(fast)
    W = torch.as_tensor(np.asarray(params["W"], dtype=np.float64), device=dev).to(fast)
    b = torch.as_tensor(np.asarray(params["b"], dtype=np.float64), device=dev).to(fast)
    Z = Xt @ W + b
    if model == "logistic":
        Zc = Z - Z.max(dim=1, keepdim=True).values
        log_p = Zc - torch.log(torch.exp(Zc).sum(dim=1, keepdim=True))
        loss = -(Yt * log_p).sum()
        R = torch.exp(log_p) - Yt
    else:
        R = Z - Yt
        loss = 0.5 * (R * R).sum()
    grad_W = (Xt.T @ R / n).cpu().numpy().astype(np.float64)
    grad_b = (R.sum(dim=0) / n).cpu().numpy().astype(np.float64)
    return float(loss / n), {"W": grad_W, "b": grad_b}
