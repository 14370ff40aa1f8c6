"""A job's stop marker: written when a job failed or was cancelled, read by its running workers.

Step Functions does not stop a running Lambda invocation (nor a Batch job) when its execution
fails, times out or is stopped: the invocation runs to its end and is billed. So every piece of
fanfit that works for long inside one invocation reads a marker in S3 between pieces of work and
stops at once when it is there for its execution:

- a train job's DS-Sync segment workers (:func:`fanfit.jobs.train.shard.train_shard`), marker
  :func:`fanfit.storage.train_stop_key`;
- an estimate's CrossFit shards, between units and, by a :class:`StopWatch`, during a long unit
  (:func:`fanfit.jobs.estimate.crossfit.crossfit_shard`, on Lambda and on the GPU worker), marker
  :func:`fanfit.storage.estimate_stop_key`.

Both markers are a :class:`~fanfit.jobs.documents.train.TrainStop` document (reason, execution,
worker, round, error, message). They are written by a failing train worker, by the state machines'
failure branches (``aws-sdk:s3:putObject``) and by the client's cancel. A marker naming another
execution (an earlier one of a job that ``fanfit resume`` started again) is ignored.
"""

from __future__ import annotations

import _thread
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from fanfit import storage
from fanfit.errors import JobNotFoundError
from fanfit.jobs.documents.train import TrainStop

__all__ = ["StopReader", "StopWatch", "write_stop"]

log = logging.getLogger(__name__)

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


class _Interrupted(BaseException):
    """Raised in the main thread by :class:`StopWatch`; a BaseException, like KeyboardInterrupt,
    so that a library's ``except Exception`` does not swallow it."""


class StopWatch:
    """Stops the main thread's work when the job's stop marker appears, also inside a long unit.

    Checks between units do not stop a unit that runs for minutes (a forest of many trees on many
    rows). While the ``with`` block runs, a daemon thread reads the marker (``reader``, a
    :class:`StopReader`) every ``interval_s`` seconds; when it applies, the thread interrupts the
    main thread (:func:`_thread.interrupt_main` with ``SIGUSR1``, handled by this watch: no
    signal reaches the process from outside). The interrupt is raised at the main thread's next
    Python bytecode (between two trees of a forest, two iterations of a solver; not inside one C
    call) and the block ends with the exception ``on_stop(marker)`` returns, chained to whatever
    the interrupted code raised (an error the block raised without being interrupted, such as the
    caller's own stop between units, passes unchanged). A block that ends before the interrupt
    arrives ends as it would have; the marker stays in :attr:`marker` (callers check it again
    between units anyway).

    Outside the main thread (a handler run in a worker thread: tests, some local runners) the
    watch does nothing, as a signal handler can only be set in the main thread: the caller's
    checks between units remain.

    Parameters
    ----------
    reader : StopReader
    interval_s : float
        Seconds between two reads of the marker (> 0).
    on_stop : callable
        ``on_stop(marker) -> BaseException``: the error the block ends with.

    Attributes
    ----------
    marker : TrainStop or None
        The marker that stopped the block.
    """

    SIGNAL = signal.SIGUSR1

    def __init__(
        self,
        reader: StopReader,
        interval_s: float,
        on_stop: Callable[[TrainStop], BaseException],
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.reader = reader
        self.interval_s = float(interval_s)
        self.on_stop = on_stop
        self.marker: TrainStop | None = None
        self._armed = False
        self._interrupted = False  # the block was interrupted (else an error passes unchanged)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: Any = None

    def __enter__(self) -> StopWatch:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._previous = signal.signal(self.SIGNAL, self._on_signal)
        self._armed = True
        self._thread = threading.Thread(target=self._watch, name="fanfit-stop-watch", daemon=True)
        self._thread.start()
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        # runs in the main thread, as __exit__ does: once __exit__ disarmed it, nothing is raised
        if self._armed and self.marker is not None:
            self._armed = False
            self._interrupted = True
            raise _Interrupted()

    def _watch(self) -> None:
        while not self._done.wait(self.interval_s):
            try:
                marker = self.reader.read()
            except Exception as exc:  # noqa: BLE001 - a failed read is retried, never fatal
                log.warning("stop marker %s: read failed (%s); retrying", self.reader.key, exc)
                continue
            if marker is not None:
                with self._lock:
                    if self._armed and not self._done.is_set():
                        self.marker = marker
                        _thread.interrupt_main(self.SIGNAL)
                return

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is None:
            return
        with self._lock:
            self._armed = False  # a pending interrupt now raises nothing (see _on_signal)
            self._done.set()
        self._thread.join()
        signal.signal(self.SIGNAL, signal.SIG_DFL if self._previous is None else self._previous)
        if self._interrupted and exc is not None and self.marker is not None:
            raise self.on_stop(self.marker) from (None if isinstance(exc, _Interrupted) else exc)
