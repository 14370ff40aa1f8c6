"""Linear models for data-parallel SGD: multinomial logistic regression and least squares.

Parameters are a dict of arrays, ``{"W": (n_features, n_outputs), "b": (n_outputs,)}``, which a
caller stores with ``numpy.savez(buf, **params)``. :func:`loss_gradient` gives the mean loss over the
rows it is handed and its gradient; the L2 penalty ``l2 / 2 * ||W||^2`` (intercept not penalised, as
in scikit-learn) is applied once per step by :func:`fanfit.train.sgd.sgd_step`, not here, so
gradients of disjoint row sets combine by a weighted mean.

- ``'logistic'``: softmax over ``n_outputs`` classes, labels ``y`` in ``{0, ..., n_outputs - 1}``,
  loss the mean cross-entropy :math:`-\\frac1n\\sum_i \\log p_{i, y_i}` with
  :math:`p_i = \\mathrm{softmax}(x_i W + b)`; gradient :math:`\\frac1n X^\\top (P - Y)`.
- ``'least-squares'``: loss :math:`\\frac1{2n}\\sum_i \\lVert x_i W + b - y_i\\rVert^2`, gradient
  :math:`\\frac1n X^\\top (XW + b - Y)`; ``y`` of shape (n,) for one output or (n, n_outputs).
"""

from __future__ import annotations

import numpy as np

from fanfit.errors import InvalidDataError, InvalidJobError

__all__ = [
    "LINEAR_MODELS",
    "Params",
    "accuracy",
    "check_linear_inputs",
    "init_params",
    "loss_gradient",
    "mse",
    "predict",
    "predict_proba",
]

Params = dict[str, np.ndarray]
#: Models :func:`loss_gradient` knows.
LINEAR_MODELS: tuple[str, ...] = ("logistic", "least-squares")


def init_params(n_features: int, n_outputs: int) -> Params:
    """Zero parameters: ``{"W": zeros((n_features, n_outputs)), "b": zeros(n_outputs)}``.

    Raises
    ------
    InvalidJobError
        A size below 1.
    """
    if n_features < 1 or n_outputs < 1:
        raise InvalidJobError(
            f"n_features and n_outputs must be >= 1, got {n_features!r}, {n_outputs!r}."
        )
    return {"W": np.zeros((n_features, n_outputs)), "b": np.zeros(n_outputs)}


def _check_model(model: str) -> None:
    if model not in LINEAR_MODELS:
        raise InvalidJobError(f"model must be one of {', '.join(LINEAR_MODELS)}; got {model!r}.")


def _check_x(params: Params, X: np.ndarray) -> None:
    W = params["W"]
    if X.ndim != 2 or X.shape[1] != W.shape[0]:
        raise InvalidDataError(f"X must have shape (n, {W.shape[0]}), got {X.shape}.")


def _scores(params: Params, X: np.ndarray) -> np.ndarray:
    _check_x(params, X)
    return X @ params["W"] + params["b"]


def _softmax(Z: np.ndarray) -> np.ndarray:
    Z = Z - Z.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)


def _one_hot(y: np.ndarray, n_classes: int) -> np.ndarray:
    labels = np.asarray(y)
    if labels.ndim != 1 or not np.all((labels == np.round(labels)) & (labels >= 0)):
        raise InvalidDataError("y must hold class labels 0, 1, ..., n_outputs - 1.")
    if labels.size and labels.max() >= n_classes:
        raise InvalidDataError(
            f"y holds class {int(labels.max())}, but the model has {n_classes} classes."
        )
    Y = np.zeros((labels.size, n_classes))
    Y[np.arange(labels.size), labels.astype(np.int64)] = 1.0
    return Y


def _targets(y: np.ndarray, n_outputs: int) -> np.ndarray:
    Y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    if Y.shape[1] != n_outputs:
        raise InvalidDataError(f"y must have {n_outputs} column(s), got {Y.shape[1]}.")
    return Y


def check_linear_inputs(
    model: str, params: Params, X: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The rows and the target matrix of :func:`loss_gradient`, checked (both backends use it).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``X`` as float64 (n, n_features) and ``Y`` (n, n_outputs): the one-hot labels (logistic)
        or the targets (least squares).

    Raises
    ------
    InvalidJobError
        Unknown model.
    InvalidDataError
        Shapes or labels that do not fit the parameters.
    """
    _check_model(model)
    Xa = np.asarray(X, dtype=np.float64)
    _check_x(params, Xa)
    n_outputs = int(np.shape(params["W"])[1])
    Y = _one_hot(y, n_outputs) if model == "logistic" else _targets(y, n_outputs)
    if Y.shape[0] != Xa.shape[0]:
        raise InvalidDataError(f"X has {Xa.shape[0]} rows but y has {Y.shape[0]}.")
    return Xa, Y


def loss_gradient(model: str, params: Params, X: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
    """Mean loss over the rows of ``X`` and its gradient with respect to ``W`` and ``b``.

    Parameters
    ----------
    model : {'logistic', 'least-squares'}
    params : dict
        ``W`` (n_features, n_outputs), ``b`` (n_outputs,).
    X : numpy.ndarray of float, shape (n, n_features)
    y : numpy.ndarray, shape (n,) or (n, n_outputs)
        Class labels (logistic) or targets (least squares).

    Returns
    -------
    (float, dict)
        The mean loss and ``{"W": (n_features, n_outputs), "b": (n_outputs,)}``; for ``n = 0``,
        a loss of 0 and zero gradients.

    Raises
    ------
    InvalidJobError
        Unknown model.
    InvalidDataError
        Shapes or labels that do not fit the parameters.

    See Also
    --------
    fanfit.train.torch_steps.loss_gradient_torch : the same step in PyTorch (the GPU worker's).
    """
    X, Y = check_linear_inputs(model, params, X, y)
    n = X.shape[0]
    Z = _scores(params, X)
    if model == "logistic":
        Zc = Z - Z.max(axis=1, keepdims=True)
        log_p = Zc - np.log(np.exp(Zc).sum(axis=1, keepdims=True))
        loss = -(Y * log_p).sum()
        R = np.exp(log_p) - Y
    else:
        R = Z - Y
        loss = 0.5 * (R * R).sum()
    if n == 0:
        return 0.0, {"W": np.zeros_like(params["W"]), "b": np.zeros_like(params["b"])}
    return float(loss / n), {"W": X.T @ R / n, "b": R.sum(axis=0) / n}


def predict_proba(params: Params, X: np.ndarray) -> np.ndarray:
    """Class probabilities of a logistic model, shape (n, n_classes)."""
    return _softmax(_scores(params, np.asarray(X, dtype=np.float64)))


def predict(model: str, params: Params, X: np.ndarray) -> np.ndarray:
    """Predictions: class labels (logistic, int64, shape (n,)) or values (least squares, shape (n,)
    for one output, else (n, n_outputs))."""
    _check_model(model)
    Z = _scores(params, np.asarray(X, dtype=np.float64))
    if model == "logistic":
        return Z.argmax(axis=1).astype(np.int64)
    return Z[:, 0] if Z.shape[1] == 1 else Z


def accuracy(params: Params, X: np.ndarray, y: np.ndarray) -> float:
    """Share of rows whose most probable class is ``y`` (logistic model)."""
    return float(np.mean(predict("logistic", params, X) == np.asarray(y)))


def mse(params: Params, X: np.ndarray, y: np.ndarray) -> float:
    """Mean squared error of a least-squares model, averaged over rows and outputs."""
    Z = _scores(params, np.asarray(X, dtype=np.float64))
    R = Z - _targets(y, Z.shape[1])
    return float(np.mean(R * R))
