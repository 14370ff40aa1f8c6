"""Throughput: what a shard reports, and a pluggable predictor of the next shard's samples/s.

Every shard (a cross-fitting invocation, or one worker's step of a training round) reports a
:class:`ShardObservation`. A :class:`ThroughputPredictor` turns the history into the throughput
(samples/s) the scheduler plans the next shards with: shard sizes for estimate jobs
(:mod:`fanfit.sched.sizing`) and per-worker batches for training rounds (:mod:`fanfit.sched.lbbsp`,
LB-BSP, Chen et al., IEEE TCC 2021, which sizes each worker's batch from its predicted speed).

The default predictor, :class:`EwmaThroughput`, keeps an exponentially weighted moving average per
``(workload signature, resource)``. A Lambda function's CPU share is proportional to its memory
(AWS Lambda documentation: 1,769 MB buys one vCPU, 10,240 MB up to six), so a throughput measured at
one memory size is scaled to another where that size has no history yet (:func:`scale_throughput`).
Everything serialises to plain dicts of str, int and float (no pickle), and reads back numbers given
as str or :class:`decimal.Decimal` too, as DynamoDB returns them.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from fanfit.errors import InvalidJobError
from fanfit.sched.resources import resource_memory_mb

__all__ = [
    "DEFAULT_ALPHA",
    "LAMBDA_MB_PER_VCPU",
    "LAMBDA_MAX_MEMORY_MB",
    "LAMBDA_MAX_VCPUS",
    "EwmaThroughput",
    "ShardObservation",
    "ThroughputEntry",
    "ThroughputPredictor",
    "batched_throughput",
    "lambda_vcpus",
    "scale_throughput",
    "workload_signature",
]

#: Default EWMA weight of the newest observation. With 0.3 an observation ``k`` shards old weighs
#: ``0.3 * 0.7**k``: the last three carry two thirds of the estimate, so a changed regime (a slower
#: host, a contended account) is tracked within about three rounds, while one straggler moves the
#: estimate by only 30 % of its deviation. LB-BSP's point is that speeds drift in non-dedicated
#: environments, so the estimate must follow recent rounds without chasing every outlier.
DEFAULT_ALPHA = 0.3

#: Lambda memory that buys one vCPU (AWS Lambda documentation, "Memory and computing power").
LAMBDA_MB_PER_VCPU = 1769
#: Largest Lambda memory size, MB.
LAMBDA_MAX_MEMORY_MB = 10240
#: vCPUs at the largest memory size.
LAMBDA_MAX_VCPUS = 6.0


def _num(value: Any, name: str) -> float:
    """A finite float from int, float, str or Decimal (DynamoDB's number type)."""
    if isinstance(value, bool):
        raise InvalidJobError(f"{name} must be a number, got {value!r}.")
    try:
        number = float(value) if isinstance(value, int | float | str | Decimal) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise InvalidJobError(f"{name} must be a finite number, got {value!r}.")
    return number


def _int(value: Any, name: str) -> int:
    number = _num(value, name)
    if not number.is_integer():
        raise InvalidJobError(f"{name} must be an integer, got {value!r}.")
    return int(number)


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "True", "1", 1):
        return True
    if value in ("false", "False", "0", 0):
        return False
    raise InvalidJobError(f"{name} must be a boolean, got {value!r}.")


def lambda_vcpus(memory_mb: float) -> float:
    """CPU share of a Lambda function, in vCPUs.

    Parameters
    ----------
    memory_mb : float
        Configured memory, MB (128 to 10,240).

    Returns
    -------
    float
        ``min(memory_mb / 1769, 6)``: Lambda allocates CPU in proportion to memory, one vCPU at
        1,769 MB, up to six vCPUs at 10,240 MB (AWS Lambda documentation).

    Raises
    ------
    InvalidJobError
        If ``memory_mb`` is not positive.
    """
    if not memory_mb > 0:
        raise InvalidJobError(f"memory_mb must be positive, got {memory_mb!r}.")
    return min(memory_mb / LAMBDA_MB_PER_VCPU, LAMBDA_MAX_VCPUS)


