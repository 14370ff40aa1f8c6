"""fanfit.DoubleMLPQ, DoubleMLCVAR and DoubleMLQTE through the local pipeline equal DoubleML 0.11's.

GIVEN DoubleML's make_irm_data (300 rows), logistic/linear learners and given folds (2 folds x 2
repetitions), WHEN fanfit's class is fitted on the local stack (Prepare -> CrossFit Lambdas, one
per outer fold running the fold's nested fits -> Aggregate; PQ and LPQ in two stages, DoubleML's
chain of start values in Prepare between them) and DoubleML's class in-process, THEN coef, se,
confint, the bootstrap from the same global seed and (PQ, CVaR) nuisance_loss agree to a
relative 1e-9. QTE (score LPQ, make_iivm_data: four ``lpq`` jobs, 2 quantiles x 2 levels,
submitted before any is awaited) likewise for its effects.
"""

from __future__ import annotations

import numpy as np
import pytest
from stack_parity import RTOL, assert_stack_fit_is_doublemls

pytestmark = pytest.mark.integration

N_OBS = 300

# (class, ml_g, keywords)
CASES = {
    "pq": ("DoubleMLPQ", "LogisticRegression", {"treatment": 1, "quantile": 0.5}),
    "cvar": ("DoubleMLCVAR", "LinearRegression", {"treatment": 0, "quantile": 0.4}),
    # QTE of the compliers' quantiles (score LPQ: lpq jobs, with a binary instrument)
    "qte-lpq": ("DoubleMLQTE", "LogisticRegression", {"quantiles": [0.4, 0.6], "score": "LPQ"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_quantile_models_on_the_stack_equal_doubleml(local_client, case: str) -> None:
    import doubleml as dml
    import sklearn.linear_model as lm
    from doubleml.irm.datasets import make_iivm_data, make_irm_data

    import fanfit

    name, ml_g, kwargs = CASES[case]
    # GIVEN DoubleML's IRM data, small learners and given folds (2 x 2)
    np.random.seed(3)
    if case == "qte-lpq":
        data = make_iivm_data(
            n_obs=N_OBS, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData"
        )
    else:
        data = make_irm_data(n_obs=N_OBS, dim_x=4, theta=0.5, return_type="DoubleMLData")
    smpls = fanfit.dml.folds_to_smpls(fanfit.dml.draw_folds(N_OBS, 2, 2, seed=19))
    args = (data, getattr(lm, ml_g)(), lm.LogisticRegression())
    options = {"n_folds": 2, "n_rep": 2, "draw_sample_splitting": False, **kwargs}
    ours = getattr(fanfit, name)(*args, **options)
    theirs = getattr(dml, name)(*args, **options)
    ours.set_sample_splitting(smpls)
    theirs.set_sample_splitting(smpls)

    # WHEN fanfit's class is fitted on the stack and DoubleML's in-process
    ours.fit(client=local_client, seed=0)
    theirs.fit()

    # THEN the numbers are DoubleML's
    if case != "qte-lpq":
        assert_stack_fit_is_doublemls(ours, theirs, case)
        return
    assert [r.model for r in ours.fanfit_results] == ["lpq"] * 4
    for attr in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(getattr(ours, attr), getattr(theirs, attr), rtol=RTOL)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    np.random.seed(31)
    ours.bootstrap(method="normal", n_rep_boot=200)
    np.random.seed(31)
    theirs.bootstrap(method="normal", n_rep_boot=200)
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=RTOL)
