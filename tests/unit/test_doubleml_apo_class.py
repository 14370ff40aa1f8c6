"""fanfit.DoubleMLAPO without a stack: the fake client of test_doubleml_classes.py runs the job
in-process (what the pipeline computes) on the options ``fit()`` sends.

GIVEN DoubleML's discrete-treatment data and the same global seed, WHEN fanfit.DoubleMLAPO is
fitted on the fake stack and doubleml.DoubleMLAPO in-process, THEN coef, se, predictions,
nuisance targets and losses, bootstrap intervals and the sensitivity analysis are DoubleML's;
``from_doubleml`` carries the treatment level (weights: test_apo_weights.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_irm_data_discrete_treatments  # noqa: E402
from doubleml_helpers import assert_fit_is_doublemls, assert_same_bootstrap  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402

RTOL = 1e-9


def _data():
    raw = make_irm_data_discrete_treatments(n_obs=300, n_levels=3, random_state=21)
    x_cols = [f"x{i}" for i in range(raw["x"].shape[1])]
    frame = pd.DataFrame(raw["x"], columns=x_cols).assign(y=raw["y"], d=raw["d"])
    return dml.DoubleMLData(frame, "y", "d", x_cols=x_cols)


def _both(**options):
    data = _data()
    args = (data, LinearRegression(), LogisticRegression())
    np.random.seed(99)
    ours = fanfit.DoubleMLAPO(*args, treatment_level=3, n_folds=3, n_rep=2, **options)
    np.random.seed(99)
    theirs = dml.DoubleMLAPO(*args, treatment_level=3, n_folds=3, n_rep=2, **options)
    return ours, theirs


def test_apo_fitted_on_the_fake_stack_is_doublemls() -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLAPO, same data, learners and seed
    ours, theirs = _both(normalize_ipw=True)
    client = FakeClient()
    # WHEN fanfit's is fitted on the fake stack and DoubleML's in-process
    ours.fit(client=client)
    theirs.fit()
    # THEN the job was model apo at the level, with DoubleML's options
    sent = client.submitted[0]
    assert (sent["model"], sent["score"], sent["treatment_level"]) == ("apo", "APO", 3.0)
    assert sent["normalize_ipw"] is True
    # AND every number is DoubleML's
    assert_fit_is_doublemls(ours, theirs)
    assert_same_bootstrap(ours, theirs, "normal", 100, seed=7)
    ours.sensitivity_analysis(cf_y=0.03, cf_d=0.03)
    theirs.sensitivity_analysis(cf_y=0.03, cf_d=0.03)
    for side in ("lower", "upper"):
        np.testing.assert_allclose(
            ours.sensitivity_params["theta"][side], theirs.sensitivity_params["theta"][side],
            rtol=RTOL,
        )  # fmt: skip


def test_from_doubleml_carries_the_treatment_level() -> None:
    # GIVEN an unfitted doubleml.DoubleMLAPO WHEN run through from_doubleml on the fake stack
    _, theirs = _both()
    client = FakeClient()
    ours = fanfit.from_doubleml(theirs, client=client)
    # THEN fanfit's class ran at the same level and equals DoubleML's fit
    assert isinstance(ours, fanfit.DoubleMLAPO) and ours.treatment_level == 3
    assert client.submitted[0]["treatment_level"] == 3.0
    theirs.fit()
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)


def test_apos_fits_one_apo_job_per_level_and_equals_doubleml() -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLAPOS over three levels, same data, learners and seed
    data = _data()
    args = (data, LinearRegression(), LogisticRegression(), [0, 1, 2])
    np.random.seed(5)
    ours = fanfit.DoubleMLAPOS(*args, n_folds=2, n_rep=2)
    np.random.seed(5)
    theirs = dml.DoubleMLAPOS(*args, n_folds=2, n_rep=2)
    client = FakeClient()
    # WHEN fanfit's is fitted on the fake stack and DoubleML's in-process
    ours.fit(client=client)
    theirs.fit()
    # THEN one apo job per level was submitted, all on DoubleML's sample splitting
    assert [o["treatment_level"] for o in client.submitted] == [0.0, 1.0, 2.0]
    assert all(o["model"] == "apo" for o in client.submitted)
    # AND coef, se, the bootstrap and the causal contrasts are DoubleML's
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL)
    np.random.seed(3)
    ours.bootstrap(n_rep_boot=100)
    np.random.seed(3)
    theirs.bootstrap(n_rep_boot=100)
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=RTOL)
    ours_acc, theirs_acc = ours.causal_contrast(0), theirs.causal_contrast(0)
    assert list(ours_acc.treatment_names) == ["1 vs 0", "2 vs 0"]
    np.testing.assert_allclose(ours_acc.thetas, theirs_acc.thetas, rtol=RTOL)
    np.testing.assert_allclose(ours_acc.ses, theirs_acc.ses, rtol=RTOL)
