"""A client model of several registry models: checked part by part, run as one job of several parts.

``apos`` (:mod:`fanfit.client.apos`: an ``apo`` part per treatment level) and ``qte``
(:mod:`fanfit.client.qte`: a ``pq``, ``cvar`` or ``lpq`` part per quantile and treatment level)
are no models of the registry (:mod:`fanfit.dml.models`): each is several of its models on one
data frame and one sample splitting, their results combined on the client (as DoubleML's
``DoubleMLAPOS`` and ``DoubleMLQTE`` combine their models). Here the data is read once and every
part checked once (:func:`check_parts`, with :func:`~fanfit.client.check.check_estimate`);
:func:`submit_parts` then hands the parts' :class:`~fanfit.client.check.CheckedEstimate` to
:meth:`fanfit.client.Client.submit_parts_job`, which uploads the data once and starts one job
whose stages fan out every part's units together.
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

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CheckedParts", "check_parts", "submit_parts", "treatment_column"]


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


def submit_parts(client: Any, parts: CheckedParts, model: str, labels: Sequence[str]) -> list[Any]:
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
    job = client.submit_parts_job(model, labels, parts.checked, parts.options)
    return [job.part(k, label) for k, label in enumerate(labels)]
