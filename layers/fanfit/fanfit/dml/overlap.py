r"""Propensity-score overlap of IRM and IIVM: histograms of ``ml_m``'s predictions per group.

Overlap (positivity, :math:`0 < P(D = 1 \mid X) < 1`) is what the IRM and IIVM scores divide by;
DoubleML's user guide checks it with the histogram of the estimated propensity scores of the
treated and the untreated (DoubleML user guide, "Models: IRM", and the ``trimming_threshold``
option: Chernozhukov et al. 2018, Section 5.1). For IRM ``ml_m`` is :math:`P(D = 1 \mid X)` and the
groups are :math:`D = 0, 1`; for IIVM it is the instrument's propensity :math:`P(Z = 1 \mid X)` and
the groups are :math:`Z = 0, 1`. The Aggregate step stores the counts in ``result.json``
(``propensity_overlap``), so that the report draws them without the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fanfit.dml.data import DMLData
from fanfit.dml.models import column, column_label, model_def
from fanfit.dml.spec import DMLSpec
from fanfit.errors import InvalidJobError

__all__ = ["N_BINS", "propensity_overlap"]

#: Bins of the histogram on [0, 1].
N_BINS = 40


def propensity_overlap(
    spec: DMLSpec, data: DMLData, preds: Mapping[str, np.ndarray], n_bins: int = N_BINS
) -> dict[str, Any] | None:
    r"""Histogram counts of the out-of-fold propensity predictions per treatment (IRM) or instrument (IIVM) group.

    Predictions are taken before clipping, so that the mass outside
    ``[trimming_threshold, 1 - trimming_threshold]`` is visible.

    Parameters
    ----------
    spec : DMLSpec
    data : DMLData
    preds : dict of str to numpy.ndarray of shape (n_obs, n_rep, n_treat)
        With ``'ml_m'``.
    n_bins : int
        Equal-width bins on [0, 1].

    Returns
    -------
    dict or None
        None for PLR and PLIV (no propensity score) and for a score that fits none (DID and
        DIDCS ``'experimental'``). Else JSON-safe: ``variable`` (the treatment
        or instrument column), ``bin_edges`` (``n_bins + 1`` floats), ``counts`` (``"0"`` and
        ``"1"`` -> ``n_rep`` lists of ``n_bins`` ints: rows of that group per bin, per repetition),
        ``trimming_threshold``.

    Raises
    ------
    InvalidJobError
        ``ml_m`` is missing or misshapen.
    InvalidDataError
        IIVM without instrument data.
    """
    mdef = model_def(spec.model)
    group_col = mdef.propensity_group
    if group_col is None or all(n.key != "ml_m" for n in mdef.nuisances(spec)):
        return None  # no propensity, or a score without it (DID 'experimental')
    if "ml_m" not in preds:
        raise InvalidJobError("Propensity overlap needs the 'ml_m' predictions; they are missing.")
    m_hat = np.asarray(preds["ml_m"], dtype=np.float64)
    if m_hat.shape != (data.n_obs, spec.n_rep, spec.n_treat):
        raise InvalidJobError(
            f"Predictions for 'ml_m' have shape {m_hat.shape}, expected {(data.n_obs, spec.n_rep, spec.n_treat)}."
        )
    group = column(spec, data, group_col, 0)
    variable = column_label(spec, group_col)
    edges = np.linspace(0.0, 1.0, int(n_bins) + 1)
    counts = {
        str(level): [
            [
                int(c)
                for c in np.histogram(np.clip(m_hat[group == level, i_rep, 0], 0.0, 1.0), edges)[0]
            ]
            for i_rep in range(spec.n_rep)
        ]
        for level in (0, 1)
    }
    return {
        "variable": variable,
        "bin_edges": [float(e) for e in edges],
        "counts": counts,
        "trimming_threshold": float(spec.trimming_threshold),
    }
