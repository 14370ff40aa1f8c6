"""``--model apos``: DoubleML's DoubleMLAPOS from the command line and job files, without DoubleML.

DoubleML's ``DoubleMLAPOS`` fits one ``DoubleMLAPO`` per treatment level on one sample splitting,
and ``causal_contrast(reference_levels)`` subtracts the reference level's model from each other
level's (``DoubleMLFramework.__sub__``). Here each level is one ``apo`` job (model ``apo`` of
:mod:`fanfit.dml.models`, the options of :func:`level_options`), all submitted before any is
awaited (:func:`submit_apos`); the folds are the same in every job (drawn from the one seed, or
the one ``folds`` file). The contrast is computed on the client from each level's score values,
recomputed from its job's stored out-of-fold predictions by :func:`fanfit.dml.aggregate` (the
function Aggregate runs), by :func:`causal_contrast`. Python users with DoubleML installed have
:class:`fanfit.DoubleMLAPOS` instead, which hands the jobs' predictions to DoubleML itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

from fanfit import dml, errors
from fanfit.client.data import to_matrix
from fanfit.client.options import EstimateOptions, parse_treatment_levels
from fanfit.client.parts import CheckedParts, check_parts, submit_parts, treatment_column
from fanfit.client.printout import frame_text, section
from fanfit.dml.scores.plm_irm import aggregate_coefs_and_ses

if TYPE_CHECKING:
    import pandas as pd

    from fanfit.client.estimate import EstimateJob, EstimateResult

__all__ = [
    "APOSJobs",
    "APOSResult",
    "Contrast",
    "FrameworkStats",
    "causal_contrast",
    "check_apos",
    "framework_pvals",
    "framework_summary",
    "level_label",
    "level_options",
    "submit_apos",
]


def level_label(level: float) -> str:
    """A level as the printout names it: ``1`` for 1.0, ``0.5`` for 0.5 (``f"{level:g}"``)."""
    return f"{level:g}"


def level_options(options: EstimateOptions) -> list[EstimateOptions]:
    """The ``apo`` job options of each treatment level of an ``apos`` job, in the given order.

    Parameters
    ----------
    options : EstimateOptions
        ``model='apos'`` with ``treatment_levels`` (``"0,1,2"`` or a sequence of numbers).

    Returns
    -------
    list of EstimateOptions
        Per level: the same options with ``model='apo'``, ``treatment_level`` the level and
        ``treatment_levels`` unset.

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
        options.replace(model="apo", treatment_level=level, treatment_levels=None)
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


def submit_apos(client: Any, data: Any = None, *, options: EstimateOptions) -> APOSJobs:
    """Check (:func:`check_apos`, before anything is uploaded), then start one job whose parts
    are the ``apo`` models of the treatment levels (:func:`fanfit.client.parts.submit_parts`).

    ``client`` is a :class:`fanfit.client.Client`; ``data`` (default ``options.data``) is read
    and uploaded once; ``options`` has ``model='apos'`` and ``treatment_levels``. Raises as
    :func:`check_apos`, then as :meth:`fanfit.client.Client.submit_parts_job`.
    """
    parts = check_apos(data, s3=client.s3, options=options)
    levels = tuple(float(o.treatment_level) for o in parts.options)  # type: ignore[arg-type]
    labels = [f"treatment level {level_label(level)}" for level in levels]
    jobs = submit_parts(client, parts, "apos", labels)
    return APOSJobs(levels=levels, jobs=jobs, frame=parts.frame)


class FrameworkStats:
    """``t_stat`` and ``pval`` of estimates combined as DoubleML's ``DoubleMLFramework`` combines
    them, from ``coef``, ``se`` (shape (n_thetas,)) and ``all_coef``, ``all_se`` (shape
    (n_thetas, n_rep)): :class:`Contrast` (APOS) and :class:`fanfit.client.qte.QTEResult`."""

    coef: np.ndarray
    se: np.ndarray
    all_coef: np.ndarray
    all_se: np.ndarray

    @property
    def t_stat(self) -> np.ndarray:
        """coef / se."""
        return np.asarray(self.coef / self.se)

    @property
    def pval(self) -> np.ndarray:
        """DoubleMLFramework's ``pvals``: the median over repetitions of ``2 * (1 - Phi(|t_r|))``
        (:func:`framework_pvals`)."""
        return framework_pvals(self.all_coef, self.all_se)


