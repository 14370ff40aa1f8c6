"""The figures of a job report, drawn with matplotlib's Agg canvas (no pyplot, no display).

Every figure of a job takes a result object (``EstimateResult``, ``TrainResult``), its
``to_dict()``, the ``result.json`` or the parsed report input (:mod:`fanfit.report.inputs`: the
figures read the typed fields of :class:`~fanfit.report.inputs.EstimateReportInput` or
:class:`~fanfit.report.inputs.TrainReportInput`, never the dict), and returns a
:class:`matplotlib.figure.Figure` that has not been saved, so a test can read back what was drawn.
:func:`timeline_figure` takes plain records (shard statistics or worker steps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.train import RoundRecord
from fanfit.report.inputs import EstimateReportInput, estimate_input, train_input

__all__ = [
    "coef_figure",
    "overlap_figure",
    "round_records",
    "thetas_figure",
    "timeline_figure",
    "train_progress_figure",
    "train_timeline_records",
    "worker_rounds_figure",
]

#: Colours of warm and cold invocations in the timelines.
WARM, COLD = "tab:blue", "tab:orange"
_Z975 = 1.959963984540054  # Phi^-1(0.975)


def _new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _ci(r: EstimateReportInput, d: str) -> tuple[float, float]:
    if r.ci_95 and d in r.ci_95:
        lo, hi = r.ci_95[d]
        return float(lo), float(hi)
    coef, se = r.coef[d], r.se[d]
    return coef - _Z975 * se, coef + _Z975 * se


def coef_figure(result: Any) -> Figure:
    """The coefficient of each treatment with its 95 % confidence interval (DoubleML's summary).

    One horizontal error bar per treatment (top to bottom in ``d_cols`` order): the marker at
    ``coef``, the bar from the ``2.5 %`` to the ``97.5 %`` bound of ``ci_95`` (pointwise, as
    DoubleML's ``confint()``); the joint interval ``ci_joint_95`` as a second, thicker bar when the
    job ran the multiplier bootstrap. The first error-bar container of the axes is the pointwise one.

    Parameters
    ----------
    result : EstimateResult or dict
        With ``coef`` (treatment -> float) and ``ci_95`` (treatment -> [low, high]); or ``se``, in
        which case the interval is ``coef -/+ 1.96 se``.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` is not an estimate.
    """
    r = estimate_input(result)
    names = r.names
    n = len(names)
    fig = _new_figure(7.0, 1.2 + 0.6 * n)
    ax = fig.add_subplot()
    y = [n - 1 - j for j in range(n)]
    coef = [r.coef[d] for d in names]
    ci = [_ci(r, d) for d in names]
    ax.errorbar(
        coef,
        y,
        xerr=[[c - lo for c, (lo, _) in zip(coef, ci)], [hi - c for c, (_, hi) in zip(coef, ci)]],
        fmt="o",
        color="tab:blue",
        capsize=5,
        label="95 % CI (pointwise)",
    )
    if r.ci_joint_95 is not None:
        joint = [tuple(map(float, r.ci_joint_95[d])) for d in names]
        ax.errorbar(
            coef,
            [v - 0.15 for v in y],
            xerr=[
                [c - lo for c, (lo, _) in zip(coef, joint)],
                [hi - c for c, (_, hi) in zip(coef, joint)],
            ],
            fmt="none",
            color="tab:red",
            capsize=3,
            label="95 % CI (joint, bootstrap)",
        )
    ax.axvline(0.0, color="0.5", linestyle="--", linewidth=0.8)
    for c, yy in zip(coef, y):
        ax.annotate(f"{c:.4g}", (c, yy), textcoords="offset points", xytext=(0, 7), ha="center")
    ax.set_yticks(y, names)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_xlabel("coefficient")
    model = r.model.upper()
    ax.set_title(f"{model} {r.score}: coefficient and 95 % confidence interval".strip())
    ax.legend(loc="best", fontsize="small")
    return fig


def thetas_figure(result: Any) -> Figure:
    """The spread of the per-repetition estimates (one panel per treatment).

    Panel of treatment ``d``: at repetition ``i = 1..n_rep`` the estimate ``all_coef[d][i-1]`` with
    a 95 % bar ``-/+ 1.96 all_se[d][i-1]`` (the first error-bar container), and a horizontal line
    at the aggregated ``coef[d]`` (DoubleML 0.11: the median over repetitions).

    Parameters
    ----------
    result : EstimateResult or dict
        With ``coef``, ``all_coef`` and ``all_se`` (treatment -> list of n_rep floats).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` is not an estimate.
    """
    r = estimate_input(result)
    names = r.names
    fig = _new_figure(7.0, 2.6 * len(names) + 0.4)
    axes = fig.subplots(len(names), 1, squeeze=False)[:, 0]
    for ax, d in zip(axes, names):
        thetas = r.all_coef[d]
        ses = (r.all_se or {}).get(d, [0.0] * len(thetas))
        reps = list(range(1, len(thetas) + 1))
        ax.errorbar(reps, thetas, yerr=[_Z975 * s for s in ses], fmt="o", color="tab:blue",
                    capsize=3, label="repetition estimate, 95 % CI")  # fmt: skip
        ax.axhline(r.coef[d], color="tab:red", linestyle="--",
                   label=f"aggregated coef (median) {r.coef[d]:.4g}")  # fmt: skip
        ax.set_xticks(reps)
        ax.set_xlim(0.5, len(thetas) + 0.5)
        ax.set_xlabel("repetition")
        ax.set_ylabel(f"theta ({d})")
        spread = (max(thetas) - min(thetas)) if thetas else 0.0
        ax.set_title(f"{d}: {len(thetas)} repetition(s), spread (max - min) {spread:.3g}")
        ax.legend(loc="best", fontsize="small")
    return fig


def overlap_figure(result: Any) -> Figure:
    """The propensity-score overlap of an IRM or IIVM estimate: a histogram of ``m_hat`` per group.

    Two step histograms on the same [0, 1] bins, one per group (``D = 0`` and ``D = 1`` for IRM,
    ``Z = 0`` and ``Z = 1`` for IIVM), each normalised to a density and pooled over repetitions,
    from ``result.json``'s ``propensity_overlap`` (:func:`fanfit.dml.overlap.propensity_overlap`:
    out-of-fold ``ml_m`` predictions before clipping); dashed lines at the clipping bounds
    ``trimming_threshold`` and ``1 - trimming_threshold``. Little mass of one group where the
    other has much means weak overlap (DoubleML user guide, IRM; Chernozhukov et al. 2018, 5.1).
    The first two patches of the axes (``StepPatch``) are the groups 0 and 1.

    Parameters
    ----------
    result : EstimateResult or dict
        With ``propensity_overlap``: ``variable``, ``bin_edges`` (n_bins + 1), ``counts``
        (``"0"``/``"1"`` -> n_rep lists of n_bins counts), ``trimming_threshold``.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    fanfit.errors.InvalidJobError
        If the result has no ``propensity_overlap`` (a PLR or PLIV estimate, or an older job).
    """
    r = estimate_input(result)
    ov = r.propensity_overlap
    if ov is None:
        raise InvalidJobError(
            "no 'propensity_overlap' in this result: only IRM and IIVM estimates have a propensity "
            "score, and jobs aggregated by an older fanfit do not store it"
        )
    edges = ov.bin_edges
    widths = [b - a for a, b in zip(edges[:-1], edges[1:])]
    variable = ov.variable
    fig = _new_figure(7.0, 3.6)
    ax = fig.add_subplot()
    for level, color in (("0", "tab:blue"), ("1", "tab:orange")):
        per_rep = ov.counts[level]
        pooled = [float(sum(col)) for col in zip(*per_rep)] if per_rep else [0.0] * len(widths)
        total = sum(pooled)
        density = [c / (total * w) if total else 0.0 for c, w in zip(pooled, widths)]
        ax.stairs(density, edges, label=f"{variable} = {level} ({int(total)} rows)", color=color,
                  fill=True, alpha=0.35)  # fmt: skip
    t = ov.trimming_threshold
    if t > 0:
        for x in (t, 1 - t):
            ax.axvline(x, color="0.4", linestyle="--", linewidth=0.8)
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel(f"m_hat = P({variable} = 1 | X), out of fold")
    ax.set_ylabel("density")
    ax.set_title(f"{r.model.upper()}: propensity score overlap by {variable}")
    ax.legend(loc="best", fontsize="small")
    return fig


def _lanes(records: Sequence[Mapping[str, Any]], key: str | None) -> tuple[list[int], list[str]]:
    """Lane of each record: by ``key`` when every record has it, else greedily (first free lane)."""
    if key and records and all(key in s for s in records):
        first: dict[Any, float] = {}
        for s in records:
            k = s[key]
            first[k] = min(first.get(k, math.inf), float(s["started_at"]))
        order = sorted(first, key=lambda k: (first[k], str(k)))
        index = {k: i for i, k in enumerate(order)}
        return [index[s[key]] for s in records], [f"{key} {k}" for k in order]
    lanes = [0] * len(records)
    free_at: list[float] = []  # free_at[j]: when lane j frees up
    for i in sorted(range(len(records)), key=lambda i: float(records[i]["started_at"])):
        start = float(records[i]["started_at"])
        lane = next((j for j, t in enumerate(free_at) if t <= start), len(free_at))
        if lane == len(free_at):
            free_at.append(0.0)
        free_at[lane] = float(records[i]["ended_at"])
        lanes[i] = lane
    return lanes, [f"lane {j}" for j in range(len(free_at))]


def timeline_figure(
    records: Sequence[Mapping[str, Any]], lane_key: str | None = "pid", title: str | None = None
) -> Figure:
    """A Gantt chart: every shard (or worker step) as a bar on the worker that ran it.

    Bar ``k`` (``ax.patches[k]``, in the order of ``records``) spans
    ``[started_at - t0, ended_at - t0]`` seconds, ``t0`` the earliest ``started_at``, on the lane
    of its worker; cold starts are orange and hatched ``'//'``, warm ones blue. Each bar's ``gid``
    is the record's ``shard_id`` (or ``'r<round>w<worker>'``).

    Parameters
    ----------
    records : sequence of dict
        Per invocation: ``started_at``, ``ended_at`` (epoch s), ``cold_start`` (bool), and the lane
        key; ``EstimateJob.stats()`` or ``result.json``'s ``timings.shards``.
    lane_key : str or None
        The field naming the worker: ``'pid'`` (the warm environment, estimate shards) or
        ``'worker'`` (train). Without it on every record, lanes are assigned greedily (a bar goes
        on the first lane free at its start).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    records = list(records)
    lanes, labels = _lanes(records, lane_key)
    n_lanes = max(len(labels), 1)
    fig = _new_figure(9.0, min(1.6 + 0.35 * n_lanes, 14.0))
    ax = fig.add_subplot()
    t0 = min((float(s["started_at"]) for s in records), default=0.0)
    for s, lane in zip(records, lanes):
        cold = bool(s.get("cold_start"))
        (bar,) = ax.barh(
            lane,
            float(s["ended_at"]) - float(s["started_at"]),
            left=float(s["started_at"]) - t0,
            height=0.7,
            color=COLD if cold else WARM,
            edgecolor="black",
            linewidth=0.5,
            hatch="//" if cold else None,
        )
        bar.set_gid(str(s.get("shard_id", f"r{s.get('round', '')}w{s.get('worker', '')}")))
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first start")
    ax.set_ylabel("worker")
    n_cold = sum(bool(s.get("cold_start")) for s in records)
    ax.set_title(
        title or f"{len(records)} invocation(s) on {len(labels)} worker(s), {n_cold} cold start(s)"
    )
    ax.legend(
        handles=[
            Patch(facecolor=WARM, edgecolor="black", label="warm"),
            Patch(facecolor=COLD, edgecolor="black", hatch="//", label="cold start"),
        ],
        loc="lower right",
        fontsize="small",
    )
    return fig


def round_records(result: Any) -> list[RoundRecord]:
    """The round records of a train result, each parsed through
    :class:`fanfit.jobs.documents.train.RoundRecord`.

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` has no ``rounds``; :class:`~fanfit.errors.InvalidDocumentError` (a subclass)
        naming the round and the field when a round record is malformed.
    """
    return train_input(result).rounds


def train_progress_figure(result: Any) -> Figure:
    """The loss (SGD) or inertia (K-Means) of each round.

    One line (``ax.lines[0]``) through ``(round, value)`` for every round whose record has a value;
    the quantity is ``loss`` when any round has one, else ``inertia``.

    Parameters
    ----------
    result : TrainResult or dict
        With ``rounds`` (each with ``round`` and ``loss`` or ``inertia``).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` is not a train result.
    """
    r = train_input(result)
    rounds = r.rounds
    metric = "loss" if any(rd.loss is not None for rd in rounds) else "inertia"
    values = [(rd.round, rd.loss if metric == "loss" else rd.inertia) for rd in rounds]
    points = [(x, float(v)) for x, v in values if v is not None]
    fig = _new_figure(7.0, 3.2)
    ax = fig.add_subplot()
    ax.plot([p[0] for p in points], [p[1] for p in points], "o-", color="tab:blue", label=metric)
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{r.model or ''}: {metric} per round")
    return fig


def worker_rounds_figure(result: Any) -> Figure:
    """Each worker's batch and compute time per round, and the round's idle fraction.

    Top panel: worker ``i``'s batch (samples) per round, ``axes[0].lines[i]``. Middle: its compute
    seconds per round, ``axes[1].lines[i]``, and the barrier time ``round_s`` (the slowest
    worker) as the last, dashed black line. Bottom: ``idle_fraction`` per round in percent
    (``axes[2].lines[0]``). With LB-BSP the batches move apart and the compute times together.

    Parameters
    ----------
    result : TrainResult or dict
        With ``rounds``, each with ``round``, ``round_s``, ``idle_fraction`` and ``workers`` (each
        with ``batch``, ``compute_s``, ``memory_mb``).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` is not a train result.
    """
    r = train_input(result)
    rounds = r.rounds
    x = [rd.round for rd in rounds]
    n_workers = max((len(rd.workers) for rd in rounds), default=0)
    fig = _new_figure(8.0, 7.5)
    ax_b, ax_t, ax_i = fig.subplots(3, 1, sharex=True)
    for i in range(n_workers):
        ws = [rd.workers[i] if i < len(rd.workers) else None for rd in rounds]
        memory = next((w.memory_mb for w in ws if w is not None), None)
        label = f"worker {i}" + (f" ({memory} MB)" if memory else "")
        ax_b.plot(x, [w.batch if w else math.nan for w in ws], "o-", label=label)
        ax_t.plot(x, [w.compute_s if w else math.nan for w in ws], "o-", label=label)
    ax_t.plot(x, [rd.round_s for rd in rounds], "k--", label="round (barrier)")
    ax_i.plot(x, [100.0 * rd.idle_fraction for rd in rounds], "s-", color="tab:red")
    ax_b.set_ylabel("batch (samples)")
    ax_t.set_ylabel("compute (s)")
    ax_i.set_ylabel("idle (%)")
    ax_i.set_xlabel("round")
    ax_i.set_ylim(bottom=0)
    ax_i.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_b.set_title(f"{r.model or ''}: per-worker batch and compute time per round "
                   f"(balance {r.balance or '?'}, sync {r.sync or '?'})")  # fmt: skip
    ax_b.legend(loc="best", fontsize="small", ncols=2)
    handles = [Line2D([], [], color="k", linestyle="--", label="round (barrier)")]
    ax_t.legend(handles=handles, loc="best", fontsize="small")
    return fig


def train_timeline_records(result: Any) -> list[dict[str, Any]]:
    """Every worker step of a train result as a timeline record (:func:`timeline_figure`).

    Returns
    -------
    list of dict
        ``shard_id`` (``'r<round>w<worker>'``), ``worker``, ``round``, ``started_at``, ``ended_at``,
        ``cold_start``, for each worker of each round.
    """
    return [
        {
            "shard_id": f"r{rd.round}w{w.worker}",
            "worker": w.worker,
            "round": rd.round,
            "started_at": w.started_at,
            "ended_at": w.ended_at,
            "cold_start": w.cold_start,
        }
        for rd in round_records(result)
        for w in rd.workers
    ]
