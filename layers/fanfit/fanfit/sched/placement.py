"""Cost-optimal placement of a job's stages on Lambda or Batch GPU (HeterPS).

A job is a sequence of stages that run one after another (for an estimate, each nuisance learner's
cross-fitting; for train, the model's stages). Each stage has a measured profile per resource type
(:class:`ResourceProfile`): throughput per worker, start-up latency and data moved. A placement picks,
for every stage, one resource type and a worker count; it minimises the monetary cost (USD, priced
with :class:`fanfit.prices.PriceTable`) subject to a deadline on the total time and/or a throughput
floor per stage. This is the scheduling problem of HeterPS (Liu et al., "HeterPS: Distributed Deep
Learning With Reinforcement Learning Based Scheduling in Heterogeneous Environments", Future
Generation Computer Systems, 2023): minimise cost subject to a throughput constraint, with the
baselines it compares against (all layers on CPU, all on GPU, a greedy heuristic). HeterPS searches
with reinforcement learning because its layer counts are large; the stage counts of fanfit's jobs are
small, so the problem is solved exactly here.

The model
---------
For stage ``j`` on resource ``r`` with ``k`` workers, every worker starts (``startup_s``), moves its
data (``data_in_mb``, or ``data_in_mb / k`` when the input is split, plus ``data_out_mb / k``, at
``io_mb_per_s``) and processes ``ceil(n_samples / k)`` or ``floor(n_samples / k)`` samples at
``samples_per_s``. The stage takes as long as its slowest worker:

.. math::

    t_{j}(r, k) = s_r + \\frac{D^{in}_{j,r}(k) + D^{out}_{j,r} / k}{b_r}
                  + \\frac{\\lceil n_j / k \\rceil}{x_{j,r}}

Cost: Lambda bills every worker's duration (start-up included: AWS bills the INIT phase) at its
memory, plus one request per worker; a Batch worker bills its instance per second with EC2's 60 s
minimum (Amazon EC2 On-Demand pricing: "per-second billing, with a minimum of 60 seconds");
every worker makes one S3 GET and one PUT. A Lambda worker longer than 900 s (Lambda's timeout) is
not an option. The total time is ``sum_j t_j`` (stages run in sequence).

The exact problem is a multiple-choice knapsack: choose exactly one option ``(r, k)`` per stage,
minimising ``sum_j c_j`` subject to ``sum_j t_j <= deadline``. Two exact solvers are provided:

- ``"milp"`` (default): the integer program with binary ``x_{j,o}`` (one per stage and option),
  ``sum_o x_{j,o} = 1`` per stage and ``sum_{j,o} t_{j,o} x_{j,o} <= deadline``, solved by HiGHS
  branch-and-bound through :func:`scipy.optimize.milp` with a zero relative gap (the optimum is proven,
  not approximated). Options dominated within their stage (slower and no cheaper) are removed first,
  which cannot remove every optimum. The plan HiGHS returns is re-checked in exact float arithmetic;
  a plan that met the deadline only within the solver's feasibility tolerance is excluded by a
  no-good cut and the problem solved again.
- ``"dp"``: dynamic programming over Pareto sets: the set of non-dominated (time, cost) partial plans
  of stages ``1..j`` is extended by stage ``j+1``'s options and pruned. It is exact because the prefix
  of an optimal plan can always be swapped for a prefix that dominates it; no time is discretised. Its
  sets can grow with the product of the options, so it suits small instances (and cross-checks the MILP).
- ``"brute-force"``: every combination, for tests.

Baselines (HeterPS's comparisons): ``"all-cpu"`` and ``"all-gpu"`` solve the same problem restricted
to Lambda resp. Batch GPU resources (the fastest restricted plan, flagged as missing the deadline, when
none meets it); ``"greedy"`` starts every stage at its cheapest option and, while the deadline is
missed, takes the upgrade with the most seconds saved per extra USD.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fanfit.errors import InfeasiblePlacementError, InvalidJobError
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.resources import GPU_PREFIX, resource_kind, resource_memory_mb

__all__ = [
    "BASELINES",
    "DEFAULT_IO_MB_PER_S",
    "EC2_MIN_BILLED_S",
    "EXACT_METHODS",
    "LAMBDA_TIMEOUT_S",
    "METHODS",
    "Placement",
    "ResourceProfile",
    "StageChoice",
    "StageProfile",
    "compare_placements",
    "evaluate_choice",
    "fastest_choices",
    "infeasible_error",
    "placement_front",
    "placement_of",
    "positive_number",
    "solve_placement",
    "stage_options",
]

#: EC2 bills Linux instances per second with a minimum of 60 s (Amazon EC2 On-Demand pricing).
EC2_MIN_BILLED_S = 60.0
#: Lambda's maximum timeout, seconds (AWS Lambda quotas).
LAMBDA_TIMEOUT_S = 900.0
#: Default S3 transfer rate of one worker, MB/s (a conservative single-stream GET/PUT figure; a
#: profile measured on the target overrides it).
DEFAULT_IO_MB_PER_S = 50.0
#: Exact solvers.
EXACT_METHODS = ("milp", "dp", "brute-force")
#: HeterPS's baselines.
BASELINES = ("all-cpu", "all-gpu", "greedy")
#: Every ``method`` :func:`solve_placement` takes.
METHODS = EXACT_METHODS + BASELINES

_BRUTE_FORCE_LIMIT = 2_000_000
_DP_LIMIT = 5_000_000


def positive_number(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """``value`` as a float, checked to be a finite number > 0 (>= 0 with ``allow_zero``).

    Raises
    ------
    InvalidJobError
        Naming ``name``: not a number (bools included), not finite, or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidJobError(f"{name} must be a number, got {value!r}.")
    number = float(value)
    ok = math.isfinite(number) and (number >= 0 if allow_zero else number > 0)
    if not ok:
        raise InvalidJobError(
            f"{name} must be a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}."
        )
    return number


