"""fanfit.DoubleMLDIDMulti through the local pipeline equals DoubleML 0.11's in-process.

GIVEN DoubleML's staggered-adoption panel (make_did_CS2021: 120 units, 4 periods, groups first
treated in periods 2 and 3 and never treated), linear/logistic learners, 2 folds x 1 repetition
and three group-time combinations (one pre-treatment, two post-treatment), WHEN
``fanfit.DoubleMLDIDMulti`` is fitted on the local stack (ONE job of one ``did`` part per
combination, each selecting DoubleMLDIDBinary's subset from the one panel upload, with its
folds) and DoubleML's class in-process with the same seed, THEN coef, se, confint, nuisance_loss and the event-study, group
and time aggregations agree to a relative 1e-9. The same with ``panel=False`` on repeated
cross-sections (make_did_cs_CS2021, two combinations): one job of one ``didcs`` part per
combination, each selecting DoubleMLDIDCSBinary's subset from the one upload, with its folds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings(
        "ignore:DoubleMLDIDData is deprecated",
        "ignore:DoubleMLDID.* is deprecated",
        "ignore:The inplace keyword",
        "ignore:The estimated nu2",
    ),
]

RTOL = 1e-9
GT_COMBINATIONS = [(2.0, 0, 1), (2.0, 1, 2), (3.0, 2, 3)]


def _fit_both(local_client, make_data, **options):
    """DoubleML's data generator ``make_data`` (120 units, 4 periods, seed 3), then fanfit's
    DoubleMLDIDMulti fitted on the stack and DoubleML's in-process, both from seed 5 (each
    binary model draws its splitting at construction), linear/logistic learners, 2 folds."""
    import doubleml as dml
    from sklearn.linear_model import LinearRegression, LogisticRegression

    import fanfit

    np.random.seed(3)
    frame = make_data(n_obs=120, dgp_type=1, n_periods=4, n_pre_treat_periods=2,
                      time_type="float")  # fmt: skip
    x_cols = [c for c in frame.columns if c.startswith("Z")]
    data = dml.data.DoubleMLPanelData(frame, y_col="y", d_cols="d", id_col="id", t_col="t",
                                      x_cols=x_cols)  # fmt: skip
    args = (data, LinearRegression(), LogisticRegression())
    np.random.seed(5)
    ours = fanfit.DoubleMLDIDMulti(*args, n_folds=2, **options)
    np.random.seed(5)
    theirs = dml.did.DoubleMLDIDMulti(*args, n_folds=2, **options)
    ours.fit(client=local_client, seed=0)
    theirs.fit()
    return ours, theirs


def test_did_multi_on_the_stack_equals_doubleml(local_client) -> None:
    from doubleml.did.datasets import make_did_CS2021

    # GIVEN a small staggered-adoption panel, linear learners, three group-time combinations
    # WHEN fanfit's class is fitted on the stack and DoubleML's in-process
    ours, theirs = _fit_both(local_client, make_did_CS2021, gt_combinations=GT_COMBINATIONS)

    # THEN ONE job ran, of one did part per combination, and the numbers are DoubleML's
    assert len({job.job_id for job in ours.fanfit_jobs}) == 1
    assert [r.model for r in ours.fanfit_results] == ["did"] * len(GT_COMBINATIONS)
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    for key, loss in theirs.nuisance_loss.items():
        np.testing.assert_allclose(ours.nuisance_loss[key], loss, rtol=RTOL, err_msg=key)
    for aggregation in ("eventstudy", "group", "time"):
        mine, dmls = ours.aggregate(aggregation), theirs.aggregate(aggregation)
        # (coef, std err, t, P>|t| and the interval of each aggregated effect and the overall one)
        for summary in ("aggregated_summary", "overall_summary"):
            pd.testing.assert_frame_equal(
                getattr(mine, summary), getattr(dmls, summary), rtol=RTOL, atol=0,
                obj=f"{aggregation} {summary}",
            )  # fmt: skip


def test_did_multi_cross_sections_on_the_stack_equal_doubleml(local_client) -> None:
    from doubleml.did.datasets import make_did_cs_CS2021

    # GIVEN small repeated cross-sections (make_did_cs_CS2021) and two post-treatment
    # group-time combinations, panel=False
    # WHEN fanfit's class is fitted on the stack (one job, a didcs part per combination) and
    # DoubleML's in-process
    ours, theirs = _fit_both(local_client, make_did_cs_CS2021, panel=False,
                             gt_combinations=[(2.0, 1, 2), (3.0, 2, 3)])  # fmt: skip

    # THEN per combination coef and se are DoubleML's, and so is the event-study aggregation
    # (ONE job here too, of one didcs part per combination)
    assert len({job.job_id for job in ours.fanfit_jobs}) == 1
    assert [r.model for r in ours.fanfit_results] == ["didcs", "didcs"]
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)
    for result, model in zip(ours.fanfit_results, theirs.modellist):
        np.testing.assert_allclose(result.coef, model.coef, rtol=RTOL, atol=0)
        np.testing.assert_allclose(result.se, model.se, rtol=RTOL, atol=0)
    pd.testing.assert_frame_equal(
        ours.aggregate("eventstudy").overall_summary,
        theirs.aggregate("eventstudy").overall_summary, rtol=RTOL, atol=0,
    )  # fmt: skip
