"""Prepare: validate an estimate job, write its plan and folds, and write each stage's units."""

from __future__ import annotations

import hashlib
import json
import time

from fanfit import dml, storage
from fanfit.dml.gt_subsets import draw_gt_folds
from fanfit.dml.models import model_def
from fanfit.errors import InvalidDocumentError, InvalidJobError
from fanfit.jobs import sharing
from fanfit.jobs.documents.estimate import (
    EstimatePlan,
    EstimateSpec,
    PlanPart,
    PrepareOutput,
    StageInputs,
    StepRecord,
    to_json_list,
    unit_doc,
)
from fanfit.jobs.estimate.data import (
    cached_data,
    gather_outputs,
    load,
    peak_rss_mb,
    read_plan,
    select_part,
    stage_outputs,
)
from fanfit.jobs.estimate.demand import stage_demand
from fanfit.jobs.source import materialize_source
from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY

#: GPU worker jobs an estimate asks for when a learner needs the GPU worker (``requires_gpu``).
GPU_DEMAND = 1


def prepare_stage(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    spec_key: str,
    stage: int,
    execution_arn: str = "",
    memory_mb: int = 0,
    partitions: storage.Partitions | None = None,
) -> PrepareOutput:
    """Plan one stage of an estimate job.

    Stage 0 validates the spec (:class:`~fanfit.jobs.documents.estimate.EstimateSpec`, its ``dml``
    section by :meth:`fanfit.dml.DMLSpec.from_dict`) and the data (:func:`fanfit.dml.validate_data`,
    which also refuses IIVM one-sided noncompliance without ``subgroups``), writes the folds (drawn
    from the seed, multiway cluster folds with ``cluster_cols``, or the validated folds the client
    uploaded) and the plan
    (:class:`~fanfit.jobs.documents.estimate.EstimatePlan`), and marks the job RUNNING.
    A later stage computes its inputs from the predictions (and the units' auxiliary arrays) of
    the stages before it (:func:`fanfit.dml.stage_inputs`: PQ's and LPQ's chain of IPW searches runs
    here, between their two stages). A model with ``ModelDef.client_inputs`` (any part's) gets no
    stage inputs from Prepare, for any stage: the client writes them while the execution waits
    (:mod:`fanfit.jobs.estimate.client_inputs`). Every stage writes its units
    (:func:`fanfit.storage.units_key`) and what it measured (:func:`fanfit.storage.prepare_record_key`).

    Parameters
    ----------
    store, records : JobStore, JobRecords
    job_id : str
    spec_key : str
        Key of the client's spec (:class:`~fanfit.jobs.documents.estimate.EstimateSpec`).
    stage : int
        0 for the first stage.
    execution_arn : str
        The Step Functions execution, recorded in the job record and with the job's partition
        (so that other jobs drop the partition once this execution no longer runs).
    memory_mb : int
        The function's configured memory (for the cost estimate, and the check that a
        ``data_source`` fits it; 0: not checked).
    partitions : Partitions, optional
        The stack's partition table: the job registers (stage 0: it arrives) or updates (a later
        stage) its demand, the stage's unit count capped by its ``max_concurrency``, with its
        ``weight``, and every running job's partition is recomputed
        (:func:`fanfit.jobs.sharing.register_job`). A stage with a unit whose learner needs the GPU
        worker (``requires_gpu``) also asks for :data:`GPU_DEMAND` GPU slot.

    Returns
    -------
    PrepareOutput
        The stage's unit count and whether a stage follows; :func:`~fanfit.jobs.estimate.wave.
        schedule_wave` cuts the units into shards. For a client-inputs model also whether the
        stage's inputs (``client_inputs_ready``) and, at the last stage, the client's estimate
        (``client_estimate_ready``) already exist in S3 (a resumed job: no wait).

    Raises
    ------
    InvalidJobError, InvalidDocumentError, InvalidDataError, InvalidFoldsError, InvalidLearnerError
        When the spec (the message names the field), the data or the folds are wrong (the execution
        then fails with that name).
    """
    started = time.time()
    if stage == 0:
        plan = _write_plan(store, job_id, spec_key, memory_mb)
        records.mark_running(
            job_id,
            execution_arn=execution_arn,
            model=plan.model or plan.dml.model,
            score=plan.dml.score,
            n_stages=plan.n_stages,
            # a resumed job starts again without the error of its failed execution
            error=None,
            cause=None,
            failed_shard=None,
            shard_error=None,
        )
    else:
        plan = read_plan(store, storage.plan_key(job_id))
        if not 0 < stage < plan.n_stages:
            raise InvalidJobError(f"stage must be in 1..{plan.n_stages - 1}, got {stage}")
    client_inputs = _client_inputs(plan)
    if stage > 0 and not client_inputs:  # a client-inputs model's client writes them
        _write_stage_inputs(store, job_id, plan, stage)
    spec = plan.dml  # the learners, shared by every part
    units = plan.units(stage)
    store.put_json(storage.units_key(job_id, stage), to_json_list([unit_doc(u) for u in units]))
    if partitions is not None and units:
        on_gpu = any(spec.learners[dml.learner_name(u.learner)].requires_gpu for u in units)
        sharing.register_job(
            partitions,
            job_id,
            "estimate",
            demand=stage_demand(len(units), plan.max_concurrency),
            gpu_demand=GPU_DEMAND if on_gpu else 0,
            weight=plan.weight,
            execution_arn=execution_arn,
        )
    record = StepRecord(
        started_at=started,
        ended_at=time.time(),
        memory_mb=memory_mb,
        n_units=len(units),
        peak_rss_mb=peak_rss_mb(),
    )
    store.put_json(storage.prepare_record_key(job_id, stage), record.to_json_dict())
    has_next_stage = stage + 1 < plan.n_stages
    return PrepareOutput(
        job_id=job_id,
        spec_key=spec_key,
        plan_key=storage.plan_key(job_id),
        stage=stage,
        n_units=len(units),
        has_next_stage=has_next_stage,
        next_stage=stage + 1,
        client_inputs=client_inputs,
        # a resumed job whose client already sent them goes on without waiting
        client_inputs_ready=client_inputs and _stage_inputs_exist(store, job_id, plan, stage),
        client_estimate_ready=(
            client_inputs
            and not has_next_stage
            and store.exists(storage.client_estimate_key(job_id))
        ),
    )


