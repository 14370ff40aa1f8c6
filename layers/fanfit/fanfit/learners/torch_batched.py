"""Many fits of one TorchMLP architecture trained together as one batched model.

A DML job holds ``n_folds x n_rep`` fits of each nuisance learner; the GPU worker receives them as
the units of one shard. Fitted one after another, each Adam step of a small MLP (batch 256) is
bound by kernel launches and Python, and the GPU idles. :func:`fit_predict_batched` trains ``K``
such fits as one model instead: every layer's weights are stacked, ``(K, out, in)``, and a step is
one batched matrix product per layer (:func:`torch.baddbmm`), one backward pass and one Adam update
of the stacked tensors.

Each fit is the solo fit of :class:`~fanfit.learners.torch_mlp.TorchMLPRegressor` /
:class:`~fanfit.learners.torch_mlp.TorchMLPClassifier` with the same parameters and
``random_state``, reproduced step by step:

- its own rows, standardised with their own mean and standard deviation (and the regressor's
  target with its own), its own label encoding (the classifier);
- its own initial weights: the same ``torch.nn.Linear`` layers built under
  ``torch.manual_seed(random_state)`` inside :func:`torch.random.fork_rng`, as the solo fit builds
  them (the caller's global RNG is left as it was);
- its own shuffling: a :class:`torch.Generator` seeded with ``random_state`` draws each epoch's
  ``randperm`` of its rows; its mini-batches are ``min(batch_size, n_rows)`` rows, the last one
  shorter, so fits whose row counts differ (folds differ in size by one) take different numbers
  of steps: a fit that has no step at some position of an epoch is left exactly as it is
  (weights, Adam moments and step count), as its solo fit would be;
- its own loss (the mean over its own rows of the step, as :class:`torch.nn.MSELoss` /
  :class:`torch.nn.CrossEntropyLoss`) and its own Adam state and bias correction (Kingma & Ba,
  "Adam", ICLR 2015, Algorithm 1, with PyTorch's L2 ``weight_decay`` added to the gradient, as
  :class:`torch.optim.Adam` with ``amsgrad=False``).

So in float64 a batched fit's predictions equal its solo fit's up to the order of floating-point
sums (about 1e-15 relative after 20 epochs); in float32 they drift apart by about 1e-3, as any two
matrix kernels that sum in another order do after training.

No per-step host synchronisation: the mini-batch indices and row weights of a whole epoch are
computed on the host (the generators are CPU generators, as in the solo fit) and copied to the
device once per epoch; the step loop issues device work only (no ``.item()``, ``.cpu()`` or
Python branches on device values). On CUDA the step runs eagerly, as a captured CUDA graph, or
compiled by :func:`torch.compile`, whichever a short measurement on the first batch of the shape
finds fastest (:func:`choose_step_mode`); on the CPU it runs eagerly.

Memory: a batch holds at most :func:`plan_batch` fits, from an estimate of one fit's bytes
(:func:`fit_bytes`) and the device's free memory (CUDA: ``torch.cuda.mem_get_info``) or, on the
CPU, :data:`CPU_MEMORY_BUDGET_MB`; a larger shard runs in several batches, one after another.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fanfit.errors import InvalidLearnerError
from fanfit.learners.torch_mlp import TorchMLPClassifier, TorchMLPRegressor, _import_torch

__all__ = [
    "CPU_MEMORY_BUDGET_MB",
    "CUDA_MEMORY_FRACTION",
    "STEP_MODES",
    "BatchedFit",
    "BatchedRun",
    "choose_step_mode",
    "fit_bytes",
    "fit_predict_batched",
    "plan_batch",
]

#: Memory a batch may use on the CPU, MB, when the caller gives none
#: (``$FANFIT_BATCH_MEMORY_MB`` overrides it): 2 GiB, a quarter of a GPU worker's smallest memory
#: setting in the template and far above what K = 500 fits of 3 x 256 units need (about 0.4 GB).
CPU_MEMORY_BUDGET_MB = 2048.0
#: Share of the CUDA device's free memory (``torch.cuda.mem_get_info``) a batch may plan for; the
#: rest is left to the caching allocator's fragmentation and cuBLAS workspaces.
CUDA_MEMORY_FRACTION = 0.8
#: How a training step runs: eagerly, as a captured CUDA graph, or compiled (CUDA only for the
#: last two).
STEP_MODES = ("eager", "cuda_graph", "compile")
#: Steps timed per candidate mode by :func:`choose_step_mode` (after its warm-up steps).
_MEASURE_STEPS = 10
_WARMUP_STEPS = 3
_PREDICT_ROWS = 65536
#: Measured step modes by shape, for the life of the process (the worker fits many batches alike).
_MODE_CACHE: dict[tuple[Any, ...], str] = {}


@dataclass(frozen=True)
class BatchedFit:
    """One fit of a batch: its training rows, its rows to predict and its seed.

    Attributes
    ----------
    x_train : numpy.ndarray, shape (n_train, n_features)
    y_train : numpy.ndarray, shape (n_train,) or (n_train, n_outputs)
        The regressor's target, or the classifier's labels.
    x_test : numpy.ndarray, shape (n_test, n_features)
    random_state : int or None
        The solo fit's ``random_state``.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    random_state: int | None


