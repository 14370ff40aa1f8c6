"""The options of a train job, defined once: :class:`TrainOptions`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fanfit.client.options.fields import _DATA_HELP, _option, _Options, _weight

__all__ = ["TrainOptions"]


@dataclass(frozen=True, kw_only=True)
class TrainOptions(_Options):
    """Every option of a train job (the order of ``--help``); the spec is built from them by
    :func:`fanfit.client.train.build_train_spec`, whose parameters they are, plus ``data`` and
    ``weight`` (see :func:`fanfit.client.train.submit_train`)."""

    data: Any = _option(help=_DATA_HELP, kind="path")
    model: str = _option(help="kmeans | logreg | linreg | mlp")
    features: str | Sequence[str] = _option(help="feature columns, comma-separated", kind="columns")
    target: str | None = _option(
        None, help="target column (logreg, mlp: class labels; linreg: values)"
    )
    hidden: str | Sequence[int] | None = _option(
        None, metavar="H[,H...]", help="mlp: hidden layer widths, e.g. 256,256,256"
    )
    workers: int = _option(4, kind="int", help="workers per round (1..40)")
    worker_memory: int | str | Sequence[int] | None = _option(
        None,
        kind="ints",
        metavar="MB[,MB...]",
        help="memory of every worker, or one per worker (e.g. 1769,1769,885,885)",
    )
    gpu_workers: int = _option(
        0, kind="int", help="how many of the workers run on the GPU worker (AWS Batch)"
    )
    global_batch: int | None = _option(
        None, kind="int", help="samples per SGD round, split over the workers"
    )
    rounds: int = _option(10, kind="int", help="most rounds")
    balance: str = _option(
        "uniform", help="uniform | lb-bsp (Chen et al. 2021) | static (--worker-batches)"
    )
    worker_batches: str | Sequence[int] | None = _option(
        None,
        kind="ints",
        metavar="B[,B...]",
        help="static: each worker's batch, summing to --global-batch",
    )
    sync: str = _option("bsp", help="bsp | ds-sync (Wang et al. 2020)")
    group_size: int = _option(2, kind="int", help="DS-Sync group size")
    n_clusters: int | None = _option(None, kind="int", help="K-Means' k")
    lr: float = _option(0.1, kind="float", help="SGD learning rate")
    l2: float = _option(0.0, kind="float", help="SGD L2 penalty")
    tol: float = _option(
        0.0, kind="float", help="K-Means: absolute tolerance on the squared centre shift"
    )
    seed: int = _option(0, kind="int")
    standardize: bool = _option(False, kind="bool", help="scale features to unit variance")
    weight: float = _weight()

    def spec_options(self) -> dict[str, Any]:
        """The options of :func:`fanfit.client.train.build_train_spec`: all but ``data`` and
        ``weight``."""
        return {k: getattr(self, k) for k in self.names() if k not in ("data", "weight")}
