"""Heterogeneous effects of an IRM job on the local stack equal DoubleML's, with no new fit.

GIVEN a small IRM job (make_heterogeneous_data, 2 folds, 1 repetition, linear learners) run on the
session stack, WHEN ``fanfit.client.doubleml.heterogeneity`` computes ``cate``, ``gate`` and
``policy_tree`` from the job (its stored data, predictions and estimate), THEN they equal
DoubleML's own methods on the DoubleML object of the same job (``job.to_doubleml()``, built from
the same predictions) to 1e-12: the job path reads the job's stored data and predictions only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

TOL = 1e-12


def test_cate_gate_and_policy_tree_of_an_irm_job(local_client) -> None:
    from doubleml.irm.datasets import make_heterogeneous_data

    from fanfit.client.doubleml import heterogeneity as het

    # GIVEN a finished IRM job on the session stack
    np.random.seed(3141)
    df = make_heterogeneous_data(n_obs=300, p=4, support_size=2, n_x=1, binary_treatment=True)[
        "data"
    ]
    job = local_client.submit_estimate(
        df, model="irm", y="y", d="d", x=[c for c in df.columns if c.startswith("X")],
        n_folds=2, n_rep=1, seed=5, ml_g="LinearRegression", ml_m="LogisticRegression",
    )  # fmt: skip
    job.result(timeout=600)
    theirs = job.to_doubleml()
    # WHEN cate, gate and policy_tree are computed from the job
    basis = pd.DataFrame({"const": 1.0, "x": df["X_0"], "x2": df["X_0"] ** 2})
    blp = het.cate(job, basis)
    groups = pd.DataFrame({"g": np.where(df["X_0"] > 0.5, "high", "low")})
    gate = het.gate(job, groups)
    tree = het.policy_tree(job, df[["X_0", "X_1"]], depth=2, ccp_alpha=0.0)
    # THEN they are DoubleML's on the same predictions, bands included (same seed)
    reference = theirs.cate(basis)
    for name in ("coef", "se", "blp_omega"):
        np.testing.assert_allclose(getattr(blp, name), getattr(reference, name), rtol=TOL, atol=TOL)
    np.random.seed(3)
    ours_joint = blp.confint(basis.iloc[:20], joint=True, n_rep_boot=200)
    np.random.seed(3)
    theirs_joint = reference.confint(basis.iloc[:20], joint=True, n_rep_boot=200)
    pd.testing.assert_frame_equal(ours_joint, theirs_joint, rtol=TOL, atol=TOL)
    pd.testing.assert_frame_equal(gate.confint(), theirs.gate(groups).confint(), rtol=TOL, atol=TOL)
    theirs_tree = theirs.policy_tree(df[["X_0", "X_1"]], depth=2, ccp_alpha=0.0).policy_tree.tree_
    np.testing.assert_array_equal(tree.policy_tree.tree_.feature, theirs_tree.feature)
    np.testing.assert_allclose(tree.policy_tree.tree_.threshold, theirs_tree.threshold, rtol=TOL)