def _client_inputs(plan: EstimatePlan) -> bool:
    """Whether the job's model (any part's) takes its stage inputs and its estimate from the
    client (:attr:`fanfit.dml.ModelDef.client_inputs`)."""
    return any(model_def(spec.model).client_inputs for spec in plan.specs)


def _stage_inputs_exist(
    store: storage.JobStore, job_id: str, plan: EstimatePlan, stage: int
) -> bool:
    """Whether the inputs of ``stage`` of every part that has the stage are in S3."""
    return all(
        store.exists(storage.stage_inputs_key(job_id, stage, part))
        for part, spec in enumerate(plan.specs)
        if stage < dml.n_stages(spec)
    )


def _write_stage_inputs(
    store: storage.JobStore, job_id: str, plan: EstimatePlan, stage: int
) -> None:
    """Compute each part's inputs of ``stage`` (> 0) from the earlier stages and write them to
    :func:`fanfit.storage.stage_inputs_key` (:func:`fanfit.dml.stage_inputs`)."""
    # the earlier stages' predictions and auxiliary arrays (PQ/LPQ: stage 0's preliminary
    # propensities, from which stage_inputs runs DoubleML's chain of IPW searches), per part
    outputs = stage_outputs(store, job_id, range(stage))
    for part, part_spec in enumerate(plan.specs):
        if stage >= dml.n_stages(part_spec):
            continue  # this part is done (a job of several parts runs each part's stages)
        data, folds = load(store, plan, part)
        preds, aux = gather_outputs(store, job_id, part_spec, data, folds, range(stage),
                                    part=part, outputs=outputs)  # fmt: skip
        raw = dml.stage_inputs(part_spec, stage, data, folds, preds, aux)
        store.put_json(storage.stage_inputs_key(job_id, stage, part),
                       StageInputs.parse(raw).to_json_dict())  # fmt: skip
    del outputs


