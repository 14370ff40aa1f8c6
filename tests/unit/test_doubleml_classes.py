"""fanfit's DoubleML classes (:mod:`fanfit.client.doubleml`) without a stack.

GIVEN DoubleML 0.11's own data generators and a fake client whose "job" runs fanfit's in-process
estimator (:func:`fanfit.dml.estimate_in_process`, what the pipeline computes) on the options that
``fit()`` sends, WHEN a fanfit class and DoubleML's class of the same name are built from the same
global NumPy seed and fitted, THEN every post-estimation number (coef, se, predictions, nuisance
targets and loss, evaluate_learners, bootstrap intervals, sensitivity analysis) is DoubleML's;
what a stack cannot honour is refused with a named error. The same run through the local
pipeline is tests/integration/test_doubleml_classes_on_stack.py.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_iivm_data, make_irm_data  # noqa: E402
from doubleml.plm.datasets import (  # noqa: E402
    make_pliv_CHS2015,
    make_pliv_multiway_cluster_CKMS2021,
    make_plr_CCDDHNR2018,
)
from doubleml_helpers import PartsOnFake, assert_fit_is_doublemls, assert_same_bootstrap, submitted  # noqa: E402
from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression  # noqa: E402
from sklearn.svm import SVR  # noqa: E402

import fanfit  # noqa: E402
from fanfit import dml as fdml  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.client import doubleml as fdoubleml  # noqa: E402
from fanfit.dml.interop import MissingDependencyError, external_predictions  # noqa: E402

RTOL = 1e-9
N_OBS = 200


class FakeJob:
    """An estimate job run here: fanfit's in-process estimate of the checked options."""

    job_id = "est-20260101-000000-00000000"

    def __init__(self, checked, coef_shift: float = 0.0) -> None:
        self.checked = checked
        self.res = fdml.estimate_in_process(checked.spec, checked.data, checked.folds)
        self.coef_shift = coef_shift

    def result(self, timeout=None, progress=False):
        r = self.res
        return SimpleNamespace(coef=r.coef + self.coef_shift, se=r.se, d_cols=list(r.d_cols),
                               execution_arn="arn:fake", timings={"crossfit_s": 1.5})  # fmt: skip

    def predictions(self):
        return external_predictions(self.checked.spec, self.res.predictions)

    def models(self):
        """With ``store_models``: every unit's fitted estimator, as the stack's CrossFit keeps
        them (:func:`fanfit.dml.fit_predict_units`, stored and read through skops)."""
        from fanfit.learners.persist import loads

        spec, data, folds = self.checked.spec, self.checked.data, self.checked.folds
        out = {}
        for stage in range(fdml.n_stages(spec)):
            inputs = fdml.stage_inputs(spec, stage, data, folds, self.res.predictions)
            units = fdml.fit_units(spec, stage)
            for unit, result in zip(
                units, fdml.fit_predict_units(spec, units, data, folds, inputs)
            ):
                out[unit.key] = loads(result.model)
        return out


class FakeClient(PartsOnFake):
    """Records what ``fit()`` submits and runs it as :class:`FakeJob`."""

    def __init__(self, coef_shift: float = 0.0) -> None:
        self.submitted: list[dict] = []
        self.coef_shift = coef_shift

    def submit_estimate(self, data, options=None, **keywords):
        checked, sent = submitted(data, options, **keywords)
        self.submitted.append(sent)
        return FakeJob(checked, self.coef_shift)


def _data(model: str, n_treat: int = 1, n_instr: int = 1):
    np.random.seed(1234)
    if model == "plr":
        df = make_plr_CCDDHNR2018(n_obs=N_OBS, dim_x=4, return_type="DataFrame")
        if n_treat == 2:
            df["d2"] = 0.5 * df["X1"] + 0.3 * df["d"] + np.random.normal(size=N_OBS)
        return dml.DoubleMLData(df, "y", ["d", "d2"][:n_treat])
    if model == "irm":
        return dml.DoubleMLData(
            make_irm_data(n_obs=N_OBS, dim_x=4, return_type="DataFrame"), "y", "d"
        )
    if model == "pliv":
        df = make_pliv_CHS2015(n_obs=N_OBS, dim_x=5, dim_z=n_instr, return_type="DataFrame")
        z_cols = [c for c in df.columns if c.startswith("Z")]
        return dml.DoubleMLData(df, "y", "d", z_cols=z_cols)
    return dml.DoubleMLData(
        make_iivm_data(n_obs=N_OBS, dim_x=4, return_type="DataFrame"), "y", "d", z_cols="z"
    )


