"""The job report page: PNG files and one self-contained ``report.html`` that inlines them."""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from fanfit.dml.models import REGISTRY
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.estimate import ShardStats
from fanfit.report.figures import (
    coef_figure,
    overlap_figure,
    thetas_figure,
    timeline_figure,
    train_progress_figure,
    train_timeline_records,
    worker_rounds_figure,
)
from fanfit.report.inputs import (
    EstimateReportInput,
    ReportCost,
    TrainReportInput,
    as_dict,
    estimate_input,
    train_input,
)

__all__ = ["REPORT_HTML", "report_kind", "write_report"]

#: File name of the page in the output directory.
REPORT_HTML = "report.html"

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; height: auto; }
figcaption { font-size: 0.9em; color: #555; }
.notes { font-size: 0.85em; color: #555; }
"""


def report_kind(result: Any) -> str:
    """``'estimate'`` or ``'train'``, from the keys of a result.

    Raises
    ------
    fanfit.errors.InvalidJobError
        If the result is neither.
    """
    r = as_dict(result)
    if "all_coef" in r and "coef" in r:
        return "estimate"
    if "rounds" in r:
        return "train"
    raise InvalidJobError(
        "not an estimate result (no 'coef'/'all_coef') nor a train result (no 'rounds')"
    )


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _estimate_summary(r: EstimateReportInput) -> str:
    rows = []
    for d in r.names:
        ci = (r.ci_95 or {}).get(d, [None, None])
        rows.append([d, r.coef[d], r.se[d], r.t_stat[d], r.pval[d], ci[0], ci[1]])
    table = _table(["", "coef", "std err", "t", "P>|t|", "2.5 %", "97.5 %"], rows)
    facts = _table(
        ["model", "score", "n_obs", "n_folds", "n_rep"],
        [[r.model, r.score, r.n_obs, r.n_folds, r.n_rep]],
    )
    return facts + table


def _parts_section(r: EstimateReportInput, part_costs: Sequence[Any] | None = None) -> str:
    """A job of several parts: every part's estimate, one line per part (and treatment), then
    the combined result: its effects (a QTE's, an APOS's levels) and an APOS's contrasts with
    their pointwise intervals and, bootstrapped, their joint bands; then, when given, each part's
    share of the cost (``part_costs``: :func:`fanfit.cost.part_costs`)."""
    if not r.parts:
        return ""
    rows = [
        [p.label, p.coef[d], p.se[d], *(p.ci_95 or {}).get(d, [None, None])]
        for p in r.parts
        for d in p.coef
    ]
    out = (
        f"<h2>Parts of this job</h2>\n<p>{len(r.parts)} parts, one execution; the summary above is "
        f"the first part's.</p>\n{_table(['part', 'coef', 'std err', '2.5 %', '97.5 %'], rows)}"
    )
    c = r.combined
    if c is not None:
        what = {"qte": "quantile treatment effects (DoubleMLQTE)",
                "apos": "average potential outcomes (DoubleMLAPOS)"}.get(c.model, c.model)  # fmt: skip
        boot = (
            f"; joint bands: {c.boot_method} multiplier bootstrap, {c.n_rep_boot} draws, seed {c.seed}"
            if c.boot_method else "; no bootstrap (no joint bands)"
        )  # fmt: skip
        out += f"\n<h2>Combined result</h2>\n<p>{html.escape(what)}, score {html.escape(c.score)}{html.escape(boot)}.</p>"
        frames = [("effects", c.effects)]
        if c.contrasts is not None:
            frames.append((f"causal contrasts against level {c.reference_level:g}", c.contrasts))
        for title, f in frames:
            joint: list[list[Any]] = [[None, None]] * len(f.names)
            joint = list(f.ci_joint_95 or joint)
            rows = [[n, f.coef[i], f.se[i], f.t_stat[i], f.pval[i], *f.ci_95[i], *joint[i]]
                    for i, n in enumerate(f.names)]  # fmt: skip
            header = ["", "coef", "std err", "t", "P>|t|", "2.5 %", "97.5 %", "joint 2.5 %",
                      "joint 97.5 %"]  # fmt: skip
            out += f"\n<h3>{html.escape(title)}</h3>\n{_table(header, rows)}"
    if part_costs:
        rows = [[c.label, c.n_units, c.fit_s, c.billed_gb_s, 100 * c.share, c.usd]
                for c in part_costs]  # fmt: skip
        out += (
            "\n<h3>Cost per part</h3>\n<p>Each shard's billed GB-seconds split among the parts "
            "whose units it fitted, by their fit seconds; the job's total in that proportion.</p>\n"
            + _table(["part", "units", "fit s", "billed GB-s", "share %", "USD"], rows)
        )
    return out


def _learner_text(learner: Any) -> str:
    """A learner as fanfit writes it (``NAME:{json}``), from the spec's ``{"name", "params"}``."""
    from fanfit.learners import LearnerSpec

    try:
        return str(LearnerSpec.from_dict(learner))
    except (InvalidJobError, TypeError, ValueError):
        return str(learner)


def _job_section(r: EstimateReportInput) -> str:
    """The job's columns, learners and seed, from ``result.json``'s ``spec``."""
    spec = r.spec
    if spec is None:
        return "<p>This job's columns, learners and seed were not stored (an older fanfit aggregated it).</p>"
    rows: list[list[Any]] = [
        ["outcome (y_col)", spec.y_col],
        ["treatments (d_cols)", ", ".join(spec.d_cols)],
        ["covariates (x_cols)", ", ".join(spec.x_cols)],
        ["instruments (z_cols)", ", ".join(spec.z_cols) or "none"],
        ["seed", str(spec.seed)],
        ["n_folds x n_rep", f"{spec.n_folds} x {spec.n_rep}"],
    ]
    mdef = REGISTRY.get(r.model)
    if mdef is not None and mdef.ipw_options:
        rows.append(["trimming_threshold", spec.trimming_threshold])
        rows.append(["normalize_ipw", spec.normalize_ipw])
    for option in (*mdef.options, *mdef.transform_options) if mdef is not None else ():
        if getattr(spec, option, None) is not None:
            rows.append([option, str(getattr(spec, option))])
    rows += [[name, _learner_text(v)] for name, v in sorted(spec.learners.items())]
    return _table(["option", "value"], rows)


def _loss_section(r: EstimateReportInput) -> str:
    """Every nuisance learner's out-of-sample loss (DoubleML's ``nuisance_loss``) per treatment."""
    loss = r.nuisance_loss
    if loss is None:
        return "<p>No nuisance losses were stored for this job (an older fanfit aggregated it).</p>"
    names = r.names
    metric = r.nuisance_metric or {}
    rows = []
    for key, per_rep in loss.items():
        for j, d in enumerate(names):
            values = [v for row in per_rep if (v := row[j]) is not None]
            mean = sum(values) / len(values) if values else None
            rows.append([key, metric.get(key, "RMSE"), d, mean, min(values, default=None),
                         max(values, default=None)])  # fmt: skip
    return _table(["learner", "loss", "treatment", "mean over repetitions", "min", "max"], rows)


def _train_summary(r: TrainReportInput) -> str:
    rounds = r.rounds
    idle = [rd.idle_fraction for rd in rounds]
    final = r.inertia
    if final is None:
        losses = [rd.loss for rd in rounds if rd.loss is not None]
        final = losses[-1] if losses else None
    return _table(
        ["model", "rounds", "workers", "balance", "sync", "final loss / inertia", "mean idle %"],
        [
            [
                r.model,
                r.n_iter if r.n_iter is not None else len(rounds),
                r.n_workers,
                r.balance,
                r.sync,
                final,
                100.0 * sum(idle) / len(idle) if idle else None,
            ]
        ],
    )


def _cost_section(cost: ReportCost | None) -> str:
    if cost is None:
        return "<p>The cost of this job was not counted.</p>"
    rows: list[list[Any]] = []
    for item in cost.items:
        rows.append([item.service, item.name, item.quantity, item.unit, item.unit_usd, item.usd])
    rows.append(["total", "", "", "", "", cost.total_usd])
    notes = "".join(f"<li>{html.escape(str(n))}</li>" for n in cost.notes)
    return _table(["service", "item", "quantity", "unit", "USD/unit", "USD"], rows) + (
        f'<ul class="notes">{notes}</ul>' if notes else ""
    )


def _save(fig: Figure, path: Path) -> bytes:
    fig.savefig(path, format="png", dpi=100)
    return path.read_bytes()


def write_report(
    result: Any,
    out_dir: str | Path,
    *,
    job_id: str | None = None,
    shards: Sequence[Mapping[str, Any]] | None = None,
    cost: Mapping[str, Any] | None = None,
    part_costs: Sequence[Any] | None = None,
) -> Path:
    """Write the PNGs of a job's figures and ``report.html``, which inlines them.

    Estimate: ``coef.png`` (:func:`~fanfit.report.figures.coef_figure`), ``thetas.png``
    (:func:`~fanfit.report.figures.thetas_figure`), for IRM and IIVM ``overlap.png`` (the
    propensity score overlap, :func:`~fanfit.report.figures.overlap_figure`) and ``timeline.png``
    (the shards, when there are shard records); the page also lists the job's columns, learners
    and seed and every nuisance learner's out-of-sample loss (RMSE or log loss, as DoubleML's
    ``nuisance_loss``); for a job of several parts every part's estimate (a line each), the
    combined result (a QTE's effects, an APOS's levels and contrasts, with their joint bands when
    bootstrapped) and each part's share of the cost. Train: ``progress.png`` (loss or inertia), ``workers.png`` (batch and compute
    time per worker and round) and ``timeline.png`` (the worker steps). The page holds the summary
    table, the cost table and every image as a ``data:image/png;base64`` URI: it loads nothing
    from anywhere (no scripts, no external links) and can be mailed as one file.

    Parameters
    ----------
    result : EstimateResult, TrainResult or dict
        The result, or its ``to_dict()`` / ``result.json``.
    out_dir : str or Path
        Created if missing; existing files of the same names are overwritten.
    job_id : str, optional
        Shown in the title (default: the result's ``job_id``).
    shards : sequence of dict, optional
        Estimate shard records (default: the result's ``timings.shards``), each parsed through
        :class:`fanfit.jobs.documents.estimate.ShardStats` (``EstimateJob.stats()`` gives them).
    cost : dict, optional
        :meth:`fanfit.cost.JobCost.to_dict` (default: the result's ``cost``).
    part_costs : sequence of fanfit.cost.PartCost, optional
        A job of several parts: each part's share of the cost (:func:`fanfit.cost.part_costs`,
        which ``fanfit report`` passes), shown as a table; none without.

    Returns
    -------
    Path
        The path of ``report.html``.

    Raises
    ------
    fanfit.errors.InvalidJobError
        If ``result`` is neither an estimate nor a train result.
        :class:`~fanfit.errors.InvalidDocumentError` (a subclass) when a shard record or a round
        record is malformed, naming it and the field.
    OSError
        If ``out_dir`` cannot be written.
    """
    raw = as_dict(result)
    kind = report_kind(raw)
    r: EstimateReportInput | TrainReportInput
    r = estimate_input(raw) if kind == "estimate" else train_input(raw)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    job_id = job_id or r.job_id or ""
    priced = r.cost if cost is None else (ReportCost.parse(cost, source="cost") if cost else None)
    figures: list[tuple[str, str, Figure]] = []
    if isinstance(r, EstimateReportInput):
        summary = _estimate_summary(r) + _parts_section(r, part_costs)
        figures.append(("coef.png", "Coefficient and 95 % confidence interval", coef_figure(r)))
        figures.append(("thetas.png", "Per-repetition estimates", thetas_figure(r)))
        if r.propensity_overlap is not None:
            figures.append(("overlap.png", "Propensity score overlap: m_hat per group",
                            overlap_figure(r)))  # fmt: skip
        summary += (
            f"\n<h2>Job</h2>\n{_job_section(r)}\n"
            f"<h2>Nuisance learners: out-of-sample loss</h2>\n{_loss_section(r)}"
        )
        given = shards if shards is not None else r.timings.shards
        records = [  # each a CrossFit shard's statistics (ShardStats), drawn as a dict
            ShardStats.parse(s, source=f"shard record {i}").to_json_dict()
            for i, s in enumerate(given)
        ]
        if records:
            figures.append(("timeline.png", "Shards on their workers (cold starts hatched)",
                            timeline_figure(records, lane_key="pid")))  # fmt: skip
    else:
        summary = _train_summary(r)
        figures.append(("progress.png", "Loss or inertia per round", train_progress_figure(r)))
        figures.append(("workers.png", "Batch and compute time per worker and round",
                        worker_rounds_figure(r)))  # fmt: skip
        records = train_timeline_records(r)
        if records:
            figures.append(("timeline.png", "Worker steps of every round (cold starts hatched)",
                            timeline_figure(records, lane_key="worker")))  # fmt: skip
    blocks = []
    for name, caption, fig in figures:
        data = base64.b64encode(_save(fig, out / name)).decode("ascii")
        blocks.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}" '
            f'data-file="{html.escape(name)}"><figcaption>{html.escape(caption)} '
            f"({html.escape(name)})</figcaption></figure>"
        )
    title = f"fanfit {kind} report" + (f": {job_id}" if job_id else "")
    page = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        f"<p>Execution: {html.escape(r.execution_arn)}; written "
        f"{html.escape(time.strftime('%Y-%m-%d %H:%M:%S %Z'))}.</p>\n"
        f"<h2>Summary</h2>\n{summary}\n<h2>Cost (AWS list prices)</h2>\n{_cost_section(priced)}\n"
        "<h2>Figures</h2>\n" + "\n".join(blocks) + "\n</body>\n</html>\n"
    )
    path = out / REPORT_HTML
    path.write_text(page, encoding="utf-8")
    return path
