"""Heterogeneous effects (:mod:`fanfit.client.doubleml.heterogeneity`) equal DoubleML's, from the same predictions.

GIVEN DoubleML 0.11's own data generators (make_heterogeneous_data, make_irm_data,
make_plr_CCDDHNR2018), fixed folds and a DoubleML model fitted in-process, WHEN fanfit computes
``cate``, ``gate`` and ``policy_tree`` from the fit's out-of-fold predictions (through fanfit's
aggregate, :meth:`HeterogeneityInputs.from_result`, and through fanfit's classes fitted by a fake
client that runs the in-process estimator), THEN the BLP coefficients, standard errors,
covariance, pointwise and joint (same seed) bands, GATEs and the policy tree's splits and plot are
DoubleML's to 1e-12; bad input gets a named error. The job path (an IRM job on the local stack)
is tests/integration/test_heterogeneity_on_stack.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

dml = pytest.importorskip("doubleml")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

from doubleml.irm.datasets import make_heterogeneous_data, make_irm_data  # noqa: E402
from doubleml.plm.datasets import make_plr_CCDDHNR2018  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.tree import export_text  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import dml as fdml  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.client import check_estimate  # noqa: E402
from fanfit.client.doubleml import heterogeneity as het  # noqa: E402
from fanfit.dml.heterogeneity import irm_orthogonal_signal, plr_partialled_out  # noqa: E402

TOL = 1e-12
N_OBS = 400


def close(actual, desired, name: str) -> None:
    np.testing.assert_allclose(
        np.asarray(actual, dtype=float), np.asarray(desired, dtype=float), rtol=TOL, atol=TOL,
        err_msg=name,
    )  # fmt: skip


def _irm_frame() -> pd.DataFrame:
    np.random.seed(3141)
    res = make_heterogeneous_data(n_obs=N_OBS, p=5, support_size=3, n_x=1, binary_treatment=True)
    return res["data"]


def _plr_frame() -> pd.DataFrame:
    np.random.seed(3141)
    return make_plr_CCDDHNR2018(n_obs=N_OBS, dim_x=5, return_type="DataFrame")


def _fit_both(model: str, n_rep: int = 2, **kwargs):
    """DoubleML's model fitted in-process, and fanfit's class on the same data and folds."""
    if model == "irm":
        df, cls, learners = _irm_frame(), "DoubleMLIRM", (LinearRegression(), LogisticRegression())
    else:
        df, cls, learners = _plr_frame(), "DoubleMLPLR", (LinearRegression(), LinearRegression())
        if kwargs.get("score") == "IV-type":
            learners = (*learners, LinearRegression())
    data = dml.DoubleMLData(df, "y", "d")
    np.random.seed(42)
    theirs = getattr(dml, cls)(data, *learners, n_folds=3, n_rep=n_rep, **kwargs)
    theirs.fit()
    ours = getattr(fanfit, cls)(data, *learners, n_folds=3, n_rep=n_rep,
                                draw_sample_splitting=False, **kwargs)  # fmt: skip
    ours.set_sample_splitting(theirs.smpls)
    return theirs, ours, df


def _from_result(theirs, ours, df) -> het.HeterogeneityInputs:
    """fanfit's in-process aggregate of DoubleML's predictions, as heterogeneity inputs."""
    checked = check_estimate(df, **ours.fanfit_options())
    res = fdml.aggregate(checked.spec, checked.data, checked.folds, dict(theirs.predictions))
    np.testing.assert_allclose(res.all_coef, theirs.all_coef, rtol=1e-9)  # the same estimate
    return het.HeterogeneityInputs.from_result(res, checked.data, checked.spec)


def _basis(df: pd.DataFrame) -> pd.DataFrame:
    x = df["X_0"] if "X_0" in df else df["X1"]
    return pd.DataFrame({"const": 1.0, "x": x, "x2": x**2})


def _grid(df: pd.DataFrame) -> pd.DataFrame:
    x = np.linspace(df.filter(like="X").iloc[:, 0].min(), df.filter(like="X").iloc[:, 0].max(), 25)
    return pd.DataFrame({"const": 1.0, "x": x, "x2": x**2})


def assert_same_blp(ours, theirs, grid: pd.DataFrame | None) -> None:
    for name in ("coef", "se", "all_coef", "all_se", "blp_omega"):
        close(getattr(ours, name), getattr(theirs, name), name)
    pd.testing.assert_frame_equal(ours.summary, theirs.summary, rtol=TOL, atol=TOL)
    pd.testing.assert_frame_equal(ours.confint(), theirs.confint(), rtol=TOL, atol=TOL)
    if grid is None:
        return
    for level in (0.95, 0.9):
        pd.testing.assert_frame_equal(
            ours.confint(grid, level=level), theirs.confint(grid, level=level), rtol=TOL, atol=TOL
        )
    np.random.seed(7)
    joint_ours = ours.confint(grid, joint=True, n_rep_boot=200)
    np.random.seed(7)
    joint_theirs = theirs.confint(grid, joint=True, n_rep_boot=200)
    pd.testing.assert_frame_equal(joint_ours, joint_theirs, rtol=TOL, atol=TOL)
    assert (joint_ours.iloc[:, 0] < ours.confint(grid).iloc[:, 0]).all()  # joint bands are wider


@pytest.fixture(scope="module")
def irm_one_rep():
    return _fit_both("irm", n_rep=1)


@pytest.fixture(scope="module")
def irm():
    theirs, ours, df = _fit_both("irm")
    ours.fit(client=FakeClient())
    return theirs, ours, df


@pytest.mark.parametrize("path", ["in-process result", "fanfit class"])
def test_irm_cate_equals_doublemls(irm, path) -> None:
    # GIVEN DoubleML's IRM fit and fanfit's inputs from its predictions (or fanfit's class)
    theirs, ours, df = irm
    basis = _basis(df)
    if path == "in-process result":
        blp, reference = het.cate(_from_result(theirs, ours, df), basis), theirs.cate(basis)
    else:
        # DoubleML's own cate on the same fitted object: the same predictions
        blp, reference = ours.cate(basis), dml.DoubleMLIRM.cate(ours, basis)
    # WHEN both compute the BLP THEN every number and band is DoubleML's
    assert isinstance(blp, dml.DoubleMLBLP)
    assert_same_blp(blp, reference, _grid(df))


def test_irm_cate_with_normalized_ipw_and_clipping_equals_doublemls() -> None:
    # GIVEN an IRM with normalize_ipw and a trimming threshold of 0.05, fitted by DoubleML
    theirs, ours, df = _fit_both("irm", n_rep=1, normalize_ipw=True, trimming_threshold=0.05)
    inputs = _from_result(theirs, ours, df)
    assert inputs.normalize_ipw and inputs.trimming_threshold == 0.05
    # WHEN fanfit's cate runs on its predictions THEN it is DoubleML's
    assert_same_blp(het.cate(inputs, _basis(df)), theirs.cate(_basis(df)), _grid(df))


def test_the_signal_is_doublemls_psi_b(irm) -> None:
    # GIVEN DoubleML's IRM fit WHEN fanfit's signal is computed from its predictions
    theirs, _, df = irm
    preds = {k: v[:, :, 0] for k, v in theirs.predictions.items()}
    signal = irm_orthogonal_signal(df["y"].to_numpy(), df["d"].to_numpy(), preds, 1e-2)
    # THEN it is DoubleML's psi_b
    close(signal, theirs.psi_elements["psi_b"][:, :, 0], "psi_b")


@pytest.mark.parametrize("score", ["partialling out", "IV-type"])
def test_plr_cate_equals_doublemls(score) -> None:
    # GIVEN DoubleML's PLR fit (two repetitions) and fanfit's class fitted on the same folds
    theirs, ours, df = _fit_both("plr", score=score)
    basis = _basis(df)
    # WHEN fanfit's cate runs on the in-process result and on the class
    from_result = het.cate(_from_result(theirs, ours, df), basis)
    ours.fit(client=FakeClient())
    # THEN both are DoubleML's (per repetition, the basis times that repetition's D residual)
    assert_same_blp(from_result, theirs.cate(basis), _grid(df))
    assert_same_blp(ours.cate(basis), dml.DoubleMLPLR.cate(ours, basis), _grid(df))


def test_gate_equals_doublemls_for_dummies_and_labels(irm) -> None:
    # GIVEN three groups of the heterogeneity covariate, as bool dummies and as one label column
    theirs, ours, df = irm
    labels = pd.cut(df["X_0"], [-np.inf, 0.33, 0.66, np.inf], labels=["low", "mid", "high"])
    dummies = pd.get_dummies(labels)
    inputs = _from_result(theirs, ours, df)
    for groups in (dummies, dummies.astype(int), labels.astype(str).to_frame("g")):
        # WHEN fanfit's gate and DoubleML's run
        ours_gate, theirs_gate = het.gate(inputs, groups), theirs.gate(groups)
        # THEN the group effects and their pointwise and joint intervals are DoubleML's
        assert_same_blp(ours_gate, theirs_gate, None)
        np.random.seed(11)
        joint = ours_gate.confint(joint=True, n_rep_boot=100)
        np.random.seed(11)
        pd.testing.assert_frame_equal(
            joint, theirs_gate.confint(joint=True, n_rep_boot=100), rtol=TOL, atol=TOL
        )
    assert list(ours_gate.confint().index) == ["Group_high", "Group_low", "Group_mid"]


def test_plr_gate_equals_doublemls() -> None:
    # GIVEN a PLR fit WHEN fanfit's class computes GATEs THEN they are DoubleML's
    theirs, ours, df = _fit_both("plr", n_rep=1)
    ours.fit(client=FakeClient())
    groups = pd.DataFrame({"g": np.where(df["X1"] > 0, "pos", "neg")})
    assert_same_blp(ours.gate(groups), dml.DoubleMLPLR.gate(ours, groups), None)


def test_policy_tree_equals_doublemls_splits_and_plot(irm_one_rep) -> None:
    # GIVEN an IRM fit with one repetition (DoubleML's policy tree needs one)
    theirs, ours, df = irm_one_rep
    ours.fit(client=FakeClient())
    features = df[["X_0", "X_1"]]
    params = {"ccp_alpha": 0.0, "min_samples_leaf": 20}  # less pruning than DoubleML's default
    for source, reference in (
        (_from_result(theirs, ours, df), theirs.policy_tree(features, depth=2, **params)),
        (ours, dml.DoubleMLIRM.policy_tree(ours, features, depth=2, **params)),
    ):
        # WHEN fanfit's policy tree is learned from the same predictions
        tree = het.policy_tree(source, features, depth=2, **params)
        # THEN its splits, leaf values, policy and plot are DoubleML's
        ours_t, theirs_t = tree.policy_tree.tree_, reference.policy_tree.tree_
        np.testing.assert_array_equal(ours_t.feature, theirs_t.feature)
        np.testing.assert_array_equal(ours_t.children_left, theirs_t.children_left)
        close(ours_t.threshold, theirs_t.threshold, "threshold")
        close(ours_t.value, theirs_t.value, "value")
        close(tree.orth_signal, reference.orth_signal, "orth_signal")
        assert export_text(tree.policy_tree, feature_names=list(features)) == export_text(
            reference.policy_tree, feature_names=list(features)
        )
        pd.testing.assert_frame_equal(tree.predict(features), reference.predict(features))
        texts = [a.get_text() for a in tree.plot_tree()]
        assert texts == [a.get_text() for a in reference.plot_tree()]
        assert ours_t.node_count > 1  # a real split, not a stump
    assert isinstance(ours.policy_tree(features, depth=1), dml.DoubleMLPolicyTree)


# ----------------------------------------------------------------------------- named errors
@pytest.mark.parametrize(
    "basis, match",
    [
        (np.ones((N_OBS, 2)), "basis must be a pandas DataFrame"),
        (pd.DataFrame({"c": np.ones(N_OBS - 1)}), "basis has 399 rows.*400"),
        (pd.DataFrame({"c": [np.nan] + [1.0] * (N_OBS - 1)}), "column 'c' of basis has missing"),
        (pd.DataFrame({"c": ["a"] * N_OBS}), "column 'c' of basis is not numeric"),
        (pd.DataFrame(np.ones((N_OBS, 2)), columns=["c", "c"]), "duplicate column names: c"),
        (pd.DataFrame(index=range(N_OBS)), "basis has no columns"),
    ],
)
def test_a_bad_basis_is_named(irm, basis, match) -> None:
    # GIVEN a fitted IRM WHEN cate gets a bad basis THEN InvalidDataError names it
    with pytest.raises(errors.InvalidDataError, match=match):
        irm[1].cate(basis)


@pytest.mark.parametrize(
    "groups, match",
    [
        (pd.DataFrame({"a": np.arange(N_OBS) % 3, "b": 1 - np.arange(N_OBS) % 2}),
         "dummies \\(0 or 1\\); column\\(s\\) a"),
        (pd.DataFrame({"a": np.ones(N_OBS), "b": np.zeros(N_OBS)}), "must be dummy coded"),
        (pd.DataFrame({"g": [None] + ["x"] * (N_OBS - 1)}), "'g' has missing labels"),
        (pd.DataFrame({"g": ["x"] * 10}), "groups has 10 rows"),
        (pd.Series(["x"] * N_OBS), "groups must be a pandas DataFrame"),
    ],
)  # fmt: skip
def test_groups_that_are_not_dummies_or_labels_are_named(irm, groups, match) -> None:
    with pytest.raises(errors.InvalidDataError, match=match):
        irm[1].gate(groups)


def test_a_small_group_is_warned_about_as_doubleml_does(irm) -> None:
    # GIVEN a group of 3 observations WHEN gate runs THEN DoubleML's warning
    small = pd.DataFrame({"g": ["small"] * 3 + ["big"] * (N_OBS - 3)})
    with pytest.warns(UserWarning, match="less than 6 observations"):
        irm[1].gate(small)


@pytest.mark.parametrize("depth", [0, -1, 1.5, True, "2"])
def test_a_policy_tree_depth_below_one_is_named(irm_one_rep, depth) -> None:
    theirs, ours, df = irm_one_rep
    with pytest.raises(errors.InvalidJobError, match="depth must be an integer of at least 1"):
        het.policy_tree(_from_result(theirs, ours, df), df[["X_0"]], depth=depth)


def test_what_heterogeneity_cannot_take_is_refused_by_name(irm) -> None:
    theirs, ours, df = irm
    inputs = _from_result(theirs, ours, df)
    features = df[["X_0"]]
    # two repetitions: DoubleML's policy tree takes one
    with pytest.raises(errors.UnsupportedArgumentError, match="one repetition"):
        ours.policy_tree(features)
    # a treatment that is not binary
    bad_d = het.HeterogeneityInputs(**{**inputs.__dict__, "d": inputs.d * 2, "theta": inputs.theta[:1],
                                       "predictions": {k: v[:, :1] for k, v in inputs.predictions.items()}})  # fmt: skip
    with pytest.raises(errors.InvalidDataError, match="binary treatment"):
        het.policy_tree(bad_d, features)
    # IRM's ATTE score
    atte = het.HeterogeneityInputs(**{**inputs.__dict__, "score": "ATTE"})
    with pytest.raises(errors.UnsupportedArgumentError, match="score 'ATTE'.*valid score: 'ATE'"):
        het.cate(atte, _basis(df))
    # a policy tree of a PLR
    plr = het.HeterogeneityInputs(**{**inputs.__dict__, "model": "plr", "score": "partialling out"})
    with pytest.raises(errors.UnsupportedArgumentError, match="policy_tree of a PLR"):
        het.policy_tree(plr, features)
    # several treatments
    two = het.HeterogeneityInputs(**{**inputs.__dict__, "n_treat": 2})
    with pytest.raises(
        errors.UnsupportedArgumentError, match="single treatment; this estimate has 2"
    ):
        het.gate(two, pd.DataFrame({"g": ["a", "b"] * (N_OBS // 2)}))
    # a model without heterogeneity, and something that is no estimate
    with pytest.raises(errors.InvalidJobError, match="got dict"):
        het.cate({}, _basis(df))


def test_an_unfitted_model_says_to_fit_first() -> None:
    np.random.seed(1)
    data = dml.DoubleMLData(make_irm_data(n_obs=50, dim_x=3, return_type="DataFrame"), "y", "d")
    obj = fanfit.DoubleMLIRM(data, LinearRegression(), LogisticRegression(), n_folds=2)
    with pytest.raises(errors.InvalidJobError, match="call fit\\(\\) first"):
        obj.cate(pd.DataFrame({"c": np.ones(50)}))


def test_a_pliv_has_no_heterogeneity() -> None:
    # GIVEN DoubleML's PLIV (DoubleML 0.11 has no cate for it) WHEN asked THEN a named refusal
    np.random.seed(1)
    obj = dml.DoubleMLPLIV.__new__(dml.DoubleMLPLIV)
    with pytest.raises(errors.UnsupportedArgumentError, match="DoubleMLPLIV are not supported"):
        het.cate(obj, pd.DataFrame({"c": np.ones(5)}))


def test_the_pure_signals_name_what_is_missing() -> None:
    y, d = np.zeros(4), np.array([0.0, 1.0, 0.0, 1.0])
    with pytest.raises(errors.InvalidJobError, match="no 'ml_g1'"):
        irm_orthogonal_signal(y, d, {"ml_g0": np.zeros((4, 1)), "ml_m": np.ones((4, 1))}, 0.01)
    preds = {"ml_m": np.zeros((4, 2)), "ml_g": np.zeros((4, 2))}
    with pytest.raises(errors.InvalidJobError, match="needs theta.*\\(2,\\)"):
        plr_partialled_out(y, d, preds, "IV-type")
    with pytest.raises(errors.InvalidJobError, match="shape \\(3, 2\\)"):
        plr_partialled_out(
            y, d, {"ml_l": np.zeros((3, 2)), "ml_m": np.zeros((4, 2))}, "partialling out"
        )
    with pytest.raises(errors.InvalidJobError, match="Invalid PLR score 'ATE'"):
        plr_partialled_out(y, d, preds, "ATE")
