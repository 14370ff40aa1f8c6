"""Starting estimate jobs: check, upload and start a job (:func:`submit_estimate`) or one job of
several parts (:func:`submit_parts_job`)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from fanfit import errors, storage
from fanfit.client.check import (
    CheckedEstimate,
    CheckedSource,
    check_estimate,
    check_estimate_in_place,
    check_gpu_worker,
)
from fanfit.client.estimate.handles import EstimateJob
from fanfit.client.jobs import StackClient, record_submission
from fanfit.client.options import EstimateOptions, check_objective
from fanfit.jobs.documents.estimate import EstimateSpec, PartSelect, SpecPart

__all__ = ["same_data", "submit_estimate", "submit_parts_job"]


def submit_estimate(
    client: StackClient,
    data: Any = None,
    *,
    job_id: str | None = None,
    options: EstimateOptions | None = None,
    **kwargs: Any,
) -> EstimateJob:
    """Check, upload and start an estimate job (:meth:`fanfit.client.Client.submit_estimate`).

    Parameters
    ----------
    client : StackClient
        A :class:`fanfit.client.Client`.
    data : str, path, DataFrame, s3:// URI or CheckedEstimate
        An ``s3://`` URI of a ``.csv``, ``.npz`` or ``.npy`` object in the stack's bucket (or in
        the bucket of its ``ExternalDataBucketName`` parameter) is used in place: only its header
        is read here (:func:`~fanfit.client.check.check_estimate_in_place`) and Prepare reads the
        object. Any other data is read, checked and uploaded (once, by content hash). A
        :class:`~fanfit.client.check.CheckedEstimate` of ``options`` (what
        :func:`~fanfit.client.check.check_estimate` returned for them) is uploaded as checked,
        not checked again (:func:`fanfit.client.parts.submit_parts`).
    job_id : str, optional
        Default ``est-<date>-<time>-<8 hex>``.
    options : EstimateOptions, optional
        The options; or give them as keywords (those of :class:`EstimateOptions`).

    Returns
    -------
    EstimateJob

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
        Before anything is uploaded, when an option, a column, a learner or the folds are wrong.
    fanfit.errors.LambdaLimitError
        The data would not fit a function's memory (:meth:`Client.check_limits`).
    fanfit.errors.GpuWorkerDisabledError
        A Torch learner on a stack without the GPU worker (:func:`~fanfit.client.check.check_gpu_worker`).
    TypeError
        A CheckedEstimate without ``options`` or with keywords.
    """
    checked: CheckedEstimate | CheckedSource | None
    if isinstance(data, CheckedEstimate):  # checked by the caller (fanfit.client.parts)
        if options is None or kwargs:
            raise TypeError(
                "submit_estimate: a CheckedEstimate comes with options=, the options it was "
                "checked with, and no other keywords"
            )
        checked = data
    else:
        # s3:// data in the stack's (or the external) bucket: checked on its header, used in place.
        checked = check_estimate_in_place(client, data, options=options, **kwargs)
    if checked is None:
        checked = check_estimate(data, s3=client.s3, options=options, **kwargs)
    given = options if options is not None else EstimateOptions.from_keywords(data=data, **kwargs)
    return _launch(client, checked, given, job_id=job_id)


def submit_parts_job(
    client: StackClient,
    model: str,
    labels: Sequence[str],
    checked: Sequence[CheckedEstimate],
    options: Sequence[EstimateOptions],
    *,
    job_id: str | None = None,
    selects: Sequence[PartSelect] | None = None,
    data: tuple[Sequence[str], np.ndarray] | None = None,
    boot_method: str | None = None,
    n_rep_boot: int | None = None,
) -> EstimateJob:
    """Start one job of several parts: a model DoubleML fits as several models (``'qte'``: one
    ``pq``/``cvar``/``lpq`` part per quantile and treatment level; ``'apos'``: one ``apo`` part
    per level) on one data upload, one sample splitting and one set of learners; its units fan out
    together, one barrier per stage serves every part (:attr:`fanfit.jobs.documents.estimate.
    EstimatePlan.parts`). :meth:`EstimateJob.part` gives each part's estimate, spec and predictions.

    With ``selects`` and ``data`` (``'did_multi'``: one ``did`` part per group-time combination)
    the job's one upload is ``data`` (the panel in long format), from which each part selects its
    rows and derives its columns in the pipeline (:class:`~fanfit.jobs.documents.estimate.
    PartSelect`); each part's ``checked`` is then its derived data as the client checked it, and
    its folds (over its own rows) are uploaded per part.

    Parameters
    ----------
    client : StackClient
    model : str
        The job's model (``'qte'``, ``'apos'``).
    labels : sequence of str
        Each part's label (``"quantile 0.5 of treatment 1"``).
    checked : sequence of CheckedEstimate
        Each part checked (:func:`fanfit.client.parts.check_parts`), the same columns, folds and
        learners in each; the first part's data, folds and job options are the job's.
    options : sequence of EstimateOptions
        Each part's options, as checked; the first part's job options (``deadline``,
        ``budget``) are the job's.
    job_id : str, optional
    selects : sequence of PartSelect, optional
        Each part's selection from ``data``, in the parts' order.
    data : (columns, values), optional
        The job's data with ``selects``: column names and an (n_rows, n_cols) float64 array.
    boot_method : {'normal', 'Bayes', 'wild'} or None
        The multiplier bootstrap of the combined result (QTE's effects, APOS's levels and
        contrasts: their joint bands), seeded by the job's seed; None: none.
    n_rep_boot : int, optional
        Its draws (default 500).

    Returns
    -------
    EstimateJob

    Raises
    ------
    fanfit.errors.InvalidJobError
        No part, a label missing, parts on other columns, a bad bootstrap option, ``selects``
        without ``data`` (or not one per part), or a part without folds next to ``selects``.
    fanfit.errors.LambdaLimitError, fanfit.errors.GpuWorkerDisabledError
        As :func:`submit_estimate`.
    """
    selecting = selects is not None or data is not None
    _check_parts(labels, checked, options, one_data=not selecting)
    first = checked[0]
    if boot_method is not None:
        from fanfit.dml.combined import check_bootstrap

        n_rep_boot = 500 if n_rep_boot is None else n_rep_boot
        check_bootstrap(boot_method, n_rep_boot)
    boot = (boot_method, None if boot_method is None else n_rep_boot)
    if selecting:
        if selects is None or data is None or len(selects) != len(checked):
            raise errors.InvalidJobError(
                "parts that select their rows need the data and one selection per part"
            )
        if any(c.folds is None for c in checked):
            raise errors.InvalidJobError("parts that select their rows are given their folds")
        parts = [
            SpecPart(label=label, dml=c.spec.to_dict(), select=select)
            for label, c, select in zip(labels, checked, selects)
        ]
        part_folds = [np.asarray(c.folds) for c in checked]
        return _launch(client, first, options[0], job_id=job_id, model=model, parts=parts,
                       data=(list(data[0]), np.asarray(data[1])), part_folds=part_folds,
                       boot=boot)  # fmt: skip
    parts = [SpecPart(label=label, dml=c.spec.to_dict()) for label, c in zip(labels, checked)]
    return _launch(client, first, options[0], job_id=job_id, model=model, parts=parts, boot=boot)


def _check_parts(
    labels: Sequence[str],
    checked: Sequence[CheckedEstimate],
    options: Sequence[EstimateOptions],
    *,
    one_data: bool = True,
) -> None:
    """One label and one options per checked part and, with ``one_data``, every part on the first
    part's data.

    Raises
    ------
    fanfit.errors.InvalidJobError
        No part, a label or options missing, or a part on other data (naming it).
    """
    if not checked or not len(labels) == len(checked) == len(options):
        raise errors.InvalidJobError(
            f"a job of several parts needs one label and one options per part, got "
            f"{len(labels)} labels and {len(options)} options for {len(checked)} parts"
        )
    first = checked[0]
    for label, part in zip(labels, checked):
        if one_data and not same_data(first, part):
            raise errors.InvalidJobError(
                f"part {label!r} runs on other data than the first part (columns {part.columns} "
                f"against {first.columns}): the parts of one job run on one data object"
            )


def same_data(a: CheckedEstimate, b: CheckedEstimate) -> bool:
    """Whether two checked parts run on the same data object: the same columns and values."""
    return a.columns == b.columns and np.array_equal(a.values, b.values, equal_nan=True)


def _launch(
    client: StackClient,
    checked: CheckedEstimate | CheckedSource,
    given: EstimateOptions,
    *,
    job_id: str | None = None,
    model: str | None = None,
    parts: list[SpecPart] | None = None,
    data: tuple[list[str], np.ndarray] | None = None,
    part_folds: list[np.ndarray] | None = None,
    boot: tuple[str | None, int | None] = (None, None),
) -> EstimateJob:
    """Upload the checked data and folds, write the spec and start the execution; ``data`` in
    place of the checked data (parts that select their rows from it), with each part's folds
    (``part_folds``) in place of the job's."""
    deadline_s, budget_usd = check_objective(given.deadline, given.budget)
    spec, fold_array = checked.spec, checked.folds
    check_gpu_worker(client, learners=spec.learners)  # a Torch learner needs EnableGpuWorker=true
    max_concurrency = checked.max_concurrency
    if max_concurrency is None:
        max_concurrency = (os.cpu_count() or 1) if client.local else None
    if isinstance(checked, CheckedEstimate):
        # Data over a function's memory (or /tmp, or the state limit) is rejected before launch;
        # data used in place is checked by Prepare, which reads it.
        n_rows, n_cols = (data[1] if data is not None else checked.values).shape
        client.check_limits("estimate", n_rows=int(n_rows), n_cols=int(n_cols))

    job_id = job_id or f"est-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    folds_key = None
    if part_folds is not None and parts is not None:
        parts = [
            part.model_copy(update={"folds_key": client.store.put_array(
                storage.input_folds_key(job_id, k), folds)})
            for k, (part, folds) in enumerate(zip(parts, part_folds, strict=True))
        ]  # fmt: skip
    elif fold_array is not None:
        folds_key = client.store.put_array(storage.input_folds_key(job_id), fold_array)
    if data is not None:
        data_key, source = client.store.put_data(*data), None
    elif isinstance(checked, CheckedEstimate):
        data_key, source = client.store.put_data(checked.columns, checked.values), None
    else:
        data_key, source = None, checked.source
    # The document Prepare validates (EstimateSpec), written through its model.
    job = EstimateSpec(
        dml=spec.to_dict(),
        model=model,
        parts=parts,
        data_key=data_key,
        data_source=source,
        folds_key=folds_key,
        max_concurrency=max_concurrency,
        units_per_shard=checked.units_per_shard,
        sharding=checked.sharding,
        weight=checked.weight,
        deadline_s=deadline_s,
        budget_usd=budget_usd,
        boot_method=boot[0],
        n_rep_boot=boot[1],
    )
    key = client.store.put_json(storage.spec_key(job_id), job.to_json_dict())
    started = client.sfn.start_execution(
        stateMachineArn=client.stack.estimate_state_machine_arn,
        name=job_id,
        input=json.dumps({"job_id": job_id, "spec_key": key}),
    )
    record_submission(client, job_id, "estimate", started["executionArn"])
    return EstimateJob(client, job_id, started["executionArn"])
