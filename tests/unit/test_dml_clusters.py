"""Clustered data (one- and two-way) against DoubleML 0.11.4, on shared cluster sample splits.

DoubleML draws its multiway cluster splits (``DoubleMLClusterResampling``); they become fanfit
folds (each row's test fold). fanfit must rebuild DoubleML's train sets and test clusters from
them, fit the same learners on the same rows, and give DoubleML's cluster-robust coefficient and
standard error. The data come from DoubleML's own ``make_pliv_multiway_cluster_CKMS2021``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import doubleml as dml
import numpy as np
import pandas as pd
import pytest
from doubleml.plm.datasets import make_pliv_multiway_cluster_CKMS2021
from doubleml.utils import PSProcessorConfig
from doubleml_helpers import DOUBLEML, LIN, LOGIT, PROPENSITY_MODELS, RF_REG, assert_same_estimate

from fanfit.dml import (
    DMLSpec,
    aggregate,
    cluster_folds_to_smpls,
    cluster_train_mask,
    draw_cluster_folds,
    estimate_in_process,
    fit_units,
    prediction_keys,
    validate_cluster_folds,
    validate_data,
)
from fanfit.dml.scores.plm_irm import cluster_var_est
from fanfit.errors import InvalidDataError, InvalidFoldsError, InvalidJobError

N_FOLDS = 3
LASSO = 'LassoCV:{"cv": 3, "alphas": 5}'

CLUSTERS_2 = ("cluster_var_i", "cluster_var_j")
CLUSTERS_1 = ("cluster_var_i",)


@dataclass(frozen=True)
class Case:
    id: str
    model: str
    score: str
    learners: dict
    cluster_cols: tuple[str, ...]
    n_rep: int = 1


# id, model, score, learners, cluster columns, repetitions
CASES = [
    Case("plr-po-1way", "plr", "partialling out", dict(ml_l=LIN, ml_m=LASSO), CLUSTERS_1),
    Case("plr-po-2way-rep2", "plr", "partialling out", dict(ml_l=RF_REG, ml_m=LIN), CLUSTERS_2, 2),
    Case("plr-iv-2way", "plr", "IV-type", dict(ml_l=LIN, ml_m=LIN, ml_g=LIN), CLUSTERS_2),
    Case("pliv-po-1way", "pliv", "partialling out", dict(ml_l=LIN, ml_m=LIN, ml_r=LIN), CLUSTERS_1),
    Case("pliv-po-2way", "pliv", "partialling out", dict(ml_l=LASSO, ml_m=LIN, ml_r=RF_REG), CLUSTERS_2),
    Case("pliv-iv-2way", "pliv", "IV-type", dict(ml_l=LIN, ml_m=LIN, ml_r=LIN, ml_g=LIN), CLUSTERS_2),
    Case("irm-ate-2way", "irm", "ATE", dict(ml_g=LIN, ml_m=LOGIT), CLUSTERS_2),
    Case("iivm-late-1way", "iivm", "LATE", dict(ml_g=LIN, ml_m=LOGIT, ml_r=LOGIT), CLUSTERS_1),
]  # fmt: skip


def _frame(seed: int = 3, n: int = 12) -> tuple[pd.DataFrame, list[str]]:
    """DoubleML's multiway cluster DGP (N = M = n), plus binary d_bin / z_bin for IRM and IIVM."""
    np.random.seed(seed)
    df = make_pliv_multiway_cluster_CKMS2021(N=n, M=n, dim_X=4, return_type="DataFrame")
    x_cols = [c for c in df.columns if c.startswith("X")]
    rng = np.random.default_rng(seed)
    df["z_bin"] = (df["Z"] > 0).astype(float)
    # treated mostly when encouraged, sometimes without: both always and never takers
    df["d_bin"] = ((df["D"] + 1.5 * df["z_bin"] + rng.normal(size=len(df))) > 0.75).astype(float)
    return df, x_cols


def _columns(model: str) -> tuple[str, str, tuple[str, ...]]:
    if model == "plr":
        return "Y", "D", ()
    if model == "pliv":
        return "Y", "D", ("Z",)
    if model == "irm":
        return "Y", "d_bin", ()
    return "Y", "d_bin", ("z_bin",)