@dataclass(frozen=True)
class ResourceProfile:
    """How one stage runs on one resource type, per worker.

    Parameters
    ----------
    samples_per_s : float
        Throughput of one worker, samples/s (measured, or scaled from a measurement).
    startup_s : float, default 0
        Start-up latency of a worker, seconds (Lambda cold start; Batch job scheduling, instance
        launch and image pull).
    data_in_mb, data_out_mb : float, default 0
        MB the stage reads and writes on this resource (see :attr:`StageProfile.split_input`).
    io_mb_per_s : float, default :data:`DEFAULT_IO_MB_PER_S`
        S3 transfer rate of one worker, MB/s.

    Raises
    ------
    InvalidJobError
        A value that is not a finite number in range.
    """

    samples_per_s: float
    startup_s: float = 0.0
    data_in_mb: float = 0.0
    data_out_mb: float = 0.0
    io_mb_per_s: float = DEFAULT_IO_MB_PER_S

    def __post_init__(self) -> None:
        positive_number(self.samples_per_s, "samples_per_s")
        positive_number(self.io_mb_per_s, "io_mb_per_s")
        for name in ("startup_s", "data_in_mb", "data_out_mb"):
            positive_number(getattr(self, name), name, allow_zero=True)

    def to_dict(self) -> dict[str, float]:
        """Plain dict of the fields."""
        return {
            "samples_per_s": float(self.samples_per_s),
            "startup_s": float(self.startup_s),
            "data_in_mb": float(self.data_in_mb),
            "data_out_mb": float(self.data_out_mb),
            "io_mb_per_s": float(self.io_mb_per_s),
        }


