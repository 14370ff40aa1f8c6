"""DoubleML's nuisance parameters reach the stack (issue 37, item 1).

GIVEN a fanfit class and DoubleML's class of the same name, same data, learners and splitting,
and the same ``set_ml_nuisance_params`` calls (one dict for every fold, and DoubleML's per-fold
lists of ``n_rep`` x ``n_folds`` dicts), WHEN fanfit's is fitted through a fake stack (the job's
in-process estimate, :func:`fanfit.dml.estimate_in_process`, on the options ``fit()`` sends) and
DoubleML's in-process, THEN the job carried the parameters as ``learner_params`` and every number
is DoubleML's at 1e-9: one test per class family (PLR/PLIV, IRM/IIVM/APO/APOS, DID/DIDCS/
DIDMulti, SSM, PQ/CVaR/LPQ/QTE, PLPR, LPLR). The parameters change each fit (a Lasso penalty, a
logistic regression's ``C``), so a parameter that did not reach the fits would fail the test.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.did.datasets import make_did_CS2021, make_did_SZ2020  # noqa: E402
from doubleml.irm.datasets import (  # noqa: E402
    make_iivm_data,
    make_irm_data,
    make_irm_data_discrete_treatments,
    make_ssm_data,
)
from doubleml.plm.datasets import (  # noqa: E402
    make_lplr_LZZ2020,
    make_pliv_CHS2015,
    make_plpr_CP2025,
    make_plr_CCDDHNR2018,
)
from doubleml_helpers import assert_fit_is_doublemls  # noqa: E402
from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402
from test_doubleml_lplr_class import FakeClient as FoldScalarClient  # noqa: E402
from test_doubleml_quantile_class import FakeClient as QuantileClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import errors  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning"
)

TOL = 1e-9
N_FOLDS, N_REP = 3, 2


def _per_fold(name: str, values: tuple[float, ...]) -> list[list[dict[str, float]]]:
    """DoubleML's per-fold form: ``n_rep`` lists of ``n_folds`` dicts, every fold its own."""
    return [[{name: v * (1 + 0.5 * r)} for v in values] for r in range(N_REP)]


def _pair(make, set_params):
    """fanfit's and DoubleML's model from ``make(module)`` after the same NumPy seed, each with
    ``set_params(model)`` applied."""
    out = []
    for module in (fanfit, dml):
        np.random.seed(99)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = make(module)
        set_params(model)
        out.append(model)
    return out