def _doubleml(case: Case, spec: DMLSpec, df: pd.DataFrame):
    obj_data = dml.DoubleMLData(
        df,
        spec.y_col,
        list(spec.d_cols),
        x_cols=list(spec.x_cols),
        z_cols=list(spec.z_cols) or None,
        cluster_cols=list(spec.cluster_cols),
    )
    cls = DOUBLEML[case.model]
    kwargs = {"n_folds": spec.n_folds, "n_rep": spec.n_rep, "score": spec.score}
    if case.model in PROPENSITY_MODELS:
        kwargs["ps_processor_config"] = PSProcessorConfig(clipping_threshold=0.01)
    learners = {k: v.build() for k, v in spec.learners.items()}
    return cls(obj_data, **learners, **kwargs)


def _folds_of(smpls: list) -> np.ndarray:
    """fanfit folds from DoubleML's smpls: each row's test fold."""
    n_obs = sum(len(test) for _, test in smpls[0])
    folds = np.full((n_obs, len(smpls)), -1, dtype=np.int64)
    for i_rep, rep in enumerate(smpls):
        for i_fold, (_, test) in enumerate(rep):
            folds[test, i_rep] = i_fold
    assert (folds >= 0).all()
    return folds


@dataclass
class Fitted:
    case: Case
    spec: DMLSpec
    df: pd.DataFrame
    folds: np.ndarray
    obj: object
    result: object


@pytest.fixture(scope="module", params=CASES, ids=[c.id for c in CASES])
def fitted(request) -> Fitted:
    # GIVEN DoubleML's cluster data, a spec with its cluster columns, and DoubleML's own cluster splits
    case: Case = request.param
    df, x_cols = _frame()
    y, d, z = _columns(case.model)
    spec = DMLSpec(
        model=case.model, score=case.score, y_col=y, d_cols=(d,), x_cols=tuple(x_cols), z_cols=z,
        n_folds=N_FOLDS, n_rep=case.n_rep, seed=5, learners=case.learners,
        cluster_cols=case.cluster_cols,
    )  # fmt: skip
    spec.validate()
    np.random.seed(17)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = _doubleml(case, spec, df)
        folds = _folds_of(obj.smpls)
        data = validate_data(spec, list(df.columns), df.to_numpy(dtype=float))
        # WHEN DoubleML fits on its splits and fanfit runs every unit on the same folds
        obj.fit(store_predictions=True)
        result = estimate_in_process(spec, data, folds)
    return Fitted(case, spec, df, folds, obj, result)


def test_cluster_folds_rebuild_doubleml_train_sets_and_test_clusters(fitted: Fitted) -> None:
    # WHEN fanfit turns the folds back into DoubleML's (smpls, smpls_cluster)
    cluster_vars = fitted.df[list(fitted.spec.cluster_cols)].to_numpy(dtype=float)
    smpls, smpls_cluster = cluster_folds_to_smpls(fitted.folds, cluster_vars, N_FOLDS)
    # THEN every train set, test set and test-cluster set is DoubleML's
    assert len(smpls[0]) == N_FOLDS ** len(fitted.spec.cluster_cols) == fitted.obj.n_folds
    for i_rep in range(fitted.spec.n_rep):
        for ours, theirs in zip(smpls[i_rep], fitted.obj.smpls[i_rep], strict=True):
            np.testing.assert_array_equal(ours[0], np.sort(theirs[0]))
            np.testing.assert_array_equal(ours[1], np.sort(theirs[1]))
        for ours, theirs in zip(smpls_cluster[i_rep], fitted.obj.smpls_cluster[i_rep], strict=True):
            for v in range(len(fitted.spec.cluster_cols)):
                np.testing.assert_array_equal(ours[1][v], np.sort(theirs[1][v]))
                np.testing.assert_array_equal(ours[0][v], np.sort(theirs[0][v]))


def test_clustered_estimate_equals_doubleml(fitted: Fitted) -> None:
    # THEN coefficient and cluster-robust standard error, per repetition and aggregated, are DoubleML's
    res, obj = fitted.result, fitted.obj
    assert_same_estimate(res, obj)
    assert res.n_folds == obj.n_folds


