"""The printout of a finished estimate, laid out as DoubleML 0.11 prints a fitted model.

``print(dml_plr)`` in DoubleML 0.11 (``DoubleML.__str__``) gives a header and five sections: data
summary, score and algorithm, machine learners with their out-of-sample losses, resampling, fit
summary. :func:`format_estimate` writes the same sections from an
:class:`~fanfit.client.estimate.EstimateResult`, then a section on the run (job, seed, wall
seconds, shards, cost), which DoubleML does not have. ``str(result)`` and ``fanfit estimate``
print it.
"""

from __future__ import annotations

from typing import Any

from fanfit.dml.units import learner_name

__all__ = [
    "DOUBLEML_CLASS",
    "combined_text",
    "format_estimate",
    "frame_text",
    "learner_text",
    "section",
]

#: DoubleML's class of each fanfit model, named in the header.
DOUBLEML_CLASS = {
    "plr": "DoubleMLPLR",
    "irm": "DoubleMLIRM",
    "pliv": "DoubleMLPLIV",
    "iivm": "DoubleMLIIVM",
}

#: Title of fanfit's own section, after DoubleML's.
RUN_TITLE = "Run on fanfit"


def section(title: str) -> str:
    """A section rule as DoubleML writes it: ``'------------------ Data Summary      ------------------'``."""
    return f"------------------ {title:<17} ------------------"


def frame_text(frame: Any) -> str:
    """A table (DoubleML's ``summary``, a ``confint``) printed whole, at any terminal width.

    ``str(frame)`` follows pandas' display options: in a terminal ``display.max_columns`` is 0,
    i.e. as many columns as the terminal's width holds, so a narrow terminal got ``...`` in place
    of columns and ``[1 rows x 6 columns]``. ``DataFrame.to_string`` ignores those options.

    Parameters
    ----------
    frame : pandas.DataFrame or Any
        The table; anything else is printed with ``str``.

    Returns
    -------
    str
        Every row and column, one line per row however long.
    """
    to_string = getattr(frame, "to_string", None)
    return str(to_string()) if callable(to_string) else str(frame)


def learner_text(learner: Any) -> str:
    """How DoubleML shows a learner: the scikit-learn estimator's ``str``, e.g. ``LassoCV(cv=5)``.

    Parameters
    ----------
    learner : dict or str
        ``{"name": ..., "params": {...}}`` or ``'NAME:{json}'`` as the job's spec keeps it.

    Returns
    -------
    str
        The estimator's text (``NAME()`` for a plain learner with its defaults, as scikit-learn
        prints it, without importing scikit-learn); the spec's own text when the learner cannot
        be built here.
    """
    from fanfit.errors import FanfitError
    from fanfit.learners import ALLOWED_LEARNERS, LearnerSpec

    try:
        spec = LearnerSpec.from_dict(learner)
        if spec.name in ALLOWED_LEARNERS and not spec.params:
            return (
                f"{spec.name}()"  # scikit-learn's text of a default estimator, without importing it
            )
        return str(spec.build())
    except (FanfitError, TypeError, ValueError):
        if isinstance(learner, dict):
            params = ", ".join(f"{k}={v!r}" for k, v in (learner.get("params") or {}).items())
            return f"{learner.get('name')}({params})"
        return str(learner)


def _learner_section(result: Any) -> str:
    """DoubleML's ``_format_learner_info_str``: the learners, then the losses by kind."""
    lines = [f"Learner {key}: {learner_text(value)}" for key, value in _ordered_learners(result)]
    loss = result.nuisance_loss
    if loss is not None:
        lines.append("Out-of-sample Performance:")
        metric = result.nuisance_metric
        regressions = [k for k in loss if metric.get(k, "RMSE") == "RMSE"]
        classifications = [k for k in loss if k not in regressions]
        if regressions:
            lines.append("Regression:")
            lines += [f"Learner {k} RMSE: {loss[k]}" for k in regressions]
        if classifications:
            lines.append("Classification:")
            lines += [f"Learner {k} Log Loss: {loss[k]}" for k in classifications]
    return "\n".join(lines).strip()


def _ordered_learners(result: Any) -> list[tuple[str, Any]]:
    """Learners in DoubleML's order (that of the prediction keys: ml_l, ml_m, ml_r, ml_g for PLR and PLIV)."""
    learners = dict(result.learners)
    order: list[str] = []
    for key in result.nuisance_loss or {}:
        name = learner_name(key)
        if name in learners and name not in order:
            order.append(name)
    order += [name for name in sorted(learners) if name not in order]
    return [(name, learners[name]) for name in order]


def _data_section(result: Any) -> str:
    """DoubleML's ``DoubleMLData._data_summary_str``."""
    z_cols = list(result.z_cols) or None
    lines = []
    if result.y_col is not None:
        lines += [
            f"Outcome variable: {result.y_col}",
            f"Treatment variable(s): {list(result.d_cols)}",
            f"Covariates: {list(result.x_cols)}",
            f"Instrument variable(s): {z_cols}",
        ]
    else:  # a result.json written before the spec was kept
        lines.append(f"Treatment variable(s): {list(result.d_cols)}")
    lines.append(f"No. Observations: {result.n_obs}")
    return "\n".join(lines)