def _write_plan(
    store: storage.JobStore, job_id: str, spec_key: str, memory_mb: int = 0
) -> EstimatePlan:
    """Validate the spec at ``spec_key`` and the data, draw or check the folds, write the plan.

    A spec with a ``data_source`` (the user's ``s3://`` object used in place) has its columns read
    and written as the content-addressed data object first (:func:`fanfit.jobs.source.materialize_source`);
    the plan names that object.

    Raises
    ------
    InvalidJobError
        The spec is not JSON.
    InvalidDocumentError
        The spec does not fit :class:`~fanfit.jobs.documents.estimate.EstimateSpec` (named field),
        or ``folds_key`` lies outside the job.
    InvalidDataError, InvalidFoldsError, InvalidLearnerError
        From the ``dml`` section, the data or the folds; for a ``data_source`` also
        DataBucketNotAllowedError, DataSourceChangedError (InvalidDataError) and LambdaLimitError.
    """
    raw = store.get_bytes(spec_key)
    spec_sha256 = hashlib.sha256(raw).hexdigest()
    try:
        decoded = json.loads(raw)
    except ValueError as exc:
        raise InvalidJobError(f"{spec_key} is not JSON: {exc}") from exc
    # Resuming (fanfit resume): the plan of this very spec is already written; keep it and its
    # folds, so that the shards written before keep their meaning.
    existing = _existing_plan(store, job_id, spec_sha256)
    if existing is not None:
        return existing
    # Every field is checked before anything is allocated or written.
    job = EstimateSpec.parse(decoded, source=spec_key)
    if job.folds_key is not None:
        storage.check_job_key(job.folds_key, job_id, field="folds_key")
    parts = [PlanPart(label=p.label, dml=_part_spec(p.dml, p.label)) for p in job.parts or ()]
    specs = [p.dml for p in parts] or [dml.DMLSpec.from_dict(job.dml)]
    spec = specs[0]
    _check_parts_share(specs)
    if job.data_source is not None:
        used = list(dict.fromkeys(c for s in specs for c in s.used_cols))
        data_key = materialize_source(
            store, job.data_source, used, memory_mb=memory_mb, function="Prepare"
        )
    else:  # EstimateSpec names exactly one of data_key and data_source
        data_key = storage.check_data_key(job.data_key)
    if job.parts and job.parts[0].select is not None:
        # DIDMulti: each part selects its rows and derives its columns, with its own folds
        parts = _selecting_parts(store, job_id, job, parts, data_key)
        folds_key, n_obs = parts[0].folds_key, parts[0].n_obs
        assert folds_key is not None and n_obs is not None
    else:
        columns, values = cached_data(store.bucket, data_key)
        # every part's columns and values (named errors), then the first
        for part_spec in specs[1:]:
            dml.validate_data(part_spec, list(columns), values)
        data = dml.validate_data(spec, list(columns), values)
        n_obs = data.y.shape[0]
        # with cluster_cols: multiway cluster folds (n_folds ** len(cluster_cols) of them); one
        # sample splitting for every part, as DoubleMLQTE and DoubleMLAPOS split once
        if job.folds_key:
            folds = dml.validate_spec_folds(spec, data, store.get_array(job.folds_key))
        else:
            folds = dml.draw_spec_folds(spec, data)
        del data
        folds_key = store.put_array(storage.folds_key(job_id), folds)
    plan = EstimatePlan(
        job_id=job_id,
        dml=spec,
        model=job.model,
        parts=parts or None,
        data_key=data_key,
        folds_key=folds_key,
        n_obs=n_obs,
        n_stages=max(dml.n_stages(s) for s in specs),
        max_concurrency=job.max_concurrency or DEFAULT_ACCOUNT_CONCURRENCY,
        units_per_shard=job.units_per_shard,
        sharding=job.sharding or "auto",
        weight=job.weight,
        spec_sha256=spec_sha256,
        deadline_s=job.deadline_s,
        budget_usd=job.budget_usd,
    )
    store.put_json(storage.plan_key(job_id), plan.to_json_dict())
    return plan


