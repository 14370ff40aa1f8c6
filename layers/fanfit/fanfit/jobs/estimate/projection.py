"""The AWS projection of a planned estimate: Schedule's plan, simulated on an account model.

:func:`fanfit.jobs.estimate.wave.plan_job` plans each stage with Schedule's own code (placement
and sizing); :func:`project_prediction` turns that plan into the simulation's stages
(:func:`simulated_stages`) and replaces the prediction's seconds and USD with the simulation's
(:func:`fanfit.sched.simulate.simulate_job`). ``fanfit estimate --plan-only`` and
``Client.plan_estimate`` use it on a stack that is not the local one.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from fanfit import dml
from fanfit.jobs.documents.estimate import EstimatePlan, EstimatePrediction
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.resources import resource_kind
from fanfit.sched.shards import deal
from fanfit.sched.simulate import AccountModel, Projection, SimShard, SimStage, simulate_job

__all__ = ["project_prediction", "simulated_stages"]


def _units(job: dml.DMLSpec | EstimatePlan, stage: int) -> list[dml.FitUnit]:
    """A stage's units: every part's for a plan (:meth:`EstimatePlan.units`), else the spec's."""
    return job.units(stage) if isinstance(job, EstimatePlan) else dml.fit_units(job, stage)


def simulated_stages(
    prediction: EstimatePrediction, spec: dml.DMLSpec | EstimatePlan
) -> list[SimStage]:
    """The simulation's stages of a plan: per stage, its Lambda shards with their predicted work.

    A learner group placed on a Lambda resource with ``k`` workers has the placement's billed
    seconds ``k x startup + n / x`` (:func:`fanfit.sched.placement.evaluate_choice`: the work of
    its ``n`` units at ``x`` units/s, plus a start-up per worker); its work is the billed seconds
    less the start-ups (the account model adds its own start-up and I/O), shared evenly by its
    units (:func:`fanfit.dml.fit_units`). The units on a resource, in that order, are cut into the
    ``n_shards`` the sizing chose there as :func:`fanfit.sched.sizing.split_units` cuts them:
    consecutive runs under ``'per-fold'`` and ``'per-repetition'``, else dealt round-robin
    (:func:`fanfit.sched.shards.deal`; a probe wave's plan is simulated as if its learners were
    measured, the whole stage dealt over its shards). The GPU worker's groups form the stage's GPU
    lane, at the placement's seconds and USD. The stage's concurrency is the job's.

    Parameters
    ----------
    prediction : EstimatePrediction
        From :func:`fanfit.jobs.estimate.wave.plan_job`.
    spec : DMLSpec or EstimatePlan
        The job's spec (its units per stage), or its plan (a job of several parts: the units of
        every part, :meth:`EstimatePlan.units`).

    Returns
    -------
    list of SimStage
        One per stage, in order.
    """
    out = []
    for stage in prediction.stages:
        placement = stage.placement
        startup = {(i.stage, i.resource): i.startup_s for i in placement.inputs}
        units = _units(spec, stage.stage)
        n_units = Counter(u.learner for u in units)
        where: dict[str, str] = {}
        per_unit: dict[str, float] = {}
        gpu_s, gpu_usd = 0.0, 0.0
        for choice in placement.stages:
            where[choice.stage] = choice.resource
            if resource_kind(choice.resource) == "gpu":
                gpu_s = max(gpu_s, choice.seconds)
                gpu_usd += choice.cost_usd
                continue
            fixed = choice.workers * startup.get((choice.stage, choice.resource), 0.0)
            per_unit[choice.stage] = max(choice.billed_s - fixed, 0.0) / max(
                n_units[choice.stage], 1
            )
        shards: list[SimShard] = []
        for planned in stage.shards:
            if resource_kind(planned.resource) != "lambda" or planned.n_shards < 1:
                continue
            seconds = [
                per_unit[u.learner] for u in units if where.get(u.learner) == planned.resource
            ]
            if planned.policy in ("per-fold", "per-repetition"):
                cut = [
                    list(c) for c in np.array_split(seconds, min(planned.n_shards, len(seconds)))
                ]
            else:
                cut = deal(seconds, planned.n_shards)
            shards += [SimShard(planned.resource, float(sum(c))) for c in cut if len(c)]
        out.append(
            SimStage(
                shards=shards,
                concurrency=max(1, prediction.job_concurrency),
                gpu_s=gpu_s,
                gpu_cost_usd=gpu_usd,
            )
        )
    return out


def project_prediction(
    prediction: EstimatePrediction,
    spec: dml.DMLSpec | EstimatePlan,
    account: AccountModel | None = None,
    prices: PriceTable = DEFAULT_PRICES,
) -> tuple[EstimatePrediction, Projection]:
    """The prediction with its seconds and USD from the account simulation.

    Parameters
    ----------
    prediction : EstimatePrediction
        From :func:`fanfit.jobs.estimate.wave.plan_job`.
    spec : DMLSpec or EstimatePlan
        The job's spec, or its plan (a job of several parts).
    account : AccountModel, optional
        Default: AWS's defaults with the prediction's ``account_concurrency``.
    prices : PriceTable

    Returns
    -------
    (EstimatePrediction, Projection)
        A copy whose stages' ``predicted_wall_s``, its ``predicted_wall_s`` and ``predicted_cost_usd``
        are the simulation's (``simulation``: the account model and each stage's figures), and the
        simulation itself.
    """
    if account is None:
        account = AccountModel(lambda_concurrency=max(1, prediction.account_concurrency))
    projection = simulate_job(simulated_stages(prediction, spec), account, prices)
    stages = [
        s.model_copy(update={"predicted_wall_s": p.wall_s})
        for s, p in zip(prediction.stages, projection.stages, strict=True)
    ]
    projected = prediction.model_copy(
        update={
            "stages": stages,
            "predicted_wall_s": projection.wall_s,
            "predicted_cost_usd": projection.cost_usd,
            "simulation": projection.to_dict(),
        }
    )
    return projected, projection
