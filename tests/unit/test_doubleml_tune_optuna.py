"""DoubleML's ``tune_ml_models()`` (Optuna) with its trials' fits on the stack (issue 37, item 3).

GIVEN a fanfit class and DoubleML's of the same name, same data, learners and splitting, the same
search-space callables and a seeded sampler, WHEN fanfit's tunes through a fake stack (each wave
of each study one in-process ``plr`` search job: :mod:`fanfit.client.doubleml.tune_optuna`)
and DoubleML's in-process, THEN every study's trials (parameters, values at 1e-9, states), the
best parameters and score and the parameters set for ``fit()`` are DoubleML's, and ``fit()``
then gives DoubleML's estimate; for every class family DoubleML can tune.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")
optuna = pytest.importorskip("optuna")

from doubleml_helpers import assert_fit_is_doublemls  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression  # noqa: E402
from sklearn.model_selection import KFold, TimeSeriesSplit, cross_val_score  # noqa: E402
from test_cli_tune import WaitingClient  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402
from test_doubleml_quantile_class import FakeClient as QuantileClient  # noqa: E402
from test_doubleml_tune import FAMILIES, _pair  # noqa: E402

import fanfit  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning",
    "ignore::optuna.exceptions.ExperimentalWarning",
)  # fmt: skip

TOL = 1e-9
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _space(learner):
    if isinstance(learner, LogisticRegression):
        return lambda trial: {"C": trial.suggest_float("C", 0.01, 10.0, log=True)}
    if isinstance(learner, LinearRegression):
        return lambda trial: {"fit_intercept": trial.suggest_categorical("fit_intercept",
                                                                         [True, False])}  # fmt: skip
    return lambda trial: {"alpha": trial.suggest_float("alpha", 1e-3, 1.0, log=True)}


def _spaces(model) -> dict:
    return {name: _space(model._learner[name]) for name in model.learner_names}


def _tune(model, spaces, settings=None, **kwargs):
    """Both sides get a fresh sampler of the same seed, shared by every study (as a user's)."""
    settings = {"n_trials": 3, "sampler": optuna.samplers.TPESampler(seed=1), **(settings or {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.tune_ml_models(spaces, optuna_settings=settings, return_tune_res=True,
                                    **kwargs)  # fmt: skip


def _trials(result) -> list:
    return [(t.number, t.state, t.params, np.nan if t.value is None else t.value)
            for t in result.study.trials]  # fmt: skip


def assert_studies_are_doublemls(ours, theirs, got, want) -> None:
    assert len(got) == len(want) > 0
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            x, y = a[key], b[key]
            assert isinstance(x, dml.utils._tune_optuna.DMLOptunaResult)
            assert (x.learner_name, x.params_name, x.tuned) == (y.learner_name, y.params_name,
                                                                 y.tuned)  # fmt: skip
            assert x.best_params == y.best_params
            if y.tuned:
                assert x.best_score == pytest.approx(y.best_score, rel=TOL, abs=TOL)
                tx, ty = _trials(x), _trials(y)
                assert [t[:3] for t in tx] == [t[:3] for t in ty]
                np.testing.assert_allclose([t[3] for t in tx], [t[3] for t in ty], rtol=TOL,
                                           atol=TOL)  # fmt: skip
                assert x.best_estimator.get_params() == y.best_estimator.get_params()
    assert ours.params == theirs.params


@pytest.mark.parametrize("family", list(FAMILIES))
def test_tune_ml_models_on_the_stack_is_doublemls(family) -> None:
    # GIVEN both classes, a search space per learner and one seeded sampler for all studies
    ours, theirs = _pair(family, n_rep=1)
    client = FakeClient()
    # WHEN both tune
    got = _tune(ours, _spaces(ours), client=client)
    want = _tune(theirs, _spaces(theirs))
    # THEN every study's trials and choices are DoubleML's, and so are the parameters set
    assert_studies_are_doublemls(ours, theirs, got, want)
    # AND each trial (sequential: DoubleML's default) ran as one job of plr fits on the stack
    assert len(client.submitted) == 3 * sum(len(res) for res in want)
    assert {s["model"] for s in client.submitted} == {"plr"}
    assert {s["n_rep"] for s in client.submitted} == {1}


@pytest.mark.parametrize("family", ["plr-IV-type", "irm"])
def test_tune_ml_models_then_fit_is_doublemls(family) -> None:
    # GIVEN a tuned model on each side (PLR IV-type: ml_g's target from the tuned ml_l, ml_m)
    ours, theirs = _pair(family, n_rep=2)
    _tune(ours, _spaces(ours), client=WaitingClient())  # awaited with the default timeout
    _tune(theirs, _spaces(theirs))
    # WHEN both fit THEN the estimate is DoubleML's: the tuned parameters reached the stack
    ours.fit(client=FakeClient())
    theirs.fit()
    assert_fit_is_doublemls(ours, theirs)


def test_parallel_trials_run_as_waves_and_each_value_is_its_cross_validation() -> None:
    # GIVEN a PLR, a sampler per study and 3 trials at a time
    ours, _ = _pair("plr", n_rep=1)
    settings = {"n_trials": 5, "n_jobs_optuna": 3, "sampler": None,
                "ml_l": {"sampler": optuna.samplers.TPESampler(seed=1)},
                "ml_m": {"sampler": optuna.samplers.TPESampler(seed=2)}}  # fmt: skip
    client = FakeClient()
    # WHEN it tunes
    got = _tune(ours, _spaces(ours), settings, client=client, scoring_methods={
        "ml_l": "neg_mean_absolute_error", "ml_m": "neg_mean_squared_error"})  # fmt: skip
    # THEN each study ran 2 waves (3 trials, then 2) as one job each, the studies side by side
    assert [s["n_rep"] for s in client.submitted] == [3, 3, 2, 2]
    # AND every trial's value is scikit-learn's cross_val_score of its parameters (DoubleML's
    # objective: cv=5 is KFold(5, shuffle=True, random_state=42))
    x, data = ours._dml_data.x, ours._dml_data
    for key, y, scoring in (("ml_l", data.y, "neg_mean_absolute_error"),
                            ("ml_m", data.d, "neg_mean_squared_error")):  # fmt: skip
        study = got[0][key].study
        assert len(study.trials) == 5
        for trial in study.trials:
            learner = clone(ours._learner[key]).set_params(**trial.params)
            cv = KFold(5, shuffle=True, random_state=42)
            want = np.nanmean(cross_val_score(learner, x, y, cv=cv, scoring=scoring))
            assert trial.value == pytest.approx(want, rel=TOL, abs=TOL)
        assert got[0][key].best_params == study.best_trial.params


def test_catch_callbacks_stop_and_an_untuned_nuisance_are_doublemls() -> None:
    # GIVEN a search space that fails on its second trial (caught), a callback that stops the
    # study after 4 trials, and no space for ml_m (DoubleML fits it untuned)
    ours, theirs = _pair("plr", n_rep=1)
    seen: list[list[int]] = [[], []]

    def spaces(side: int) -> dict:
        def ml_l(trial):
            if trial.number == 1:
                raise ValueError("no such alpha")
            return {"alpha": trial.suggest_float("alpha", 1e-3, 1.0, log=True), "max_iter": 500}

        return {"ml_l": ml_l}

    def callback(side: int):
        def stop_after_four(study, frozen):
            seen[side].append(frozen.number)
            if len(study.trials) == 4:
                study.stop()

        return stop_after_four

    got = _tune(ours, spaces(0), {"n_trials": 10, "catch": (ValueError,),
                                  "callbacks": [callback(0)]}, client=FakeClient())  # fmt: skip
    want = _tune(theirs, spaces(1), {"n_trials": 10, "catch": (ValueError,),
                                     "callbacks": [callback(1)]})  # fmt: skip
    # THEN the trials (one failed), the stop and the callbacks are DoubleML's
    assert_studies_are_doublemls(ours, theirs, got, want)
    assert seen[0] == seen[1] == [0, 1, 2, 3]
    assert got[0]["ml_l"].study.trials[1].state == optuna.trial.TrialState.FAIL
    # AND the untuned ml_m's estimator is fitted on first use, as DoubleML's
    assert not got[0]["ml_m"].tuned
    x = theirs._dml_data.x
    np.testing.assert_allclose(got[0]["ml_m"].best_estimator.predict(x),
                               want[0]["ml_m"].best_estimator.predict(x), rtol=TOL)  # fmt: skip


def test_tune_ml_models_refuses_before_any_job() -> None:
    ours, _ = _pair("plr", n_rep=1)
    client = FakeClient()
    spaces = _spaces(ours)
    # GIVEN DoubleML's own checks THEN they raise, and nothing ran
    with pytest.raises(ValueError, match="Invalid ml_param_space keys"):
        ours.tune_ml_models({"ml_q": spaces["ml_l"]}, client=client)
    with pytest.raises(TypeError, match="optimize_kwargs must be a dict"):
        ours.tune_ml_models(spaces, optuna_settings={"optimize_kwargs": 1}, client=client)
    # AND an optimize keyword Study.optimize does not take, by name
    with pytest.raises(TypeError, match="n_rounds"):
        ours.tune_ml_models(spaces, optuna_settings={"optimize_kwargs": {"n_rounds": 2}},
                            client=client)  # fmt: skip
    # AND a cross-validation the stack cannot run as K-fold, by name
    with pytest.raises(fanfit.errors.UnsupportedArgumentError, match="TimeSeriesSplit"):
        ours.tune_ml_models(spaces, cv=TimeSeriesSplit(3), client=client)
    # AND an unknown job option
    with pytest.raises(fanfit.errors.InvalidJobError, match="bogus"):
        ours.tune_ml_models(spaces, client=client, bogus=1)
    assert client.submitted == []
    # AND a trial's parameter that is not plain JSON, before its wave is uploaded
    with pytest.raises(fanfit.InvalidLearnerError, match="alpha"):
        ours.tune_ml_models({"ml_l": lambda trial: {"alpha": object()}}, client=client)
    assert client.submitted == []
    # AND the parameters the failed tunes would have set are not set
    assert ours.params["ml_l"]["d"] == [None] and ours.params["ml_m"]["d"] == [None]
    # AND a study that ends without a complete trial fails as DoubleML's
    with pytest.raises(RuntimeError, match="complete trials"):
        ours.tune_ml_models(spaces, optuna_settings={"timeout": 0}, client=client)


def _parts(model) -> list:
    """The parts in the order of DoubleML's ``tune_ml_models`` results (QTE: by quantile)."""
    if hasattr(model, "modellist_0"):
        return [m for pair in zip(model.modellist_0, model.modellist_1) for m in pair]
    return list(model.modellist)


def _multi(name: str):
    from test_doubleml_apo_class import _data as apo_data
    from test_doubleml_did_multi_class import _both as did_multi
    from test_doubleml_quantile_class import _data as quantile_data

    lasso, logit = Lasso(random_state=0), LogisticRegression()
    if name == "did_multi":
        return did_multi()
    make = {"apos": lambda m: m.DoubleMLAPOS(apo_data(), lasso, logit, [0, 1], n_folds=2),
            "qte": lambda m: m.DoubleMLQTE(quantile_data(), logit, logit, quantiles=[0.3, 0.6],
                                           n_folds=2)}[name]  # fmt: skip
    out = []
    for module in (fanfit, dml):
        np.random.seed(5)
        out.append(make(module))
    return out


@pytest.mark.parametrize("name", ["apos", "qte", "did_multi"])
def test_multi_part_models_tune_every_part_on_the_stack_as_doubleml(name) -> None:
    # GIVEN a multi-part model on each side (its parts: DoubleML's or fanfit's own models)
    ours, theirs = _multi(name)
    part = _parts(theirs)[0]
    spaces = {key: _space(part._learner[key]) for key in part.learner_names}
    client = FakeClient()
    # WHEN both tune with one seeded sampler
    got = _tune(ours, spaces, client=client)
    want = _tune(theirs, spaces)

    # THEN every part's studies are DoubleML's, in DoubleML's structure
    def flat(res) -> list:  # QTE: {"treatment_0": ..., "treatment_1": ...} per quantile
        return [r for item in res for r in (item.values() if "treatment_0" in item else [item])]

    for a, b, x, y in zip(flat(got), flat(want), _parts(ours), _parts(theirs), strict=True):
        assert_studies_are_doublemls(x, y, [a], [b])
    # AND every trial's fits ran on the stack
    n_studies = sum(result.tuned for part in flat(want) for result in part.values())
    assert len(client.submitted) == 3 * n_studies > 0
    # AND the fit after tuning is DoubleML's (a QTE's jobs keep their fold IPW quantiles)
    ours.fit(client=QuantileClient() if name == "qte" else FakeClient())
    theirs.fit()
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL, atol=TOL)
