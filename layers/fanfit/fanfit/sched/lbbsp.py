"""LB-BSP: per-worker batch sizes that equalise the workers' predicted round times.

In bulk synchronous parallel training every round waits for its slowest worker. LB-BSP (Chen, Wang,
Zhou, Chen, Wang and Ma, "Accelerating Distributed Learning in Non-Dedicated Environments", IEEE
Transactions on Cloud Computing, 2021) keeps the global batch ``B`` fixed (so the optimisation is
unchanged) and gives worker ``i`` a share proportional to its predicted throughput ``v_i``:

.. math::

    b_i \\approx B \\, v_i / \\textstyle\\sum_j v_j, \\qquad \\sum_i b_i = B,

so that the workers' compute times ``b_i / v_i`` are equal. A worker's batch is also capped by its
memory. fanfit allocates the real-valued shares by water-filling (workers at a bound keep it, the
rest share the remainder in proportion to ``v``), then rounds to integers with the largest-remainder
method, which keeps the sum exactly ``B`` and every batch within one sample of its share.

Every worker gets at least ``min_batch`` samples (default 1): a worker in the round's Map that
computes on nothing still pays its start-up and its read of the model. Set ``min_batch=0`` to let
the slowest workers sit a round out.

Interference. A worker's speed can change in a step (a co-tenant takes its CPU). The predicted
throughput is an EWMA (:class:`fanfit.sched.throughput.EwmaThroughput`, weight 0.3), which would
take about five rounds to cross most of such a step; :func:`is_level_shift` tells a step from noise
(the newest measurement off the estimate by more than :data:`SHIFT_RATIO` either way), and the train
scheduler then restarts the worker's estimate from the newest measurement, so the next round's
batches follow at once. :func:`rounds_to_follow` measures how fast they do.

A per-round fixed cost. A worker's round also costs it time that does not grow with its batch
(drawing the round's rows, copying the model, allocating a gradient the size of the model), so its
time is affine in its batch, ``t_i(b) = a_i + b / v_i``, not proportional, and its samples/s falls
as its batch shrinks. With ``a_i > 0`` proportional batches do not equalise the times; the batches
that do (LB-BSP's aim: the workers reach the barrier together; Chen, Weng, Wang, Li and Li,
"Semi-Dynamic Load Balancing: Efficient Distributed Learning in Non-Dedicated Environments", ACM
SoCC 2020, doi:10.1145/3419111.3421299) are ``b_i = v_i (T - a_i)``, with ``T`` the common finish
time fixed by ``sum_i b_i = B`` (:func:`lbbsp_batches` with ``fixed_s``). The affine model, its
closed form and its estimator (:class:`RoundCostModel`: exponentially weighted least squares of
each worker's compute seconds on its batch, restarted on a level shift, with a pooled prior for a
worker whose batches have not varied enough to tell ``a_i`` from ``v_i``) are fanfit's, not the
paper's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fanfit.errors import InvalidJobError
from fanfit.split import check_count

__all__ = [
    "FORGET",
    "MIN_SPREAD",
    "SHIFT_RATIO",
    "RoundCostFit",
    "RoundCostModel",
    "finish_time",
    "idle_fraction",
    "is_level_shift",
    "lbbsp_batches",
    "round_times",
    "rounds_to_follow",
]

#: A worker's newest throughput that differs from its estimate by more than this factor (faster or
#: slower) is a level shift, not noise: smaller round-to-round changes (shared cores, page cache)
#: are left to the EWMA, while a worker that loses a third of its CPU or more is followed at once.
SHIFT_RATIO = 1.5
#: Weight a worker's older rounds keep in its round-cost fit for each newer round (the EWMA's
#: ``1 - alpha``, :data:`fanfit.sched.throughput.DEFAULT_ALPHA` = 0.3).
FORGET = 0.7
#: Smallest relative spread (weighted standard deviation over mean) of a worker's batches for its
#: own least-squares fit to tell its fixed cost from its speed; below it the pooled prior is used.
MIN_SPREAD = 0.2


def lbbsp_batches(
    global_batch: int,
    throughputs: ArrayLike,
    max_batch: ArrayLike | None = None,
    min_batch: int = 1,
    fixed_s: ArrayLike | None = None,
) -> np.ndarray:
    """LB-BSP batch sizes: equal predicted finish times, within bounds, summing to ``global_batch``.

    Parameters
    ----------
    global_batch : int
        ``B``, samples per round (>= 1).
    throughputs : array_like of float, shape (n_workers,)
        Predicted throughput ``v_i`` of each worker, samples/s (finite, > 0).
    max_batch : array_like of int, shape (n_workers,), optional
        Largest batch each worker can hold (its memory bound), samples. None: unbounded.
    min_batch : int, default 1
        Smallest batch of any worker (>= 0).
    fixed_s : array_like of float, shape (n_workers,), optional
        Each worker's per-round fixed cost ``a_i``, seconds (finite, >= 0): its round takes
        ``a_i + b_i / v_i``. Given, the batches are ``clip(v_i (T - a_i), min_batch,
        max_batch_i)`` with the one finish time ``T`` (:func:`finish_time`) that makes them sum to
        ``B``: a worker whose ``a_i`` is at or past ``T`` gets ``min_batch``. None (or all zero):
        ``a_i = 0``, the proportional split below.

    Returns
    -------
    numpy.ndarray of int64, shape (n_workers,)
        ``b`` with ``b.sum() == B`` and ``min_batch <= b_i <= max_batch_i``. With ``fixed_s``,
        each ``b_i`` within one sample of ``clip(v_i (T - a_i), ...)``, rounded as below. Where no bound binds,
        ``|b_i - B v_i / sum(v)| < 1``. Otherwise ``b`` rounds the water-filling shares
        ``clip(lambda v_i, min_batch, max_batch_i)`` (one ``lambda`` for all, chosen so they sum
        to ``B``): the excess over a bound goes to the unsaturated workers in proportion to ``v``.
        Remainders are broken towards the larger fraction, then the lower index: the result is a
        function of the arguments only.

    Raises
    ------
    InvalidJobError
        A throughput not finite and positive; a fixed cost not finite and >= 0; a bound below
        ``min_batch``; ``B < n_workers * min_batch``; or ``sum(max_batch) < B``.
    """
    v = np.asarray(throughputs, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v) & (v > 0)):
        raise InvalidJobError(
            f"throughputs must be a non-empty 1-d array of positive samples/s, got {v!r}."
        )
    n = v.size
    check_count("min_batch", min_batch, 0)
    check_count("global_batch", global_batch, max(1, n * min_batch))
    lo: np.ndarray = np.full(n, float(min_batch))
    hi: np.ndarray
    if max_batch is None:
        hi = np.full(n, np.inf)
    else:
        hi = np.asarray(max_batch, dtype=np.float64)
        if hi.shape != (n,) or not np.all(hi == np.floor(hi)) or np.any(hi < min_batch):
            raise InvalidJobError(
                f"max_batch must be {n} integers of at least min_batch={min_batch}, got {max_batch!r}."
            )
        if hi.sum() < global_batch:
            raise InvalidJobError(
                f"The workers' memory bounds hold {int(hi.sum())} samples, fewer than the global "
                f"batch {global_batch}; lower the global batch or add workers."
            )
    if fixed_s is None:
        share = _water_fill(float(global_batch), v, lo, hi)
    else:
        a = _fixed_costs(fixed_s, n)
        share = np.clip(v * (finish_time(global_batch, a, v, lo, hi) - a), lo, hi)
    return _largest_remainder(share, global_batch, lo, hi)


def _fixed_costs(fixed_s: ArrayLike, n: int) -> np.ndarray:
    a = np.asarray(fixed_s, dtype=np.float64)
    if a.shape != (n,) or not np.all(np.isfinite(a) & (a >= 0)):
        raise InvalidJobError(
            f"fixed_s must be {n} finite per-round fixed costs >= 0 (seconds), got {fixed_s!r}."
        )
    return a


def finish_time(
    total: float, fixed_s: ArrayLike, throughputs: ArrayLike, lo: ArrayLike, hi: ArrayLike
) -> float:
    """The common finish time ``T`` of LB-BSP with per-round fixed costs, in closed form.

    ``f(T) = sum_i clip(v_i (T - a_i), lo_i, hi_i)`` is continuous, piecewise linear and
    non-decreasing in ``T``, with breakpoints ``a_i + lo_i / v_i`` and ``a_i + hi_i / v_i``. The
    breakpoints are sorted, the segment where ``f`` reaches ``total`` is found, and on it, with
    ``F`` the workers strictly inside their bounds and the others at their bound ``c_j``,

    .. math::

        T = \\frac{\\text{total} - \\sum_{j \\notin F} c_j + \\sum_{i \\in F} v_i a_i}
                 {\\sum_{i \\in F} v_i}

    (with no bound binding, ``T = (B + sum_i v_i a_i) / sum_i v_i``; with ``a = 0`` it is
    ``B / sum v``, the proportional split). Equal finish times are LB-BSP's aim (Chen et al., SoCC
    2020); the affine round time ``a_i + b / v_i`` and this closed form are fanfit's.

    Parameters
    ----------
    total : float
        Samples to share, ``sum(lo) <= total <= sum(hi)``.
    fixed_s, throughputs, lo, hi : array_like of float, shape (n_workers,)
        ``a_i`` (seconds, >= 0), ``v_i`` (samples/s, > 0), and each worker's bounds (samples;
        ``hi`` may be ``inf``).

    Returns
    -------
    float
        ``T``, seconds: the smallest with ``f(T) = total`` (the lowest breakpoint when ``total ==
        sum(lo)``).
    """
    a, v = np.asarray(fixed_s, dtype=np.float64), np.asarray(throughputs, dtype=np.float64)
    lo_, hi_ = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    t_lo, t_hi = a + lo_ / v, a + hi_ / v
    points = np.unique(np.concatenate([t_lo, t_hi[np.isfinite(t_hi)]]))

    def filled(t: float) -> float:
        return float(np.clip(v * (t - a), lo_, hi_).sum())

    if total <= filled(float(points[0])):
        return float(points[0])
    below = float(points[0])
    for p in points[1:]:
        if filled(float(p)) >= total:
            break
        below = float(p)
    free = (t_lo <= below) & (t_hi > below)  # inside their bounds just above ``below``
    if not free.any():  # f is flat from ``below`` on: total == f(below) but for round-off
        return below
    at_bound = np.where(t_hi <= below, hi_, lo_)
    rest = total - float(at_bound[~free].sum())
    return float((rest + (v[free] * a[free]).sum()) / v[free].sum())


def _water_fill(total: float, v: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Real shares ``clip(lam * v, lo, hi)`` summing to ``total`` (``sum(lo) <= total <= sum(hi)``).

    Each pass shares what the free workers may take in proportion to ``v``; if the upper
    violations outweigh the lower ones the true ``lam`` is larger, so the workers over their upper
    bound stay there in the solution and are fixed; otherwise those under their lower bound are.
    At most ``n`` passes.
    """
    x = np.empty_like(v)
    free = np.ones(v.size, dtype=bool)
    while True:
        rest = total - x[~free].sum()
        x[free] = rest * v[free] / v[free].sum()
        over = free & (x > hi)
        under = free & (x < lo)
        if not over.any() and not under.any():
            return x
        if (x - hi)[over].sum() >= (lo - x)[under].sum():
            x[over], free[over] = hi[over], False
        else:
            x[under], free[under] = lo[under], False
        if not free.any():
            return x


