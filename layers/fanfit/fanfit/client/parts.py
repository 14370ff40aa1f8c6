"""A client model of several registry models: checked part by part, run as one job of several parts.

``apos`` (:mod:`fanfit.client.apos`: an ``apo`` part per treatment level) and ``qte``
(:mod:`fanfit.client.qte`: a ``pq``, ``cvar`` or ``lpq`` part per quantile and treatment level)
are no models of the registry (:mod:`fanfit.dml.models`): each is several of its models on one
data frame and one sample splitting (as DoubleML's ``DoubleMLAPOS`` and ``DoubleMLQTE`` are).
Here the data is read once and every part checked once (:func:`check_parts`, with
:func:`~fanfit.client.check.check_estimate`); :func:`submit_parts` then hands the parts'
:class:`~fanfit.client.check.CheckedEstimate` to :meth:`fanfit.client.Client.submit_parts_job`,
which uploads the data once and starts one job whose stages fan out every part's units together.
Aggregate combines the parts as DoubleML does (:mod:`fanfit.dml.combined`) and writes the result
in ``result.json``'s ``combined``, which the client reads (:func:`combined_of`,
:class:`FrameworkView`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fanfit import errors
from fanfit.client.check import CheckedEstimate, check_estimate
from fanfit.client.data import read_table, to_matrix
from fanfit.client.options import EstimateOptions
from fanfit.jobs.documents.estimate import CombinedFramework, CombinedResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CheckedParts",
    "FrameworkView",
    "check_parts",
    "combined_of",
    "submit_parts",
    "treatment_column",
]


@dataclass(frozen=True)
class CheckedParts:
    """The parts of a client model, read and checked once (:func:`check_parts`).

    Attributes
    ----------
    options : tuple of EstimateOptions
        Each part's job options, its ``data`` the frame.
    checked : tuple of CheckedEstimate
        Each part checked (:func:`~fanfit.client.check.check_estimate`), in the same order.
    frame : DataFrame
        The data, read once.
    """

    options: tuple[EstimateOptions, ...]
    checked: tuple[CheckedEstimate, ...]
    frame: Any = field(repr=False)


def treatment_column(
    frame: pd.DataFrame, options: EstimateOptions, message: str
) -> tuple[str, np.ndarray | None]:
    """The one treatment column ``d`` of a client model that takes one, and its values.

    Parameters
    ----------
    frame : DataFrame
    options : EstimateOptions
    message : str
        The error's beginning, e.g. ``"model 'apos' takes one treatment column d"``.

    Returns
    -------
    d_col : str
    values : ndarray of shape (n_obs,), or None
        As the jobs will read them; None when the frame has no such column (then
        :func:`~fanfit.client.check.check_estimate` names it).

    Raises
    ------
    fanfit.errors.InvalidJobError
        ``d`` names no column or several: ``"<message>, got <n>: <columns>"``.
    """
    d = options.d
    d_cols = [c.strip() for c in d.split(",")] if isinstance(d, str) else list(d)
    if len(d_cols) != 1:
        raise errors.InvalidJobError(f"{message}, got {len(d_cols)}: {', '.join(map(str, d_cols))}")
    d_col = str(d_cols[0])
    if d_col not in frame.columns:
        return d_col, None
    _, values = to_matrix(frame, [d_col])
    return d_col, np.asarray(values[:, 0])


def check_parts(
    data: Any,
    s3: Any,
    parts: Sequence[EstimateOptions],
    check_frame: Callable[[pd.DataFrame], None],
) -> CheckedParts:
    """Read the data once, run the model's own check of it, then check every part.

    Parameters
    ----------
    data : str, path, DataFrame or s3:// URI
    s3 : boto3 S3 client or None
        For an ``s3://`` URI.
    parts : sequence of EstimateOptions
        Each part's job options (their ``data`` is replaced by the frame read).
    check_frame : callable
        ``(frame) -> None``: what the client model requires of the data beyond each part's
        checks (``qte``: a binary treatment with both levels; ``apos``: every level present).

    Returns
    -------
    CheckedParts

    Raises
    ------
    fanfit.errors.InvalidJobError, InvalidDataError, InvalidLearnerError, InvalidFoldsError
        As ``check_frame``, then as :func:`~fanfit.client.check.check_estimate` of each part.
    """
    frame = read_table(data, s3)
    check_frame(frame)
    options = tuple(o.replace(data=frame) for o in parts)
    checked = tuple(check_estimate(options=o) for o in options)
    return CheckedParts(options=options, checked=checked, frame=frame)


def submit_parts(
    client: Any,
    parts: CheckedParts,
    model: str,
    labels: Sequence[str],
    *,
    boot_method: str | None = None,
    n_rep_boot: int | None = None,
) -> list[Any]:
    """Start the client model as one job of several parts, as checked.

    Parameters
    ----------
    client : fanfit.client.Client
        Its :meth:`~fanfit.client.Client.submit_parts_job` uploads the data once and starts one
        execution whose stages fan out every part's units together.
    parts : CheckedParts
    model : str
        ``'qte'`` or ``'apos'``.
    labels : sequence of str
        Each part's label, in the parts' order.
    boot_method, n_rep_boot : str or None, int or None
        The multiplier bootstrap of the combined result (its joint bands), or None.

    Returns
    -------
    list of PartJob
        Each part's handle (:meth:`fanfit.client.EstimateJob.part`), in the parts' order: its
        ``result``, ``spec``, ``folds`` and ``predictions`` as a job of one has them; they share
        the job's ``job_id``.

    Raises
    ------
    As :meth:`fanfit.client.Client.submit_parts_job` (what it checks of the stack: the data's
    size against a function's memory, the GPU worker of a Torch learner).
    """
    boot = {} if boot_method is None else {"boot_method": boot_method, "n_rep_boot": n_rep_boot}
    job = client.submit_parts_job(model, labels, parts.checked, parts.options, **boot)
    return [job.part(k, label) for k, label in enumerate(labels)]


def combined_of(part: Any, timeout: float = 3600.0, progress: Any = False) -> CombinedResult:
    """The combined result of the job a part handle belongs to (``result.json``'s ``combined``,
    written by Aggregate), once the job has ended.

    Parameters
    ----------
    part : PartJob
        A part's handle (:meth:`fanfit.client.EstimateJob.part`); its ``job`` is the whole job.
    timeout : float
        Seconds to wait for the job.
    progress : bool or str
        As :meth:`fanfit.client.EstimateJob.wait`.

    Raises
    ------
    fanfit.errors.JobFailedError
        The job failed or did not end within ``timeout``.
    fanfit.errors.InvalidJobError
        The job has no combined result (aggregated by a fanfit before it had one: run it again).
    """
    whole = part.job.result(timeout, progress=progress)
    combined = whole.doc.combined
    if combined is None:
        raise errors.InvalidJobError(
            f"job {part.job_id} has no combined result in its result.json (aggregated by an "
            "older fanfit); run it again"
        )
    return combined


class FrameworkView:
    """A combined framework's numbers as arrays and DoubleML's summary table (read from a
    :class:`~fanfit.jobs.documents.estimate.CombinedFramework`; computed by Aggregate,
    :class:`fanfit.dml.combined.Framework`).

    Attributes
    ----------
    names : list of str
    coef, se, t_stat, pval : ndarray of shape (n_thetas,)
    all_coef, all_se : ndarray of shape (n_thetas, n_rep)
    ci_95 : ndarray of shape (n_thetas, 2)
    ci_joint_95 : ndarray of shape (n_thetas, 2) or None
        The joint band, when the job was bootstrapped.
    """

    def __init__(self, doc: CombinedFramework) -> None:
        self.doc = doc
        self.names = list(doc.names)
        self.coef, self.se = np.array(doc.coef), np.array(doc.se)
        self.t_stat, self.pval = np.array(doc.t_stat), np.array(doc.pval)
        self.all_coef, self.all_se = np.array(doc.all_coef), np.array(doc.all_se)
        self.ci_95 = np.array(doc.ci_95).reshape(-1, 2)
        self.ci_joint_95 = None if doc.ci_joint_95 is None else np.array(doc.ci_joint_95)

    @property
    def summary(self) -> pd.DataFrame:
        """DoubleMLFramework's summary: ``coef, std err, t, P>|t|, 2.5 %, 97.5 %`` by name."""
        import pandas as pd

        return pd.DataFrame(
            {"coef": self.coef, "std err": self.se, "t": self.t_stat, "P>|t|": self.pval,
             "2.5 %": self.ci_95[:, 0], "97.5 %": self.ci_95[:, 1]},
            index=self.names,
        )  # fmt: skip

    def joint(self) -> pd.DataFrame | None:
        """The joint 95 % bands (``confint(joint=True)``) by name, or None without a bootstrap."""
        import pandas as pd

        if self.ci_joint_95 is None:
            return None
        return pd.DataFrame(self.ci_joint_95, index=self.names, columns=["2.5 %", "97.5 %"])

    def to_dict(self) -> dict[str, Any]:
        """The framework's JSON (:class:`~fanfit.jobs.documents.estimate.CombinedFramework`)."""
        return self.doc.to_json_dict()
