"""str(EstimateResult): DoubleML 0.11's printout of a fitted model, then fanfit's run section."""

from __future__ import annotations

import json
import warnings

import doubleml as dml
import numpy as np
import pytest
from doubleml.utils import PSProcessorConfig

from fanfit.client.estimate import EstimateResult
from fanfit.client.printout import RUN_TITLE, format_estimate, learner_text, section
from fanfit.dml import DMLSpec, draw_folds, estimate_in_process, folds_to_smpls, validate_data
from fanfit.dml.losses import loss_metrics, nuisance_loss

X_COLS = [f"x{i}" for i in range(4)]
TIMINGS = {"prepare_s": 1.5, "crossfit_s": 4.25, "aggregate_s": 0.5, "total_s": 6.25,
           "shards": [], "billed_gb_s": 7.25, "lambda_cost_usd": 0.000121}  # fmt: skip

CASES = [
    ("plr", "partialling out", {"ml_l": "LinearRegression", "ml_m": "LassoCV:{\"cv\": 3}"}, 2),
    ("irm", "ATE", {"ml_g": "LinearRegression", "ml_m": "LogisticRegression"}, 1),
    ("iivm", "LATE", {"ml_g": "LinearRegression", "ml_m": "LogisticRegression",
                      "ml_r": "LogisticRegression"}, 1),
]  # fmt: skip
DOUBLEML = {"plr": dml.DoubleMLPLR, "irm": dml.DoubleMLIRM, "iivm": dml.DoubleMLIIVM}


def _fit(make_frame, model, score, learners, n_rep):
    df = make_frame(model, n_obs=300, seed=4)
    z_cols = ["z"] if "z" in df.columns else []
    spec = DMLSpec(model=model, score=score, y_col="y", d_cols=("d",), x_cols=tuple(X_COLS),
                   z_cols=tuple(z_cols), n_folds=3, n_rep=n_rep, seed=9, learners=learners)  # fmt: skip
    spec.validate()
    folds = draw_folds(len(df), spec.n_folds, spec.n_rep, spec.seed)
    data = validate_data(spec, list(df.columns), df.to_numpy())
    options = {"n_folds": 3, "n_rep": n_rep, "score": score}
    if model in ("irm", "iivm"):
        options["ps_processor_config"] = PSProcessorConfig(clipping_threshold=0.01)
    obj_data = dml.DoubleMLData(df, "y", "d", x_cols=X_COLS, z_cols=z_cols or None)
    obj = DOUBLEML[model](obj_data, **{k: v.build() for k, v in spec.learners.items()}, **options)
    obj.set_sample_splitting(folds_to_smpls(folds))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj.fit()
        res = estimate_in_process(spec, data, folds)
    res.nuisance_loss = nuisance_loss(spec, data, res.predictions)
    res.nuisance_metric = loss_metrics(spec)
    raw = {**res.to_dict(), "job_id": "est-print", "execution_arn": "arn:exec:est-print",
           "predictions_key": "p", "folds_key": "f", "spec": spec.to_dict(),
           "timings": {"shards": [], "billed_gb_s": 7.25, "lambda_cost_usd": 0.000121,
                       "aggregate": {"memory_mb": 1769, "peak_rss_mb": 100.0},
                       "price_usd_per_gb_s": 1.6667e-05, "price_usd_per_request": 2e-07}}  # fmt: skip
    return obj, EstimateResult(raw=json.loads(json.dumps(raw)), timings=TIMINGS)


@pytest.mark.parametrize("model,score,learners,n_rep", CASES, ids=[c[0] for c in CASES])
def test_str_is_doubleml_printout_then_the_run(make_frame, model, score, learners, n_rep) -> None:
    # GIVEN a DoubleML model and a fanfit result fitted with the same learners on the same folds
    obj, res = _fit(make_frame, model, score, learners, n_rep)
    # WHEN both are printed
    ours, theirs = str(res), str(obj)
    # THEN fanfit's printout starts with DoubleML's, section by section, losses included
    if model == "iivm":  # DoubleML's IIVM ends with a robust confidence set fanfit does not print
        theirs = theirs.split("\n\n------------------ Additional Information")[0]
    head, run = ours.split(f"\n\n{section(RUN_TITLE)}\n")
    assert head == theirs
    assert "Out-of-sample Performance:" in head
    # ... and the run section follows with the job, seed, wall seconds and cost
    lines = run.splitlines()
    assert lines[0] == "Job: est-print" and lines[1] == "Seed: 9"
    assert "Wall seconds: prepare 1.50, cross-fitting 4.25, aggregate 0.50 (total 6.25)" in lines
    assert "Shards: 0, billed 7.2 GB-s" in lines
    assert lines[-1] == "Execution: arn:exec:est-print"


