"""fanfit.DoubleMLPLPR through the local pipeline equals DoubleML 0.11's in-process.

GIVEN DoubleML's static panel (make_plpr_CP2025: 100 units x 5 periods, 4 covariates), linear
learners, 2 folds x 1 repetition, WHEN ``fanfit.DoubleMLPLPR`` is fitted on the local stack (one
``plr`` job on DoubleML's transformed data, clustered by unit, with DoubleML's folds) and
DoubleML's class in-process with the same seed, for first differences and for the general correlated-random-effects approach, both with the
IV-type score (``cre_general``: the job adjusts ``ml_m`` by unit before its second stage fits
``ml_g``), THEN coef, se, confint, the summary and the nuisance losses agree to a relative 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:The inplace keyword")]

RTOL = 1e-9
CASES = [("fd_exact", "IV-type"), ("cre_general", "IV-type")]


@pytest.mark.parametrize(("approach", "score"), CASES, ids=[a for a, _ in CASES])
def test_plpr_on_the_stack_equals_doubleml(local_client, approach, score) -> None:
    import doubleml as dml
    from doubleml.plm.datasets import make_plpr_CP2025
    from sklearn.linear_model import LinearRegression

    import fanfit

    # GIVEN a small static panel, linear learners, 2 folds x 1 repetition
    np.random.seed(3)
    frame = make_plpr_CP2025(num_id=100, num_t=5, dim_x=4, theta=0.5, dgp_type="dgp1")
    data = dml.data.DoubleMLPanelData(frame, "y", "d", "time", "id", static_panel=True)
    learners = (LinearRegression(), LinearRegression(), LinearRegression())
    options = {"n_folds": 2, "n_rep": 1, "score": score, "approach": approach}
    if score != "IV-type":
        learners = learners[:2]
    np.random.seed(5)  # the sample splitting (by unit) each class draws at construction
    ours = fanfit.DoubleMLPLPR(data, *learners, **options)
    np.random.seed(5)
    theirs = dml.DoubleMLPLPR(data, *learners, **options)

    # WHEN fanfit's class is fitted on the stack and DoubleML's in-process
    ours.fit(client=local_client, seed=0)
    theirs.fit()

    # THEN one clustered plr job ran on the transformed data, and the numbers are DoubleML's
    assert ours.fanfit_result.model == "plr"
    assert list(ours.fanfit_result.d_cols) == list(theirs.data_transform.d_cols)
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    np.testing.assert_allclose(ours.summary.to_numpy(), theirs.summary.to_numpy(), rtol=RTOL)
    for key, loss in theirs.nuisance_loss.items():
        if key in ours.nuisance_loss:
            np.testing.assert_allclose(ours.nuisance_loss[key], loss, rtol=RTOL, err_msg=key)
