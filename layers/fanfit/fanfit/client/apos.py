"""``--model apos``: DoubleML's DoubleMLAPOS from the command line and job files, without DoubleML.

DoubleML's ``DoubleMLAPOS`` fits one ``DoubleMLAPO`` per treatment level on one sample splitting,
and ``causal_contrast(reference_levels)`` subtracts the reference level's model from each other
level's (``DoubleMLFramework.__sub__``). Here the model is one job whose parts are the levels'
``apo`` models (model ``apo`` of :mod:`fanfit.dml.models`, the options of :func:`level_options`;
:func:`submit_apos`), on one data upload and one sample splitting. Aggregate computes the levels'
framework and the contrasts against the first level as DoubleML does
(:func:`fanfit.dml.combined.apos_combined`), with ``boot_method`` their joint bands; the client
reads them from ``result.json``'s ``combined`` (:class:`APOSResult`). Python users with DoubleML
installed have :class:`fanfit.DoubleMLAPOS` instead, which hands the parts' predictions to
DoubleML itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fanfit import errors
from fanfit.client.options import EstimateOptions, parse_treatment_levels
from fanfit.client.parts import (
    CheckedParts,
    FrameworkView,
    check_parts,
    combined_of,
    submit_parts,
    treatment_column,
)
from fanfit.client.printout import frame_text, section
from fanfit.dml.combined import level_label
from fanfit.jobs.documents.estimate import CombinedResult

if TYPE_CHECKING:
    import pandas as pd

    from fanfit.client.estimate import EstimateResult

__all__ = [
    "APOSJobs",
    "APOSResult",
    "check_apos",
    "level_label",
    "level_options",
    "plan_apos",
    "submit_apos",
]


def level_options(options: EstimateOptions) -> list[EstimateOptions]:
    """The ``apo`` job options of each treatment level of an ``apos`` job, in the given order.

    Parameters
    ----------
    options : EstimateOptions
        ``model='apos'`` with ``treatment_levels`` (``"0,1,2"`` or a sequence of numbers).

    Returns
    -------
    list of EstimateOptions
        Per level: the same options with ``model='apo'``, ``treatment_level`` the level,
        ``treatment_levels`` unset and no ``boot_method`` (the bootstrap is the combined result's,
        over every level, as DoubleMLAPOS's ``bootstrap``).

    Raises
    ------
    fanfit.errors.InvalidJobError
        ``model`` is not ``'apos'``; ``treatment_levels`` missing, not numbers, or repeated
        (:func:`~fanfit.client.options.parse_treatment_levels`); ``treatment_level`` given
        (model ``apo``'s); ``cluster_cols`` given (the contrast's cluster-robust variance is
        not built).
    """
    if options.model != "apos":
        raise errors.InvalidJobError(f"model must be 'apos' here, got {options.model!r}")
    if options.treatment_level is not None:
        raise errors.InvalidJobError(
            "treatment_level is an option of model 'apo' (one level); model 'apos' takes "
            "treatment_levels, e.g. 0,1,2"
        )
    if options.treatment_levels is None:
        raise errors.InvalidJobError(
            "model 'apos' needs treatment_levels: the treatment values whose average potential "
            "outcomes are estimated, comma-separated, e.g. 0,1,2 (as DoubleMLAPOS takes them)"
        )
    if options.cluster_cols:
        raise errors.UnsupportedArgumentError(
            "cluster_cols is not supported with model 'apos' (the causal contrast's "
            "cluster-robust variance is not built); run model 'apo' per level, or fanfit.DoubleMLAPOS"
        )
    levels = parse_treatment_levels(options.treatment_levels)
    return [
        options.replace(
            model="apo", treatment_level=level, treatment_levels=None, boot_method=None
        )  # fmt: skip
        for level in levels
    ]


def _check_levels_present(levels: Sequence[float], d: np.ndarray, d_col: str) -> None:
    """Every level must be a value of the treatment column.

    Raises
    ------
    fanfit.errors.InvalidDataError
        Naming ``treatment_levels``, the level, the column and the values it holds.
    """
    values = np.unique(d)
    for level in levels:
        if not np.any(d == level):
            shown = ", ".join(level_label(float(v)) for v in values[:10])
            more = ", ..." if values.size > 10 else ""
            raise errors.InvalidDataError(
                f"treatment_levels: level {level_label(level)} is not a value of {d_col!r} "
                f"(it holds {shown}{more}); give levels that occur in the data"
            )


def check_apos(data: Any = None, *, s3: Any = None, options: EstimateOptions) -> CheckedParts:
    """Check an ``apos`` job on the client, without any stack (``--dry-run``, and before submitting).

    Returns :func:`fanfit.client.parts.check_parts` of ``data`` (default ``options.data``; an
    ``s3://`` URI read through ``s3``): one checked ``apo`` part per level, in order.

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
        As :func:`level_options`; a level that is not a value of the treatment column (naming
        ``treatment_levels``); then as :func:`~fanfit.client.check.check_estimate` of each level.
    """
    per_level = level_options(options)
    levels = [float(o.treatment_level) for o in per_level]  # type: ignore[arg-type]

    def check_frame(frame: pd.DataFrame) -> None:
        d_col, values = treatment_column(
            frame, options, "model 'apos' takes one treatment column d"
        )
        if values is not None:  # else check_estimate names the missing column
            _check_levels_present(levels, values, d_col)

    return check_parts(options.data if data is None else data, s3, per_level, check_frame)


def plan_apos(client: Any, data: Any = None, *, options: EstimateOptions) -> Any:
    """Check (:func:`check_apos`), then plan the job of several parts on the stack without
    running anything (:meth:`fanfit.client.Client.plan_parts_estimate`). Raises as
    :func:`check_apos`."""
    parts = check_apos(data, s3=client.s3, options=options)
    labels = [f"treatment level {level_label(float(o.treatment_level))}"  # type: ignore[arg-type]
              for o in parts.options]  # fmt: skip
    return client.plan_parts_estimate("apos", labels, parts.checked, parts.options)


def submit_apos(client: Any, data: Any = None, *, options: EstimateOptions) -> APOSJobs:
    """Check (:func:`check_apos`, before anything is uploaded), then start one job whose parts
    are the ``apo`` models of the treatment levels (:func:`fanfit.client.parts.submit_parts`), its
    combined result bootstrapped with ``options.boot_method`` and ``n_rep_boot``.

    ``client`` is a :class:`fanfit.client.Client`; ``data`` (default ``options.data``) is read
    and uploaded once; ``options`` has ``model='apos'`` and ``treatment_levels``. Raises as
    :func:`check_apos`, then as :meth:`fanfit.client.Client.submit_parts_job`.
    """
    parts = check_apos(data, s3=client.s3, options=options)
    levels = tuple(float(o.treatment_level) for o in parts.options)  # type: ignore[arg-type]
    labels = [f"treatment level {level_label(level)}" for level in levels]
    boot = options.boot_method
    jobs = submit_parts(client, parts, "apos", labels, boot_method=boot,
                        n_rep_boot=int(options.n_rep_boot) if boot else None)  # fmt: skip
    return APOSJobs(levels=levels, jobs=jobs)


@dataclass
class APOSJobs:
    """The one job of an ``apos`` model and its parts, one ``apo`` model per treatment level
    (:func:`submit_apos`).

    Attributes
    ----------
    levels : tuple of float
    jobs : list of PartJob
        The parts' handles, in the levels' order.
    """

    levels: tuple[float, ...]
    jobs: list[Any]

    @property
    def job_ids(self) -> list[str]:
        """The ids of the jobs that run the levels: one job of several parts."""
        return list(dict.fromkeys(job.job_id for job in self.jobs))

    def result(self, timeout: float = 3600.0, progress: Any = False) -> APOSResult:
        """Wait for the job (within ``timeout`` seconds), then read every level's estimate and
        the framework and contrasts Aggregate combined (:func:`fanfit.client.parts.combined_of`).

        Raises
        ------
        fanfit.errors.JobFailedError
            The job failed or did not end within ``timeout`` (``WaitTimeoutError``).
        fanfit.errors.InvalidJobError
            The job has no combined result (aggregated by an older fanfit).
        """
        combined = combined_of(self.jobs[0], timeout, progress)
        results = [job.result(timeout=timeout, progress=progress) for job in self.jobs]
        return APOSResult(levels=self.levels, results=results, combined=combined)


@dataclass
class APOSResult:
    """The result of an ``apos`` job: DoubleMLAPOS's framework of the levels and the causal
    contrasts against the first level, read from ``result.json``'s ``combined`` (computed by
    Aggregate, :func:`fanfit.dml.combined.apos_combined`).

    Attributes
    ----------
    levels : tuple of float
    results : list of EstimateResult
        Each level's ``apo`` part, in the levels' order.
    combined : CombinedResult
    effects : FrameworkView
        The levels' average potential outcomes (DoubleMLAPOS's ``coef``, ``se``, ...).
    contrast : FrameworkView or None
        ``causal_contrast(reference_levels=levels[0])``; None for one level.
    """

    levels: tuple[float, ...]
    results: list[EstimateResult]
    combined: CombinedResult

    def __post_init__(self) -> None:
        self.effects = FrameworkView(self.combined.effects)
        c = self.combined.contrasts
        self.contrast = None if c is None else FrameworkView(c)

    @property
    def summary(self) -> pd.DataFrame:
        """DoubleMLAPOS's summary: ``coef, std err, t, P>|t|, 2.5 %, 97.5 %`` per level."""
        return self.effects.summary

    def __str__(self) -> str:
        """DoubleMLAPOS's printout (its fit summary per level; the joint bands when
        bootstrapped), the causal contrast against the first level, then each level's printout
        as ``fanfit estimate --model apo`` prints it."""
        parts = [
            "================== DoubleMLAPOS Object ==================\n",
            f"{section('Fit summary')}\n{frame_text(self.summary)}",
        ]
        joint = self.effects.joint()
        boot = f"{self.combined.boot_method} bootstrap, {self.combined.n_rep_boot} draws"
        if joint is not None:
            parts.append(f"\n{section('Joint bands')}\nconfint(joint=True), {boot}\n"
                         f"{frame_text(joint)}")  # fmt: skip
        if self.contrast is not None:
            ref = level_label(self.levels[0])
            parts.append(
                f"\n{section('Causal contrast')}\n"
                f"causal_contrast(reference_levels={ref})\n{frame_text(self.contrast.summary)}"
            )
            joint = self.contrast.joint()
            if joint is not None:
                parts.append(f"confint(joint=True), {boot}\n{frame_text(joint)}")
        for level, result in zip(self.levels, self.results):
            parts.append(
                f"\n\n########## treatment level {level_label(level)} ##########\n{result}"
            )
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The ``--output json`` object: ``treatment_levels``, ``levels`` (each level's
        :meth:`EstimateResult.to_dict`), ``effects`` (the levels' framework: ``names``,
        ``coef``, ``se``, ``t_stat``, ``pval``, ``ci_95``, ``all_coef``, ``all_se``, with a
        bootstrap ``ci_joint_95``), and ``causal_contrast`` (``reference_level`` and the same
        fields) or None."""
        out: dict[str, Any] = {
            "model": "apos",
            "treatment_levels": list(self.levels),
            "levels": [r.to_dict() for r in self.results],
            "effects": self.effects.to_dict(),
            "causal_contrast": None,
        }
        if self.combined.boot_method is not None:
            out.update(boot_method=self.combined.boot_method, n_rep_boot=self.combined.n_rep_boot)
        if self.contrast is not None:
            out["causal_contrast"] = {"reference_level": self.levels[0], **self.contrast.to_dict()}
        return out
