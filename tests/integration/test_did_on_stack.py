"""fanfit.DoubleMLDID and DoubleMLDIDCS through the local pipeline equal DoubleML 0.11's in-process.

GIVEN DoubleML's DID data (make_did_SZ2020, 300 rows: panel, and repeated cross-sections with the
time column ``t``), linear/logistic learners and given folds (2 folds x 1 repetition), WHEN
``fanfit.DoubleMLDID`` (observational score, in-sample normalization) and
``fanfit.DoubleMLDIDCS`` (experimental score, unnormalized) are fitted on the local stack
(Prepare -> CrossFit Lambdas fitting ml_g0/ml_g1/ml_m, resp. ml_g_d0_t0 ... ml_g_d1_t1 ->
Aggregate) and DoubleML's classes in-process, THEN coef, se, confint and nuisance_loss agree to
a relative 1e-9.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings(
        "ignore:DoubleMLDIDData is deprecated", "ignore:DoubleMLDID.* is deprecated"
    ),
]

RTOL = 1e-9
N_OBS = 300


def test_did_and_didcs_on_the_stack_equal_doubleml(local_client) -> None:
    import doubleml as dml
    from doubleml.did.datasets import make_did_SZ2020
    from sklearn.linear_model import LinearRegression, LogisticRegression

    import fanfit

    smpls = fanfit.dml.folds_to_smpls(fanfit.dml.draw_folds(N_OBS, 2, 1, seed=13))
    cases = [
        ("did", fanfit.DoubleMLDID, dml.DoubleMLDID, "observational", True),
        ("didcs", fanfit.DoubleMLDIDCS, dml.DoubleMLDIDCS, "experimental", False),
    ]
    for model, ours_cls, theirs_cls, score, normalization in cases:
        # GIVEN DoubleML's DID data, linear learners and given folds (2 x 1)
        np.random.seed(5)
        data = make_did_SZ2020(n_obs=N_OBS, dgp_type=1, cross_sectional_data=model == "didcs")
        ml_m = LogisticRegression() if score == "observational" else None
        args = (data, LinearRegression(), ml_m)
        options = {"n_folds": 2, "n_rep": 1, "score": score,
                   "in_sample_normalization": normalization, "draw_sample_splitting": False}  # fmt: skip
        ours = ours_cls(*args, **options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = theirs_cls(*args, **options)
        ours.set_sample_splitting(smpls)
        theirs.set_sample_splitting(smpls)

        # WHEN fanfit's class is fitted on the stack and DoubleML's in-process
        ours.fit(client=local_client, seed=0)
        theirs.fit()

        # THEN the job ran the model, and the numbers are DoubleML's
        assert ours.fanfit_result.model == model
        np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0, err_msg=model)
        np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0, err_msg=model)
        np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL, err_msg=model)
        for key, loss in theirs.nuisance_loss.items():
            np.testing.assert_allclose(ours.nuisance_loss[key], loss, rtol=RTOL, err_msg=key)
