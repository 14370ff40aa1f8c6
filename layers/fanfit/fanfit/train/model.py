"""The interface every train model implements: init, worker step, reduce, finalize.

A train job (:mod:`fanfit.jobs.train`) knows its model only through :class:`TrainModel`; one
implementation per model family lives in :mod:`fanfit.train.models` (K-Means, the linear models,
the MLP) and :func:`fanfit.train.models.model_for` picks it by name.

Everything here is pure: arrays and small dataclasses in and out. The job's options arrive as any
object with the attributes of :class:`SpecLike` (the job document
``fanfit.jobs.documents.train.TrainSpec`` is one), so this package imports nothing above it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol

import numpy as np

from fanfit.errors import InvalidJobError
from fanfit.train.linear import Params

__all__ = ["BACKENDS", "ModelState", "SpecLike", "TrainModel"]

#: Where a worker step computes: ``'numpy'`` (the Lambda workers: their layer has no PyTorch) or
#: ``'torch'`` (the GPU worker: CUDA when present, else the CPU).
BACKENDS: tuple[str, ...] = ("numpy", "torch")


class SpecLike(Protocol):
    """The options of a train job a model reads (those of ``fanfit.jobs.documents.train.TrainSpec``)."""

    @property
    def model(self) -> str: ...
    @property
    def features(self) -> tuple[str, ...]: ...
    @property
    def workers(self) -> int: ...
    @property
    def gpu_workers(self) -> int: ...
    @property
    def rounds(self) -> int: ...
    @property
    def sync(self) -> str: ...
    @property
    def n_clusters(self) -> int | None: ...
    @property
    def lr(self) -> float: ...
    @property
    def l2(self) -> float: ...
    @property
    def tol(self) -> float: ...
    @property
    def seed(self) -> int: ...
    @property
    def hidden(self) -> tuple[int, ...]: ...


@dataclass(frozen=True)
class ModelState:
    """The model between two rounds (``train/state/<r>.npz``) and where the run stands.

    Attributes
    ----------
    arrays : dict of str to numpy.ndarray
        The model: K-Means ``centroids`` (k, d) (and ``prev_centroids`` (k, d), the centroids of
        the round before); SGD ``W``, ``b`` (linear) or ``W0, b0, ...`` (MLP), each with a leading
        ``(n_workers,)`` axis under DS-Sync (every worker keeps its own model).
    phase : {'train', 'final', 'done'}
        ``'train'``: another training round runs; ``'final'``: K-Means' last E-step (inertia of the
        final centroids) runs; ``'done'``: the model is final.
    n_iter : int
        Rounds reduced (SGD steps, Lloyd iterations).
    converged : bool, optional
        K-Means: whether the run stopped on convergence (None: not decided yet).
    inertia : float, optional
        K-Means: the final inertia (set in phase ``'done'``).
    """

    arrays: dict[str, np.ndarray] = field(repr=False)
    phase: str = "train"
    n_iter: int = 0
    converged: bool | None = None
    inertia: float | None = None

    def meta(self) -> dict[str, Any]:
        """The state's JSON meta (what is stored next to the arrays), without unset fields."""
        out: dict[str, Any] = {"phase": self.phase, "n_iter": self.n_iter}
        if self.converged is not None:
            out["converged"] = self.converged
        if self.inertia is not None:
            out["inertia"] = self.inertia
        return out

    def with_arrays(self, arrays: dict[str, np.ndarray]) -> ModelState:
        """The same state holding ``arrays``."""
        return replace(self, arrays=arrays)


