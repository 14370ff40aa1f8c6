"""fanfit.DoubleMLSSM without a stack: the fake client of test_doubleml_classes.py runs the job
in-process (what the pipeline computes) on the options ``fit()`` sends.

GIVEN DoubleML's sample selection data (``make_ssm_data(mar=True)``) and the same global seed,
WHEN fanfit.DoubleMLSSM is fitted on the fake stack and doubleml.DoubleMLSSM in-process, THEN
coef, se, predictions, nuisance targets and losses and the bootstrap are DoubleML's (missing at
random and nonignorable); bad data, instruments and unknown keywords are refused by name.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_ssm_data  # noqa: E402
from doubleml_helpers import assert_fit_is_doublemls, assert_same_bootstrap  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import errors  # noqa: E402

RTOL = 1e-9


def _frame(mar: bool = True):
    np.random.seed(17)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_ssm_data(n_obs=300, dim_x=4, mar=mar, return_type="DataFrame")


def _data():
    return dml.DoubleMLSSMData(_frame(), "y", "d", s_col="s")


@pytest.mark.parametrize(
    ("score", "normalize_ipw"),
    [("missing-at-random", False), ("missing-at-random", True), ("nonignorable", False)],
    ids=["plain", "normalized", "nonignorable"],
)
def test_ssm_fitted_on_the_fake_stack_is_doublemls(score, normalize_ipw) -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLSSM, same data, learners and seed (nonignorable: on
    # DoubleML's nonignorable data with its instrument z)
    mar = score == "missing-at-random"
    data = dml.DoubleMLSSMData(_frame(mar=mar), "y", "d", z_cols=None if mar else "z", s_col="s")
    args = (data, LinearRegression(), LogisticRegression(), LogisticRegression())
    options = {"n_folds": 3, "n_rep": 2, "score": score, "normalize_ipw": normalize_ipw,
               "trimming_threshold": 0.05}  # fmt: skip
    np.random.seed(99)
    ours = fanfit.DoubleMLSSM(*args, **options)
    np.random.seed(99)
    theirs = dml.DoubleMLSSM(*args, **options)
    client = FakeClient()
    # WHEN fanfit's is fitted on the fake stack (nonignorable: its fold procedure) and
    # DoubleML's in-process
    ours.fit(client=client)
    theirs.fit()
    # THEN the job was model ssm with the score, selection column, instrument and DoubleML's options
    sent = client.submitted[0]
    assert (sent["model"], sent["score"], sent["s"], sent["z"]) == (
        "ssm", score, "s", None if mar else ["z"],
    )  # fmt: skip
    assert (sent["normalize_ipw"], sent["trimming_threshold"]) == (normalize_ipw, 0.05)
    # AND every number is DoubleML's
    assert_fit_is_doublemls(ours, theirs)
    assert_same_bootstrap(ours, theirs, "normal", 100, seed=7)


def test_ssm_takes_a_dataframe_with_its_columns() -> None:
    # GIVEN a DataFrame and DoubleMLSSMData's column names as keywords
    frame = _frame()
    learners = (LinearRegression(), LogisticRegression(), LogisticRegression())
    # WHEN fanfit.DoubleMLSSM is built THEN its data is a DoubleMLSSMData with that selection column
    ours = fanfit.DoubleMLSSM(frame, *learners, n_folds=2, y_col="y", d_cols="d", s_col="s")
    assert isinstance(ours._dml_data, dml.DoubleMLSSMData) and ours._dml_data.s_col == "s"
    # AND without s_col the error names it
    with pytest.raises(errors.InvalidDataError, match="missing: s_col"):
        fanfit.DoubleMLSSM(frame, *learners, y_col="y", d_cols="d")
    # AND a plain DoubleMLData (no selection column) is refused naming DoubleMLSSMData
    with pytest.raises(errors.InvalidDataError, match="DoubleMLSSMData"):
        fanfit.DoubleMLSSM(dml.DoubleMLData(frame, "y", "d"), *learners)
    # AND an unknown keyword is a TypeError, as DoubleML's
    with pytest.raises(TypeError, match="t_col"):
        fanfit.DoubleMLSSM(frame, *learners, y_col="y", d_cols="d", s_col="s", t_col="t")


def test_ssm_nonignorable_without_one_instrument_is_refused_by_name() -> None:
    # GIVEN nonignorable selection data WHEN fanfit.DoubleMLSSM is built with score
    # 'nonignorable' without an instrument, or with two THEN the error names z_cols
    learners = (LinearRegression(), LogisticRegression(), LogisticRegression())
    frame = _frame(mar=False)
    with pytest.raises(errors.InvalidDataError, match="needs an instrument for selection"):
        fanfit.DoubleMLSSM(
            dml.DoubleMLSSMData(frame, "y", "d", s_col="s"), *learners, score="nonignorable"
        )
    two = dml.DoubleMLSSMData(frame, "y", "d", z_cols=["z", "X4"], s_col="s")
    with pytest.raises(errors.UnsupportedArgumentError, match=r"z_cols=\['z', 'X4'\]"):
        fanfit.DoubleMLSSM(two, *learners, score="nonignorable")


def test_from_doubleml_runs_an_ssm_with_its_options() -> None:
    # GIVEN an unfitted doubleml.DoubleMLSSM with IPW normalisation WHEN run through from_doubleml
    # on the fake stack
    args = (_data(), LinearRegression(), LogisticRegression(), LogisticRegression())
    np.random.seed(3)
    theirs = dml.DoubleMLSSM(*args, n_folds=2, normalize_ipw=True)
    client = FakeClient()
    ours = fanfit.from_doubleml(theirs, client=client)
    # THEN fanfit's class ran model ssm with the option, on DoubleML's splitting, and equals its fit
    assert isinstance(ours, fanfit.DoubleMLSSM) and ours.normalize_ipw
    assert (client.submitted[0]["model"], client.submitted[0]["normalize_ipw"]) == ("ssm", True)
    theirs.fit()
    assert_fit_is_doublemls(ours, theirs)
