"""Whole estimate jobs through the state machine on the local stack.

The key test is parity: with the same folds and deterministic learners, coef and se from the full
pipeline (Prepare -> Distributed Map of CrossFit Lambdas -> Aggregate) equal DoubleML 0.11's to a
relative 1e-9, for every model and score, one and three repetitions, one and two treatments.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fanfit import dml, errors, storage
from fanfit.learners import LearnerSpec

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DATA_401K = ROOT / "examples" / "data" / "sipp1991.dta"
X_401K = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]
N_OBS = 400
LIN = "LinearRegression"
LOGIT = "LogisticRegression"


def _frame(model: str, n_treat: int) -> pd.DataFrame:
    """Synthetic data of DoubleML's own generators, fixed seeds."""
    from doubleml.irm import datasets as irm_datasets
    from doubleml.plm import datasets as plm_datasets

    np.random.seed(1234)
    if model == "plr":
        df = plm_datasets.make_plr_CCDDHNR2018(n_obs=N_OBS, dim_x=5, return_type="DataFrame")
    elif model == "irm":
        df = irm_datasets.make_irm_data(n_obs=N_OBS, dim_x=5, return_type="DataFrame")
    elif model == "pliv":
        df = plm_datasets.make_pliv_CHS2015(n_obs=N_OBS, dim_x=5, dim_z=1, return_type="DataFrame")
    else:
        df = irm_datasets.make_iivm_data(n_obs=N_OBS, dim_x=5, return_type="DataFrame")
    if n_treat == 2:
        rng = np.random.default_rng(99)
        df["d2"] = 0.5 * df["X1"] + df["d"] * 0.3 + rng.normal(size=len(df))
    return df


# (model, score, learners for fanfit and DoubleML alike, n_rep, n_treat)
CASES = [
    ("plr", "partialling out", {"ml_l": LIN, "ml_m": LIN}, 1, 1),
    ("plr", "partialling out", {"ml_l": 'LassoCV:{"cv": 5}',
                                "ml_m": 'RandomForestRegressor:{"n_estimators": 20, "random_state": 3}'}, 3, 1),
    ("plr", "partialling out", {"ml_l": LIN, "ml_m": LIN}, 3, 2),
    ("plr", "partialling out", {"ml_l": LIN, "ml_m": LIN}, 1, 2),
    ("plr", "IV-type", {"ml_l": LIN, "ml_m": LIN, "ml_g": LIN}, 1, 1),
    ("plr", "IV-type", {"ml_l": LIN, "ml_m": LIN, "ml_g": LIN}, 3, 1),
    ("plr", "IV-type", {"ml_l": LIN, "ml_m": LIN, "ml_g": LIN}, 1, 2),
    ("plr", "IV-type", {"ml_l": LIN, "ml_m": LIN, "ml_g": LIN}, 3, 2),
    ("irm", "ATE", {"ml_g": LIN, "ml_m": LOGIT}, 1, 1),
    ("irm", "ATE", {"ml_g": LIN, "ml_m": LOGIT}, 3, 1),
    ("irm", "ATTE", {"ml_g": LIN, "ml_m": LOGIT}, 1, 1),
    ("irm", "ATTE", {"ml_g": LIN, "ml_m": LOGIT}, 3, 1),
    ("pliv", "partialling out", {"ml_l": LIN, "ml_m": LIN, "ml_r": LIN}, 1, 1),
    ("pliv", "partialling out", {"ml_l": LIN, "ml_m": LIN, "ml_r": LIN}, 3, 1),
    ("pliv", "partialling out", {"ml_l": LIN, "ml_m": LIN, "ml_r": LIN}, 1, 2),
    ("pliv", "partialling out", {"ml_l": LIN, "ml_m": LIN, "ml_r": LIN}, 3, 2),
    ("iivm", "LATE", {"ml_g": LIN, "ml_m": LOGIT, "ml_r": LOGIT}, 1, 1),
    ("iivm", "LATE", {"ml_g": LIN, "ml_m": LOGIT, "ml_r": LOGIT}, 3, 1),
]  # fmt: skip
# Jobs in flight at once: each job beyond the warm environments starts cold ones (seconds of CPU
# each on a small machine), so a few at a time finish sooner than all at once.
JOBS_AT_ONCE = 3