def _fit(ours, theirs, client=None):
    client = client or FakeClient()
    ours.fit(client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.fit()
    return client


def _set(pairs):
    def apply(model):
        for learner, treat, params in pairs:
            model.set_ml_nuisance_params(learner, treat, params)

    return apply


# ------------------------------------------------------------------ PLR / PLIV
@pytest.mark.parametrize("score", ["partialling out", "IV-type"])
def test_plr_nuisance_params_reach_the_fits(score) -> None:
    np.random.seed(3)
    data = make_plr_CCDDHNR2018(n_obs=200, dim_x=6, return_type="DoubleMLData")
    ml_g = Lasso() if score == "IV-type" else None
    pairs = [("ml_l", "d", {"alpha": 0.05}), ("ml_m", "d", _per_fold("alpha", (0.02, 0.2, 0.5)))]
    if score == "IV-type":
        pairs.append(("ml_g", "d", {"alpha": 0.3}))
    ours, theirs = _pair(
        lambda m: m.DoubleMLPLR(data, Lasso(), Lasso(), ml_g, n_folds=N_FOLDS, n_rep=N_REP,
                                score=score),
        _set(pairs),
    )  # fmt: skip
    client = _fit(ours, theirs)
    sent = client.submitted[0]["learner_params"]
    # THEN the global dict travels as one dict, the per-fold lists as DoubleML's lists
    assert sent["ml_l"] == {"d": {"alpha": 0.05}}
    assert sent["ml_m"] == {"d": _per_fold("alpha", (0.02, 0.2, 0.5))}
    assert_fit_is_doublemls(ours, theirs)
    # AND the parameters changed the estimate (the test would see them dropped)
    np.random.seed(99)
    plain = dml.DoubleMLPLR(data, Lasso(), Lasso(), ml_g, n_folds=N_FOLDS, n_rep=N_REP, score=score)
    plain.fit()
    assert not np.allclose(plain.coef, theirs.coef, rtol=1e-3)


def test_each_treatments_params_reach_its_fits() -> None:
    # GIVEN two treatments, parameters set for one of them per nuisance
    np.random.seed(3)
    df = make_plr_CCDDHNR2018(n_obs=200, dim_x=6, return_type="DataFrame")
    df["d2"] = 0.5 * df["X1"] + 0.3 * df["d"] + np.random.normal(size=200)
    data = dml.DoubleMLData(df, "y", ["d", "d2"])
    ours, theirs = _pair(
        lambda m: m.DoubleMLPLR(data, Lasso(), Lasso(), n_folds=N_FOLDS, n_rep=N_REP),
        _set([("ml_l", "d2", {"alpha": 0.05}), ("ml_m", "d", _per_fold("alpha", (0.02, 0.2, 0.5)))]),
    )  # fmt: skip
    client = _fit(ours, theirs)
    sent = client.submitted[0]["learner_params"]
    assert set(sent["ml_l"]) == {"d2"} and set(sent["ml_m"]) == {"d"}
    assert_fit_is_doublemls(ours, theirs)


def test_pliv_nuisance_params_reach_the_fits() -> None:
    np.random.seed(4)
    data = make_pliv_CHS2015(n_obs=200, dim_x=8, dim_z=1, return_type="DoubleMLData")
    ours, theirs = _pair(
        lambda m: m.DoubleMLPLIV(data, Lasso(), Lasso(), Lasso(), n_folds=N_FOLDS, n_rep=N_REP),
        _set([("ml_l", "d", {"alpha": 0.1}), ("ml_m", "d", _per_fold("alpha", (0.05, 0.1, 0.3))),
              ("ml_r", "d", {"alpha": 0.2})]),
    )  # fmt: skip
    _fit(ours, theirs)
    assert_fit_is_doublemls(ours, theirs)


# ------------------------------------------------------------------ IRM / IIVM / APO / APOS
def test_irm_nuisance_params_reach_the_fits() -> None:
    np.random.seed(5)
    data = make_irm_data(n_obs=300, dim_x=5, theta=0.5, return_type="DoubleMLData")
    ours, theirs = _pair(
        lambda m: m.DoubleMLIRM(data, Lasso(), LogisticRegression(), n_folds=N_FOLDS, n_rep=N_REP),
        _set([("ml_g0", "d", {"alpha": 0.5}), ("ml_g1", "d", _per_fold("alpha", (0.01, 0.1, 0.2))),
              ("ml_m", "d", {"C": 0.05})]),
    )  # fmt: skip
    client = _fit(ours, theirs)
    # ml_g0 and ml_g1 share the learner ml_g but not its parameters
    assert set(client.submitted[0]["learner_params"]) == {"ml_g0", "ml_g1", "ml_m"}
    assert_fit_is_doublemls(ours, theirs)


def test_iivm_nuisance_params_reach_the_fits() -> None:
    np.random.seed(6)
    data = make_iivm_data(n_obs=400, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData")
    ours, theirs = _pair(
        lambda m: m.DoubleMLIIVM(data, Lasso(), LogisticRegression(), LogisticRegression(),
                                 n_folds=N_FOLDS, n_rep=N_REP),
        _set([("ml_g0", "d", {"alpha": 0.3}), ("ml_m", "d", _per_fold("C", (0.05, 0.5, 1.0))),
              ("ml_r1", "d", {"C": 0.1})]),
    )  # fmt: skip
    _fit(ours, theirs)
    assert_fit_is_doublemls(ours, theirs)


def _discrete():
    raw = make_irm_data_discrete_treatments(n_obs=300, n_levels=3, random_state=21)
    x_cols = [f"x{i}" for i in range(raw["x"].shape[1])]
    frame = pd.DataFrame(raw["x"], columns=x_cols).assign(y=raw["y"], d=raw["d"])
    return dml.DoubleMLData(frame, "y", "d", x_cols=x_cols)


def test_apo_and_apos_nuisance_params_reach_the_fits() -> None:
    data = _discrete()
    # GIVEN an APO with parameters
    ours, theirs = _pair(
        lambda m: m.DoubleMLAPO(data, Lasso(), LogisticRegression(), treatment_level=2,
                                n_folds=N_FOLDS, n_rep=N_REP),
        _set([("ml_g_d_lvl1", "d", _per_fold("alpha", (0.05, 0.3, 0.6))),
              ("ml_m", "d", {"C": 0.05})]),
    )  # fmt: skip
    _fit(ours, theirs)
    assert_fit_is_doublemls(ours, theirs)

    # GIVEN an APOS whose per-level models (modellist) have their own parameters
    def per_level(model):
        for i, level_model in enumerate(model.modellist):
            level_model.set_ml_nuisance_params("ml_g_d_lvl0", "d", {"alpha": 0.1 * (i + 1)})
            level_model.set_ml_nuisance_params("ml_m", "d", {"C": 0.02 * (i + 1)})

    ours, theirs = _pair(
        lambda m: m.DoubleMLAPOS(data, Lasso(), LogisticRegression(), treatment_levels=[0, 1, 2],
                                 n_folds=N_FOLDS, n_rep=N_REP),
        per_level,
    )  # fmt: skip
    client = _fit(ours, theirs)
    # THEN each level's job carried its model's parameters, and every number is DoubleML's
    alphas = [s["learner_params"]["ml_g_d_lvl0"]["d"]["alpha"] for s in client.submitted]
    assert alphas == pytest.approx([0.1, 0.2, 0.3])
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL)


# ------------------------------------------------------------------ DID / DIDCS / DIDMulti
@pytest.mark.parametrize("cross_sectional", [False, True], ids=["did", "didcs"])
def test_did_nuisance_params_reach_the_fits(cross_sectional) -> None:
    np.random.seed(21)
    data = make_did_SZ2020(n_obs=300, dgp_type=4, cross_sectional_data=cross_sectional)
    g_keys = ["ml_g_d0_t0", "ml_g_d1_t1"] if cross_sectional else ["ml_g0", "ml_g1"]
    name = "DoubleMLDIDCS" if cross_sectional else "DoubleMLDID"
    ours, theirs = _pair(
        lambda m: getattr(m, name)(data, Lasso(), LogisticRegression(), n_folds=N_FOLDS,
                                   n_rep=N_REP),
        _set([(g_keys[0], "d", {"alpha": 0.5}), (g_keys[1], "d", _per_fold("alpha", (0.1, 1, 2))),
              ("ml_m", "d", {"C": 0.05})]),
    )  # fmt: skip
    _fit(ours, theirs)
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL)
    for key, value in theirs.predictions.items():
        np.testing.assert_allclose(ours.predictions[key], value, rtol=TOL, atol=1e-12)