def _largest_remainder(share: np.ndarray, total: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Integers within ``[lo, hi]`` summing to ``total``, each within one of ``share``."""
    b = np.clip(np.floor(share), lo, hi).astype(np.int64)
    frac = share - b
    order = np.lexsort((np.arange(share.size), -frac))  # larger fraction first, then lower index
    short = total - int(b.sum())
    if short > 0:
        order = order[b[order] < hi[order]]
        b[order[:short]] += 1
    elif short < 0:  # only from float round-off in share: take from the smallest fractions
        order = order[::-1]
        order = order[b[order] > lo[order]]
        b[order[:-short]] -= 1
    return b


def round_times(batches: ArrayLike, throughputs: ArrayLike) -> np.ndarray:
    """Predicted compute seconds of each worker, ``b_i / v_i``.

    Parameters
    ----------
    batches : array_like of int, shape (n_workers,)
        Samples per worker.
    throughputs : array_like of float, shape (n_workers,)
        Samples/s per worker.

    Returns
    -------
    numpy.ndarray of float64, shape (n_workers,)
        Seconds.
    """
    return np.asarray(batches, dtype=np.float64) / np.asarray(throughputs, dtype=np.float64)


def idle_fraction(times: ArrayLike) -> float:
    """Share of the workers' time a round's barrier leaves idle: ``1 - mean(t) / max(t)``.

    Parameters
    ----------
    times : array_like of float, shape (n_workers,)
        Seconds each worker computed in the round (measured, or :func:`round_times`).

    Returns
    -------
    float
        In ``[0, 1)``; 0 when all workers finish together (LB-BSP's aim; Chen et al. 2021).

    Raises
    ------
    InvalidJobError
        Empty, negative or non-finite times, or all zero.
    """
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t) & (t >= 0)) or t.max() == 0:
        raise InvalidJobError(f"times must be non-negative seconds, not all zero; got {t!r}.")
    if t.min() == t.max():
        return 0.0
    return max(0.0, float(1.0 - t.mean() / t.max()))  # round-off can push mean over max


def is_level_shift(estimate: float | None, observed: float, ratio: float = SHIFT_RATIO) -> bool:
    """Whether a worker's newest throughput is a new level rather than noise around ``estimate``.

    Parameters
    ----------
    estimate : float or None
        The predicted throughput before this observation, samples/s (None: no estimate yet).
    observed : float
        The newest measured throughput, samples/s (> 0).
    ratio : float, default :data:`SHIFT_RATIO`
        Factor beyond which the two differ in level (> 1).

    Returns
    -------
    bool
        ``observed > ratio * estimate`` or ``observed < estimate / ratio``; False without an
        estimate.

    Raises
    ------
    InvalidJobError
        ``ratio <= 1``, or ``observed`` or ``estimate`` not finite and positive.
    """
    if not ratio > 1:
        raise InvalidJobError(f"ratio must be > 1, got {ratio!r}.")
    if not (np.isfinite(observed) and observed > 0):
        raise InvalidJobError(
            f"observed must be a positive throughput (samples/s), got {observed!r}."
        )
    if estimate is None:
        return False
    if not (np.isfinite(estimate) and estimate > 0):
        raise InvalidJobError(
            f"estimate must be a positive throughput (samples/s), got {estimate!r}."
        )
    return bool(observed > ratio * estimate or observed < estimate / ratio)


def rounds_to_follow(
    batch_shares: ArrayLike,
    target_share: float | ArrayLike,
    from_round: int,
    tolerance: float = 0.1,
) -> int | None:
    """Rounds until a worker's batch share comes within ``tolerance`` of its new throughput share.

    Parameters
    ----------
    batch_shares : array_like of float, shape (n_rounds,)
        The worker's ``b_i / B`` in rounds 0, 1, ...
    target_share : float or array_like of float, shape (n_rounds,)
        Its throughput share after the change, ``v_i / sum_j v_j`` (in ``(0, 1]``): one share, or
        the share measured in each round (round ``r``'s batch share is then compared with round
        ``r``'s throughput share: the two are equal exactly when the workers' compute times in
        that round are equal, which is the comparison to make when a worker's samples/s depends
        on its batch; only the rounds from ``from_round`` on need be in ``(0, 1]``).
    from_round : int
        The first round run at the new speed (the interference round ``k``). Its batches were set
        before anything was measured at the new speed, so the soonest a batch can follow is
        round ``k + 1``: 1 round.
    tolerance : float, default 0.1
        Relative tolerance: ``|share - target| <= tolerance * target``.

    Returns
    -------
    int or None
        ``r - k`` for the first round ``r >= k`` within the tolerance, None if no round is.

    Raises
    ------
    InvalidJobError
        ``target_share`` outside ``(0, 1]``, ``tolerance`` negative, ``from_round`` outside the
        rounds given, or shares not 1-d.
    """
    shares = np.asarray(batch_shares, dtype=np.float64)
    if shares.ndim != 1:
        raise InvalidJobError(
            f"batch_shares must be one share per round, got shape {shares.shape}."
        )
    if np.shape(target_share) not in ((), shares.shape):
        raise InvalidJobError(
            f"target_share must be one share or one per round ({shares.size}), "
            f"got {target_share!r}."
        )
    target = np.broadcast_to(np.asarray(target_share, dtype=np.float64), shares.shape)
    if not tolerance >= 0:
        raise InvalidJobError(f"tolerance must be >= 0, got {tolerance!r}.")
    check_count("from_round", from_round, 0)
    if from_round >= shares.size:
        raise InvalidJobError(
            f"from_round={from_round} is past the {shares.size} rounds of batch_shares."
        )
    after = target[from_round:]
    if not np.all((after > 0) & (after <= 1)):
        raise InvalidJobError(f"target_share must be in (0, 1], got {target_share!r}.")
    close = np.abs(shares[from_round:] - after) <= tolerance * after
    hits = np.flatnonzero(close)
    return int(hits[0]) if hits.size else None


@dataclass(frozen=True)
class RoundCostFit:
    """One worker's exponentially weighted least-squares fit of its round time on its batch.

    The sufficient statistics of the weighted regression ``t = a + b / v`` over the worker's
    rounds ``(b_k, t_k)``, each older round's weight multiplied by ``forget`` per newer round:
    ``w = sum w_k``, ``wb = sum w_k b_k``, ``wt = sum w_k t_k``, ``wbb = sum w_k b_k^2``,
    ``wbt = sum w_k b_k t_k`` (recursive least squares with exponential forgetting, in its
    sufficient-statistics form; fanfit's choice of estimator).

    Attributes
    ----------
    w, wb, wt, wbb, wbt : float
        The weighted sums (samples, seconds).
    n : int
        Rounds folded in since the fit (re)started.
    """

    w: float = 0.0
    wb: float = 0.0
    wt: float = 0.0
    wbb: float = 0.0
    wbt: float = 0.0
    n: int = 0

    def add(self, batch: float, seconds: float, forget: float = FORGET) -> RoundCostFit:
        """The fit with round ``(batch, seconds)`` folded in, older rounds weighted by ``forget``.

        Raises
        ------
        InvalidJobError
            ``batch`` or ``seconds`` not finite and positive, or ``forget`` outside ``(0, 1]``.
        """
        if not (np.isfinite(batch) and batch > 0 and np.isfinite(seconds) and seconds > 0):
            raise InvalidJobError(
                f"A round's batch and compute seconds must be positive, got {batch!r} samples "
                f"in {seconds!r} s."
            )
        if not 0 < forget <= 1:
            raise InvalidJobError(f"forget must be in (0, 1], got {forget!r}.")
        b, t, f = float(batch), float(seconds), float(forget)
        return RoundCostFit(
            f * self.w + 1.0,
            f * self.wb + b,
            f * self.wt + t,
            f * self.wbb + b * b,
            f * self.wbt + b * t,
            self.n + 1,
        )

    @property
    def identified(self) -> bool:
        """Whether the worker's own rounds tell ``a`` from ``v``: two rounds or more, batches
        spread by at least :data:`MIN_SPREAD` of their mean, and time rising with the batch."""
        if self.n < 2:
            return False
        mb = self.wb / self.w
        var = max(self.wbb / self.w - mb * mb, 0.0)
        return var >= (MIN_SPREAD * mb) ** 2 and self._slope(mb, var) > 0

    def _slope(self, mb: float, var: float) -> float:
        return (self.wbt / self.w - mb * self.wt / self.w) / var

    def fit(self, fixed_samples: float = 0.0) -> tuple[float, float]:
        """``(a, v)``: fixed seconds per round and samples/s.

        When :attr:`identified`, the weighted least-squares line ``t = a + b / v`` (its intercept
        floored at 0, the slope then refitted through the origin). Otherwise the worker's own
        rounds cannot split the time, and ``a`` is taken as ``fixed_samples / v`` (its fixed cost
        in samples, pooled from the workers that can: :class:`RoundCostModel`), with ``v`` such
        that the line passes through the worker's weighted mean round, ``v = (k + mean b) / mean
        t``.

        Parameters
        ----------
        fixed_samples : float, default 0
            ``k = a v``, the fixed cost in samples of work (>= 0).

        Raises
        ------
        InvalidJobError
            No round folded in, or ``fixed_samples`` negative or not finite.
        """
        if self.n < 1:
            raise InvalidJobError("A round-cost fit needs at least one round.")
        if not (np.isfinite(fixed_samples) and fixed_samples >= 0):
            raise InvalidJobError(f"fixed_samples must be >= 0, got {fixed_samples!r}.")
        mb, mt = self.wb / self.w, self.wt / self.w
        if self.identified:
            slope = self._slope(mb, max(self.wbb / self.w - mb * mb, 0.0))
            a = mt - slope * mb
            if a >= 0:
                return a, 1.0 / slope
            return 0.0, self.wbb / self.wbt
        k = float(fixed_samples)
        v = (k + mb) / mt
        return k / v, v

    def seconds(self, batch: float, fixed_samples: float = 0.0) -> float:
        """Predicted compute seconds of a round of ``batch`` samples, ``a + batch / v``."""
        a, v = self.fit(fixed_samples)
        return a + float(batch) / v

    def to_dict(self) -> dict[str, float]:
        """The sums and ``n``, JSON-ready."""
        return {"w": self.w, "wb": self.wb, "wt": self.wt, "wbb": self.wbb, "wbt": self.wbt,
                "n": self.n}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RoundCostFit:
        """Inverse of :meth:`to_dict`.

        Raises
        ------
        InvalidJobError
            A field missing or not a number.
        """
        try:
            sums = [float(d[k]) for k in ("w", "wb", "wt", "wbb", "wbt")]
            return cls(sums[0], sums[1], sums[2], sums[3], sums[4], int(d["n"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidJobError(f"Malformed round-cost fit {d!r}: {exc}.") from exc


@dataclass
class RoundCostModel:
    """Per-worker round-cost fits of one job: ``t_i(b) = a_i + b / v_i``, for :func:`lbbsp_batches`.

    :meth:`observe` folds a worker's measured round in (:meth:`RoundCostFit.add`), or, when its
    samples/s is off the fit's prediction for that batch by more than :data:`SHIFT_RATIO`
    (:func:`is_level_shift`: a co-tenant took or gave back CPU), restarts its fit from that round,
    so the next round is sized from the new level. A restarted worker has one round, which cannot
    split its time into ``a_i`` and ``v_i``; it borrows the job's fixed cost in samples,
    ``fixed_samples = median_i a_i v_i`` over the workers whose own fit is identified (the fixed
    work and the per-sample work run on the same CPU, so a CPU cut scales both: ``a_i v_i`` stays
    the same). With its second round at the new level (a different batch) its own fit takes over.
    The pooled prior is fanfit's.

    Attributes
    ----------
    fits : dict of int to RoundCostFit
        Worker index to its fit.
    fixed_samples : float
        The pooled ``k``, samples (0 until a worker's fit is identified).
    """

    fits: dict[int, RoundCostFit] = field(default_factory=dict)
    fixed_samples: float = 0.0

    def observe(self, worker: int, batch: float, seconds: float) -> bool:
        """Fold worker ``worker``'s round (``batch`` samples in ``seconds`` of compute) in.

        Returns
        -------
        bool
            True when the round was a level shift and the worker's fit restarted from it.

        Raises
        ------
        InvalidJobError
            ``batch`` or ``seconds`` not positive.
        """
        old = self.fits.get(worker)
        shift = False
        if old is not None:
            predicted = old.seconds(batch, self.fixed_samples)
            shift = is_level_shift(batch / predicted, batch / seconds) if seconds > 0 else False
        base = RoundCostFit() if old is None or shift else old
        self.fits[worker] = base.add(batch, seconds)
        return shift

    def pool(self) -> float:
        """Update and return :attr:`fixed_samples` from the identified fits (kept when none is)."""
        ks = [a * v for a, v in (f.fit() for f in self.fits.values() if f.identified)]
        if ks:
            self.fixed_samples = float(np.median(ks))
        return self.fixed_samples

    def costs(self, n_workers: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(a, v)``, each of shape (n_workers,): fixed seconds and samples/s of every worker;
        None while a worker has no round yet."""
        if any(i not in self.fits for i in range(n_workers)):
            return None
        pairs = [self.fits[i].fit(self.fixed_samples) for i in range(n_workers)]
        return (
            np.array([p[0] for p in pairs], dtype=np.float64),
            np.array([p[1] for p in pairs], dtype=np.float64),
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"fixed_samples": float, "fits": {"<worker>": RoundCostFit.to_dict(), ...}}``."""
        return {
            "fixed_samples": self.fixed_samples,
            "fits": {str(i): f.to_dict() for i, f in sorted(self.fits.items())},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> RoundCostModel:
        """Inverse of :meth:`to_dict`; None or ``{}`` is the empty model.

        Raises
        ------
        InvalidJobError
            A malformed fit or worker index.
        """
        if not d:
            return cls()
        try:
            fits = {int(i): RoundCostFit.from_dict(f) for i, f in dict(d["fits"]).items()}
            return cls(fits=fits, fixed_samples=float(d.get("fixed_samples", 0.0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidJobError(f"Malformed round-cost model: {exc}.") from exc
