"""The train models behind :class:`fanfit.train.model.TrainModel`, one per family, and their registry.

- :class:`KMeansModel` (``kmeans``): Lloyd rounds, :func:`fanfit.train.kmeans.kmeans_step` and
  :func:`~fanfit.train.kmeans.kmeans_reduce`; every row each round.

K-Means' and the linear models' steps compute in numpy on a Lambda worker and in PyTorch on the GPU
worker (:meth:`TrainModel.device` of the backend, passed to the step as ``device``;
:mod:`fanfit.train.torch_steps`).
- :class:`LinearModel` (``logreg``, ``linreg``): mini-batch SGD on
  :func:`fanfit.train.linear.loss_gradient` (:mod:`fanfit.train.sgd`), BSP or DS-Sync.
- :class:`MlpModel` (``mlp``): the same SGD on :func:`fanfit.train.mlp.mlp_loss_gradient` (PyTorch,
  imported by :meth:`MlpModel.device` only); its steps run on the GPU worker.

:func:`model_for` returns the model of a name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fanfit.errors import InvalidJobError
from fanfit.train.batches import batch_rows, row_range
from fanfit.train.kmeans import KMeansPartial, kmeans_reduce, kmeans_step
from fanfit.train.linear import Params, init_params
from fanfit.train.mlp import init_mlp_params, layer_sizes, mlp_device, mlp_loss_gradient
from fanfit.train.model import ModelState, SpecLike, TrainModel, per_worker
from fanfit.train.sgd import (
    WorkerGradient,
    average_params,
    dssync_step,
    reduce_gradients,
    sgd_step,
    worker_gradient,
)

__all__ = ["MODELS", "TRAIN_MODELS", "KMeansModel", "LinearModel", "MlpModel", "model_for"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


class KMeansModel(TrainModel):
    """K-Means (Lloyd), exact as scikit-learn's ``algorithm='lloyd'`` (:mod:`fanfit.train.kmeans`).

    Each worker takes consecutive rows (:func:`fanfit.train.batches.row_range`; a round's batches
    cover every row). When the reduce converges strictly (no label changed) the run ends; when it
    converges by ``tol`` or reaches ``rounds``, one more round (phase ``'final'``) runs the final
    E-step for the inertia of the final centroids, as scikit-learn does.
    """

    name = "kmeans"
    supervised = False
    every_row = True
    takes_start = True

    def check_spec(self, spec: SpecLike) -> None:
        if spec.n_clusters is None or not _is_int(spec.n_clusters) or spec.n_clusters < 1:
            raise InvalidJobError(
                f"--n-clusters must be an integer >= 1 for kmeans; got {spec.n_clusters!r}"
            )
        if spec.sync != "bsp":
            raise InvalidJobError(
                "--sync ds-sync applies to logreg, linreg and mlp only; kmeans is bsp"
            )
        if spec.hidden:
            raise InvalidJobError(f"--hidden applies to --model mlp only; got {spec.model}")

    def check_rows(self, spec: SpecLike, n_obs: int) -> None:
        if (spec.n_clusters or 0) > n_obs:
            raise InvalidJobError(
                f"--n-clusters ({spec.n_clusters}) exceeds the rows of the data ({n_obs})"
            )

    def n_outputs(self, spec: SpecLike, n_classes: int | None) -> int:
        return int(spec.n_clusters or 0)

    def bytes_per_row(self, spec: SpecLike, n_outputs: int) -> int:
        # distances to k centres, labels
        return 8 * (int(spec.n_clusters or 0) + 2)

    def init(
        self, spec: SpecLike, X: np.ndarray, n_outputs: int, start: np.ndarray | None = None
    ) -> ModelState:
        if start is not None:
            centroids = np.asarray(start, dtype=np.float64)
            d = X.shape[1]
            if centroids.shape != (n_outputs, d) or not np.all(np.isfinite(centroids)):
                raise InvalidJobError(
                    f"init must be finite centroids of shape ({n_outputs}, {d}); got {centroids.shape}"
                )
        else:
            rng = np.random.default_rng(spec.seed)
            centroids = X[np.sort(rng.choice(X.shape[0], size=n_outputs, replace=False))]
        return ModelState({"centroids": centroids}, phase="train", n_iter=0)

    def worker_step(
        self,
        spec: SpecLike,
        state: ModelState,
        X: np.ndarray,
        y: np.ndarray | None,
        batches: np.ndarray,
        worker: int,
        round_index: int,
        device: str | None = None,
    ) -> dict[str, np.ndarray]:
        rows = row_range(batches, worker)
        prev = state.arrays.get("prev_centroids") if state.phase == "train" else None
        if device is None:
            step = kmeans_step(X[rows], state.arrays["centroids"], prev, rows.start)
        else:  # the GPU worker's backend
            from fanfit.train.torch_steps import kmeans_step_torch

            step = kmeans_step_torch(
                X[rows], state.arrays["centroids"], prev, rows.start, device=device
            )
        return step.to_arrays()

    def reduce(
        self,
        spec: SpecLike,
        state: ModelState,
        partials: Sequence[dict[str, np.ndarray]],
        groups: Sequence[Sequence[int]],
    ) -> tuple[ModelState, dict[str, Any]]:
        kparts = [KMeansPartial.from_arrays(p) for p in partials]
        C = state.arrays["centroids"]
        if state.phase == "final":
            inertia = float(sum(p.inertia for p in kparts))
            done = ModelState({"centroids": C}, "done", state.n_iter, state.converged, inertia)
            return done, {"inertia": inertia}
        out = kmeans_reduce(kparts, C, float(spec.tol))
        n_iter = state.n_iter + 1
        record = {
            "inertia": out.inertia,
            "n_changed": out.n_changed,
            "center_shift": out.center_shift,
            "n_relocated": out.n_relocated,
        }
        arrays = {"centroids": out.centroids, "prev_centroids": C}
        if out.strict:
            nxt = ModelState(arrays, "done", n_iter, converged=True, inertia=out.inertia)
        elif out.converged or n_iter >= int(spec.rounds):
            nxt = ModelState(arrays, "final", n_iter, converged=out.converged)
        else:
            nxt = ModelState(arrays, "train", n_iter)
        return nxt, record

    def finalize(
        self,
        spec: SpecLike,
        state: ModelState,
        classes: list[float] | None,
        losses: list[float | None],
    ) -> dict[str, Any]:
        return {
            "centroids": state.arrays["centroids"].tolist(),
            "inertia": float(state.inertia or 0.0),
            "n_iter": int(state.n_iter),
            "converged": bool(state.converged or False),
        }


class _SgdModel(TrainModel):
    """Mini-batch SGD (:mod:`fanfit.train.sgd`): BSP :func:`~fanfit.train.sgd.reduce_gradients`
    then :func:`~fanfit.train.sgd.sgd_step` (one step on the ``B`` rows, however LB-BSP split
    them), or DS-Sync :func:`~fanfit.train.sgd.dssync_step` in the round's groups, each worker
    keeping its own model (stacked on a leading axis). The run ends after ``rounds``."""

    def first_params(self, spec: SpecLike, n_features: int, n_outputs: int) -> Params:
        """The round-0 model of one worker."""
        raise NotImplementedError

    def gradient(
        self, spec: SpecLike, params: Params, X: np.ndarray, y: np.ndarray, device: str | None
    ) -> WorkerGradient:
        """A worker's loss and gradient over its rows."""
        raise NotImplementedError

    def n_outputs(self, spec: SpecLike, n_classes: int | None) -> int:
        return int(n_classes) if n_classes is not None else 1

    def init(
        self, spec: SpecLike, X: np.ndarray, n_outputs: int, start: np.ndarray | None = None
    ) -> ModelState:
        params = self.first_params(spec, X.shape[1], n_outputs)
        if spec.sync == "ds-sync":
            arrays = {k: np.stack([v] * spec.workers) for k, v in params.items()}
        else:
            arrays = dict(params)
        return ModelState(arrays, phase="train", n_iter=0)

    def worker_step(
        self,
        spec: SpecLike,
        state: ModelState,
        X: np.ndarray,
        y: np.ndarray | None,
        batches: np.ndarray,
        worker: int,
        round_index: int,
        device: str | None = None,
    ) -> dict[str, np.ndarray]:
        idx = batch_rows(X.shape[0], batches, int(spec.seed), round_index, worker)
        params = per_worker(state.arrays, worker) if spec.sync == "ds-sync" else dict(state.arrays)
        if y is None:
            raise InvalidJobError(f"--target is required for {spec.model}")
        return self.gradient(spec, params, X[idx], y[idx], device).to_arrays()

    def reduce(
        self,
        spec: SpecLike,
        state: ModelState,
        partials: Sequence[dict[str, np.ndarray]],
        groups: Sequence[Sequence[int]],
    ) -> tuple[ModelState, dict[str, Any]]:
        grads = [WorkerGradient.from_arrays(p) for p in partials]
        lr, l2 = float(spec.lr), float(spec.l2)
        if spec.sync == "ds-sync":
            n = len(grads)
            worker_params = [per_worker(state.arrays, i) for i in range(n)]
            stepped = dssync_step(worker_params, grads, groups, lr, l2)
            arrays = {k: np.stack([p[k] for p in stepped]) for k in stepped[0]}
        else:
            g = reduce_gradients(grads)
            arrays = dict(sgd_step(dict(state.arrays), g.grads, lr, l2))
        loss = float(reduce_gradients(grads).loss)
        n_iter = state.n_iter + 1
        phase = "done" if n_iter >= int(spec.rounds) else "train"
        return ModelState(arrays, phase, n_iter), {"loss": loss}

    def final_params(self, spec: SpecLike, state: ModelState) -> Params:
        """The trained model: DS-Sync's average over the workers (:func:`average_params`)."""
        if spec.sync == "ds-sync":
            n = next(iter(state.arrays.values())).shape[0]
            return average_params([per_worker(state.arrays, i) for i in range(n)])
        return dict(state.arrays)