@dataclass
class BatchedRun:
    """What :func:`fit_predict_batched` returns.

    Attributes
    ----------
    predictions : list of numpy.ndarray of float64
        Per fit, in the order given: the regressor's ``predict`` (shape (n_test,) or
        (n_test, n_outputs)), the classifier's ``predict_proba`` (shape (n_test, n_classes)).
    classes : list of numpy.ndarray or None
        Per fit, the classifier's ``classes_`` (None for the regressor).
    batches : list of int
        Fits per batch, in the order run.
    batch_seconds : list of float
        Wall seconds of each batch (data to the device, training, predictions back).
    step_mode : str
        The step mode of the last batch (one of :data:`STEP_MODES`).
    step_timings : dict of str to float
        Seconds per step of each mode measured to choose ``step_mode`` (CUDA with
        ``step_mode='auto'``, the first batch of a shape in this process); else empty.
    device : str
        'cpu' or 'cuda'.
    """

    predictions: list[np.ndarray]
    classes: list[np.ndarray | None]
    batches: list[int] = field(default_factory=list)
    batch_seconds: list[float] = field(default_factory=list)
    step_mode: str = "eager"
    step_timings: dict[str, float] = field(default_factory=dict)
    device: str = "cpu"


def fit_bytes(
    n_features: int,
    hidden_layer_sizes: Sequence[int],
    n_outputs: int,
    batch_size: int,
    n_rows: int,
    itemsize: int = 4,
) -> int:
    """Bytes one fit of a batch needs on the device (an upper estimate).

    Parameters
    ----------
    n_features, n_outputs : int
        Widths of the input and the output layer.
    hidden_layer_sizes : sequence of int
    batch_size : int
        Rows per step.
    n_rows : int
        Training plus test rows of the fit (its data on the device).
    itemsize : int, default 4
        Bytes per value (4: float32, 8: float64).

    Returns
    -------
    int
        ``itemsize x (6 P + 4 B A + R (n_features + n_outputs)) + 16 B``: the ``P`` parameters
        with their gradient, two Adam moments and two temporaries of the update; the ``B x A``
        activations of a step (``A`` the sum of the layer widths: input, hidden, output) twice for
        the forward pass and twice for the backward pass; the ``R`` rows of data and target; the
        step's indices and row weights.
    """
    widths = [int(n_features), *[int(s) for s in hidden_layer_sizes], int(n_outputs)]
    params = sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:]))
    b = int(batch_size)
    per_value = 6 * params + 4 * b * sum(widths) + int(n_rows) * (widths[0] + widths[-1])
    return int(itemsize * per_value + 16 * b)