def _doubleml(model: str, score: str, learners: dict, df: pd.DataFrame, d_cols, z_cols, folds):
    import doubleml

    from fanfit.learners import LearnerSpec

    x_cols = [c for c in df.columns if c.startswith("X")]
    data = doubleml.DoubleMLData(df, y_col="y", d_cols=d_cols, x_cols=x_cols, z_cols=z_cols or None)
    est = {k: LearnerSpec.parse(v).build() for k, v in learners.items()}
    cls = {"plr": doubleml.DoubleMLPLR, "irm": doubleml.DoubleMLIRM,
           "pliv": doubleml.DoubleMLPLIV, "iivm": doubleml.DoubleMLIIVM}[model]  # fmt: skip
    obj = cls(data, **est, n_folds=int(folds.max()) + 1, n_rep=int(folds.shape[1]), score=score,
              draw_sample_splitting=False)  # fmt: skip
    obj.set_sample_splitting(dml.folds_to_smpls(folds))
    obj.fit()
    return obj


def test_pipeline_equals_doubleml_for_every_model_and_score(local_client):
    # GIVEN every case's data and folds drawn from the seed, WHEN the jobs run on the stack a few at a
    # time (so that the functions' warm environments are reused rather than a cold one started per
    # job), THEN each job's coef and se equal DoubleML's with the same folds to rtol 1e-9.
    for start in range(0, len(CASES), JOBS_AT_ONCE):
        jobs = []
        for model, score, learners, n_rep, n_treat in CASES[start : start + JOBS_AT_ONCE]:
            df = _frame(model, n_treat)
            d_cols = ["d"] if n_treat == 1 else ["d", "d2"]
            z_cols = ["Z1"] if model == "pliv" else (["z"] if model == "iivm" else [])
            folds = dml.draw_folds(len(df), 3, n_rep, seed=7)
            job = local_client.submit_estimate(
                df, model=model, score=score, y="y", d=d_cols, z=z_cols or None,
                x=[c for c in df.columns if c.startswith("X")], n_folds=3, n_rep=n_rep, seed=7,
                folds=folds, max_concurrency=2, **learners,
            )  # fmt: skip
            jobs.append((job, (model, score, learners, df, d_cols, z_cols, folds)))
        for job, (model, score, learners, df, d_cols, z_cols, folds) in jobs:
            res = job.result(timeout=600)
            ref = _doubleml(model, score, learners, df, d_cols, z_cols, folds)
            label = f"{model}/{score}/n_rep={folds.shape[1]}/n_treat={len(d_cols)}"
            np.testing.assert_allclose(res.coef, ref.coef, rtol=1e-9, atol=0, err_msg=label)
            np.testing.assert_allclose(res.se, ref.se, rtol=1e-9, atol=0, err_msg=label)
            np.testing.assert_allclose(res.all_coef, ref.all_coef, rtol=1e-9, atol=0, err_msg=label)
            assert list(res.summary.columns) == list(ref.summary.columns), label
            # ... and every learner's out-of-sample loss (n_rep x n_treat) equals DoubleML's nuisance_loss
            assert set(res.nuisance_loss) == set(ref.nuisance_loss), label
            for key, loss in ref.nuisance_loss.items():
                np.testing.assert_allclose(res.nuisance_loss[key], loss, rtol=0, atol=1e-12,
                                           err_msg=f"{label} {key}")  # fmt: skip


