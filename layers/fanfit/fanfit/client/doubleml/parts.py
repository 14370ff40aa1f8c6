"""The ``fit`` of fanfit's multi-part DoubleML classes: one job of several parts.

DoubleMLQTE, DoubleMLAPOS and DoubleMLDIDMulti fit one DoubleML model per part (a quantile and
treatment level, a treatment level, a group-time combination); :class:`_SideBySide`, the mixin
each puts before DoubleML's class, submits them as one job of several parts
(:func:`_submit_parts`, :meth:`fanfit.client.Client.submit_parts_job`), hands every part's
out-of-fold predictions to DoubleML's ``fit(external_predictions=...)`` and checks each part's
coef and se against its job's (relative :data:`~fanfit.client.doubleml.base.RTOL`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fanfit import errors
from fanfit.client.doubleml.base import (
    RTOL,
    _check,
    _check_fit_options,
    _search_submit,
    _unsupported,
    default_client,
)
from fanfit.client.doubleml.tune_methods import _TunesModels

__all__: list[str] = []


def _submit_parts(
    client: Any,
    model: str,
    parts: list[tuple[str, pd.DataFrame, dict[str, Any]]],
    job_options: Mapping[str, Any],
) -> list[Any]:
    """Start the parts of a multi-part DoubleML class as one job of several parts
    (:meth:`fanfit.client.Client.submit_parts_job`, model ``model``), every part on the same data
    (DoubleMLDIDMulti's parts select their rows from one upload instead: its own
    ``_fanfit_submit``).

    Returns
    -------
    list of PartJob
        Each part's handle (:class:`fanfit.client.estimate.PartJob`), in order.

    Raises
    ------
    fanfit.errors.InvalidJobError
        A part on other data than the first (:func:`fanfit.client.estimate.submit_parts_job`).
    """
    pairs = [_check(frame, {**o, **job_options}) for _, frame, o in parts]
    given, checked = [g for g, _ in pairs], [c for _, c in pairs]
    labels = [label for label, _, _ in parts]
    job = client.submit_parts_job(model, labels, checked, given)
    return [job.part(k, label) for k, label in enumerate(labels)]


class _SideBySide(_TunesModels):
    """What fanfit's multi-part DoubleML classes (DoubleMLQTE, DoubleMLAPOS, DoubleMLDIDMulti)
    add to DoubleML's: :meth:`fit` submits one job of several parts (:meth:`_fanfit_submit`),
    then hands the parts' predictions to DoubleML's own ``fit(external_predictions=...)``.

    Attributes
    ----------
    fanfit_jobs, fanfit_results : list
        The parts of the last fit's job (:class:`fanfit.client.estimate.PartJob`, one job id)
        and their results, one per part (``modellist`` order).
    """

    fanfit_jobs: list[Any]
    fanfit_results: list[Any]
    modellist: Any  # DoubleML's, one model per part
    #: The model of the one job of several parts ``fit`` submits (DoubleMLQTE ``'qte'``,
    #: DoubleMLAPOS ``'apos'``, DoubleMLDIDMulti ``'did_multi'``).
    _fanfit_parts_model = ""

    def _fanfit_search_submit(self, client: Any, job_options: Mapping[str, Any]) -> Any:
        """:func:`fanfit.client.doubleml.base._search_submit` (``tune_ml_models``)."""
        return _search_submit(client, job_options)

    def _fanfit_parts(self, seed: int) -> list[tuple[str, pd.DataFrame, dict[str, Any]]]:
        """Per part, in ``modellist`` order: its label, the data its job runs on, its options."""
        raise NotImplementedError

    def _fanfit_external(self, jobs: list[Any]) -> dict[Any, Any]:
        """DoubleML's ``external_predictions`` from the parts' jobs."""
        raise NotImplementedError

    def _fanfit_submit(
        self,
        client: Any,
        parts: list[tuple[str, pd.DataFrame, dict[str, Any]]],
        job_options: Mapping[str, Any],
    ) -> list[Any]:
        """Start the parts (:func:`_submit_parts`); each part's handle, in order."""
        return _submit_parts(client, self._fanfit_parts_model, parts, job_options)

    def fit(
        self,
        client: Any = None,
        n_jobs_models: int | None = None,
        n_jobs_cv: int | None = None,
        store_predictions: bool = True,
        store_models: bool = False,
        external_predictions: Any = None,
        *,
        seed: int = 0,
        timeout: float = 3600.0,
        progress: bool | str | Any = False,
        **job_options: Any,
    ) -> Any:
        """Estimate every part on a stack, side by side, then hand the predictions to DoubleML.

        Parameters as :meth:`_OnStack.fit`; ``n_jobs_models`` and ``n_jobs_cv`` are accepted
        for DoubleML's signature (the stack decides its own parallelism).

        Returns
        -------
        self

        Raises
        ------
        As :meth:`_OnStack.fit`, for any part's job; :class:`fanfit.errors.ParityError` names
        the part whose DoubleML coef or se differ from its job's.
        """
        if external_predictions is not None:
            raise _unsupported(
                "external_predictions",
                "the stack computes the predictions of a model of several parts (fit each "
                "part's DoubleML model with them in-process)",
            )
        if store_models:
            raise _unsupported(
                "store_models=True", "fit each part's DoubleML model with it instead"
            )
        _check_fit_options(store_models, store_predictions, job_options)
        parts = self._fanfit_parts(seed)
        if client is None:
            client = default_client()
        jobs = self._fanfit_submit(client, parts, job_options)
        results = [job.result(timeout=timeout, progress=progress) for job in jobs]
        super().fit(  # type: ignore[misc]
            store_predictions=store_predictions, external_predictions=self._fanfit_external(jobs)
        )
        for (label, _, _), model, result in zip(parts, self.modellist, results):
            for name in ("coef", "se"):
                theirs, ours = np.asarray(getattr(model, name)), np.asarray(getattr(result, name))
                if not np.allclose(theirs, ours, rtol=RTOL, atol=0.0):
                    raise errors.ParityError(
                        f"DoubleML's {name} {theirs} of {label} differs from job "
                        f"{result.execution_arn}'s {ours} (relative tolerance {RTOL})"
                    )
        self.fanfit_jobs, self.fanfit_results = jobs, results
        return self
