"""DoubleML's ``tune()`` with its searches on the stack (issue 37, item 2).

GIVEN a fanfit class and DoubleML's of the same name, same data, learners and splitting, and the
same ``np.random.seed`` before ``tune()``, WHEN fanfit's tunes through a fake stack (each
search one in-process ``plr`` job: :mod:`fanfit.client.doubleml.tune`) and DoubleML's
in-process, THEN every search's candidates, mean and per-fold test scores (1e-9), ranks and
chosen parameters are DoubleML's, the parameters set for ``fit()`` are DoubleML's, the global
random state after ``tune()`` is DoubleML's, and ``fit()`` then gives DoubleML's estimate; for
every class family DoubleML can tune, globally and fold by fold, grid and randomized search.
The learners' ``random_state`` is set: scikit-learn's ``Lasso`` draws a seed from NumPy's global
state on every fit when it has none, which a fit elsewhere cannot reproduce (module docstring).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.did.datasets import make_did_SZ2020  # noqa: E402
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
from scipy.stats import loguniform  # noqa: E402
from sklearn.linear_model import Lasso, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit.dml.tuning import SearchResult  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning"
)

TOL = 1e-9


def _lasso() -> Lasso:
    return Lasso(random_state=0)


def _grid(learner) -> dict:
    return {"C": [0.05, 0.5, 5.0]} if isinstance(learner, LogisticRegression) else {
        "alpha": [0.01, 0.05, 0.2, 0.6]
    }  # fmt: skip


def _discrete():
    raw = make_irm_data_discrete_treatments(n_obs=300, n_levels=3, random_state=21)
    x_cols = [f"x{i}" for i in range(raw["x"].shape[1])]
    frame = pd.DataFrame(raw["x"], columns=x_cols).assign(y=raw["y"], d=raw["d"])
    return dml.DoubleMLData(frame, "y", "d", x_cols=x_cols)


def _ssm(score):
    frame = make_ssm_data(n_obs=300, dim_x=4, mar=score == "missing-at-random",
                          return_type="DataFrame")  # fmt: skip
    return dml.DoubleMLSSMData(frame, "y", "d", s_col="s",
                               z_cols=None if score == "missing-at-random" else "z")  # fmt: skip


def _panel():
    frame = make_plpr_CP2025(num_id=60, num_t=4, dim_x=4, theta=0.5, dgp_type="dgp1")
    return dml.data.DoubleMLPanelData(frame, "y", "d", "time", "id", static_panel=True)


LOGIT = LogisticRegression
#: (class name, data (after np.random.seed(3)), learners, keywords)
FAMILIES = {
    "plr": (
        "DoubleMLPLR",
        lambda: make_plr_CCDDHNR2018(n_obs=200, dim_x=5, return_type="DoubleMLData"),
        (_lasso, _lasso),
        {},
    ),  # fmt: skip
    "plr-IV-type": (
        "DoubleMLPLR",
        lambda: make_plr_CCDDHNR2018(n_obs=200, dim_x=5, return_type="DoubleMLData"),
        (_lasso, _lasso, _lasso),
        {"score": "IV-type"},
    ),  # fmt: skip
    "pliv": (
        "DoubleMLPLIV",
        lambda: make_pliv_CHS2015(n_obs=200, dim_x=5, dim_z=1, return_type="DoubleMLData"),
        (_lasso, _lasso, _lasso),
        {},
    ),  # fmt: skip
    "irm": (
        "DoubleMLIRM",
        lambda: make_irm_data(n_obs=300, dim_x=4, return_type="DoubleMLData"),
        (_lasso, LOGIT),
        {},
    ),  # fmt: skip
    "iivm": (
        "DoubleMLIIVM",
        lambda: make_iivm_data(n_obs=400, dim_x=4, alpha_x=1.0, return_type="DoubleMLData"),
        (_lasso, LOGIT, LOGIT),
        {},
    ),  # fmt: skip
    "apo": ("DoubleMLAPO", _discrete, (_lasso, LOGIT), {"treatment_level": 2}),
    "did": ("DoubleMLDID", lambda: make_did_SZ2020(n_obs=300, dgp_type=4), (_lasso, LOGIT), {}),
    "didcs": (
        "DoubleMLDIDCS",
        lambda: make_did_SZ2020(n_obs=300, dgp_type=4, cross_sectional_data=True),
        (_lasso, LOGIT),
        {},
    ),  # fmt: skip
    "ssm": ("DoubleMLSSM", lambda: _ssm("missing-at-random"), (_lasso, LOGIT, LOGIT), {}),
    "pq": (
        "DoubleMLPQ",
        lambda: make_irm_data(n_obs=300, dim_x=4, return_type="DoubleMLData"),
        (LOGIT, LOGIT),
        {"treatment": 1, "quantile": 0.45},
    ),  # fmt: skip
    "cvar": (
        "DoubleMLCVAR",
        lambda: make_irm_data(n_obs=300, dim_x=4, return_type="DoubleMLData"),
        (_lasso, LOGIT),
        {"treatment": 1, "quantile": 0.45},
    ),  # fmt: skip
    "plpr": ("DoubleMLPLPR", _panel, (_lasso, _lasso), {"approach": "fd_exact"}),
    "lplr": (
        "DoubleMLLPLR",
        lambda: make_lplr_LZZ2020(n_obs=300, dim_x=14, alpha=0.5, treatment="continuous"),
        (LOGIT, _lasso, _lasso),
        {},
    ),  # fmt: skip
}


def _pair(family: str, n_rep: int):
    name, make, learners, kwargs = FAMILIES[family]
    np.random.seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = make()
    out = []
    for module in (fanfit, dml):
        np.random.seed(99)  # the sample splitting each class draws at construction
        out.append(getattr(module, name)(data, *(f() for f in learners), n_folds=3, n_rep=n_rep,
                                         **kwargs))  # fmt: skip
    return out


def _tune(model, grids, **kwargs):
    np.random.seed(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = model.tune(grids, return_tune_res=True, **kwargs)
    return res, np.random.get_state()


def _searches(res) -> list:
    """Every search object of DoubleML's ``return_tune_res`` structure, in its order."""
    if hasattr(res, "cv_results_"):
        return [res]
    if isinstance(res, dict):
        return [s for k in res for s in _searches(res[k])]
    if isinstance(res, list | tuple):
        return [s for v in res for s in _searches(v)]
    return []