@dataclass(frozen=True)
class StageProfile:
    """One stage of a job and its profile on every resource type it may run on.

    Parameters
    ----------
    name : str
        Stage name, e.g. ``'ml_l'``.
    n_samples : int
        Samples the stage processes in total (split evenly over its workers).
    resources : mapping of str to ResourceProfile
        Resource name (``'lambda-<MB>'`` or ``'gpu:<instance type>'``) to profile.
    split_input : bool, default False
        False: every worker reads all of ``data_in_mb`` (cross-fitting reads the whole data set);
        True: the input is split over the workers (data-parallel shards).

    Raises
    ------
    InvalidJobError
        An empty name or resource map, ``n_samples < 1``, or an unknown resource name.
    """

    name: str
    n_samples: int
    resources: Mapping[str, ResourceProfile] = field(default_factory=dict)
    split_input: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidJobError(f"a stage needs a non-empty name, got {self.name!r}.")
        if (
            isinstance(self.n_samples, bool)
            or not isinstance(self.n_samples, int | np.integer)
            or self.n_samples < 1
        ):
            raise InvalidJobError(
                f"stage {self.name}: n_samples must be an integer >= 1, got {self.n_samples!r}."
            )
        if not self.resources:
            raise InvalidJobError(f"stage {self.name}: give a profile for at least one resource.")
        for resource, profile in self.resources.items():
            resource_kind(resource)
            if not isinstance(profile, ResourceProfile):
                raise InvalidJobError(
                    f"stage {self.name}: profile of {resource!r} is not a ResourceProfile."
                )
        object.__setattr__(self, "n_samples", int(self.n_samples))
        object.__setattr__(self, "resources", dict(self.resources))


@dataclass(frozen=True)
class StageChoice:
    """One stage's resource, worker count and predicted time and cost.

    Attributes
    ----------
    stage, resource : str
    workers : int
    seconds : float
        Predicted wall time of the stage (its slowest worker), seconds.
    cost_usd : float
        Predicted cost of the stage, USD.
    billed_s : float
        Sum over workers of the billed seconds (Lambda duration or Batch instance-seconds).
    """

    stage: str
    resource: str
    workers: int
    seconds: float
    cost_usd: float
    billed_s: float

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields."""
        return {
            "stage": self.stage,
            "resource": self.resource,
            "workers": self.workers,
            "seconds": self.seconds,
            "cost_usd": self.cost_usd,
            "billed_s": self.billed_s,
        }


@dataclass(frozen=True)
class Placement:
    """A plan: one :class:`StageChoice` per stage, in stage order.

    Attributes
    ----------
    method : str
        The method that made it (one of :data:`METHODS`).
    stages : tuple of StageChoice
    total_s : float
        Predicted time of the job (sum over stages), seconds.
    cost_usd : float
        Predicted cost (sum over stages), USD.
    deadline_s, min_throughput : float or None
        The constraints it was made for (throughput in samples/s, per stage).
    meets_deadline : bool
        Whether the plan meets both constraints (always True for the exact methods).
    """

    method: str
    stages: tuple[StageChoice, ...]
    total_s: float
    cost_usd: float
    deadline_s: float | None
    min_throughput: float | None
    meets_deadline: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict."""
        return {
            "method": self.method,
            "total_s": self.total_s,
            "cost_usd": self.cost_usd,
            "deadline_s": self.deadline_s,
            "min_throughput": self.min_throughput,
            "meets_deadline": self.meets_deadline,
            "stages": [s.to_dict() for s in self.stages],
        }


