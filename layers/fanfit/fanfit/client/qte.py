"""``--model qte``: DoubleML's DoubleMLQTE from the command line and job files, without DoubleML.

DoubleML's ``DoubleMLQTE`` fits, on one sample splitting, two models per quantile (treatment
level 0 and 1; ``DoubleMLPQ``, ``DoubleMLCVAR`` or ``DoubleMLLPQ`` by its ``score``) and takes
each quantile's effect as ``modellist_1[i].framework - modellist_0[i].framework``, the frameworks
concatenated over the quantiles (DoubleML 0.11.4 ``irm/qte.py``, ``fit``). Here the model is
one job whose parts are the (quantile, level) ``pq``, ``cvar`` or ``lpq`` models
(:func:`part_options`, :func:`submit_qte`), on one data upload and one sample splitting (drawn
from the one seed, or the one ``folds`` file). Aggregate computes the effects as DoubleML does
(:func:`fanfit.dml.combined.qte_combined`) and, with ``boot_method``, their joint confidence
bands (the multiplier bootstrap seeded by the job's seed); the client reads them from
``result.json``'s ``combined`` (:class:`QTEResult`). Python users with DoubleML installed have
:class:`fanfit.DoubleMLQTE` instead, which hands the parts' predictions to DoubleML itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fanfit import errors
from fanfit.client.options import EstimateOptions
from fanfit.client.parts import (
    CheckedParts,
    FrameworkView,
    check_parts,
    combined_of,
    submit_parts,
    treatment_column,
)
from fanfit.client.printout import frame_text, section
from fanfit.dml.combined import QTE_SCORES
from fanfit.dml.fold_procedures import parse_quantiles
from fanfit.jobs.documents.estimate import CombinedResult

if TYPE_CHECKING:
    import pandas as pd

    from fanfit.client.estimate import EstimateResult

__all__ = [
    "LEVELS",
    "SCORES",
    "QTEJobs",
    "QTEResult",
    "check_qte",
    "part_options",
    "plan_qte",
    "qte_quantiles",
    "qte_score",
    "submit_qte",
]

#: DoubleMLQTE's scores and the model of each (quantile, level) part.
SCORES = QTE_SCORES

#: The treatment levels of every quantile, in DoubleML's order (``modellist_0``, ``modellist_1``).
LEVELS = (0, 1)


def qte_score(score: Any) -> str:
    """DoubleMLQTE's ``score``: ``'PQ'`` (default, when None), ``'CVaR'`` or ``'LPQ'``.

    Raises
    ------
    fanfit.errors.InvalidJobError
        Another value, naming ``score`` and the three.
    """
    if score is None:
        return "PQ"
    if score not in SCORES:
        raise errors.InvalidJobError(
            f"score must be PQ, CVaR or LPQ with model 'qte' (DoubleMLQTE's score: potential "
            f"quantiles, conditional values at risk, or the compliers' quantiles), got {score!r}"
        )
    return str(score)


def qte_quantiles(value: Any) -> tuple[float, ...]:
    """DoubleMLQTE's ``quantiles`` from ``"0.25,0.5,0.75"``, a number or a sequence.

    Returns
    -------
    tuple of float
        Each in (0, 1), in the given order.

    Raises
    ------
    fanfit.errors.InvalidJobError
        Naming ``quantiles``: missing, empty, not numbers, outside (0, 1)
        (:func:`fanfit.dml.fold_procedures.parse_quantiles`), or a level given twice.
    """
    quantiles = parse_quantiles(value)
    if quantiles is None:
        raise errors.InvalidJobError(
            "quantiles must be given with model 'qte': the quantile levels of the effects, "
            "numbers in (0, 1) separated by commas, e.g. 0.25,0.5,0.75 (DoubleMLQTE's quantiles)"
        )
    for i, q in enumerate(quantiles):
        if q in quantiles[:i]:
            raise errors.InvalidJobError(
                f"quantiles must differ: {q:g} is given twice; give each quantile once"
            )
    return quantiles


def part_options(options: EstimateOptions) -> list[tuple[float, int, EstimateOptions]]:
    """The job options of each (quantile, treatment level) of a ``qte`` job.

    Parameters
    ----------
    options : EstimateOptions
        ``model='qte'`` with ``quantiles`` and ``score`` (``PQ``, ``CVaR`` or ``LPQ``; None: PQ).

    Returns
    -------
    list of (quantile, level, EstimateOptions)
        Per quantile (in the given order), level 0 then 1: the same options with the model of the
        score (``pq``, ``cvar``, ``lpq``), its default score, ``treatment`` the level,
        ``quantiles`` the one quantile and no ``boot_method`` (the bootstrap is the effects').

    Raises
    ------
    fanfit.errors.InvalidJobError
        ``model`` is not ``'qte'``; ``treatment`` given (both levels are estimated); a bad
        ``score`` (:func:`qte_score`) or ``quantiles`` (:func:`qte_quantiles`); score ``LPQ``
        without exactly one instrument ``z``, or another score with one.
    """
    if options.model != "qte":
        raise errors.InvalidJobError(f"model must be 'qte' here, got {options.model!r}")
    if options.treatment is not None:
        raise errors.InvalidJobError(
            "treatment must be left out with model 'qte': it estimates both levels 0 and 1 at "
            "every quantile (treatment is the one level of models 'pq', 'cvar' and 'lpq')"
        )
    score = qte_score(options.score)
    quantiles = qte_quantiles(options.quantiles)
    z = options.z
    n_z = (
        0 if z is None else len([c for c in z.split(",") if c.strip()] if isinstance(z, str) else z)
    )
    if score == "LPQ" and n_z != 1:
        raise errors.InvalidJobError(
            f"z must name exactly one binary instrument column with score 'LPQ' of model "
            f"'qte' (the compliers' quantiles), got {n_z}"
        )
    if score != "LPQ" and n_z:
        raise errors.InvalidJobError(
            f"z must be left out with score {score!r} of model 'qte'; use score 'LPQ' for the "
            "compliers' quantile treatment effects with one binary instrument"
        )
    model = SCORES[score]
    return [
        (
            q,
            level,
            options.replace(
                model=model, score=None, treatment=level, quantiles=q, boot_method=None
            ),
        )  # fmt: skip
        for q in quantiles
        for level in LEVELS
    ]


def _check_both_levels(frame: pd.DataFrame, options: EstimateOptions) -> None:
    """One treatment column holding 0 and 1 only, both present.

    Raises
    ------
    fanfit.errors.InvalidJobError
        Not one treatment column (naming ``d``).
    fanfit.errors.InvalidDataError
        A value other than 0 or 1, or a level with no row, naming the column.
    """
    d_col, values = treatment_column(
        frame, options, "model 'qte' takes one binary treatment column d"
    )
    if values is None:  # check_estimate names the missing column
        return
    other = values[np.isfinite(values) & (values != 0) & (values != 1)]
    if other.size:
        raise errors.InvalidDataError(
            f"model 'qte' needs a binary treatment: {d_col!r} holds {other[0]:g} (only 0 and 1 "
            "are allowed)"
        )
    for level in LEVELS:
        if not np.any(values == level):
            raise errors.InvalidDataError(
                f"model 'qte' estimates both treatment levels, but {d_col!r} has no row with "
                f"value {level}"
            )


def check_qte(data: Any = None, *, s3: Any = None, options: EstimateOptions) -> CheckedParts:
    """Check a ``qte`` job on the client, without any stack (``--dry-run``, and before submitting).

    Returns :func:`fanfit.client.parts.check_parts` of ``data`` (default ``options.data``; an
    ``s3://`` URI read through ``s3``): one checked part per (quantile, level), in
    :func:`part_options`' order.

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
        As :func:`part_options`; a treatment column that is not binary or lacks a level; then as
        :func:`~fanfit.client.check.check_estimate` of each part.
    """
    parts = [o for _, _, o in part_options(options)]
    return check_parts(options.data if data is None else data, s3, parts,
                       lambda frame: _check_both_levels(frame, options))  # fmt: skip


def _labels(options: EstimateOptions) -> list[str]:
    """Each part's label, in :func:`part_options`' order."""
    quantiles = qte_quantiles(options.quantiles)
    return [f"quantile {q:g} of treatment {t}" for q in quantiles for t in LEVELS]


def plan_qte(client: Any, data: Any = None, *, options: EstimateOptions) -> Any:
    """Check (:func:`check_qte`), then plan the job of several parts on the stack without running
    anything (:meth:`fanfit.client.Client.plan_parts_estimate`: each stage's placement and shards
    with every part's units, each part's units per stage). Raises as :func:`check_qte`."""
    parts = check_qte(data, s3=client.s3, options=options)
    return client.plan_parts_estimate("qte", _labels(options), parts.checked, parts.options)


def submit_qte(client: Any, data: Any = None, *, options: EstimateOptions) -> QTEJobs:
    """Check (:func:`check_qte`, before anything is uploaded), then start one job whose parts are
    the (quantile, treatment level) models (:func:`fanfit.client.parts.submit_parts`), its
    combined result bootstrapped with ``options.boot_method`` and ``n_rep_boot``.

    ``client`` is a :class:`fanfit.client.Client`; ``data`` (default ``options.data``) is read
    once and uploaded once; ``options`` has ``model='qte'`` and ``quantiles``. Raises as
    :func:`check_qte`, then as :meth:`fanfit.client.Client.submit_parts_job`.
    """
    parts = check_qte(data, s3=client.s3, options=options)
    boot = options.boot_method
    return QTEJobs(
        quantiles=qte_quantiles(options.quantiles),
        score=qte_score(options.score),
        jobs=submit_parts(
            client,
            parts,
            "qte",
            _labels(options),
            boot_method=boot,
            n_rep_boot=int(options.n_rep_boot) if boot else None,
        ),  # fmt: skip
    )


@dataclass
class QTEJobs:
    """The one job of a ``qte`` model and its parts, one per (quantile, treatment level)
    (:func:`submit_qte`).

    Attributes
    ----------
    quantiles : tuple of float
    score : str
        ``'PQ'``, ``'CVaR'`` or ``'LPQ'``.
    jobs : list of PartJob
        The parts' handles: per quantile, level 0 then level 1 (:func:`part_options`' order).
    """

    quantiles: tuple[float, ...]
    score: str
    jobs: list[Any]

    @property
    def job_ids(self) -> list[str]:
        """The ids of the jobs that run the parts: one job of several parts."""
        return list(dict.fromkeys(job.job_id for job in self.jobs))

    @property
    def labels(self) -> list[str]:
        """``"quantile 0.25 of treatment 0"`` per part, in order."""
        return [f"quantile {q:g} of treatment {t}" for q in self.quantiles for t in LEVELS]

    def detached(self) -> dict[str, Any]:
        """What ``--detach --output json`` prints: the job's id, the quantiles and levels."""
        return {"job_id": self.jobs[0].job_id, "quantiles": list(self.quantiles),
                "treatment_levels": list(LEVELS)}  # fmt: skip

    def result(self, timeout: float = 3600.0, progress: Any = False) -> QTEResult:
        """Wait for the job (within ``timeout`` seconds), then read every part's estimate and the
        effects Aggregate combined (:func:`fanfit.client.parts.combined_of`).

        Raises
        ------
        fanfit.errors.JobFailedError
            The job failed or did not end within ``timeout`` (``WaitTimeoutError``).
        fanfit.errors.InvalidJobError
            The job has no combined result (aggregated by an older fanfit).
        """
        combined = combined_of(self.jobs[0], timeout, progress)
        results = [job.result(timeout=timeout, progress=progress) for job in self.jobs]
        return QTEResult(quantiles=self.quantiles, score=self.score, results=results,
                         combined=combined)  # fmt: skip


@dataclass
class QTEResult:
    """The result of a ``qte`` job: the quantile treatment effects as DoubleMLQTE's, read from
    ``result.json``'s ``combined`` (computed by Aggregate,
    :func:`fanfit.dml.combined.qte_combined`).

    Attributes
    ----------
    quantiles : tuple of float
    score : str
    results : list of EstimateResult
        Each (quantile, level) part's estimate, per quantile level 0 then 1.
    combined : CombinedResult
        The job's combined result.
    effects : FrameworkView
        Its effects: ``coef``, ``se``, ``t_stat``, ``pval`` of shape (n_quantiles,), ``all_coef``,
        ``all_se`` of shape (n_quantiles, n_rep), and ``ci_joint_95`` with a bootstrap.
    """

    quantiles: tuple[float, ...]
    score: str
    results: list[EstimateResult]
    combined: CombinedResult

    def __post_init__(self) -> None:
        self.effects = FrameworkView(self.combined.effects)

    coef = property(lambda self: self.effects.coef, doc="Effects, shape (n_quantiles,).")
    se = property(lambda self: self.effects.se, doc="Standard errors, shape (n_quantiles,).")
    t_stat = property(lambda self: self.effects.t_stat, doc="coef / se.")
    pval = property(lambda self: self.effects.pval, doc="DoubleMLFramework's p-values.")
    all_coef = property(lambda self: self.effects.all_coef, doc="Shape (n_quantiles, n_rep).")
    all_se = property(lambda self: self.effects.all_se, doc="Shape (n_quantiles, n_rep).")
    ci_joint = property(lambda self: self.effects.ci_joint_95, doc="Joint bands or None.")
    boot_method = property(lambda self: self.combined.boot_method, doc="The bootstrap, or None.")
    n_rep_boot = property(lambda self: self.combined.n_rep_boot, doc="Its draws, or None.")

    @property
    def summary(self) -> pd.DataFrame:
        """DoubleMLQTE's summary: ``coef, std err, t, P>|t|, 2.5 %, 97.5 %``, indexed by the
        quantiles."""
        table = self.effects.summary
        table.index = list(self.quantiles)
        return table

    def confint(self, joint: bool = False) -> pd.DataFrame:
        """The 95 % confidence intervals per quantile, DoubleMLQTE's ``confint(joint=...)``.

        Raises
        ------
        fanfit.errors.InvalidJobError
            ``joint=True`` without ``boot_method``.
        """
        import pandas as pd

        if not joint:
            return self.summary[["2.5 %", "97.5 %"]]
        if self.ci_joint is None:
            raise errors.InvalidJobError(
                "joint confidence bands need the multiplier bootstrap: run model 'qte' with "
                "boot_method ('normal', 'Bayes' or 'wild')"
            )
        return pd.DataFrame(self.ci_joint, index=list(self.quantiles), columns=["2.5 %", "97.5 %"])

    def potential_quantiles(self) -> pd.DataFrame:
        """Each part's estimate: ``coef, std err, job`` indexed by (quantile, treatment)."""
        import pandas as pd

        index = pd.MultiIndex.from_tuples(
            [(q, t) for q in self.quantiles for t in LEVELS], names=["quantile", "treatment"]
        )
        return pd.DataFrame(
            {"coef": [float(r.coef[0]) for r in self.results],
             "std err": [float(r.se[0]) for r in self.results],
             "job": [r.doc.job_id for r in self.results]},
            index=index,
        )  # fmt: skip

    def __str__(self) -> str:
        """DoubleMLQTE's printout (its fit summary), the joint confidence bands when
        bootstrapped, then the potential quantiles (or CVaRs) of the parts."""
        parts = [
            "================== DoubleMLQTE Object ==================\n",
            f"{section('Fit summary')}\n{frame_text(self.summary)}",
        ]
        if self.ci_joint is not None:
            parts.append(
                f"\n{section('Joint bands')}\nconfint(joint=True), {self.boot_method} bootstrap, "
                f"{self.n_rep_boot} draws\n{frame_text(self.confint(joint=True))}"
            )
        what = {"PQ": "Potential quantiles", "CVaR": "Potential CVaRs", "LPQ": "Local quantiles"}
        parts.append(
            f"\n{section(what[self.score])}\nscore {self.score}, one "
            f"{self.results[0].model if self.results else ''} part each\n"
            f"{frame_text(self.potential_quantiles())}"
        )
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The ``--output json`` object: ``model``, ``score``, ``quantiles``, ``coef``, ``se``,
        ``t_stat``, ``pval``, ``ci_95`` (``[low, high]`` per quantile), ``all_coef``,
        ``all_se``; with a bootstrap ``ci_joint_95``, ``boot_method`` and ``n_rep_boot``; and
        ``parts``: each part's :meth:`EstimateResult.to_dict` with its ``quantile`` and
        ``treatment``."""
        ci = self.confint().to_numpy()
        out: dict[str, Any] = {
            "model": "qte", "score": self.score, "quantiles": list(self.quantiles),
            "coef": self.coef.tolist(), "se": self.se.tolist(), "t_stat": self.t_stat.tolist(),
            "pval": self.pval.tolist(), "ci_95": ci.tolist(), "all_coef": self.all_coef.tolist(),
            "all_se": self.all_se.tolist(),
        }  # fmt: skip
        if self.ci_joint is not None:
            out.update(ci_joint_95=self.ci_joint.tolist(), boot_method=self.boot_method,
                       n_rep_boot=self.n_rep_boot)  # fmt: skip
        pairs = [(q, t) for q in self.quantiles for t in LEVELS]
        out["parts"] = [{"quantile": q, "treatment": t, **r.to_dict()}
                        for (q, t), r in zip(pairs, self.results)]  # fmt: skip
        return out
