"""DoubleMLAPO through the model registry: scores, estimate, losses and checks against DoubleML 0.11.4.

Data from DoubleML's own generator (``make_irm_data_discrete_treatments``, four treatment levels).
DoubleML fits on fanfit's folds; fanfit's scores from DoubleML's stored predictions must equal
DoubleML's ``psi_elements`` at 1e-12, and fanfit's unit-by-unit fit must equal DoubleML's fit.
"""

from __future__ import annotations

import doubleml as dml
import numpy as np
import pandas as pd
import pytest
from doubleml.irm.datasets import make_irm_data_discrete_treatments
from doubleml_helpers import assert_registry_model_is_doublemls, fit_on_folds, ipw_kwargs

from fanfit.dml import (
    DMLSpec,
    validate_data,
)
from fanfit.dml.models import REGISTRY
from fanfit.errors import InvalidDataError, InvalidJobError

X_COLS = [f"x{i}" for i in range(5)]


def _frame(n_obs: int = 300, seed: int = 3) -> pd.DataFrame:
    raw = make_irm_data_discrete_treatments(n_obs=n_obs, n_levels=3, random_state=seed)
    df = pd.DataFrame(raw["x"], columns=X_COLS)
    df["y"] = raw["y"]
    df["d"] = raw["d"]
    return df


def _spec(level: float = 1.0, **kwargs) -> DMLSpec:
    options = {
        "model": "apo",
        "score": "APO",
        "y_col": "y",
        "d_cols": ("d",),
        "x_cols": tuple(X_COLS),
        "n_folds": 3,
        "n_rep": 2,
        "seed": 7,
        "learners": {"ml_g": "LinearRegression", "ml_m": "LogisticRegression"},
        "treatment_level": level,
    }
    spec = DMLSpec(**(options | kwargs))
    spec.validate()
    return spec


def _doubleml(spec: DMLSpec, df: pd.DataFrame, folds: np.ndarray):
    obj = dml.DoubleMLAPO(
        dml.DoubleMLData(df, "y", "d", x_cols=X_COLS),
        spec.learners["ml_g"].build(),
        spec.learners["ml_m"].build(),
        treatment_level=spec.treatment_level,
        **ipw_kwargs(spec),
    )
    return fit_on_folds(obj, folds)


@pytest.mark.parametrize(
    ("level", "normalize_ipw", "trim"),
    [(0.0, False, 0.01), (2.0, True, 0.05)],
    ids=["level0", "level2-normalized-trim"],
)
def test_apo_scores_and_estimate_equal_doubleml(level, normalize_ipw, trim) -> None:
    # GIVEN DoubleML's discrete-treatment data and one APO spec, fitted by DoubleML on fanfit folds
    spec = _spec(level, normalize_ipw=normalize_ipw, trimming_threshold=trim)
    # WHEN fanfit computes the score elements from DoubleML's predictions (propensities DoubleML
    # stored clipped; clipping again changes nothing), aggregates them and fits unit by unit
    # THEN scores and aggregate are DoubleML's at 1e-12, its own fits, estimate and losses at 1e-9
    assert_registry_model_is_doublemls(spec, _frame(), _doubleml)


def test_apo_registry_entry_declares_doublemls_nuisances() -> None:
    # GIVEN the registry WHEN APO's entry is read THEN its fits are DoubleML's: ml_g at and off the
    # level (the off-level fit on (d, x)), ml_m of 1{d == level} on all rows
    mdef = REGISTRY["apo"]
    fits = {n.key: n for n in mdef.nuisances(_spec())}
    assert list(fits) == ["ml_g_d_lvl0", "ml_g_d_lvl1", "ml_m"]
    assert (fits["ml_g_d_lvl0"].rows, fits["ml_g_d_lvl0"].features) == (("treated", 0.0), "dx")
    assert (fits["ml_g_d_lvl1"].rows, fits["ml_g_d_lvl1"].features) == (("treated", 1.0), "x")
    assert (fits["ml_m"].target, fits["ml_m"].rows) == ("treated", None)
    assert mdef.doubleml_class == "DoubleMLAPO" and mdef.scores == ("APO",)


def test_apo_needs_a_treatment_level_and_other_models_refuse_one() -> None:
    # GIVEN an APO spec without treatment_level WHEN validated THEN the error names the option
    with pytest.raises(InvalidJobError, match="treatment_level"):
        _spec(None)
    with pytest.raises(InvalidJobError, match="treatment_level must be a finite number"):
        _spec("one")
    # AND a PLR spec with one is refused naming the option and its model
    with pytest.raises(InvalidJobError, match="treatment_level is an option of model 'apo' only"):
        _spec(
            1.0, model="plr", score="partialling out", learners={"ml_l": "Ridge", "ml_m": "Ridge"}
        )


def test_apo_refuses_a_level_with_fewer_than_five_rows() -> None:
    # GIVEN data where level 7 never occurs WHEN the data is validated THEN the error names the level
    df = _frame(n_obs=100)
    spec = _spec(7.0)
    with pytest.raises(InvalidDataError, match="treatment_level=7: 0 row"):
        validate_data(spec, list(df.columns), df.to_numpy())


def test_every_registry_model_names_its_learners_roles_and_scores() -> None:
    # GIVEN every registry entry WHEN its parts are compared THEN every learner a fit uses has a
    # role and a purpose, and every prediction key names its learner as its first four characters
    for name, mdef in REGISTRY.items():
        assert mdef.name == name and mdef.scores
        for score in mdef.scores:
            spec = DMLSpec(name, score, "y", ("d",), ("x",), z_cols=("z",), treatment_level=1.0)
            for fit in mdef.nuisances(spec):
                assert fit.learner in mdef.roles and fit.learner in mdef.purposes
                assert fit.key.startswith(fit.learner)
        assert set(mdef.doubleml_learners) <= set(mdef.roles)
