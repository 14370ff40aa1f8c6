"""Data-parallel training in synchronous rounds: a worker step and a reduce per model.

- :mod:`~fanfit.train.kmeans`: K-Means (Lloyd), exact as scikit-learn's ``algorithm='lloyd'``.
- :mod:`~fanfit.train.linear`: multinomial logistic regression and least squares (loss, gradient,
  prediction, scores).
- :mod:`~fanfit.train.sgd`: mini-batch SGD rounds: worker gradient, BSP reduce, DS-Sync update.
- :mod:`~fanfit.train.batches`: which rows a worker takes in a round.
- :mod:`~fanfit.train.torch_steps`: the K-Means and linear worker steps in PyTorch, the GPU
  worker's backend (the Lambda workers compute in numpy); torch is imported on first use only.
- :mod:`~fanfit.train.model`: the interface of a train model (:class:`TrainModel`: init, worker
  step, reduce, finalize); :mod:`~fanfit.train.models`: its implementations (K-Means, linear,
  MLP) and :func:`model_for`.

This package imports nothing above it (no :mod:`fanfit.sched`, no :mod:`fanfit.jobs`): a round's
batches and DS-Sync groups are inputs.
"""

from fanfit.split import even_batches
from fanfit.train.batches import batch_rows, global_batch_rows, row_range
from fanfit.train.kmeans import (
    KMeansPartial,
    KMeansResult,
    KMeansRound,
    kmeans_fit,
    kmeans_inertia,
    kmeans_predict,
    kmeans_reduce,
    kmeans_step,
)
from fanfit.train.linear import (
    LINEAR_MODELS,
    Params,
    accuracy,
    init_params,
    loss_gradient,
    mse,
    predict,
    predict_proba,
)
from fanfit.train.model import ModelState, TrainModel
from fanfit.train.models import TRAIN_MODELS, model_for
from fanfit.train.sgd import (
    SYNC_MODES,
    WorkerGradient,
    average_params,
    dssync_step,
    reduce_gradients,
    sgd_step,
    train_sgd,
    worker_gradient,
)

__all__ = [
    "LINEAR_MODELS",
    "SYNC_MODES",
    "TRAIN_MODELS",
    "ModelState",
    "TrainModel",
    "KMeansPartial",
    "KMeansResult",
    "KMeansRound",
    "Params",
    "WorkerGradient",
    "accuracy",
    "average_params",
    "batch_rows",
    "dssync_step",
    "even_batches",
    "global_batch_rows",
    "init_params",
    "kmeans_fit",
    "kmeans_inertia",
    "kmeans_predict",
    "kmeans_reduce",
    "kmeans_step",
    "loss_gradient",
    "model_for",
    "mse",
    "predict",
    "predict_proba",
    "reduce_gradients",
    "row_range",
    "sgd_step",
    "train_sgd",
    "worker_gradient",
]