@dataclass(frozen=True)
class Contrast(FrameworkStats):
    """Average causal contrasts, as DoubleML's ``DoubleMLAPOS.causal_contrast`` returns them.

    Attributes
    ----------
    names : list of str
        ``"<level> vs <reference>"``, DoubleML's treatment names of the contrasts.
    all_coef, all_se : ndarray of shape (n_contrasts, n_rep)
        Per repetition (DoubleMLFramework's ``all_thetas``, ``all_ses``).
    coef, se : ndarray of shape (n_contrasts,)
        Aggregated over the repetitions (:func:`fanfit.dml.scores.plm_irm.aggregate_coefs_and_ses`).
    """

    names: list[str]
    all_coef: np.ndarray
    all_se: np.ndarray
    coef: np.ndarray
    se: np.ndarray

    @property
    def summary(self) -> pd.DataFrame:
        """DoubleMLFramework's summary: ``coef, std err, t, P>|t|, 2.5 %, 97.5 %`` per contrast."""
        return framework_summary(self.names, self.coef, self.se, self.all_coef, self.all_se)


def framework_pvals(all_coef: np.ndarray, all_se: np.ndarray) -> np.ndarray:
    """DoubleML 0.11.4 ``DoubleMLFramework.pvals``: per repetition ``2 * (1 - Phi(|t|))``, then
    the median over repetitions (Chernozhukov et al. 2018, Definition 4.2).

    Parameters
    ----------
    all_coef, all_se : ndarray of shape (n_thetas, n_rep)

    Returns
    -------
    ndarray of shape (n_thetas,)
    """
    cdf = np.vectorize(NormalDist().cdf, otypes=[float])
    all_t = np.abs(np.asarray(all_coef) / np.asarray(all_se))
    return np.asarray(np.median(2.0 * (1.0 - cdf(all_t)), axis=1), dtype=float)


def framework_summary(
    names: Sequence[str], coef: np.ndarray, se: np.ndarray, all_coef: np.ndarray,
    all_se: np.ndarray,
) -> pd.DataFrame:  # fmt: skip
    """DoubleML 0.11.4 ``DoubleMLFramework.summary``: ``coef, std err, t, P>|t|, 2.5 %, 97.5 %``.

    ``t = coef / se``; ``P>|t|``: :func:`framework_pvals`; the 95 % interval is the median over
    repetitions of ``all_coef -/+ Phi^-1(0.975) * all_se`` (``DoubleMLFramework.confint``).

    Parameters
    ----------
    names : sequence of str, length n_thetas
    coef, se : ndarray of shape (n_thetas,)
    all_coef, all_se : ndarray of shape (n_thetas, n_rep)

    Returns
    -------
    DataFrame indexed by ``names``
    """
    import pandas as pd

    q = NormalDist().inv_cdf(0.975)
    all_coef, all_se = np.asarray(all_coef), np.asarray(all_se)
    lower = np.median(all_coef - all_se * q, axis=1)
    upper = np.median(all_coef + all_se * q, axis=1)
    return pd.DataFrame(
        {"coef": coef, "std err": se, "t": np.asarray(coef) / np.asarray(se),
         "P>|t|": framework_pvals(all_coef, all_se), "2.5 %": lower, "97.5 %": upper},
        index=list(names),
    )  # fmt: skip