LIN, LOGIT = LinearRegression(), LogisticRegression()
# (class name, data, learners, keywords)
CASES = {
    "plr": ("DoubleMLPLR", ("plr",), (Lasso(alpha=0.05), LIN), {}),
    "plr-2-treatments": ("DoubleMLPLR", ("plr", 2), (LIN, LIN), {}),
    "plr-IV-type": ("DoubleMLPLR", ("plr",), (LIN, LIN, LIN), {"score": "IV-type"}),
    "irm-ATE": ("DoubleMLIRM", ("irm",), (LIN, LOGIT), {}),
    "irm-ATTE": (
        "DoubleMLIRM",
        ("irm",),
        (LIN, LOGIT),
        {"score": "ATTE", "trimming_threshold": 0.05},
    ),
    "pliv": ("DoubleMLPLIV", ("pliv",), (LIN, LIN, LIN), {}),
    "pliv-2-instruments": ("DoubleMLPLIV", ("pliv", 1, 2), (LIN, LIN, LIN), {}),
    "iivm": ("DoubleMLIIVM", ("iivm",), (LIN, LOGIT, LOGIT), {}),
}


def _both(case: str):
    name, data_args, learners, kwargs = CASES[case]
    data = _data(*data_args)
    np.random.seed(42)  # the sample splitting each class draws at construction, as DoubleML does
    ours = getattr(fanfit, name)(data, *learners, n_folds=3, n_rep=2, **kwargs)
    np.random.seed(42)
    theirs = getattr(dml, name)(data, *learners, n_folds=3, n_rep=2, **kwargs)
    return ours, theirs


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("case", list(CASES))
def test_every_number_after_the_fit_is_doublemls(case) -> None:
    # GIVEN a fanfit class and DoubleML's, same data, learners and seed
    ours, theirs = _both(case)
    # WHEN fanfit's is fitted "on the stack" (the fake one) and DoubleML's in-process
    client = FakeClient()
    ours.fit(client=client)
    theirs.fit()
    # THEN the job got DoubleML's sample splitting as folds
    folds = client.submitted[0]["folds"]
    np.testing.assert_array_equal(fdml.folds_to_smpls(folds)[1][2][1], theirs.smpls[1][2][1])
    # AND coef, se, the predictions and the nuisance targets and losses are DoubleML's
    assert_fit_is_doublemls(ours, theirs)
    for key in theirs.predictions:
        assert np.all(np.isfinite(ours.nuisance_loss[key]))
    for key, value in theirs.evaluate_learners().items():
        np.testing.assert_allclose(ours.evaluate_learners()[key], value, rtol=RTOL)
    # AND the bootstrap from the same global seed gives the same joint intervals
    assert_same_bootstrap(ours, theirs, "wild", 200, seed=7)
    np.testing.assert_allclose(ours.confint(level=0.9), theirs.confint(level=0.9), rtol=RTOL)
    # AND the sensitivity analysis (PLR, IRM) is DoubleML's
    if case.startswith(("plr", "irm")):
        ours.sensitivity_analysis(cf_y=0.04, cf_d=0.03)
        theirs.sensitivity_analysis(cf_y=0.04, cf_d=0.03)
        for key in ("theta", "se", "ci", "rv", "rva"):
            a, b = ours.sensitivity_params[key], theirs.sensitivity_params[key]
            for sub in a if isinstance(a, dict) else [None]:
                np.testing.assert_allclose(a[sub] if sub else a, b[sub] if sub else b, rtol=RTOL)
        assert ours.sensitivity_summary == theirs.sensitivity_summary


