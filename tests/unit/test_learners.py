"""LearnerSpec and the allow-list: parsing, validation, JSON-only params, kinds, random_state rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LassoCV, LinearRegression

from fanfit.errors import InvalidLearnerError
from fanfit.learners import ALLOWED_LEARNERS, LearnerSpec

REQUIRED = [
    "LinearRegression", "LogisticRegression", "Lasso", "LassoCV", "Ridge", "RidgeCV", "ElasticNet",
    "ElasticNetCV", "LogisticRegressionCV", "RandomForestRegressor", "RandomForestClassifier",
    "ExtraTreesRegressor", "ExtraTreesClassifier", "GradientBoostingRegressor", "GradientBoostingClassifier",
    "HistGradientBoostingRegressor", "HistGradientBoostingClassifier", "DecisionTreeRegressor",
    "DecisionTreeClassifier", "KNeighborsRegressor", "KNeighborsClassifier", "DummyRegressor", "DummyClassifier",
]  # fmt: skip


def test_allow_list_is_an_explicit_map_of_usable_estimators() -> None:
    # THEN every required estimator is there, keyed by its class name, and usable as DoubleML needs
    assert set(REQUIRED) <= set(ALLOWED_LEARNERS)
    for name, cls in ALLOWED_LEARNERS.items():
        assert cls.__name__ == name
        spec = LearnerSpec(name)
        assert spec.is_classifier != spec.is_regressor, name
        method = "predict_proba" if spec.is_classifier else "predict"
        assert hasattr(cls, method), name


def test_parse_name_and_name_with_json() -> None:
    # WHEN a bare name and a name with JSON params are parsed
    bare = LearnerSpec.parse("  LinearRegression ")
    full = LearnerSpec.parse(
        'RandomForestRegressor: {"n_estimators": 50, "max_features": null, "random_state": 42}'
    )
    # THEN names and params are kept, and str() is the canonical sorted compact form
    assert bare == LearnerSpec("LinearRegression", {})
    assert full.params == {"n_estimators": 50, "max_features": None, "random_state": 42}
    assert (
        str(full)
        == 'RandomForestRegressor:{"max_features":null,"n_estimators":50,"random_state":42}'
    )
    assert str(bare) == "LinearRegression:{}"
    assert LearnerSpec.parse(str(full)) == full


def test_to_dict_from_dict_round_trip_through_json() -> None:
    spec = LearnerSpec.parse('LassoCV:{"cv": 5, "alphas": [0.1, 1.0]}')
    d = json.loads(json.dumps(spec.to_dict()))
    assert d == {"name": "LassoCV", "params": {"alphas": [0.1, 1.0], "cv": 5}}
    assert LearnerSpec.from_dict(d) == spec
    assert LearnerSpec.from_dict({"name": "Ridge"}) == LearnerSpec("Ridge")
    assert LearnerSpec.from_dict("Ridge") == LearnerSpec("Ridge")


def test_unknown_name_lists_the_allowed_learners() -> None:
    with pytest.raises(InvalidLearnerError) as err:
        LearnerSpec.parse("sklearn.svm.SVR")
    message = str(err.value)
    assert "Unknown learner 'sklearn.svm.SVR'" in message and "RandomForestRegressor" in message


def test_unknown_param_names_it_and_lists_the_valid_ones() -> None:
    with pytest.raises(InvalidLearnerError) as err:
        LearnerSpec.parse('Lasso:{"alpah": 0.1}')
    assert "no parameter 'alpah'" in str(err.value) and "alpha" in str(err.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('Lasso:{"alpha": "big"}', "invalid parameters.*alpha"),
        ('RandomForestRegressor:{"n_estimators": -3}', "n_estimators"),
        ("Lasso:[0.1]", "must be a JSON object"),
        ('Lasso:{"alpha": 0.1', "not valid JSON"),
        ('Lasso:{"alpha": NaN}', "not valid JSON"),
        ('Lasso:{"alpha": Infinity}', "not valid JSON"),
        ('LassoCV:{"alphas": [[0.1]]}', "only JSON values"),
        ('LassoCV:{"cv": {"n_splits": 3}}', "only JSON values"),
    ],
)
def test_bad_params_are_refused(text, match) -> None:
    with pytest.raises(InvalidLearnerError, match=match):
        LearnerSpec.parse(text)


@pytest.mark.parametrize(
    "value", [(1, 2), {1, 2}, float("nan"), object(), LinearRegression(), b"x"]
)
def test_only_json_values_are_accepted_in_python_too(value) -> None:
    with pytest.raises(InvalidLearnerError, match="only JSON values"):
        LearnerSpec("KNeighborsRegressor", {"n_neighbors": value})


def test_spec_copies_params_so_caller_changes_do_not_leak() -> None:
    params = {"alphas": [0.1, 1.0]}
    spec = LearnerSpec("LassoCV", params)
    params["alphas"].append(5.0)
    assert spec.params == {"alphas": [0.1, 1.0]}


def test_is_classifier_and_is_regressor() -> None:
    assert (
        LearnerSpec("LogisticRegression").is_classifier
        and not LearnerSpec("LogisticRegression").is_regressor
    )
    assert LearnerSpec("Lasso").is_regressor and not LearnerSpec("Lasso").is_classifier
    assert LearnerSpec("HistGradientBoostingClassifier").is_classifier
    assert LearnerSpec("DummyRegressor").is_regressor


def test_the_kind_known_by_name_is_scikit_learns() -> None:
    from sklearn.base import is_classifier, is_regressor

    # GIVEN every plain allowed learner, built with its defaults
    for name, cls in ALLOWED_LEARNERS.items():
        spec = LearnerSpec(name)
        # THEN the kind the spec gives by name (no import) is what scikit-learn says of the object
        assert spec.is_classifier == is_classifier(cls()), name
        assert spec.is_regressor == is_regressor(cls()), name


def test_a_learner_with_default_params_is_checked_without_importing_scikit_learn() -> None:
    import subprocess
    import sys

    # GIVEN a fresh interpreter WHEN it parses plain learners and asks their kind
    code = (
        "import sys; from fanfit.learners import LearnerSpec; "
        "s = [LearnerSpec.parse(n) for n in ('LinearRegression', 'LogisticRegression')]; "
        "assert s[0].is_regressor and s[1].is_classifier; "
        "print('sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # THEN scikit-learn was never imported
    assert out.stdout.strip() == "False"


def test_build_sets_random_state_only_where_the_class_has_one_and_the_user_gave_none() -> None:
    # GIVEN a forest without random_state, one with a user random_state, and a model without the parameter
    free = LearnerSpec("RandomForestRegressor", {"n_estimators": 3})
    pinned = LearnerSpec("RandomForestRegressor", {"n_estimators": 3, "random_state": 42})
    linear = LearnerSpec("LinearRegression")
    # WHEN built with a derived seed
    # THEN the free forest takes it, the user's 42 is kept verbatim, and the linear model has none
    assert free.build(random_state=7).random_state == 7
    assert free.build().random_state is None
    assert pinned.build(random_state=7).random_state == 42
    assert "random_state" not in linear.build(random_state=7).get_params()
    # and every build is a new unfitted estimator equal in params to the hand-written one
    a, b = pinned.build(), pinned.build()
    assert a is not b
    assert a.get_params() == RandomForestRegressor(n_estimators=3, random_state=42).get_params()
    assert (
        clone(LearnerSpec.parse('LassoCV:{"cv": 5}').build()).get_params()
        == LassoCV(cv=5).get_params()
    )


@settings(max_examples=40, deadline=None)
@given(
    n_neighbors=st.integers(min_value=1, max_value=50),
    weights=st.sampled_from(["uniform", "distance"]),
    p=st.floats(min_value=1.0, max_value=5.0, allow_nan=False),
)
def test_canonical_text_round_trips(n_neighbors, weights, p) -> None:
    # GIVEN any valid params
    spec = LearnerSpec(
        "KNeighborsRegressor", {"n_neighbors": n_neighbors, "weights": weights, "p": p}
    )
    # THEN str() parses back to an equal spec and to_dict() is JSON
    assert LearnerSpec.parse(str(spec)) == spec
    assert LearnerSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_from_dict_rejects_malformed_objects() -> None:
    with pytest.raises(InvalidLearnerError, match="unknown keys"):
        LearnerSpec.from_dict({"name": "Lasso", "module": "os"})
    with pytest.raises(InvalidLearnerError, match="no 'name'"):
        LearnerSpec.from_dict({"params": {}})
    with pytest.raises(InvalidLearnerError, match="params must be a JSON object"):
        LearnerSpec.from_dict({"name": "Lasso", "params": [1]})
    with pytest.raises(InvalidLearnerError):
        LearnerSpec.from_dict(3)
    with pytest.raises(InvalidLearnerError):
        LearnerSpec.parse(None)  # type: ignore[arg-type]