def causal_contrast(
    levels: Sequence[float],
    all_coef: np.ndarray,
    psi: np.ndarray,
    psi_deriv: np.ndarray,
    reference: float | None = None,
) -> Contrast:
    r"""Each level's average potential outcome minus the reference level's.

    DoubleML 0.11.4 ``DoubleMLAPOS.causal_contrast`` and ``DoubleMLFramework.__sub__``: with the
    scaled scores :math:`\tilde\psi_{\ell,r} = \psi_{\ell,r} / \bar\psi_{a,\ell,r}` (``construct_framework``),
    per repetition :math:`r`

    .. math::

        \hat\theta_{\ell-\ell_0,r} = \hat\theta_{\ell,r} - \hat\theta_{\ell_0,r}, \qquad
        \hat\sigma^2_{\ell-\ell_0,r} = \frac{1}{N}\cdot\frac{1}{N}\sum_i
            (\tilde\psi_{\ell,r,i} - \tilde\psi_{\ell_0,r,i})^2,

    then the median aggregation over repetitions (:func:`fanfit.dml.scores.plm_irm.aggregate_coefs_and_ses`).

    Parameters
    ----------
    levels : sequence of float, length n_levels
    all_coef : ndarray of shape (n_levels, n_rep)
        Each level's per-repetition APO.
    psi, psi_deriv : ndarray of shape (n_obs, n_rep, n_levels)
        Each level's score values at its estimate and their derivative :math:`\psi_a`.
    reference : float, optional
        The reference level; default the first.

    Returns
    -------
    Contrast
        One row per other level, in the levels' order.

    Raises
    ------
    fanfit.errors.InvalidJobError
        Fewer than two levels, the reference not among them, or shapes that do not agree.
    """
    levels = [float(v) for v in levels]
    if len(levels) < 2:
        raise errors.InvalidJobError("treatment_levels: a causal contrast needs two levels or more")
    ref = levels[0] if reference is None else float(reference)
    if ref not in levels:
        raise errors.InvalidJobError(
            f"the reference level {level_label(ref)} is not one of treatment_levels "
            f"{', '.join(map(level_label, levels))}"
        )
    all_coef, psi, psi_deriv = np.asarray(all_coef), np.asarray(psi), np.asarray(psi_deriv)
    n_levels = len(levels)
    if all_coef.ndim != 2 or all_coef.shape[0] != n_levels or psi.ndim != 3 or (
        psi.shape != psi_deriv.shape or psi.shape[1:] != (all_coef.shape[1], n_levels)
    ):  # fmt: skip
        raise errors.InvalidJobError(
            f"causal_contrast: all_coef {all_coef.shape} must be (n_levels, n_rep) and psi, "
            f"psi_deriv {psi.shape}, {psi_deriv.shape} (n_obs, n_rep, n_levels), n_levels={n_levels}"
        )
    n_obs = psi.shape[0]
    scaled = np.divide(psi, np.mean(psi_deriv, axis=0))  # (n_obs, n_rep, n_levels)
    i_ref = levels.index(ref)
    others = [i for i in range(n_levels) if i != i_ref]
    all_diff = np.array([all_coef[i] - all_coef[i_ref] for i in others])
    diff_psi = np.stack([scaled[:, :, i] - scaled[:, :, i_ref] for i in others])
    all_se = np.sqrt(np.divide(np.mean(np.square(diff_psi), axis=1), n_obs))
    coef, se = aggregate_coefs_and_ses(all_diff, all_se)
    names = [f"{level_label(levels[i])} vs {level_label(ref)}" for i in others]
    return Contrast(names=names, all_coef=all_diff, all_se=all_se, coef=coef, se=se)


