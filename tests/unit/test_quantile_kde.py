"""The client's score derivative for PQ and LPQ: DoubleML's default kde, bit for bit, in O(n)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from doubleml.utils._estimation import _default_kde
from sklearn.linear_model import LogisticRegression

import fanfit
from fanfit.client.doubleml.quantile import default_kde_at_zero


@pytest.mark.parametrize("n_obs", [2, 50, 997, 4000])
@pytest.mark.parametrize("signed", [False, True])
def test_the_density_at_zero_is_doublemls_default_bit_for_bit(n_obs: int, signed: bool) -> None:
    # GIVEN residuals on the outcome's scale and score weights (LPQ's may be negative), with ties
    rng = np.random.default_rng(n_obs)
    u = np.round(rng.standard_t(3, size=n_obs) * 5000.0, 0)
    weights = rng.uniform(0.1, 3.0, size=n_obs)
    if signed:
        weights = weights - 1.0
    # WHEN both evaluate the weighted Gaussian density at 0
    ours, theirs = default_kde_at_zero(u, weights), _default_kde(u, weights)
    # THEN the values are the same floats
    assert np.asarray(ours).shape == np.asarray(theirs).shape == (1,)
    assert np.array_equal(ours, theirs)


def test_a_constant_residual_fails_as_doublemls_does() -> None:
    # GIVEN residuals with no spread (Silverman's bandwidth is 0)
    u, w = np.zeros(20), np.ones(20)
    # WHEN/THEN both refuse with statsmodels' error
    with pytest.raises(RuntimeError, match="bandwidth is 0") as theirs:
        _default_kde(u, w)
    with pytest.raises(RuntimeError, match="bandwidth is 0") as ours:
        default_kde_at_zero(u, w)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("cls", [fanfit.DoubleMLPQ, fanfit.DoubleMLLPQ])
def test_the_classes_use_it_and_keep_doublemls_default_recorded(cls: type) -> None:
    # GIVEN fanfit's PQ and LPQ with DoubleML's default kde (a custom one is refused by name)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"y": rng.normal(size=40), "d": rng.integers(0, 2, 40).astype(float),
                          "z": rng.integers(0, 2, 40).astype(float), "x": rng.normal(size=40)})  # fmt: skip
    kw = {"y_col": "y", "d_cols": "d", "x_cols": ["x"]}
    if cls is fanfit.DoubleMLLPQ:
        kw["z_cols"] = "z"
    model = cls(frame, LogisticRegression(), LogisticRegression(), **kw)
    # WHEN DoubleML's score derivative asks for the kde
    # THEN it gets the grid-free one, and the model still records DoubleML's default
    assert model.kde is default_kde_at_zero
    assert model._kde is _default_kde
