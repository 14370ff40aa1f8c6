"""fanfit's DoubleML classes through the local pipeline equal DoubleML 0.11 run in-process.

GIVEN DoubleML's getting-started data (PLR on make_plr_CCDDHNR2018, IRM on make_irm_data), the
learners as scikit-learn objects (IRM's ``ml_m`` a ``Pipeline``: StandardScaler then
LogisticRegression) and the folds given with ``set_sample_splitting``, WHEN
``fanfit.DoubleMLPLR`` / ``fanfit.DoubleMLIRM`` are fitted on the local stack (Prepare ->
CrossFit Lambdas -> Aggregate) and DoubleML's classes of the same names in-process, THEN coef, se,
confint, the bootstrap from the same global seed, the sensitivity analysis and nuisance_loss agree
to a relative 1e-9. Likewise ``fanfit.DoubleMLLPLR`` on DoubleML's LPLR generator
(make_lplr_LZZ2020) for given outer and inner folds (one fit unit per outer fold runs the nested
fits, ``n_folds_inner`` other than ``n_folds``), and ``fanfit.RDFlex`` as one job whose stages
wait for the client's rdrobust. And DoubleML's ``tune()`` then ``fit()`` of an
IRM, each search one job on the stack: the scores, the chosen parameters and the estimate are
DoubleML's.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.integration

RTOL = 1e-9
N_OBS = 500


def _check_equal(ours, theirs) -> None:
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.all_coef, theirs.all_coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    np.random.seed(31)
    ours.bootstrap(method="normal", n_rep_boot=300)
    np.random.seed(31)
    theirs.bootstrap(method="normal", n_rep_boot=300)
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=RTOL)
    ours.sensitivity_analysis(cf_y=0.03, cf_d=0.03)
    theirs.sensitivity_analysis(cf_y=0.03, cf_d=0.03)
    for key in ("theta", "se", "ci"):
        for side in ("lower", "upper"):
            np.testing.assert_allclose(
                ours.sensitivity_params[key][side], theirs.sensitivity_params[key][side], rtol=RTOL
            )
    np.testing.assert_allclose(
        ours.sensitivity_params["rv"], theirs.sensitivity_params["rv"], rtol=RTOL
    )
    for key, loss in theirs.nuisance_loss.items():
        assert np.all(np.isfinite(loss))
        np.testing.assert_allclose(ours.nuisance_loss[key], loss, rtol=RTOL)


def test_plr_and_irm_on_the_stack_equal_doubleml(local_client) -> None:
    import doubleml as dml
    from doubleml.irm.datasets import make_irm_data
    from doubleml.plm.datasets import make_plr_CCDDHNR2018
    from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    import fanfit

    # GIVEN DoubleML's simulated data, fast deterministic learners (one a Pipeline), given
    # folds (3 x 2) and per-fold nuisance parameters
    np.random.seed(3141)
    plr_data = dml.DoubleMLData(
        make_plr_CCDDHNR2018(n_obs=N_OBS, dim_x=10, return_type="DataFrame"), "y", "d"
    )
    irm_data = dml.DoubleMLData(
        make_irm_data(n_obs=N_OBS, dim_x=10, return_type="DataFrame"), "y", "d"
    )
    smpls = fanfit.dml.folds_to_smpls(fanfit.dml.draw_folds(N_OBS, 3, 2, seed=11))
    runs = []
    for cls, data, learners in (
        ("DoubleMLPLR", plr_data, (Lasso(alpha=0.05), LinearRegression())),
        (
            "DoubleMLIRM",
            irm_data,
            (LinearRegression(), make_pipeline(StandardScaler(), LogisticRegression())),
        ),
    ):
        ours = getattr(fanfit, cls)(
            data, *learners, n_folds=3, n_rep=2, draw_sample_splitting=False
        )
        theirs = getattr(dml, cls)(data, *learners, n_folds=3, n_rep=2, draw_sample_splitting=False)
        ours.set_sample_splitting(smpls)
        theirs.set_sample_splitting(smpls)
        for model in (ours, theirs):  # nuisance parameters, per fold (a Pipeline's step's too)
            if cls == "DoubleMLPLR":
                model.set_ml_nuisance_params(
                    "ml_l", "d", [[{"alpha": a} for a in (0.01, 0.1, 0.3)]] * 2
                )
            else:
                model.set_ml_nuisance_params(
                    "ml_m",
                    "d",
                    [[{"logisticregression__C": 0.1}] * 3, [{"logisticregression__C": 2.0}] * 3],
                )
        runs.append((ours, theirs))
    # WHEN fanfit's run on the local stack and DoubleML's in-process
    for ours, theirs in runs:
        ours.fit(client=local_client, max_concurrency=2, timeout=300)
        theirs.fit()
    # THEN the Pipeline travelled as an allow-listed spec, the parameters as the job's
    assert runs[1][0].fanfit_options()["ml_m"].name == "Pipeline"
    for ours, _ in runs:
        assert ours.fanfit_job.spec().learner_params == ours.fanfit_options()["learner_params"]
    # AND every number is DoubleML's, and the job's own result is the one checked in fit()
    for ours, theirs in runs:
        _check_equal(ours, theirs)
        assert ours.fanfit_result.execution_arn.endswith(ours.fanfit_job.job_id)
        np.testing.assert_allclose(ours.fanfit_result.coef, theirs.coef, rtol=RTOL, atol=0)
        assert "------------------ fanfit" in str(ours)


def test_from_doubleml_runs_an_unfitted_model_on_the_stack(local_client) -> None:
    import doubleml as dml
    from doubleml.plm.datasets import make_plr_CCDDHNR2018
    from sklearn.ensemble import RandomForestRegressor

    import fanfit

    # GIVEN an unfitted DoubleML PLR with seeded forests and its own (global-seed) splitting
    np.random.seed(5)
    data = dml.DoubleMLData(
        make_plr_CCDDHNR2018(n_obs=N_OBS, dim_x=5, return_type="DataFrame"), "y", "d"
    )
    forest = RandomForestRegressor(n_estimators=20, max_depth=4, random_state=1)
    model = dml.DoubleMLPLR(data, forest, forest, n_folds=3)
    # WHEN it runs through fanfit, and the same model in-process
    ours = fanfit.from_doubleml(model, client=local_client, max_concurrency=2, timeout=300)
    model.fit()
    # THEN the estimates agree
    np.testing.assert_allclose(ours.coef, model.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, model.se, rtol=RTOL, atol=0)


def test_lplr_on_the_stack_equals_doubleml_for_given_outer_and_inner_folds(local_client) -> None:
    import doubleml as dml
    from doubleml.plm.datasets import make_lplr_LZZ2020
    from sklearn.linear_model import LinearRegression, LogisticRegression

    import fanfit

    # GIVEN DoubleML's LPLR generator, deterministic learners and the outer (3 x 2) and inner
    # (4 per outer fold: n_folds_inner != n_folds) folds of one global seed, in both classes
    np.random.seed(2718)
    data = make_lplr_LZZ2020(n_obs=N_OBS, dim_x=14, alpha=0.5)
    learners = (LogisticRegression(), LinearRegression(), LinearRegression())
    kwargs = {"n_folds": 3, "n_folds_inner": 4, "n_rep": 2}
    np.random.seed(29)
    ours = fanfit.DoubleMLLPLR(data, *learners, **kwargs)
    np.random.seed(29)
    theirs = dml.DoubleMLLPLR(data, *learners, **kwargs)
    # WHEN fanfit's runs on the local stack (one unit per outer fold) and DoubleML's in-process
    ours.fit(client=local_client, max_concurrency=2, timeout=300)
    theirs.fit()
    # THEN the job ran DoubleML's inner folds, and coef, se, the predictions, the losses and the
    # bootstrap's joint intervals are DoubleML's
    assert ours.fanfit_options()["n_folds_inner"] == 4
    np.testing.assert_allclose(ours.fanfit_result.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.all_coef, theirs.all_coef, rtol=RTOL, atol=0)
    for key in ("ml_m", "ml_a", "ml_t", "ml_M"):
        np.testing.assert_allclose(ours.predictions[key], theirs.predictions[key], rtol=RTOL)
        np.testing.assert_allclose(ours.nuisance_loss[key], theirs.nuisance_loss[key], rtol=RTOL)
    np.random.seed(31)
    ours.bootstrap(method="normal", n_rep_boot=300)
    np.random.seed(31)
    theirs.bootstrap(method="normal", n_rep_boot=300)
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=RTOL)


def test_rdflex_on_the_stack_waits_for_rdrobust_and_equals_doubleml(local_client) -> None:
    import doubleml as dml
    from doubleml.rdd.datasets import make_simple_rdd_data
    from sklearn.linear_model import LinearRegression, LogisticRegression

    import fanfit
    from fanfit.jobs.states import EstimateState

    # GIVEN DoubleML's fuzzy RDD generator, deterministic learners and one global seed
    np.random.seed(3)
    d = make_simple_rdd_data(n_obs=N_OBS, fuzzy=True)
    data = dml.DoubleMLRDDData.from_arrays(x=d["X"], y=d["Y"], d=d["D"], score=d["score"])
    learners = (LinearRegression(), LogisticRegression())
    kwargs = {"fuzzy": True, "n_folds": 3, "n_rep": 2, "fs_specification": "cutoff and score"}
    np.random.seed(8)
    ours = fanfit.RDFlex(data, *learners, **kwargs)
    np.random.seed(8)
    theirs = dml.rdd.RDFlex(data, *learners, **kwargs)
    # WHEN fanfit's runs as one job on the local stack (its stages waiting for this client's
    # rdrobust) and DoubleML's in-process
    ours.fit(client=local_client, max_concurrency=2, timeout=300)
    theirs.fit()
    # THEN every number is DoubleML's, result.json holds the client's estimate, and the one
    # execution waited for the client twice before the stages and once before Aggregate
    for name in ("coef", "se", "ci", "all_coef", "all_se", "h"):
        np.testing.assert_allclose(getattr(ours, name), getattr(theirs, name), rtol=RTOL, atol=0)
    assert str(ours) == str(theirs)
    result = ours.fanfit_result
    assert result.d_cols == ["Conventional", "Bias-Corrected", "Robust"]
    np.testing.assert_allclose(result.coef, theirs.coef, rtol=RTOL, atol=0)
    history = local_client.sfn.get_execution_history(
        executionArn=ours.fanfit_job.execution_arn, maxResults=1000
    )["events"]
    entered = [e["stateEnteredEventDetails"]["name"] for e in history
               if e["type"] == "TaskStateEntered"]  # fmt: skip
    assert entered.count(EstimateState.WAIT_CLIENT_INPUTS) == 2
    assert entered.count(EstimateState.WAIT_CLIENT_ESTIMATE) == 1


def test_tune_then_fit_on_the_stack_equals_doubleml(local_client) -> None:
    import warnings

    import doubleml as dml
    from doubleml.irm.datasets import make_irm_data
    from sklearn.linear_model import Lasso, LogisticRegression

    import fanfit

    # GIVEN an IRM (ml_g tuned on each treatment arm's rows, ml_m a classifier) and grids
    np.random.seed(4)
    data = make_irm_data(n_obs=N_OBS, dim_x=5, return_type="DoubleMLData")
    grids = {"ml_g": {"alpha": [0.01, 0.1, 0.5]}, "ml_m": {"C": [0.05, 1.0]}}
    models = []
    for module in (fanfit, dml):
        np.random.seed(8)
        models.append(module.DoubleMLIRM(data, Lasso(random_state=0), LogisticRegression(),
                                         n_folds=3))  # fmt: skip
    ours, theirs = models
    # WHEN both tune after the same seed, then fit
    np.random.seed(15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        got = ours.tune(grids, return_tune_res=True, client=local_client, timeout=300)
    np.random.seed(15)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        want = theirs.tune(grids, return_tune_res=True)
    # THEN each search's scores and choice are DoubleML's, and so are the parameters
    for key in ("g0_tune", "g1_tune", "m_tune"):
        a, b = got[0]["tune_res"][key][0], want[0]["tune_res"][key][0]
        np.testing.assert_allclose(
            a.cv_results_["mean_test_score"], b.cv_results_["mean_test_score"], rtol=RTOL
        )
        assert a.best_params_ == b.best_params_
    assert ours.params == theirs.params
    # AND the fit with them is DoubleML's
    ours.fit(client=local_client, max_concurrency=2, timeout=300)
    theirs.fit()
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL, atol=0)