def test_did_multi_nuisance_params_reach_the_fits() -> None:
    np.random.seed(3)
    frame = make_did_CS2021(n_obs=150, dgp_type=1, n_periods=4, n_pre_treat_periods=2,
                            time_type="float")  # fmt: skip
    x_cols = [c for c in frame.columns if c.startswith("Z")]
    data = dml.data.DoubleMLPanelData(frame, y_col="y", d_cols="d", id_col="id", t_col="t",
                                      x_cols=x_cols)  # fmt: skip

    def per_combination(model):
        for i, binary in enumerate(model.modellist):
            d_col = binary._dml_data.d_cols[0]
            binary.set_ml_nuisance_params("ml_g0", d_col, {"alpha": 0.2 + 0.1 * i})
            binary.set_ml_nuisance_params("ml_m", d_col, {"C": 0.05})

    ours, theirs = _pair(
        lambda m: (m.DoubleMLDIDMulti if m is fanfit else m.did.DoubleMLDIDMulti)(
            data, ml_g=Lasso(), ml_m=LogisticRegression(), n_folds=2, n_rep=N_REP
        ),
        per_combination,
    )  # fmt: skip
    client = _fit(ours, theirs)
    assert [s["learner_params"]["ml_g0"]["G_indicator"]["alpha"] for s in client.submitted] == (
        pytest.approx([0.2 + 0.1 * i for i in range(len(theirs.modellist))])
    )
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL)


