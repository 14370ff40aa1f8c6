"""An estimate job checked on the client, without any stack: what ``--dry-run`` prints and what
:meth:`fanfit.client.Client.submit_estimate` checks before it uploads; and the one check against the
stack's outputs both submit paths make before they upload (:func:`check_gpu_worker`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fanfit import dml, errors, storage
from fanfit.client.data import (
    check_header_columns,
    doubleml_dtypes,
    in_place_uri,
    read_table,
    to_matrix,
)
from fanfit.client.options import EstimateOptions
from fanfit.dml.data import as_spec_dtypes
from fanfit.dml.models import model_def
from fanfit.jobs.documents import DataSource

__all__ = [
    "CheckedEstimate",
    "CheckedSource",
    "check_doubleml_estimate",
    "check_estimate",
    "check_estimate_in_place",
    "check_gpu_worker",
    "data_source",
    "stack_has_gpu_worker",
    "with_doubleml_dtypes",
]


@dataclass(frozen=True)
class CheckedEstimate:
    """An estimate job checked on the client, before anything is uploaded (:func:`check_estimate`).

    Attributes
    ----------
    spec : fanfit.dml.DMLSpec
        The validated spec.
    columns : list of str
        The data columns the job uses (y, d, x, z).
    values : ndarray of shape (n_obs, n_cols), float64
        Those columns, as they would be uploaded.
    data : fanfit.dml.DMLData
        The validated arrays.
    folds : ndarray of int64, shape (n_obs, n_rep), or None
        The user's folds, validated (with ``cluster_cols``: multiway cluster folds,
        :func:`fanfit.dml.validate_cluster_folds`); None when Prepare draws them from the seed.
    sharding : str
    max_concurrency, units_per_shard : int or None
    weight : float
        The job's weight in the fair shares of the account's concurrency, in (0, 100].
    """

    spec: dml.DMLSpec
    columns: list[str]
    values: np.ndarray
    data: dml.DMLData
    folds: np.ndarray | None
    sharding: str = "auto"
    max_concurrency: int | None = None
    units_per_shard: int | None = None
    weight: float = 1.0

    @property
    def n_fits(self) -> int:
        """Nuisance fits the job runs: n_treat x n_rep x prediction keys x cross-fitting folds
        (``n_folds ** len(cluster_cols)`` with clusters), over all stages."""
        return sum(len(dml.fit_units(self.spec, s)) for s in range(dml.n_stages(self.spec)))

    def describe(self) -> dict[str, Any]:
        """What would run, JSON-safe: ``model, score, n_obs, y_col, d_cols, x_cols, z_cols, n_folds,
        n_rep, n_treat, prediction_keys, n_fits, fits`` (the product spelled out, with the stages
        where the job runs in more than one: PQ and LPQ with repetitions), ``learners``
        (name -> canonical spec string),
        ``folds`` (``'drawn from seed <seed>'`` or ``'given'``), ``seed``, ``sharding``,
        ``max_concurrency``, ``units_per_shard``, ``weight``, ``boot_method``, ``n_rep_boot``,
        ``cluster_cols``, ``normalize_ipw``, ``subgroups`` (IIVM: the subgroups in effect),
        ``treatment_level`` (APO), ``t_col`` (DIDCS), ``in_sample_normalization`` (DID, DIDCS;
        None: DoubleML's default), ``s_col`` (SSM), ``treatment`` and ``quantile`` (PQ, CVaR)."""
        spec = self.spec
        keys = dml.prediction_keys(spec)
        folds = f"{spec.n_folds} folds"
        if spec.cluster_cols:
            folds = f"{spec.n_cross_folds} folds ({spec.n_folds} per cluster variable)"
        fits = f"{folds} x {spec.n_rep} repetitions x {len(keys)} learners ({', '.join(keys)})"
        if spec.n_treat > 1:
            fits += f" x {spec.n_treat} treatments"
        n_fits = f"{self.n_fits} fits"
        if (
            model_def(spec.model).fold_procedure_for(spec) is not None
        ):  # one unit per fold fits every key
            fits = f"{folds} x {spec.n_rep} repetitions, each fold fitting {', '.join(keys)}"
            n_fits = f"{self.n_fits} fold units (their nested fits inside)"
            if (n_stages := dml.n_stages(spec)) > 1:  # PQ, LPQ: start-free fits, then ml_g
                per_stage = " + ".join(str(len(dml.fit_units(spec, s))) for s in range(n_stages))
                n_fits = f"{self.n_fits} fold units in {n_stages} stages ({per_stage}; their nested fits inside)"
        return {
            "model": spec.model,
            "score": spec.score,
            "n_obs": self.data.n_obs,
            "y_col": spec.y_col,
            "d_cols": list(spec.d_cols),
            "x_cols": list(spec.x_cols),
            "z_cols": list(spec.z_cols),
            "n_folds": spec.n_folds,
            "n_rep": spec.n_rep,
            "n_treat": spec.n_treat,
            "prediction_keys": list(dml.prediction_keys(spec)),
            "n_fits": self.n_fits,
            "fits": f"{fits} = {n_fits}",
            "learners": {k: str(spec.learners[k]) for k in sorted(spec.learners)},
            "folds": "given" if self.folds is not None else f"drawn from seed {spec.seed}",
            "seed": spec.seed,
            "sharding": self.sharding,
            "max_concurrency": self.max_concurrency,
            "units_per_shard": self.units_per_shard,
            "weight": self.weight,
            "boot_method": spec.boot_method,
            "n_rep_boot": spec.n_rep_boot if spec.boot_method else None,
            "cluster_cols": list(spec.cluster_cols),
            "normalize_ipw": spec.normalize_ipw,
            "subgroups": (
                {"always_takers": spec.always_takers, "never_takers": spec.never_takers}
                if "subgroups" in model_def(spec.model).options
                else None
            ),
            "treatment_level": spec.treatment_level,
            "t_col": spec.t_col,
            "in_sample_normalization": spec.in_sample_normalization,
            "s_col": spec.s_col,
            "treatment": spec.treatment,
            "quantile": spec.quantile,
            "dtypes": spec.dtypes,
            "learner_params": spec.learner_params,
        }


def check_estimate(
    data: Any = None, *, s3: Any = None, options: EstimateOptions | None = None, **kwargs: Any
) -> CheckedEstimate:
    """Check an estimate job's spec and data without any stack: what :meth:`Client.submit_estimate`
    checks before it uploads, and what ``fanfit estimate --dry-run`` runs.

    Reads the data (a local file or DataFrame; an ``s3://`` URI through ``s3``), keeps the columns
    the job uses, and validates them (:func:`fanfit.dml.validate_data`: also IIVM one-sided
    noncompliance, :class:`fanfit.errors.OneSidedNoncomplianceError` naming ``subgroups``) with the options
    (:meth:`EstimateOptions.check`: the spec, the sharding options and the weight) and the folds
    (:func:`fanfit.dml.validate_folds`). The job computes in float64, whatever the storage types of
    the file's or the frame's columns (a Stata ``float`` column is float32 as pandas reads it; the
    fits see it as float64, as R's DoubleML does): only fanfit's DoubleML classes keep DoubleML's
    own dtypes (:func:`check_doubleml_estimate`).

    Parameters
    ----------
    data : str, path, DataFrame or s3:// URI
    s3 : boto3 S3 client, optional
        For an ``s3://`` URI.
    options : EstimateOptions, optional
        The options (its ``data`` is used when ``data`` is None); or give them as keywords
        (those of :class:`EstimateOptions`, or DoubleML's ``y_col``, ``d_cols``, ``x_cols``,
        ``z_cols``: :meth:`EstimateOptions.from_keywords`), as :meth:`Client.submit_estimate`
        takes them. Without ``x``, every column not y, d or z is a covariate
        (:meth:`EstimateOptions.with_data_columns`).

    Returns
    -------
    CheckedEstimate

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
        Naming the option, column, learner or fold that is wrong; OneSidedNoncomplianceError
        (an InvalidDataError) for IIVM data without always or never takers, naming ``subgroups``.
    TypeError
        An unknown keyword, or a required one (y, d) missing.
    """
    options = _options(data, options, kwargs)
    frame = None
    if options.x is None:  # DoubleML's x_cols=None: every other column of the data
        frame = read_table(options.data, s3)
        options = options.with_data_columns(list(frame.columns))
    spec, columns, weight = options.check()
    if frame is None:
        frame = read_table(options.data, s3)
    names, values = to_matrix(frame, columns)  # names a missing or non-numeric column
    dml_data = dml.validate_data(spec, names, values)
    fold_array = None
    if options.folds is not None:
        folds = options.folds
        raw = folds if isinstance(folds, np.ndarray) else dml.read_folds_csv(folds)
        fold_array = dml.validate_spec_folds(spec, dml_data, raw)
    return CheckedEstimate(
        spec=spec,
        columns=names,
        values=values,
        data=dml_data,
        folds=fold_array,
        sharding=options.sharding,
        max_concurrency=options.max_concurrency,
        units_per_shard=options.units_per_shard,
        weight=weight,
    )


def check_doubleml_estimate(frame: Any, options: EstimateOptions) -> CheckedEstimate:
    """:func:`check_estimate` of a DoubleML object's frame, computing in the dtypes DoubleML keeps.

    DoubleML computes in its data frame's dtypes (``DoubleMLData.y``/``.x`` are float32 when the
    columns are, as in the 401(k) Stata file read by ``pd.read_stata``); fanfit's DoubleML classes
    (:mod:`fanfit.client.doubleml`) must equal DoubleML's ``fit()``, so their jobs record those dtypes
    (:func:`with_doubleml_dtypes`) and every unit casts the float64 data back to them. Everything
    else (files, ``s3://`` objects, job files, frames handed to the client) computes in float64.

    Parameters
    ----------
    frame : pandas.DataFrame
        ``DoubleMLData.data``: the frame as DoubleML holds it.
    options : EstimateOptions
        The job's options (their ``data`` is replaced by ``frame``).

    Returns
    -------
    CheckedEstimate
        Its ``spec.dtypes`` the roles DoubleML computes in float32 (None when none), its ``data``
        cast to them.

    Raises
    ------
    As :func:`check_estimate`.
    """
    checked = check_estimate(options=options.replace(data=frame))
    spec = with_doubleml_dtypes(checked.spec, frame)
    if spec is checked.spec:
        return checked
    return dataclasses.replace(checked, spec=spec, data=as_spec_dtypes(spec, checked.data))


def with_doubleml_dtypes(spec: dml.DMLSpec, frame: Any) -> dml.DMLSpec:
    """``spec`` with the dtypes DoubleML computes ``frame``'s roles in
    (:attr:`fanfit.dml.DMLSpec.dtypes`, :func:`fanfit.client.data.doubleml_dtypes`): the data
    travel as float64 and every unit casts them back (:func:`fanfit.dml.validate_data`).

    Parameters
    ----------
    spec : fanfit.dml.DMLSpec
    frame : pandas.DataFrame
        The user's data, as read (:func:`~fanfit.client.data.read_table`) or as DoubleML holds it.

    Returns
    -------
    fanfit.dml.DMLSpec
        ``spec`` itself when every role is float64.
    """
    dtypes = doubleml_dtypes(frame, spec)
    if dtypes == (spec.dtypes or {}):
        return spec
    spec = dataclasses.replace(spec, dtypes=dtypes or None)
    spec.validate()
    return spec


def _options(data: Any, options: EstimateOptions | None, kwargs: dict[str, Any]) -> EstimateOptions:
    """The options of :func:`check_estimate`: ``options`` (with ``data`` when given) or the keywords."""
    if options is None:
        return EstimateOptions.from_keywords(data=data, **kwargs)
    if kwargs:
        raise TypeError(f"check_estimate: give options or keywords, not both ({', '.join(kwargs)})")
    return options if data is None else options.replace(data=data)


@dataclass(frozen=True)
class CheckedSource:
    """An estimate job whose data is used in place (:func:`check_estimate_in_place`): checked on
    its header only; Prepare reads the object, validates the data and the folds.

    Attributes
    ----------
    spec : fanfit.dml.DMLSpec
    columns : list of str
        The data columns the job uses (y, d, x, z), all in the source's header.
    source : fanfit.jobs.documents.DataSource
        The object and the version (ETag, VersionId) read; the job's ``data_source``.
    size : int
        The object's size, bytes.
    folds : ndarray of int64, shape (n_obs, n_rep), or None
        The user's folds as read, checked by Prepare against the data.
    sharding, max_concurrency, units_per_shard, weight
        As in :class:`CheckedEstimate`.
    """

    spec: dml.DMLSpec
    columns: list[str]
    source: DataSource
    size: int
    folds: np.ndarray | None
    sharding: str = "auto"
    max_concurrency: int | None = None
    units_per_shard: int | None = None
    weight: float = 1.0


def data_source(client: Any, data: Any) -> storage.SourceHeader | None:
    """The header of ``data`` when a job on ``client``'s stack uses it in place, else None.

    In place: an ``s3://`` URI (a str) of a ``.csv``, ``.npz`` or ``.npy`` object in the stack's
    bucket or in the bucket of its ``ExternalDataBucketName`` output (read from the stack's outputs
    only for a URI in another bucket). The header is read by :func:`fanfit.storage.read_source_header`
    (a ranged GET of a CSV's first bytes; the data itself is not downloaded).

    Raises
    ------
    fanfit.errors.InvalidDataError
        The object is missing or has no readable header.
    fanfit.errors.StackError
        The stack's outputs cannot be read.
    """
    if not isinstance(data, str) or not data.startswith("s3://"):
        return None
    buckets = {client.store.bucket}
    bucket, key = storage.parse_s3_uri(data)
    if storage.source_format(key) is None:
        return None  # .parquet, .dta: downloaded and uploaded
    if bucket not in buckets:
        external = _stack_outputs(client).get("ExternalDataBucketName")
        if external:
            buckets.add(external)
    if in_place_uri(data, buckets) is None:
        return None
    return storage.read_source_header(client.s3, data)


def check_estimate_in_place(
    client: Any, data: Any = None, *, options: EstimateOptions | None = None, **kwargs: Any
) -> CheckedSource | None:
    """Check an estimate job whose data is used in place, from the data's header only.

    Parameters
    ----------
    client : fanfit.client.Client
    data, options, **kwargs
        As :func:`check_estimate` takes them.

    Returns
    -------
    CheckedSource or None
        None when the data is not used in place (:func:`data_source`): then
        :func:`check_estimate` reads it whole.

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidLearnerError
        An option or learner that is wrong (:meth:`EstimateOptions.check`).
    fanfit.errors.InvalidDataError
        A column the job uses is not in the header (the message lists those there are), or the
        object is missing or has no readable header. Values (numbers, NaN, a binary treatment) and
        the folds are checked by Prepare, which reads the object.
    """
    options = _options(data, options, kwargs)
    header = data_source(client, options.data)
    if header is None:
        return None
    if options.x is None:  # DoubleML's x_cols=None: every other column of the data
        options = options.with_data_columns(header.columns)
    spec, columns, weight = options.check()
    check_header_columns(header.columns, columns, header.obj.uri)
    folds = options.folds
    fold_array = None
    if folds is not None:
        raw = folds if isinstance(folds, np.ndarray) else dml.read_folds_csv(folds)
        fold_array = np.asarray(raw, dtype=np.int64)
    return CheckedSource(
        spec=spec,
        columns=list(columns),
        source=DataSource.of(header.obj),
        size=header.size,
        folds=fold_array,
        sharding=options.sharding,
        max_concurrency=options.max_concurrency,
        units_per_shard=options.units_per_shard,
        weight=weight,
    )


def stack_has_gpu_worker(outputs: Mapping[str, str]) -> bool:
    """Whether a stack has the GPU worker, from its CloudFormation outputs: ``GpuWorkerEnabled``
    (``"true"``/``"false"``, template parameter ``EnableGpuWorker``), or on a stack deployed before
    that output existed, a ``GpuJobQueueArn`` output."""
    flag = outputs.get("GpuWorkerEnabled")
    if flag is not None:
        return str(flag).strip().lower() == "true"
    return bool(outputs.get("GpuJobQueueArn"))


def _stack_outputs(client: Any) -> dict[str, str]:
    """The client's stack outputs, read once per client (``DescribeStacks``)."""
    cached: dict[str, str] | None = client.__dict__.get("_stack_outputs")
    if cached is not None:
        return cached
    try:
        cfn = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
        desc = cfn.describe_stacks(StackName=client.stack.name)["Stacks"][0]
    except Exception as exc:  # botocore ClientError, EndpointConnectionError
        raise errors.StackError(
            f"cannot read the outputs of stack {client.stack.name!r}: {exc}"
        ) from exc
    outputs = {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}
    client.__dict__["_stack_outputs"] = outputs
    return outputs


def check_gpu_worker(
    client: Any, *, learners: Mapping[str, Any] | None = None, gpu_workers: int = 0
) -> None:
    """Refuse a job that needs the GPU worker on a stack without it, before anything is uploaded.

    A learner that must run on the GPU worker (a Torch learner: ``LearnerSpec.requires_gpu``) or
    ``gpu_workers > 0`` (a train job) needs the stack's GPU worker (AWS Batch), which a stack
    deployed with ``EnableGpuWorker=false`` (the template's default) does not have.

    Parameters
    ----------
    client : fanfit.client.Client
        Its stack's outputs are read once (``GpuWorkerEnabled``; :func:`stack_has_gpu_worker`).
    learners : mapping of str to LearnerSpec, optional
        The estimate's nuisance learners (``ml_l``, ``ml_m``, ...).
    gpu_workers : int
        The train job's GPU workers.

    Raises
    ------
    fanfit.errors.GpuWorkerDisabledError
        The job needs the GPU worker and the stack has none: the message names the learner (or
        ``--gpu-workers`` / ``gpu_workers``) and says to redeploy with ``EnableGpuWorker=true``.
    fanfit.errors.StackError
        The stack's outputs cannot be read.
    """
    needs = [
        f"learner {name}={getattr(spec, 'name', spec)!r} runs only on the GPU worker (PyTorch)"
        for name, spec in sorted((learners or {}).items())
        if getattr(spec, "requires_gpu", False)
    ]
    if gpu_workers > 0:
        needs.append(f"--gpu-workers (gpu_workers={gpu_workers}) asks for GPU workers")
    if not needs or stack_has_gpu_worker(_stack_outputs(client)):
        return
    raise errors.GpuWorkerDisabledError(
        f"{'; '.join(needs)}, but stack {client.stack.name!r} has no GPU worker (deployed with "
        "EnableGpuWorker=false, the default): redeploy it with `sam deploy --parameter-overrides "
        "EnableGpuWorker=true BatchSubnetIds=... BatchSecurityGroupIds=... "
        "GpuWorkerImageUri=...` (docs/deploy.md), or use a learner that runs on Lambda."
    )
