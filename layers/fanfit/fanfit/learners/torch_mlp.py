"""Neural-network nuisance learners in PyTorch: :class:`TorchMLPRegressor`, :class:`TorchMLPClassifier`.

Multi-layer perceptrons (ReLU hidden layers, trained by Adam with an L2 penalty ``weight_decay``)
that behave as scikit-learn estimators, so DoubleML and fanfit's cross-fitting use them as any other
learner: ``get_params``/``set_params``/``clone``, ``fit``/``predict``, ``predict_proba`` and
``classes_`` for the classifier. Inputs (and the regressor's target) are standardised inside, with
the training rows' mean and standard deviation.

PyTorch is imported inside :meth:`fit` and :meth:`predict` only: importing this module (and
:mod:`fanfit.learners`, whose allow-list names these classes) never needs torch, which the Lambda
layer does not ship (250 MB unzipped limit). These learners are in
:data:`fanfit.learners.specs.GPU_ONLY_LEARNERS`: a job that names them runs their stage on a
Batch worker with torch (CPU or CUDA).

Seeding: with an integer ``random_state`` the weights' initialisation (``torch.manual_seed`` inside
:func:`torch.random.fork_rng`, so the caller's global RNG is left as it was) and the mini-batch order
(a :class:`torch.Generator` seeded the same) are fixed: two fits on the same device, data and thread
count give identical predictions. CUDA kernels may differ from CPU in the last bits.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from fanfit.errors import InvalidLearnerError

__all__ = ["TorchMLPClassifier", "TorchMLPRegressor"]

_PREDICT_CHUNK = 65536


def _import_torch(name: str) -> Any:
    try:
        import torch
    except ImportError as exc:  # the Lambda layer has no torch
        raise InvalidLearnerError(
            f"Learner {name} needs PyTorch, which is not installed here (the Lambda layer does not "
            "ship it). Run the stage on a Batch worker, or `pip install torch` where it runs."
        ) from exc
    return torch


class _TorchMLP(BaseEstimator):
    """Shared parameters, training loop and prediction of the two MLPs."""

    _parameter_constraints: dict = {
        "hidden_layer_sizes": ["array-like"],
        "epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "lr": [Interval(Real, 0, None, closed="neither")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "device": [StrOptions({"auto", "cpu", "cuda"})],
        "dtype": [StrOptions({"float32", "float64"})],
        "random_state": [Interval(Integral, 0, 2**63 - 1, closed="both"), None],
    }

    def __init__(
        self,
        hidden_layer_sizes: tuple[int, ...] | list[int] = (256, 256, 256),
        epochs: int = 50,
        batch_size: int = 256,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        device: str = "auto",
        random_state: int | None = None,
        dtype: str = "float32",
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.device = device
        self.random_state = random_state
        self.dtype = dtype

    def _validate_params(self) -> None:
        super()._validate_params()
        sizes = list(self.hidden_layer_sizes)
        if not all(
            isinstance(s, Integral | np.integer) and not isinstance(s, bool) and s >= 1
            for s in sizes
        ):
            raise ValueError(
                f"hidden_layer_sizes must be a list of integers >= 1, got {self.hidden_layer_sizes!r}."
            )

    # ------------------------------------------------------------------ internals
    def _device(self, torch: Any) -> Any:
        if self.device == "cuda" and not torch.cuda.is_available():
            raise InvalidLearnerError(
                f"Learner {type(self).__name__}: device='cuda' but no CUDA device is available; "
                "use device='auto' or 'cpu'."
            )
        name = (
            "cuda"
            if self.device == "cuda" or (self.device == "auto" and torch.cuda.is_available())
            else "cpu"
        )
        return torch.device(name)

    def _standardise(self, X: np.ndarray) -> np.ndarray:
        return (X - self.mean_) / self.scale_

    def _train(self, X: np.ndarray, target: np.ndarray, n_out: int, classify: bool) -> None:
        """Fit the network on standardised ``X`` (n_obs, n_features) and ``target``."""
        torch = _import_torch(type(self).__name__)
        device = self._device(torch)
        self.device_ = device.type
        mean = X.mean(axis=0)
        scale = X.std(axis=0)
        self.mean_, self.scale_ = mean, np.where(scale > 0, scale, 1.0)
        dtype = getattr(torch, self.dtype)
        xs = torch.as_tensor(self._standardise(X), dtype=dtype, device=device)
        if classify:
            ys = torch.as_tensor(target, dtype=torch.long, device=device)
        else:
            ys = torch.as_tensor(target, dtype=dtype, device=device)
        devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, device_type=device.type):
            generator = torch.Generator()
            if self.random_state is not None:
                torch.manual_seed(int(self.random_state))
                generator.manual_seed(int(self.random_state))
            else:
                generator.seed()
            layers: list[Any] = []
            width = X.shape[1]
            for size in self.hidden_layer_sizes:
                layers += [torch.nn.Linear(width, int(size)), torch.nn.ReLU()]
                width = int(size)
            layers.append(torch.nn.Linear(width, n_out))
            model = torch.nn.Sequential(*layers).to(device=device, dtype=dtype)
            optimizer = torch.optim.Adam(
                model.parameters(), lr=float(self.lr), weight_decay=float(self.weight_decay)
            )
            loss_fn = torch.nn.CrossEntropyLoss() if classify else torch.nn.MSELoss()
            n = X.shape[0]
            batch = min(int(self.batch_size), n)
            model.train()
            for _ in range(int(self.epochs)):
                order = torch.randperm(n, generator=generator).to(device)
                for start in range(0, n, batch):
                    idx = order[start : start + batch]
                    optimizer.zero_grad()
                    loss = loss_fn(model(xs[idx]), ys[idx])
                    loss.backward()
                    optimizer.step()
        model.eval()
        self.model_ = model
        self.n_iter_ = int(self.epochs)

    def _forward(self, X: Any) -> np.ndarray:
        """Network outputs (n_obs, n_out) as float64."""
        check_is_fitted(self, "model_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        torch = _import_torch(type(self).__name__)
        device = next(self.model_.parameters()).device
        xs = self._standardise(X)
        out = []
        with torch.no_grad():
            for start in range(0, xs.shape[0], _PREDICT_CHUNK):
                chunk = torch.as_tensor(
                    xs[start : start + _PREDICT_CHUNK],
                    dtype=getattr(torch, self.dtype),
                    device=device,
                )
                out.append(self.model_(chunk).cpu().numpy().astype(np.float64))
        if not out:
            return np.zeros((0, self.model_[-1].out_features))
        return np.concatenate(out, axis=0)


class TorchMLPRegressor(RegressorMixin, _TorchMLP):
    """A multi-layer perceptron regressor in PyTorch (squared loss, Adam), scikit-learn compatible.

    Parameters
    ----------
    hidden_layer_sizes : tuple or list of int, default (256, 256, 256)
        Width of each ReLU hidden layer (empty: a linear model).
    epochs : int, default 50
        Passes over the training rows.
    batch_size : int, default 256
        Rows per Adam step (capped at the number of rows).
    lr : float, default 1e-3
        Adam's learning rate.
    weight_decay : float, default 0
        L2 penalty (Adam's ``weight_decay``).
    device : {'auto', 'cpu', 'cuda'}, default 'auto'
        'auto' takes CUDA when available.
    random_state : int or None
        Seed of the initial weights and the batch order (None: not seeded).
    dtype : {'float32', 'float64'}, default 'float32'
        Floating-point type of the weights, data and arithmetic ('float64': for exactness checks
        such as the batched fits' equality, :mod:`fanfit.learners.torch_batched`; slower).

    Attributes
    ----------
    n_features_in_ : int
    mean_, scale_ : numpy.ndarray, shape (n_features,)
        Standardisation of the inputs.
    y_mean_, y_scale_ : float or numpy.ndarray of shape (n_outputs,)
        Standardisation of the target.
    device_ : str
        Device the network was trained on.

    Examples
    --------
    >>> TorchMLPRegressor(hidden_layer_sizes=(8,), epochs=2).get_params()["epochs"]
    2
    """

    def fit(self, X: Any, y: Any) -> TorchMLPRegressor:
        """Fit on ``X`` of shape (n_obs, n_features) and ``y`` of shape (n_obs,) or (n_obs, n_outputs).

        Raises
        ------
        InvalidLearnerError
            PyTorch is not installed, or ``device='cuda'`` without a CUDA device.
        ValueError
            Invalid parameters or data (scikit-learn's checks).
        """
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64, multi_output=True, y_numeric=True)
        y = np.asarray(y, dtype=np.float64)
        self._y_is_1d = y.ndim == 1
        y2 = y.reshape(len(y), -1)
        std = y2.std(axis=0)
        self.y_mean_ = y2.mean(axis=0)
        self.y_scale_ = np.where(std > 0, std, 1.0)
        self._train(X, (y2 - self.y_mean_) / self.y_scale_, y2.shape[1], classify=False)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predictions, shape (n_obs,) (or (n_obs, n_outputs) for a 2-D target), float64."""
        out = self._forward(X) * self.y_scale_ + self.y_mean_
        return out[:, 0] if self._y_is_1d else out


class TorchMLPClassifier(ClassifierMixin, _TorchMLP):
    """A multi-layer perceptron classifier in PyTorch (cross-entropy, Adam), scikit-learn compatible.

    Parameters are those of :class:`TorchMLPRegressor`.

    Attributes
    ----------
    classes_ : numpy.ndarray, shape (n_classes,)
        The sorted class labels; ``predict_proba`` columns follow them.
    n_features_in_ : int
    mean_, scale_ : numpy.ndarray, shape (n_features,)
    device_ : str
    """

    def fit(self, X: Any, y: Any) -> TorchMLPClassifier:
        """Fit on ``X`` of shape (n_obs, n_features) and class labels ``y`` of shape (n_obs,).

        Raises
        ------
        InvalidLearnerError
            PyTorch is not installed, or ``device='cuda'`` without a CUDA device.
        ValueError
            Invalid parameters or data, or fewer than two classes.
        """
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least two classes in y, got {self.classes_.tolist()}."
            )
        self._train(X, encoded, len(self.classes_), classify=True)
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n_obs, n_classes), rows summing to 1 (float64)."""
        logits = self._forward(X)
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class label per row, shape (n_obs,)."""
        return self.classes_[np.argmax(self._forward(X), axis=1)]
