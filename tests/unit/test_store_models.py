"""``store_models``: fitted learners kept without pickle (:mod:`fanfit.learners.persist`).

GIVEN DoubleML's ``fit(store_models=True)`` and fanfit's class fitted the same way through a
fake stack whose job keeps every unit's estimator as the pipeline's CrossFit does (skops bytes,
loaded with the allow-list trusted), THEN ``models`` has DoubleML's structure and every fold's
model predicts what DoubleML's does at 1e-9; a stored type outside the allow-list is refused, not
built; the steps on moto store the models beside the predictions.
"""

from __future__ import annotations

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_irm_data  # noqa: E402
from doubleml.plm.datasets import make_plr_CCDDHNR2018  # noqa: E402
from lightgbm import LGBMRegressor  # noqa: E402
from sklearn.ensemble import RandomForestRegressor  # noqa: E402
from sklearn.linear_model import Lasso, LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.learners.persist import dumps, loads  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

TOL = 1e-9


class NotAllowed:
    """A class no allow-list names."""

    def __init__(self) -> None:
        self.coef_ = np.ones(3)


def test_allow_listed_estimators_round_trip_and_others_are_refused() -> None:
    x, y = np.random.default_rng(0).normal(size=(60, 3)), np.random.default_rng(1).normal(size=60)
    for est in (Lasso(alpha=0.1), make_pipeline(StandardScaler(), Lasso()),
                RandomForestRegressor(n_estimators=3, random_state=0),
                LGBMRegressor(n_estimators=3, verbose=-1)):  # fmt: skip
        est.fit(x, y)
        back = loads(dumps(est))
        assert type(back) is type(est)
        np.testing.assert_array_equal(back.predict(x), est.predict(x))
    with pytest.raises(errors.InvalidLearnerError, match="NotAllowed.*outside fanfit's allow-list"):
        loads(dumps(NotAllowed()))
    with pytest.raises(errors.InvalidLearnerError, match="not a skops file"):
        loads(b"not a zip")


@pytest.mark.parametrize("model", ["plr", "irm"])
def test_models_are_doublemls(model) -> None:
    # GIVEN fanfit's and DoubleML's class, same data, learners and splitting
    np.random.seed(3)
    if model == "plr":
        data = make_plr_CCDDHNR2018(n_obs=200, dim_x=5, return_type="DoubleMLData")
        learners = (Lasso(alpha=0.05), make_pipeline(StandardScaler(), Lasso(alpha=0.1)))
        cls = "DoubleMLPLR"
    else:
        data = make_irm_data(n_obs=300, dim_x=5, theta=0.5, return_type="DoubleMLData")
        learners = (Lasso(alpha=0.05), LogisticRegression())
        cls = "DoubleMLIRM"
    np.random.seed(4)
    ours = getattr(fanfit, cls)(data, *learners, n_folds=3, n_rep=2)
    np.random.seed(4)
    theirs = getattr(dml, cls)(data, *learners, n_folds=3, n_rep=2)
    # WHEN both fit with store_models=True
    client = FakeClient()
    ours.fit(client=client, store_models=True)
    theirs.fit(store_models=True)
    # THEN the job stored them, and models is DoubleML's structure with DoubleML's fits
    assert client.submitted[0]["store_models"] is True
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL)
    assert set(ours.models) == set(theirs.models)
    x = np.asarray(data.x)
    for key, by_treat in theirs.models.items():
        for d_col, reps in by_treat.items():
            assert len(ours.models[key][d_col]) == len(reps) == 2
            for mine, dmls in zip(ours.models[key][d_col], reps, strict=True):
                assert len(mine) == len(dmls) == 3
                for a, b in zip(mine, dmls, strict=True):
                    assert type(a) is type(b)
                    method = "predict_proba" if hasattr(b, "predict_proba") else "predict"
                    np.testing.assert_allclose(getattr(a, method)(x), getattr(b, method)(x),
                                               rtol=TOL, atol=1e-12)  # fmt: skip


def test_what_cannot_store_models_is_refused_before_upload() -> None:
    np.random.seed(11)
    data = make_irm_data(n_obs=200, dim_x=4, theta=0.5, return_type="DoubleMLData")
    client = FakeClient()
    pq = fanfit.DoubleMLPQ(data, LogisticRegression(), LogisticRegression(), n_folds=2)
    with pytest.raises(errors.InvalidJobError, match="store_models.*inside each outer fold"):
        pq.fit(client=client, store_models=True)
    apos = fanfit.DoubleMLAPOS(
        dml.DoubleMLData(data.data, "y", "d"), Lasso(), LogisticRegression(),
        treatment_levels=[0, 1], n_folds=2,
    )  # fmt: skip
    with pytest.raises(errors.UnsupportedArgumentError, match="store_models"):
        apos.fit(client=client, store_models=True)
    assert client.submitted == []


def test_the_steps_on_moto_store_each_units_model_beside_its_predictions(moto_stack) -> None:
    # GIVEN a PLR job with store_models
    from pipeline_steps import run_estimate

    from fanfit import dml as fdml
    from fanfit.client.estimate import EstimateJob

    np.random.seed(5)
    frame = make_plr_CCDDHNR2018(n_obs=150, dim_x=3, return_type="DataFrame")
    x_cols = tuple(c for c in frame.columns if c.startswith("X"))
    spec = fdml.DMLSpec(model="plr", score="partialling out", y_col="y", d_cols=("d",),
                        x_cols=x_cols, learners={"ml_l": "Lasso", "ml_m": "LinearRegression"},
                        n_folds=3, n_rep=1, store_models=True)  # fmt: skip
    folds = fdml.draw_folds(150, 3, 1, 2)
    with moto_stack():
        # WHEN Prepare, Schedule, CrossFit and Aggregate run it
        store, _, _ = run_estimate(list(frame.columns), frame.to_numpy(), spec, folds, "models")
        client = type("StackStub", (), {"store": store})()
        models = EstimateJob(client, "models", "arn:moto").models()  # type: ignore[arg-type]
    # THEN every unit's model is there, fitted on its training rows as the unit was
    assert sorted(models) == sorted(u.key for u in fdml.fit_units(spec, 0))
    x, y = frame[list(x_cols)].to_numpy(), frame["y"].to_numpy()
    unit = fdml.FitUnit(0, 0, 0, 1, "ml_l")
    train = folds[:, 0] != 1
    expected = Lasso(random_state=fdml.unit_seed(spec.seed, unit)).fit(x[train], y[train])
    np.testing.assert_allclose(models[unit.key].coef_, expected.coef_, rtol=1e-12)