# ------------------------------------------------------------------ SSM
@pytest.mark.parametrize("score", ["missing-at-random", "nonignorable"])
def test_ssm_nuisance_params_reach_the_fits(score) -> None:
    mar = score == "missing-at-random"
    np.random.seed(17)
    frame = make_ssm_data(n_obs=300, dim_x=4, mar=mar, return_type="DataFrame")
    data = dml.DoubleMLSSMData(frame, "y", "d", z_cols=None if mar else "z", s_col="s")
    ours, theirs = _pair(
        lambda m: m.DoubleMLSSM(data, Lasso(), LogisticRegression(), LogisticRegression(),
                                n_folds=N_FOLDS, n_rep=N_REP, score=score),
        _set([("ml_g_d1", "d", _per_fold("alpha", (0.05, 0.2, 0.4))), ("ml_g_d0", "d", {"alpha": 0.3}),
              ("ml_pi", "d", {"C": 0.1}), ("ml_m", "d", {"C": 0.5})]),
    )  # fmt: skip
    _fit(ours, theirs)
    assert_fit_is_doublemls(ours, theirs)


# ------------------------------------------------------------------ PQ / CVaR / LPQ / QTE
@pytest.mark.parametrize(
    ("name", "pairs"),
    [("DoubleMLPQ", [("ml_g", "d", _per_fold("C", (0.05, 0.5, 2.0))), ("ml_m", "d", {"C": 0.1})]),
     ("DoubleMLCVAR", [("ml_g", "d", {"alpha": 0.3}), ("ml_m", "d", _per_fold("C", (0.05, 0.5, 2.0)))]),
     ("DoubleMLLPQ", [("ml_m_z", "d", {"C": 0.1}), ("ml_m_d_z1", "d", {"C": 0.3}),
                      ("ml_g_du_z0", "d", _per_fold("C", (0.05, 0.5, 2.0))),
                      ("ml_g_du_z1", "d", {"C": 0.2})])],
    ids=["pq", "cvar", "lpq"],
)  # fmt: skip
def test_quantile_nuisance_params_reach_the_fits(name, pairs) -> None:
    np.random.seed(24 if name == "DoubleMLLPQ" else 11)
    data = (
        make_iivm_data(n_obs=400, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DoubleMLData")
        if name == "DoubleMLLPQ"
        else make_irm_data(n_obs=300, dim_x=4, theta=0.5, return_type="DoubleMLData")
    )
    ml_g = Lasso() if name == "DoubleMLCVAR" else LogisticRegression()
    ours, theirs = _pair(
        lambda m: getattr(m, name)(data, ml_g, LogisticRegression(), treatment=1, quantile=0.45,
                                   n_folds=N_FOLDS, n_rep=N_REP),
        _set(pairs),
    )  # fmt: skip
    _fit(ours, theirs, QuantileClient())
    for attr in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(getattr(ours, attr), getattr(theirs, attr), rtol=TOL, atol=TOL)
    for key in theirs.nuisance_loss:
        np.testing.assert_allclose(ours.predictions[key], theirs.predictions[key], atol=TOL)


def test_qte_nuisance_params_reach_the_fits() -> None:
    np.random.seed(11)
    data = make_irm_data(n_obs=300, dim_x=4, theta=0.5, return_type="DoubleMLData")

    def per_model(model):
        for i, m in enumerate([*model.modellist_0, *model.modellist_1]):
            m.set_ml_nuisance_params("ml_g", "d", {"C": 0.05 * (i + 1)})
            m.set_ml_nuisance_params("ml_m", "d", {"C": 0.2})

    ours, theirs = _pair(
        lambda m: m.DoubleMLQTE(data, LogisticRegression(), LogisticRegression(),
                                quantiles=[0.3, 0.6], n_folds=2, n_rep=N_REP),
        per_model,
    )  # fmt: skip
    _fit(ours, theirs, QuantileClient())
    for attr in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(getattr(ours, attr), getattr(theirs, attr), rtol=TOL, atol=TOL)


# ------------------------------------------------------------------ PLPR (panel)
def test_plpr_nuisance_params_reach_the_fits() -> None:
    np.random.seed(3)
    frame = make_plpr_CP2025(num_id=60, num_t=4, dim_x=4, theta=0.5, dgp_type="dgp1")
    data = dml.data.DoubleMLPanelData(frame, "y", "d", "time", "id", static_panel=True)
    d_col = None

    def apply(model):
        nonlocal d_col
        d_col = model._dml_data.d_cols[0]
        model.set_ml_nuisance_params("ml_l", d_col, {"alpha": 0.2})
        model.set_ml_nuisance_params("ml_m", d_col, _per_fold("alpha", (0.01, 0.1, 0.3)))

    ours, theirs = _pair(
        lambda m: m.DoubleMLPLPR(data, Lasso(), Lasso(), n_folds=N_FOLDS, n_rep=N_REP,
                                 approach="fd_exact"),
        apply,
    )  # fmt: skip
    _fit(ours, theirs)
    assert_fit_is_doublemls(ours, theirs)


# ------------------------------------------------------------------ LPLR
def test_lplr_nuisance_params_reach_the_fits() -> None:
    # DoubleML takes per-fold parameters of ml_M and ml_a only with n_folds_inner == n_folds
    n_folds_inner = N_FOLDS
    np.random.seed(5)
    data = make_lplr_LZZ2020(n_obs=300, dim_x=14, alpha=0.5, treatment="continuous")
    ours, theirs = _pair(
        lambda m: m.DoubleMLLPLR(data, LogisticRegression(), Lasso(), Lasso(), n_folds=N_FOLDS,
                                 n_folds_inner=n_folds_inner, n_rep=N_REP),
        _set([("ml_M", "d", _per_fold("C", (0.05, 0.5, 2.0))), ("ml_t", "d", {"alpha": 0.05}),
              ("ml_m", "d", {"alpha": 0.1}), ("ml_a", "d", _per_fold("alpha", (0.01, 0.1, 0.3)))]),
    )  # fmt: skip
    _fit(ours, theirs, FoldScalarClient())
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL, atol=0)
    for key in ("ml_m", "ml_a", "ml_t", "ml_M"):
        np.testing.assert_allclose(
            ours.predictions[key], theirs.predictions[key], rtol=TOL, atol=1e-12
        )


