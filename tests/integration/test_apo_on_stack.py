"""fanfit.DoubleMLAPO through the local pipeline equals DoubleML 0.11's DoubleMLAPO in-process.

GIVEN DoubleML's discrete-treatment data (make_irm_data_discrete_treatments, 300 rows, four
levels), linear learners and given folds (2 folds x 1 repetition), WHEN ``fanfit.DoubleMLAPO`` is
fitted on the local stack (Prepare -> CrossFit Lambdas fitting ml_g_d_lvl0, ml_g_d_lvl1 and ml_m
-> Aggregate) and ``doubleml.DoubleMLAPO`` in-process, THEN coef, se, confint, the bootstrap from
the same global seed and nuisance_loss agree to a relative 1e-9.
"""

from __future__ import annotations

import pandas as pd
import pytest
from stack_parity import assert_stack_fit_is_doublemls

pytestmark = pytest.mark.integration

N_OBS = 300


def test_apo_on_the_stack_equals_doubleml(local_client) -> None:
    import doubleml as dml
    from doubleml.irm.datasets import make_irm_data_discrete_treatments
    from sklearn.linear_model import LinearRegression, LogisticRegression

    import fanfit

    # GIVEN DoubleML's discrete-treatment data, linear learners and given folds (2 x 1)
    raw = make_irm_data_discrete_treatments(n_obs=N_OBS, n_levels=3, random_state=5)
    x_cols = [f"x{i}" for i in range(raw["x"].shape[1])]
    frame = pd.DataFrame(raw["x"], columns=x_cols).assign(y=raw["y"], d=raw["d"])
    data = dml.DoubleMLData(frame, "y", "d", x_cols=x_cols)
    smpls = fanfit.dml.folds_to_smpls(fanfit.dml.draw_folds(N_OBS, 2, 1, seed=13))
    args = (data, LinearRegression(), LogisticRegression())
    options = {"treatment_level": 2, "n_folds": 2, "n_rep": 1, "draw_sample_splitting": False}
    ours = fanfit.DoubleMLAPO(*args, **options)
    theirs = dml.DoubleMLAPO(*args, **options)
    ours.set_sample_splitting(smpls)
    theirs.set_sample_splitting(smpls)

    # WHEN fanfit's class is fitted on the stack and DoubleML's in-process
    ours.fit(client=local_client, seed=0)
    theirs.fit()

    # THEN the job ran model apo, and the numbers are DoubleML's
    assert_stack_fit_is_doublemls(ours, theirs, "apo")
