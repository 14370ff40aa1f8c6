"""Shard sizing for estimate jobs from predicted seconds per unit.

A stage of cross-fitting has ``n_units`` independent ``(repetition, fold, learner)`` fits. One shard
(a Lambda invocation) pays a start-up overhead ``s`` (cold start and reading the data) and then fits
its units in turn, ``t`` seconds each. With ``S`` shards of at most ``u = ceil(n_units / S)`` units
(:func:`fanfit.sched.shards.deal` makes shard sizes differ by at most one) and a concurrency cap
``C = min(account concurrency, job cap)``, the stage runs in ``ceil(S / C)`` waves, so its makespan is

.. math::

    T(u) = \\lceil S / \\min(S, C) \\rceil \\, (s + u\\,t), \\qquad S = \\lceil n / u \\rceil.

:func:`plan_shards` minimises :math:`T` over ``u`` subject to ``s + u t <= safety * 900 s`` (the Lambda
timeout), and among plans within ``makespan_slack`` of the optimum takes the one with the fewest
shards: fewer invocations pay fewer start-ups, so each invocation runs long enough to amortise its
own. DoubleML-Serverless's two fixed layouts (Kurz 2021, ``n_lambdas_cv='n_folds * n_rep'`` and
``'n_rep'``: one invocation per fold, repetition and learner; one per repetition and learner) are
the policies ``'per-fold'`` and ``'per-repetition'``. Without a prediction, the ``'auto'`` policy
plans a probe wave of single-unit shards; the caller measures it and plans the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal, TypeVar

import numpy as np

from fanfit.errors import InvalidJobError
from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY, deal

__all__ = [
    "DEFAULT_PROBE_SHARDS",
    "DEFAULT_SAFETY",
    "DEFAULT_STARTUP_S",
    "LAMBDA_TIMEOUT_S",
    "POLICIES",
    "ShardingDecision",
    "plan_shards",
    "split_units",
]

T = TypeVar("T")

Policy = Literal["auto", "per-fold", "per-repetition"]
#: Sizing policies: fanfit's own and DoubleML-Serverless's two (Kurz 2021).
POLICIES: tuple[str, ...] = ("auto", "per-fold", "per-repetition")
#: Lambda's maximum timeout, seconds.
LAMBDA_TIMEOUT_S = 900.0
#: Largest fraction of the timeout a shard may be predicted to take.
DEFAULT_SAFETY = 0.5
#: Start-up overhead assumed per invocation when the caller has no measurement, seconds.
DEFAULT_STARTUP_S = 2.0
#: Single-unit shards in a probe wave.
DEFAULT_PROBE_SHARDS = 4


@dataclass(frozen=True)
class ShardingDecision:
    """How a stage is cut into shards, and what the cut was based on.

    Attributes
    ----------
    policy : str
        ``'auto'``, ``'per-fold'`` or ``'per-repetition'``.
    units_per_shard : int
        Most units in one shard (shards hold ``units_per_shard`` or one fewer).
    n_shards : int
        Shards to run now. For a probe, only the probe's shards (``n_shards`` units); the other
        ``n_units - n_shards`` are planned after it.
    max_concurrency : int
        The Map's ``MaxConcurrency``: ``min(n_shards, account_concurrency, job_concurrency)``.
    predicted_makespan_s : float or None
        Predicted seconds for the shards to run now; None without a prediction.
    probe : bool
        True for a probe wave.
    n_units, seconds_per_unit, startup_s, account_concurrency, job_concurrency, timeout_s,
    safety, n_folds, makespan_slack
        The inputs, as given to :func:`plan_shards`.
    """

    policy: str
    units_per_shard: int
    n_shards: int
    max_concurrency: int
    predicted_makespan_s: float | None
    probe: bool
    n_units: int
    seconds_per_unit: float | None
    startup_s: float
    account_concurrency: int
    job_concurrency: int | None
    timeout_s: float
    safety: float
    n_folds: int | None
    makespan_slack: float

    def to_dict(self) -> dict[str, Any]:
        """Flat dict of str, int, float and bool; None-valued fields are left out (DynamoDB-safe)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ShardingDecision:
        """Inverse of :meth:`to_dict` (missing optional fields read as None).

        Raises
        ------
        InvalidJobError
            A required field is missing.
        """
        optional = {"predicted_makespan_s", "seconds_per_unit", "job_concurrency", "n_folds"}
        ints = {"units_per_shard", "n_shards", "max_concurrency", "n_units", "account_concurrency"}
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = d.get(f.name)
            if value is None:
                if f.name not in optional:
                    raise InvalidJobError(f"sharding decision lacks the field {f.name!r}.")
                values[f.name] = None
            elif f.name == "policy":
                values[f.name] = str(value)
            elif f.name == "probe":
                values[f.name] = value in (True, 1, "1", "true", "True")
            elif f.name in ints or f.name in ("job_concurrency", "n_folds"):
                values[f.name] = int(value)
            else:
                values[f.name] = float(value)
        return cls(**values)