def _run_section(result: Any) -> str:
    """fanfit's section: job, seed, bootstrap, wall seconds of the phases, shards, cost."""
    t = result.timings or {}
    doc = result.doc
    lines = [f"Job: {doc.job_id}"]
    if result.seed is not None:
        lines.append(f"Seed: {result.seed}")
    if doc.boot_method is not None:
        lines.append(f"Bootstrap: {doc.boot_method}, {doc.n_rep_boot} replications")
    if "prepare_s" in t:
        lines.append(
            f"Wall seconds: prepare {t.get('prepare_s', 0):.2f}, cross-fitting "
            f"{t.get('crossfit_s', 0):.2f}, aggregate {t.get('aggregate_s', 0):.2f} "
            f"(total {t.get('total_s', 0):.2f})"
        )
    shards = t.get("shards", [])
    lines.append(f"Shards: {len(shards)}, billed {float(t.get('billed_gb_s', 0)):.1f} GB-s")
    cost = result.cost
    if cost:  # the whole job priced (fanfit.cost): Lambda, Step Functions, Batch
        lines.append(
            f"Cost: ${cost['total_usd']:.6f} at AWS list prices: Lambda {cost['billed_gb_s']:.1f} GB-s "
            f"in {cost['lambda_requests']} request(s), {cost['state_transitions']} state "
            f"transition(s), Batch {cost['batch_instance_s']:.0f} instance-s"
        )
    else:  # the shards' billed Lambda time alone (Aggregate's figure): not counted yet
        lines.append(
            f"Cost: about ${float(t.get('lambda_cost_usd', 0)):.5f} for the shards' Lambda time "
            f"(the whole job's: fanfit status {doc.job_id})"
        )
    lines.append(f"Execution: {result.execution_arn}")
    return "\n".join(lines)


def format_estimate(result: Any) -> str:
    """The printout of a finished estimate: DoubleML 0.11's ``DoubleML.__str__``, then the run.

    Sections, as DoubleML names them: the header ``================== DoubleMLPLR Object
    ==================``, "Data Summary" (outcome, treatments, covariates, instruments, rows),
    "Score & Algorithm", "Machine Learner" (each learner, then "Out-of-sample Performance:" with the
    RMSE of the regressions and the log loss of the classifications per repetition and treatment,
    :attr:`EstimateResult.nuisance_loss`), "Resampling", "Fit Summary" (:attr:`EstimateResult.summary`);
    then "Run on fanfit". DoubleML's IIVM adds a robust confidence set, which needs the score values
    and is not shown here.

    Parameters
    ----------
    result : EstimateResult

    Returns
    -------
    str
    """
    name = DOUBLEML_CLASS.get(result.model, f"DoubleML{result.model.upper()}")
    learners = _learner_section(result)
    return (
        f"================== {name} Object ==================\n"
        f"\n{section('Data Summary')}\n"
        f"{_data_section(result)}\n"
        f"\n{section('Score & Algorithm')}\n"
        f"Score function: {result.score}\n"
        f"\n{section('Machine Learner')}\n"
        f"{learners}\n"
        f"\n{section('Resampling')}\n"
        f"No. folds: {result.n_folds}\nNo. repeated sample splits: {result.n_rep}\n"
        f"\n{section('Fit Summary')}\n"
        f"{frame_text(result.summary)}\n"
        f"{_parts_section(result)}"
        f"\n{section(RUN_TITLE)}\n"
        f"{_run_section(result)}"
    )


def _parts_section(result: Any) -> str:
    """A job of several parts (a QTE, an APOS): every part's estimate, one row per part and
    treatment (the sections above show the first part's); empty for a job of one."""
    parts = result.doc.parts
    if not parts:
        return ""
    import pandas as pd

    rows = [
        {"part": p.label, "coef": p.coef[d], "std err": p.se[d], "2.5 %": p.ci_95[d][0],
         "97.5 %": p.ci_95[d][1]}
        for p in parts
        for d in p.coef
    ]  # fmt: skip
    table = frame_text(pd.DataFrame(rows).set_index("part"))
    return (
        f"\n{section('Parts of this job')}\n"
        f"{len(parts)} parts (the sections above show the first)\n{table}\n"
        f"{combined_text(result.doc.combined)}"
    )


def combined_text(combined: Any) -> str:
    """The combined result of a job of several parts (``result.json``'s ``combined``): its
    effects (a QTE's quantile treatment effects, an APOS's levels) and an APOS's contrasts, each
    as DoubleMLFramework's summary with the joint bands when bootstrapped; empty for None."""
    if combined is None:
        return ""
    from fanfit.client.parts import FrameworkView

    what = {"qte": "quantile treatment effects (DoubleMLQTE)",
            "apos": "average potential outcomes (DoubleMLAPOS)"}  # fmt: skip
    boot = (
        f"; joint bands: {combined.boot_method} bootstrap, {combined.n_rep_boot} draws, seed "
        f"{combined.seed}"
        if combined.boot_method
        else ""
    )
    blocks = [f"{section('Combined result')}\n{what.get(combined.model, combined.model)}, "
              f"score {combined.score}{boot}"]  # fmt: skip
    frames = [("", combined.effects)]
    if combined.contrasts is not None:
        frames.append((f"causal contrasts against level {combined.reference_level:g}",
                       combined.contrasts))  # fmt: skip
    for title, doc in frames:
        view = FrameworkView(doc)
        table = view.summary
        joint = view.joint()
        if joint is not None:
            table = table.assign(**{"joint 2.5 %": joint["2.5 %"], "joint 97.5 %": joint["97.5 %"]})
        blocks.append(f"{title}\n{frame_text(table)}" if title else frame_text(table))
    return "\n" + "\n".join(blocks) + "\n"
