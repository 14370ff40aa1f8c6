"""The combined result of a job of several parts equals DoubleML 0.11.4's frameworks.

GIVEN DoubleML's own DoubleMLQTE and DoubleMLAPOS fitted in-process on given folds, WHEN
fanfit.dml.combined (what Aggregate runs) combines their models' estimates and score values,
THEN the effects, standard errors, t and p values, pointwise intervals, causal contrasts and,
with the multiplier bootstrap seeded as a user seeds numpy (``np.random.seed(seed)`` before
``bootstrap``), the joint bands equal DoubleML's at 1e-12; parts that do not make the model are
refused by name.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from fanfit import dml as fdml
from fanfit import errors
from fanfit.dml.combined import (
    Framework,
    PartScores,
    apos_combined,
    combine_parts,
    qte_combined,
)

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import (  # noqa: E402
    make_iivm_data,
    make_irm_data,
    make_irm_data_discrete_treatments,
)
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

X_COLS = ["X1", "X2", "X3", "X4"]
ML_G = {"PQ": LogisticRegression, "CVaR": LinearRegression, "LPQ": LogisticRegression}
RTOL = 1e-12


def _scores(model) -> PartScores:
    """A fitted DoubleML model's first treatment, as a part's scores."""
    return PartScores(model.all_coef[0], model.all_se[0], model.psi[:, :, 0],
                      model.psi_deriv[:, :, 0])  # fmt: skip


def _fit(obj):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj.fit()
    return obj


def _doubleml_qte(score: str, quantiles: list[float], n_rep: int):
    np.random.seed(7)
    if score == "LPQ":
        frame = make_iivm_data(n_obs=300, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DataFrame")
    else:
        frame = make_irm_data(n_obs=300, dim_x=4, theta=0.5, return_type="DataFrame")
    data = dml.DoubleMLData(frame, "y", "d", x_cols=X_COLS, z_cols="z" if score == "LPQ" else None)
    obj = dml.DoubleMLQTE(data, ML_G[score](), LogisticRegression(), quantiles=quantiles,
                          n_folds=2, n_rep=n_rep, score=score, normalize_ipw=True,
                          draw_sample_splitting=False)  # fmt: skip
    obj.set_sample_splitting(fdml.folds_to_smpls(fdml.draw_folds(300, 2, n_rep, seed=3)))
    return _fit(obj)


@pytest.mark.parametrize(("score", "n_rep", "boot"), [("PQ", 2, "normal"), ("CVaR", 3, "Bayes"),
                                                      ("LPQ", 1, "wild")])  # fmt: skip
def test_qte_effects_and_joint_bands_are_doublemls(score, n_rep, boot) -> None:
    # GIVEN DoubleMLQTE fitted in-process and its models' scores, per quantile level 0 then 1
    quantiles = [0.3, 0.5, 0.7]
    theirs = _doubleml_qte(score, quantiles, n_rep)
    parts = [_scores(m) for pair in zip(theirs.modellist_0, theirs.modellist_1) for m in pair]
    # WHEN fanfit combines them, bootstrapped from seed 21, and DoubleML bootstraps after
    # np.random.seed(21), as a user would
    ours = qte_combined(quantiles, score, parts, boot_method=boot, n_rep_boot=200, seed=21)
    np.random.seed(21)
    theirs.bootstrap(method=boot, n_rep_boot=200)
    # THEN every number is DoubleMLQTE's, the joint bands too (the draws are the same)
    e = ours.effects
    for ours_attr, attr in (("coef", "coef"), ("se", "se"), ("all_coef", "all_coef"),
                            ("all_se", "all_se"), ("t_stat", "t_stat"), ("pval", "pval")):  # fmt: skip
        np.testing.assert_allclose(getattr(e, ours_attr), getattr(theirs, attr), rtol=RTOL,
                                   atol=1e-14, err_msg=attr)  # fmt: skip
    np.testing.assert_allclose(e.confint(), theirs.confint().to_numpy(), rtol=RTOL)
    np.testing.assert_allclose(e.confint(joint=True), theirs.confint(joint=True).to_numpy(),
                               rtol=RTOL)  # fmt: skip
    # AND the document holds them, named by the quantiles, with the bootstrap's options
    doc = ours.to_dict()
    assert doc["effects"]["names"] == ["0.3", "0.5", "0.7"] and doc["quantiles"] == quantiles
    assert (doc["boot_method"], doc["n_rep_boot"], doc["seed"]) == (boot, 200, 21)
    np.testing.assert_allclose(doc["effects"]["ci_joint_95"], theirs.confint(joint=True),
                               rtol=RTOL)  # fmt: skip


def _doubleml_apos(levels, normalize_ipw: bool):
    raw = make_irm_data_discrete_treatments(n_obs=300, n_levels=3, random_state=3)
    x_cols = [f"x{i}" for i in range(raw["x"].shape[1])]
    frame = pd.DataFrame(raw["x"], columns=x_cols).assign(y=raw["y"], d=raw["d"])
    data = dml.DoubleMLData(frame, "y", "d", x_cols=x_cols)
    np.random.seed(11)
    obj = dml.DoubleMLAPOS(data, LinearRegression(), LogisticRegression(), levels, n_folds=3,
                           n_rep=3, normalize_ipw=normalize_ipw)  # fmt: skip
    return _fit(obj)


@pytest.mark.parametrize(("levels", "reference", "normalize_ipw", "boot"),
                         [([0, 1, 2], 0, False, "normal"), ([2, 0, 3, 1], 3, True, "wild")])  # fmt: skip
def test_apos_levels_and_contrasts_are_doublemls(levels, reference, normalize_ipw, boot) -> None:
    # GIVEN DoubleMLAPOS fitted in-process (three repetitions) and each level's scores
    theirs = _doubleml_apos(levels, normalize_ipw)
    parts = [_scores(m) for m in theirs.modellist]
    # WHEN fanfit combines them against the reference, bootstrapped from seed 5
    ours = apos_combined([float(v) for v in levels], parts, reference=reference,
                         boot_method=boot, n_rep_boot=150, seed=5)  # fmt: skip
    # THEN the levels are DoubleMLAPOS's, its joint bands after np.random.seed(5) too
    np.random.seed(5)
    theirs.bootstrap(method=boot, n_rep_boot=150)
    e = ours.effects
    np.testing.assert_allclose(e.coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(e.se, theirs.se, rtol=RTOL)
    np.testing.assert_allclose(e.confint(joint=True), theirs.confint(joint=True).to_numpy(),
                               rtol=RTOL)  # fmt: skip
    # AND the contrasts are causal_contrast(reference)'s, its bands after np.random.seed(5)
    acc = theirs.causal_contrast(reference)
    np.random.seed(5)
    acc.bootstrap(method=boot, n_rep_boot=150)
    c = ours.contrasts
    assert c is not None and list(c.names) == list(acc.treatment_names)
    for ours_attr, attr in (("all_coef", "all_thetas"), ("all_se", "all_ses"), ("coef", "thetas"),
                            ("se", "ses"), ("t_stat", "t_stats"), ("pval", "pvals")):  # fmt: skip
        np.testing.assert_allclose(getattr(c, ours_attr), getattr(acc, attr), rtol=RTOL,
                                   atol=1e-14, err_msg=attr)  # fmt: skip
    np.testing.assert_allclose(c.confint(), acc.confint().to_numpy(), rtol=RTOL)
    np.testing.assert_allclose(c.confint(joint=True), acc.confint(joint=True).to_numpy(),
                               rtol=RTOL)  # fmt: skip
    assert ours.to_dict()["reference_level"] == float(reference)


def test_parts_that_do_not_make_the_model_are_refused() -> None:
    # GIVEN the scores of one part
    part = PartScores(np.zeros(1), np.ones(1), np.zeros((5, 1)), -np.ones((5, 1)))
    # WHEN three parts are combined for two quantiles THEN the error names the parts per quantile
    with pytest.raises(errors.InvalidJobError, match="2 parts per quantile"):
        qte_combined([0.2, 0.4], "PQ", [part] * 3)
    # AND a reference that is not a level, and a bad bootstrap, are named
    with pytest.raises(errors.InvalidJobError, match="reference level 5 is not one of"):
        apos_combined([0.0, 1.0], [part, part], reference=5)
    with pytest.raises(errors.InvalidJobError, match="boot_method must be one of"):
        qte_combined([0.2], "PQ", [part, part], boot_method="jackknife")
    with pytest.raises(errors.InvalidJobError, match="n_rep_boot must be a positive integer"):
        apos_combined([0.0, 1.0], [part, part], boot_method="normal", n_rep_boot=0)
    # AND joint bands before the bootstrap are refused
    with pytest.raises(errors.InvalidJobError, match="multiplier bootstrap"):
        Framework.of_part("a", part).confint(joint=True)
    # AND a qte job whose quantile lacks a level is refused by its specs
    base = dict(score="PQ", y_col="y", d_cols=("d",), x_cols=("x",))
    specs = [fdml.DMLSpec(model="pq", treatment=t, quantile=0.5, **base) for t in (1, 1)]
    with pytest.raises(errors.InvalidJobError, match="one at treatment 1 of each quantile"):
        combine_parts("qte", specs, [part, part])
    # AND a model without a combined result gives none
    assert combine_parts("pq", specs[:1], [part]) is None


def test_qte_parts_combine_in_any_order() -> None:
    # GIVEN four parts of two quantiles, submitted level 0's first (fanfit.DoubleMLQTE's
    # modellist order) and per quantile (fanfit estimate's order)
    rng = np.random.default_rng(3)
    base = dict(score="PQ", y_col="y", d_cols=("d",), x_cols=("x",))
    keys = [(0.3, 0), (0.3, 1), (0.6, 0), (0.6, 1)]
    scores = {
        k: PartScores(rng.normal(size=2), rng.uniform(0.5, 1, size=2), rng.normal(size=(40, 2)),
                      -rng.uniform(0.5, 1, size=(40, 2)))
        for k in keys
    }  # fmt: skip
    per_quantile = combine_parts(
        "qte", [fdml.DMLSpec(model="pq", quantile=q, treatment=t, **base) for q, t in keys],
        [scores[k] for k in keys],
    )  # fmt: skip
    levels_first = [keys[0], keys[2], keys[1], keys[3]]
    other = combine_parts(
        "qte", [fdml.DMLSpec(model="pq", quantile=q, treatment=t, **base) for q, t in levels_first],
        [scores[k] for k in levels_first],
    )  # fmt: skip
    # THEN both are the same effects, per quantile treated minus control
    assert per_quantile is not None and other is not None
    assert per_quantile.quantiles == other.quantiles == (0.3, 0.6)
    np.testing.assert_array_equal(per_quantile.effects.all_coef, other.effects.all_coef)
    np.testing.assert_array_equal(
        per_quantile.effects.all_coef[1], scores[(0.6, 1)].all_coef - scores[(0.6, 0)].all_coef
    )
