"""Learners given as scikit-learn objects run through the local pipeline as allow-listed JSON specs.

GIVEN a small simulated data set, fanfit folds, and learners as a DoubleML user writes them (a
``make_pipeline(StandardScaler(), Lasso())`` object, a ``GridSearchCV`` over ``LogisticRegression``;
LightGBM with its deterministic settings), WHEN the job runs on the local stack (Prepare ->
CrossFit Lambdas, which rebuild the learners from the spec, -> Aggregate), THEN coef and se equal
:func:`fanfit.dml.estimate_in_process` and DoubleML 0.11's fit of the same objects with the same
folds to 1e-9.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from lightgbm import LGBMClassifier, LGBMRegressor
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fanfit import dml

pytestmark = pytest.mark.integration

RTOL = 1e-9
N_FOLDS = 3
SEED = 7
LGBM = dict(n_estimators=20, num_leaves=7, random_state=3, n_jobs=1, deterministic=True,
            force_row_wise=True, verbose=-1)  # fmt: skip


def _frame() -> pd.DataFrame:
    """A partially linear model with a binary treatment (DoubleML's IRM generator), fixed seed."""
    from doubleml.irm import datasets as irm_datasets

    np.random.seed(4321)
    return irm_datasets.make_irm_data(n_obs=300, dim_x=5, return_type="DataFrame")


def _check_against_references(
    local_client: Any, model: str, score: str, learners: dict[str, Any]
) -> None:
    import doubleml

    df = _frame()
    x_cols = [c for c in df.columns if c.startswith("X")]
    folds = dml.draw_folds(len(df), N_FOLDS, 1, seed=SEED)
    # WHEN the job runs on the stack with the learner objects
    res = local_client.estimate(
        df, model=model, score=score, y="y", d="d", x=x_cols, n_folds=N_FOLDS, n_rep=1,
        seed=SEED, folds=folds, **learners,
    )  # fmt: skip
    # THEN it equals fanfit's in-process run of the same spec ...
    spec = dml.DMLSpec(model=model, score=score, y_col="y", d_cols=("d",), x_cols=tuple(x_cols),
                       n_folds=N_FOLDS, n_rep=1, seed=SEED, learners=learners)  # fmt: skip
    data = dml.validate_data(spec, list(df.columns), df.to_numpy())
    ref = dml.estimate_in_process(spec, data, folds)
    np.testing.assert_allclose(res.coef, ref.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(res.se, ref.se, rtol=RTOL, atol=0)
    # ... and DoubleML's fit of the user's own objects on the same folds
    cls = doubleml.DoubleMLPLR if model == "plr" else doubleml.DoubleMLIRM
    obj = cls(doubleml.DoubleMLData(df, "y", ["d"], x_cols=x_cols), **learners, n_folds=N_FOLDS,
              score=score, draw_sample_splitting=False)  # fmt: skip
    obj.set_sample_splitting(dml.folds_to_smpls(folds))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj.fit()
    np.testing.assert_allclose(res.coef, obj.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(res.se, obj.se, rtol=RTOL, atol=0)


def test_pipeline_and_grid_search_objects_equal_in_process_and_doubleml(local_client: Any) -> None:
    # GIVEN ml_l a pipeline object and ml_m a grid search over a classifier
    learners = {
        "ml_l": make_pipeline(StandardScaler(), Lasso(alpha=0.05)),
        "ml_m": GridSearchCV(LogisticRegression(), {"C": [0.1, 1.0, 10.0]}, cv=3),
    }
    _check_against_references(local_client, "plr", "partialling out", learners)


def test_lightgbm_in_the_scientific_layer_equals_doubleml(local_client: Any) -> None:
    # GIVEN LightGBM learners with the deterministic settings of docs/estimate.md
    learners = {"ml_g": LGBMRegressor(**LGBM), "ml_m": LGBMClassifier(**LGBM)}
    _check_against_references(local_client, "irm", "ATE", learners)
