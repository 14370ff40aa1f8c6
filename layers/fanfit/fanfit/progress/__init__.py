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

The package, bottom to top: :mod:`~fanfit.progress.snapshot` (the snapshot model, the time left,
the line), :mod:`~fanfit.progress.readers` (the S3 objects and the execution history:
:class:`ProgressTracker`, :func:`read_shard_stats`) and :mod:`~fanfit.progress.renderers` (the rich
bar, the plain lines, :func:`make_renderer`). Every public name is re-exported here.
"""

from __future__ import annotations

from fanfit.progress.readers import PROGRESS_INTERVAL_S, ProgressTracker, read_shard_stats
from fanfit.progress.renderers import (
    PlainProgressRenderer,
    ProgressRenderer,
    RichProgressRenderer,
    make_renderer,
)
from fanfit.progress.snapshot import (
    JobProgress,
    estimate_progress,
    eta_seconds,
    format_line,
    format_seconds,
    running_cost_usd,
    short_job_id,
    train_progress,
)

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
    "format_seconds",
    "make_renderer",
    "read_shard_stats",
    "running_cost_usd",
    "short_job_id",
    "train_progress",
]
