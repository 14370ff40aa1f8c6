"""A job's data used in place: the server side of a spec's ``data_source`` (Prepare and TrainInit).

:func:`materialize_source` checks the source's bucket against the stack's (:func:`check_source_bucket`),
checks that the object fits the function's memory, reads the version the client submitted
(:func:`fanfit.storage.read_source`), keeps the job's columns and writes them as the
content-addressed data object (:meth:`fanfit.storage.JobStore.put_data`), whose key the plan then
names: CrossFit, Aggregate, TrainShard and resume read the data as they always did.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from fanfit import limits, storage
from fanfit.errors import DataBucketNotAllowedError
from fanfit.jobs.documents import DataSource

__all__ = [
    "EXTERNAL_BUCKET_ENV",
    "EXTERNAL_BUCKET_PARAMETER",
    "check_source_bucket",
    "materialize_source",
]

#: The functions' environment variable naming the bucket besides the stack's whose objects a job
#: may use in place (template parameter :data:`EXTERNAL_BUCKET_PARAMETER`; empty: none).
EXTERNAL_BUCKET_ENV = "FANFIT_EXTERNAL_DATA_BUCKET"
#: The template parameter that sets it (and grants Prepare and TrainInit s3:GetObject on it).
EXTERNAL_BUCKET_PARAMETER = "ExternalDataBucketName"


def check_source_bucket(bucket: str, stack_bucket: str, external_bucket: str | None) -> None:
    """Refuse a data source outside the buckets this stack may read.

    Parameters
    ----------
    bucket : str
        The source's bucket.
    stack_bucket : str
        The stack's data bucket (always allowed).
    external_bucket : str or None
        The bucket named by the template parameter ``ExternalDataBucketName`` (None or empty:
        none).

    Raises
    ------
    DataBucketNotAllowedError
        ``bucket`` is neither: the message names it and the parameter to set.
    """
    if bucket == stack_bucket or (external_bucket and bucket == external_bucket):
        return
    other = f" and bucket {external_bucket!r}" if external_bucket else ""
    raise DataBucketNotAllowedError(
        f"data source bucket {bucket!r} is not readable by this stack (it reads its own bucket "
        f"{stack_bucket!r}{other}): deploy the stack with `sam deploy --parameter-overrides "
        f"{EXTERNAL_BUCKET_PARAMETER}={bucket}`, or pass a local file (the client uploads it)"
    )


def materialize_source(
    store: storage.JobStore,
    source: DataSource,
    columns: Sequence[str],
    *,
    memory_mb: int = 0,
    function: str = "Prepare",
    external_bucket: str | None = None,
) -> str:
    """Read a job's data source and write its ``columns`` as the content-addressed data object.

    Parameters
    ----------
    store : JobStore
        The stack's bucket (its client reads the source too).
    source : DataSource
        The spec's ``data_source``.
    columns : sequence of str
        The columns the job uses (an estimate's ``DMLSpec.used_cols``, a train job's features and
        target), in that order.
    memory_mb : int
        The function's MemorySize, MB (0: not checked). The object must fit
        :func:`fanfit.limits.check_memory` with 3 copies (its bytes, the parsed text or arrays,
        the selected float64 columns) plus the runtime's baseline.
    function : str
        ``"Prepare"`` or ``"TrainInit"``, named in the memory error.
    external_bucket : str, optional
        The bucket of ``ExternalDataBucketName``; default: the environment variable
        :data:`EXTERNAL_BUCKET_ENV`.

    Returns
    -------
    str
        The data key (``data/<sha256>.npz``), the same as the client's upload of those columns
        would give for the same float64 values.

    Raises
    ------
    DataBucketNotAllowedError
        The source's bucket is neither the stack's nor the external one.
    DataSourceChangedError
        The object changed or was removed since the client checked it.
    LambdaLimitError
        The object would not fit the function's memory (the message names the template parameter).
    InvalidDataError
        A missing column, a value that is not a number, or an object not of its suffix's format.
    """
    if external_bucket is None:
        external_bucket = os.environ.get(EXTERNAL_BUCKET_ENV, "")
    check_source_bucket(source.bucket, store.bucket, external_bucket)
    obj = source.to_object()
    size = storage.source_size(store.s3, obj)
    if memory_mb:
        limits.check_memory(size, memory_mb, function=function)
    names, values = storage.read_source(store.s3, obj, columns)
    return store.put_data(names, values)
