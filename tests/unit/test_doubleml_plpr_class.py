"""fanfit.DoubleMLPLPR without a stack: the fake client of test_doubleml_classes.py runs the
``plr`` job in-process (what the pipeline computes) on the data and options ``fit()`` sends.

GIVEN DoubleML's static panel (make_plpr_CP2025, 60 units x 4 periods) and the same global seed,
WHEN fanfit's DoubleMLPLPR is fitted on the fake stack and DoubleML's in-process, THEN one ``plr``
job ran on DoubleML's transformed data, clustered by unit, with DoubleML's folds, and coef, se,
predictions, nuisance losses, confint and the bootstrap are DoubleML's, for every approach and
score (``'cre_general'`` with ``'IV-type'`` too: the job adjusts ``ml_m`` by unit before its
second stage); the ``'cre_general'`` adjustment equals DoubleML's at 1e-12; what a ``plr`` job
cannot carry is refused by name.
"""

from __future__ import annotations

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.plm.datasets import make_plpr_CP2025  # noqa: E402
from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression  # noqa: E402
from test_doubleml_classes import FakeClient  # noqa: E402

import fanfit  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.dml.folds import smpls_to_folds  # noqa: E402
from fanfit.dml.scores.plm_irm import cre_general_adjustment  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:For score = 'IV-type'")

RTOL = 1e-9
CASES = [
    ("cre_general", "partialling out"),
    ("cre_general", "IV-type"),
    ("cre_normal", "partialling out"),
    ("cre_normal", "IV-type"),
    ("fd_exact", "partialling out"),
    ("fd_exact", "IV-type"),
    ("wg_approx", "partialling out"),
    ("wg_approx", "IV-type"),
]


def _panel(num_id: int = 60, num_t: int = 4, seed: int = 3):
    np.random.seed(seed)  # make_plpr_CP2025 draws from the global state
    frame = make_plpr_CP2025(num_id=num_id, num_t=num_t, dim_x=4, theta=0.5, dgp_type="dgp1")
    return dml.data.DoubleMLPanelData(frame, "y", "d", "time", "id", static_panel=True)


def _both(approach: str, score: str, n_rep: int = 2):
    data = _panel()
    learners = (LinearRegression(), Lasso(alpha=0.05))
    options = {"n_folds": 3, "n_rep": n_rep, "score": score, "approach": approach}
    np.random.seed(5)  # the sample splitting each class draws at construction
    ours = fanfit.DoubleMLPLPR(data, *learners, **options)
    np.random.seed(5)
    theirs = dml.DoubleMLPLPR(data, *learners, **options)
    return ours, theirs