def test_the_job_gets_learners_as_specs_and_the_model_options() -> None:
    # GIVEN an IRM with a clipping threshold and an estimator with its own random_state
    from sklearn.ensemble import RandomForestClassifier

    data = _data("irm")
    rf = RandomForestClassifier(n_estimators=5, max_depth=3, random_state=11)
    obj = fanfit.DoubleMLIRM(data, "LinearRegression", rf, n_folds=2, trimming_threshold=0.05)
    # WHEN its job options are built
    options = obj.fanfit_options(seed=9)
    # THEN the learners travel as allow-listed specs (the random_state kept), the string one parsed
    assert options["ml_g"].name == "LinearRegression"
    assert options["ml_m"].name == "RandomForestClassifier"
    assert options["ml_m"].params["random_state"] == 11 and options["ml_m"].params["max_depth"] == 3
    assert (options["model"], options["score"], options["seed"]) == ("irm", "ATE", 9)
    assert options["trimming_threshold"] == 0.05
    assert options["x"] == list(data.x_cols) and options["z"] is None
    assert options["folds"].shape == (N_OBS, 1)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_pipelines_and_searches_travel_as_specs_and_give_doublemls_numbers() -> None:
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    # GIVEN a grid search as ml_l and a Pipeline as ml_m (scikit-learn objects, as DoubleML takes)
    data = _data("plr")
    ml_l = GridSearchCV(Lasso(), {"alpha": [0.01, 0.1]}, cv=3)
    ml_m = make_pipeline(StandardScaler(), Lasso(alpha=0.02))
    np.random.seed(42)
    ours = fanfit.DoubleMLPLR(data, ml_l, ml_m, n_folds=3)
    np.random.seed(42)
    theirs = dml.DoubleMLPLR(data, ml_l, ml_m, n_folds=3)
    # WHEN fanfit's is fitted on the fake stack and DoubleML's in-process
    client = FakeClient()
    ours.fit(client=client)
    theirs.fit()
    # THEN they reached the job as allow-listed specs of the composite classes
    sent = client.submitted[0]
    assert (sent["ml_l"].name, sent["ml_m"].name) == ("GridSearchCV", "Pipeline")
    # AND the estimate is DoubleML's
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL)
    # AND a Pipeline with a step outside the allow-list is refused by the learner's name
    with pytest.raises(errors.InvalidLearnerError, match=r"ml_m step 1 .svr.: .*SVR"):
        fanfit.DoubleMLPLR(data, LIN, make_pipeline(StandardScaler(), SVR()))


def test_a_learner_without_random_state_takes_the_jobs_seed() -> None:
    from sklearn.ensemble import RandomForestRegressor

    obj = fanfit.DoubleMLPLR(_data("plr"), RandomForestRegressor(n_estimators=3), LIN, n_folds=2)
    # THEN random_state=None is not sent (the job seeds the learner), other parameters are
    spec = obj.fanfit_options()["ml_l"]
    assert "random_state" not in spec.params and spec.params["n_estimators"] == 3