def test_clustered_unit_predictions_equal_doubleml(fitted: Fitted) -> None:
    # THEN each unit was fitted on DoubleML's train rows: the predictions are DoubleML's
    spec = fitted.spec
    for key in prediction_keys(spec):
        ours = fitted.result.predictions[key]
        if key == "ml_m" and spec.model in ("irm", "iivm"):
            ours = np.clip(ours, 0.01, 0.99)
        np.testing.assert_allclose(ours, fitted.obj.predictions[key], rtol=1e-12, atol=1e-12)


def test_aggregate_of_doubleml_cluster_predictions_equals_doubleml(fitted: Fitted) -> None:
    # GIVEN DoubleML's stored predictions
    spec, obj = fitted.spec, fitted.obj
    preds = {k: obj.predictions[k] for k in prediction_keys(spec)}
    data = validate_data(spec, list(fitted.df.columns), fitted.df.to_numpy(dtype=float))
    # WHEN fanfit aggregates them on the cluster folds
    res = aggregate(spec, data, fitted.folds, preds)
    # THEN the estimate is DoubleML's
    assert_same_estimate(res, obj)


@pytest.mark.parametrize("cluster_cols", [CLUSTERS_1, CLUSTERS_2], ids=["1way", "2way"])
def test_drawn_cluster_folds_given_to_doubleml_give_the_same_estimate(cluster_cols) -> None:
    # GIVEN folds fanfit draws from its seed, handed to DoubleML as (smpls, smpls_cluster)
    df, x_cols = _frame(seed=8)
    spec = DMLSpec(
        model="plr", score="partialling out", y_col="Y", d_cols=("D",), x_cols=tuple(x_cols),
        n_folds=N_FOLDS, n_rep=2, seed=11, learners=dict(ml_l=LIN, ml_m=LIN),
        cluster_cols=cluster_cols,
    )  # fmt: skip
    data = validate_data(spec, list(df.columns), df.to_numpy(dtype=float))
    assert data.cluster_vars is not None
    folds = draw_cluster_folds(data.cluster_vars, N_FOLDS, 2, 11)
    smpls, smpls_cluster = cluster_folds_to_smpls(folds, data.cluster_vars, N_FOLDS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = _doubleml(Case("x", "plr", spec.score, {}, cluster_cols, 2), spec, df)
        obj.set_sample_splitting(smpls, smpls_cluster)
        obj.fit()
        # WHEN fanfit estimates without being given folds (it draws the same ones from the seed)
        result = estimate_in_process(spec, data)
    # THEN both agree
    assert_same_estimate(result, obj)


def test_draw_cluster_folds_keeps_clusters_together_and_is_seeded() -> None:
    # GIVEN two-way cluster ids of a 12 x 12 panel
    df, _ = _frame()
    cluster_vars = df[list(CLUSTERS_2)].to_numpy(dtype=float)
    # WHEN folds are drawn twice with one seed and once with another
    a = draw_cluster_folds(cluster_vars, 3, 2, 1)
    b = draw_cluster_folds(cluster_vars, 3, 2, 1)
    c = draw_cluster_folds(cluster_vars, 3, 2, 2)
    # THEN they are reproducible, differ by seed, have 9 non-empty folds and pass validation
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert set(np.unique(a)) == set(range(9))
    validate_cluster_folds(a, cluster_vars, 3, 2)
    # and a fold's train rows share no cluster of either variable with its test rows
    col = a[:, 0]
    train = cluster_train_mask(col, 4, 3, 2)
    test = col == 4
    for v in range(2):
        assert not set(cluster_vars[train, v]) & set(cluster_vars[test, v])
    assert train.sum() + test.sum() < len(col)  # rows sharing one cluster are in neither


def test_folds_that_split_a_cluster_are_refused() -> None:
    # GIVEN valid one-way cluster folds in which one row is moved to another fold
    df, _ = _frame()
    cluster_vars = df[["cluster_var_i"]].to_numpy(dtype=float)
    folds = draw_cluster_folds(cluster_vars, 3, 1, 0)
    folds[0, 0] = (folds[0, 0] + 1) % 3
    # WHEN / THEN validation names the split cluster
    with pytest.raises(InvalidFoldsError, match="Cluster 0.0 of cluster variable 0 lies in folds"):
        validate_cluster_folds(folds, cluster_vars, 3, 1)


def test_cluster_var_est_one_way_equals_the_formula() -> None:
    # GIVEN 3 clusters in 3 folds (one each) and a score
    psi = np.array([1.0, 2.0, -1.0, 0.5, 3.0, -2.0])
    psi_deriv = np.array([-1.0, -2.0, -1.0, -1.0, -2.0, -1.0])
    clusters = np.array([[0.0], [0.0], [1.0], [1.0], [2.0], [2.0]])
    tests = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5])]
    test_clusters = [[np.array([0.0])], [np.array([1.0])], [np.array([2.0])]]
    # WHEN the variance is estimated
    sigma2, n_clusters = cluster_var_est(psi, psi_deriv, tests, test_clusters, clusters, 3)
    # THEN it is Gamma / (C J^2) with Gamma = mean of squared cluster sums, J = mean cluster psi_a sum
    gamma = (3.0**2 + (-0.5) ** 2 + 1.0**2) / 3
    j = (-3.0 - 2.0 - 3.0) / 3
    assert n_clusters == 3
    assert sigma2 == pytest.approx(gamma / (3 * j**2), rel=1e-12)