@pytest.mark.parametrize(("approach", "score"), CASES, ids=[f"{a}-{s}" for a, s in CASES])
def test_plpr_on_the_fake_stack_is_doublemls(approach, score) -> None:
    # GIVEN fanfit's and DoubleML's DoubleMLPLPR, same panel, learners, approach, score and seed
    ours, theirs = _both(approach, score)
    client = FakeClient()
    # WHEN fanfit's is fitted on the fake stack and DoubleML's in-process
    ours.fit(client=client)
    theirs.fit()
    # THEN one plr job ran on DoubleML's transformed data, clustered by unit, with its folds
    (sent,) = client.submitted
    transformed = theirs.data_transform
    assert (sent["model"], sent["score"]) == ("plr", score)
    assert (sent["y"], sent["d"]) == (transformed.y_col, list(transformed.d_cols))
    assert sent["x"] == list(transformed.x_cols) == theirs.transform_cols["x_cols"]
    assert sent["cluster_cols"] == ["id"] and sent["n_folds"] == 3
    # (cre_normal: ml_m also sees each treatment's unit mean, DoubleML's d_mean, as columns;
    # cre_general: the job adjusts ml_m's predictions by unit with them)
    assert (sent.get("d_mean_cols") is not None) == approach.startswith("cre_")
    assert sent.get("approach") == (approach if approach.startswith("cre_") else None)
    # AND the job's own coef, se and nuisance losses are DoubleML's (cre_general's ml_m loss
    # is that of the adjusted predictions)
    job = ours.fanfit_job.res  # the in-process estimate the fake stack ran
    np.testing.assert_allclose(job.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(job.se, theirs.se, rtol=RTOL, atol=0)
    for key, loss in job.nuisance_loss.items():
        np.testing.assert_allclose(loss, theirs.nuisance_loss[key], rtol=RTOL)
    np.testing.assert_array_equal(
        sent["folds"], smpls_to_folds(theirs.smpls, transformed.n_obs, check_train=False)
    )
    # AND coef, se, confint, predictions, targets and nuisance losses are DoubleML's
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    for key, value in theirs.predictions.items():
        if value is None:  # ml_g without the IV-type score
            continue
        np.testing.assert_allclose(ours.predictions[key], value, rtol=RTOL, atol=1e-12)
        np.testing.assert_allclose(ours.nuisance_targets[key], theirs.nuisance_targets[key])
        np.testing.assert_allclose(ours.nuisance_loss[key], theirs.nuisance_loss[key], rtol=RTOL)
    assert ours.summary.index.tolist() == theirs.summary.index.tolist()


def test_plpr_confint_and_bootstrap_are_doublemls() -> None:
    # GIVEN both classes fitted on the same panel (first differences)
    ours, theirs = _both("fd_exact", "partialling out")
    ours.fit(client=FakeClient())
    theirs.fit()
    # THEN the pointwise intervals and the summary are DoubleML's
    np.testing.assert_allclose(ours.confint(level=0.9), theirs.confint(level=0.9), rtol=RTOL)
    np.testing.assert_allclose(ours.summary.to_numpy(), theirs.summary.to_numpy(), rtol=RTOL)
    # AND the bootstrap is DoubleML's too: 0.11.4 has none for clustered data, and says so
    for model in (ours, theirs):
        with pytest.raises(NotImplementedError, match="clustering"):
            model.bootstrap(n_rep_boot=200)


def test_cre_general_adjustment_is_doublemls_at_1e_12() -> None:
    # GIVEN the job's unadjusted ml_m predictions (cre_general: covariates and their unit means)
    ours, theirs = _both("cre_general", "partialling out")
    client = FakeClient()
    ours.fit(client=client)
    theirs.fit()
    job = ours.fanfit_job
    raw = np.asarray(job.predictions()["d"]["ml_m"])
    # WHEN each repetition is adjusted with the unit means of d and of the predictions
    ids = np.asarray(theirs.data_transform.id_var)
    for i_rep in range(theirs.n_rep):
        adjusted = cre_general_adjustment(raw[:, i_rep], theirs.d_mean[:, 0], ids)
        # THEN it is DoubleML's m_hat* at 1e-12, and differs from the raw predictions
        np.testing.assert_allclose(adjusted, theirs.predictions["ml_m"][:, i_rep, 0], rtol=1e-12)
        assert not np.allclose(adjusted, raw[:, i_rep])


def test_plpr_parity_check_fires() -> None:
    # GIVEN a stack whose job reports a coef 0.1 off DoubleML's on the same predictions
    ours, _ = _both("wg_approx", "partialling out")
    # WHEN fanfit's class is fitted THEN the parity check fires
    with pytest.raises(errors.ParityError, match="coef"):
        ours.fit(client=FakeClient(coef_shift=0.1))


def test_plpr_refuses_what_a_plr_job_cannot_carry() -> None:
    data = _panel()
    lin = LinearRegression()
    # GIVEN a callable score or a learner outside the allow-list THEN each is refused by name
    with pytest.raises(errors.UnsupportedArgumentError, match="callable score"):
        fanfit.DoubleMLPLPR(data, lin, lin, score=lambda *a: None)
    with pytest.raises(errors.InvalidLearnerError, match="ml_l"):
        fanfit.DoubleMLPLPR(data, object(), lin)
    # AND DoubleML's own checks still run (an unknown approach)
    with pytest.raises(ValueError, match="Invalid approach"):
        fanfit.DoubleMLPLPR(data, lin, lin, approach="between")


def test_plpr_refuses_other_data_and_fit_options_by_name() -> None:
    data = _panel()
    lin = LinearRegression()
    # GIVEN data that is not a static DoubleMLPanelData THEN the error names what is needed
    with pytest.raises(errors.InvalidDataError, match="DoubleMLPanelData"):
        fanfit.DoubleMLPLPR(data.data, lin, lin)
    dynamic = dml.data.DoubleMLPanelData(data.data, "y", "d", "time", "id")
    with pytest.raises(errors.InvalidDataError, match="static_panel=True"):
        fanfit.DoubleMLPLPR(dynamic, lin, lin)
    # AND fit() refuses external predictions with cre_general and unknown options by name
    model = fanfit.DoubleMLPLPR(data, lin, lin, n_folds=2, approach="cre_general")
    given = {model._dml_data.d_cols[0]: {"ml_m": np.zeros((model.n_obs, 1))}}
    with pytest.raises(errors.UnsupportedArgumentError, match="external_predictions"):
        model.fit(client=FakeClient(), external_predictions=given)
    with pytest.raises(errors.InvalidJobError, match="bogus"):
        model.fit(client=FakeClient(), bogus=1)


def test_plpr_with_a_classifier_ml_m_on_a_binary_treatment() -> None:
    # GIVEN a binary treatment and a logistic ml_m (the CRE approaches keep d binary)
    data = _panel()
    frame = data.data.assign(d=(data.data["d"] > 0).astype(float))
    binary = dml.data.DoubleMLPanelData(frame, "y", "d", "time", "id", static_panel=True)
    np.random.seed(7)
    ours = fanfit.DoubleMLPLPR(binary, LinearRegression(), LogisticRegression(), n_folds=2,
                               approach="cre_general")  # fmt: skip
    np.random.seed(7)
    theirs = dml.DoubleMLPLPR(binary, LinearRegression(), LogisticRegression(), n_folds=2,
                              approach="cre_general")  # fmt: skip
    # WHEN both are fitted THEN coef and se are DoubleML's
    ours.fit(client=FakeClient())
    theirs.fit()
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)


@pytest.mark.parametrize("approach", ["cre_general", "cre_normal"])
def test_a_cre_job_hands_over_to_doubleml_with_its_numbers(approach) -> None:
    # GIVEN the plr job a CRE fit ran (its spec carries d_mean_cols and the approach)
    from fanfit.dml.interop import to_doubleml

    ours, theirs = _both(approach, "IV-type")
    ours.fit(client=FakeClient())
    theirs.fit()
    job = ours.fanfit_job
    spec, data, folds = job.checked.spec, job.checked.data, job.checked.folds
    assert spec.approach == approach
    # WHEN it is handed to DoubleML's PLR (the options DoubleMLPLR does not take stay behind;
    # cre_general's ml_m goes over adjusted) THEN coef and se are DoubleMLPLPR's
    obj = to_doubleml(spec, data, folds, job.res.predictions)
    np.testing.assert_allclose(obj.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(obj.se, theirs.se, rtol=RTOL, atol=0)