def test_a_dataframe_with_doubleml_column_names() -> None:
    # GIVEN a DataFrame and DoubleMLData's column keywords (x_cols defaulting to the rest)
    df = _data("plr").data
    obj = fanfit.DoubleMLPLR(df, LIN, LIN, n_folds=2, y_col="y", d_cols="d")
    # THEN the model's data is DoubleMLData of those columns
    assert obj._dml_data.y_col == "y" and list(obj._dml_data.x_cols) == ["X1", "X2", "X3", "X4"]
    # AND a DataFrame without y_col, or columns next to a DoubleMLData, are named errors
    with pytest.raises(errors.InvalidDataError, match="y_col and d_cols"):
        fanfit.DoubleMLPLR(df, LIN, LIN)
    with pytest.raises(errors.InvalidDataError, match="y_col given with a DoubleMLData"):
        fanfit.DoubleMLPLR(_data("plr"), LIN, LIN, y_col="y")
    with pytest.raises(errors.InvalidDataError, match="obj_dml_data must be"):
        fanfit.DoubleMLPLR(df.to_numpy(), LIN, LIN)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (
            lambda d: fanfit.DoubleMLPLR(d["plr"], LIN, LIN, score=lambda **kw: None),
            "a callable score",
        ),
        (lambda d: fanfit.DoubleMLIRM(d["irm"], LIN, LOGIT, weights=np.ones(N_OBS)), "weights"),
        (
            lambda d: fanfit.DoubleMLIRM(
                d["irm"],
                LIN,
                LOGIT,
                ps_processor_config=__import__("doubleml").utils.PSProcessorConfig(
                    calibration_method="isotonic"
                ),
            ),
            "calibration",
        ),  # fmt: skip
        (lambda d: fanfit.from_doubleml(dml.DoubleMLQTE(d["irm"], LOGIT, LOGIT)), "DoubleMLQTE"),
    ],
    ids=["callable-score", "weights", "calibration", "qte"],
)
def test_what_a_stack_cannot_honour_is_refused_by_name(build, match) -> None:
    data = {"plr": _data("plr"), "irm": _data("irm")}
    with pytest.raises(errors.UnsupportedArgumentError, match=match):
        build(data)


def test_a_learner_outside_the_allow_list_is_refused_at_construction() -> None:
    # GIVEN an estimator fanfit does not allow WHEN a class is built with it THEN a named error
    with pytest.raises(errors.InvalidLearnerError, match=r"ml_l: .*SVR"):
        fanfit.DoubleMLPLR(_data("plr"), SVR(), LIN)


def _cluster_plr():
    np.random.seed(1234)
    df = make_plr_CCDDHNR2018(n_obs=N_OBS, dim_x=4, return_type="DataFrame")
    df["cl"] = np.arange(N_OBS) % 10  # ten clusters of twenty rows
    return dml.DoubleMLClusterData(df, "y", "d", x_cols=["X1", "X2", "X3", "X4"], cluster_cols="cl")


def _cluster_pliv():
    np.random.seed(1234)  # 12 x 12 two-way clustered rows (Chiang et al. 2021's design)
    return make_pliv_multiway_cluster_CKMS2021(N=12, M=12, dim_X=5)


# (class name, data, learners, keywords, the options the job must get)
OPTION_CASES = {
    "plr-one-way-cluster": (
        "DoubleMLPLR", _cluster_plr, (LIN, LIN), {}, {"cluster_cols": ["cl"], "n_folds": 3},
    ),
    "pliv-two-way-cluster": (
        "DoubleMLPLIV", _cluster_pliv, (LIN, LIN, LIN), {},
        {"cluster_cols": ["cluster_var_i", "cluster_var_j"], "n_folds": 3},
    ),
    "iivm-no-always-takers": (
        "DoubleMLIIVM", lambda: _data("iivm"), (LIN, LOGIT, LOGIT),
        {"subgroups": {"always_takers": False, "never_takers": True}},
        {"subgroups": {"always_takers": False, "never_takers": True}, "normalize_ipw": False},
    ),
    "irm-normalize-ipw": (
        "DoubleMLIRM", lambda: _data("irm"), (LIN, LOGIT), {"normalize_ipw": True},
        {"normalize_ipw": True, "trimming_threshold": 0.01},
    ),
}  # fmt: skip


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_clusters_subgroups_and_normalize_ipw_reach_the_job(case) -> None:
    # GIVEN clustered data (one- or two-way), IIVM subgroups or IRM's normalize_ipw, and a
    # fanfit class and DoubleML's from the same global seed
    name, make_data, learners, kwargs, expected = OPTION_CASES[case]
    data = make_data()
    np.random.seed(42)
    ours = getattr(fanfit, name)(data, *learners, n_folds=3, n_rep=2, **kwargs)
    np.random.seed(42)
    theirs = getattr(dml, name)(data, *learners, n_folds=3, n_rep=2, **kwargs)
    # WHEN fanfit's is fitted on the fake stack and DoubleML's in-process
    client = FakeClient()
    ours.fit(client=client)
    theirs.fit()
    # THEN the job got the options (n_folds per cluster variable) ...
    sent = client.submitted[0]
    for key, value in expected.items():
        assert sent[key] == value, key
    # ... and DoubleML's sample splitting: with clusters, the cartesian-product fold index
    if "cluster_cols" in expected:
        cluster_vars = data.data[expected["cluster_cols"]].to_numpy()
        folds = fdml.validate_cluster_folds(sent["folds"], cluster_vars, 3, 2)
        smpls, _ = fdml.cluster_folds_to_smpls(folds, cluster_vars, 3)
        assert len(smpls[1]) == len(theirs.smpls[1]) == 3 ** len(expected["cluster_cols"])
        for (train, test), (their_train, their_test) in zip(smpls[1], theirs.smpls[1], strict=True):
            np.testing.assert_array_equal(test, np.sort(their_test))
            np.testing.assert_array_equal(train, np.sort(their_train))
    else:
        np.testing.assert_array_equal(sent["folds"], fdml.smpls_to_folds(theirs.smpls))
    # AND coef, se (cluster-robust with clusters), the intervals and the losses are DoubleML's
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=RTOL)
    np.testing.assert_allclose(ours.confint(), theirs.confint(), rtol=RTOL)
    for key, value in theirs.predictions.items():
        np.testing.assert_allclose(ours.predictions[key], value, rtol=RTOL, atol=1e-12)
        np.testing.assert_allclose(ours.nuisance_loss[key], theirs.nuisance_loss[key], rtol=RTOL)