def scale_throughput(
    samples_per_s: float, from_memory_mb: float, to_memory_mb: float, threads: float = 1.0
) -> float:
    """Scale a Lambda throughput measured at one memory size to another.

    The cores a workload can use are ``min(lambda_vcpus(memory_mb), threads)``; throughput is taken
    proportional to them. Below 1,769 MB this is the CPU share itself (a single thread gets a
    fraction of a core); above it, a workload speeds up only as far as it runs threads in parallel
    (``threads=1`` for most scikit-learn fits without ``n_jobs``; the number of BLAS threads for
    numpy-heavy code). A scaled value is a first guess for a memory size without history; the
    first measurement at that size replaces it.

    Parameters
    ----------
    samples_per_s : float
        Measured throughput at ``from_memory_mb``, samples/s.
    from_memory_mb, to_memory_mb : float
        Memory sizes, MB.
    threads : float, default 1.0
        Parallelism the workload can use (>= 1).

    Returns
    -------
    float
        Predicted throughput at ``to_memory_mb``, samples/s.

    Raises
    ------
    InvalidJobError
        If a memory size is not positive or ``threads < 1``.
    """
    if not threads >= 1:
        raise InvalidJobError(f"threads must be >= 1, got {threads!r}.")
    cores_from = min(lambda_vcpus(from_memory_mb), threads)
    cores_to = min(lambda_vcpus(to_memory_mb), threads)
    return samples_per_s * cores_to / cores_from


def batched_throughput(samples_per_s: float, measured_fits: float, fits: float) -> float:
    """A batched throughput measured at one batch size, at another.

    Parameters
    ----------
    samples_per_s : float
        Throughput measured with ``measured_fits`` fits to a batch, samples/s (the batch's rows
        over its seconds).
    measured_fits, fits : float
        Fits per batch when measured and when planned (>= 1).

    Returns
    -------
    float
        ``samples_per_s x min(1, fits / measured_fits)``. A batch's seconds ``t(K)`` do not
        shrink with fewer fits and grow at most in proportion with more (``t(K) <= t(K') K / K'``
        for ``K >= K'``: a batch of K is no slower than K / K' batches of K'), so the throughput
        ``K r / t(K)`` (``r`` rows per fit) of a smaller batch is at least ``fits / measured_fits``
        of the measured one, and of a larger one at least the measured one: the figure is a lower
        bound either way, exact where a step is bound by kernel launches (``t`` constant, the
        GPU worker's small networks, issue 32) up to the measured batch.

    Raises
    ------
    InvalidJobError
        A throughput that is not positive, or a batch size below 1.
    """
    if not samples_per_s > 0:
        raise InvalidJobError(f"samples_per_s must be positive, got {samples_per_s!r}.")
    if not (measured_fits >= 1 and fits >= 1):
        raise InvalidJobError(
            f"fits per batch must be >= 1, got measured {measured_fits!r} and planned {fits!r}."
        )
    return samples_per_s * min(1.0, fits / measured_fits)


def workload_signature(kind: str, learner: Any, n_features: int, **extra: Any) -> str:
    """A deterministic key for "the same work": throughput history is shared between equal keys.

    Parameters
    ----------
    kind : str
        Job kind, e.g. ``'estimate'`` or ``'train'``.
    learner : JSON-serialisable
        The learner or model: a name (``'logistic'``) or a learner spec dict (estimator class
        and parameters).
    n_features : int
        Number of feature columns the fit sees.
    **extra : JSON-serialisable
        Anything else that changes the cost per sample (e.g. ``n_classes``, ``n_clusters``).

    Returns
    -------
    str
        ``'<kind>-<16 hex digits>'``: the first 64 bits of the SHA-256 of the canonical JSON
        (sorted keys, no spaces) of ``{"kind", "learner", "n_features", **extra}``. Dict order and
        int-vs-numpy-int do not change it.

    Raises
    ------
    InvalidJobError
        If an argument is not JSON-serialisable or ``kind`` is empty.
    """
    if not kind or not isinstance(kind, str):
        raise InvalidJobError(f"kind must be a non-empty string, got {kind!r}.")
    payload = {"kind": kind, "learner": learner, "n_features": int(n_features), **extra}
    try:
        canonical = json.dumps(
            payload, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_json_default
        )
    except (TypeError, ValueError) as exc:
        raise InvalidJobError(
            f"workload signature inputs must be JSON-serialisable: {exc}"
        ) from exc
    return f"{kind}-{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"


