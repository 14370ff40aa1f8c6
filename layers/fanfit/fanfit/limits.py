"""Lambda's limits, checked before a job is launched.

Data go to the functions by S3 reference, so Lambda's 6 MB synchronous payload limit does not apply
to them; what does (AWS Lambda quotas; Step Functions service quotas):

- **memory**: every function that reads the data set (Prepare, CrossFit, Aggregate; TrainInit,
  TrainShard, TrainReduce) holds it as a float64 array, plus copies (validation splits it into y, d, X
  and learners copy X again, e.g. scikit-learn's trees to float32 Fortran order), on top of the
  runtime itself. fanfit estimates a function's peak as
  ``baseline_mb + overhead_factor * data_bytes / 2**20`` and compares it with its ``MemorySize``
  (128-10,240 MB);
- **/tmp** (ephemeral storage): 512 MB by default, up to 10,240 MB;
- **Step Functions state**: a state's input or output is at most 256 KB (262,144 bytes), which is
  why state carries S3 keys and small numbers only.

Each check raises :class:`fanfit.errors.LambdaLimitError` saying what exceeds what and how to fix it
(run the heavy stage on AWS Batch, raise the function's memory, shard the data).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from fanfit.errors import LambdaLimitError

__all__ = [
    "DEFAULT_BASELINE_MB",
    "DEFAULT_WEIGHT",
    "MAX_WEIGHT",
    "DEFAULT_OVERHEAD_FACTOR",
    "LAMBDA_MAX_MEMORY_MB",
    "LAMBDA_MIN_MEMORY_MB",
    "MEMORY_PARAMETERS",
    "STATE_MAX_BYTES",
    "TMP_DEFAULT_MB",
    "TMP_MAX_MB",
    "check_job",
    "check_memory",
    "check_state",
    "check_tmp",
    "check_weight",
    "data_bytes",
    "memory_needed_mb",
]

LAMBDA_MIN_MEMORY_MB = 128
#: Largest Lambda MemorySize, MB (10 GB; 6 vCPUs).
LAMBDA_MAX_MEMORY_MB = 10_240
#: Default and largest ephemeral storage (/tmp), MB.
TMP_DEFAULT_MB = 512
TMP_MAX_MB = 10_240
#: Largest Step Functions state input or output, bytes (256 KB).
STATE_MAX_BYTES = 256 * 1024
#: Copies of the data set a function holds at its peak (the array read, the validated y/d/X, a learner's
#: copy of X): an estimate with headroom, not a measurement of every learner.
DEFAULT_OVERHEAD_FACTOR = 3.0
#: Resident memory before any data, MB: Python with numpy, scipy, scikit-learn, boto3 and the fanfit
#: layer. A warm TrainShard measured about 110 MB peak RSS on the local stack
#: (``fanfit.jobs.train.RUNTIME_BASE_MB`` = 160 with headroom); scikit-learn's imports add more.
DEFAULT_BASELINE_MB = 200.0

_MB = 2**20

#: The template parameter that sets each data-holding function's MemorySize (template.yaml), named in
#: the error when the data does not fit. TrainInit and TrainReduce have a fixed MemorySize.
MEMORY_PARAMETERS = {
    "Prepare": "PrepareMemorySize",
    "CrossFit": "CrossFitMemorySizes",
    "Aggregate": "AggregateMemorySize",
    "TrainShardSmall": "TrainWorkerMemorySmall",
    "TrainShardLarge": "TrainWorkerMemoryLarge",
}


def _memory_setting(function: str, fix: int) -> str:
    """Where a function's memory is set, for the error message."""
    parameter = MEMORY_PARAMETERS.get(function)
    if parameter is None:
        return "its MemorySize in template.yaml"
    value = str(fix)
    if parameter == "CrossFitMemorySizes":  # three sizes, the first the default (template.yaml)
        value = f"{fix},{max(fix, 3538)},10240"
    where = (
        f"template parameter {parameter}: `sam deploy --parameter-overrides {parameter}={value}`"
    )
    if function.startswith("TrainShard"):
        where += ", or --worker-memory"
    return where


