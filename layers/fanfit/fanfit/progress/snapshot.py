"""The snapshot model of a job's progress: :class:`JobProgress`, its time left and its line.

Pure: a snapshot is built from records already read (:func:`estimate_progress`,
:func:`train_progress`, :func:`running_cost_usd`); :mod:`fanfit.progress.readers` reads them and
:mod:`fanfit.progress.renderers` shows the snapshots.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fanfit.cost.pricing import job_cost
from fanfit.jobs.documents.estimate import StageSchedule
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.resources import GPU_PREFIX

__all__ = [
    "JobProgress",
    "estimate_progress",
    "eta_seconds",
    "format_line",
    "format_seconds",
    "running_cost_usd",
    "short_job_id",
    "train_progress",
]

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


def format_seconds(seconds: float) -> str:
    """A duration as the line and the bar show it: ``'42 s'``, ``'12 min'``, ``'1.7 h'``."""
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
        parts.append(f"~{format_seconds(p.eta_s)} left")
    if p.cost_usd is not None:
        parts.append(f"${p.cost_usd:.4f}")
    return f"[fanfit] {p.kind} {short_job_id(p.job_id)}: " + ", ".join(parts)


# ------------------------------------------------------------------------- snapshots from records


def estimate_progress(
    job_id: str,
    schedules: Mapping[int, StageSchedule],
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
    schedules : dict of int to StageSchedule
        Stage -> its ``stages/<s>/schedule.json``
        (:class:`~fanfit.jobs.documents.estimate.StageSchedule`: each wave's shards with their
        ids and units); stages not scheduled yet are absent.
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
        for wave in schedule.waves:
            for shard in wave.shards:
                shards_total += 1
                if shard.shard_id in done:
                    shards_done += 1
                    fits_done += len(shard.units)
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
        ``placement`` or ``resource`` (``'gpu'`` / ``'gpu:<type>'``: a GPU worker job of that
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
        if r.get("placement") == "gpu" or str(r.get("resource", "")).startswith(GPU_PREFIX):
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