def test_fit_without_sample_splitting_says_how_to_set_it() -> None:
    obj = fanfit.DoubleMLPLR(_data("plr"), LIN, LIN, draw_sample_splitting=False)
    with pytest.raises(errors.InvalidFoldsError, match="set_sample_splitting"):
        obj.fit(client=FakeClient())


def test_set_sample_splitting_is_what_the_job_gets() -> None:
    # GIVEN folds given with DoubleML's set_sample_splitting
    folds = fdml.draw_folds(N_OBS, 4, 2, seed=5)
    obj = fanfit.DoubleMLPLR(
        _data("plr"), LIN, LIN, n_folds=4, n_rep=2, draw_sample_splitting=False
    )
    obj.set_sample_splitting(fdml.folds_to_smpls(folds))
    # WHEN fitted THEN the job ran on exactly those folds
    client = FakeClient()
    obj.fit(client=client, seed=3, max_concurrency=2)
    np.testing.assert_array_equal(client.submitted[0]["folds"], folds)
    assert client.submitted[0]["max_concurrency"] == 2 and client.submitted[0]["seed"] == 3
    # AND an unknown fit option is a named error
    with pytest.raises(errors.InvalidJobError, match="no option n_folds"):
        obj.fit(client=client, n_folds=3)


def test_a_mismatch_with_the_job_is_a_parity_error() -> None:
    # GIVEN a job whose coef is not what its predictions give (a bug) WHEN fitted THEN ParityError
    obj = fanfit.DoubleMLPLR(_data("plr"), LIN, LIN, n_folds=2)
    with pytest.raises(errors.ParityError, match="coef"):
        obj.fit(client=FakeClient(coef_shift=1e-6))


def test_store_predictions_false_keeps_the_losses_only() -> None:
    obj = fanfit.DoubleMLPLR(_data("plr"), LIN, LIN, n_folds=2).fit(
        client=FakeClient(), store_predictions=False
    )
    assert obj.predictions is None and np.all(np.isfinite(obj.nuisance_loss["ml_l"]))


