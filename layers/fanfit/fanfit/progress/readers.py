"""Reading a running job's progress: its S3 objects and its execution history, a bounded amount
per snapshot.

- :class:`ProgressTracker` keeps what it has read and builds each :class:`JobProgress` from it;
- :func:`read_shard_stats` reads the ``__stats__`` of a shard's predictions object through
  :class:`fanfit.storage.RangedObject` (ranged GETs of its tail, not the whole object).

Every key comes from :mod:`fanfit.storage`.
"""

from __future__ import annotations

import json
import logging
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

import numpy as np

from fanfit import errors, storage
from fanfit.cost.history import count_state_transitions
from fanfit.jobs.documents import Document
from fanfit.jobs.documents.estimate import EstimateSpec, ShardStats, StageSchedule, StepRecord
from fanfit.jobs.documents.train import RoundRecord, TrainJobFile, TrainSpec
from fanfit.jobs.states import EstimateState, TrainState
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.progress.snapshot import (
    JobProgress,
    estimate_progress,
    running_cost_usd,
    train_progress,
)

__all__ = ["PROGRESS_INTERVAL_S", "ProgressTracker", "read_shard_stats"]

log = logging.getLogger(__name__)

_D = TypeVar("_D", bound=Document)

#: Fewest seconds between two snapshots of one job (each snapshot reads S3 and the history).
PROGRESS_INTERVAL_S = 1.0

#: States of the orchestrator's definitions (:mod:`fanfit.jobs.states`), shown as the job's phase.
_PHASES: dict[str, str] = {
    EstimateState.PREPARE: "preparing",
    EstimateState.PREPARE_NEXT_STAGE: "preparing",
    EstimateState.SCHEDULE_FIRST_WAVE: "scheduling",
    EstimateState.CROSSFIT_WAVE: "cross-fitting",
    EstimateState.SCHEDULE_NEXT_WAVE: "scheduling",
    EstimateState.AGGREGATE: "aggregating",
    EstimateState.WAIT_CLIENT_INPUTS: "waiting for the client",
    EstimateState.WAIT_CLIENT_ESTIMATE: "waiting for the client",
    TrainState.RUN_ROUND: "training",
}


def read_shard_stats(s3: Any, bucket: str, key: str, size: int) -> ShardStats:
    """The ``__stats__`` of a shard's predictions object, without downloading the predictions.

    Parameters
    ----------
    s3 : botocore S3 client
    bucket, key : str
    size : int
        The object's size in bytes (from the listing).

    Returns
    -------
    ShardStats
        What CrossFit stored (:class:`fanfit.jobs.documents.estimate.ShardStats`): ``started_at``,
        ``ended_at``, ``memory_mb``, ``placement``, ``resource``, ...

    Raises
    ------
    KeyError
        The object has no ``__stats__``.
    fanfit.errors.InvalidDocumentError
        Its ``__stats__`` do not fit :class:`ShardStats`.
    OSError, zipfile.BadZipFile
        It is not an ``.npz``.
    """
    with (
        zipfile.ZipFile(storage.RangedObject(s3, bucket, key, size)) as zf,
        zf.open("__stats__.npy") as f,
    ):
        stats = json.loads(str(np.lib.format.read_array(f, allow_pickle=False)))
    return ShardStats.parse(stats, source=f"__stats__ of {key}")