def test_confint_equals_doubleml_at_every_level(make_frame) -> None:
    # GIVEN a DoubleML PLR and a fanfit result fitted alike
    obj, res = _fit(make_frame, *CASES[0])
    # THEN the pointwise intervals agree at several levels (the quantile is computed without scipy)
    for level in (0.8, 0.9, 0.95, 0.99):
        np.testing.assert_allclose(
            res.confint(level=level).to_numpy(), obj.confint(level=level).to_numpy(), rtol=1e-12
        )


def test_the_loss_appears_under_its_kind_and_old_results_print_without_losses(make_frame) -> None:
    # GIVEN an IRM result (ml_g regressions, ml_m a classification)
    _, res = _fit(make_frame, *CASES[1])
    text = format_estimate(res)
    # THEN ml_g0 and ml_g1 are under Regression with their RMSE, ml_m under Classification
    reg, clf = text.split("Regression:\n")[1].split("Classification:\n")
    assert reg.startswith("Learner ml_g0 RMSE: [[") and "Learner ml_g1 RMSE: [[" in reg
    assert clf.startswith(f"Learner ml_m Log Loss: {res.nuisance_loss['ml_m']}")
    assert res.nuisance_loss["ml_m"].shape == (1, 1)
    # WHEN a result.json written before losses and spec were kept is printed
    old = {
        k: v for k, v in res.raw.items() if k not in ("nuisance_loss", "nuisance_metric", "spec")
    }
    text = str(EstimateResult(raw=old, timings=TIMINGS))
    # THEN it has no loss section and still names treatments and rows
    assert "Out-of-sample Performance" not in text and "Treatment variable(s): ['d']" in text
    assert "No. Observations: 300" in text and EstimateResult(raw=old).nuisance_loss is None


def test_a_default_learner_is_printed_as_scikit_learn_prints_it() -> None:
    from fanfit.learners import ALLOWED_LEARNERS

    # GIVEN every plain allowed learner with its defaults
    for name, cls in ALLOWED_LEARNERS.items():
        # THEN its text (written without building it) is the estimator's own
        assert learner_text({"name": name, "params": {}}) == str(cls()), name
        assert learner_text(name) == str(cls()), name


def test_learner_text_is_the_estimators_or_the_spec_when_unknown() -> None:
    # THEN an allow-listed learner reads as scikit-learn prints it, an unknown one as its spec
    assert learner_text({"name": "LassoCV", "params": {"cv": 3}}) == "LassoCV(cv=3)"
    assert learner_text({"name": "NoSuchModel", "params": {"a": 1}}) == "NoSuchModel(a=1)"


def test_to_dict_carries_the_nuisance_loss_in_doubleml_layout(make_frame) -> None:
    # GIVEN a PLR result with two repetitions
    _, res = _fit(make_frame, *CASES[0])
    # WHEN it is written as --output json
    out = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    # THEN nuisance_loss is learner -> n_rep lists of n_coefs losses, equal to the result's arrays
    assert set(out["nuisance_loss"]) == {"ml_l", "ml_m"}
    for key, loss in res.nuisance_loss.items():
        assert np.array(out["nuisance_loss"][key]).shape == (2, 1)
        np.testing.assert_array_equal(np.array(out["nuisance_loss"][key]), loss)
    assert out["nuisance_metric"] == {"ml_l": "RMSE", "ml_m": "RMSE"}


@pytest.mark.parametrize("columns", ["30", "60", "200"])
def test_the_summary_is_printed_whole_at_any_terminal_width(
    make_frame, monkeypatch, columns
) -> None:
    # GIVEN a fitted result and pandas set as in a terminal (display.max_columns 0: as many
    # columns as the terminal's width holds), the terminal `columns` characters wide
    import pandas as pd

    _, res = _fit(make_frame, *CASES[0])
    monkeypatch.setenv("COLUMNS", columns)
    with pd.option_context("display.max_columns", 0):
        cut = str(res.summary)
        # WHEN the result is printed
        text = str(res)
    # THEN the fit summary holds every column of DoubleML's summary and no pandas ellipsis or
    # "[1 rows x 6 columns]", whatever str() of the frame gives at that width
    head = text.split(section("Fit Summary"))[1].split(section(RUN_TITLE))[0]
    for column in ("coef", "std err", "t", "P>|t|", "2.5 %", "97.5 %"):
        assert column in head
    assert "..." not in head and "rows x" not in head
    assert head.strip("\n") == res.summary.to_string()
    if columns == "30":  # the case it fixes: pandas alone cuts the table at this width
        assert "..." in cut