def plan_batch(per_fit_bytes: int, budget_bytes: float) -> int:
    """Fits per batch: as many as the budget holds, at least one.

    Parameters
    ----------
    per_fit_bytes : int
        :func:`fit_bytes` of the largest fit.
    budget_bytes : float
        Memory the batch may use, bytes.

    Returns
    -------
    int
        ``max(1, floor(budget_bytes / per_fit_bytes))`` (one fit even when it alone exceeds the
        budget: its solo fit would need as much).

    Raises
    ------
    InvalidLearnerError
        A non-positive ``per_fit_bytes`` or budget.
    """
    if not per_fit_bytes > 0 or not budget_bytes > 0:
        raise InvalidLearnerError(
            f"a batch needs positive sizes: per_fit_bytes={per_fit_bytes!r}, "
            f"budget_bytes={budget_bytes!r}."
        )
    return max(1, int(budget_bytes // per_fit_bytes))


def _budget_bytes(torch: Any, device: Any, memory_budget_mb: float | None) -> float:
    """The memory a batch may use: the caller's, else the device's free share, else the CPU's."""
    if memory_budget_mb is not None:
        return float(memory_budget_mb) * 2**20
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free) * CUDA_MEMORY_FRACTION
    env = os.environ.get("FANFIT_BATCH_MEMORY_MB")
    return float(env or CPU_MEMORY_BUDGET_MB) * 2**20


def choose_step_mode(
    candidates: dict[str, Callable[[], Any]],
    *,
    sync: Callable[[], None] = lambda: None,
    steps: int = _MEASURE_STEPS,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[str, dict[str, float]]:
    """The fastest of several ways to run the same step, measured.

    Each candidate runs ``steps`` times between two ``sync()`` calls (CUDA:
    ``torch.cuda.synchronize``; the host waits for the device only here, never in the step loop);
    a candidate that raises is left out (e.g. :func:`torch.compile` without a compiler).

    Parameters
    ----------
    candidates : dict of str to callable
        Mode name (:data:`STEP_MODES`) to a function running one step (already warmed up).
    sync : callable
        Waits for the device.
    steps : int
        Steps timed per candidate.
    clock : callable
        Seconds (monotonic).

    Returns
    -------
    (str, dict of str to float)
        The fastest mode and every measured mode's seconds per step.

    Raises
    ------
    InvalidLearnerError
        No candidate ran.
    """
    timings: dict[str, float] = {}
    failed: dict[str, str] = {}
    for name, run in candidates.items():
        try:
            sync()
            t0 = clock()
            for _ in range(steps):
                run()
            sync()
        except Exception as exc:  # noqa: BLE001 - a mode that cannot run here is not a candidate
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        timings[name] = (clock() - t0) / steps
    if not timings:
        raise InvalidLearnerError(
            f"no step mode ran on this device: {'; '.join(f'{k}: {v}' for k, v in failed.items())}."
        )
    return min(timings, key=lambda k: (timings[k], k)), timings


def _check_group(estimator: Any, fits: Sequence[BatchedFit]) -> bool:
    if not isinstance(estimator, TorchMLPRegressor | TorchMLPClassifier):
        raise InvalidLearnerError(
            f"batched fits take a TorchMLPRegressor or TorchMLPClassifier, got "
            f"{type(estimator).__name__}."
        )
    estimator._validate_params()
    widths = {np.asarray(f.x_train).shape[1] for f in fits} | {
        np.asarray(f.x_test).shape[1] for f in fits
    }
    if len(widths) > 1:
        raise InvalidLearnerError(
            f"the fits of a batch must have the same number of features, got {sorted(widths)}."
        )
    for f in fits:
        if len(f.x_train) == 0 or len(f.x_train) != len(f.y_train):
            raise InvalidLearnerError(
                f"each fit needs training rows with one target each, got {len(f.x_train)} rows "
                f"and {len(f.y_train)} targets."
            )
    return isinstance(estimator, TorchMLPClassifier)


@dataclass
class _Prepared:
    """One fit's standardised data and its output back-transform (host side)."""

    x_train: np.ndarray
    target: np.ndarray  # (n, n_out) float, or (n,) int labels
    x_test: np.ndarray
    n_out: int
    y_mean: np.ndarray | None
    y_scale: np.ndarray | None
    y_1d: bool
    classes: np.ndarray | None
    seed: int | None


def _prepare(fit: BatchedFit, classify: bool) -> _Prepared:
    """Standardise as :meth:`TorchMLPRegressor.fit` / :meth:`TorchMLPClassifier.fit` do."""
    x = np.asarray(fit.x_train, dtype=np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0)
    scale = np.where(std > 0, std, 1.0)
    x_test = (np.asarray(fit.x_test, dtype=np.float64) - mean) / scale
    seed = None if fit.random_state is None else int(fit.random_state)
    if classify:
        classes, encoded = np.unique(np.asarray(fit.y_train), return_inverse=True)
        if len(classes) < 2:
            raise InvalidLearnerError(
                f"TorchMLPClassifier needs at least two classes in y, got {classes.tolist()}."
            )
        return _Prepared(
            (x - mean) / scale, encoded, x_test, len(classes), None, None, True, classes, seed
        )
    y = np.asarray(fit.y_train, dtype=np.float64)
    y2 = y.reshape(len(y), -1)
    y_std = y2.std(axis=0)
    y_mean, y_scale = y2.mean(axis=0), np.where(y_std > 0, y_std, 1.0)
    return _Prepared(
        (x - mean) / scale,
        (y2 - y_mean) / y_scale,
        x_test,
        y2.shape[1],
        y_mean,
        y_scale,
        y.ndim == 1,
        None,
        seed,
    )


def fit_predict_batched(
    estimator: TorchMLPRegressor | TorchMLPClassifier,
    fits: Sequence[BatchedFit],
    *,
    memory_budget_mb: float | None = None,
    step_mode: str = "auto",
) -> BatchedRun:
    """Train the fits of one architecture together and predict each fit's test rows.

    Parameters
    ----------
    estimator : TorchMLPRegressor or TorchMLPClassifier
        The architecture and training parameters (its ``random_state`` is not used: each fit has
        its own). ``device`` and ``dtype`` as for the solo fit.
    fits : sequence of BatchedFit
        The fits (any row counts; the same number of features).
    memory_budget_mb : float, optional
        Memory a batch may use, MB. Default: :data:`CUDA_MEMORY_FRACTION` of the device's free
        memory on CUDA; ``$FANFIT_BATCH_MEMORY_MB`` or :data:`CPU_MEMORY_BUDGET_MB` on the CPU.
    step_mode : {'auto', 'eager', 'cuda_graph', 'compile'}
        'auto': eager on the CPU; on CUDA the fastest measured (:func:`choose_step_mode`, once
        per shape and process).

    Returns
    -------
    BatchedRun
        Each fit's predictions equal its solo fit's (see the module doc).

    Raises
    ------
    InvalidLearnerError
        Not a TorchMLP, PyTorch missing, ``device='cuda'`` without CUDA, fits with different
        feature counts or without rows, a classifier fit with one class, an unknown step mode.
    """
    if step_mode not in ("auto", *STEP_MODES):
        raise InvalidLearnerError(
            f"step_mode must be 'auto' or one of {list(STEP_MODES)}, got {step_mode!r}."
        )
    run = BatchedRun(predictions=[], classes=[])
    if not fits:
        return run
    classify = _check_group(estimator, fits)
    torch = _import_torch(type(estimator).__name__)
    device = estimator._device(torch)
    run.device = device.type
    if device.type != "cuda" and step_mode in ("cuda_graph", "compile"):
        raise InvalidLearnerError(f"step_mode={step_mode!r} needs a CUDA device.")
    prepared = [_prepare(f, classify) for f in fits]
    dtype = getattr(torch, estimator.dtype)
    itemsize = 8 if estimator.dtype == "float64" else 4
    budget = _budget_bytes(torch, device, memory_budget_mb)
    results: dict[int, np.ndarray] = {}
    # fits of one output width share a model; each group is cut into batches the memory holds
    by_width: dict[int, list[int]] = {}
    for i, p in enumerate(prepared):
        by_width.setdefault(p.n_out, []).append(i)
    for n_out, members in sorted(by_width.items()):
        n_features = prepared[members[0]].x_train.shape[1]
        largest = max(len(prepared[i].x_train) + len(prepared[i].x_test) for i in members)
        size = fit_bytes(
            n_features,
            estimator.hidden_layer_sizes,
            n_out,
            min(int(estimator.batch_size), largest),
            largest,
            itemsize,
        )
        k_max = plan_batch(size, budget)
        for start in range(0, len(members), k_max):
            chunk = members[start : start + k_max]
            t0 = time.perf_counter()
            outs, mode = _train_predict(
                torch, estimator, [prepared[i] for i in chunk], n_out, classify, device, dtype,
                step_mode, run.step_timings,
            )  # fmt: skip
            for i, out in zip(chunk, outs):
                results[i] = out
            run.batches.append(len(chunk))
            run.batch_seconds.append(time.perf_counter() - t0)
            run.step_mode = mode
    for i, p in enumerate(prepared):
        out = results[i]
        if classify:
            logits = out - out.max(axis=1, keepdims=True)
            e = np.exp(logits)
            run.predictions.append(e / e.sum(axis=1, keepdims=True))
        else:
            assert p.y_scale is not None and p.y_mean is not None
            pred = out * p.y_scale + p.y_mean
            run.predictions.append(pred[:, 0] if p.y_1d else pred)
        run.classes.append(p.classes)
    return run


def _initial_layers(
    torch: Any, estimator: Any, n_features: int, n_out: int, seed: int | None
) -> list[tuple[Any, Any]]:
    """The solo fit's initial ``(weight, bias)`` per layer, built the same way under its seed."""
    sizes = [int(s) for s in estimator.hidden_layer_sizes]
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        layers = []
        width = n_features
        for size in [*sizes, n_out]:
            layers.append(torch.nn.Linear(width, size))
            width = size
        return [(layer.weight.detach(), layer.bias.detach()) for layer in layers]


def _epoch_schedule(
    orders: list[np.ndarray], batch_sizes: np.ndarray, n_out: int, classify: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One epoch's step plan of every fit, on the host.

    Returns
    -------
    idx : numpy.ndarray of int64, shape (n_steps, K, B)
        Row of each fit's step (0 where the fit has no row there).
    weight : numpy.ndarray of float64, shape (n_steps, K, B)
        ``1 / (rows of the step x n_out)`` (the mean of the solo loss; the classifier's mean
        over rows), 0 on padding.
    active : numpy.ndarray of bool, shape (n_steps, K)
        Whether the fit takes that step.
    """
    k = len(orders)
    n = np.array([len(o) for o in orders])
    steps = -(-n // batch_sizes)
    n_steps, width = int(steps.max()), int(batch_sizes.max())
    idx = np.zeros((n_steps, k, width), dtype=np.int64)
    weight = np.zeros((n_steps, k, width), dtype=np.float64)
    s = np.arange(n_steps)[:, None]
    j = np.arange(width)[None, :]
    per = 1 if classify else n_out
    for f, order in enumerate(orders):
        b = int(batch_sizes[f])
        pos = s * b + j
        valid = (j < b) & (pos < len(order))
        idx[:, f, :] = np.where(valid, order[np.minimum(pos, len(order) - 1)], 0)
        count = valid.sum(axis=1, keepdims=True)
        weight[:, f, :] = np.where(valid, 1.0 / np.maximum(count * per, 1), 0.0)
    active = weight.sum(axis=2) > 0
    return idx, weight, active


def _train_predict(
    torch: Any,
    estimator: Any,
    fits: list[_Prepared],
    n_out: int,
    classify: bool,
    device: Any,
    dtype: Any,
    step_mode: str,
    timings: dict[str, float],
) -> tuple[list[np.ndarray], str]:
    """Train one batch and return each fit's raw outputs on its test rows, shape (n_test, n_out);
    the step modes' measured seconds per step, if measured, go into ``timings``."""
    k = len(fits)
    n_features = fits[0].x_train.shape[1]
    n_rows = np.array([len(f.x_train) for f in fits])
    batch_sizes = np.minimum(int(estimator.batch_size), n_rows)
    n_max = int(n_rows.max())
    # the data, padded to the largest fit: (K, n_max, n_features) and the targets
    xs = np.zeros((k, n_max, n_features))
    ys = np.zeros((k, n_max) if classify else (k, n_max, n_out))
    for f, p in enumerate(fits):
        xs[f, : len(p.x_train)] = p.x_train
        ys[f, : len(p.x_train)] = p.target
    x_dev = torch.as_tensor(xs, dtype=dtype, device=device)
    y_dev = torch.as_tensor(ys, dtype=torch.long if classify else dtype, device=device)
    # each fit's initial weights and generator, exactly as its solo fit
    layers = [_initial_layers(torch, estimator, n_features, n_out, p.seed) for p in fits]
    params: list[Any] = []
    for li in range(len(layers[0])):
        w = torch.stack([layers[f][li][0] for f in range(k)]).to(device=device, dtype=dtype)
        b = torch.stack([layers[f][li][1] for f in range(k)]).to(device=device, dtype=dtype)
        params += [w.requires_grad_(True), b.requires_grad_(True)]
    generators = []
    for p in fits:
        g = torch.Generator()
        if p.seed is not None:
            g.manual_seed(p.seed)
        else:
            g.seed()
        generators.append(g)
    state = _AdamState(torch, params, estimator, k, device, dtype)
    fit_index = torch.arange(k, device=device)[:, None]
    buffers = {
        "idx": torch.zeros((k, int(batch_sizes.max())), dtype=torch.long, device=device),
        "weight": torch.zeros((k, int(batch_sizes.max())), dtype=dtype, device=device),
        "active": torch.ones((k,), dtype=torch.bool, device=device),
    }

    def loss_of(idx: Any, weight: Any) -> Any:
        h = x_dev[fit_index, idx]  # (K, B, n_features)
        n_layers = len(params) // 2
        for li in range(n_layers):
            w, b = params[2 * li], params[2 * li + 1]
            h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
            if li < n_layers - 1:
                h = torch.relu(h)
        target = y_dev[fit_index, idx]
        if classify:
            per_row = torch.nn.functional.cross_entropy(
                h.reshape(-1, n_out), target.reshape(-1), reduction="none"
            ).reshape(idx.shape)
        else:
            per_row = ((h - target) ** 2).sum(dim=2)
        return (per_row * weight).sum()

    def step(all_active: bool = False) -> None:
        grads = torch.autograd.grad(loss_of(buffers["idx"], buffers["weight"]), params)
        state.update(grads, buffers["active"], all_active)

    mode = "eager" if step_mode == "auto" and device.type != "cuda" else step_mode
    runner: Callable[[], None] = step
    for epoch in range(int(estimator.epochs)):
        # each fit's own permutation of its rows, from its own generator (as the solo fit's)
        orders = [torch.randperm(int(n), generator=g).numpy() for n, g in zip(n_rows, generators)]
        idx, weight, active = _epoch_schedule(orders, batch_sizes, n_out, classify)
        idx_dev = _to_device(torch, idx, device, torch.long)
        weight_dev = _to_device(torch, weight, device, dtype)
        active_dev = _to_device(torch, active, device, torch.bool)
        if epoch == 0:
            buffers["idx"].copy_(idx_dev[0])
            buffers["weight"].copy_(weight_dev[0])
            buffers["active"].copy_(active_dev[0])
            mode, runner = _step_runner(torch, device, mode, step, state, fits, estimator, timings)
        every: np.ndarray = np.asarray(active.all(axis=1))  # host-side: does every fit step
        for s in range(idx.shape[0]):
            buffers["idx"].copy_(idx_dev[s])
            buffers["weight"].copy_(weight_dev[s])
            buffers["active"].copy_(active_dev[s])
            if mode == "eager":
                step(bool(every[s]))
            else:  # a captured or compiled step: the general, masked update
                runner()
    return _predict(torch, params, fits, n_out, device, dtype), mode


def _to_device(torch: Any, array: np.ndarray, device: Any, dtype: Any) -> Any:
    """A host array on the device; on CUDA through pinned memory without blocking, so the host
    plans the next epoch while the device trains this one (the stream orders the copy)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type != "cuda":
        return tensor.to(dtype=dtype)
    return tensor.pin_memory().to(device=device, dtype=dtype, non_blocking=True)


class _AdamState:
    """Adam's moments and per-fit step counts for the stacked parameters (``torch.optim.Adam``'s
    single-tensor update, ``amsgrad=False``, L2 ``weight_decay`` added to the gradient)."""

    def __init__(
        self, torch: Any, params: list[Any], estimator: Any, k: int, device: Any, dtype: Any
    ) -> None:
        self.torch = torch
        self.params = params
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = torch.zeros((k,), dtype=torch.float64, device=device)
        self.lr = float(estimator.lr)
        self.wd = float(estimator.weight_decay)
        self.beta1, self.beta2, self.eps = 0.9, 0.999, 1e-8
        self.dtype = dtype

    def tensors(self) -> list[Any]:
        """Every tensor the update changes (for a snapshot)."""
        return [*self.params, *self.m, *self.v, self.t]

    def update(self, grads: Sequence[Any], active: Any, all_active: bool = False) -> None:
        """One Adam step of every active fit; inactive fits stay exactly as they are.

        ``all_active`` (known on the host from the epoch's plan) skips the masking: every fit
        steps, in place.
        """
        torch = self.torch
        with torch.no_grad():
            self.t.add_(active.to(self.t.dtype))
            # bias corrections per fit, in float64 as PyTorch's Python-float scalars
            bc1 = 1 - self.beta1**self.t
            step_size = (self.lr / bc1).to(self.dtype)
            bc2_sqrt = (1 - self.beta2**self.t).sqrt().to(self.dtype)
            for p, g, m, v in zip(self.params, grads, self.m, self.v):
                shape = (-1,) + (1,) * (p.dim() - 1)
                if self.wd:
                    g = g.add(p, alpha=self.wd)
                if all_active:
                    m.lerp_(g, 1 - self.beta1)
                    v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
                    denom = (v.sqrt() / bc2_sqrt.view(shape)).add_(self.eps)
                    p.sub_(step_size.view(shape) * (m / denom))
                    continue
                on = active.view(shape)
                m_new = m.lerp(g, 1 - self.beta1)
                v_new = v.mul(self.beta2).addcmul_(g, g, value=1 - self.beta2)
                denom = (v_new.sqrt() / bc2_sqrt.view(shape)).add_(self.eps)
                p_new = p - step_size.view(shape) * (m_new / denom)
                m.copy_(torch.where(on, m_new, m))
                v.copy_(torch.where(on, v_new, v))
                p.copy_(torch.where(on, p_new, p))


def _step_runner(
    torch: Any,
    device: Any,
    mode: str,
    step: Callable[..., None],
    state: _AdamState,
    fits: list[_Prepared],
    estimator: Any,
    timings: dict[str, float],
) -> tuple[str, Callable[[], None]]:
    """The step to run, eager or (CUDA) graph-captured or compiled; 'auto' measures them once per
    shape (their seconds per step into ``timings``). Training state is restored after warm-ups and
    measurements, so they change nothing."""
    if device.type != "cuda":
        return "eager", step
    snapshot = [t.clone() for t in state.tensors()]

    def restore() -> None:
        with torch.no_grad():
            for t, s in zip(state.tensors(), snapshot):
                t.copy_(s)

    shape = (
        len(fits),
        tuple(int(s) for s in estimator.hidden_layer_sizes),
        int(estimator.batch_size),
        str(state.dtype),
    )
    if mode == "auto" and shape in _MODE_CACHE:
        mode = _MODE_CACHE[shape]
    candidates: dict[str, Callable[[], None]] = {}
    wanted = STEP_MODES if mode == "auto" else (mode,)
    for name in wanted:
        try:
            candidates[name] = _build_mode(torch, name, step)
        except Exception:  # noqa: BLE001 - capture or compilation unsupported here
            if mode != "auto":
                raise
        restore()
    if len(candidates) == 1:
        chosen = next(iter(candidates))
    else:
        chosen, measured = choose_step_mode(candidates, sync=torch.cuda.synchronize)
        timings.update(measured)
        _MODE_CACHE[shape] = chosen
    restore()
    return chosen, candidates[chosen]


def _build_mode(torch: Any, name: str, step: Callable[..., None]) -> Callable[[], None]:
    """A warmed-up runner of ``step`` in mode ``name`` (CUDA)."""
    if name == "eager":
        return lambda: step(True)  # what the eager loop runs when every fit steps
    if name == "compile":
        compiled = torch.compile(step)
        for _ in range(_WARMUP_STEPS):
            compiled()
        return compiled
    # CUDA graph: warm up on a side stream, then capture one step on the static buffers
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(_WARMUP_STEPS):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def _predict(
    torch: Any, params: list[Any], fits: list[_Prepared], n_out: int, device: Any, dtype: Any
) -> list[np.ndarray]:
    """Each fit's network outputs on its own test rows, float64, shape (n_test, n_out)."""
    k = len(fits)
    m = [len(p.x_test) for p in fits]
    m_max = max(m)
    outs = np.zeros((k, m_max, n_out))
    n_layers = len(params) // 2
    chunk = max(1, _PREDICT_ROWS // max(k, 1))
    with torch.no_grad():
        for start in range(0, m_max, chunk):
            stop = min(m_max, start + chunk)
            xs = np.zeros((k, stop - start, fits[0].x_test.shape[1]))
            for f, p in enumerate(fits):
                part = p.x_test[start:stop]
                xs[f, : len(part)] = part
            h = torch.as_tensor(xs, dtype=dtype, device=device)
            for li in range(n_layers):
                w, b = params[2 * li], params[2 * li + 1]
                h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
                if li < n_layers - 1:
                    h = torch.relu(h)
            outs[:, start:stop] = h.cpu().numpy().astype(np.float64)
    return [outs[f, : m[f]] for f in range(k)]