def _json_default(value: Any) -> Any:
    # numpy scalars (and anything else with .item()) as Python numbers
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


@dataclass(frozen=True)
class ShardObservation:
    """What one shard reports after it ran.

    Attributes
    ----------
    samples : int
        Samples processed (> 0): training rows fitted, summed over the shard's units, for an
        estimate shard; the batch size for a training worker.
    compute_s : float
        Seconds spent computing, excluding I/O and imports (> 0).
    io_s : float
        Seconds spent reading inputs and writing outputs (>= 0).
    memory_mb : int
        Memory of the function or container, MB.
    resource : str
        Where it ran: ``'lambda-<MB>'`` (:func:`lambda_resource`) or ``'gpu:<instance type>'`` (:mod:`fanfit.sched.resources`).
    cold_start : bool
        True when the invocation started a fresh execution environment.
    signature : str
        The workload (:func:`workload_signature`).
    fits_per_batch : float, default 1
        Mean number of fits trained together as one batched model in the measured work (the GPU
        worker's TorchMLP fits, :mod:`fanfit.learners.torch_batched`; 1: one fit at a time).
        ``samples`` and ``compute_s`` then cover whole batches: the throughput is the batch's.
    """

    samples: int
    compute_s: float
    io_s: float
    memory_mb: int
    resource: str
    cold_start: bool
    signature: str
    fits_per_batch: float = 1.0

    def __post_init__(self) -> None:
        if not self.samples > 0:
            raise InvalidJobError(f"samples must be positive, got {self.samples!r}.")
        if not self.compute_s > 0:
            raise InvalidJobError(f"compute_s must be positive, got {self.compute_s!r}.")
        if not self.io_s >= 0:
            raise InvalidJobError(f"io_s must be >= 0, got {self.io_s!r}.")
        if not self.memory_mb > 0:
            raise InvalidJobError(f"memory_mb must be positive, got {self.memory_mb!r}.")
        if not self.resource or not self.signature:
            raise InvalidJobError("resource and signature must be non-empty strings.")
        if not self.fits_per_batch >= 1:
            raise InvalidJobError(f"fits_per_batch must be >= 1, got {self.fits_per_batch!r}.")

    @property
    def samples_per_s(self) -> float:
        """Throughput, samples/s: ``samples / compute_s``."""
        return self.samples / self.compute_s

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of str, int, float and bool."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardObservation:
        """Inverse of :meth:`to_dict`; numbers may be str or Decimal.

        Raises
        ------
        InvalidJobError
            A field is missing or malformed.
        """
        try:
            return cls(
                samples=_int(d["samples"], "samples"),
                compute_s=_num(d["compute_s"], "compute_s"),
                io_s=_num(d["io_s"], "io_s"),
                memory_mb=_int(d["memory_mb"], "memory_mb"),
                resource=str(d["resource"]),
                cold_start=_bool(d["cold_start"], "cold_start"),
                signature=str(d["signature"]),
                fits_per_batch=_num(d.get("fits_per_batch", 1.0), "fits_per_batch"),
            )
        except KeyError as exc:
            raise InvalidJobError(f"shard observation lacks the field {exc}.") from exc