def plan_shards(
    n_units: int,
    seconds_per_unit: float | None = None,
    startup_s: float = DEFAULT_STARTUP_S,
    *,
    policy: str = "auto",
    n_folds: int | None = None,
    account_concurrency: int = DEFAULT_ACCOUNT_CONCURRENCY,
    job_concurrency: int | None = None,
    timeout_s: float = LAMBDA_TIMEOUT_S,
    safety: float = DEFAULT_SAFETY,
    makespan_slack: float = 0.05,
    probe_shards: int = DEFAULT_PROBE_SHARDS,
) -> ShardingDecision:
    """Decide how many units go into one invocation, and the Map's concurrency.

    Parameters
    ----------
    n_units : int
        Units of the stage (>= 1).
    seconds_per_unit : float or None
        Predicted seconds to fit one unit (> 0), e.g. training rows per unit divided by the
        predicted throughput (:meth:`fanfit.sched.throughput.EwmaThroughput.predict`). None when
        there is no history.
    startup_s : float, default :data:`DEFAULT_STARTUP_S`
        Predicted overhead per invocation, seconds (>= 0): cold start plus reading the data
        (e.g. :meth:`~fanfit.sched.throughput.EwmaThroughput.predict_io` plus an allowance).
    policy : {'auto', 'per-fold', 'per-repetition'}
        ``'auto'`` minimises the makespan; ``'per-fold'`` is one unit per shard; ``'per-repetition'``
        is ``n_folds`` units per shard, one (treatment, repetition, learner) each when the units come
        in :func:`fanfit.dml.fit_units` order and are cut with :func:`split_units`.
    n_folds : int, optional
        Folds per repetition; required by ``'per-repetition'``, which needs ``n_units`` to be a
        multiple of it.
    account_concurrency : int, default 1000
        Lambda concurrency of the account (AWS default quota).
    job_concurrency : int, optional
        This job's cap on concurrent invocations.
    timeout_s : float, default 900
        The function's timeout, seconds.
    safety : float, default :data:`DEFAULT_SAFETY`
        No shard is planned to take more than ``safety * timeout_s`` (in ``(0, 1]``): predictions
        err, and a timed-out shard is paid for and redone.
    makespan_slack : float, default 0.05
        ``'auto'`` takes the fewest shards whose makespan is within ``(1 + makespan_slack)`` of the
        minimum (>= 0).
    probe_shards : int, default :data:`DEFAULT_PROBE_SHARDS`
        Single-unit shards of a probe wave (>= 1).

    Returns
    -------
    ShardingDecision
        With ``probe=True`` when ``policy='auto'`` and ``seconds_per_unit`` is None: a wave of
        ``min(probe_shards, n_units, cap)`` single-unit shards; plan the remaining units again
        once their throughput is measured.

    Raises
    ------
    InvalidJobError
        An argument out of range; ``n_folds`` missing or not dividing ``n_units`` for
        ``'per-repetition'``; or the planned shard (for ``'auto'``, a single unit) predicted
        over ``safety * timeout_s``: such work belongs on a longer-running resource (Batch).
    """
    for name, value, low in (
        ("n_units", n_units, 1),
        ("account_concurrency", account_concurrency, 1),
        ("probe_shards", probe_shards, 1),
    ):
        _check_int(name, value, low)
    if job_concurrency is not None:
        _check_int("job_concurrency", job_concurrency, 1)
    if policy not in POLICIES:
        raise InvalidJobError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}.")
    if seconds_per_unit is not None and not (
        math.isfinite(seconds_per_unit) and seconds_per_unit > 0
    ):
        raise InvalidJobError(f"seconds_per_unit must be positive, got {seconds_per_unit!r}.")
    if not (math.isfinite(startup_s) and startup_s >= 0):
        raise InvalidJobError(f"startup_s must be >= 0, got {startup_s!r}.")
    if not (math.isfinite(timeout_s) and timeout_s > 0) or not 0 < safety <= 1:
        raise InvalidJobError(
            f"timeout_s must be positive and safety in (0, 1]; got {timeout_s!r}, {safety!r}."
        )
    if not (math.isfinite(makespan_slack) and makespan_slack >= 0):
        raise InvalidJobError(f"makespan_slack must be >= 0, got {makespan_slack!r}.")
    cap = min(account_concurrency, job_concurrency or account_concurrency)
    limit_s = safety * timeout_s
    inputs: dict[str, Any] = {
        "n_units": n_units,
        "seconds_per_unit": None if seconds_per_unit is None else float(seconds_per_unit),
        "startup_s": float(startup_s),
        "account_concurrency": account_concurrency,
        "job_concurrency": job_concurrency,
        "timeout_s": float(timeout_s),
        "safety": float(safety),
        "n_folds": n_folds,
        "makespan_slack": float(makespan_slack),
    }

    def decide(units_per_shard: int, n_shards: int, probe: bool = False) -> ShardingDecision:
        c = min(n_shards, cap)
        makespan = (
            None
            if seconds_per_unit is None
            else math.ceil(n_shards / c) * (startup_s + units_per_shard * seconds_per_unit)
        )
        return ShardingDecision(policy, units_per_shard, n_shards, c, makespan, probe, **inputs)

    if policy == "per-fold":
        u = 1
    elif policy == "per-repetition":
        if n_folds is None or isinstance(n_folds, bool) or n_folds < 1 or n_units % n_folds:
            raise InvalidJobError(
                f"policy 'per-repetition' needs n_folds dividing n_units={n_units}; got {n_folds!r}."
            )
        u = n_folds
    elif seconds_per_unit is None:
        n_probe = min(probe_shards, n_units, cap)
        return decide(1, n_probe, probe=True)
    else:
        u = _best_units_per_shard(
            n_units, seconds_per_unit, startup_s, cap, limit_s, makespan_slack
        )
    if seconds_per_unit is not None and startup_s + u * seconds_per_unit > limit_s:
        raise InvalidJobError(
            f"A shard of {u} unit(s) is predicted to take {startup_s + u * seconds_per_unit:.1f} s, "
            f"over {safety:g} of the {timeout_s:g} s timeout; use policy 'auto' (fewer units per "
            "shard), more memory, or a Batch resource."
        )
    return decide(u, math.ceil(n_units / u))


