"""Data-parallel training in synchronous rounds, in pure numpy: a worker step and a reduce per model.

- :mod:`~fanfit.train.kmeans`: K-Means (Lloyd), exact as scikit-learn's ``algorithm='lloyd'``.
- :mod:`~fanfit.train.linear`: multinomial logistic regression and least squares (loss, gradient,
  prediction, scores).
- :mod:`~fanfit.train.sgd`: mini-batch SGD rounds: worker gradient, BSP reduce, DS-Sync update.
- :mod:`~fanfit.train.batches`: which rows a worker takes in a round.
"""

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
    "KMeansPartial",
    "KMeansResult",
    "KMeansRound",
    "Params",
    "WorkerGradient",
    "accuracy",
    "average_params",
    "batch_rows",
    "dssync_step",
    "global_batch_rows",
    "init_params",
    "kmeans_fit",
    "kmeans_inertia",
    "kmeans_predict",
    "kmeans_reduce",
    "kmeans_step",
    "loss_gradient",
    "mse",
    "predict",
    "predict_proba",
    "reduce_gradients",
    "row_range",
    "sgd_step",
    "train_sgd",
    "worker_gradient",
]