@dataclass(frozen=True)
class ThroughputEntry:
    """The state of one ``(signature, resource)`` key of :class:`EwmaThroughput`.

    Attributes
    ----------
    signature, resource : str
        The key.
    samples_per_s : float
        EWMA of the observed throughput, samples/s.
    io_s : float
        EWMA of the observed overhead seconds per shard (start-up and I/O) of shards that ran in a
        warm execution environment; of cold ones while no warm shard has been seen.
    n_observations : int
        Observations folded in.
    cold_io_s : float or None
        EWMA of the overhead of shards that started a fresh environment (None: none seen).
    n_warm : int
        Observations from warm environments folded in.
    fits_per_batch : float
        EWMA of the fits trained together in the measured work (1: one at a time): the batch
        ``samples_per_s`` was measured at (:meth:`EwmaThroughput.predict_batched`).
    """

    signature: str
    resource: str
    samples_per_s: float
    io_s: float
    n_observations: int
    cold_io_s: float | None = None
    n_warm: int = 0
    fits_per_batch: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (one DynamoDB item per key, if stored that way); ``cold_io_s`` left out
        when None (DynamoDB-safe), ``fits_per_batch`` when 1 (the records of unbatched work keep
        their fields)."""
        return {
            k: v
            for k, v in asdict(self).items()
            if v is not None and not (k == "fits_per_batch" and v == 1.0)
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ThroughputEntry:
        """Inverse of :meth:`to_dict`; numbers may be str or Decimal."""
        try:
            return cls(
                signature=str(d["signature"]),
                resource=str(d["resource"]),
                samples_per_s=_num(d["samples_per_s"], "samples_per_s"),
                io_s=_num(d["io_s"], "io_s"),
                n_observations=_int(d["n_observations"], "n_observations"),
                cold_io_s=None if d.get("cold_io_s") is None else _num(d["cold_io_s"], "cold_io_s"),
                n_warm=_int(d.get("n_warm", 0), "n_warm"),
                fits_per_batch=_num(d.get("fits_per_batch", 1.0), "fits_per_batch"),
            )
        except KeyError as exc:
            raise InvalidJobError(f"throughput entry lacks the field {exc}.") from exc


@runtime_checkable
class ThroughputPredictor(Protocol):
    """Anything that learns from shard observations and predicts throughput (samples/s)."""

    def update(self, observation: ShardObservation) -> None:
        """Fold one observation in."""

    def predict(self, signature: str, resource: str) -> float | None:
        """Predicted samples/s of ``signature`` on ``resource``; None without any basis."""


class EwmaThroughput:
    """Exponentially weighted moving average of samples/s per ``(signature, resource)``.

    ``v <- alpha * x + (1 - alpha) * v`` for each new throughput ``x`` of the key; the first
    observation sets ``v = x``. Cold and warm starts feed the same throughput average:
    ``compute_s`` excludes start-up and I/O, so both measure the same speed. The overhead per
    shard (:meth:`predict_io`) does not: a shard that starts a fresh execution environment pays
    the runtime's start and the imports, several seconds on the local stack (7 to 8 s measured
    there for a probe shard, against 0.6 to 1.1 s warm), which the next shards on the same warm
    environments do not. So the warm shards' overhead is averaged on its own (the first warm
    observation replaces an average of cold ones) and predicts the overhead once measured; the
    cold shards' is kept as ``cold_io_s`` and predicts it only until a warm shard is seen.

    Parameters
    ----------
    alpha : float, default :data:`DEFAULT_ALPHA`
        Weight of the newest observation, in ``(0, 1]``.
    threads : float, default 1.0
        Parallelism assumed when scaling between Lambda memory sizes (:func:`scale_throughput`).
    entries : iterable of ThroughputEntry, optional
        State to start from (see :meth:`from_dict`).

    Raises
    ------
    InvalidJobError
        ``alpha`` outside ``(0, 1]`` or ``threads < 1``.
    """

    def __init__(
        self,
        alpha: float = DEFAULT_ALPHA,
        threads: float = 1.0,
        entries: tuple[ThroughputEntry, ...] | list[ThroughputEntry] = (),
    ) -> None:
        if not 0 < alpha <= 1:
            raise InvalidJobError(f"alpha must be in (0, 1], got {alpha!r}.")
        if not threads >= 1:
            raise InvalidJobError(f"threads must be >= 1, got {threads!r}.")
        self.alpha = float(alpha)
        self.threads = float(threads)
        self._entries: dict[tuple[str, str], ThroughputEntry] = {
            (e.signature, e.resource): e for e in entries
        }

    @property
    def entries(self) -> list[ThroughputEntry]:
        """The state, sorted by key."""
        return [self._entries[key] for key in sorted(self._entries)]

    def update(self, observation: ShardObservation) -> None:
        """Fold ``observation`` into the average of its ``(signature, resource)``."""
        key = (observation.signature, observation.resource)
        old = self._entries.get(key)
        x, io, cold = observation.samples_per_s, observation.io_s, observation.cold_start
        if old is None:
            self._entries[key] = ThroughputEntry(
                *key,
                x,
                io,
                1,
                cold_io_s=io if cold else None,
                n_warm=0 if cold else 1,
                fits_per_batch=observation.fits_per_batch,
            )
            return
        a = self.alpha

        def ewma(new: float, previous: float | None) -> float:
            return new if previous is None else a * new + (1 - a) * previous

        cold_io_s: float | None
        if cold:
            # a cold shard's overhead moves the warm average only while there is none
            io_s = old.io_s if old.n_warm else ewma(io, old.io_s)
            cold_io_s = ewma(io, old.cold_io_s)
        else:
            # the first warm shard replaces an average of cold ones
            io_s = ewma(io, old.io_s if old.n_warm else None)
            cold_io_s = old.cold_io_s
        self._entries[key] = ThroughputEntry(
            *key,
            ewma(x, old.samples_per_s),
            io_s,
            old.n_observations + 1,
            cold_io_s=cold_io_s,
            n_warm=old.n_warm + (0 if cold else 1),
            fits_per_batch=ewma(observation.fits_per_batch, old.fits_per_batch),
        )

    def predict(self, signature: str, resource: str) -> float | None:
        """Predicted throughput, samples/s.

        The key's own average when it has one. Otherwise, for a ``'lambda-<MB>'`` resource, the
        average of the same signature at the nearest Lambda memory size (ratio closest to 1; the
        smaller size on a tie), scaled with :func:`scale_throughput`. Otherwise None: the caller
        probes (:func:`fanfit.sched.sizing.plan_shards` without ``seconds_per_unit``).
        """
        entry = self._entries.get((signature, resource))
        if entry is not None:
            return entry.samples_per_s
        target = resource_memory_mb(resource)
        if target is None:
            return None
        known = [
            (abs(math.log(mb / target)), mb, e)
            for (sig, _), e in self._entries.items()
            if sig == signature and (mb := resource_memory_mb(e.resource)) is not None
        ]
        if not known:
            return None
        _, source_mb, source = min(known, key=lambda t: (t[0], t[1]))
        return scale_throughput(source.samples_per_s, source_mb, target, self.threads)

    def predict_batched(self, signature: str, resource: str, fits: float) -> float | None:
        """Predicted throughput, samples/s, of work run ``fits`` fits to a batch.

        :meth:`predict`, scaled by :func:`batched_throughput` from the batch the key's figure was
        measured at (:attr:`ThroughputEntry.fits_per_batch`) to ``fits`` (a key without its own
        entry: unscaled).
        """
        rate = self.predict(signature, resource)
        entry = self._entries.get((signature, resource))
        if rate is None or entry is None:
            return rate
        return batched_throughput(rate, entry.fits_per_batch, fits)

    def predict_io(self, signature: str, resource: str) -> float | None:
        """Average overhead seconds per shard of the key (no scaling: I/O is not CPU-bound): of
        warm shards once one is measured, else of cold ones; or None."""
        entry = self._entries.get((signature, resource))
        return None if entry is None else entry.io_s

    def to_dict(self) -> dict[str, Any]:
        """``{"alpha": float, "threads": float, "entries": [ThroughputEntry.to_dict(), ...]}``."""
        return {
            "alpha": self.alpha,
            "threads": self.threads,
            "entries": [e.to_dict() for e in self.entries],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EwmaThroughput:
        """Inverse of :meth:`to_dict`; numbers may be str or Decimal.

        Raises
        ------
        InvalidJobError
            A field is missing or malformed.
        """
        return cls(
            alpha=_num(d.get("alpha", DEFAULT_ALPHA), "alpha"),
            threads=_num(d.get("threads", 1.0), "threads"),
            entries=[ThroughputEntry.from_dict(e) for e in d.get("entries", [])],
        )
