"""Run-time placement of an estimate wave: profiles from the throughput table, and the objective.

Schedule (:func:`fanfit.jobs.estimate.wave.place`) and ``fanfit estimate --plan-only`` place a wave
with the functions below: the wave's units are grouped by nuisance learner (one group is one stage of
the model of :mod:`fanfit.sched.placement`: its units are its samples, split over the workers), each
group gets a profile per offered resource from the throughput table (:func:`wave_profiles`), and
:func:`choose_placement` picks one resource per group under the job's :class:`Objective` with the
exact solvers of :mod:`fanfit.sched.placement` (HeterPS, Liu et al. 2023).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fanfit.errors import InvalidJobError
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.placement import (
    Placement,
    ResourceProfile,
    StageProfile,
    fastest_choices,
    infeasible_error,
    placement_front,
    placement_of,
    positive_number,
    solve_placement,
    stage_options,
)
from fanfit.sched.resources import resource_kind, resource_memory_mb

__all__ = [
    "DEFAULT_TIME_SLACK",
    "GPU_STARTUP_PRIOR_S",
    "Objective",
    "PRIOR_ROWS_PER_S",
    "PlacementChoice",
    "ProfileInput",
    "WorkGroup",
    "choose_placement",
    "wave_profiles",
]

#: The default objective: the least cost among the plans at most this fraction slower than the
#: fastest plan (issue 14: "the least cost that loses at most 5% of the fastest plan's time").
DEFAULT_TIME_SLACK = 0.05
#: Prior start-up of a GPU worker job, seconds: AWS Batch scheduling, a g4dn instance's launch from
#: zero and the image pull take minutes on AWS (AWS Batch user guide, "Compute environments":
#: instances launch on demand when minvCpus is 0); 120 s is the order of one warm-ish start. A
#: measured overhead on the GPU worker (ThroughputTable) replaces it.
GPU_STARTUP_PRIOR_S = 120.0
#: Prior throughput of a learner with no measurement at any resource, training rows/s of one
#: 1,769 MB (one vCPU) worker: the order of a linear model on a few thousand rows. It only ranks
#: resources until the first wave measures the learner (a wave without history is a probe,
#: fanfit.sched.sizing), and the ranking across Lambda sizes does not depend on its value
#: (every size is scaled from it alike).
PRIOR_ROWS_PER_S = 10_000.0
_PRIOR_MB = 1769


@dataclass(frozen=True)
class WorkGroup:
    """The units of one nuisance learner in a wave: one stage of the placement problem.

    Attributes
    ----------
    name : str
        The learner's name, e.g. ``'ml_l'`` (the stage name).
    signature : str
        The workload signature of its units (:func:`fanfit.sched.throughput.workload_signature`).
    n_units : int
        Units to fit (the stage's samples).
    rows_per_unit : float
        Mean training rows of a unit (throughputs are in rows/s).
    lambda_ok : bool
        False when the learner cannot run on Lambda at all (PyTorch: the Lambda layers have no
        torch, over the 250 MB code limit): the group then has no Lambda profile.
    batched : bool
        True when the GPU worker trains the group's units together as one batched model
        (TorchMLP, :mod:`fanfit.learners.torch_batched`; the wave's GPU units go in one shard):
        its GPU throughput is the batch's, planned at ``n_units`` fits to a batch.
    """

    name: str
    signature: str
    n_units: int
    rows_per_unit: float
    lambda_ok: bool = True
    batched: bool = False


@dataclass(frozen=True)
class ProfileInput:
    """One input of a placement: a group's throughput and start-up on one resource, and whether
    they were measured (the ThroughputTable, scaled across Lambda sizes) or a prior."""

    stage: str
    resource: str
    rows_per_s: float
    startup_s: float
    source: str  # 'measured' | 'scaled' | 'prior'

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields."""
        return {
            "stage": self.stage,
            "resource": self.resource,
            "rows_per_s": float(self.rows_per_s),
            "startup_s": float(self.startup_s),
            "source": self.source,
        }


def wave_profiles(
    groups: Sequence[WorkGroup],
    resources: Sequence[str],
    predict: Any,
    predict_io: Any,
    *,
    lambda_startup_s: float,
    measured: Any = None,
    predict_batched: Any = None,
) -> tuple[list[StageProfile], list[ProfileInput]]:
    """Stage profiles of a wave's learner groups on the offered resources, from the throughput table.

    For each group and resource: the throughput is ``predict(signature, resource)`` (rows/s; the
    table's own figure, or one scaled from another Lambda size,
    :meth:`fanfit.sched.throughput.EwmaThroughput.predict`). Without one, a prior: on Lambda, the
    group's throughput at 1,769 MB (its measurement, else :data:`PRIOR_ROWS_PER_S`) scaled to the
    size with :func:`fanfit.sched.throughput.scale_throughput` (one thread); on the GPU worker, the
    group's 1,769 MB throughput (the learners run the same CPU code on the instance). Start-up:
    ``predict_io(signature, resource)`` (the measured overhead per shard); else, on Lambda, the
    largest overhead measured at another Lambda size (start-up and I/O do not scale with
    memory), else ``lambda_startup_s``; on the GPU worker :data:`GPU_STARTUP_PRIOR_S`. (An
    unmeasured size thus never looks faster for want of a measurement.) A group
    with ``lambda_ok=False`` gets no Lambda profile, so the solver can only place it on the GPU
    worker (and finds no plan without one).

    Parameters
    ----------
    groups : sequence of WorkGroup
    resources : sequence of str
        The offered resources (``lambda-<MB>`` for each CrossFit function, ``gpu:<type>`` when the
        GPU worker is enabled).
    predict, predict_io : callable
        ``(signature, resource) -> float | None``: predicted rows/s and overhead seconds per shard.
    lambda_startup_s : float
        Start-up per Lambda shard without a measurement, seconds.
    measured : callable, optional
        ``(signature, resource) -> bool``: whether the table holds the key itself (else a figure
        from ``predict`` is recorded as 'scaled').
    predict_batched : callable, optional
        ``(signature, resource, fits) -> float | None``: rows/s at ``fits`` fits to a batch
        (:meth:`fanfit.sched.throughput.EwmaThroughput.predict_batched`); used for a
        ``batched`` group on the GPU worker, at ``n_units`` fits (without it: ``predict``).

    Returns
    -------
    (list of StageProfile, list of ProfileInput)
        One profile per group (its samples are units, throughput in units/s), and the inputs used.

    Raises
    ------
    InvalidJobError
        A group with no resource it can run on (no GPU worker for a learner that needs it).
    """
    from fanfit.sched.throughput import scale_throughput

    profiles, inputs = [], []
    lambdas = [r for r in resources if resource_kind(r) == "lambda"]
    for g in groups:
        base = predict(g.signature, f"lambda-{_PRIOR_MB}")
        # the overhead measured at any Lambda size stands for the others (it is start-up and
        # I/O, not CPU-bound); the largest, as fanfit.jobs.estimate.wave.size takes it
        seen = [v for r in lambdas if (v := predict_io(g.signature, r)) is not None]
        lambda_overhead = max(seen) if seen else lambda_startup_s
        by_resource: dict[str, ResourceProfile] = {}
        for resource in resources:
            kind = resource_kind(resource)
            if kind == "lambda" and not g.lambda_ok:
                continue
            if kind == "gpu" and g.batched and predict_batched is not None:
                rows = predict_batched(g.signature, resource, g.n_units)
            else:
                rows = predict(g.signature, resource)
            source = "prior"
            if rows is not None:
                source = (
                    "measured" if measured is None or measured(g.signature, resource) else "scaled"
                )
            elif kind == "lambda":
                mb = resource_memory_mb(resource)
                assert mb is not None
                rows = scale_throughput(base or PRIOR_ROWS_PER_S, _PRIOR_MB, mb)
            else:
                rows = base or PRIOR_ROWS_PER_S
            startup = predict_io(g.signature, resource)
            if startup is None:
                startup = lambda_overhead if kind == "lambda" else GPU_STARTUP_PRIOR_S
            by_resource[resource] = ResourceProfile(
                samples_per_s=float(rows) / max(float(g.rows_per_unit), 1.0),
                startup_s=float(startup),
            )
            inputs.append(ProfileInput(g.name, resource, float(rows), float(startup), source))
        if not by_resource:
            raise InvalidJobError(
                f"learner {g.name} cannot run on Lambda and no GPU worker is offered; deploy the "
                "stack with EnableGpuWorker=true."
            )
        profiles.append(StageProfile(g.name, g.n_units, by_resource))
    return profiles, inputs


@dataclass(frozen=True)
class Objective:
    """What a placement optimises (issue 14).

    ``deadline_s``: the least cost whose predicted time is within the deadline (HeterPS's problem);
    ``budget_usd``: the least time whose predicted cost is within the budget; neither: the least
    cost among the plans at most ``slack`` slower than the fastest plan.

    Raises
    ------
    InvalidJobError
        Both a deadline and a budget, or a value that is not a positive finite number.
    """

    deadline_s: float | None = None
    budget_usd: float | None = None
    slack: float = DEFAULT_TIME_SLACK

    def __post_init__(self) -> None:
        if self.deadline_s is not None and self.budget_usd is not None:
            raise InvalidJobError("give a deadline or a budget, not both.")
        if self.deadline_s is not None:
            positive_number(self.deadline_s, "deadline")
        if self.budget_usd is not None:
            positive_number(self.budget_usd, "budget")
        positive_number(self.slack, "slack", allow_zero=True)

    @property
    def kind(self) -> str:
        """``'deadline'``, ``'budget'`` or ``'default'``."""
        if self.deadline_s is not None:
            return "deadline"
        return "budget" if self.budget_usd is not None else "default"


@dataclass(frozen=True)
class PlacementChoice:
    """A placement and how it was chosen.

    Attributes
    ----------
    placement : Placement
    objective : Objective
    fastest_s : float
        Predicted time of the fastest plan, seconds.
    met : bool
        Whether the plan meets the objective's bound (False: none does; the fastest plan under a
        deadline, the cheapest under a budget, is returned instead).
    """

    placement: Placement
    objective: Objective
    fastest_s: float
    met: bool


def choose_placement(
    stages: Sequence[StageProfile],
    objective: Objective = Objective(),
    *,
    max_workers: int | Mapping[str, int] = 40,
    prices: PriceTable = DEFAULT_PRICES,
) -> PlacementChoice:
    """Place a job's stages under an :class:`Objective` with the exact solvers of this module.

    Deadline: :func:`solve_placement` (MILP) with that deadline. Default: the same with the
    deadline ``(1 + slack) x`` the fastest plan's time (the sum of each stage's fastest option).
    Budget: the fastest plan of the exact Pareto front (:func:`placement_front`, the dynamic
    program) whose cost is within the budget.

    Parameters
    ----------
    stages : sequence of StageProfile
    objective : Objective
    max_workers, prices
        As for :func:`solve_placement`.

    Returns
    -------
    PlacementChoice
        ``met=False`` when no plan meets the deadline (the fastest plan) or the budget (the
        cheapest plan).

    Raises
    ------
    InfeasiblePlacementError
        A stage has no admissible option at all (e.g. a learner that cannot run on Lambda and no
        GPU worker).
    """
    options = [stage_options(s, max_workers, prices) for s in stages]
    if any(not o for o in options):
        raise infeasible_error(stages, options, None, "placement")
    fastest = fastest_choices(options)
    fastest_s = 0.0
    for c in fastest:
        fastest_s += c.seconds
    n_samples = [s.n_samples for s in stages]
    if objective.budget_usd is not None:
        front = placement_front(stages, max_workers=max_workers, prices=prices)
        within = [p for p in front if p[1] <= objective.budget_usd]
        best = within[0] if within else front[-1]
        placed = placement_of("dp", list(best[2]), None, None, n_samples)
        return PlacementChoice(placed, objective, fastest_s, bool(within))
    deadline = objective.deadline_s
    if deadline is None:
        deadline = fastest_s * (1.0 + objective.slack)
    if fastest_s > deadline:
        placed = placement_of("milp", fastest, deadline, None, n_samples)
        return PlacementChoice(placed, objective, fastest_s, False)
    placed = solve_placement(
        stages, deadline_s=deadline, max_workers=max_workers, prices=prices, method="milp"
    )
    return PlacementChoice(placed, objective, fastest_s, True)
