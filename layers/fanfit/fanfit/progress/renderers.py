"""Showing snapshots: a rich bar (a terminal, Jupyter) or plain lines, and the choice between them.

:func:`make_renderer` turns a ``progress=`` option into a :class:`ProgressRenderer`; the client's
polling loop hands it each :class:`~fanfit.progress.snapshot.JobProgress`.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import IO, Any, Protocol

from fanfit.jobs.documents.estimate import PlacementDecision
from fanfit.progress.snapshot import JobProgress, format_line, format_seconds, short_job_id

__all__ = [
    "PlainProgressRenderer",
    "ProgressRenderer",
    "RichProgressRenderer",
    "make_renderer",
    "placement_lines",
]


def placement_lines(decision: PlacementDecision) -> list[str]:
    """The lines ``fanfit status`` and ``--plan-only`` show for a placement decision.

    The objective and its bound, each learner's resource with its predicted seconds and USD, the
    predicted wall seconds and cost, and the inputs (rows/s and start-up per resource, with their
    source: measured, scaled from another memory size, or prior), and for each learner split
    between Lambda and the GPU worker (Proteus) its fits, backlogs, throughputs and predicted ends
    per queue and the penalty weight ``V``.
    """
    if decision.objective == "deadline":
        goal = f"least cost within a deadline of {decision.deadline_s:g} s"
    elif decision.objective == "budget":
        goal = f"least time within a budget of {decision.budget_usd:g} USD"
    else:
        goal = f"least cost within {decision.slack:.0%} of the fastest plan's time"
    lines = [
        f"placement ({goal}{'' if decision.met else '; not met: no plan does'}): "
        f"predicted {decision.predicted_wall_s:.2f} s, {decision.predicted_cost_usd:.6f} USD "
        f"(fastest {decision.fastest_s:.2f} s); offered {', '.join(decision.resources)}"
    ]
    for s in decision.stages:
        lines.append(
            f"    {s.stage} on {s.resource}: {s.seconds:.2f} s, {s.cost_usd:.6f} USD "
            f"({s.workers} worker(s) assumed)"
        )
    for i in decision.inputs:
        lines.append(
            f"    input {i.stage} {i.resource}: {i.rows_per_s:,.0f} rows/s, "
            f"start-up {i.startup_s:.2f} s ({i.source})"
        )
    for d in decision.dispatch or []:
        parts = [
            f"{q.units} on {q.resource} (backlog {q.backlog_s:.2f} s, "
            f"{q.units_per_s:,.1f} fits/s, ends {q.finish_s:.2f} s)"
            for q in d.queues
        ]
        lines.append(
            f"    dispatch {d.stage} (drift-plus-penalty, V {d.V:.4g}, {d.n_fragments} "
            f"fragment(s)): {d.n_units} fit(s): {'; '.join(parts)}"
        )
    return lines


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
        left = f"~{format_seconds(eta)} left" if eta is not None and not progress.ended else ""
        fields: dict[str, Any] = {
            "counts": progress.counts(),
            "elapsed": f"{progress.elapsed_s:.1f} s elapsed",
            "left": left,
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
