"""fanfit.DoubleMLSSM through the local pipeline equals DoubleML 0.11's DoubleMLSSM in-process.

GIVEN DoubleML's sample selection data (make_ssm_data, 300 rows; missing at random, or
nonignorable with the instrument z), linear and logistic learners and given folds (2 folds x 1
repetition), WHEN ``fanfit.DoubleMLSSM`` is fitted on the local stack (Prepare -> CrossFit
Lambdas -> Aggregate; missing at random: ml_g_d0, ml_g_d1 on the selected rows of each arm,
ml_pi and ml_m as units of their own; nonignorable: one unit per fold running the fold's nested
fits, ml_pi on one half of its training rows, ml_m and ml_g_d* on the other) and
``doubleml.DoubleMLSSM`` in-process, THEN coef, se, confint, the bootstrap from the same global
seed and nuisance_loss agree to a relative 1e-9.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from stack_parity import assert_stack_fit_is_doublemls

pytestmark = pytest.mark.integration

N_OBS = 300


@pytest.mark.parametrize("score", ["missing-at-random", "nonignorable"])
def test_ssm_on_the_stack_equals_doubleml(local_client, score) -> None:
    import doubleml as dml
    from doubleml.irm.datasets import make_ssm_data
    from sklearn.linear_model import LinearRegression, LogisticRegression

    import fanfit

    # GIVEN DoubleML's selection data for the score, linear/logistic learners and given folds (2 x 1)
    mar = score == "missing-at-random"
    np.random.seed(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = make_ssm_data(n_obs=N_OBS, dim_x=4, mar=mar, return_type="DataFrame")
    data = dml.DoubleMLSSMData(frame, "y", "d", z_cols=None if mar else "z", s_col="s")
    smpls = fanfit.dml.folds_to_smpls(fanfit.dml.draw_folds(N_OBS, 2, 1, seed=13))
    args = (data, LinearRegression(), LogisticRegression(), LogisticRegression())
    options = {"n_folds": 2, "n_rep": 1, "score": score, "draw_sample_splitting": False}
    ours = fanfit.DoubleMLSSM(*args, **options)
    theirs = dml.DoubleMLSSM(*args, **options)
    ours.set_sample_splitting(smpls)
    theirs.set_sample_splitting(smpls)

    # WHEN fanfit's class is fitted on the stack and DoubleML's in-process
    ours.fit(client=local_client, seed=0)
    theirs.fit()

    # THEN the job ran model ssm with the score, and the numbers are DoubleML's
    assert ours.fanfit_result.score == score
    assert_stack_fit_is_doublemls(ours, theirs, "ssm")
