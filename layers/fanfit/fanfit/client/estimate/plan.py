"""Planning an estimate job on a stack without running anything (``fanfit estimate
--plan-only``): :func:`plan_estimate`, and :func:`plan_parts_estimate` for a job of several parts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from fanfit import dml, errors, storage
from fanfit.client.check import CheckedEstimate, check_estimate
from fanfit.client.estimate.submit import _check_parts
from fanfit.client.jobs import StackClient
from fanfit.client.options import EstimateOptions, check_objective
from fanfit.jobs.documents.estimate import EstimatePlan, EstimatePrediction, PlannedPart, PlanPart

__all__ = ["plan_estimate", "plan_parts_estimate"]


def _stack_outputs(client: StackClient) -> dict[str, str]:
    cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    try:
        desc = cfn.describe_stacks(StackName=client.stack.name)["Stacks"][0]
    except Exception as exc:  # botocore ClientError, EndpointConnectionError
        raise errors.StackError(f"cannot read stack {client.stack.name!r}: {exc}") from exc
    return {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}


def _account_concurrency(client: StackClient) -> int:
    """The account's Lambda concurrency (``GetAccountSettings``); AWS's default 1,000 when the
    endpoint does not say."""
    from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY

    lam = client.session.client("lambda", endpoint_url=client.stack.endpoint_url)
    try:
        limit = lam.get_account_settings()["AccountLimit"]["ConcurrentExecutions"]
    except Exception:  # noqa: BLE001 - a stack that does not answer: the default quota
        return DEFAULT_ACCOUNT_CONCURRENCY
    return int(limit) if limit else DEFAULT_ACCOUNT_CONCURRENCY


def plan_estimate(
    client: StackClient,
    data: Any = None,
    *,
    options: EstimateOptions | None = None,
    **kwargs: Any,
) -> EstimatePrediction:
    """Plan an estimate job on the stack without running anything (``fanfit estimate --plan-only``).

    The options and the data are checked as :func:`submit_estimate` checks them; nothing is
    uploaded or started. The plan is Schedule's own (:func:`fanfit.jobs.estimate.wave.
    plan_job`: :func:`~fanfit.jobs.estimate.wave.place` then
    :func:`~fanfit.jobs.estimate.wave.size_placed`), fed with the stack's ThroughputTable
    (output ``ThroughputTableName``), its CrossFit memory sizes (``CrossFitFunctionMemorySizes``),
    whether it has the GPU worker (``GpuWorkerEnabled``) and the account's Lambda concurrency.
    On the local stack the predicted seconds are the sizing's (the local model); on any other
    stack they and the cost come from a simulation of the AWS account (its concurrency, cold
    starts, the Distributed Map's child start rate, state transitions and S3 round trips:
    :func:`fanfit.jobs.estimate.projection.project_prediction`, :mod:`fanfit.sched.simulate`).

    Returns
    -------
    EstimatePrediction
        Each stage's placement and shards, ``predicted_wall_s`` and ``predicted_cost_usd``
        (``simulation``: the account model and the simulated stages, off the local stack).

    Raises
    ------
    fanfit.errors.InvalidJobError, fanfit.errors.InvalidLearnerError, fanfit.errors.InvalidDataError
        As :func:`submit_estimate`.
    fanfit.errors.StackError
        The stack's outputs cannot be read.
    """
    checked = check_estimate(data, s3=client.s3, options=options, **kwargs)
    given = options if options is not None else EstimateOptions.from_keywords(data=data, **kwargs)
    return _plan_checked(client, checked, given)


def plan_parts_estimate(
    client: StackClient,
    model: str,
    labels: Sequence[str],
    checked: Sequence[CheckedEstimate],
    options: Sequence[EstimateOptions],
) -> EstimatePrediction:
    """Plan a job of several parts without running anything (``fanfit estimate --model qte|apos
    --plan-only``): as :func:`plan_estimate`, with the plan the job would run (every part's units
    in each stage's waves together, :attr:`~fanfit.jobs.documents.estimate.EstimatePlan.parts`).

    Parameters
    ----------
    client : StackClient
    model : str
        ``'qte'`` or ``'apos'``.
    labels, checked, options
        As :func:`submit_parts_job`.

    Returns
    -------
    EstimatePrediction
        With ``model`` and ``parts`` (each part's units per stage).

    Raises
    ------
    fanfit.errors.InvalidJobError
        As :func:`submit_parts_job` (a label missing, parts on other data).
    fanfit.errors.StackError
        The stack's outputs cannot be read.
    """
    _check_parts(labels, checked, options)
    parts = [PlanPart(label=label, dml=c.spec) for label, c in zip(labels, checked)]
    return _plan_checked(client, checked[0], options[0], model=model, parts=parts)


def _plan_checked(
    client: StackClient,
    checked: CheckedEstimate,
    given: EstimateOptions,
    *,
    model: str | None = None,
    parts: list[PlanPart] | None = None,
) -> EstimatePrediction:
    """The prediction of a checked job (of one, or of ``parts``) on the client's stack."""
    from fanfit.jobs.estimate.data import unit_signature
    from fanfit.jobs.estimate.projection import project_prediction
    from fanfit.jobs.estimate.wave import plan_job
    from fanfit.sched.resources import crossfit_memory_sizes
    from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY
    from fanfit.sched.throughput import EwmaThroughput, ThroughputEntry

    deadline_s, budget_usd = check_objective(given.deadline, given.budget)
    spec = checked.spec
    validated = checked.data
    folds = checked.folds if checked.folds is not None else dml.draw_spec_folds(spec, validated)
    n_obs = int(validated.y.shape[0])
    max_concurrency = checked.max_concurrency
    if max_concurrency is None:  # as submit_estimate and Prepare choose it
        max_concurrency = (os.cpu_count() or 1) if client.local else DEFAULT_ACCOUNT_CONCURRENCY
    specs = [p.dml for p in parts] if parts else [spec]
    plan = EstimatePlan(
        job_id="plan-only", dml=spec, model=model, parts=parts, data_key="", folds_key="",
        n_obs=n_obs, n_stages=max(dml.n_stages(s) for s in specs),
        max_concurrency=max_concurrency, units_per_shard=checked.units_per_shard,
        sharding=checked.sharding or "auto", weight=checked.weight, spec_sha256="",
        deadline_s=deadline_s, budget_usd=budget_usd,
    )  # fmt: skip
    outputs = _stack_outputs(client)
    sizes = crossfit_memory_sizes(outputs.get("CrossFitFunctionMemorySizes") or "1769")
    n_features = len(spec.x_cols) + spec.n_treat - 1
    signatures = {
        unit_signature(spec, u, n_obs, n_features)
        for stage in range(plan.n_stages)
        for u in plan.units(stage)
    }
    entries: list[ThroughputEntry] = []
    table = outputs.get("ThroughputTableName")
    if table:
        ddb = client.session.client("dynamodb", endpoint_url=client.stack.endpoint_url)
        loaded = storage.ThroughputRecords(table, ddb).load(signatures)
        entries = [ThroughputEntry.from_dict(e) for e in loaded]
    prediction = plan_job(
        plan,
        folds,
        EwmaThroughput(entries=entries),
        stack=client.stack.name,
        memory_sizes=sizes,
        gpu_enabled=outputs.get("GpuWorkerEnabled") == "true",
        account_concurrency=_account_concurrency(client),
    )
    if parts:
        planned = [
            PlannedPart(label=p.label, n_units=[sum(1 for u in plan.units(s) if u.part == k)
                                                for s in range(plan.n_stages)])
            for k, p in enumerate(parts)
        ]  # fmt: skip
        prediction = prediction.model_copy(update={"model": model, "parts": planned})
    if client.local:
        return prediction
    return project_prediction(prediction, spec)[0]
