"""fanfit's DoubleMLLPLR (fanfit.client.doubleml.plm) without a stack, and model ``lplr`` in-process.

GIVEN DoubleML's LPLR generator (``make_lplr_LZZ2020``) and a fake client whose "job" runs fanfit's
in-process estimator on the options ``fit()`` sends (what the pipeline computes: one fold unit per
outer fold on DoubleML's outer and inner folds), WHEN fanfit's class and DoubleML's are built from
the same seed and fitted, THEN coef, se, the predictions, the bootstrap and the nuisance losses are
DoubleML's, for ``n_folds_inner`` equal to ``n_folds`` or not; the command line and the options
take ``--ml-M`` and ``--ml-m`` as two learners.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

dml = pytest.importorskip("doubleml")

from doubleml.plm.datasets import make_lplr_LZZ2020  # noqa: E402
from doubleml_helpers import submitted  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

import fanfit  # noqa: E402
from fanfit import dml as fdml  # noqa: E402
from fanfit import errors  # noqa: E402
from fanfit.client import EstimateOptions, check_estimate  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

TOL = 1e-9


class FakeJob:
    """A job run here; its predictions as the stack stores them (the fold scalar beta included)."""

    job_id = "est-20260101-000000-00000000"

    def __init__(self, checked) -> None:
        self.checked = checked
        self.res = fdml.estimate_in_process(checked.spec, checked.data, checked.folds)

    def result(self, timeout=None, progress=False):
        r = self.res
        return SimpleNamespace(coef=r.coef, se=r.se, d_cols=list(r.d_cols),
                               execution_arn="arn:fake", timings={})  # fmt: skip

    def predictions(self):
        d_col = self.checked.spec.d_cols[0]
        return {d_col: {k: v[:, :, 0] for k, v in self.res.predictions.items()}}


class FakeClient:
    def __init__(self) -> None:
        self.submitted: list[dict] = []
        self.jobs: list[FakeJob] = []

    def submit_estimate(self, data, options=None, **keywords):
        checked, sent = submitted(data, options, **keywords)
        self.submitted.append(sent)
        self.jobs.append(FakeJob(checked))
        return self.jobs[-1]


def _data(treatment: str = "continuous", seed: int = 5):
    np.random.seed(seed)
    return make_lplr_LZZ2020(n_obs=300, dim_x=14, alpha=0.5, treatment=treatment)


def _pair(treatment: str, n_folds: int, n_folds_inner: int, n_rep: int, seed: int = 8):
    """DoubleML's and fanfit's LPLR on the same data, built after the same NumPy seed."""
    data = _data(treatment)
    m = LogisticRegression() if treatment == "binary" else LinearRegression()
    args = (LogisticRegression(), LinearRegression(), m)
    kwargs = {"n_folds": n_folds, "n_folds_inner": n_folds_inner, "n_rep": n_rep}
    np.random.seed(seed)
    theirs = dml.DoubleMLLPLR(data, *args, **kwargs)
    np.random.seed(seed)
    ours = fanfit.DoubleMLLPLR(data, *args, **kwargs)
    return theirs, ours


@pytest.mark.parametrize(
    ("treatment", "n_folds", "n_folds_inner", "n_rep"),
    [("continuous", 3, 3, 2), ("binary", 4, 2, 1), ("continuous", 3, 5, 1)],
)
def test_every_number_after_the_fit_is_doublemls(
    treatment: str, n_folds: int, n_folds_inner: int, n_rep: int
) -> None:
    # GIVEN DoubleML's class and fanfit's, same data, learners, outer and inner folds
    theirs, ours = _pair(treatment, n_folds, n_folds_inner, n_rep)
    for a, b in zip(theirs.smpls_inner, ours.smpls_inner, strict=True):
        assert all(np.array_equal(x[0][1], y[0][1]) for x, y in zip(a, b, strict=True))
    # WHEN DoubleML fits in-process and fanfit's through the (fake) stack
    theirs.fit()
    client = FakeClient()
    ours.fit(client)
    # THEN the job got the inner folds and every number is DoubleML's
    options = client.submitted[0]
    assert options["model"] == "lplr" and options["n_folds_inner"] == n_folds_inner
    assert len(options["inner_folds_cols"]) == n_rep * n_folds
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL, atol=0)
    np.testing.assert_allclose(ours.psi, theirs.psi, rtol=TOL, atol=1e-12)
    for key in ("ml_m", "ml_a", "ml_t", "ml_M"):
        np.testing.assert_allclose(
            ours.predictions[key], theirs.predictions[key], rtol=TOL, atol=1e-12
        )
        np.testing.assert_allclose(
            ours.nuisance_loss[key], theirs.nuisance_loss[key], rtol=TOL, atol=1e-12
        )
    np.random.seed(3)
    ours.bootstrap(n_rep_boot=50)
    np.random.seed(3)
    theirs.bootstrap(n_rep_boot=50)
    np.testing.assert_allclose(ours.confint(joint=True), theirs.confint(joint=True), rtol=TOL)
    assert ours.summary.index.tolist() == theirs.summary.index.tolist()


def test_from_doubleml_runs_an_unfitted_lplr_with_its_own_splits() -> None:
    # GIVEN an unfitted DoubleMLLPLR (its splits drawn) and the same model fitted by DoubleML
    theirs, _ = _pair("continuous", 3, 2, 1)
    model = dml.DoubleMLLPLR(
        theirs._dml_data, LogisticRegression(), LinearRegression(), LinearRegression(),
        n_folds=3, n_folds_inner=2, draw_sample_splitting=False,
    )  # fmt: skip
    model._smpls, model._smpls_inner = theirs._smpls, theirs._smpls_inner
    theirs.fit()
    # WHEN fanfit runs it THEN its class is fanfit's and its numbers DoubleML's
    fitted = fanfit.from_doubleml(model, FakeClient())
    assert isinstance(fitted, fanfit.DoubleMLLPLR) and fitted.n_folds_inner == 2
    np.testing.assert_allclose(fitted.coef, theirs.coef, rtol=TOL, atol=0)
    np.testing.assert_allclose(fitted.se, theirs.se, rtol=TOL, atol=0)


@pytest.mark.parametrize(
    ("treatment", "n_folds", "n_folds_inner", "n_rep"),
    [("continuous", 3, 3, 2), ("binary", 4, 2, 1), ("continuous", 5, 3, 2)],
)
def test_the_instrument_score_runs_in_two_stages_and_is_doublemls(
    treatment: str, n_folds: int, n_folds_inner: int, n_rep: int
) -> None:
    # GIVEN DoubleML's class and fanfit's with score 'instrument' (ml_m weighted by every
    # fold's ml_M), same data, learners, outer and inner folds
    data = _data(treatment)
    m = LogisticRegression() if treatment == "binary" else LinearRegression()
    args = (LogisticRegression(), LinearRegression(), m)
    kwargs = {"n_folds": n_folds, "n_folds_inner": n_folds_inner, "n_rep": n_rep,
              "score": "instrument"}  # fmt: skip
    np.random.seed(8)
    theirs = dml.DoubleMLLPLR(data, *args, **kwargs)
    np.random.seed(8)
    ours = fanfit.DoubleMLLPLR(data, *args, **kwargs)
    # WHEN DoubleML fits in-process and fanfit's through the (fake) stack
    theirs.fit()
    client = FakeClient()
    ours.fit(client)
    # THEN the job ran two stages (ml_m after every fold's ml_M) and every number is DoubleML's
    spec = client.jobs[0].checked.spec
    assert spec.score == "instrument" and fdml.n_stages(spec) == 2
    assert fdml.prediction_keys(spec, 1) == ("ml_m",)
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL, atol=0)
    for key in ("ml_m", "ml_a", "ml_t", "ml_M"):
        np.testing.assert_allclose(
            ours.predictions[key], theirs.predictions[key], rtol=TOL, atol=1e-12
        )
        np.testing.assert_allclose(
            ours.nuisance_loss[key], theirs.nuisance_loss[key], rtol=TOL, atol=1e-12
        )


def test_the_instrument_score_runs_on_the_steps_on_moto(moto_stack) -> None:
    # GIVEN the job fanfit's DoubleMLLPLR sends for score 'instrument' (DoubleML's folds)
    from pipeline_steps import run_estimate

    from fanfit import storage

    data = _data("continuous")
    args = (LogisticRegression(), LinearRegression(), LinearRegression())
    np.random.seed(8)
    theirs = dml.DoubleMLLPLR(data, *args, n_folds=3, n_folds_inner=2, n_rep=2,
                              score="instrument")  # fmt: skip
    np.random.seed(8)
    ours = fanfit.DoubleMLLPLR(data, *args, n_folds=3, n_folds_inner=2, n_rep=2,
                               score="instrument")  # fmt: skip
    theirs.fit()
    client = FakeClient()
    ours.fit(client)
    checked = client.jobs[0].checked
    with moto_stack():
        # WHEN Prepare, Schedule, CrossFit, Prepare of stage 1 and Aggregate run it
        store, planned, result = run_estimate(
            checked.columns, checked.values, checked.spec, checked.folds, "lplr-iv"
        )
        inputs = store.get_json(storage.stage_inputs_key("lplr-iv", 1))
    # THEN stage 0 ran one unit per (repetition, fold), stage 1 the weighted ml_m of each;
    # stage 1's inputs hold each repetition's weights M_hat (1 - M_hat), and the estimate is
    # DoubleML's
    assert [p.n_units for p in planned] == [6, 6]
    m_hat = theirs.predictions["ml_M"][:, :, 0]
    np.testing.assert_array_equal(np.asarray(inputs["sample_weights"][0]).T, m_hat * (1 - m_hat))
    np.testing.assert_allclose(result["all_coef"]["d"], theirs.all_coef[0], rtol=TOL)
    np.testing.assert_allclose(result["all_se"]["d"], theirs.all_se[0], rtol=TOL)


def test_negative_instrument_weights_are_refused_by_name_where_doubleml_fails() -> None:
    # GIVEN n_folds_inner > n_folds, so that ml_M's outer predictions (the inner models' sum
    # over n_folds) exceed 1 and the weights M_hat (1 - M_hat) turn negative
    data = _data("continuous")
    args = (LogisticRegression(), LinearRegression(), LinearRegression())
    kwargs = {"n_folds": 3, "n_folds_inner": 5, "score": "instrument"}
    np.random.seed(8)
    theirs = dml.DoubleMLLPLR(data, *args, **kwargs)
    np.random.seed(8)
    ours = fanfit.DoubleMLLPLR(data, *args, **kwargs)
    # WHEN both fit THEN DoubleML fails in scikit-learn, fanfit names the weights before ml_m
    with pytest.raises(ValueError, match="Negative values in data passed to `sample_weight`"):
        theirs.fit()
    with pytest.raises(errors.InvalidJobError, match="n_folds_inner = 5 > n_folds = 3"):
        ours.fit(FakeClient())


def test_what_a_stack_cannot_honour_is_refused_by_name() -> None:
    # GIVEN generated data WHEN score 'instrument' has an ml_a without sample_weight THEN
    # DoubleML's own ValueError; an ml_m without it (DoubleML fails in its fit): InvalidJobError
    from sklearn.neighbors import KNeighborsRegressor

    data = _data()
    with pytest.raises(ValueError, match='Learner "ml_a" who supports sample_weight'):
        fanfit.DoubleMLLPLR(data, LogisticRegression(), LinearRegression(),
                            KNeighborsRegressor(), score="instrument")  # fmt: skip
    base = {"data": "d.csv", "y": "y", "d": "d", "x": list(data.x_cols), "model": "lplr",
            "ml_M": "LogisticRegression", "ml_t": "LinearRegression", "ml_m": "LinearRegression"}  # fmt: skip
    with pytest.raises(errors.InvalidJobError, match='Learner "ml_m" who supports sample_weight'):
        EstimateOptions(**{**base, "ml_m": "KNeighborsRegressor"}, ml_a="LinearRegression",
                        score="instrument").build_spec()  # fmt: skip
    spec, _ = EstimateOptions(**base, score="instrument").build_spec()
    assert spec.score == "instrument"
    # ... and a bad n_folds_inner by InvalidJobError
    with pytest.raises(errors.InvalidJobError, match="n_folds_inner must be an integer"):
        EstimateOptions(**base, n_folds_inner=1).build_spec()
    with pytest.raises(errors.InvalidJobError, match="n_folds_inner is an option of model 'lplr'"):
        EstimateOptions(
            **{**base, "model": "plr", "ml_l": "LinearRegression"}, n_folds_inner=3
        ).build_spec()


def test_ml_M_and_ml_m_are_two_options_and_ml_a_defaults_to_ml_m() -> None:
    # GIVEN the command line's flags of an lplr estimate
    from fanfit.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        ["estimate", "--data", "d.csv", "--model", "lplr", "--y", "y", "--d", "d",
         "--ml-M", "LogisticRegression", "--ml-m", "LinearRegression", "--ml-t", "Lasso",
         "--n-folds-inner", "3"]
    )  # fmt: skip
    # WHEN they are parsed THEN --ml-M and --ml-m land in two options
    assert (args.ml_M, args.ml_m, args.ml_t, args.n_folds_inner) == (
        "LogisticRegression",
        "LinearRegression",
        "Lasso",
        3,
    )
    # ... and the spec fills ml_a with ml_m's learner, as DoubleML clones ml_m
    spec, _ = EstimateOptions(
        data="d.csv", y="y", d="d", x=["x1"], model="lplr", ml_M="LogisticRegression", ml_t="Lasso",
        ml_m="LinearRegression", n_folds_inner=3,
    ).build_spec()  # fmt: skip
    assert spec.learners["ml_a"].name == "LinearRegression" and spec.n_folds_inner == 3
    assert fdml.DMLSpec.from_dict(spec.to_dict()) == spec


def test_without_given_inner_folds_each_fold_draws_its_own_from_the_seed() -> None:
    # GIVEN an lplr spec without inner_folds_cols (the command line's case) and drawn outer folds
    from fanfit.dml.folds import draw_inner_smpls, folds_to_smpls, inner_smpls_to_ids
    from fanfit.dml.units import FitUnit, unit_seed

    data = _data()
    frame = data.data
    options = {"data": frame, "y": "y", "d": "d", "x": list(data.x_cols), "model": "lplr",
               "ml_M": "LogisticRegression", "ml_t": "LinearRegression",
               "ml_m": "LinearRegression", "n_folds": 3, "n_folds_inner": 2, "n_rep": 2,
               "seed": 17}  # fmt: skip
    checked = check_estimate(**options)
    # WHEN it runs twice in-process
    first = fdml.estimate_in_process(checked.spec, checked.data, checked.folds)
    again = fdml.estimate_in_process(checked.spec, checked.data, checked.folds)
    # THEN the results repeat, and equal a run on the inner folds drawn from each unit's seed
    np.testing.assert_array_equal(first.coef, again.coef)
    folds = fdml.draw_spec_folds(checked.spec, checked.data)
    columns = {}
    for i_rep, rep in enumerate(folds_to_smpls(folds)):
        for i_fold, (train, _) in enumerate(rep):
            seed = unit_seed(17, FitUnit(0, 0, i_rep, i_fold, "inner_folds"))
            inner = draw_inner_smpls(train, 2, seed)
            columns[f"inner_{i_rep}_{i_fold}"] = inner_smpls_to_ids(inner, len(frame))
    given = check_estimate(**{**options, "data": frame.assign(**columns),
                              "inner_folds_cols": list(columns)})  # fmt: skip
    assert given.spec.inner_folds_cols == tuple(columns)
    ours = fdml.estimate_in_process(given.spec, given.data, folds)
    np.testing.assert_allclose(ours.coef, first.coef, rtol=1e-12, atol=0)
    np.testing.assert_allclose(ours.se, first.se, rtol=1e-12, atol=0)


@pytest.mark.parametrize("score", ["nuisance_space", "instrument"])
@pytest.mark.parametrize(
    "keys",
    [("ml_m",), ("ml_t",), ("ml_M",), ("ml_a",), ("ml_M", "ml_a", "ml_t"),
     ("ml_m", "ml_a", "ml_t", "ml_M")],
    ids=lambda k: "+".join(k),
)  # fmt: skip
def test_external_predictions_are_doublemls_refit(score: str, keys: tuple) -> None:
    # GIVEN DoubleML's first fit and its predictions of some keys (ml_M and ml_a with their
    # inner predictions of every outer fold, NaN outside the fold's training rows)
    data = _data("continuous")
    args = (LogisticRegression(), LinearRegression(), LinearRegression())
    kwargs = {"n_folds": 3, "n_folds_inner": 3, "n_rep": 2, "score": score}
    np.random.seed(8)
    first = dml.DoubleMLLPLR(data, *args, **kwargs)
    first.fit()
    given = {}
    for key in keys:
        given[key] = first.predictions[key][:, :, 0]
        if key in ("ml_M", "ml_a"):
            for k in range(3):
                given[f"{key}_inner_{k}"] = first.predictions[f"{key}_inner_{k}"][:, :, 0]
    models = []
    for cls in (dml.DoubleMLLPLR, fanfit.DoubleMLLPLR):
        model = cls(data, *args, **kwargs, draw_sample_splitting=False)
        model._smpls, model._smpls_inner = first._smpls, first._smpls_inner
        models.append(model)
    theirs, ours = models
    # WHEN both refit with them (fanfit's on the fake stack)
    theirs.fit(external_predictions={"d": given})
    ours.fit(FakeClient(), external_predictions={"d": given})
    # THEN coef and se are DoubleML's; with every key given no job ran
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=TOL, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=TOL, atol=0)
    assert (ours.fanfit_job is None) == (len(keys) == 4)


def test_external_inner_predictions_are_checked_by_name() -> None:
    # GIVEN an lplr spec WHEN ml_M is given without its inner predictions, with n_folds_inner
    # other than n_folds, or inner predictions without ml_M THEN InvalidJobError says which
    data = _data()
    base = {"data": "d.csv", "y": "y", "d": "d", "x": list(data.x_cols), "model": "lplr",
            "ml_M": "LogisticRegression", "ml_t": "LinearRegression", "ml_m": "LinearRegression",
            "n_folds": 3, "n_folds_inner": 3}  # fmt: skip
    cols = {"ml_M": {"d": ["M0"]}, "ml_M_inner_0": {"d": ["I0"]}}
    with pytest.raises(errors.InvalidJobError, match=r"all inner folds .*\(missing: 1, 2\)"):
        EstimateOptions(**base, external_predictions_cols=cols).build_spec()
    with pytest.raises(errors.InvalidJobError, match="need n_folds_inner == n_folds"):
        EstimateOptions(**{**base, "n_folds_inner": 2}, external_predictions_cols=cols).build_spec()
    with pytest.raises(errors.InvalidJobError, match="but not ml_a"):
        EstimateOptions(
            **base, external_predictions_cols={"ml_a_inner_0": {"d": ["I0"]}}
        ).build_spec()
