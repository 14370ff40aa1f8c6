"""fanfit.dml.gt_subsets: a group-time combination's rows and columns from the long panel are
DoubleML 0.11.4's, bit for bit.

GIVEN make_did_CS2021's panel (and make_did_cs_CS2021's repeated cross-sections) from fixed seeds
and DoubleML's DoubleMLDIDMulti over every kind of combination (standard, all, universal; never
and not-yet-treated control groups; anticipation), WHEN :func:`gt_subset` derives each
combination from the long data, THEN it equals the combination's DoubleMLDIDBinary
(DoubleMLDIDCSBinary) ``data_subset`` exactly; a duplicated unit-period, an empty control group, a
missing column and a covariate named like a derived column are refused by name; and
:func:`draw_gt_folds` deals every stratum to every fold.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fanfit import errors
from fanfit.dml.gt_subsets import draw_gt_folds, gt_subset

doubleml = pytest.importorskip("doubleml")

from doubleml.did.datasets import make_did_CS2021, make_did_cs_CS2021  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

COLUMNS = ["id", "t", "d", "y", "Z1", "Z2", "Z3", "Z4"]
X_COLS = COLUMNS[4:]


def _long(make=make_did_CS2021, n_obs: int = 150):
    np.random.seed(3)
    frame = make(n_obs=n_obs, dgp_type=1, n_periods=4, n_pre_treat_periods=2, time_type="float")
    data = doubleml.data.DoubleMLPanelData(frame, y_col="y", d_cols="d", id_col="id", t_col="t",
                                           x_cols=X_COLS)  # fmt: skip
    return data, frame[COLUMNS].to_numpy(dtype=float)


def _derive(values, binary, model, panel=True):
    return gt_subset(
        COLUMNS, values, id_col="id", t_col="t", g_col="d", y_col="y", x_cols=X_COLS,
        g_value=binary.g_value, t_value_pre=binary.t_value_pre,
        t_value_eval=binary.t_value_eval, control_group=model.control_group,
        anticipation_periods=model.anticipation_periods, panel=panel,
    )  # fmt: skip


@pytest.mark.parametrize(
    "options",
    [{}, {"gt_combinations": "all"}, {"gt_combinations": "universal"},
     {"control_group": "not_yet_treated"},
     {"control_group": "not_yet_treated", "anticipation_periods": 1}],
    ids=["standard", "all", "universal", "not-yet-treated", "anticipation"],
)  # fmt: skip
@pytest.mark.parametrize("panel", [True, False], ids=["panel", "cross-sections"])
def test_every_combination_is_doublemls_subset(options, panel) -> None:
    # GIVEN DoubleML's DIDMulti over the data, with its binary models built
    data, values = _long() if panel else _long(make_did_cs_CS2021, 200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = doubleml.did.DoubleMLDIDMulti(data, LinearRegression(), LogisticRegression(),
                                              panel=panel, **options)  # fmt: skip
    derived = ["G_indicator", "y_diff"] if panel else ["y", "G_indicator", "t_indicator"]
    for binary in model.modellist:
        # WHEN the combination is derived from the long data
        columns, out = _derive(values, binary, model, panel)
        # THEN columns and values are DoubleML's subset, exactly
        assert columns == [*X_COLS, *derived]
        np.testing.assert_array_equal(out, binary.data_subset[columns].to_numpy(dtype=float))


def test_bad_panels_are_refused_by_name() -> None:
    data, values = _long()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = doubleml.did.DoubleMLDIDMulti(data, LinearRegression(), LogisticRegression())
    binary = model.modellist[0]
    # GIVEN a unit observed twice in one period THEN the error names the id column
    twice = np.vstack([values, values[:1]])
    with pytest.raises(errors.InvalidDataError, match="'id' is observed more than once"):
        _derive(twice, binary, model)
    # AND no never-treated unit: the control group is named
    treated = values.copy()
    treated[np.isinf(treated[:, 2]), 2] = 2.0
    with pytest.raises(errors.InvalidDataError, match="no unit in the control group"):
        _derive(treated, binary, model)
    # AND a missing column and a covariate named G_indicator are named
    with pytest.raises(errors.InvalidDataError, match="'y' is not in the panel"):
        gt_subset(["id", "t", "d"], values[:, :3], id_col="id", t_col="t", g_col="d",
                  y_col="y", x_cols=[], g_value=2.0, t_value_pre=0.0, t_value_eval=1.0)  # fmt: skip
    with pytest.raises(errors.InvalidDataError, match="'G_indicator'"):
        gt_subset(COLUMNS, values, id_col="id", t_col="t", g_col="d", y_col="y",
                  x_cols=["G_indicator"], g_value=2.0, t_value_pre=0.0, t_value_eval=1.0)  # fmt: skip


def test_drawn_folds_deal_every_stratum_to_every_fold() -> None:
    # GIVEN 103 rows in three strata of 60, 30 and 13
    strata = np.repeat([0, 1, 2], [60, 30, 13])
    # WHEN 5 folds x 3 repetitions are drawn for part 2
    folds = draw_gt_folds(strata, 5, 3, seed=7, part=2)
    # THEN every fold holds its share of each stratum (differing by at most one row)
    for i_rep in range(3):
        for s, n in ((0, 60), (1, 30), (2, 13)):
            counts = np.bincount(folds[strata == s, i_rep], minlength=5)
            assert counts.max() - counts.min() <= 1 and counts.sum() == n
    # AND the draw depends on the part and the seed only
    np.testing.assert_array_equal(folds, draw_gt_folds(strata, 5, 3, seed=7, part=2))
    assert not np.array_equal(folds, draw_gt_folds(strata, 5, 3, seed=7, part=3))
    with pytest.raises(errors.InvalidDataError, match="fewer than n_folds"):
        draw_gt_folds(strata[:3], 5, 1, seed=7, part=0)