def assert_tuning_is_doublemls(ours, theirs, ours_res, theirs_res) -> None:
    (res_a, state_a), (res_b, state_b) = ours_res, theirs_res
    a, b = _searches(res_a), _searches(res_b)
    assert len(a) == len(b) > 0
    for x, y in zip(a, b, strict=True):
        assert isinstance(x, SearchResult)
        assert x.cv_results_["params"] == y.cv_results_["params"]
        for key in ("mean_test_score", "std_test_score", "split0_test_score"):
            np.testing.assert_allclose(x.cv_results_[key], y.cv_results_[key], rtol=TOL, atol=TOL)
        np.testing.assert_array_equal(x.cv_results_["rank_test_score"],
                                      y.cv_results_["rank_test_score"])  # fmt: skip
        assert (x.best_index_, x.best_params_) == (y.best_index_, y.best_params_)
        assert x.best_score_ == pytest.approx(y.best_score_, rel=TOL, abs=TOL)
    assert ours.params == theirs.params
    assert state_a[2] == state_b[2] and np.array_equal(state_a[1], state_b[1])


@pytest.mark.parametrize("tune_on_folds", [False, True], ids=["global", "on-folds"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_tune_on_the_stack_is_doublemls(family, tune_on_folds) -> None:
    # GIVEN both classes and a grid per learner (n_rep=1: DoubleML 0.11.4's tune_on_folds
    # indexes its results [i_rep][i_treat] in a list of n_treat lists)
    ours, theirs = _pair(family, n_rep=1)
    grids = {name: _grid(ours._learner[name]) for name in ours.learner_names}
    client = FakeClient()
    # WHEN both tune after the same seed
    got = _tune(ours, grids, tune_on_folds=tune_on_folds, client=client)
    want = _tune(theirs, grids, tune_on_folds=tune_on_folds)
    # THEN every search and the chosen parameters are DoubleML's, and so is the random state
    assert_tuning_is_doublemls(ours, theirs, got, want)
    # AND each search ran as one job of plr fits on the stack
    assert len(client.submitted) == len(_searches(want[0]))
    assert {s["model"] for s in client.submitted} == {"plr"}


def test_randomized_search_with_scorers_then_fit_is_doublemls() -> None:
    # GIVEN an IRM, a distribution and a list to sample from, and DoubleML's scoring methods
    ours, theirs = _pair("irm", n_rep=2)
    grids = {"ml_g": {"alpha": loguniform(1e-3, 1.0)}, "ml_m": {"C": [0.01, 0.1, 1.0, 10.0]}}
    kwargs = {
        "search_mode": "randomized_search", "n_iter_randomized_search": 3, "n_folds_tune": 4,
        "scoring_methods": {"ml_g": "neg_mean_squared_error", "ml_m": "neg_log_loss"},
    }  # fmt: skip
    # WHEN both tune THEN the sampled candidates, scores and choices are DoubleML's
    got = _tune(ours, grids, client=FakeClient(), **kwargs)
    want = _tune(theirs, grids, **kwargs)
    assert_tuning_is_doublemls(ours, theirs, got, want)
    # AND the fit after the tuning is DoubleML's (the chosen parameters reached the stack)
    ours.fit(client=FakeClient())
    theirs.fit()
    assert_fit_is_doublemls(ours, theirs)


def test_plr_tune_then_fit_is_doublemls_and_the_iv_type_search_runs_after_the_others() -> None:
    # GIVEN PLR's IV-type score: ml_g's target needs the tuned ml_l and ml_m
    ours, theirs = _pair("plr-IV-type", n_rep=2)
    grids = {name: _grid(ours._learner[name]) for name in ours.learner_names}
    client = FakeClient()
    got = _tune(ours, grids, client=client)
    want = _tune(theirs, grids)
    assert_tuning_is_doublemls(ours, theirs, got, want)
    # THEN ml_l's and ml_m's searches ran first, ml_g's after (its own job)
    assert len(client.submitted) == 3
    ours.fit(client=FakeClient())
    theirs.fit()
    assert_fit_is_doublemls(ours, theirs)


def test_tune_refuses_what_doubleml_refuses_and_non_json_candidates_before_any_job() -> None:
    ours, _ = _pair("plr", n_rep=1)
    client = FakeClient()
    # GIVEN a grid without ml_m THEN DoubleML's own check raises, and nothing ran
    with pytest.raises(ValueError, match="param_grids"):
        ours.tune({"ml_l": {"alpha": [0.1]}}, client=client)
    # AND a candidate that is not plain JSON is refused by name, before upload
    with pytest.raises(fanfit.InvalidLearnerError, match="alpha"):
        ours.tune({"ml_l": {"alpha": [object()]}, "ml_m": {"alpha": [0.1]}}, client=client)
    # AND a parameter one learner does not have, before the other learner's search is uploaded
    with pytest.raises(fanfit.InvalidLearnerError, match="alphaa"):
        ours.tune({"ml_l": {"alpha": [0.1]}, "ml_m": {"alphaa": [0.1]}}, client=client)
    # AND an unknown job option is refused by name
    with pytest.raises(fanfit.errors.InvalidJobError, match="bogus"):
        ours.tune({"ml_l": {"alpha": [0.1]}, "ml_m": {"alpha": [0.1]}}, client=client, bogus=1)
    assert client.submitted == []
    # AND the parameters the failed tune would have set are not set
    assert ours.params["ml_l"]["d"] == [None] and ours.params["ml_m"]["d"] == [None]


def test_the_search_result_refits_the_best_candidate_on_first_use() -> None:
    ours, theirs = _pair("plr", n_rep=1)
    grids = {name: _grid(ours._learner[name]) for name in ours.learner_names}
    got, _ = _tune(ours, grids, client=FakeClient())
    want, _ = _tune(theirs, grids)
    ours_l, theirs_l = got[0]["tune_res"]["l_tune"][0], want[0]["tune_res"]["l_tune"][0]
    x = theirs._dml_data.x
    np.testing.assert_allclose(ours_l.predict(x), theirs_l.predict(x), rtol=TOL, atol=TOL)
    assert ours_l.best_estimator_.alpha == theirs_l.best_estimator_.alpha
