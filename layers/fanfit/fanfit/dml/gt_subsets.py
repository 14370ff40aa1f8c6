"""The data of one group-time combination of a staggered-adoption DID, from the panel in long
format: the rows DoubleML's ``DoubleMLDIDBinary`` selects and the columns it derives.

A DoubleMLDIDMulti job uploads the panel once (one row per unit and period: id, period, group,
outcome, covariates); each part, one combination :math:`(g, t_{pre}, t_{eval})`, selects its rows
and derives its columns from it with :func:`gt_subset`, in Prepare and in every CrossFit shard
(:func:`fanfit.jobs.estimate.data.load`), as DoubleML 0.11.4's ``DoubleMLDIDBinary.
_preprocess_data`` builds its ``data_subset`` (``did/did_binary.py``; control groups as
``did/utils/_did_utils.py``; Callaway and Sant'Anna 2021, J. Econometrics 225, section 3).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fanfit.errors import InvalidDataError

__all__ = [
    "CONTROL_GROUPS",
    "CS_COLUMNS",
    "GT_COLUMNS",
    "NEVER_TREATED",
    "draw_gt_folds",
    "gt_subset",
]

#: DoubleML's control groups of a combination.
CONTROL_GROUPS = ("never_treated", "not_yet_treated")
#: How the never-treated units are coded in the group column: ``inf`` (DoubleML's for float
#: groups) or ``zero`` (for integer groups).
NEVER_TREATED = ("inf", "zero")
#: The columns a combination's subset adds to its covariates: the group indicator and the
#: outcome difference (DoubleML's names).
GT_COLUMNS = ("G_indicator", "y_diff")
#: The columns a combination's rows add to the covariates and the outcome with repeated
#: cross-sections (``panel=False``): the group indicator and the evaluation period's indicator.
CS_COLUMNS = ("G_indicator", "t_indicator")


def gt_subset(
    columns: Sequence[str],
    values: np.ndarray,
    *,
    id_col: str,
    t_col: str,
    g_col: str,
    y_col: str,
    x_cols: Sequence[str],
    g_value: float,
    t_value_pre: float,
    t_value_eval: float,
    control_group: str = "never_treated",
    anticipation_periods: int = 0,
    never_treated: str = "inf",
    panel: bool = True,
) -> tuple[list[str], np.ndarray]:
    """One group-time combination's data from a panel in long format: in wide format (panel
    data), or the two periods' rows (repeated cross-sections, ``panel=False``).

    As DoubleML 0.11.4's ``DoubleMLDIDBinary._preprocess_data``: the rows of periods
    :math:`t_{pre}` and :math:`t_{eval}` of the units observed in both, sorted by unit and period;
    :math:`G = 1\\{g_i = g\\}`; the control group :math:`C` the never-treated units, or with
    ``control_group='not_yet_treated'`` also those first treated after period
    :math:`t_{eval + \\delta}` (``t_values[min(index(t_eval) + anticipation_periods, T - 1)]``, the
    panel's sorted periods) outside :math:`G`; the units in :math:`G` or :math:`C`, one row each
    (the covariates of the earlier of the two periods) with
    :math:`\\Delta Y = Y_{t_{eval}} - Y_{t_{pre}}`. With ``panel=False`` as
    ``DoubleMLDIDCSBinary._preprocess_data`` (``did/did_cs_binary.py``): every row of the two
    periods whose unit is in :math:`G` or :math:`C`, sorted by unit and period, with the outcome,
    :math:`G` and ``t_indicator`` (1 in :math:`t_{eval}`).

    Parameters
    ----------
    columns : sequence of str, length n_cols
    values : ndarray of shape (n_rows, n_cols), float
        The panel, one row per unit and period.
    id_col, t_col, g_col, y_col : str
        The unit id, the period, the group (the first treated period; never-treated coded as
        ``never_treated`` says) and the outcome.
    x_cols : sequence of str
        The covariates.
    g_value, t_value_pre, t_value_eval : float
        The combination.
    control_group : {'never_treated', 'not_yet_treated'}
    anticipation_periods : int
        :math:`\\delta`, periods of anticipation (not-yet-treated control group only).
    never_treated : {'inf', 'zero'}
        The never-treated units' group value: ``inf`` or ``0``.
    panel : bool
        Panel data (one row per unit out), else repeated cross-sections (one row per row).

    Returns
    -------
    columns : list of str
        ``[*x_cols, 'G_indicator', 'y_diff']``; with ``panel=False``
        ``[*x_cols, y_col, 'G_indicator', 't_indicator']``.
    values : ndarray of shape (n_units, len(x_cols) + 2), float64
        One row per unit of the combination, in increasing unit id (``panel=False``: one per
        row of the two periods, shape (n_rows, len(x_cols) + 3)); ``G_indicator`` and
        ``t_indicator`` 0 or 1.

    Raises
    ------
    InvalidDataError
        A column missing, a covariate named ``G_indicator`` or ``y_diff``, a unit observed twice
        in one of the periods, an unknown control group or never-treated coding, or no unit in
        the control group.
    """
    if control_group not in CONTROL_GROUPS:
        raise InvalidDataError(
            f"control_group must be one of {', '.join(CONTROL_GROUPS)}, got {control_group!r}"
        )
    if never_treated not in NEVER_TREATED:
        raise InvalidDataError(
            f"never_treated must be one of {', '.join(NEVER_TREATED)}, got {never_treated!r}"
        )
    derived = GT_COLUMNS if panel else CS_COLUMNS
    clash = sorted(set(x_cols if panel else [*x_cols, y_col]) & set(derived))
    if clash:
        raise InvalidDataError(
            f"column {clash[0]!r} has the name of a column DoubleML derives for a group-time "
            "combination; rename it"
        )
    index = {c: i for i, c in enumerate(columns)}
    missing = [c for c in (id_col, t_col, g_col, y_col, *x_cols) if c not in index]
    if missing:
        raise InvalidDataError(
            f"column {missing[0]!r} is not in the panel data (columns: {', '.join(columns)})"
        )
    ids, t = values[:, index[id_col]], values[:, index[t_col]]
    g, y = values[:, index[g_col]], values[:, index[y_col]]
    # rows of the two periods, sorted by unit then period
    rows = np.flatnonzero((t == t_value_pre) | (t == t_value_eval))
    rows = rows[np.lexsort((t[rows], ids[rows]))]
    if panel:  # only the units observed in both periods, once in each
        same = (ids[rows][1:] == ids[rows][:-1]) & (t[rows][1:] == t[rows][:-1])
        if np.any(same):
            raise InvalidDataError(
                f"a unit of column {id_col!r} is observed more than once in period "
                f"{t_value_pre} or {t_value_eval} of column {t_col!r}; the panel has one row "
                "per unit and period"
            )
        unit_ids, counts = np.unique(ids[rows], return_counts=True)
        rows = rows[np.isin(ids[rows], unit_ids[counts == 2])]
    treated = g[rows] == g_value
    never = np.isinf(g[rows]) if never_treated == "inf" else g[rows] == 0
    control = never
    if control_group == "not_yet_treated":
        t_values = np.unique(t)
        position = int(np.flatnonzero(t_values == t_value_eval)[0]) + int(anticipation_periods)
        max_g_value = t_values[min(position, len(t_values) - 1)]
        control = never | ((g[rows] > max_g_value) & ~treated)
    if not np.any(control):
        raise InvalidDataError(
            f"no unit in the control group ({control_group}) of group {g_value}, periods "
            f"{t_value_pre} and {t_value_eval}"
        )
    keep = treated | control
    rows, treated = rows[keep], treated[keep]
    period = t[rows]
    x_index = [index[c] for c in x_cols]
    if not panel:
        x = values[np.ix_(rows, x_index)]
        out = np.column_stack([x, y[rows], treated, period == t_value_eval])
        return [*x_cols, y_col, *CS_COLUMNS], out.astype(np.float64)
    y_diff = y[rows[period == t_value_eval]] - y[rows[period == t_value_pre]]
    first = period == min(t_value_pre, t_value_eval)
    x = values[np.ix_(rows[first], x_index)]
    out = np.column_stack([x, treated[first].astype(np.float64), y_diff]).astype(np.float64)
    return [*x_cols, *GT_COLUMNS], out


#: The stream of :func:`draw_gt_folds` (:func:`fanfit.dml.folds.draw_folds` draws stream 0).
_GT_FOLDS_STREAM = 1


def draw_gt_folds(strata: np.ndarray, n_folds: int, n_rep: int, seed: int, part: int) -> np.ndarray:
    """Folds of one group-time combination drawn from the job's seed, stratified as DoubleML
    stratifies each combination's splitting (its ``_strata``: ``G_indicator`` for panel data,
    ``G_indicator + 2 * t_indicator`` for repeated cross-sections), each combination from its own
    stream.

    Repetition ``r`` of part ``part`` permutes the rows with ``np.random.default_rng(
    SeedSequence(seed, spawn_key=(1, part, r)))``, orders the permutation by stratum (stably)
    and deals the rows to the folds in turn, so every fold holds its share of each stratum.
    DoubleML's own draw (scikit-learn's ``StratifiedKFold`` on NumPy's global state) is not
    reproduced: give its ``smpls`` as the part's folds for DoubleML's numbers.

    Parameters
    ----------
    strata : ndarray of shape (n_obs,)
        Each row's stratum (small non-negative integers).
    n_folds, n_rep, seed, part : int

    Returns
    -------
    ndarray of int64, shape (n_obs, n_rep)

    Raises
    ------
    InvalidDataError
        Fewer rows than folds.
    """
    n_obs = int(strata.shape[0])
    if n_obs < n_folds:
        raise InvalidDataError(
            f"the group-time combination has {n_obs} rows, fewer than n_folds={n_folds}"
        )
    folds = np.empty((n_obs, n_rep), dtype=np.int64)
    for i_rep in range(n_rep):
        rng = np.random.default_rng(
            np.random.SeedSequence(int(seed), spawn_key=(_GT_FOLDS_STREAM, int(part), i_rep))
        )
        order = rng.permutation(n_obs)
        order = order[np.argsort(strata[order], kind="stable")]
        folds[order, i_rep] = np.arange(n_obs, dtype=np.int64) % n_folds
    return folds