def data_bytes(n_rows: int, n_cols: int, itemsize: int = 8) -> int:
    """Bytes of the data set as one in-memory array.

    Parameters
    ----------
    n_rows, n_cols : int
        Shape of the data (observations x columns used).
    itemsize : int
        Bytes per value (8: float64, what fanfit stores).

    Returns
    -------
    int
        ``n_rows * n_cols * itemsize``.

    Raises
    ------
    LambdaLimitError
        A negative size.
    """
    for name, value in (("n_rows", n_rows), ("n_cols", n_cols), ("itemsize", itemsize)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LambdaLimitError(f"{name} must be a non-negative integer, got {value!r}")
    return n_rows * n_cols * itemsize


def memory_needed_mb(
    n_bytes: float,
    overhead_factor: float = DEFAULT_OVERHEAD_FACTOR,
    baseline_mb: float = DEFAULT_BASELINE_MB,
) -> float:
    """A function's estimated peak memory with the data set in memory, MB.

    Parameters
    ----------
    n_bytes : float
        In-memory size of the data set, bytes (:func:`data_bytes`).
    overhead_factor : float
        Copies held at the peak (default :data:`DEFAULT_OVERHEAD_FACTOR`).
    baseline_mb : float
        Runtime before any data, MB (default :data:`DEFAULT_BASELINE_MB`).

    Returns
    -------
    float
        ``baseline_mb + overhead_factor * n_bytes / 2**20``.
    """
    return float(baseline_mb) + float(overhead_factor) * float(n_bytes) / _MB


def check_memory(
    n_bytes: float,
    memory_mb: int,
    *,
    function: str = "CrossFit",
    overhead_factor: float = DEFAULT_OVERHEAD_FACTOR,
    baseline_mb: float = DEFAULT_BASELINE_MB,
) -> float:
    """Check that a function with ``memory_mb`` can hold the data set.

    Parameters
    ----------
    n_bytes : float
        In-memory size of the data set, bytes.
    memory_mb : int
        The function's MemorySize, MB.
    function : str
        Its name, for the message.
    overhead_factor, baseline_mb : float
        See :func:`memory_needed_mb`.

    Returns
    -------
    float
        The estimated need, MB (<= ``memory_mb``).

    Raises
    ------
    LambdaLimitError
        If the need exceeds ``memory_mb``: the message names the function, both sizes, and the fix
        (a MemorySize that fits and the template parameter that sets it, :data:`MEMORY_PARAMETERS`,
        if one up to 10,240 MB does; else AWS Batch or sharding the data).
    """
    need = memory_needed_mb(n_bytes, overhead_factor, baseline_mb)
    if need <= memory_mb:
        return need
    data_mb = n_bytes / _MB
    head = (
        f"{function} needs about {need:,.0f} MB ({data_mb:,.0f} MB of data x {overhead_factor:g} copies "
        f"+ {baseline_mb:,.0f} MB runtime) but has MemorySize {memory_mb:,} MB"
    )
    if need <= LAMBDA_MAX_MEMORY_MB:
        fix = max(LAMBDA_MIN_MEMORY_MB, int(math.ceil(need / 64.0) * 64))
        raise LambdaLimitError(
            f"{head}: raise its memory to at least {fix:,} MB ({_memory_setting(function, fix)}), "
            "or run the stage on AWS Batch."
        )
    raise LambdaLimitError(
        f"{head}, more than Lambda's largest ({LAMBDA_MAX_MEMORY_MB:,} MB): run the stage on AWS Batch, "
        f"or split the data so each function reads at most "
        f"{(LAMBDA_MAX_MEMORY_MB - baseline_mb) / overhead_factor:,.0f} MB of it."
    )


def check_tmp(
    n_bytes: float, ephemeral_mb: int = TMP_DEFAULT_MB, *, function: str = "CrossFit"
) -> None:
    """Check that ``n_bytes`` written to /tmp fit the function's ephemeral storage.

    Parameters
    ----------
    n_bytes : float
        Bytes the function writes to /tmp (a cached copy of the data, a model file), bytes.
    ephemeral_mb : int
        Its EphemeralStorage size, MB (512 default, up to 10,240).
    function : str
        Its name, for the message.

    Raises
    ------
    LambdaLimitError
        If they do not fit: suggests the EphemeralStorage that would (up to 10,240 MB), else Batch.
    """
    need_mb = n_bytes / _MB
    if need_mb <= ephemeral_mb:
        return
    head = f"{function} writes {need_mb:,.0f} MB to /tmp but has {ephemeral_mb:,} MB of ephemeral storage"
    if need_mb <= TMP_MAX_MB:
        raise LambdaLimitError(
            f"{head}: set its EphemeralStorage Size to at least {int(math.ceil(need_mb)):,} MB "
            f"(up to {TMP_MAX_MB:,}), or run the stage on AWS Batch."
        )
    raise LambdaLimitError(
        f"{head}, more than Lambda's largest /tmp ({TMP_MAX_MB:,} MB): run the stage on AWS Batch "
        "or stream the data from S3 instead of copying it to /tmp."
    )


def check_state(payload: Any, *, state: str = "state") -> int:
    """Check that a Step Functions state input or output fits 256 KB.

    Parameters
    ----------
    payload : dict, list, str or bytes
        The state's JSON (a dict or list is serialised as Step Functions would).
    state : str
        The state's name, for the message.

    Returns
    -------
    int
        Its size, bytes.

    Raises
    ------
    LambdaLimitError
        If it exceeds :data:`STATE_MAX_BYTES`: put the data in S3 and pass its key.
    """
    if isinstance(payload, bytes):
        size = len(payload)
    elif isinstance(payload, str):
        size = len(payload.encode())
    else:
        try:
            size = len(json.dumps(payload, separators=(",", ":"), allow_nan=False).encode())
        except (TypeError, ValueError) as exc:
            raise LambdaLimitError(f"{state} is not JSON Step Functions can carry: {exc}") from exc
    if size > STATE_MAX_BYTES:
        raise LambdaLimitError(
            f"{state} is {size:,} bytes, over Step Functions' {STATE_MAX_BYTES:,}-byte (256 KB) state "
            "limit: write it to S3 and pass its key (a Distributed Map reads items with ItemReader)."
        )
    return size


def check_job(
    *,
    n_rows: int,
    n_cols: int,
    memory_mb: Mapping[str, int],
    spec: Mapping[str, Any] | None = None,
    tmp_bytes: float = 0.0,
    ephemeral_mb: int | Mapping[str, int] = TMP_DEFAULT_MB,
    overhead_factor: float = DEFAULT_OVERHEAD_FACTOR,
    baseline_mb: float = DEFAULT_BASELINE_MB,
) -> dict[str, float]:
    """Check a job against every limit before it is launched.

    Parameters
    ----------
    n_rows, n_cols : int
        Shape of the data the functions read (observations x columns used).
    memory_mb : mapping of str to int
        MemorySize of each function that reads the data, MB (e.g. ``{"Prepare": 1024, "CrossFit":
        1769, "Aggregate": 1769}``; train: ``{"TrainShard": 885, ...}``).
    spec : mapping, optional
        The job spec the state machine starts with; checked against the 256 KB state limit.
    tmp_bytes : float
        Bytes a function writes to /tmp, bytes (0: fanfit reads data into memory).
    ephemeral_mb : int or mapping of str to int
        Each function's /tmp size, MB (one for all, or per function).
    overhead_factor, baseline_mb : float
        See :func:`memory_needed_mb`.

    Returns
    -------
    dict of str to float
        Each function's estimated peak memory, MB.

    Raises
    ------
    LambdaLimitError
        The first limit exceeded, naming the function and the fix.
    """
    n_bytes = data_bytes(n_rows, n_cols)
    if spec is not None:
        check_state(dict(spec), state="the job spec (state machine input)")
    needs = {}
    for function, mb in memory_mb.items():
        needs[function] = check_memory(
            n_bytes,
            int(mb),
            function=function,
            overhead_factor=overhead_factor,
            baseline_mb=baseline_mb,
        )
        tmp = (
            ephemeral_mb
            if isinstance(ephemeral_mb, int)
            else ephemeral_mb.get(function, TMP_DEFAULT_MB)
        )
        check_tmp(tmp_bytes, int(tmp), function=function)
    return needs


#: A job's weight when none is given (Dorm's ``w_i``; :mod:`fanfit.jobs.sharing`).
DEFAULT_WEIGHT = 1.0
#: The largest weight a job may have.
MAX_WEIGHT = 100.0


def check_weight(value: Any, name: str = "weight") -> float:
    """A job's weight in the fair shares of the account's capacity (Dorm's ``w_i``, Sun et al.
    2017; :mod:`fanfit.jobs.sharing`), checked before it is used anywhere.

    Parameters
    ----------
    value : int or float or None
        None gives :data:`DEFAULT_WEIGHT`.
    name : str
        The option as the message names it (``weight``, ``--weight``, ``job.yaml: weight``).

    Returns
    -------
    float
        In ``(0, MAX_WEIGHT]``.

    Raises
    ------
    fanfit.errors.InvalidJobError
        Naming ``name``: not a real number (a bool, a string), not finite, not positive, or over
        :data:`MAX_WEIGHT`.
    """
    import numbers

    from fanfit.errors import InvalidJobError

    if value is None:
        return DEFAULT_WEIGHT
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        shown = repr(value) if len(repr(value)) <= 80 else f"a {type(value).__name__} value"
        raise InvalidJobError(
            f"{name} must be a number in (0, {MAX_WEIGHT:g}] (the job's weight in the fair "
            f"shares; default {DEFAULT_WEIGHT:g}), got {shown}"
        )
    weight = float(value)
    if not (math.isfinite(weight) and 0.0 < weight <= MAX_WEIGHT):
        raise InvalidJobError(
            f"{name} must be a positive finite number of at most {MAX_WEIGHT:g} (the job's "
            f"weight in the fair shares; default {DEFAULT_WEIGHT:g}), got {value!r}"
        )
    return weight