class LinearModel(_SgdModel):
    """Multinomial logistic regression (``logreg``) or least squares (``linreg``),
    :mod:`fanfit.train.linear`."""

    def __init__(self, name: str, loss: str, classifier: bool) -> None:
        self.name = name  # type: ignore[misc]
        self.loss = loss
        self.classifier = classifier  # type: ignore[misc]

    def check_spec(self, spec: SpecLike) -> None:
        if spec.hidden:
            raise InvalidJobError(f"--hidden applies to --model mlp only; got {spec.model}")

    def bytes_per_row(self, spec: SpecLike, n_outputs: int) -> int:
        # the rows' copy, logits, probabilities and residuals for K outputs
        return 8 * (len(spec.features) + 3 * n_outputs)

    def first_params(self, spec: SpecLike, n_features: int, n_outputs: int) -> Params:
        return init_params(n_features, n_outputs)

    def gradient(
        self, spec: SpecLike, params: Params, X: np.ndarray, y: np.ndarray, device: str | None
    ) -> WorkerGradient:
        return worker_gradient(self.loss, params, X, y, device=device)

    def finalize(
        self,
        spec: SpecLike,
        state: ModelState,
        classes: list[float] | None,
        losses: list[float | None],
    ) -> dict[str, Any]:
        params = self.final_params(spec, state)
        return {
            "coef": params["W"].tolist(),
            "intercept": params["b"].tolist(),
            "classes": classes,
            "n_iter": int(state.n_iter),
            "loss": losses,
        }