class TrainModel(ABC):
    """One model family of a train job.

    A round of a job with ``N`` workers and batches ``b`` (``B = sum(b)``):
    :meth:`worker_step` on each worker's rows gives its partial (arrays for ``numpy.savez``);
    :meth:`reduce` merges the partials into the next :class:`ModelState` (weights ``b_i / B``);
    after the last round :meth:`finalize` turns the final state into the result's fields.

    Attributes
    ----------
    name : str
        The ``model`` option.
    supervised : bool
        Needs a target column.
    classifier : bool
        Its target holds class labels (mapped to ``0..K-1`` by the plan's ``classes``).
    every_row : bool
        A round takes every row of the data (K-Means: the batches sum to the rows, not to a
        global batch; no DS-Sync).
    takes_start : bool
        :meth:`init` takes a start the user gave (K-Means' initial centroids, ``init_key``).
    """

    name: ClassVar[str]
    supervised: ClassVar[bool] = True
    classifier: ClassVar[bool] = False
    every_row: ClassVar[bool] = False
    takes_start: ClassVar[bool] = False

    def check_spec(self, spec: SpecLike) -> None:
        """Options only this model has (``--n-clusters``, ``--hidden``, ...).

        Raises
        ------
        fanfit.errors.InvalidJobError
            Naming the option.
        """
        return None

    def check_rows(self, spec: SpecLike, n_obs: int) -> None:
        """Options that must fit the data's ``n_obs`` rows.

        Raises
        ------
        fanfit.errors.InvalidJobError
        """
        return None

    @abstractmethod
    def n_outputs(self, spec: SpecLike, n_classes: int | None) -> int:
        """Outputs of the model: clusters, classes (``n_classes``) or 1 (regression)."""

    @abstractmethod
    def bytes_per_row(self, spec: SpecLike, n_outputs: int) -> int:
        """Memory a worker's step needs per row of its batch beyond the data, bytes."""

    def workload_extra(self, spec: SpecLike) -> dict[str, Any]:
        """Extra fields of the workload signature (:func:`fanfit.sched.throughput.workload_signature`)."""
        return {}

    @abstractmethod
    def init(
        self, spec: SpecLike, X: np.ndarray, n_outputs: int, start: np.ndarray | None = None
    ) -> ModelState:
        """The round-0 state.

        Parameters
        ----------
        spec : SpecLike
        X : numpy.ndarray, shape (n_obs, d)
            The (standardised) features.
        n_outputs : int
        start : numpy.ndarray, optional
            K-Means: the initial centroids (k, d) the user gave.
        """

    def device(self, backend: str = "numpy") -> str | None:
        """Where :meth:`worker_step` computes on ``backend``: None (numpy) or the torch device.

        Parameters
        ----------
        backend : {'numpy', 'torch'}
            :data:`BACKENDS`: a Lambda worker's ``'numpy'``, the GPU worker's ``'torch'``.

        Returns
        -------
        str or None
            None for numpy; ``'cpu'`` or ``'cuda'`` for torch
            (:func:`fanfit.train.torch_steps.torch_device`), passed to :meth:`worker_step` as its
            ``device``. Called before the step is timed: torch is imported here.

        Raises
        ------
        InvalidJobError
            An unknown backend, or ``'torch'`` where PyTorch is not installed.
        """
        if backend not in BACKENDS:
            raise InvalidJobError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
        if backend == "numpy":
            return None
        from fanfit.train.torch_steps import torch_device

        return torch_device()

    @abstractmethod
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
        """Worker ``worker``'s partial of round ``round_index`` on its rows of ``X``.

        Parameters
        ----------
        batches : numpy.ndarray of int64, shape (n_workers,)
            The round's batch sizes (samples per worker).
        device : str, optional
            :meth:`device`'s answer: None computes in numpy, ``'cpu'``/``'cuda'`` in PyTorch
            (the same maths; equal to rounding on the CPU).

        Returns
        -------
        dict of str to numpy.ndarray
            The partial, flat arrays for ``numpy.savez``.
        """

    @abstractmethod
    def reduce(
        self,
        spec: SpecLike,
        state: ModelState,
        partials: Sequence[dict[str, np.ndarray]],
        groups: Sequence[Sequence[int]],
    ) -> tuple[ModelState, dict[str, Any]]:
        """Merge the workers' partials (one per worker, in order) into the next state.

        Returns
        -------
        ModelState
            The next round's state (phase ``'done'`` when no round is left).
        dict
            What the round record adds: ``loss`` (SGD) or ``inertia`` (and K-Means' ``n_changed``,
            ``center_shift``, ``n_relocated``).
        """

    @abstractmethod
    def finalize(
        self,
        spec: SpecLike,
        state: ModelState,
        classes: list[float] | None,
        losses: list[float | None],
    ) -> dict[str, Any]:
        """The result's model fields from the final state (JSON-ready lists and numbers).

        Parameters
        ----------
        classes : list of float or None
            The plan's class labels.
        losses : list
            Each round record's ``loss`` (None where it has none).
        """


def per_worker(arrays: Params, worker: int) -> Params:
    """Worker ``worker``'s model from DS-Sync's stacked arrays."""
    return {k: v[worker] for k, v in arrays.items()}