def test_401k_through_the_pipeline_with_seeded_forests(local_client):
    # GIVEN the 401(k) data and seeded random forests
    learner = 'RandomForestRegressor:{"n_estimators": 20, "max_depth": 6}'
    opts = dict(model="plr", y="net_tfa", d="e401", x=X_401K, ml_l=learner, ml_m=learner,
                n_folds=5, n_rep=2, seed=42)  # fmt: skip
    # WHEN the job runs twice
    first = local_client.estimate(DATA_401K, **opts)
    second = local_client.estimate(DATA_401K, **opts)
    # THEN the estimate is the known positive effect of 401(k) eligibility on net financial assets
    # (Chernozhukov et al. 2018 report about 9,000 USD), identical on a rerun, with every field filled
    assert 5_000 < first.coef[0] < 13_000 and 0 < first.se[0] < 3_000
    assert first.coef[0] == second.coef[0] and first.se[0] == second.se[0]
    assert first.all_coef.shape == (1, 2) and first.n_obs == 9915
    # ... printed as DoubleML prints a fitted model, the learners' losses and the run included
    text = str(first)
    assert text.startswith("================== DoubleMLPLR Object ==================")
    assert "Learner ml_l RMSE: [[" in text and "Covariates: ['age'" in text and "Seed: 42" in text
    out = first.to_dict()
    assert set(out) >= {"coef", "se", "t_stat", "pval", "ci_95", "all_coef", "all_se", "n_obs",
                        "n_folds", "n_rep", "model", "score", "execution_arn", "timings"}  # fmt: skip
    t = out["timings"]
    assert t["crossfit_s"] > 0 and t["prepare_s"] > 0 and t["aggregate_s"] > 0
    assert sum(s["n_units"] for s in t["shards"]) == 2 * 5 * 2
    assert t["billed_gb_s"] > 0 and t["lambda_cost_usd"] > 0


def test_cli_prints_one_json_object(local_stack_env, tmp_path):
    # GIVEN a running local stack WHEN the CLI estimates with --output json THEN stdout is exactly one
    # JSON object with DoubleML's fields and the logs are on stderr
    cmd = [sys.executable, "-m", "fanfit.cli", "estimate", "--data", str(DATA_401K), "--model", "irm",
           "--y", "net_tfa", "--d", "e401", "--x", ",".join(X_401K), "--ml-g", LIN,
           "--ml-m", 'LogisticRegression:{"max_iter": 1000}', "--n-folds", "2", "--seed", "1",
           "--output", "json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=local_stack_env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["model"] == "irm" and out["score"] == "ATE" and "e401" in out["coef"]
    assert out["execution_arn"].startswith("arn:aws:states:")
    # ... with DoubleML's nuisance_loss: each IRM learner's loss per repetition and treatment
    assert set(out["nuisance_loss"]) == {"ml_g0", "ml_g1", "ml_m"}
    assert all(np.array(v).shape == (1, 1) for v in out["nuisance_loss"].values())
    assert out["nuisance_metric"]["ml_m"] == "Log Loss"


def _bad_frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    df = pd.DataFrame(rng.normal(size=(60, 3)), columns=["x1", "x2", "y"])
    df["d"] = rng.integers(0, 2, size=60).astype(float)
    df["z"] = rng.integers(0, 2, size=60).astype(float)
    df["dc"] = rng.normal(size=60)
    df["name"] = "a"
    return df


BAD_INPUTS = [
    # (options, exception, text the message must name)
    (dict(y="nope", d="d", x=["x1"]), errors.InvalidDataError, "nope"),
    (dict(y="y", d="d", x=["name"]), errors.InvalidDataError, "name"),
    (dict(y="y", d="d", x=["x1"], model="irm", ml_g=LIN, ml_m=LOGIT, d_override="dc"),
     errors.InvalidDataError, "dc"),
    (dict(y="y", d="d", z="dc", x=["x1"], model="iivm", ml_g=LIN, ml_m=LOGIT, ml_r=LOGIT),
     errors.InvalidDataError, "dc"),
    (dict(y="y", d="d", x=["x1"], n_folds=1), errors.InvalidJobError, "n_folds"),
    (dict(y="y", d="d", x=["x1"], n_folds=61), errors.InvalidDataError, "n_folds"),
    (dict(y="y", d="d", x=["x1"], ml_l="EvilRegressor"), errors.InvalidLearnerError, "EvilRegressor"),
    (dict(y="y", d="d", x=["x1"], ml_l='LinearRegression:{"no_such": 1}'), errors.InvalidLearnerError,
     "no_such"),
    (dict(y="y", d="d", x=["x1"], ml_l=LOGIT), errors.InvalidLearnerError, "ml_l"),
    (dict(y="y", d="dc", x=["x1"], model="irm", ml_g=LIN, ml_m=LIN), errors.InvalidLearnerError, "ml_m"),
]  # fmt: skip


@pytest.mark.parametrize("options,exc,text", BAD_INPUTS)
def test_bad_input_is_rejected_by_the_client_with_a_named_error(local_client, options, exc, text):
    # GIVEN data with a non-numeric column, a continuous treatment and a continuous instrument
    df = _bad_frame()
    options = dict(options)
    if options.pop("d_override", None):
        options["d"] = "dc"
    options.setdefault("ml_l", LIN)
    options.setdefault("ml_m", LIN)
    if options.get("model") in ("irm", "iivm"):
        options.pop("ml_l")
    # WHEN the job is submitted THEN a typed error names the column or option
    with pytest.raises(exc, match=text):
        local_client.submit_estimate(df, **options)


@pytest.mark.parametrize("folds_text,text", [
    ("r0\n0\n1\n", "rows"),                   # wrong number of rows
    ("\n".join(["r0"] + ["7"] * 60), "fold"),  # a fold index out of range
])  # fmt: skip
def test_a_folds_file_that_does_not_fit_is_rejected(local_client, tmp_path, folds_text, text):
    path = tmp_path / "folds.csv"
    path.write_text(folds_text)
    with pytest.raises(errors.InvalidFoldsError, match=text):
        local_client.submit_estimate(_bad_frame(), y="y", d="d", x=["x1"], ml_l=LIN, ml_m=LIN,
                                     n_folds=2, folds=str(path))  # fmt: skip


@pytest.mark.parametrize("args,text", [
    (["--x", "nope"], "nope"),
    (["--x", "x1", "--ml-l", "EvilRegressor"], "EvilRegressor"),
    (["--x", "x1", "--n-folds", "1"], "--n-folds must be"),
    (["--x", "name"], "name"),
])  # fmt: skip
def test_bad_input_through_the_cli_exits_nonzero_naming_the_problem(
    local_stack_env, tmp_path, args, text
):
    csv = tmp_path / "bad.csv"
    _bad_frame().to_csv(csv, index=False)
    cmd = [sys.executable, "-m", "fanfit.cli", "estimate", "--data", str(csv), "--y", "y", "--d", "d",
           "--ml-l", LIN, "--ml-m", LIN, *args]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=local_stack_env)
    assert done.returncode == 2, done.stderr
    assert text in done.stderr and done.stdout == ""