def test_spec_refuses_three_cluster_columns_bootstrap_and_overlap() -> None:
    # GIVEN specs with three cluster columns, a bootstrap, or a cluster column that is a covariate
    base = dict(model="plr", score="partialling out", y_col="Y", d_cols=("D",), x_cols=("X1",),
                learners=dict(ml_l=LIN, ml_m=LIN))  # fmt: skip
    # WHEN / THEN each is a named error naming cluster_cols
    with pytest.raises(InvalidJobError, match="cluster_cols names 3 cluster variables"):
        DMLSpec(**base, cluster_cols=("a", "b", "c")).validate()
    with pytest.raises(InvalidJobError, match="boot_method='normal' with cluster_cols"):
        DMLSpec(**base, cluster_cols=("a",), boot_method="normal").validate()
    with pytest.raises(InvalidJobError, match="both x_cols and cluster_cols"):
        DMLSpec(**base, cluster_cols=("X1",)).validate()


def test_too_few_clusters_for_n_folds_is_a_data_error() -> None:
    # GIVEN 12 clusters per variable and n_folds 13
    df, x_cols = _frame()
    spec = DMLSpec(model="plr", score="partialling out", y_col="Y", d_cols=("D",),
                   x_cols=tuple(x_cols), n_folds=13, learners=dict(ml_l=LIN, ml_m=LIN),
                   cluster_cols=CLUSTERS_1)  # fmt: skip
    # WHEN / THEN the data check names the cluster column and n_folds
    with pytest.raises(InvalidDataError, match="'cluster_var_i' .* has 12 cluster"):
        validate_data(spec, list(df.columns), df.to_numpy(dtype=float))


def test_units_run_over_all_multiway_folds() -> None:
    # GIVEN a two-way clustered PLR with 3 folds per variable
    spec = DMLSpec(model="plr", score="partialling out", y_col="Y", d_cols=("D",), x_cols=("X1",),
                   n_folds=3, learners=dict(ml_l=LIN, ml_m=LIN), cluster_cols=CLUSTERS_2)  # fmt: skip
    # THEN there are 3**2 folds, so 2 learners x 9 folds units
    assert spec.n_cross_folds == 9
    assert len(fit_units(spec, 0)) == 18
    assert spec.to_dict()["cluster_cols"] == list(CLUSTERS_2)
    assert DMLSpec.from_dict(spec.to_dict()) == spec


def test_to_doubleml_of_a_clustered_fit_is_doubleml_cluster_model_with_fanfits_estimate(
    fitted: Fitted,
) -> None:
    # GIVEN fanfit's clustered fit WHEN it is handed to DoubleML (external predictions, same splits)
    from fanfit.dml.interop import to_doubleml

    spec = fitted.spec
    data = validate_data(spec, list(fitted.df.columns), fitted.df.to_numpy(dtype=float))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = to_doubleml(spec, data, fitted.folds, fitted.result.predictions)
    # THEN DoubleML sees clustered data and gives fanfit's coefficient and standard error
    assert obj._dml_data.is_cluster_data
    assert_same_estimate(obj, fitted.result)
