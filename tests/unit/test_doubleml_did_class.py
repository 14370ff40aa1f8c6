"""fanfit.DoubleMLDID and DoubleMLDIDCS without a stack: the fake client of
test_doubleml_classes.py runs the job in-process (what the pipeline computes) on the options
``fit()`` sends.

GIVEN DoubleML's DID data (make_did_SZ2020, panel and repeated cross-sections) and the same global
seed, WHEN fanfit's class is fitted on the fake stack and DoubleML's in-process, THEN coef, se,
predictions and nuisance targets and losses are DoubleML's, for both scores and both
``in_sample_normalization`` values; ``from_doubleml`` carries the DID options; data without a
time column is refused by name.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.did.datasets import make_did_SZ2020  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import errors  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:DoubleMLDIDData is deprecated",
    "ignore:DoubleMLDID.* is deprecated",
    "ignore:A learner ml_m has been provided",
)

RTOL = 1e-9
CLASSES = {"did": (fanfit.DoubleMLDID, dml.DoubleMLDID), "didcs": (fanfit.DoubleMLDIDCS, dml.DoubleMLDIDCS)}  # fmt: skip


def _data(model: str, seed: int = 21):
    np.random.seed(seed)  # make_did_SZ2020 draws from the global state
    return make_did_SZ2020(n_obs=300, dgp_type=4, cross_sectional_data=model == "didcs")


def _both(model: str, **options):
    data = _data(model)
    ml_m = LogisticRegression() if options.get("score") != "experimental" else None
    args = (data, LinearRegression(), ml_m)
    ours_cls, theirs_cls = CLASSES[model]
    np.random.seed(99)
    ours = ours_cls(*args, n_folds=3, n_rep=2, **options)
    np.random.seed(99)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = theirs_cls(*args, n_folds=3, n_rep=2, **options)
    return ours, theirs


@pytest.mark.parametrize("model", ["did", "didcs"])
@pytest.mark.parametrize(
    ("score", "normalization"),
    [("observational", True), ("experimental", False)],
)
def test_did_fitted_on_the_fake_stack_is_doublemls(model, score, normalization) -> None:
    # GIVEN fanfit's and DoubleML's class, same data, learners, options and seed
    ours, theirs = _both(
        model, score=score, in_sample_normalization=normalization, clipping_threshold=0.05
    )
    client = FakeClient()
    # WHEN fanfit's is fitted on the fake stack and DoubleML's in-process
    ours.fit(client=client)
    theirs.fit()
    # THEN the job was the model with DoubleML's options
    sent = client.submitted[0]
    assert (sent["model"], sent["score"]) == (model, score)
    assert (sent["in_sample_normalization"], sent["trimming_threshold"]) == (normalization, 0.05)
    assert sent.get("t") == ("t" if model == "didcs" else None)
    # AND every number is DoubleML's
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    for key, value in theirs.predictions.items():
        np.testing.assert_allclose(ours.predictions[key], value, rtol=RTOL, atol=1e-12)
        np.testing.assert_allclose(ours.nuisance_targets[key], theirs.nuisance_targets[key])
        np.testing.assert_allclose(ours.nuisance_loss[key], theirs.nuisance_loss[key], rtol=RTOL)


def test_from_doubleml_carries_the_did_options() -> None:
    # GIVEN an unfitted doubleml.DoubleMLDIDCS WHEN run through from_doubleml on the fake stack
    _, theirs = _both("didcs", in_sample_normalization=False, clipping_threshold=0.03)
    client = FakeClient()
    ours = fanfit.from_doubleml(theirs, client=client)
    # THEN fanfit's class ran with the same options and equals DoubleML's fit
    assert isinstance(ours, fanfit.DoubleMLDIDCS) and ours.in_sample_normalization is False
    sent = client.submitted[0]
    assert (sent["t"], sent["in_sample_normalization"], sent["trimming_threshold"]) == (
        "t",
        False,
        0.03,
    )
    theirs.fit()
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)


def test_didcs_refuses_data_without_a_time_column() -> None:
    # GIVEN panel data (no t_col) WHEN fanfit.DoubleMLDIDCS is built THEN the error names t_col
    with pytest.raises(errors.InvalidDataError, match="t_col"):
        fanfit.DoubleMLDIDCS(_data("did"), LinearRegression(), LogisticRegression())
    # AND a DataFrame without its columns names them
    frame = _data("didcs").data
    with pytest.raises(errors.InvalidDataError, match="y_col, d_cols, t_col"):
        fanfit.DoubleMLDIDCS(frame, LinearRegression(), LogisticRegression(), y_col="y")
    # AND a plain DoubleMLData is refused naming DoubleMLDIDData
    plain = dml.DoubleMLData(frame, "y", "d")
    with pytest.raises(errors.InvalidDataError, match="DoubleMLDIDData"):
        fanfit.DoubleMLDID(plain, LinearRegression(), LogisticRegression())
