"""Online dispatch of shards to a CPU (Lambda) or GPU (Batch) queue by Lyapunov drift-plus-penalty.

Proteus (Xiang et al., "Distributed machine learning task scheduling based on Lyapunov optimization")
assigns each arriving task to a resource queue so that the queues stay stable while the time-average
cost is close to the least possible. Time runs in slots ``t = 0, 1, ...``. Queue ``q`` (``'lambda'``,
``'gpu'``) holds a backlog ``Q_q(t)`` in samples and serves ``mu_q`` samples per slot (its
workers' throughput times the slot length); processing a sample on ``q`` costs ``c_q`` USD. The
backlog evolves as (Neely, "Stochastic Network Optimization with Application to Communication and
Queueing Systems", 2010, eq. 2.1)

.. math::

    Q_q(t+1) = \\max(Q_q(t) - \\mu_q, 0) + a_q(t),

where ``a_q(t)`` is what the dispatcher sends to ``q`` in slot ``t``. Every slot the dispatcher
minimises the drift-plus-penalty expression

.. math::

    V \\sum_q c_q a_q(t) + \\sum_q Q_q(t) \\, (a_q(t) - \\mu_q),

which, the service terms not depending on the choice, sends each shard of ``s`` samples to
``argmin_q s (V c_q + Q_q(t))`` (ties to the first queue). ``V >= 0`` trades backlog against cost: a
larger ``V`` lets the cheap queue build a backlog of about ``V (c_exp - c_cheap)`` samples before work
spills to the expensive one. Neely's theorem (Thm. 4.8) bounds the time-average backlog when the
arrival rate leaves a slack ``eps`` (:func:`backlog_bound`), and the time-average cost is within
``B / V`` of the optimum.

The units: ``c_q`` in USD per sample, backlogs in samples, so ``V`` is in samples per (USD per
sample). :func:`queue_specs_from_prices` derives ``mu_q`` and ``c_q`` from throughputs and
:mod:`fanfit.prices`.

A train round with Lambda and GPU workers uses the rule on a round's samples
(:func:`dispatch_fragments`, called by :mod:`fanfit.jobs.train.schedule`): the round's batch is cut
into fragments that arrive one per slot, the slot being the time the queues together serve one
fragment, each queue starting from the backlog measured at the last barrier; :func:`penalty_weight`
sets ``V`` from the backlog the cheaper queue may build. An estimate wave splits the units that
both Lambda and the GPU worker can run by the same rule on backlogs in seconds of work at the
barrier (:func:`split_wave`, called by :func:`fanfit.jobs.estimate.wave.place`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fanfit.errors import InvalidJobError
from fanfit.prices import DEFAULT_PRICES, PriceTable

__all__ = [
    "LyapunovDispatcher",
    "QueueSpec",
    "SimulationResult",
    "FragmentDispatch",
    "UnitSplit",
    "WAVE_BACKLOG_SLACK",
    "WAVE_FRAGMENTS",
    "backlog_bound",
    "dispatch_fragments",
    "penalty_weight",
    "poisson_trace",
    "queue_specs_from_prices",
    "simulate",
    "split_wave",
]


def _nonneg(value: float, name: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidJobError(f"{name} must be a number, got {value!r}.")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise InvalidJobError(
            f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}."
        )
    return number


@dataclass(frozen=True)
class QueueSpec:
    """One resource queue.

    Parameters
    ----------
    name : str
        E.g. ``'lambda'`` or ``'gpu'``.
    service_per_slot : float
        Samples the resource processes per slot (``mu_q``), > 0.
    cost_per_sample_usd : float
        USD per sample processed there (``c_q``), >= 0.

    Raises
    ------
    InvalidJobError
        An empty name or a value out of range.
    """

    name: str
    service_per_slot: float
    cost_per_sample_usd: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidJobError(f"a queue needs a non-empty name, got {self.name!r}.")
        _nonneg(self.service_per_slot, f"queue {self.name}: service_per_slot", positive=True)
        _nonneg(self.cost_per_sample_usd, f"queue {self.name}: cost_per_sample_usd")


def queue_specs_from_prices(
    lambda_memory_mb: int,
    lambda_samples_per_s: float,
    lambda_workers: int,
    gpu_samples_per_s: float,
    gpu_workers: int = 1,
    slot_s: float = 1.0,
    shard_samples: float | None = None,
    prices: PriceTable = DEFAULT_PRICES,
    instance_type: str | None = None,
) -> tuple[QueueSpec, QueueSpec]:
    """The Lambda and Batch GPU queues of a dispatcher, from throughputs and the price table.

    Parameters
    ----------
    lambda_memory_mb : int
        Memory of each Lambda worker, MB.
    lambda_samples_per_s, gpu_samples_per_s : float
        Throughput of one Lambda worker and one GPU worker, samples/s.
    lambda_workers, gpu_workers : int
        Workers serving each queue.
    slot_s : float, default 1
        Slot length, seconds.
    shard_samples : float, optional
        Samples per shard: when given, the Lambda request price per invocation is spread over them.
    prices : PriceTable
    instance_type : str, optional
        Batch instance type (default ``prices.gpu_instance_type``).

    Returns
    -------
    (QueueSpec, QueueSpec)
        ``'lambda'`` with ``mu = workers * samples_per_s * slot_s`` and
        ``c = memory_mb / 1024 * gb_s / samples_per_s`` (+ request / shard_samples);
        ``'gpu'`` with ``c = hourly / 3600 / samples_per_s`` (a busy instance).

    Raises
    ------
    InvalidJobError
        A non-positive value, or an instance type without a price.
    """
    for name, value in (
        ("lambda_memory_mb", lambda_memory_mb),
        ("lambda_samples_per_s", lambda_samples_per_s),
        ("lambda_workers", lambda_workers),
        ("gpu_samples_per_s", gpu_samples_per_s),
        ("gpu_workers", gpu_workers),
        ("slot_s", slot_s),
    ):
        _nonneg(value, name, positive=True)
    per_sample_lambda = prices.lambda_cost_usd(lambda_memory_mb, 1.0 / lambda_samples_per_s, 0)
    if shard_samples is not None:
        per_sample_lambda += prices.lambda_request_usd / _nonneg(
            shard_samples, "shard_samples", positive=True
        )
    per_sample_gpu = prices.gpu_cost_usd(1.0 / gpu_samples_per_s, instance_type)
    return (
        QueueSpec("lambda", lambda_workers * lambda_samples_per_s * slot_s, per_sample_lambda),
        QueueSpec("gpu", gpu_workers * gpu_samples_per_s * slot_s, per_sample_gpu),
    )


class LyapunovDispatcher:
    """Assigns shards to queues by drift-plus-penalty (Proteus; Neely 2010).

    Parameters
    ----------
    queues : sequence of QueueSpec
        At least one, unique names.
    V : float
        Penalty weight >= 0 (samples per USD-per-sample): 0 balances backlogs only; larger values
        favour cheap queues at the price of longer backlogs.
    initial_backlog : mapping of str to float, optional
        ``Q_q(0)`` per queue name, samples (>= 0); queues not named start empty.

    Raises
    ------
    InvalidJobError
        No queues, duplicate names, ``V`` out of range, or an initial backlog for an unknown queue
        or out of range.

    Examples
    --------
    >>> d = LyapunovDispatcher([QueueSpec("lambda", 90, 1e-6), QueueSpec("gpu", 200, 2e-6)], V=1e7)
    >>> d.dispatch(10.0)
    'lambda'
    """

    def __init__(
        self,
        queues: Sequence[QueueSpec],
        V: float,
        initial_backlog: Mapping[str, float] | None = None,
    ) -> None:
        if not queues:
            raise InvalidJobError("a dispatcher needs at least one queue.")
        names = [q.name for q in queues]
        if len(set(names)) != len(names):
            raise InvalidJobError(f"queue names must be unique, got {names}.")
        self.queues = tuple(queues)
        self.V = _nonneg(V, "V")
        self._backlog = np.zeros(len(queues))
        for name, value in (initial_backlog or {}).items():
            if name not in names:
                raise InvalidJobError(f"initial_backlog names {name!r}, not one of {names}.")
            self._backlog[names.index(name)] = _nonneg(value, f"initial backlog of {name}")
        self._weight = np.array([self.V * q.cost_per_sample_usd for q in queues])
        self._service = np.array([q.service_per_slot for q in queues])

    @property
    def backlog(self) -> dict[str, float]:
        """Current backlog per queue, samples."""
        return {q.name: float(b) for q, b in zip(self.queues, self._backlog)}

    def dispatch(self, shard_samples: float) -> str:
        """The queue for one shard given the backlogs at the start of the slot.

        Parameters
        ----------
        shard_samples : float
            Size of the shard, samples (> 0; it scales both terms equally, so it does not change
            the choice).

        Returns
        -------
        str
            ``argmin_q shard_samples * (V c_q + Q_q(t))``; ties go to the first queue.
        """
        _nonneg(shard_samples, "shard_samples", positive=True)
        return self.queues[self._choose()].name

    def _choose(self) -> int:
        return int(np.argmin(self._weight + self._backlog))

    def step(self, shard_samples: Sequence[float]) -> tuple[list[str], np.ndarray, float]:
        """One slot: dispatch its arrivals, then serve and enqueue.

        Parameters
        ----------
        shard_samples : sequence of float
            Sizes of the shards arriving in this slot, samples.

        Returns
        -------
        names : list of str
            The queue of every shard, in order.
        arrivals : numpy.ndarray, shape (n_queues,)
            Samples sent to each queue (``a_q(t)``).
        cost_usd : float
            ``sum_q c_q a_q(t)``.
        """
        i, arrivals, cost = self._step(shard_samples)
        return [self.queues[i].name] * len(shard_samples), arrivals, cost

    def _step(self, shard_samples: Sequence[float]) -> tuple[int, np.ndarray, float]:
        sizes = np.asarray(shard_samples, dtype=float).reshape(-1)
        if sizes.size and not (np.isfinite(sizes).all() and (sizes > 0).all()):
            raise InvalidJobError(f"shard sizes must be finite numbers > 0, got {sizes.tolist()}.")
        # Every shard of the slot sees Q(t), so all go to the same argmin: the exact minimiser of
        # the slot's drift-plus-penalty expression.
        i = self._choose()
        arrivals = np.zeros(len(self.queues))
        arrivals[i] = sizes.sum()
        cost = float(self.queues[i].cost_per_sample_usd * arrivals[i])
        self._backlog = np.maximum(self._backlog - self._service, 0.0) + arrivals
        return i, arrivals, cost


@dataclass(frozen=True)
class SimulationResult:
    """What :func:`simulate` measured.

    Attributes
    ----------
    queue_names : tuple of str
    backlog : numpy.ndarray, shape (n_slots, n_queues)
        Backlog at the start of each slot, samples.
    arrivals : numpy.ndarray, shape (n_slots, n_queues)
        Samples dispatched to each queue in each slot.
    cost_usd : numpy.ndarray, shape (n_slots,)
        Cost of each slot's arrivals, USD.
    """

    queue_names: tuple[str, ...]
    backlog: np.ndarray
    arrivals: np.ndarray
    cost_usd: np.ndarray

    @property
    def time_average_cost_usd(self) -> float:
        """Mean cost per slot, USD."""
        return float(self.cost_usd.mean())

    @property
    def time_average_backlog(self) -> float:
        """Mean over slots of the summed backlog, samples."""
        return float(self.backlog.sum(axis=1).mean())

    @property
    def max_backlog(self) -> dict[str, float]:
        """Largest backlog of each queue, samples."""
        return {n: float(b) for n, b in zip(self.queue_names, self.backlog.max(axis=0))}

    @property
    def share(self) -> dict[str, float]:
        """Fraction of all samples dispatched to each queue."""
        total = self.arrivals.sum()
        return {
            n: float(a / total) if total else 0.0
            for n, a in zip(self.queue_names, self.arrivals.sum(axis=0))
        }


def simulate(
    trace: Sequence[Sequence[float]], queues: Sequence[QueueSpec], V: float
) -> SimulationResult:
    """Run a :class:`LyapunovDispatcher` over an arrival trace.

    Parameters
    ----------
    trace : sequence of sequences of float
        ``trace[t]`` holds the sizes (samples) of the shards arriving in slot ``t``.
    queues : sequence of QueueSpec
    V : float
        Penalty weight (see :class:`LyapunovDispatcher`).

    Returns
    -------
    SimulationResult

    Raises
    ------
    InvalidJobError
        As :class:`LyapunovDispatcher`, or a non-positive shard size.
    """
    dispatcher = LyapunovDispatcher(queues, V)
    n_slots, n_q = len(trace), len(dispatcher.queues)
    backlog = np.zeros((n_slots, n_q))
    arrivals = np.zeros((n_slots, n_q))
    cost = np.zeros(n_slots)
    for t, slot in enumerate(trace):
        backlog[t] = dispatcher._backlog
        _, arrivals[t], cost[t] = dispatcher._step(slot)
    return SimulationResult(tuple(q.name for q in dispatcher.queues), backlog, arrivals, cost)


def poisson_trace(
    n_slots: int, shards_per_slot: float, shard_samples: float, seed: int
) -> list[np.ndarray]:
    """A synthetic arrival trace: Poisson shard counts per slot, fixed shard size.

    Parameters
    ----------
    n_slots : int
    shards_per_slot : float
        Poisson rate of shard arrivals per slot.
    shard_samples : float
        Samples per shard.
    seed : int
        Seed of :func:`numpy.random.default_rng`.

    Returns
    -------
    list of numpy.ndarray
        ``n_slots`` arrays of shard sizes (samples).
    """
    if n_slots < 1:
        raise InvalidJobError(f"n_slots must be >= 1, got {n_slots!r}.")
    _nonneg(shards_per_slot, "shards_per_slot")
    _nonneg(shard_samples, "shard_samples", positive=True)
    counts = np.random.default_rng(seed).poisson(shards_per_slot, size=n_slots)
    return [np.full(int(c), float(shard_samples)) for c in counts]


def backlog_bound(
    queues: Sequence[QueueSpec], V: float, mean_arrival: float, mean_sq_arrival: float
) -> float:
    """Neely's bound on the time-average summed backlog of the drift-plus-penalty dispatcher.

    With i.i.d. slot arrivals ``A(t)`` (samples) of mean ``lambda = mean_arrival`` below the total
    service, the stationary split ``a_q = A * mu_q / sum(mu)`` leaves every queue a slack
    ``eps = min_q mu_q (1 - lambda / sum(mu))``. Neely (2010), Theorem 4.8, then gives

    .. math::

        \\limsup_{T\\to\\infty} \\frac{1}{T}\\sum_t \\sum_q E[Q_q(t)]
            \\le \\frac{B + V (p_{max} - p_{min})}{\\epsilon},\\quad
        B = \\tfrac12 \\left(E[A^2] + \\sum_q \\mu_q^2\\right),

    with ``p_max - p_min = lambda (max_q c_q - min_q c_q)`` the spread of the per-slot cost
    (``sum_q a_q^2 <= A^2`` since the split is a partition of ``A``).

    Parameters
    ----------
    queues : sequence of QueueSpec
    V : float
    mean_arrival, mean_sq_arrival : float
        ``E[A]`` and ``E[A^2]`` of the samples arriving per slot.

    Returns
    -------
    float
        The bound, samples.

    Raises
    ------
    InvalidJobError
        If the load is not below the total service (no slack: no bound).
    """
    mu = np.array([q.service_per_slot for q in queues])
    c = np.array([q.cost_per_sample_usd for q in queues])
    load = mean_arrival / mu.sum()
    if not load < 1:
        raise InvalidJobError(
            f"arrivals {mean_arrival} per slot reach the total service {mu.sum()}."
        )
    eps = float(mu.min() * (1 - load))
    b = 0.5 * (mean_sq_arrival + float((mu**2).sum()))
    return (b + V * mean_arrival * float(c.max() - c.min())) / eps


def penalty_weight(queues: Sequence[QueueSpec], backlog_samples: float) -> float:
    """The ``V`` at which the cheaper queue builds a backlog of about ``backlog_samples`` before
    work spills to the dearer one.

    A shard goes to the dearer queue once ``Q_cheap - Q_dear > V (c_dear - c_cheap)`` (the
    dispatch rule), so ``V = backlog_samples / (max_q c_q - min_q c_q)`` (Neely 2010, sec. 4.9: the
    backlog grows as ``O(V)``).

    Parameters
    ----------
    queues : sequence of QueueSpec
    backlog_samples : float
        The backlog the cost may buy, samples (>= 0).

    Returns
    -------
    float
        ``V`` (samples per USD-per-sample); 0 when every queue costs the same per sample.

    Raises
    ------
    InvalidJobError
        ``backlog_samples`` out of range.
    """
    backlog = _nonneg(backlog_samples, "backlog_samples")
    costs = [q.cost_per_sample_usd for q in queues]
    spread = max(costs) - min(costs) if costs else 0.0
    return backlog / spread if spread > 0 else 0.0


@dataclass(frozen=True)
class FragmentDispatch:
    """What :func:`dispatch_fragments` decided.

    Attributes
    ----------
    queue_names : tuple of str
    samples : tuple of int
        Samples sent to each queue (they sum to the total).
    fragments : tuple of int
        Fragments sent to each queue.
    fragment_samples : tuple of int
        The fragments' sizes, in arrival order.
    assignment : tuple of str
        Each fragment's queue, in arrival order.
    initial_backlog, final_backlog : tuple of float
        Each queue's backlog before the first slot and after the last, samples.
    """

    queue_names: tuple[str, ...]
    samples: tuple[int, ...]
    fragments: tuple[int, ...]
    fragment_samples: tuple[int, ...]
    assignment: tuple[str, ...]
    initial_backlog: tuple[float, ...]
    final_backlog: tuple[float, ...]

    def samples_of(self, name: str) -> int:
        """Samples sent to queue ``name``."""
        return self.samples[self.queue_names.index(name)]


def dispatch_fragments(
    total_samples: int,
    n_fragments: int,
    queues: Sequence[QueueSpec],
    V: float,
    initial_backlog: Mapping[str, float] | None = None,
) -> FragmentDispatch:
    """Split ``total_samples`` between queues by drift-plus-penalty, one fragment per slot.

    The samples are cut into ``n_fragments`` fragments whose sizes differ by at most one (the
    larger first); in slot ``t`` fragment ``t`` arrives and :class:`LyapunovDispatcher` sends it to
    ``argmin_q V c_q + Q_q(t)``, then every queue serves ``mu_q`` and takes its arrivals. With
    ``mu_q`` the samples queue ``q`` serves while all queues together serve one fragment (the
    caller's slot), backlogs stay within about one fragment of each other when ``V = 0``, so each
    queue's share tracks its throughput; ``V > 0`` shifts up to :func:`penalty_weight`'s backlog
    towards the cheaper queue; a queue that starts with a backlog (it finished the last round
    late) gets less, so that its backlog and new samples end even with the others'.

    Parameters
    ----------
    total_samples : int
        Samples to place (>= 0).
    n_fragments : int
        Fragments to cut them into (1 <= n_fragments; at most ``total_samples`` when that is > 0).
    queues : sequence of QueueSpec
    V : float
    initial_backlog : mapping of str to float, optional
        ``Q_q(0)``, samples.

    Returns
    -------
    FragmentDispatch

    Raises
    ------
    InvalidJobError
        Counts out of range, or as :class:`LyapunovDispatcher`.
    """
    if isinstance(total_samples, bool) or not isinstance(total_samples, int | np.integer):
        raise InvalidJobError(f"total_samples must be an integer >= 0, got {total_samples!r}.")
    if total_samples < 0 or isinstance(n_fragments, bool) or not isinstance(n_fragments, int):
        raise InvalidJobError(
            f"need total_samples >= 0 and an integer n_fragments; got {total_samples!r}, "
            f"{n_fragments!r}."
        )
    if not 1 <= n_fragments <= max(int(total_samples), 1):
        raise InvalidJobError(
            f"n_fragments must be in 1..{max(int(total_samples), 1)}, got {n_fragments}."
        )
    dispatcher = LyapunovDispatcher(queues, V, initial_backlog)
    names = tuple(q.name for q in dispatcher.queues)
    start = tuple(float(b) for b in dispatcher._backlog)
    total = int(total_samples)
    sizes = [
        total // n_fragments + (1 if i < total % n_fragments else 0) for i in range(n_fragments)
    ]
    sizes = [s for s in sizes if s > 0]
    samples = [0] * len(names)
    counts = [0] * len(names)
    assignment = []
    for size in sizes:
        i, _, _ = dispatcher._step([float(size)])
        samples[i] += size
        counts[i] += 1
        assignment.append(names[i])
    return FragmentDispatch(
        queue_names=names,
        samples=tuple(samples),
        fragments=tuple(counts),
        fragment_samples=tuple(sizes),
        assignment=tuple(assignment),
        initial_backlog=start,
        final_backlog=tuple(float(b) for b in dispatcher._backlog),
    )


#: Fragments an estimate wave's dual-capable units are cut into for the CPU-GPU dispatch (at most
#: one per unit), as a train round's samples are (:mod:`fanfit.jobs.train.schedule`).
WAVE_FRAGMENTS = 200
#: The share of the wave's time the cheaper queue may fall behind for its price: ``V`` lets it
#: build half this share of the wave's seconds of backlog before work spills to the dearer queue
#: (the dearer one idles meanwhile, so the end moves by about twice that): a split gives at most
#: about 5% of the wave's time for cost, as the default placement objective does.
WAVE_BACKLOG_SLACK = 0.05


@dataclass(frozen=True)
class UnitSplit:
    """What :func:`split_wave` decided for one group of units that both queues can run.

    Attributes
    ----------
    queue_names : tuple of str
        ``('lambda', 'gpu')``.
    units : tuple of int
        Units sent to each queue (they sum to the group's).
    fragments : tuple of int
        Fragments sent to each queue.
    n_fragments : int
        Fragments the units were cut into (0 for no units).
    V : float
        The penalty weight used, seconds per (USD per unit).
    units_per_s : tuple of float
        Each queue's throughput, units/s.
    usd_per_unit : tuple of float
        Each queue's cost per unit, USD.
    backlog_s : tuple of float
        Each queue's backlog before the split, seconds of work.
    finish_s : tuple of float
        Each queue's predicted end, seconds from now: ``backlog_s + units / units_per_s``.
    """

    queue_names: tuple[str, ...]
    units: tuple[int, ...]
    fragments: tuple[int, ...]
    n_fragments: int
    V: float
    units_per_s: tuple[float, ...]
    usd_per_unit: tuple[float, ...]
    backlog_s: tuple[float, ...]
    finish_s: tuple[float, ...]

    def units_of(self, name: str) -> int:
        """Units sent to queue ``name``."""
        return self.units[self.queue_names.index(name)]


def split_wave(
    n_units: int,
    units_per_s: Mapping[str, float],
    usd_per_s: Mapping[str, float],
    backlog_s: Mapping[str, float],
    *,
    slack: float = WAVE_BACKLOG_SLACK,
    max_fragments: int = WAVE_FRAGMENTS,
) -> UnitSplit:
    """Split a wave's units that both the Lambda queue and the GPU worker can run (Proteus).

    Drift-plus-penalty on the queues' backlogs in seconds of work:

    - queue ``q`` (``'lambda'``, ``'gpu'``) serves ``v_q = units_per_s[q]`` units/s (its workers
      together) and costs ``c_q = usd_per_s[q] / v_q`` USD per unit (a busy queue);
    - the ``n`` units are cut into ``F = min(n, max_fragments)`` fragments whose sizes differ by at
      most one; they arrive one per slot, the slot being the ``s / (v_lambda + v_gpu)`` seconds
      both queues together take to serve a fragment of ``s`` units;
    - ``T_q(0) = backlog_s[q]``, the seconds of work queue ``q`` holds at the barrier (its start-up
      and the work already sent to it); a fragment of ``s`` units sent to ``q`` adds ``s / v_q``
      seconds, and every queue serves the slot's seconds: ``T_q(t+1) = max(T_q(t) - slot, 0) +
      a_q(t) / v_q`` (Neely 2010, eq. 2.1, in seconds);
    - each fragment goes to ``argmin_q V c_q + T_q(t)`` (the first queue on a tie). This is the
      drift-plus-penalty choice ``argmin_q V c_q s + sum_p w_p Q_p a_p`` for the weighted
      quadratic Lyapunov function ``L = 1/2 sum_q Q_q^2 / v_q`` of the backlogs in units
      ``Q_q = v_q T_q``: weighting each queue by its service time makes the backlogs, and so the
      queues' ends, even in seconds rather than in units (with the unweighted ``1/2 sum Q_q^2`` of
      :class:`LyapunovDispatcher`, a slower queue would end later by its backlog's units at the
      lower rate);
    - ``V = b / (max_q c_q - min_q c_q)`` with ``b = slack / 2 x n / (v_lambda + v_gpu)``: the
      cheaper queue may fall ``b`` seconds behind before work spills to the dearer one (as
      :func:`penalty_weight`, in seconds); 0 when both cost the same per unit.

    With ``V = 0`` both queues end within a fragment's time of each other; a queue whose backlog
    alone exceeds the other's whole run gets no units.

    Parameters
    ----------
    n_units : int
        Units to split (>= 0).
    units_per_s, usd_per_s, backlog_s : mapping of str to float
        Per queue ``'lambda'`` and ``'gpu'``: throughput (units/s, > 0), price of the queue's
        workers (USD/s, >= 0) and backlog (seconds, >= 0).
    slack : float
        Fraction of the wave's time the cost may buy (>= 0).
    max_fragments : int
        Most fragments (>= 1).

    Returns
    -------
    UnitSplit

    Raises
    ------
    InvalidJobError
        A count or value out of range, or a queue missing from a mapping.
    """
    if isinstance(n_units, bool) or not isinstance(n_units, int | np.integer) or n_units < 0:
        raise InvalidJobError(f"n_units must be an integer >= 0, got {n_units!r}.")
    if isinstance(max_fragments, bool) or not isinstance(max_fragments, int) or max_fragments < 1:
        raise InvalidJobError(f"max_fragments must be an integer >= 1, got {max_fragments!r}.")
    names = ("lambda", "gpu")
    for what, mapping in (("units_per_s", units_per_s), ("usd_per_s", usd_per_s),
                          ("backlog_s", backlog_s)):  # fmt: skip
        missing = [q for q in names if q not in mapping]
        if missing:
            raise InvalidJobError(f"{what} has no figure for queue(s) {missing}.")
    v = np.array([_nonneg(units_per_s[q], f"units_per_s of {q}", positive=True) for q in names])
    cost = np.array([_nonneg(usd_per_s[q], f"usd_per_s of {q}") for q in names]) / v
    start = np.array([_nonneg(backlog_s[q], f"backlog_s of {q}") for q in names])
    _nonneg(slack, "slack")
    n = int(n_units)
    n_fragments = min(n, max_fragments)
    spread = float(cost.max() - cost.min())
    V = slack / 2 * n / float(v.sum()) / spread if spread > 0 else 0.0
    units, fragments = [0, 0], [0, 0]
    backlog = start.copy()
    weight = V * cost
    for k in range(n_fragments):
        size = n // n_fragments + (1 if k < n % n_fragments else 0)
        i = int(np.argmin(weight + backlog))
        units[i] += size
        fragments[i] += 1
        arrival = np.zeros(len(names))
        arrival[i] = size / v[i]
        backlog = np.maximum(backlog - size / float(v.sum()), 0.0) + arrival
    return UnitSplit(
        queue_names=names,
        units=(units[0], units[1]),
        fragments=(fragments[0], fragments[1]),
        n_fragments=n_fragments,
        V=V,
        units_per_s=(float(v[0]), float(v[1])),
        usd_per_unit=(float(cost[0]), float(cost[1])),
        backlog_s=(float(start[0]), float(start[1])),
        finish_s=tuple(float(start[i] + units[i] / v[i]) for i in range(len(names))),
    )