def test_a_job_the_stack_rejects_fails_with_a_named_error_and_no_result(local_client):
    # GIVEN a job spec that bypasses the client's checks (a column the data lacks)
    from fanfit.client import build_spec

    df = _bad_frame()
    spec, columns = build_spec(y="y", d="d", x=["x1"], z=None, model="plr", score=None,
                               learners={"ml_l": LIN, "ml_m": LIN}, n_folds=2, n_rep=1, seed=0)  # fmt: skip
    key = local_client.store.put_data(columns, df[columns].to_numpy(dtype=float))
    body = spec.to_dict()
    body["x_cols"] = ["x_missing"]
    job_id = "rejected-" + str(np.random.default_rng().integers(1 << 30))
    spec_key = local_client.store.put_json(storage.spec_key(job_id), {"dml": body, "data_key": key})
    arn = local_client.sfn.start_execution(
        stateMachineArn=local_client.stack.estimate_state_machine_arn, name=job_id,
        input=json.dumps({"job_id": job_id, "spec_key": spec_key}),
    )["executionArn"]  # fmt: skip
    from fanfit.client import EstimateJob

    job = EstimateJob(local_client, job_id, arn)
    # WHEN it runs THEN the execution fails with InvalidDataError naming the column,
    with pytest.raises(errors.InvalidDataError, match="x_missing"):
        job.wait(timeout=300)
    # the job record says FAILED with that error, and no result object exists
    record = local_client.records.get(job_id)
    assert record["status"] == "FAILED" and record["error"] == "InvalidDataError"
    assert not local_client.store.exists(storage.result_key(job_id))