def _selecting_parts(
    store: storage.JobStore,
    job_id: str,
    job: EstimateSpec,
    parts: list[PlanPart],
    data_key: str,
) -> list[PlanPart]:
    """The parts of a job whose parts select their rows (DIDMulti's group-time combinations),
    each with its own folds and row count: its data derived (:func:`fanfit.jobs.estimate.data.
    select_part`) and validated, its folds the client's (``folds_key`` of the part, checked
    against its rows as DoubleML's ``set_sample_splitting`` checks them) or drawn from the seed,
    stratified as DoubleML stratifies them (:func:`fanfit.dml.gt_subsets.draw_gt_folds`), and written
    to :func:`fanfit.storage.folds_key` of the part.

    Raises
    ------
    InvalidDocumentError
        A part's ``folds_key`` outside the job.
    InvalidDataError, InvalidFoldsError
        ``"part '<label>': <what is wrong>"``: its rows (no control unit, a column missing), its
        data or its folds.
    """
    columns, values = cached_data(store.bucket, data_key)
    out = []
    for k, (given, part) in enumerate(zip(job.parts or (), parts, strict=True)):
        assert given.select is not None  # EstimateSpec: every part selects, or none
        spec = part.dml
        try:
            derived_cols, derived = select_part(given.select, columns, values, spec.x_cols)
            data = dml.validate_data(spec, derived_cols, derived)
            if given.folds_key is not None:
                storage.check_job_key(given.folds_key, job_id, field=f"parts[{k}].folds_key")
                folds = dml.validate_spec_folds(spec, data, store.get_array(given.folds_key))
            else:
                # DoubleML's strata: G_indicator (+ 2 t_indicator for repeated cross-sections)
                strata = derived[:, derived_cols.index("G_indicator")]
                if not given.select.panel:
                    strata = strata + 2 * derived[:, derived_cols.index("t_indicator")]
                folds = draw_gt_folds(strata, spec.n_folds, spec.n_rep, spec.seed, k)
        except InvalidJobError as exc:  # InvalidDataError, InvalidFoldsError, ...
            raise type(exc)(f"part {part.label!r}: {exc}") from exc
        key = store.put_array(storage.folds_key(job_id, k), folds)
        update = {"select": given.select, "folds_key": key, "n_obs": int(data.y.shape[0])}
        out.append(part.model_copy(update=update))
    return out


def _part_spec(raw: dict, label: str) -> dml.DMLSpec:
    """A part's validated spec; its errors name the part.

    Raises
    ------
    InvalidJobError (or its subclass)
        ``"part '<label>': <what is wrong>"``.
    """
    try:
        return dml.DMLSpec.from_dict(raw)
    except InvalidJobError as exc:
        raise type(exc)(f"part {label!r}: {exc}") from exc


def _check_parts_share(specs: list[dml.DMLSpec]) -> None:
    """The parts of one job share the learners, the sample splitting and the seed (parts that
    select their rows, DIDMulti's combinations, share ``n_folds`` and ``n_rep``, each its own
    folds over its rows: :func:`_selecting_parts`).

    Raises
    ------
    InvalidJobError
        Naming the first part that differs and the option.
    """
    first = specs[0]
    for k, spec in enumerate(specs[1:], start=1):
        for name in ("learners", "n_folds", "n_rep", "seed", "cluster_cols"):
            if getattr(spec, name) != getattr(first, name):
                raise InvalidJobError(
                    f"part {k} has other {name} than part 0: the parts of one job share the "
                    "learners and the sample splitting"
                )


def _existing_plan(store: storage.JobStore, job_id: str, spec_sha256: str) -> EstimatePlan | None:
    """The job's plan if Prepare already wrote it from the same spec (and its folds exist); a plan
    that does not parse (an older version's) is written again."""
    key = storage.plan_key(job_id)
    if not store.exists(key):
        return None
    try:
        plan = read_plan(store, key)
    except InvalidDocumentError:
        return None
    if plan.spec_sha256 != spec_sha256 or not store.exists(plan.folds_key):
        return None
    return plan
