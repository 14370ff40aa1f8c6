"""Learners as scikit-learn objects, pipelines and searches: conversion, JSON round trips, seeding, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lightgbm import LGBMClassifier, LGBMRegressor
from scipy.stats import uniform
from sklearn.base import BaseEstimator
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression, RidgeCV
from sklearn.metrics import make_scorer, mean_squared_error
from sklearn.model_selection import GridSearchCV, KFold, RandomizedSearchCV
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    MaxAbsScaler,
    MinMaxScaler,
    OneHotEncoder,
    PolynomialFeatures,
    RobustScaler,
    SplineTransformer,
    StandardScaler,
)
from sklearn.svm import SVR

from fanfit.cli import build_parser, config
from fanfit.client.options import build_spec, check_learners
from fanfit.dml import DMLSpec
from fanfit.errors import InvalidLearnerError
from fanfit.learners import LearnerSpec, as_learner_spec
from fanfit.learners.torch_mlp import TorchMLPRegressor

LGBM_DETERMINISTIC = dict(n_jobs=1, deterministic=True, force_row_wise=True, verbose=-1)


def _objects() -> dict[str, Any]:
    """Every composite (and a plain learner or two), as a user would write it."""
    return {
        "forest": RandomForestRegressor(n_estimators=500, max_depth=4),
        "make_pipeline": make_pipeline(StandardScaler(), Lasso(alpha=0.1)),
        "named-pipeline": Pipeline(
            [("poly", PolynomialFeatures(degree=2, include_bias=False)), ("ridge", RidgeCV())]
        ),
        "every-transformer": make_pipeline(
            SplineTransformer(n_knots=4),
            MinMaxScaler(),
            RobustScaler(),
            MaxAbsScaler(),
            OneHotEncoder(handle_unknown="ignore", sparse_output=False),
            LinearRegression(),
        ),
        "repeated-steps": make_pipeline(
            StandardScaler(), StandardScaler(with_mean=False), LogisticRegression(C=0.5)
        ),
        "grid": GridSearchCV(
            LogisticRegression(max_iter=200), {"C": [0.1, 1.0]}, cv=3, scoring="neg_log_loss"
        ),
        "grid-over-pipeline": GridSearchCV(
            make_pipeline(StandardScaler(), Lasso()),
            [{"lasso__alpha": [0.1, 1.0]}, {"standardscaler__with_mean": [True, False]}],
            cv=4,
        ),
        "randomized": RandomizedSearchCV(
            RandomForestRegressor(n_estimators=10),
            {"max_depth": [2, 3, 4], "min_samples_leaf": [1, 5]},
            n_iter=3,
            random_state=3,
            scoring="neg_mean_squared_error",
        ),
        "lgbm": LGBMRegressor(n_estimators=20, num_leaves=7, **LGBM_DETERMINISTIC),
        "grid-lgbm-classifier": GridSearchCV(
            LGBMClassifier(**LGBM_DETERMINISTIC), {"n_estimators": [10, 20]}, cv=2
        ),
    }


def _flat(value: Any) -> Any:
    """``get_params(deep=True)`` of an estimator with nested estimators and steps flattened too."""
    if isinstance(value, BaseEstimator):
        params = value.get_params(deep=True)
        return (type(value), {k: _flat(v) for k, v in params.items()})
    if isinstance(value, list | tuple):
        return [_flat(v) for v in value]
    if isinstance(value, dict):
        return {k: _flat(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("key", list(_objects()))
def test_object_spec_json_spec_build_round_trip_keeps_get_params(key: str) -> None:
    # GIVEN an estimator object
    est = _objects()[key]
    # WHEN it becomes a spec, JSON text, a spec again, and a new estimator
    spec = LearnerSpec.from_estimator(est)
    text = json.dumps(spec.to_dict())
    again = LearnerSpec.from_dict(json.loads(text))
    built = again.build()
    # THEN the specs are equal, the canonical string parses back, and the parameters are the object's
    assert again == spec
    assert LearnerSpec.parse(str(spec)) == spec
    assert LearnerSpec.parse(text) == spec
    assert type(built) is type(est)
    assert _flat(built) == _flat(est)
    # AND the spec of the rebuilt object is the same spec
    assert LearnerSpec.from_estimator(built) == spec


def test_json_forms_of_a_pipeline_are_one_canonical_spec() -> None:
    # GIVEN a pipeline written as step strings, as dicts, and as named pairs with the default names
    as_strings = LearnerSpec.parse(
        '{"name": "Pipeline", "params": {"steps": ["StandardScaler", "Lasso:{\\"alpha\\": 0.1}"]}}'
    )
    as_dicts = LearnerSpec.parse(
        'Pipeline:{"steps": [{"name": "StandardScaler"}, {"name": "Lasso", "params": {"alpha": 0.1}}]}'
    )
    as_pairs = LearnerSpec(
        "Pipeline",
        {
            "steps": [
                ["standardscaler", "StandardScaler"],
                ["lasso", {"name": "Lasso", "params": {"alpha": 0.1}}],
            ]
        },
    )
    # THEN they are one spec, that of make_pipeline's object
    expected = LearnerSpec.from_estimator(make_pipeline(StandardScaler(), Lasso(alpha=0.1)))
    assert as_strings == as_dicts == as_pairs == expected
    assert expected.to_dict() == {
        "name": "Pipeline",
        "params": {
            "steps": [
                {"name": "StandardScaler", "params": {}},
                {"name": "Lasso", "params": {"alpha": 0.1}},
            ]
        },
    }
    # AND names other than make_pipeline's are kept as pairs
    named = LearnerSpec.from_estimator(Pipeline([("s", StandardScaler()), ("m", Lasso())]))
    assert named.params["steps"][0] == ["s", {"name": "StandardScaler", "params": {}}]
    assert [n for n, _ in named.build().steps] == ["s", "m"]


def test_build_seeds_every_inner_random_state_the_user_left_unset() -> None:
    # GIVEN composites with and without user-given random_state
    pipe = LearnerSpec.from_estimator(
        make_pipeline(StandardScaler(), RandomForestRegressor(n_estimators=5))
    )
    pipe_given = LearnerSpec.from_estimator(
        make_pipeline(StandardScaler(), RandomForestRegressor(n_estimators=5, random_state=1))
    )
    search = LearnerSpec.from_estimator(
        RandomizedSearchCV(Lasso(), {"alpha": [0.1, 1.0]}, n_iter=1)
    )
    search_given = LearnerSpec.from_estimator(
        RandomizedSearchCV(Lasso(random_state=2), {"alpha": [0.1, 1.0]}, n_iter=1, random_state=3)
    )
    grid = LearnerSpec.from_estimator(GridSearchCV(LogisticRegression(), {"C": [1.0]}))
    # WHEN they are built with a seed
    # THEN unset random_states get the seed, given ones are kept, and classes without one are untouched
    assert pipe.build(7).steps[-1][1].random_state == 7
    assert pipe_given.build(7).steps[-1][1].random_state == 1
    assert search.build(7).random_state == 7
    assert search.build(7).estimator.random_state == 7
    assert search_given.build(7).random_state == 3
    assert search_given.build(7).estimator.random_state == 2
    assert grid.build(7).estimator.random_state == 7
    assert "random_state" not in grid.build(7).get_params(deep=False)
    assert pipe.build().steps[-1][1].random_state is None


def test_kind_of_a_composite_follows_its_final_estimator() -> None:
    # GIVEN composites ending in a classifier and in a regressor
    clf = as_learner_spec(make_pipeline(StandardScaler(), LogisticRegression()))
    reg = as_learner_spec(
        GridSearchCV(make_pipeline(StandardScaler(), Lasso()), {"lasso__alpha": [1.0]})
    )
    lgbm = as_learner_spec(GridSearchCV(LGBMClassifier(), {"num_leaves": [7, 15]}))
    # THEN is_classifier / is_regressor are the final estimator's
    assert clf.is_classifier and not clf.is_regressor
    assert reg.is_regressor and not reg.is_classifier
    assert lgbm.is_classifier and not lgbm.is_regressor
    assert clf.estimator_class is Pipeline
    # AND a GPU-only learner inside a pipeline makes the whole learner GPU-only
    assert as_learner_spec(make_pipeline(StandardScaler(), TorchMLPRegressor())).requires_gpu
    assert not clf.requires_gpu


class _FitPredictOnly:
    """An object with fit and predict but no get_params (not a scikit-learn estimator)."""

    def fit(self, x: Any, y: Any) -> _FitPredictOnly:
        return self

    def predict(self, x: Any) -> Any:
        return np.zeros(len(x))


class _MyLasso(Lasso):
    """A subclass of an allowed class: not allowed (its fit could be anything)."""


def _score(y_true: Any, y_pred: Any) -> float:
    return float(mean_squared_error(y_true, y_pred))


REFUSED: list[tuple[str, Any, str]] = [
    # id, value, what the message must say
    ("unknown-class", SVR(), r"ml_l: sklearn\.svm.*SVR is not allowed as a learner\. Allowed: .*Lasso"),
    ("a-class-not-an-object", RandomForestRegressor, "not a scikit-learn estimator object"),
    ("a-callable", lambda x: x, "not a scikit-learn estimator object"),
    ("an-array", np.ones(3), "not a scikit-learn estimator object"),
    ("fit-predict-only", _FitPredictOnly(), "no get_params"),
    ("subclass", _MyLasso(), "_MyLasso is not allowed"),
    ("function-transformer", make_pipeline(FunctionTransformer(np.log1p), Lasso()),
     r"step 0 'functiontransformer'.*FunctionTransformer is not allowed as a step\. Allowed: .*StandardScaler"),
    ("callable-param", KNeighborsRegressor(metric=np.dot), r"parameter 'metric'.*only JSON values"),
    ("array-param", Lasso(alpha=np.ones(2)), r"parameter 'alpha'.*only JSON values"),
    ("estimator-param", Pipeline([("m", Lasso())], memory=None, verbose=False).set_params(m=SVR()),
     "SVR is not allowed"),
    ("pipeline-memory", Pipeline([("m", Lasso())], memory="/tmp/cache"), r"no parameter\(s\) \['memory'\]"),
    ("transformer-last", make_pipeline(StandardScaler()), "last step must be a learner"),
    ("learner-before-last", make_pipeline(Lasso(), Lasso()), r"Lasso is not allowed as a step\. Allowed: Max"),
    ("cv-splitter", GridSearchCV(Lasso(), {"alpha": [1.0]}, cv=KFold(3)), r"parameter 'cv'"),
    ("scorer-object", GridSearchCV(Lasso(), {"alpha": [1.0]}, scoring=make_scorer(_score)),
     r"parameter 'scoring'"),
    ("refit-false", GridSearchCV(Lasso(), {"alpha": [1.0]}, refit=False), "refit must stay true"),
    ("distribution", RandomizedSearchCV(Lasso(), {"alpha": uniform(0, 1)}), "no scipy.stats"),
    ("unknown-grid-key", GridSearchCV(Lasso(), {"alpah": [1.0]}), "has no parameter 'alpah'"),
    ("bad-grid-value", GridSearchCV(Lasso(), {"alpha": [-1.0]}), r"param_grid\['alpha'\].*alpha"),
    ("pipeline-grid-without-step", GridSearchCV(make_pipeline(StandardScaler(), Lasso()), {"alpha": [1.0]}),
     "STEP__PARAM"),
    ("search-in-search", GridSearchCV(GridSearchCV(Lasso(), {"alpha": [1.0]}), {"cv": [2]}),
     "cannot wrap another search"),
    ("non-json-in-lgbm", LGBMRegressor(class_weight={0: 1.0}), r"parameter 'class_weight'"),
]  # fmt: skip


@pytest.mark.parametrize("value, match", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_objects_outside_the_allow_list_are_refused_by_name(value: Any, match: str) -> None:
    # WHEN an object outside the allow-list is given as ml_l
    # THEN InvalidLearnerError names the learner (and step or parameter) and what is allowed
    with pytest.raises(InvalidLearnerError, match=match) as info:
        as_learner_spec(value, "ml_l")
    assert str(info.value).startswith("ml_l")


REFUSED_JSON: list[tuple[str, str, str]] = [
    ("function-transformer",
     '{"name": "Pipeline", "params": {"steps": ["FunctionTransformer", "Lasso"]}}',
     "'FunctionTransformer' is not an allowed step"),
    ("empty-steps", 'Pipeline:{"steps": []}', "non-empty list"),
    ("bad-step", 'Pipeline:{"steps": [{"name": "Lasso", "extra": 1}]}', "a step is"),
    ("duplicate-step-names", 'Pipeline:{"steps": [["a", "StandardScaler"], ["a", "Lasso"]]}', "unique"),
    ("unknown-search-param", 'GridSearchCV:{"estimator": "Lasso", "param_grid": {"alpha": [1]}, "n_job": 2}',
     "n_job"),
    ("missing-grid", 'GridSearchCV:{"estimator": "Lasso"}', "'param_grid' is required"),
    ("scalar-grid", 'GridSearchCV:{"estimator": "Lasso", "param_grid": {"alpha": 1.0}}', "non-empty list"),
    ("unknown-scoring", 'GridSearchCV:{"estimator": "Lasso", "param_grid": {"alpha": [1.0]}, "scoring": "mse"}',
     "scorer name"),
    ("cv-one", 'GridSearchCV:{"estimator": "Lasso", "param_grid": {"alpha": [1.0]}, "cv": 1}', "at least 2"),
    ("lgbm-unknown-kwarg", 'LGBMRegressor:{"boost_from_everything": true}', "boost_from_everything"),
    ("unknown-inner", 'GridSearchCV:{"estimator": "SVR", "param_grid": {"C": [1.0]}}', "Unknown learner 'SVR'"),
]  # fmt: skip


@pytest.mark.parametrize(
    "text, match", [r[1:] for r in REFUSED_JSON], ids=[r[0] for r in REFUSED_JSON]
)
def test_json_forms_outside_the_allow_list_are_refused_by_name(text: str, match: str) -> None:
    # THEN the CLI's and job files' JSON forms are checked as strictly as objects
    with pytest.raises(InvalidLearnerError, match=match):
        as_learner_spec(text, "ml_m")


def test_estimate_options_and_the_job_spec_take_objects_and_keep_json() -> None:
    # GIVEN learners as objects, as a JSON string and as a dict
    learners = {
        "ml_l": make_pipeline(StandardScaler(), Lasso()),
        "ml_m": '{"name": "GridSearchCV", "params": {"estimator": "Lasso", "param_grid": {"alpha": [0.1, 1.0]}}}',
        "ml_g": None,
    }
    # WHEN options are checked and the spec is built
    checked = check_learners(learners)
    spec, _ = build_spec(
        y="y", d="d", x=["x1", "x2"], z=None, model="plr", score=None, learners=learners,
        n_folds=2, n_rep=1, seed=0,
    )  # fmt: skip
    # THEN both are LearnerSpecs, and the spec survives JSON unchanged
    assert set(checked) == {"ml_l", "ml_m"}
    assert spec.learners["ml_l"] == LearnerSpec.from_estimator(learners["ml_l"])
    assert spec.learners["ml_m"].name == "GridSearchCV"
    doc = json.loads(json.dumps(spec.to_dict()))
    assert DMLSpec.from_dict(doc) == spec
    # AND DMLSpec itself takes an object, naming the learner when it is refused
    direct = DMLSpec(model="plr", score="partialling out", y_col="y", d_cols=("d",), x_cols=("x1",),
                     learners={"ml_l": RandomForestRegressor(n_estimators=500), "ml_m": "Lasso"})  # fmt: skip
    assert direct.learners["ml_l"] == LearnerSpec("RandomForestRegressor", {"n_estimators": 500})
    with pytest.raises(InvalidLearnerError, match="^ml_m: .*SVR"):
        check_learners({"ml_l": "Lasso", "ml_m": SVR()})


def test_a_job_file_takes_composites_as_nested_yaml_and_refuses_bad_steps(tmp_path: Path) -> None:
    # GIVEN a job file whose learners are a pipeline and a grid search, written as YAML mappings
    path = tmp_path / "job.yaml"
    path.write_text(
        "data: s3://bucket/k.csv\ny: y\nd: d\nx: a, b\n"
        "ml_l:\n  name: Pipeline\n  params:\n"
        "    steps: [StandardScaler, {name: Lasso, params: {alpha: 0.1}}]\n"
        "ml_m: {name: GridSearchCV, params: {estimator: LogisticRegression,"
        " param_grid: {C: [0.1, 1.0]}, cv: 3}}\n",
        encoding="utf-8",
    )
    # WHEN the command line is resolved with it
    args = config.resolve_args(build_parser().parse_args(["estimate", "--config", str(path)]))
    # THEN the learners are the canonical strings of the same specs as the objects'
    assert as_learner_spec(args.ml_l) == as_learner_spec(
        make_pipeline(StandardScaler(), Lasso(alpha=0.1))
    )
    assert as_learner_spec(args.ml_m) == as_learner_spec(
        GridSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=3)
    )
    # AND a step outside the allow-list is named with the file and key
    path.write_text(
        "data: s3://bucket/k.csv\ny: y\nd: d\nx: a\n"
        "ml_l: {name: Pipeline, params: {steps: [FunctionTransformer, Lasso]}}\n",
        encoding="utf-8",
    )
    with pytest.raises(InvalidLearnerError, match=r"job\.yaml: ml_l: .*FunctionTransformer"):
        config.resolve_args(build_parser().parse_args(["estimate", "--config", str(path)]))