class MlpModel(_SgdModel):
    """The ReLU network classifier of :mod:`fanfit.train.mlp`; every worker on the GPU worker
    (the Lambda layer has no PyTorch)."""

    name = "mlp"
    classifier = True

    def check_spec(self, spec: SpecLike) -> None:
        layer_sizes(1, spec.hidden, 1)  # InvalidJobError naming --hidden
        if spec.gpu_workers != spec.workers:
            raise InvalidJobError(
                f"--gpu-workers must equal --workers ({spec.workers}) for mlp: every mlp "
                "worker runs on the GPU worker (AWS Batch), since the Lambda layer has no "
                f"PyTorch; got --gpu-workers {spec.gpu_workers}"
            )

    def bytes_per_row(self, spec: SpecLike, n_outputs: int) -> int:
        # autograd keeps each hidden layer's pre- and post-activation and their gradients
        return 8 * (len(spec.features) + 4 * sum(spec.hidden) + 3 * n_outputs)

    def workload_extra(self, spec: SpecLike) -> dict[str, Any]:
        return {"hidden": list(spec.hidden)} if spec.hidden else {}

    def first_params(self, spec: SpecLike, n_features: int, n_outputs: int) -> Params:
        return init_mlp_params(n_features, spec.hidden, n_outputs, spec.seed)

    def device(self, backend: str = "torch") -> str | None:
        # torch on either backend: the MLP's step exists in PyTorch only (its workers all run on
        # the GPU worker, check_spec)
        return mlp_device()

    def gradient(
        self, spec: SpecLike, params: Params, X: np.ndarray, y: np.ndarray, device: str | None
    ) -> WorkerGradient:
        loss, grads = mlp_loss_gradient(params, X, y, device=device)
        return WorkerGradient(grads, loss, int(X.shape[0]))

    def finalize(
        self,
        spec: SpecLike,
        state: ModelState,
        classes: list[float] | None,
        losses: list[float | None],
    ) -> dict[str, Any]:
        params = self.final_params(spec, state)
        return {
            "params": {k: v.tolist() for k, v in params.items()},
            "hidden": list(spec.hidden),
            "classes": classes,
            "n_iter": int(state.n_iter),
            "loss": losses,
        }


#: The models of a train job, by name.
MODELS: dict[str, TrainModel] = {
    "kmeans": KMeansModel(),
    "logreg": LinearModel("logreg", "logistic", classifier=True),
    "linreg": LinearModel("linreg", "least-squares", classifier=False),
    "mlp": MlpModel(),
}
#: Their names, in the order the CLI lists them.
TRAIN_MODELS: tuple[str, ...] = tuple(MODELS)


def model_for(name: str) -> TrainModel:
    """The model called ``name``.

    Raises
    ------
    InvalidJobError
        ``name`` is not one of :data:`TRAIN_MODELS` (the message names them).
    """
    model = MODELS.get(name) if isinstance(name, str) else None
    if model is None:
        raise InvalidJobError(f"--model must be one of {', '.join(TRAIN_MODELS)}; got {name!r}")
    return model