def test_clustered_pliv_and_one_sided_iivm_through_the_pipeline_equal_doubleml(local_client):
    # GIVEN DoubleML's two-way cluster data (12 x 12) for PLIV with folds the pipeline draws from
    # the seed, and the 401(k) data for IIVM (p401 instrumented by e401) with subgroups set
    import doubleml
    from doubleml.plm.datasets import make_pliv_multiway_cluster_CKMS2021

    np.random.seed(3)
    cdf = make_pliv_multiway_cluster_CKMS2021(N=12, M=12, dim_X=4, return_type="DataFrame")
    cx = [c for c in cdf.columns if c.startswith("X")]
    clusters = ["cluster_var_i", "cluster_var_j"]
    learners = {"ml_l": LIN, "ml_m": LIN, "ml_r": LIN}
    subgroups = {"always_takers": False, "never_takers": True}
    iivm_learners = {"ml_g": LIN, "ml_m": 'LogisticRegression:{"max_iter": 1000}',
                     "ml_r": 'LogisticRegression:{"max_iter": 1000}'}  # fmt: skip
    # WHEN both jobs run on the stack
    clustered = local_client.submit_estimate(
        cdf, model="pliv", y="Y", d="D", z="Z", x=cx, cluster_cols=clusters, n_folds=2, n_rep=1,
        seed=9, **learners,
    )  # fmt: skip
    iivm = local_client.submit_estimate(
        DATA_401K, model="iivm", y="net_tfa", d="p401", z="e401", x=X_401K, n_folds=3, seed=4,
        subgroups=subgroups, normalize_ipw=True, **iivm_learners,
    )  # fmt: skip
    res, res_iivm = clustered.result(timeout=600), iivm.result(timeout=600)
    # THEN the clustered estimate equals DoubleML's on the same (seed-drawn) cluster folds
    folds = dml.draw_cluster_folds(cdf[clusters].to_numpy(dtype=float), 2, 1, 9)
    smpls, smpls_cluster = dml.cluster_folds_to_smpls(folds, cdf[clusters].to_numpy(dtype=float), 2)
    obj = doubleml.DoubleMLPLIV(
        doubleml.DoubleMLData(cdf, "Y", "D", x_cols=cx, z_cols="Z", cluster_cols=clusters),
        **{k: LearnerSpec.parse(v).build() for k, v in learners.items()}, n_folds=2,
    )  # fmt: skip
    obj.set_sample_splitting(smpls, smpls_cluster)
    obj.fit()
    np.testing.assert_allclose(res.coef, obj.coef, rtol=1e-9, atol=0)
    np.testing.assert_allclose(res.se, obj.se, rtol=1e-9, atol=0)
    # and the one-sided IIVM equals DoubleML's with the same subgroups and folds on the Stata
    # file's data in float64 (a job from a file computes in float64, whatever the file's float32
    # columns; R's DoubleML does too): DoubleML on the job's predictions (external_predictions)
    # at 1e-9, its own fit within 1e-6
    df401 = pd.read_stata(DATA_401K).astype("float64")
    fitted = []
    for preds in (iivm.predictions(), None):
        ref = doubleml.DoubleMLIIVM(
            doubleml.DoubleMLData(df401, "net_tfa", "p401", x_cols=X_401K, z_cols="e401"),
            **{k: LearnerSpec.parse(v).build() for k, v in iivm_learners.items()}, n_folds=3,
            subgroups=subgroups, normalize_ipw=True,
        )  # fmt: skip
        ref.set_sample_splitting(dml.folds_to_smpls(dml.draw_folds(len(df401), 3, 1, 4)))
        fitted.append(ref.fit(external_predictions=preds))
    np.testing.assert_allclose(res_iivm.coef, fitted[0].coef, rtol=1e-9, atol=0)
    np.testing.assert_allclose(res_iivm.se, fitted[0].se, rtol=1e-9, atol=0)
    np.testing.assert_allclose(res_iivm.coef, fitted[1].coef, rtol=1e-6, atol=0)