def _priced(
    function: str,
    started_at: float,
    ended_at: float,
    memory_mb: int,
    placement: str = "lambda",
    resource: str | None = None,
) -> dict[str, Any]:
    """The record :func:`~fanfit.progress.snapshot.running_cost_usd` prices, from the fields of a
    parsed document (a shard's statistics, a step's record, a wave entry, a round's worker)."""
    out: dict[str, Any] = {"function": function, "started_at": started_at, "ended_at": ended_at,
                           "memory_mb": memory_mb, "placement": placement}  # fmt: skip
    if resource is not None:
        out["resource"] = resource
    return out


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
        self._spec: EstimateSpec | TrainJobFile | None = None
        #: key -> the priced record (:func:`_priced`) of a shard, a step or a worker; ``{}``: a
        #: shard counted but not priced (its statistics could not be read yet)
        self._records: dict[str, dict[str, Any]] = {}
        self._schedules: dict[int, StageSchedule] = {}
        self._etags: dict[str, tuple[str, StageSchedule]] = {}  # key -> (ETag, parsed schedule)
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

    def _read_spec(self) -> EstimateSpec | TrainJobFile | None:
        """The job's ``spec.json`` through the model of its kind (None while it is missing)."""
        if self._spec is None:
            key = storage.spec_key(self.job_id)
            try:
                data = self.store.get_json(key)
            except Exception as exc:
                if not _missing(exc):
                    raise
                return None
            model: type[EstimateSpec | TrainJobFile] = (
                EstimateSpec if self.kind == "estimate" else TrainJobFile
            )
            self._spec = model.parse(data, source=key)
        return self._spec

    def _list(self, prefix: str) -> dict[str, int]:
        """Key -> size of every object under ``prefix``."""
        pages = self.store.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.store.bucket, Prefix=prefix
        )
        return {o["Key"]: int(o.get("Size", 0)) for p in pages for o in p.get("Contents", [])}

    def _parse_once(self, key: str, model: type[_D]) -> _D | None:
        """A document written once (a step's record, a round record), read through ``model``;
        None while it does not exist. The caller keeps what it needs of it."""
        try:
            return model.parse(self.store.get_json(key), source=key)
        except Exception as exc:
            if not _missing(exc):
                raise
            return None

    def _schedule_if_changed(self, key: str) -> StageSchedule | None:
        """A stage's schedule (it grows wave by wave), downloaded and parsed again only when its
        ETag changed; None while it does not exist."""
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
        schedule = StageSchedule.parse(json.loads(obj["Body"].read()), source=key)
        self._etags[key] = (str(obj.get("ETag", "")), schedule)
        return schedule

    def _read_estimate(self) -> int:
        """Refresh the schedules and the done shards; returns the job's fits (0 if unknown)."""
        from fanfit import dml

        job = self._read_spec()
        if not isinstance(job, EstimateSpec):
            return 0
        # every part's fits in a job of several parts (a QTE, an APOS)
        specs = [dml.DMLSpec.from_dict(p.dml) for p in job.parts or ()] or [
            dml.DMLSpec.from_dict(job.dml)
        ]
        n_stages = max(dml.n_stages(spec) for spec in specs)
        fits_total = sum(
            len(dml.fit_units(spec, s)) for spec in specs for s in range(dml.n_stages(spec))
        )
        budget = self.max_reads
        for stage in range(n_stages):
            if stage > 0 and stage - 1 not in self._schedules:
                break
            schedule = self._schedule_if_changed(storage.schedule_key(self.job_id, stage))
            if schedule is None:
                break
            self._schedules[stage] = schedule
            prep_key = storage.prepare_record_key(self.job_id, stage)
            if prep_key not in self._records:
                prep = self._parse_once(prep_key, StepRecord)
                if prep is not None:
                    self._records[prep_key] = _priced(
                        "Prepare", prep.started_at, prep.ended_at, prep.memory_mb
                    )
            for wave in schedule.waves:
                # a wave's Schedule step, priced from the schedule (a record, not an S3 key)
                self._records.setdefault(
                    f"schedule of stage {stage} wave {wave.wave}",
                    _priced("Schedule", wave.started_at, wave.ended_at, wave.memory_mb),
                )
            listed = self._list(storage.preds_prefix(self.job_id, stage))
            self._done[stage] = {storage.shard_id_of_preds_key(k) for k in listed}
            for key, size in sorted(listed.items()):
                if key in self._records or budget <= 0:
                    continue
                budget -= 1
                try:
                    stats = read_shard_stats(self.store.s3, self.store.bucket, key, size)
                    self._records[key] = _priced(
                        "CrossFit", stats.started_at, stats.ended_at, stats.memory_mb,
                        stats.placement, stats.resource,
                    )  # fmt: skip
                except Exception as exc:  # not yet whole, or not an npz: counted, not priced
                    log.debug("cannot read the statistics of %s: %s", key, exc)
                    self._records[key] = {}
        return fits_total

    def _read_train(self) -> int:
        """Refresh the rounds done; returns the most rounds (0 if unknown)."""
        job = self._read_spec()
        rounds_total = 0
        if isinstance(job, TrainJobFile):
            spec = TrainSpec.from_dict(job.spec)
            rounds_total = spec.rounds
            if spec.model == "kmeans":
                rounds_total += 1  # the final E-step round (inertia of the final centroids)
        listed = self._list(storage.train_rounds_prefix(self.job_id))
        keys = [k for k in listed if storage.is_train_round_key(k)]
        self._rounds_done = len(keys)
        budget = self.max_reads
        for key in sorted(keys):
            if key in self._records or budget <= 0:
                continue
            budget -= 1
            record = self._parse_once(key, RoundRecord)
            self._records[key] = {}  # read: its workers are priced below
            for w in record.workers if record is not None else []:
                self._records[f"{key}#{w.worker}"] = _priced(
                    "TrainShard", w.started_at, w.ended_at, w.memory_mb, resource=w.resource
                )
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