# ------------------------------------------------------------------ refusals, before upload
def test_a_parameter_the_learner_lacks_is_refused_by_name_before_upload() -> None:
    np.random.seed(3)
    data = make_plr_CCDDHNR2018(n_obs=100, dim_x=4, return_type="DoubleMLData")
    model = fanfit.DoubleMLPLR(data, Lasso(), Lasso(), n_folds=2)
    model.set_ml_nuisance_params("ml_m", "d", {"alpah": 0.1})
    client = FakeClient()
    with pytest.raises(errors.InvalidLearnerError, match=r"ml_m.*alpah"):
        model.fit(client=client)
    assert client.submitted == []


def test_a_non_json_parameter_is_refused_by_name() -> None:
    np.random.seed(3)
    data = make_plr_CCDDHNR2018(n_obs=100, dim_x=4, return_type="DoubleMLData")
    model = fanfit.DoubleMLPLR(data, Lasso(), Lasso(), n_folds=2)
    model.set_ml_nuisance_params("ml_l", "d", {"alpha": np.array([0.1, 0.2])})
    with pytest.raises(errors.InvalidLearnerError, match=r"ml_l.*alpha"):
        model.fanfit_options()


def test_lplr_per_fold_params_with_other_inner_folds_are_refused() -> None:
    # DoubleML fits inner fold k with outer fold k's parameters: it has none for inner fold 4
    np.random.seed(5)
    data = make_lplr_LZZ2020(n_obs=200, dim_x=14, alpha=0.5, treatment="continuous")
    model = fanfit.DoubleMLLPLR(data, LogisticRegression(), LinearRegression(), LinearRegression(),
                                n_folds=3, n_folds_inner=5)  # fmt: skip
    model.set_ml_nuisance_params("ml_M", "d", [[{"C": 0.1}, {"C": 0.2}, {"C": 0.3}]])
    with pytest.raises(errors.InvalidJobError, match=r"ml_M.*n_folds_inner=5"):
        model.fit(client=FoldScalarClient())