def _best_units_per_shard(
    n: int, t: float, s: float, cap: int, limit_s: float, slack: float
) -> int:
    """The ``u`` of the fewest shards among makespans within ``slack`` of the minimum."""
    u_max = min(n, math.floor((limit_s - s) / t)) if limit_s > s else 0
    while u_max >= 1 and s + u_max * t > limit_s:  # floor() of a rounded quotient may be one over
        u_max -= 1
    if u_max < 1:
        return 1  # the caller raises: not even one unit fits
    u = np.arange(1, u_max + 1, dtype=np.int64)
    shards = -(-n // u)
    u = -(-n // shards)  # the largest shard deal() makes with that many shards
    waves = -(-shards // np.minimum(shards, cap))
    makespan = waves * (s + u * t)
    ok = makespan <= makespan.min() * (1 + slack)
    return int(u[ok].max())


def split_units(units: Sequence[T], decision: ShardingDecision) -> list[list[T]]:
    """Cut a stage's units into the decision's shards.

    ``'auto'`` deals them round-robin (:func:`fanfit.sched.shards.deal`), which mixes learners of
    different cost evenly; the fixed policies cut consecutive runs of ``units_per_shard``, which on
    :func:`fanfit.dml.fit_units`' order (fold innermost) gives DoubleML-Serverless's shards. For a
    probe, only the first ``n_shards`` units are cut (one per shard).

    Parameters
    ----------
    units : sequence
        The stage's units, ``decision.n_units`` of them.
    decision : ShardingDecision

    Returns
    -------
    list of list
        ``decision.n_shards`` non-empty shards.

    Raises
    ------
    InvalidJobError
        If ``len(units) != decision.n_units``.
    """
    if len(units) != decision.n_units:
        raise InvalidJobError(
            f"the decision was made for {decision.n_units} units, got {len(units)}."
        )
    if decision.probe:
        return [[unit] for unit in units[: decision.n_shards]]
    if decision.policy == "auto":
        return deal(units, decision.n_shards)
    u = decision.units_per_shard
    return [list(units[i : i + u]) for i in range(0, len(units), u)]


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise InvalidJobError(f"{name} must be an integer of at least {low}, got {value!r}.")
