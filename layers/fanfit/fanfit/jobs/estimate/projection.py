"""The AWS projection of a planned estimate: Schedule's plan, simulated on an account model.

:func:`fanfit.jobs.estimate.schedule.plan_job` plans each stage with Schedule's own code (placement
and sizing); :func:`project_prediction` turns that plan into the simulation's stages
(:func:`simulated_stages`) and replaces the prediction's seconds and USD with the simulation's
(:func:`fanfit.sched.simulate.simulate_job`). ``fanfit estimate --plan-only`` and
``Client.plan_estimate`` use it on a stack that is not the local one.
"""

from __future__ import annotations

from fanfit.jobs.documents.estimate import EstimatePrediction
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.resources import resource_kind
from fanfit.sched.simulate import AccountModel, Projection, SimShard, SimStage, simulate_job

__all__ = ["project_prediction", "simulated_stages"]


def simulated_stages(prediction: EstimatePrediction) -> list[SimStage]:
    """The simulation's stages of a plan: per stage, its Lambda shards with their predicted work.

    A learner group placed on a Lambda resource ``r`` with ``k`` workers has the placement's
    billed seconds ``k x startup + n / x`` (:func:`fanfit.sched.placement.evaluate_choice`: the
    work of its ``n`` units at ``x`` units/s, plus a start-up per worker); its work is the billed
    seconds less the start-ups (the account model adds its own start-up and I/O). The work of the
    groups on ``r`` is shared evenly by the ``n_shards`` the sizing cut on ``r`` (its units are dealt
    evenly, :func:`fanfit.sched.sizing.split_units`). The GPU worker's groups form the stage's GPU
    lane, at the placement's seconds and USD. The stage's concurrency is the job's.

    Parameters
    ----------
    prediction : EstimatePrediction
        From :func:`fanfit.jobs.estimate.schedule.plan_job`.

    Returns
    -------
    list of SimStage
        One per stage, in order.
    """
    out = []
    for stage in prediction.stages:
        placement = stage.placement
        startup = {(i.stage, i.resource): i.startup_s for i in placement.inputs}
        work: dict[str, float] = {}
        gpu_s, gpu_usd = 0.0, 0.0
        for choice in placement.stages:
            if resource_kind(choice.resource) == "gpu":
                gpu_s = max(gpu_s, choice.seconds)
                gpu_usd += choice.cost_usd
                continue
            fixed = choice.workers * startup.get((choice.stage, choice.resource), 0.0)
            work[choice.resource] = work.get(choice.resource, 0.0) + max(
                choice.billed_s - fixed, 0.0
            )
        shards: list[SimShard] = []
        for planned in stage.shards:
            if resource_kind(planned.resource) != "lambda" or planned.n_shards < 1:
                continue
            each = work.get(planned.resource, 0.0) / planned.n_shards
            shards += [SimShard(planned.resource, each)] * planned.n_shards
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
    account: AccountModel | None = None,
    prices: PriceTable = DEFAULT_PRICES,
) -> tuple[EstimatePrediction, Projection]:
    """The prediction with its seconds and USD from the account simulation.

    Parameters
    ----------
    prediction : EstimatePrediction
        From :func:`fanfit.jobs.estimate.schedule.plan_job`.
    account : AccountModel, optional
        Default: AWS's defaults with the prediction's ``account_concurrency``.
    prices : PriceTable

    Returns
    -------
    (EstimatePrediction, Projection)
        A copy whose stages' ``predicted_wall_s``, ``predicted_wall_s`` and ``predicted_cost_usd``
        are the simulation's (``simulation``: the account model and each stage's figures), and the
        simulation itself.
    """
    if account is None:
        account = AccountModel(lambda_concurrency=max(1, prediction.account_concurrency))
    projection = simulate_job(simulated_stages(prediction), account, prices)
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
