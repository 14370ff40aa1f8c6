"""``fit(external_predictions=...)`` of fanfit's DoubleML classes (issue 38, item 3).

GIVEN DoubleML's own refit (its test modules' fixtures: a first fit, then a second model with
``DMLDummyRegressor``/``DMLDummyClassifier`` where predictions of the first are given), WHEN
fanfit's class is refitted the same way through a fake stack (the job's in-process estimate on the
options ``fit()`` sends) and DoubleML's in-process, THEN the job fitted only the other nuisances,
and every number (coef, se, predictions, nuisance targets and losses, NaN for the given ones) is
DoubleML's at 1e-9; with every prediction given no job runs; what the stack cannot take is
refused by name before anything is uploaded.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.did.datasets import make_did_SZ2020  # noqa: E402
from doubleml.irm.datasets import make_irm_data, make_ssm_data  # noqa: E402
from doubleml.plm.datasets import make_plr_CCDDHNR2018  # noqa: E402
from doubleml.utils import DMLDummyClassifier, DMLDummyRegressor  # noqa: E402
from doubleml_helpers import assert_fit_is_doublemls  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import errors  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

N_OBS, N_FOLDS, N_REP = 300, 3, 2


def _plr_data():
    np.random.seed(3141)
    return make_plr_CCDDHNR2018(n_obs=N_OBS, dim_x=8, alpha=0.5, return_type="DoubleMLData")


def _refit(module, cls, data, learners, given, first, **kwargs):
    """DoubleML's refit: ``learners`` with a dummy where ``given`` names a key's predictions."""
    np.random.seed(7)
    model = getattr(module, cls)(data, *learners, n_folds=N_FOLDS, n_rep=N_REP, **kwargs)
    model.set_sample_splitting(first.smpls)
    d_col = data.d_cols[0]
    return model, {d_col: {k: first.predictions[k][:, :, 0] for k in given}}


@pytest.mark.parametrize(
    ("score", "given"),
    [("partialling out", ["ml_m"]), ("partialling out", ["ml_l"]), ("IV-type", ["ml_l", "ml_m"]),
     ("IV-type", ["ml_m"])],
)  # fmt: skip
def test_plr_refit_with_some_predictions_given_is_doublemls(score, given) -> None:
    # GIVEN DoubleML's first fit and its predictions of some nuisances
    data = _plr_data()
    extra = {"ml_g": LinearRegression()} if score == "IV-type" else {}
    first = dml.DoubleMLPLR(data, LinearRegression(), LinearRegression(), n_folds=N_FOLDS,
                            n_rep=N_REP, score=score, **extra)  # fmt: skip
    first.fit(store_predictions=True)
    learners = [DMLDummyRegressor() if k in given else LinearRegression() for k in ("ml_l", "ml_m")]
    if score == "IV-type":
        learners.append(LinearRegression())
    ours, ext = _refit(fanfit, "DoubleMLPLR", data, learners, given, first, score=score)
    theirs, _ = _refit(dml, "DoubleMLPLR", data, learners, given, first, score=score)
    # WHEN both refit with them
    client = FakeClient()
    ours.fit(client=client, external_predictions=ext)
    theirs.fit(external_predictions=ext)
    # THEN the job fitted only the others, the given ones travelling as its columns
    (sent,) = client.submitted
    assert set(sent["external_predictions_cols"]) == set(given)
    for key in given:
        assert sent[key].name == "DummyRegressor" or key not in ("ml_l", "ml_m")
    assert_fit_is_doublemls(ours, theirs)
    for key in given:
        assert np.isnan(ours.nuisance_loss[key]).all()


def test_irm_refit_with_one_of_a_learners_nuisances_given_is_doublemls() -> None:
    # GIVEN IRM's ml_g0 predictions only: ml_g still fits ml_g1
    np.random.seed(11)
    data = make_irm_data(n_obs=N_OBS, dim_x=5, theta=0.5, return_type="DoubleMLData")
    first = dml.DoubleMLIRM(data, LinearRegression(), LogisticRegression(), n_folds=N_FOLDS,
                            n_rep=N_REP)  # fmt: skip
    first.fit(store_predictions=True)
    learners = (LinearRegression(), LogisticRegression())
    ours, ext = _refit(fanfit, "DoubleMLIRM", data, learners, ["ml_g0"], first)
    theirs, _ = _refit(dml, "DoubleMLIRM", data, learners, ["ml_g0"], first)
    client = FakeClient()
    ours.fit(client=client, external_predictions=ext)
    theirs.fit(external_predictions=ext)
    assert client.submitted[0]["ml_g"].name == "LinearRegression"
    assert_fit_is_doublemls(ours, theirs)


def test_with_every_prediction_given_no_job_runs() -> None:
    np.random.seed(11)
    data = make_irm_data(n_obs=N_OBS, dim_x=5, theta=0.5, return_type="DoubleMLData")
    first = dml.DoubleMLIRM(data, LinearRegression(), LogisticRegression(), n_folds=N_FOLDS,
                            n_rep=N_REP)  # fmt: skip
    first.fit(store_predictions=True)
    learners = (DMLDummyRegressor(), DMLDummyClassifier())
    keys = ["ml_g0", "ml_g1", "ml_m"]
    ours, ext = _refit(fanfit, "DoubleMLIRM", data, learners, keys, first)
    theirs, _ = _refit(dml, "DoubleMLIRM", data, learners, keys, first)
    client = FakeClient()
    ours.fit(client=client, external_predictions=ext)
    theirs.fit(external_predictions=ext)
    assert client.submitted == [] and ours.fanfit_job is None
    np.testing.assert_allclose(ours.coef, first.coef, rtol=1e-9)
    assert_fit_is_doublemls(ours, theirs)


def test_what_cannot_take_external_predictions_is_refused_before_upload() -> None:
    data = _plr_data()
    first = dml.DoubleMLPLR(data, LinearRegression(), LinearRegression(), n_folds=N_FOLDS)
    first.fit(store_predictions=True)
    ext = {"d": {"ml_m": first.predictions["ml_m"][:, :, 0]}}
    client = FakeClient()
    # a placeholder whose predictions are not given
    model = fanfit.DoubleMLPLR(data, DMLDummyRegressor(), LinearRegression(), n_folds=N_FOLDS)
    model.set_sample_splitting(first.smpls)
    with pytest.raises(errors.InvalidLearnerError, match=r"ml_l.*placeholder.*ml_l \(d\)"):
        model.fit(client=client, external_predictions=ext)
    # DoubleML's own check of their form
    model = fanfit.DoubleMLPLR(data, LinearRegression(), LinearRegression(), n_folds=N_FOLDS)
    with pytest.raises(ValueError, match="Invalid nuisance learner"):
        model.fit(client=client, external_predictions={"d": {"ml_x": ext["d"]["ml_m"]}})
    # a model whose fits nest inside the folds and whose DoubleML class takes none (DoubleMLCVAR;
    # PQ and LPQ take them: test_quantile_external_predictions.py)
    np.random.seed(11)
    irm_data = make_irm_data(n_obs=N_OBS, dim_x=5, theta=0.5, return_type="DoubleMLData")
    cvar = fanfit.DoubleMLCVAR(irm_data, LinearRegression(), LogisticRegression(), n_folds=2)
    with pytest.raises(NotImplementedError, match="External predictions not implemented"):
        cvar.fit(client=client, external_predictions={"d": {"ml_m": np.zeros((N_OBS, 1))}})
    # a model of several parts
    apos = fanfit.DoubleMLAPOS(
        dml.DoubleMLData(irm_data.data, "y", "d"), LinearRegression(), LogisticRegression(),
        treatment_levels=[0, 1], n_folds=2,
    )  # fmt: skip
    with pytest.raises(errors.UnsupportedArgumentError, match="external_predictions"):
        apos.fit(client=client, external_predictions={})
    # DoubleMLSSM takes none in DoubleML either
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = make_ssm_data(n_obs=N_OBS, dim_x=4, return_type="DataFrame")
    ssm = fanfit.DoubleMLSSM(dml.DoubleMLSSMData(frame, "y", "d", s_col="s"), LinearRegression(),
                             LogisticRegression(), LogisticRegression(), n_folds=2)  # fmt: skip
    with pytest.raises(NotImplementedError, match="External predictions not implemented"):
        ssm.fit(client=client, external_predictions={"d": {"ml_m": np.zeros((N_OBS, 1))}})
    assert client.submitted == []


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
def test_did_refit_with_the_propensity_given_is_doublemls() -> None:
    np.random.seed(21)
    data = make_did_SZ2020(n_obs=N_OBS, dgp_type=4)
    first = dml.DoubleMLDID(data, LinearRegression(), LogisticRegression(), n_folds=N_FOLDS,
                            n_rep=N_REP)  # fmt: skip
    first.fit(store_predictions=True)
    learners = (LinearRegression(), DMLDummyClassifier())
    ours, ext = _refit(fanfit, "DoubleMLDID", data, learners, ["ml_m"], first)
    theirs, _ = _refit(dml, "DoubleMLDID", data, learners, ["ml_m"], first)
    client = FakeClient()
    ours.fit(client=client, external_predictions=ext)
    theirs.fit(external_predictions=ext)
    assert client.submitted[0]["ml_m"].name == "DummyClassifier"
    assert_fit_is_doublemls(ours, theirs)
