"""Parity with DoubleML 0.11.4 of the learners issue 12 adds: LightGBM, pipelines and searches.

Beside tests/unit/test_dml_parity.py's table: each case fits the same learners on the same folds
with DoubleML's ``fit()`` (after ``set_sample_splitting``) and fanfit's unit-by-unit
:func:`fanfit.dml.estimate_in_process`, and compares coefficients, standard errors and every
prediction. LightGBM runs with the deterministic settings of docs/estimate.md ("LightGBM"):
``n_jobs=1``, ``deterministic=True``, ``force_row_wise=True`` and a given ``random_state``.
"""

from __future__ import annotations

import warnings
from typing import Any

import doubleml as dml
import numpy as np
import pytest
from lightgbm import LGBMClassifier, LGBMRegressor
from sklearn.linear_model import Lasso, LogisticRegression
from sklearn.model_selection import GridSearchCV, RandomizedSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler

from fanfit.dml import DMLSpec, draw_folds, estimate_in_process, folds_to_smpls, validate_data

RTOL = 1e-9
X_COLS = [f"x{i}" for i in range(5)]
LGBM = dict(n_estimators=30, num_leaves=7, learning_rate=0.1, random_state=3, n_jobs=1,
            deterministic=True, force_row_wise=True, verbose=-1)  # fmt: skip

CASES: dict[str, tuple[str, str, dict[str, Any], dict[str, Any]]] = {
    # id: model, score, learners (objects, as a DoubleML user writes them), data options
    "plr-lgbm": ("plr", "partialling out",
                 dict(ml_l=LGBMRegressor(**LGBM), ml_m=LGBMRegressor(**LGBM)), {}),
    "plr-lgbm-classifier-m": ("plr", "partialling out",
                              dict(ml_l=LGBMRegressor(**LGBM), ml_m=LGBMClassifier(**LGBM)),
                              dict(binary_d=True)),
    "irm-lgbm": ("irm", "ATE", dict(ml_g=LGBMRegressor(**LGBM), ml_m=LGBMClassifier(**LGBM)), {}),
    "plr-pipeline-grid": ("plr", "partialling out",
                          dict(ml_l=make_pipeline(StandardScaler(), PolynomialFeatures(2), Lasso(alpha=0.05)),
                               ml_m=GridSearchCV(LogisticRegression(), {"C": [0.1, 1.0]}, cv=3,
                                                 scoring="neg_log_loss")),
                          dict(binary_d=True)),
    "plr-randomized-over-pipeline": ("plr", "partialling out",
                                     dict(ml_l=RandomizedSearchCV(make_pipeline(StandardScaler(), Lasso()),
                                                                  {"lasso__alpha": [0.01, 0.1, 1.0]},
                                                                  n_iter=2, cv=3, random_state=5),
                                          ml_m=make_pipeline(StandardScaler(), Lasso(alpha=0.1))), {}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_estimate_in_process_equals_doubleml_with_the_same_folds(case: str, make_frame) -> None:
    # GIVEN data, fanfit folds, and the learners as objects (fanfit converts them to specs)
    model, score, learners, options = CASES[case]
    df = make_frame(model, n_obs=300, seed=21, **options)
    spec = DMLSpec(model=model, score=score, y_col="y", d_cols=("d",), x_cols=tuple(X_COLS),
                   n_folds=3, n_rep=1, seed=9, learners=learners)  # fmt: skip
    spec.validate()
    folds = draw_folds(len(df), spec.n_folds, spec.n_rep, spec.seed)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    obj_data = dml.DoubleMLData(df, "y", ["d"], x_cols=X_COLS)
    cls = dml.DoubleMLPLR if model == "plr" else dml.DoubleMLIRM
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # WHEN DoubleML fits the user's own objects and fanfit runs every unit from the specs
        obj = cls(obj_data, **learners, n_folds=3, score=score)
        obj.set_sample_splitting(folds_to_smpls(folds))
        obj.fit(store_predictions=True)
        result = estimate_in_process(spec, data, folds)
    # THEN the estimate and its standard error are DoubleML's
    np.testing.assert_allclose(result.coef, obj.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(result.se, obj.se, rtol=RTOL, atol=0)
    # AND so is every out-of-fold prediction (propensities compared after DoubleML's clipping)
    for key, ours in result.predictions.items():
        if key == "ml_m" and model == "irm":
            ours = np.clip(ours, spec.trimming_threshold, 1 - spec.trimming_threshold)
        np.testing.assert_allclose(ours, obj.predictions[key], rtol=RTOL, atol=1e-12, err_msg=key)