# ------------------------------------------------------------------ tune(), then fit()
# (DoubleML 0.11.4's tune_on_folds=True fails with more repetitions than treatments: its
# tuning_res is n_treat lists of n_rep, indexed [i_rep][i_d])
@pytest.mark.parametrize(("tune_on_folds", "n_rep"), [(False, N_REP), (True, 1)])
def test_a_script_that_tunes_then_fits_gives_doublemls_numbers(tune_on_folds, n_rep) -> None:
    # GIVEN DoubleML's script, tune() then fit(), with only the class swapped
    np.random.seed(3)
    data = make_plr_CCDDHNR2018(n_obs=200, dim_x=6, return_type="DoubleMLData")
    grids = {"ml_l": {"alpha": [0.01, 0.1, 1.0]}, "ml_m": {"alpha": [0.02, 0.2, 2.0]}}

    def tuned(model):
        np.random.seed(7)  # DoubleML's search folds come from the global state
        # fanfit's searches run on the (fake) stack (tests/unit/test_doubleml_tune.py)
        on_stack = {"client": FakeClient()} if isinstance(model, fanfit.DoubleMLPLR) else {}
        model.tune(grids, tune_on_folds=tune_on_folds, n_folds_tune=3, **on_stack)

    # seeded Lassos: an unseeded one draws from the global state on every fit (docs/doubleml.md)
    ours, theirs = _pair(
        lambda m: m.DoubleMLPLR(data, Lasso(random_state=0), Lasso(random_state=0),
                                n_folds=N_FOLDS, n_rep=n_rep),
        tuned,
    )  # fmt: skip
    # WHEN both fit THEN the job carried the chosen parameters and the estimate is DoubleML's
    client = _fit(ours, theirs)
    assert set(client.submitted[0]["learner_params"]) == {"ml_l", "ml_m"}
    assert_fit_is_doublemls(ours, theirs)


def test_from_doubleml_carries_the_nuisance_params() -> None:
    np.random.seed(3)
    data = make_plr_CCDDHNR2018(n_obs=200, dim_x=6, return_type="DoubleMLData")
    ours, theirs = _pair(
        lambda m: dml.DoubleMLPLR(data, Lasso(), Lasso(), n_folds=N_FOLDS, n_rep=N_REP),
        _set([("ml_l", "d", {"alpha": 0.05}), ("ml_m", "d", _per_fold("alpha", (0.02, 0.2, 0.5)))]),
    )  # fmt: skip
    fitted = fanfit.from_doubleml(ours, client=FakeClient())
    theirs.fit()
    assert_fit_is_doublemls(fitted, theirs)