def test_from_doubleml_runs_the_models_own_setup() -> None:
    # GIVEN an unfitted DoubleML IIVM with its own sample splitting and options
    data = _data("iivm")
    np.random.seed(8)
    model = dml.DoubleMLIIVM(data, LIN, LOGIT, LOGIT, n_folds=3, n_rep=2, trimming_threshold=0.02)
    reference = dml.DoubleMLIIVM(data, LIN, LOGIT, LOGIT, n_folds=3, n_rep=2, trimming_threshold=0.02,
                                 draw_sample_splitting=False)  # fmt: skip
    reference.set_sample_splitting(model.smpls).fit()
    # WHEN it runs through fanfit
    client = FakeClient()
    ours = fanfit.from_doubleml(model, client=client)
    # THEN the result is fanfit's IIVM with the model's splitting, options and DoubleML's numbers
    assert isinstance(ours, fanfit.DoubleMLIIVM) and isinstance(ours, dml.DoubleMLIIVM)
    assert client.submitted[0]["trimming_threshold"] == 0.02
    np.testing.assert_array_equal(client.submitted[0]["folds"], fdml.smpls_to_folds(model.smpls))
    np.testing.assert_allclose(ours.coef, reference.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, reference.se, rtol=RTOL)
    assert np.all(np.isnan(model.coef))  # the user's model is left unfitted


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_from_doubleml_takes_a_clustered_models_splitting() -> None:
    # GIVEN an unfitted DoubleML PLIV on two-way clustered data, with its own cluster splitting
    np.random.seed(8)
    model = dml.DoubleMLPLIV(_cluster_pliv(), LIN, LIN, LIN, n_folds=2)
    # WHEN it runs through fanfit, and the same model in-process
    client = FakeClient()
    ours = fanfit.from_doubleml(model, client=client)
    model.fit()
    # THEN the job got 2 folds per cluster variable and the estimate is DoubleML's
    assert client.submitted[0]["n_folds"] == 2 and len(ours.smpls[0]) == 4
    np.testing.assert_allclose(ours.coef, model.coef, rtol=RTOL)
    np.testing.assert_allclose(ours.se, model.se, rtol=RTOL)


def test_str_adds_the_run_after_doublemls_summary() -> None:
    obj = fanfit.DoubleMLPLR(_data("plr"), LIN, LIN, n_folds=2)
    assert "fanfit" not in str(obj)
    text = str(obj.fit(client=FakeClient()))
    assert "------------------ Fit Summary" in text
    assert "Job: est-20260101-000000-00000000" in text and "cross-fitting 1.50 s" in text


def test_default_client_is_fanfit_stack_else_the_local_stack(monkeypatch, capsys) -> None:
    from fanfit.client import client as client_module
    from fanfit.local import stack as local_stack

    made: list = []

    class Recorder:
        def __init__(self, stack: str = "fanfit", **kw) -> None:
            made.append(("stack", stack))

        @classmethod
        def local_stack(cls):
            made.append(("local",))
            return "local-client"

    monkeypatch.setattr(client_module, "Client", Recorder)
    # GIVEN FANFIT_STACK WHEN no client is given THEN that stack's client
    monkeypatch.setenv("FANFIT_STACK", "my-stack")
    assert isinstance(fdoubleml.default_client(), Recorder) and made == [("stack", "my-stack")]
    # GIVEN none and no local stack running THEN the local stack is started, then used
    monkeypatch.delenv("FANFIT_STACK")
    monkeypatch.setattr(local_stack, "status", lambda: {"running": False})
    monkeypatch.setattr(local_stack, "up", lambda: made.append(("up",)))
    assert fdoubleml.default_client() == "local-client"
    assert made[1:] == [("up",), ("local",)]
    # ... and left running, with one line on stderr on how to stop it
    assert "stop it with: fanfit local down" in capsys.readouterr().err


def test_import_fanfit_loads_neither_doubleml_nor_pandas() -> None:
    code = "import sys, fanfit; print('doubleml' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_without_doubleml_the_classes_name_the_pip_command(monkeypatch) -> None:
    # GIVEN DoubleML not importable and the module not yet imported
    monkeypatch.setitem(sys.modules, "doubleml", None)
    monkeypatch.delitem(sys.modules, "fanfit.client.doubleml")
    monkeypatch.delattr(sys.modules["fanfit.client"], "doubleml", raising=False)
    # WHEN a class is asked for THEN MissingDependencyError gives the pip command
    with pytest.raises(MissingDependencyError, match=r"pip install 'fanfit\[doubleml\]'"):
        fanfit.DoubleMLPLR  # noqa: B018
