"""Live progress of a running job: a snapshot read from its records, and a bar or plain lines.

>>> job = client.submit_estimate("sipp1991.dta", ...)
>>> job.wait(progress=True)          # a rich bar on a terminal or in Jupyter, else plain lines

What a snapshot (:class:`JobProgress`) counts, and where it reads it:

estimate
    Shards done / total: the total sums the shards of every wave in ``stages/<s>/schedule.json``
    (it grows as the scheduler cuts waves: a probe wave first, then the rest); a shard is done
    when its predictions object ``stages/<s>/preds/<shard>.npz`` exists (one ``ListObjectsV2``
    per stage). Fits done / total: the ``(i_rep, i_fold, learner)`` units of the done shards, of
    all ``n_stages`` stages (known from the spec at once, so the bar's total does not move).
train
    Rounds done / total: the round records ``train/rounds/<r>/record.json`` present, of the spec's
    ``rounds`` (plus K-Means' final E-step round); a K-Means job that converges early ends below it.
both
    Elapsed seconds since the execution started; the remaining seconds from the rate so far
    (:func:`eta_seconds`); the phase, the state last entered in the execution's history (read
    incrementally: only events newer than the last seen are fetched); and the running cost in
    USD, priced by :func:`fanfit.cost.job_cost` from what was already read: each finished shard's
    or worker's measured seconds and memory (read once per shard or round, from the object's
    ``__stats__`` or the round record), the Schedule and Prepare steps of an estimate, and the
    state transitions of the history read so far. It is a running lower bound; the full count is
    :meth:`fanfit.client.EstimateJob.cost` once the job has ended.

Nothing here loops on its own: :meth:`ProgressTracker.snapshot` does a bounded amount of reading
per call, and the caller's polling loop (:meth:`fanfit.client.JobHandle.wait`) calls it at most
every :data:`PROGRESS_INTERVAL_S` seconds.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import math
import re
import sys
import time
import zipfile
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import IO, Any, Protocol

import numpy as np

from fanfit import errors, storage
from fanfit.cost import count_state_transitions, job_cost
from fanfit.prices import DEFAULT_PRICES, PriceTable

__all__ = [
    "PROGRESS_INTERVAL_S",
    "JobProgress",
    "PlainProgressRenderer",
    "ProgressRenderer",
    "ProgressTracker",
    "RichProgressRenderer",
    "estimate_progress",
    "eta_seconds",
    "format_line",
    "make_renderer",
    "running_cost_usd",
    "short_job_id",
    "train_progress",
]

log = logging.getLogger(__name__)

#: Fewest seconds between two snapshots of one job (each snapshot reads S3 and the history).
PROGRESS_INTERVAL_S = 1.0

#: State names of the orchestrator's definitions, shown as the phase of the job.
_PHASES = {
    "Validate the job and write its plan": "preparing",
    "Plan the next stage from the predictions so far": "preparing",
    "Size the first wave of shards from measured throughput": "scheduling",
    "Cross-fit every shard of the wave": "cross-fitting",
    "Record the wave's throughput and size the next wave": "scheduling",
    "Aggregate the predictions into the estimate": "aggregating",
    "Run every worker's step of the round": "training",
}

_GENERATED_ID = re.compile(r"^(?:est|train)-\d{8}-\d{6}-([0-9a-f]{8})$")


@dataclass(frozen=True)
class JobProgress:
    """What a running job has done so far: one snapshot, as the bar and the lines show it.

    Attributes
    ----------
    kind : {'estimate', 'train'}
    job_id : str
    status : str
        The execution's status: RUNNING, SUCCEEDED, FAILED, TIMED_OUT or ABORTED.
    elapsed_s : float
        Seconds since the execution started (to its end, once it has ended).
    phase : str or None
        What the job does now (``'cross-fitting'``, ``'training'``, ...), from the state last entered.
    shards_done, shards_total : int
        Estimate: shards with predictions written, and shards scheduled so far (all stages).
    fits_done, fits_total : int
        Estimate: nuisance fits of the done shards, and of the whole job (0 when unknown).
    rounds_done, rounds_total : int
        Train: rounds with a record, and the most rounds the spec allows.
    cost_usd : float or None
        Running cost so far, USD (a lower bound; see the module docstring); None when unknown.
    """

    kind: str
    job_id: str
    status: str = "RUNNING"
    elapsed_s: float = 0.0
    phase: str | None = None
    shards_done: int = 0
    shards_total: int = 0
    fits_done: int = 0
    fits_total: int = 0
    rounds_done: int = 0
    rounds_total: int = 0
    cost_usd: float | None = None

    @property
    def done(self) -> int:
        """The work done that the bar counts: fits (estimate, when their total is known), else
        shards; rounds (train)."""
        if self.kind == "train":
            return self.rounds_done
        return self.fits_done if self.fits_total else self.shards_done

    @property
    def total(self) -> int:
        """The total of :attr:`done` (0 while unknown)."""
        if self.kind == "train":
            return self.rounds_total
        return self.fits_total if self.fits_total else self.shards_total

    @property
    def fraction(self) -> float | None:
        """``done / total`` in [0, 1], or None while the total is unknown."""
        return min(self.done / self.total, 1.0) if self.total else None

    @property
    def eta_s(self) -> float | None:
        """Estimated seconds left (:func:`eta_seconds`); 0 once ended, None while unknown."""
        if self.status != "RUNNING":
            return 0.0
        return eta_seconds(self.elapsed_s, self.done, self.total)

    @property
    def ended(self) -> bool:
        """Whether the execution has ended (any status but RUNNING)."""
        return self.status != "RUNNING"

    def counts(self) -> str:
        """The counts as the line shows them: ``'shards 12/30 (36/90 fits)'`` or ``'rounds 3/10'``."""
        if self.kind == "train":
            return f"rounds {self.rounds_done}/{self.rounds_total or '?'}"
        text = f"shards {self.shards_done}/{self.shards_total or '?'}"
        if self.fits_total:
            text += f" ({self.fits_done}/{self.fits_total} fits)"
        return text

    def change_key(self) -> tuple[Any, ...]:
        """What a plain-line renderer compares to decide that something changed (not the clock)."""
        return (
            self.status,
            self.shards_done,
            self.shards_total,
            self.fits_done,
            self.fits_total,
            self.rounds_done,
            self.rounds_total,
        )


def eta_seconds(elapsed_s: float, done: float, total: float) -> float | None:
    """Seconds left at the rate so far: ``elapsed_s * (total - done) / done``.

    Parameters
    ----------
    elapsed_s : float
        Seconds the job has run.
    done, total : float
        Work done and the whole of it (shards, fits or rounds).

    Returns
    -------
    float or None
        Seconds (0 when ``done >= total``); None when nothing is done yet, the total is unknown
        (0), or ``elapsed_s`` is not a finite non-negative number.
    """
    if total <= 0 or done <= 0 or not math.isfinite(elapsed_s) or elapsed_s < 0:
        return None
    if done >= total:
        return 0.0
    return float(elapsed_s) * (float(total) - float(done)) / float(done)


def short_job_id(job_id: str) -> str:
    """A job id as the progress line shows it: ``est-20250101-120000-7c1e2f3a`` -> ``7c1e…``;
    an id the user chose is shown whole."""
    match = _GENERATED_ID.match(job_id)
    return f"{match.group(1)[:4]}…" if match else job_id


def _fmt_seconds(seconds: float) -> str:
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def format_line(p: JobProgress) -> str:
    """The plain progress line of a snapshot.

    Returns
    -------
    str
        E.g. ``[fanfit] estimate 7c1e…: shards 12/30 (36/90 fits), 8.1 s elapsed, ~12 s left,
        $0.0004``; an ended job shows its status in place of the time left.
    """
    parts = [p.counts(), f"{p.elapsed_s:.1f} s elapsed"]
    if p.ended:
        parts.append(p.status.lower())
    elif p.eta_s is not None:
        parts.append(f"~{_fmt_seconds(p.eta_s)} left")
    if p.cost_usd is not None:
        parts.append(f"${p.cost_usd:.4f}")
    return f"[fanfit] {p.kind} {short_job_id(p.job_id)}: " + ", ".join(parts)


# ------------------------------------------------------------------------- snapshots from records


def estimate_progress(
    job_id: str,
    schedules: Mapping[int, Mapping[str, Any]],
    done_shards: Mapping[int, Collection[str]],
    *,
    fits_total: int = 0,
    elapsed_s: float = 0.0,
    status: str = "RUNNING",
    phase: str | None = None,
    cost_usd: float | None = None,
) -> JobProgress:
    """The snapshot of an estimate job from its records.

    Parameters
    ----------
    job_id : str
    schedules : dict of int to dict
        Stage -> ``stages/<s>/schedule.json`` (``{"waves": [{"shards": [{"shard_id", "units"},
        ...]}, ...]}``); stages not scheduled yet are absent.
    done_shards : dict of int to collection of str
        Stage -> ids of the shards whose predictions object exists.
    fits_total : int
        Nuisance fits of the whole job, all stages (0 when unknown).
    elapsed_s : float
    status, phase : str
    cost_usd : float or None

    Returns
    -------
    JobProgress
        Every count complete when ``status`` is SUCCEEDED.
    """
    shards_total = shards_done = fits_done = 0
    for stage, schedule in schedules.items():
        done = set(done_shards.get(stage, ()))
        for wave in schedule.get("waves", []):
            for shard in wave.get("shards", []):
                shards_total += 1
                if str(shard.get("shard_id")) in done:
                    shards_done += 1
                    fits_done += len(shard.get("units", []))
    if status == "SUCCEEDED":
        shards_done, fits_done = shards_total, max(fits_done, fits_total)
    return JobProgress(
        kind="estimate",
        job_id=job_id,
        status=status,
        elapsed_s=elapsed_s,
        phase=phase,
        shards_done=shards_done,
        shards_total=shards_total,
        fits_done=min(fits_done, fits_total) if fits_total else fits_done,
        fits_total=fits_total,
        cost_usd=cost_usd,
    )


def train_progress(
    job_id: str,
    rounds_done: int,
    rounds_total: int,
    *,
    elapsed_s: float = 0.0,
    status: str = "RUNNING",
    phase: str | None = None,
    cost_usd: float | None = None,
) -> JobProgress:
    """The snapshot of a train job from its round records.

    Parameters
    ----------
    job_id : str
    rounds_done : int
        Round records present.
    rounds_total : int
        Most rounds the job runs (0 when unknown).
    elapsed_s : float
    status, phase : str
    cost_usd : float or None

    Returns
    -------
    JobProgress
        Once SUCCEEDED, the total is the rounds actually run (K-Means may converge early).
    """
    if status == "SUCCEEDED":
        rounds_total = rounds_done or rounds_total
    return JobProgress(
        kind="train",
        job_id=job_id,
        status=status,
        elapsed_s=elapsed_s,
        phase=phase,
        rounds_done=min(rounds_done, rounds_total) if rounds_total else rounds_done,
        rounds_total=rounds_total,
        cost_usd=cost_usd,
    )


def running_cost_usd(
    records: Iterable[Mapping[str, Any]],
    transitions: int = 0,
    prices: PriceTable = DEFAULT_PRICES,
    function: str = "CrossFit",
) -> float:
    """The cost so far of the work that has records, priced by :func:`fanfit.cost.job_cost`.

    Parameters
    ----------
    records : iterable of dict
        One per finished Lambda invocation or Batch job: ``started_at`` and ``ended_at`` (epoch
        s), ``memory_mb`` (MB), and optionally ``function`` (default ``function``) and
        ``placement`` or ``resource`` (``'batch'`` / ``'batch-<type>'``: a Batch job of that
        duration, ``instance_type`` when it names one). Shard statistics, round records'
        workers and the steps' own records all have this shape.
    transitions : int
        Step Functions state transitions so far.
    prices : PriceTable
    function : str
        Function name of records that name none.

    Returns
    -------
    float
        USD.
    """
    invocations: list[dict[str, Any]] = []
    batch_jobs: list[dict[str, Any]] = []
    for r in records:
        seconds = max(float(r["ended_at"]) - float(r["started_at"]), 0.0)
        if r.get("placement") == "batch" or str(r.get("resource", "")).startswith("batch"):
            batch_jobs.append({"instance_s": seconds, "instance_type": r.get("instance_type")})
        else:
            invocations.append(
                {
                    "function": str(r.get("function") or function),
                    "memory_mb": max(int(r.get("memory_mb") or 0), 0),
                    "duration_s": seconds,
                }
            )
    return job_cost(invocations, transitions, batch_jobs, prices).total_usd


# ---------------------------------------------------------------------------------- reading S3


class _RangedObject(io.RawIOBase):
    """A seekable, read-only view of one S3 object that fetches byte ranges as they are read.

    The object's tail (``block`` bytes) is fetched first, so a zip's central directory and its
    last member (``__stats__`` of a shard's ``.npz``) usually cost one ranged GET, whatever the
    size of the predictions before them.
    """

    def __init__(self, s3: Any, bucket: str, key: str, size: int, block: int = 1 << 16) -> None:
        super().__init__()
        self._s3, self._bucket, self._key = s3, bucket, key
        self._size, self._block, self._pos = int(size), int(block), 0
        self._chunks: list[tuple[int, bytes]] = []
        self.requests = 0
        if self._size > 0:
            self._fetch(max(0, self._size - self._block), self._size)

    def _fetch(self, start: int, end: int) -> None:
        body = self._s3.get_object(
            Bucket=self._bucket, Key=self._key, Range=f"bytes={start}-{end - 1}"
        )
        self._chunks.append((start, body["Body"].read()))
        self.requests += 1

    def _slice(self, start: int, end: int) -> bytes:
        for _ in range(2):
            for offset, body in self._chunks:
                if offset <= start and end <= offset + len(body):
                    return body[start - offset : end - offset]
            self._fetch(start, min(self._size, max(end, start + self._block)))
        raise OSError(f"cannot read bytes {start}-{end} of s3://{self._bucket}/{self._key}")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._size - self._pos)
        if n <= 0:
            return 0
        buffer[:n] = self._slice(self._pos, self._pos + n)
        self._pos += n
        return n


def read_shard_stats(s3: Any, bucket: str, key: str, size: int) -> dict[str, Any]:
    """The ``__stats__`` of a shard's predictions object, without downloading the predictions.

    Parameters
    ----------
    s3 : botocore S3 client
    bucket, key : str
    size : int
        The object's size in bytes (from the listing).

    Returns
    -------
    dict
        What :func:`fanfit.jobs.estimate.crossfit_shard` stored: ``started_at``, ``ended_at``,
        ``memory_mb``, ``placement``, ``resource``, ...

    Raises
    ------
    KeyError
        The object has no ``__stats__``.
    OSError, zipfile.BadZipFile
        It is not an ``.npz``.
    """
    with zipfile.ZipFile(_RangedObject(s3, bucket, key, size)) as zf, zf.open("__stats__.npy") as f:
        stats = json.loads(str(np.lib.format.read_array(f, allow_pickle=False)))
    return dict(stats)


def _epoch(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float):
        return float(value)
    return None


def _missing(exc: Exception) -> bool:
    """Whether an error says the object does not exist (yet): botocore's, or fanfit.storage's
    :class:`~fanfit.errors.JobNotFoundError`."""
    if isinstance(exc, errors.JobNotFoundError):
        return True
    code = getattr(exc, "response", {}).get("Error", {}).get("Code")
    return code in ("404", "NoSuchKey", "NotFound")


class ProgressTracker:
    """Reads a running job's progress from its records, a bounded amount per snapshot.

    What has been read once is kept: the spec, each finished shard's statistics, each round
    record, the history events seen; a snapshot lists the job's new objects, downloads a
    schedule again only when its ETag changed (``If-None-Match``), and fetches only the history
    events newer than the last seen.

    Parameters
    ----------
    job : fanfit.client.JobHandle
        An estimate or train job handle (``client.store``, ``client.sfn``, ``job_id``,
        ``execution_arn``).
    kind : {'estimate', 'train'}
    prices : PriceTable
    now : callable, optional
        Epoch seconds (default :func:`time.time`).
    max_reads : int
        Most shard statistics or round records read per snapshot (the rest wait for the next).
    max_history_pages : int
        Most history pages fetched per snapshot.
    """

    def __init__(
        self,
        job: Any,
        kind: str,
        *,
        prices: PriceTable = DEFAULT_PRICES,
        now: Callable[[], float] | None = None,
        max_reads: int = 32,
        max_history_pages: int = 5,
    ) -> None:
        if kind not in ("estimate", "train"):
            raise ValueError(f"kind must be 'estimate' or 'train', got {kind!r}")
        self.kind = kind
        self.job_id: str = job.job_id
        self.execution_arn: str = job.execution_arn
        self.store: storage.JobStore = job.client.store
        self.sfn = job.client.sfn
        self.prices = prices
        self.now = now or time.time
        self.max_reads = max_reads
        self.max_history_pages = max_history_pages
        self.events: list[dict[str, Any]] = []
        self._last_event_id = 0
        self._phase: str | None = None
        self._spec: dict[str, Any] | None = None
        self._records: dict[str, dict[str, Any]] = {}  # key -> shard stats / step / worker record
        self._schedules: dict[int, dict[str, Any]] = {}
        self._etags: dict[str, tuple[str, dict[str, Any]]] = {}  # key -> (ETag, parsed JSON)
        self._done: dict[int, set[str]] = {}
        self._rounds_done = 0
        self._last: JobProgress | None = None

    # ---- reading

    def _new_events(self) -> None:
        """Fetch the history events newer than the last seen (newest first, a few pages at most)."""
        fresh: list[dict[str, Any]] = []
        token = None
        for _ in range(self.max_history_pages):
            kwargs: dict[str, Any] = {
                "executionArn": self.execution_arn,
                "reverseOrder": True,
                "maxResults": 200,
            }
            if token:
                kwargs["nextToken"] = token
            page = self.sfn.get_execution_history(**kwargs)
            events = page.get("events", [])
            new = [e for e in events if int(e.get("id", 0)) > self._last_event_id]
            fresh += new
            token = page.get("nextToken")
            if not token or len(new) < len(events):
                break
        fresh.sort(key=lambda e: int(e.get("id", 0)))
        self.events += fresh
        if fresh:
            self._last_event_id = int(fresh[-1].get("id", self._last_event_id))
        for ev in reversed(fresh):
            if str(ev.get("type", "")).endswith("StateEntered"):
                name = ev.get("stateEnteredEventDetails", {}).get("name", "")
                self._phase = _PHASES.get(name, self._phase)
                break

    def _spec_json(self) -> dict[str, Any] | None:
        if self._spec is None:
            try:
                self._spec = self.store.get_json(storage.spec_key(self.job_id))
            except Exception as exc:
                if not _missing(exc):
                    raise
        return self._spec

    def _list(self, prefix: str) -> dict[str, int]:
        """Key -> size of every object under ``prefix``."""
        pages = self.store.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.store.bucket, Prefix=prefix
        )
        return {o["Key"]: int(o.get("Size", 0)) for p in pages for o in p.get("Contents", [])}

    def _get_json_once(self, key: str) -> dict[str, Any] | None:
        if key not in self._records:
            try:
                self._records[key] = self.store.get_json(key)
            except Exception as exc:
                if not _missing(exc):
                    raise
                return None
        return self._records[key]

    def _get_json_if_changed(self, key: str) -> dict[str, Any] | None:
        """A JSON object that changes (a schedule), downloaded again only when its ETag changed;
        None while it does not exist."""
        kwargs: dict[str, Any] = {"Bucket": self.store.bucket, "Key": key}
        cached = self._etags.get(key)
        if cached is not None:
            kwargs["IfNoneMatch"] = cached[0]
        try:
            obj = self.store.s3.get_object(**kwargs)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if cached is not None and code in ("304", "NotModified"):
                return cached[1]
            if _missing(exc):
                return None
            raise
        value = json.loads(obj["Body"].read())
        self._etags[key] = (str(obj.get("ETag", "")), value)
        return dict(value)

    def _read_estimate(self) -> int:
        """Refresh the schedules and the done shards; returns the job's fits (0 if unknown)."""
        from fanfit import dml

        spec_json = self._spec_json()
        if not spec_json or "dml" not in spec_json:
            return 0
        spec = dml.DMLSpec.from_dict(spec_json["dml"])
        n_stages = dml.n_stages(spec)
        fits_total = sum(len(dml.fit_units(spec, s)) for s in range(n_stages))
        budget = self.max_reads
        for stage in range(n_stages):
            prefix = f"{storage.job_prefix(self.job_id)}stages/{stage}/"
            if stage > 0 and stage - 1 not in self._schedules:
                break
            schedule = self._get_json_if_changed(storage.schedule_key(self.job_id, stage))
            if schedule is None:
                break
            self._schedules[stage] = schedule
            prep = self._get_json_once(f"{prefix}prepare.json")
            if prep is not None:
                prep.setdefault("function", "Prepare")
            for wave in self._schedules[stage].get("waves", []):
                self._records.setdefault(
                    f"{prefix}schedule/{wave.get('wave')}", {**wave, "function": "Schedule"}
                )
            listed = self._list(f"{prefix}preds/")
            self._done[stage] = {k.rsplit("/", 1)[-1].removesuffix(".npz") for k in listed}
            for key, size in sorted(listed.items()):
                if key in self._records or budget <= 0:
                    continue
                budget -= 1
                try:
                    self._records[key] = read_shard_stats(
                        self.store.s3, self.store.bucket, key, size
                    )
                except Exception as exc:  # not yet whole, or not an npz: counted, not priced
                    log.debug("cannot read the statistics of %s: %s", key, exc)
                    self._records[key] = {}
        return fits_total

    def _read_train(self) -> int:
        """Refresh the rounds done; returns the most rounds (0 if unknown)."""
        spec_json = self._spec_json()
        spec = (spec_json or {}).get("spec") or {}
        rounds_total = int(spec.get("rounds") or 0)
        if rounds_total and spec.get("model") == "kmeans":
            rounds_total += 1  # the final E-step round (inertia of the final centroids)
        prefix = f"{storage.job_prefix(self.job_id)}train/rounds/"
        keys = [k for k in self._list(prefix) if k.endswith("/record.json")]
        self._rounds_done = len(keys)
        budget = self.max_reads
        for key in sorted(keys):
            if key in self._records or budget <= 0:
                continue
            budget -= 1
            record = self._get_json_once(key) or {}
            for w in record.get("workers", []):
                self._records[f"{key}#{w.get('worker')}"] = {**w, "function": "TrainShard"}
        return rounds_total

    def _cost(self) -> float | None:
        priced = [
            r
            for r in self._records.values()
            if "started_at" in r and "ended_at" in r and "memory_mb" in r
        ]
        return running_cost_usd(priced, count_state_transitions(self.events), self.prices)

    # ---- the snapshot

    def snapshot(self, desc: Mapping[str, Any] | None = None) -> JobProgress:
        """The job's progress now.

        Parameters
        ----------
        desc : dict, optional
            ``DescribeExecution`` of the job's execution, when the caller has just read it.

        Returns
        -------
        JobProgress
            On a read error (permissions, throttling) the counts of the last good snapshot, with
            the status and the elapsed time brought up to date; the error is logged at debug level.
        """
        if desc is None:
            desc = self.sfn.describe_execution(executionArn=self.execution_arn)
        status = str(desc.get("status", "RUNNING"))
        start = _epoch(desc.get("startDate"))
        stop = _epoch(desc.get("stopDate")) if status != "RUNNING" else None
        elapsed = max((stop if stop is not None else self.now()) - start, 0.0) if start else 0.0
        try:
            self._new_events()
            if self.kind == "estimate":
                fits_total = self._read_estimate()
                snap = estimate_progress(
                    self.job_id, self._schedules, self._done, fits_total=fits_total,
                    elapsed_s=elapsed, status=status, phase=self._phase, cost_usd=self._cost(),
                )  # fmt: skip
            else:
                rounds_total = self._read_train()
                snap = train_progress(
                    self.job_id, self._rounds_done, rounds_total, elapsed_s=elapsed,
                    status=status, phase=self._phase, cost_usd=self._cost(),
                )  # fmt: skip
        except Exception as exc:  # progress never fails the job's wait
            log.debug("cannot read the progress of job %s: %s", self.job_id, exc)
            base = self._last or JobProgress(kind=self.kind, job_id=self.job_id)
            snap = replace(base, status=status, elapsed_s=elapsed)
        self._last = snap
        return snap


# -------------------------------------------------------------------------------------- renderers


class ProgressRenderer(Protocol):
    """What shows snapshots: :class:`RichProgressRenderer` or :class:`PlainProgressRenderer`."""

    def update(self, progress: JobProgress) -> None:
        """Show a snapshot."""

    def close(self) -> None:
        """Stop showing (the last snapshot stays on screen)."""


class PlainProgressRenderer:
    """Plain progress lines (:func:`format_line`), one per change of the counts or the status.

    Parameters
    ----------
    stream : file-like, optional
        Where the lines go (default: ``sys.stderr`` when the renderer is made).
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._key: tuple[Any, ...] | None = None
        self._last: JobProgress | None = None
        self._last_printed: JobProgress | None = None

    def update(self, progress: JobProgress) -> None:
        """Print the line of ``progress`` if its counts or status differ from the last printed."""
        self._last = progress
        if progress.change_key() != self._key:
            self._print(progress)

    def _print(self, progress: JobProgress) -> None:
        self._key = progress.change_key()
        self._last_printed = progress
        print(format_line(progress), file=self.stream, flush=True)

    def close(self) -> None:
        """Print the last snapshot if it ended the job and was not printed yet."""
        if self._last is not None and self._last.ended and self._last is not self._last_printed:
            self._print(self._last)


class RichProgressRenderer:
    """A rich progress bar (works on a terminal and in Jupyter).

    The bar counts fits (estimate) or rounds (train); beside it: the shard or round counts,
    elapsed, estimated remaining and running cost of the snapshot. No refresh thread: the bar is
    redrawn on each :meth:`update`.

    Parameters
    ----------
    console : rich.console.Console, optional
        Default: a console on ``sys.stderr``.
    """

    def __init__(self, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskID, TextColumn

        self.console = console if console is not None else Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[counts]}"),
            TextColumn("{task.fields[elapsed]}"),
            TextColumn("{task.fields[left]}"),
            TextColumn("{task.fields[cost]}"),
            console=self.console,
            auto_refresh=False,
            transient=False,
        )
        self._task: TaskID | None = None
        self._started = False

    def update(self, progress: JobProgress) -> None:
        """Redraw the bar from ``progress``."""
        description = f"{progress.kind} {short_job_id(progress.job_id)}"
        if progress.ended:
            description += f" {progress.status.lower()}"
        elif progress.phase:
            description += f" {progress.phase}"
        eta = progress.eta_s
        fields: dict[str, Any] = {
            "counts": progress.counts(),
            "elapsed": f"{progress.elapsed_s:.1f} s elapsed",
            "left": f"~{_fmt_seconds(eta)} left" if eta is not None and not progress.ended else "",
            "cost": "" if progress.cost_usd is None else f"${progress.cost_usd:.4f}",
        }
        total = float(progress.total) if progress.total else None
        if not self._started:
            self._progress.start()
            self._started = True
        if self._task is None:
            self._task = self._progress.add_task(description, total=total, **fields)
        self._progress.update(
            self._task, description=description, completed=progress.done, total=total, **fields
        )
        self._progress.refresh()

    def close(self) -> None:
        """Stop the live display; the last bar stays."""
        if self._started:
            self._progress.stop()
            self._started = False


def make_renderer(
    progress: bool | str | ProgressRenderer | None, stream: IO[str] | None = None
) -> ProgressRenderer | None:
    """The renderer a ``progress=`` option asks for.

    Parameters
    ----------
    progress : bool, str, renderer or None
        False or None: none (quiet). True or ``'auto'``: a rich bar when ``stream`` is a terminal
        (not ``TERM=dumb``) or the code runs in Jupyter with ipywidgets, else plain lines. ``'rich'`` or ``'plain'``: that one. A
        renderer (anything with ``update`` and ``close``) is used as it is.
    stream : file-like, optional
        Where progress goes (default ``sys.stderr``, looked up at the call).

    Returns
    -------
    ProgressRenderer or None

    Raises
    ------
    ValueError
        For any other string.
    """
    if progress is None or progress is False:
        return None
    if not isinstance(progress, bool | str):
        return progress
    mode = "auto" if progress is True else progress
    if mode not in ("auto", "rich", "plain"):
        raise ValueError(f"progress must be True, False, 'auto', 'rich' or 'plain'; got {mode!r}")
    stream = stream if stream is not None else sys.stderr
    if mode == "plain":
        return PlainProgressRenderer(stream)
    from rich.console import Console

    console = Console(file=stream)
    if mode == "rich":
        return RichProgressRenderer(console)
    if console.is_jupyter:
        # rich draws a live bar in Jupyter through an ipywidgets Output; without it, lines.
        if importlib.util.find_spec("ipywidgets") is not None:
            return RichProgressRenderer(console)
        return PlainProgressRenderer(stream)
    if console.is_terminal and not console.is_dumb_terminal:
        return RichProgressRenderer(console)
    return PlainProgressRenderer(stream)
