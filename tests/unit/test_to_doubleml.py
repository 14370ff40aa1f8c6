"""DoubleML interop: fanfit's folds and out-of-fold predictions handed to DoubleML.

GIVEN fanfit estimates of the 401(k) data (examples/data/sipp1991.dta) run in-process, WHEN their
predictions go through the storage layout (an .npz object) and :func:`fanfit.dml.interop.to_doubleml`,
THEN DoubleML's fitted object has fanfit's coef and se (rtol 1e-9), its own sensitivity analysis runs,
and, through moto, the Aggregate step writes the predictions that ``EstimateJob.to_doubleml`` reads back.
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fanfit import dml
from fanfit.client import build_spec
from fanfit.client.data import to_matrix
from fanfit.dml.interop import (
    MissingDependencyError,
    external_predictions,
    predictions_from_arrays,
    predictions_to_arrays,
    to_doubleml,
)
from fanfit.errors import InvalidJobError

pytest.importorskip("doubleml")

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data" / "sipp1991.dta"
X_COLS = "age,inc,educ,fsize,marr,twoearn,db,pira,hown"
RTOL = 1e-9
RF_REG = 'RandomForestRegressor:{"n_estimators": 10, "max_depth": 4}'
RF_CLF = 'RandomForestClassifier:{"n_estimators": 10, "max_depth": 4}'
LEARNERS = {
    "plr": {"ml_l": RF_REG, "ml_m": RF_CLF},
    "irm": {"ml_g": RF_REG, "ml_m": RF_CLF},
}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.read_stata(DATA)


def _job(frame: pd.DataFrame, model: str, **options):
    spec, columns = build_spec(
        y="net_tfa", d="e401", x=X_COLS, z=None, model=model, score=None,
        learners=LEARNERS[model], n_folds=5, n_rep=2, seed=42, **options,
    )  # fmt: skip
    names, values = to_matrix(frame, columns)
    return spec, dml.validate_data(spec, names, values)


def _through_npz(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What JobStore.put_arrays then get_arrays gives back."""
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=False, **arrays)
    with np.load(io.BytesIO(buf.getvalue()), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


@pytest.fixture(scope="module", params=["plr", "irm"])
def fitted(request, frame):
    # GIVEN a fanfit estimate with 5 folds x 2 repetitions, run in-process
    spec, data = _job(frame, request.param, boot_method="normal", n_rep_boot=200)
    folds = dml.draw_folds(data.n_obs, spec.n_folds, spec.n_rep, spec.seed)
    result = dml.estimate_in_process(spec, data, folds)
    # WHEN its predictions go through the stored layout and into DoubleML
    stored = _through_npz(predictions_to_arrays(spec.d_cols, result.predictions))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = to_doubleml(spec, data, folds, predictions_from_arrays(stored))
    return SimpleNamespace(spec=spec, data=data, folds=folds, result=result, obj=obj)


def test_doubleml_object_has_fanfits_coef_and_se(fitted) -> None:
    import doubleml

    res, obj = fitted.result, fitted.obj
    # THEN it is the model's DoubleML class, fitted on fanfit's folds
    expected = {"plr": doubleml.DoubleMLPLR, "irm": doubleml.DoubleMLIRM}[fitted.spec.model]
    assert type(obj) is expected
    assert obj.n_rep == 2 and obj.n_folds == 5
    for i_rep in range(2):
        for i_fold, (train, test) in enumerate(obj.smpls[i_rep]):
            np.testing.assert_array_equal(test, np.flatnonzero(fitted.folds[:, i_rep] == i_fold))
            assert train.size + test.size == fitted.data.n_obs
    # ... and its estimate is fanfit's, aggregated and per repetition
    np.testing.assert_allclose(obj.coef, res.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(obj.se, res.se, rtol=RTOL, atol=0)
    np.testing.assert_allclose(obj.all_coef, res.all_coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(obj.all_se, res.all_se, rtol=RTOL, atol=0)
    # ... its summary has DoubleML's layout with fanfit's values
    pd.testing.assert_frame_equal(obj.summary, res.summary, rtol=1e-7, check_exact=False)
    # ... and its bootstrap (same method and seed) gives fanfit's joint interval
    np.testing.assert_allclose(
        obj.confint(joint=True).to_numpy(), res.confint(joint=True), rtol=1e-9
    )


def test_doubleml_sensitivity_analysis_runs_on_fanfit_predictions(fitted) -> None:
    # WHEN DoubleML's own sensitivity analysis runs
    obj = fitted.obj
    obj.sensitivity_analysis(cf_y=0.03, cf_d=0.03)
    # THEN it brackets fanfit's estimate
    params = obj.sensitivity_params
    theta = params["theta"]
    assert theta["lower"][0] <= fitted.result.coef[0] <= theta["upper"][0]
    assert params["rv"][0] > 0
    assert "Robustness Values" in obj.sensitivity_summary


def test_to_doubleml_takes_fanfits_own_layout(fitted) -> None:
    # GIVEN the predictions as fanfit keeps them: key -> (n_obs, n_rep, n_treat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = to_doubleml(
            fitted.spec, fitted.data, fitted.folds, fitted.result.predictions, bootstrap=False
        )
    # THEN the estimate is the same, and no bootstrap ran
    np.testing.assert_allclose(obj.coef, fitted.result.coef, rtol=RTOL, atol=0)
    assert obj.boot_t_stat is None


def test_external_predictions_layout(fitted) -> None:
    spec, preds = fitted.spec, fitted.result.predictions
    ext = external_predictions(spec, preds)
    # THEN one dict per treatment with one (n_obs, n_rep) array per prediction key
    assert list(ext) == ["e401"]
    assert set(ext["e401"]) == set(dml.prediction_keys(spec))
    for key, arr in ext["e401"].items():
        assert arr.shape == (fitted.data.n_obs, 2)
        np.testing.assert_array_equal(arr, preds[key][:, :, 0])


def test_bad_predictions_are_named(fitted) -> None:
    spec, data, folds = fitted.spec, fitted.data, fitted.folds
    ext = external_predictions(spec, fitted.result.predictions)
    key = dml.prediction_keys(spec)[0]
    # a missing learner
    with pytest.raises(InvalidJobError, match=repr(key)):
        to_doubleml(spec, data, folds, {"e401": {k: v for k, v in ext["e401"].items() if k != key}})
    # a wrong shape
    bad = {"e401": {**ext["e401"], key: ext["e401"][key][:, :1]}}
    with pytest.raises(InvalidJobError, match=r"shape \(9915, 1\)"):
        to_doubleml(spec, data, folds, bad)
    # a NaN
    nan = ext["e401"][key].copy()
    nan[3, 1] = np.nan
    with pytest.raises(InvalidJobError, match="not all finite"):
        to_doubleml(spec, data, folds, {"e401": {**ext["e401"], key: nan}})
    # an object that fanfit did not write
    with pytest.raises(InvalidJobError, match="d_cols"):
        predictions_from_arrays({"t0_ml_l": np.zeros((3, 1))})
    with pytest.raises(InvalidJobError, match="'x'"):
        predictions_from_arrays({"d_cols": np.array(["d"]), "x": np.zeros((3, 1))})


def test_missing_doubleml_raises_a_named_error_with_the_pip_command(fitted, monkeypatch) -> None:
    # GIVEN a client without DoubleML (an import of it fails)
    monkeypatch.setitem(sys.modules, "doubleml", None)
    # THEN the error is named and says what to install
    with pytest.raises(MissingDependencyError, match=r"pip install 'fanfit\[doubleml\]'"):
        to_doubleml(fitted.spec, fitted.data, fitted.folds, fitted.result.predictions)


# --------------------------------------------------------------------------- through S3 (moto)
@pytest.fixture
def aws(monkeypatch):
    moto = pytest.importorskip("moto")
    import boto3

    for key, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        boto3.client("s3").create_bucket(Bucket="fanfit-interop")
        ddb = boto3.client("dynamodb")
        ddb.create_table(
            TableName="jobs",
            KeySchema=[{"AttributeName": "job_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "job_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        ddb.create_table(
            TableName="throughput",
            KeySchema=[
                {"AttributeName": "signature", "KeyType": "HASH"},
                {"AttributeName": "resource", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "signature", "AttributeType": "S"},
                {"AttributeName": "resource", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield boto3


class _FakeSfn:
    """The two Step Functions calls EstimateJob.result() makes, for a SUCCEEDED execution."""

    def describe_execution(self, executionArn: str) -> dict:
        return {"status": "SUCCEEDED"}

    def get_paginator(self, name: str):
        return SimpleNamespace(paginate=lambda **kwargs: [{"events": []}])


def _run_pipeline(boto3, frame: pd.DataFrame, job_id: str):
    """Prepare, Schedule, CrossFit and Aggregate of an IV-type PLR job, as the state machine runs them."""
    from fanfit import storage
    from fanfit.jobs.estimate.aggregate import aggregate_job
    from fanfit.jobs.estimate.crossfit import crossfit_shard
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave

    store = storage.JobStore("fanfit-interop", boto3.client("s3"))
    records = storage.JobRecords("jobs", boto3.client("dynamodb"))
    throughput = storage.ThroughputRecords("throughput", boto3.client("dynamodb"))
    spec, columns = build_spec(
        y="net_tfa", d="e401", x=X_COLS, z=None, model="plr", score="IV-type",
        learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression", "ml_g": "LinearRegression"},
        n_folds=3, n_rep=2, seed=5,
    )  # fmt: skip
    names, values = to_matrix(frame, columns)
    job = {"kind": "estimate", "dml": spec.to_dict(), "data_key": store.put_data(names, values),
           "folds_key": None, "max_concurrency": 2, "units_per_shard": 3}  # fmt: skip
    spec_key = store.put_json(storage.spec_key(job_id), job)
    stage, has_next = 0, True
    while has_next:
        planned = prepare_stage(store, records, job_id, spec_key, stage)
        for wave in range(50):
            out = schedule_wave(store, records, throughput, job_id, stage, wave, 1769)
            if not out.has_wave:
                break
            for shard in store.get_json(out.shards_key):
                crossfit_shard(store, job_id, planned.plan_key, stage, shard)
        stage, has_next = planned.next_stage, planned.has_next_stage
    done = aggregate_job(store, records, job_id, storage.plan_key(job_id))
    return store, spec, names, values, done


def test_aggregate_writes_predictions_that_the_client_turns_into_doubleml(aws, frame, tmp_path):
    from fanfit import storage
    from fanfit.client import EstimateJob

    # GIVEN an estimate job run step by step on moto (IV-type: two stages, three learners)
    store, spec, names, values, done = _run_pipeline(aws, frame, "interop-job")
    raw = store.get_json(done.result_key)
    # THEN Aggregate wrote the predictions: one (n_obs, n_rep) array per treatment and learner
    assert raw["predictions_key"] == storage.predictions_key("interop-job")
    arrays = store.get_arrays(raw["predictions_key"])
    assert sorted(arrays) == ["d_cols", "t0_ml_g", "t0_ml_l", "t0_ml_m"]
    assert all(arrays[k].shape == (len(frame), 2) for k in arrays if k != "d_cols")

    # WHEN the client reads the job back and builds the DoubleML object
    client = SimpleNamespace(store=store, s3=store.s3, sfn=_FakeSfn())
    job = EstimateJob(client, "interop-job", "arn:aws:states:us-east-1:0:execution:x:interop-job")  # type: ignore[arg-type]
    result = job.result()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj = result.to_doubleml()
    # THEN it is DoubleML's PLR with the job's estimate and folds
    assert type(obj).__name__ == "DoubleMLPLR" and obj.score == "IV-type"
    np.testing.assert_allclose(obj.coef, result.coef, rtol=RTOL, atol=0)
    np.testing.assert_allclose(obj.se, result.se, rtol=RTOL, atol=0)
    np.testing.assert_array_equal(job.folds(), store.get_array(raw["folds_key"]))
    obj.sensitivity_analysis()

    # WHEN the user passes the data file the job ran on, or another one
    path = tmp_path / "data.csv"
    frame[list(spec.used_cols)].to_csv(path, index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = job.to_doubleml(path)
    np.testing.assert_allclose(again.coef, result.coef, rtol=RTOL, atol=0)
    other = tmp_path / "other.csv"
    frame[list(spec.used_cols)].iloc[::-1].to_csv(other, index=False)
    from fanfit.errors import InvalidDataError

    with pytest.raises(InvalidDataError, match="differ from the data job interop-job ran on"):
        job.to_doubleml(other)


def test_a_job_without_stored_predictions_says_so(aws):
    from fanfit import storage
    from fanfit.client import EstimateJob

    # GIVEN a result aggregated by an older fanfit (no predictions object at its key)
    store = storage.JobStore("fanfit-interop", aws.client("s3"))
    client = SimpleNamespace(store=store, s3=store.s3, sfn=_FakeSfn())
    job = EstimateJob(client, "old-job", "arn")  # type: ignore[arg-type]
    timings = {"shards": [], "billed_gb_s": 0.0, "lambda_cost_usd": 0.0,
               "aggregate": {"memory_mb": 1769, "peak_rss_mb": 100.0},
               "price_usd_per_gb_s": 1.6667e-05, "price_usd_per_request": 2e-07}  # fmt: skip
    store.put_json(
        storage.result_key("old-job"),
        {k: {"d": 1.0} for k in ("coef", "se", "t_stat", "pval")}
        | {"all_coef": {"d": [1.0]}, "all_se": {"d": [1.0]}, "n_obs": 3, "n_folds": 2,
           "n_rep": 1, "model": "plr", "score": "partialling out", "d_cols": ["d"],
           "ci_95": {"d": [0.0, 2.0]}, "job_id": "old-job", "execution_arn": "arn",
           "predictions_key": storage.predictions_key("old-job"),
           "folds_key": storage.input_folds_key("old-job"), "timings": timings},
    )  # fmt: skip
    # THEN asking for its predictions names the job and the key
    with pytest.raises(InvalidJobError, match="old-job has no stored out-of-fold predictions"):
        job.predictions()
