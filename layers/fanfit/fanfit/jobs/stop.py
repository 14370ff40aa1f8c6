"""A job's stop marker: written when a job failed or was cancelled, read by its running workers.

Step Functions does not stop a running Lambda invocation (nor a Batch job) when its execution
fails, times out or is stopped: the invocation runs to its end and is billed. So every piece of
fanfit that works for long inside one invocation reads a marker in S3 between pieces of work and
stops at once when it is there for its execution:

- a train job's DS-Sync segment workers (:func:`fanfit.jobs.train.shard.train_shard`), marker
  :func:`fanfit.storage.train_stop_key`;
- an estimate's CrossFit shards, between units (:func:`fanfit.jobs.estimate.crossfit.crossfit_shard`,
  on Lambda and on the GPU worker), marker :func:`fanfit.storage.estimate_stop_key`.

Both markers are a :class:`~fanfit.jobs.documents.train.TrainStop` document (reason, execution,
worker, round, error, message). They are written by a failing train worker, by the state machines'
failure branches (``aws-sdk:s3:putObject``) and by the client's cancel. A marker naming another
execution (an earlier one of a job that ``fanfit resume`` started again) is ignored.
"""

from __future__ import annotations

import time

from fanfit import storage
from fanfit.errors import JobNotFoundError
from fanfit.jobs.documents.train import TrainStop

__all__ = ["StopReader", "write_stop"]

#: A stop marker's message keeps the first this many characters of the error's message.
STOP_MESSAGE_CHARS = 1000


def write_stop(
    store: storage.JobStore,
    key: str,
    reason: str,
    *,
    execution_arn: str = "",
    worker: int | None = None,
    round_index: int | None = None,
    error: BaseException | str | None = None,
) -> TrainStop:
    """Write a stop marker at ``key``.

    Parameters
    ----------
    store : JobStore
    key : str
        :func:`fanfit.storage.train_stop_key` or :func:`fanfit.storage.estimate_stop_key`.
    reason : {'failed', 'cancelled'}
    execution_arn : str
        The execution that stopped (empty: the marker applies to every execution).
    worker, round_index : int, optional
        The train worker that failed and the round it was at.
    error : exception or str, optional
        The error (its class name and the first :data:`STOP_MESSAGE_CHARS` characters of its
        message are kept), or an error name.

    Returns
    -------
    TrainStop
        The marker written.

    Raises
    ------
    InvalidDocumentError
        ``reason`` is neither ``'failed'`` nor ``'cancelled'``.
    botocore.exceptions.ClientError
        The write was refused.
    """
    name, message = "", ""
    if isinstance(error, BaseException):
        name, message = type(error).__name__, str(error)[:STOP_MESSAGE_CHARS]
    elif error:
        name = str(error)
    marker = TrainStop.parse(
        {
            "reason": reason,
            "execution_arn": execution_arn,
            "worker": worker,
            "round": round_index,
            "error": name,
            "message": message,
            "written_at": time.time(),
        },
        source=key,
    )
    store.put_json(key, marker.to_json_dict())
    return marker


class StopReader:
    """One worker's reader of its job's stop marker.

    :meth:`read` HEADs the marker (one request: about 1.2 ms on moto, 6-8 ms on the local stack);
    only a marker whose ETag it has not seen is read (GET) and parsed. A marker of another
    execution (:meth:`TrainStop.applies_to`) is remembered by its ETag and ignored until it is
    written again.

    Parameters
    ----------
    store : JobStore
    key : str
        The marker's key.
    execution_arn : str
        The worker's execution; empty: every marker applies.
    """

    def __init__(self, store: storage.JobStore, key: str, execution_arn: str = "") -> None:
        self.store = store
        self.key = key
        self.execution_arn = execution_arn
        self._ignored_etag: str | None = None

    def read(self) -> TrainStop | None:
        """The marker when it is there for this worker's execution, else None.

        Raises
        ------
        InvalidDocumentError
            The marker does not parse.
        botocore.exceptions.ClientError
            The HEAD or GET was refused (other than a missing object).
        """
        etag = self.store.etag(self.key)
        if etag is None or etag == self._ignored_etag:
            return None
        try:
            marker = TrainStop.parse(self.store.get_json(self.key), source=self.key)
        except JobNotFoundError:  # removed between the HEAD and the GET
            return None
        if not marker.applies_to(self.execution_arn):
            self._ignored_etag = etag
            return None
        return marker