def level_scores(
    job: EstimateJob, frame: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One job's per-repetition estimates and score values, from its stored predictions (an
    ``apos`` level's, or a ``qte`` part's: :mod:`fanfit.client.qte`).

    :func:`fanfit.dml.aggregate` (Aggregate's function) of the job's spec, ``frame``'s columns,
    the job's folds and out-of-fold predictions; its estimate must equal the job's.

    Returns
    -------
    all_coef : ndarray of shape (n_rep,)
    psi, psi_deriv : ndarray of shape (n_obs, n_rep)

    Raises
    ------
    fanfit.errors.ParityError
        The estimate recomputed here differs from the job's (relative 1e-9): not the job's data.
    """
    spec = job.spec()
    names, values = to_matrix(frame, list(spec.used_cols))
    data = dml.validate_data(spec, names, values)
    external = job.predictions()
    preds = {k: np.stack([external[d][k] for d in spec.d_cols], axis=2)
             for k in external[spec.d_cols[0]]}  # fmt: skip
    res = dml.aggregate(spec, data, job.folds(), preds)
    ours = np.asarray(job.result().coef)
    if not np.allclose(res.coef, ours, rtol=1e-9, atol=0.0):
        raise errors.ParityError(
            f"the estimate {res.coef} recomputed from job {job.job_id}'s predictions differs from the "
            f"job's {ours}; the data read here is not the data it ran on"
        )
    assert res.psi is not None and res.psi_deriv is not None
    return np.asarray(res.all_coef)[0], res.psi[:, :, 0], res.psi_deriv[:, :, 0]


@dataclass
class APOSJobs:
    """The ``apo`` jobs of an ``apos`` job, one per treatment level (:func:`submit_apos`).

    Attributes
    ----------
    levels : tuple of float
    jobs : list of EstimateJob
        In the levels' order.
    frame : DataFrame
        The data they ran on (for the contrast's score values).
    """

    levels: tuple[float, ...]
    jobs: list[Any]
    frame: Any = field(repr=False)

    @property
    def job_ids(self) -> list[str]:
        """The ids of the jobs that run the levels: one job of several parts."""
        return list(dict.fromkeys(job.job_id for job in self.jobs))

    def result(self, timeout: float = 3600.0, progress: Any = False) -> APOSResult:
        """Wait for every level's job (each within ``timeout`` seconds), then build the contrast.

        Raises
        ------
        fanfit.errors.JobFailedError
            A level's job failed or did not end within ``timeout`` (``WaitTimeoutError``).
        fanfit.errors.ParityError
            As :func:`level_scores`.
        """
        results = [job.result(timeout=timeout, progress=progress) for job in self.jobs]
        contrast = None
        if len(self.levels) > 1:
            scores = [level_scores(job, self.frame) for job in self.jobs]
            all_coef = np.stack([s[0] for s in scores])
            psi = np.stack([s[1] for s in scores], axis=2)
            psi_deriv = np.stack([s[2] for s in scores], axis=2)
            contrast = causal_contrast(self.levels, all_coef, psi, psi_deriv)
        return APOSResult(levels=self.levels, results=results, contrast=contrast)


@dataclass
class APOSResult:
    """The result of an ``apos`` job: each level's APO, and the contrasts against the first level.

    Attributes
    ----------
    levels : tuple of float
    results : list of EstimateResult
        Each level's ``apo`` job result, in the levels' order.
    contrast : Contrast or None
        ``causal_contrast(reference_levels=levels[0])`` as DoubleMLAPOS's; None for one level.
    """

    levels: tuple[float, ...]
    results: list[EstimateResult]
    contrast: Contrast | None

    @property
    def summary(self) -> pd.DataFrame:
        """DoubleMLAPOS's summary: ``coef, std err, t, P>|t|, 2.5 %, 97.5 %`` per level
        (:func:`framework_summary` of the levels' jobs' estimates)."""
        rs = self.results
        return framework_summary(
            [level_label(v) for v in self.levels],
            np.array([r.coef[0] for r in rs]), np.array([r.se[0] for r in rs]),
            np.array([r.all_coef[0] for r in rs]), np.array([r.all_se[0] for r in rs]),
        )  # fmt: skip

    def __str__(self) -> str:
        """DoubleMLAPOS's printout (its fit summary per level), the causal contrast against the
        first level, then each level's printout as ``fanfit estimate --model apo`` prints it."""
        parts = [
            "================== DoubleMLAPOS Object ==================\n",
            f"{section('Fit summary')}\n{frame_text(self.summary)}",
        ]
        if self.contrast is not None:
            ref = level_label(self.levels[0])
            parts.append(
                f"\n{section('Causal contrast')}\n"
                f"causal_contrast(reference_levels={ref})\n{frame_text(self.contrast.summary)}"
            )
        for level, result in zip(self.levels, self.results):
            parts.append(
                f"\n\n########## treatment level {level_label(level)} ##########\n{result}"
            )
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The ``--output json`` object: ``treatment_levels``, ``levels`` (each level's
        :meth:`EstimateResult.to_dict`), and ``causal_contrast`` (``reference_level``,
        ``names``, ``coef``, ``se``, ``t_stat``, ``pval``, ``all_coef``, ``all_se``) or None."""
        out: dict[str, Any] = {
            "model": "apos",
            "treatment_levels": list(self.levels),
            "levels": [r.to_dict() for r in self.results],
            "causal_contrast": None,
        }
        c = self.contrast
        if c is not None:
            out["causal_contrast"] = {
                "reference_level": self.levels[0], "names": c.names, "coef": c.coef.tolist(),
                "se": c.se.tolist(), "t_stat": c.t_stat.tolist(), "pval": c.pval.tolist(),
                "all_coef": c.all_coef.tolist(), "all_se": c.all_se.tolist(),
            }  # fmt: skip
        return out