def evaluate_choice(
    stage: StageProfile, resource: str, workers: int, prices: PriceTable = DEFAULT_PRICES
) -> StageChoice:
    """Predicted time and cost of ``stage`` on ``workers`` workers of ``resource`` (model in the module doc).

    Parameters
    ----------
    stage : StageProfile
    resource : str
        A key of ``stage.resources``.
    workers : int
        1 .. ``stage.n_samples``.
    prices : PriceTable

    Returns
    -------
    StageChoice

    Raises
    ------
    InvalidJobError
        An unknown resource, a worker count out of range, or a Batch instance type without a price.
    """
    if resource not in stage.resources:
        raise InvalidJobError(
            f"stage {stage.name} has no profile for {resource!r}; it has {sorted(stage.resources)}."
        )
    if (
        isinstance(workers, bool)
        or not isinstance(workers, int | np.integer)
        or not 1 <= workers <= stage.n_samples
    ):
        raise InvalidJobError(
            f"stage {stage.name}: workers must be an integer in 1..{stage.n_samples}, got {workers!r}."
        )
    k = int(workers)
    p = stage.resources[resource]
    n = stage.n_samples
    data_in = p.data_in_mb / k if stage.split_input else p.data_in_mb
    fixed_s = p.startup_s + (data_in + p.data_out_mb / k) / p.io_mb_per_s
    big, n_big = -(-n // k), n % k  # n_big workers take ceil(n/k) samples, the rest floor(n/k)
    small = n // k
    t_big, t_small = fixed_s + big / p.samples_per_s, fixed_s + small / p.samples_per_s
    seconds = t_big
    s3 = k * (prices.s3_get_usd + prices.s3_put_usd)
    if resource_kind(resource) == "lambda":
        memory_mb = resource_memory_mb(resource)
        assert memory_mb is not None
        billed = k * fixed_s + n / p.samples_per_s
        cost = prices.lambda_cost_usd(memory_mb, billed, invocations=k) + s3
    else:
        instance = resource[len(GPU_PREFIX) :]
        billed = n_big * max(t_big, EC2_MIN_BILLED_S) + (k - n_big) * max(t_small, EC2_MIN_BILLED_S)
        cost = prices.gpu_cost_usd(billed, instance) + s3
    return StageChoice(stage.name, resource, k, float(seconds), float(cost), float(billed))


def _cap(max_workers: int | Mapping[str, int], resource: str) -> int:
    if isinstance(max_workers, Mapping):
        value = max_workers.get(resource, max_workers.get(resource_kind(resource)))
        if value is None:
            raise InvalidJobError(
                f"max_workers has no entry for {resource!r} (nor for {resource_kind(resource)!r})."
            )
    else:
        value = max_workers
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidJobError(f"max_workers must be an integer >= 1, got {value!r}.")
    return int(value)


def stage_options(
    stage: StageProfile,
    max_workers: int | Mapping[str, int] = 40,
    prices: PriceTable = DEFAULT_PRICES,
    *,
    resources: Sequence[str] | None = None,
    min_throughput: float | None = None,
) -> list[StageChoice]:
    """Every admissible ``(resource, workers)`` of a stage with its time and cost.

    Parameters
    ----------
    stage : StageProfile
    max_workers : int or mapping
        Concurrency cap: one int for every resource, or a map from a resource name or kind
        (``'lambda'``, ``'gpu'``) to its cap.
    prices : PriceTable
    resources : sequence of str, optional
        Only these resources (default: all of the stage's).
    min_throughput : float, optional
        Drop options whose stage throughput ``n_samples / seconds`` is below this, samples/s.

    Returns
    -------
    list of StageChoice
        Sorted by resource name then workers; Lambda options longer than :data:`LAMBDA_TIMEOUT_S`
        are left out.
    """
    out = []
    for resource in sorted(stage.resources):
        if resources is not None and resource not in resources:
            continue
        is_lambda = resource_kind(resource) == "lambda"
        for k in range(1, min(_cap(max_workers, resource), stage.n_samples) + 1):
            choice = evaluate_choice(stage, resource, k, prices)
            if is_lambda and choice.seconds > LAMBDA_TIMEOUT_S:
                continue
            if min_throughput is not None and stage.n_samples / choice.seconds < min_throughput:
                continue
            out.append(choice)
    return out


def _pareto(options: Sequence[StageChoice]) -> list[StageChoice]:
    """Options not dominated by another (faster-or-equal and cheaper-or-equal), by ascending time."""
    front: list[StageChoice] = []
    for o in sorted(options, key=lambda c: (c.seconds, c.cost_usd, c.resource, c.workers)):
        if not front or o.cost_usd < front[-1].cost_usd:
            front.append(o)
    return front


def placement_of(
    method: str,
    choices: Sequence[StageChoice],
    deadline_s: float | None,
    min_throughput: float | None,
    n_samples: Sequence[int],
) -> Placement:
    """The :class:`Placement` of one choice per stage: its total seconds (the stages' sum), total
    USD, and whether it meets the deadline and the throughput floor (samples/s per stage)."""
    total = 0.0
    cost = 0.0
    for c in choices:
        total += c.seconds
        cost += c.cost_usd
    meets = deadline_s is None or total <= deadline_s
    if min_throughput is not None:
        meets = meets and all(n / c.seconds >= min_throughput for n, c in zip(n_samples, choices))
    return Placement(method, tuple(choices), total, cost, deadline_s, min_throughput, meets)


def infeasible_error(
    stages: Sequence[StageProfile],
    options: Sequence[Sequence[StageChoice]],
    deadline_s: float | None,
    what: str,
) -> InfeasiblePlacementError:
    """The error for a problem with no plan: the stages with no admissible option, else the
    deadline against the fastest plan's seconds (``what`` names the caller in the message)."""
    empty = [s.name for s, o in zip(stages, options) if not o]
    if empty:
        return InfeasiblePlacementError(
            f"{what}: stage(s) {empty} have no admissible option (every Lambda worker would run over "
            f"{LAMBDA_TIMEOUT_S:.0f} s, the throughput floor is too high, or no resource of the kind "
            "is profiled); raise max_workers, lower min_throughput or add a resource profile."
        )
    fastest = sum(min(c.seconds for c in o) for o in options)
    return InfeasiblePlacementError(
        f"{what}: no placement meets the deadline of {deadline_s:.6g} s; the fastest takes "
        f"{fastest:.6g} s. Raise the deadline to at least that, or raise max_workers."
    )


def _solve_brute_force(
    options: Sequence[Sequence[StageChoice]], deadline_s: float | None
) -> list[StageChoice] | None:
    count = math.prod(len(o) for o in options)
    if count > _BRUTE_FORCE_LIMIT:
        raise InvalidJobError(
            f"brute force would try {count} plans (limit {_BRUTE_FORCE_LIMIT}); use method='milp'."
        )
    best: list[StageChoice] | None = None
    best_cost = math.inf
    for combo in itertools.product(*options):
        total = 0.0
        cost = 0.0
        for c in combo:
            total += c.seconds
            cost += c.cost_usd
        if (deadline_s is None or total <= deadline_s) and cost < best_cost:
            best, best_cost = list(combo), cost
    return best


def _solve_dp(
    options: Sequence[Sequence[StageChoice]], deadline_s: float | None
) -> list[StageChoice] | None:
    fronts = [_pareto(o) for o in options]
    # min time of the stages after j, to prune partial plans that cannot meet the deadline
    rest = [0.0] * (len(fronts) + 1)
    for j in range(len(fronts) - 1, -1, -1):
        rest[j] = rest[j + 1] + fronts[j][0].seconds
    # a partial plan: (time, cost, choices)
    partial: list[tuple[float, float, tuple[StageChoice, ...]]] = [(0.0, 0.0, ())]
    for j, front in enumerate(fronts):
        grown = []
        for t, c, chosen in partial:
            for o in front:
                t2 = t + o.seconds
                if deadline_s is not None and t2 + rest[j + 1] > deadline_s * (1 + 1e-12) + 1e-12:
                    break  # front is sorted by time: every later option is slower
                grown.append((t2, c + o.cost_usd, (*chosen, o)))
        if len(grown) > _DP_LIMIT:
            raise InvalidJobError(
                f"the Pareto sets grew past {_DP_LIMIT} plans; use method='milp'."
            )
        grown.sort(key=lambda p: (p[0], p[1]))
        partial = []
        for p in grown:
            if not partial or p[1] < partial[-1][1]:
                partial.append(p)
    feasible = [p for p in partial if deadline_s is None or p[0] <= deadline_s]
    if not feasible:
        return None
    return list(min(feasible, key=lambda p: (p[1], p[0]))[2])


def _solve_milp(
    options: Sequence[Sequence[StageChoice]], deadline_s: float | None
) -> list[StageChoice] | None:
    from scipy.optimize import Bounds, LinearConstraint, milp

    fronts = [_pareto(o) for o in options]
    if deadline_s is None:
        return [min(f, key=lambda c: (c.cost_usd, c.seconds)) for f in fronts]
    flat = [(j, o) for j, f in enumerate(fronts) for o in f]
    n_var = len(flat)
    cost = np.array([o.cost_usd for _, o in flat])
    secs = np.array([o.seconds for _, o in flat])
    # Scale so the sum of the per-stage cheapest costs is 1e6: HiGHS's absolute gap (1e-6) is then
    # a relative error of 1e-12, and the relative gap is 0.
    lower = sum(min(o.cost_usd for o in f) for f in fronts)
    scale = 1e6 / lower if lower > 0 else 1.0
    t_scale = max(deadline_s, 1e-9)
    assign = np.zeros((len(fronts), n_var))
    for i, (j, _) in enumerate(flat):
        assign[j, i] = 1.0
    rows = [
        LinearConstraint(assign, 1.0, 1.0),
        LinearConstraint(secs[None, :] / t_scale, -np.inf, deadline_s / t_scale),
    ]
    for _ in range(20):
        res = milp(
            cost * scale,
            integrality=np.ones(n_var),
            bounds=Bounds(0.0, 1.0),
            constraints=rows,
            options={"mip_rel_gap": 0.0, "presolve": True},
        )
        if res.status == 2 or res.x is None:  # infeasible
            return None
        if res.status != 0:
            raise InvalidJobError(f"the MILP solver stopped without an optimum: {res.message}")
        picked = np.flatnonzero(res.x > 0.5)
        plan = [flat[i][1] for i in sorted(picked, key=lambda i: flat[i][0])]
        total = 0.0
        for c in plan:
            total += c.seconds
        if len(plan) == len(fronts) and total <= deadline_s:
            return plan
        # The plan met the deadline only within HiGHS's feasibility tolerance: exclude exactly this
        # combination (a no-good cut: at most len(plan) - 1 of its variables) and solve again.
        cut = np.zeros((1, n_var))
        cut[0, picked] = 1.0
        rows.append(LinearConstraint(cut, -np.inf, len(picked) - 1))
    raise InvalidJobError("the MILP solver did not return a plan that meets the deadline exactly.")


def fastest_choices(options: Sequence[Sequence[StageChoice]]) -> list[StageChoice]:
    """Each stage's fastest option (the cheaper of equally fast ones): the fastest plan."""
    return [min(o, key=lambda c: (c.seconds, c.cost_usd)) for o in options]


def _solve_greedy(
    options: Sequence[Sequence[StageChoice]], deadline_s: float | None
) -> list[StageChoice]:
    plan = [min(o, key=lambda c: (c.cost_usd, c.seconds)) for o in options]
    if deadline_s is None:
        return plan
    for _ in range(sum(len(o) for o in options)):
        total = 0.0
        for c in plan:
            total += c.seconds
        if total <= deadline_s:
            break
        best: tuple[float, int, StageChoice] | None = None
        for j, opts in enumerate(options):
            for o in opts:
                saved = plan[j].seconds - o.seconds
                if saved <= 0:
                    continue
                extra = o.cost_usd - plan[j].cost_usd
                ratio = math.inf if extra <= 0 else saved / extra
                if best is None or ratio > best[0]:
                    best = (ratio, j, o)
        if best is None:
            break
        plan[best[1]] = best[2]
    return plan


def solve_placement(
    stages: Sequence[StageProfile],
    *,
    deadline_s: float | None = None,
    min_throughput: float | None = None,
    max_workers: int | Mapping[str, int] = 40,
    prices: PriceTable = DEFAULT_PRICES,
    method: str = "milp",
) -> Placement:
    """Choose a resource and a worker count per stage at least cost within the deadline (HeterPS).

    Parameters
    ----------
    stages : sequence of StageProfile
        The job's stages, run one after another.
    deadline_s : float, optional
        Bound on the total predicted time, seconds.
    min_throughput : float, optional
        Floor on every stage's throughput ``n_samples / seconds``, samples/s (HeterPS's throughput
        constraint: a pipeline runs at the pace of its slowest stage).
    max_workers : int or mapping, default 40
        Concurrency cap per stage: one int, or a map from a resource name or kind (``'lambda'``,
        ``'gpu'``) to its cap. 40 is an inline Map's concurrency limit.
    prices : PriceTable, default :data:`fanfit.prices.DEFAULT_PRICES`
    method : str, default ``'milp'``
        One of :data:`METHODS`: the exact ``'milp'``, ``'dp'``, ``'brute-force'``, or a baseline
        ``'all-cpu'``, ``'all-gpu'``, ``'greedy'`` (see the module doc).

    Returns
    -------
    Placement
        Exact methods return a least-cost plan that meets the constraints. A baseline returns its
        plan even when it misses the deadline (``meets_deadline=False``).

    Raises
    ------
    InfeasiblePlacementError
        No plan meets the constraints (exact methods), or a stage has no admissible option for the
        method (e.g. ``'all-gpu'`` with a stage that has no GPU profile).
    InvalidJobError
        Malformed stages or options, or an unknown method.
    """
    if method not in METHODS:
        raise InvalidJobError(
            f"unknown placement method {method!r}; choose one of {list(METHODS)}."
        )
    if not stages:
        raise InvalidJobError("a placement needs at least one stage.")
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise InvalidJobError(f"stage names must be unique, got {names}.")
    if deadline_s is not None:
        deadline_s = positive_number(deadline_s, "deadline_s")
    if min_throughput is not None:
        min_throughput = positive_number(min_throughput, "min_throughput")
    restrict: dict[str, str] = {"all-cpu": "lambda", "all-gpu": "gpu"}
    options = []
    for s in stages:
        allowed = None
        if method in restrict:
            allowed = [r for r in s.resources if resource_kind(r) == restrict[method]]
        options.append(
            stage_options(s, max_workers, prices, resources=allowed, min_throughput=min_throughput)
        )
    if any(not o for o in options):
        raise infeasible_error(stages, options, deadline_s, f"method {method}")
    n_samples = [s.n_samples for s in stages]
    plan: list[StageChoice] | None
    if method == "greedy":
        plan = _solve_greedy(options, deadline_s)
    elif method == "brute-force":
        plan = _solve_brute_force(options, deadline_s)
    elif method == "dp":
        plan = _solve_dp(options, deadline_s)
    else:
        plan = _solve_milp(options, deadline_s)
        if plan is None and method in restrict:
            plan = fastest_choices(options)
    if plan is None:
        raise infeasible_error(stages, options, deadline_s, f"method {method}")
    return placement_of(method, plan, deadline_s, min_throughput, n_samples)


def compare_placements(
    stages: Sequence[StageProfile],
    *,
    deadline_s: float | None = None,
    min_throughput: float | None = None,
    max_workers: int | Mapping[str, int] = 40,
    prices: PriceTable = DEFAULT_PRICES,
    methods: Sequence[str] = ("milp", *BASELINES),
) -> dict[str, Placement | None]:
    """:func:`solve_placement` for each method; None where a method has no plan at all.

    Parameters
    ----------
    stages, deadline_s, min_throughput, max_workers, prices
        As for :func:`solve_placement`.
    methods : sequence of str
        Default: the MILP and the three baselines.

    Returns
    -------
    dict of str to Placement or None
        In the order of ``methods``. An exact method that finds no plan raises instead.

    Raises
    ------
    InfeasiblePlacementError
        An exact method finds no plan that meets the constraints.
    """
    out: dict[str, Placement | None] = {}
    for m in methods:
        try:
            out[m] = solve_placement(
                stages,
                deadline_s=deadline_s,
                min_throughput=min_throughput,
                max_workers=max_workers,
                prices=prices,
                method=m,
            )
        except InfeasiblePlacementError:
            if m in EXACT_METHODS:
                raise
            out[m] = None
    return out


def placement_front(
    stages: Sequence[StageProfile],
    *,
    max_workers: int | Mapping[str, int] = 40,
    prices: PriceTable = DEFAULT_PRICES,
) -> list[tuple[float, float, tuple[StageChoice, ...]]]:
    """Every Pareto-optimal plan ``(total_s, cost_usd, choices)``, by ascending time.

    The dynamic program of ``method='dp'`` without a deadline: exact (see the module doc).

    Raises
    ------
    InfeasiblePlacementError
        A stage with no admissible option.
    """
    options = [stage_options(s, max_workers, prices) for s in stages]
    if any(not o for o in options):
        raise infeasible_error(stages, options, None, "placement")
    partial: list[tuple[float, float, tuple[StageChoice, ...]]] = [(0.0, 0.0, ())]
    for o in options:
        grown = [
            (t + c.seconds, k + c.cost_usd, (*ch, c)) for t, k, ch in partial for c in _pareto(o)
        ]
        if len(grown) > _DP_LIMIT:
            raise InvalidJobError(f"the Pareto sets grew past {_DP_LIMIT} plans.")
        grown.sort(key=lambda p: (p[0], p[1]))
        partial = []
        for p in grown:
            if not partial or p[1] < partial[-1][1]:
                partial.append(p)
    return partial
