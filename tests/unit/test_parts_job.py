"""A model DoubleML fits as several models runs as one job of several parts (issue 28).

GIVEN a QTE (two quantiles x two treatment levels, PQ with 3 repetitions: two stages and
DoubleML's chain of start values between them, per part) and an APOS over three levels, WHEN the
client submits each (moto) and the steps run as the state machine runs them (Prepare, Schedule,
CrossFit, Aggregate), THEN there is one spec, one plan, one job record and one result; each
stage's units hold every part's, so one barrier serves them all; each part's chain of start
values is its own; and the effects equal DoubleML 0.11.4's DoubleMLQTE and DoubleMLAPOS on the
same folds at 1e-9.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from fanfit import dml, errors, storage
from fanfit.client import apos as capos
from fanfit.client import qte as cqte
from fanfit.client.estimate import EstimateJob
from fanfit.client.options import EstimateOptions

doubleml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_irm_data  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

X_COLS = ["X1", "X2", "X3", "X4"]
RTOL = 1e-9


@pytest.fixture
def client(moto_stack, moto_client, monkeypatch) -> Any:
    # the test runs the execution's steps itself: the handles need not wait for the execution
    monkeypatch.setattr(EstimateJob, "wait", lambda self, timeout=0.0, progress=False: None)
    with moto_stack():
        yield moto_client()


def _run_steps(client: Any, job_id: str) -> list[Any]:
    """Prepare, Schedule, CrossFit and Aggregate of ``job_id`` as the state machine runs them."""
    from pipeline_steps import run_steps

    throughput = storage.ThroughputRecords("fanfit-throughput", client.session.client("dynamodb"))
    return run_steps(client.store, client.records, throughput, job_id)


def _irm_frame(n_obs: int, seed: int) -> Any:
    np.random.seed(seed)
    return make_irm_data(n_obs=n_obs, dim_x=4, theta=0.5, return_type="DataFrame")


def test_a_qte_is_one_job_whose_stages_serve_every_part(client) -> None:
    # GIVEN a QTE at two quantiles, PQ, 2 folds x 3 repetitions (two stages per part)
    frame = _irm_frame(300, seed=11)
    options = EstimateOptions(
        data=frame, model="qte", y="y", d="d", x=X_COLS, n_folds=2, n_rep=3, seed=4,
        ml_g="LogisticRegression", ml_m="LogisticRegression", quantiles="0.4,0.7",
        normalize_ipw=True, units_per_shard=5, boot_method="wild", n_rep_boot=100,
    )  # fmt: skip
    # WHEN the client submits it and the steps run
    jobs = cqte.submit_qte(client, options=options)
    (job_id,) = jobs.job_ids
    planned = _run_steps(client, job_id)
    # THEN one job: one spec with four parts, two stages whose units are every part's
    spec = client.store.get_json(storage.spec_key(job_id))
    assert spec["model"] == "qte" and [p["label"] for p in spec["parts"]] == jobs.labels
    assert [p.n_units for p in planned] == [4 * 3 * 2] * 2
    units = client.store.get_json(storage.units_key(job_id, 1))
    assert sorted({u.get("part", 0) for u in units}) == [0, 1, 2, 3]
    # AND each part's chain of start values is its own (stage 1's inputs differ by part)
    inputs = [client.store.get_json(storage.stage_inputs_key(job_id, 1, k)) for k in range(4)]
    thetas = [np.asarray(i["fold_scalars"]["theta_ipw"]) for i in inputs]
    assert all(t.shape == (1, 3, 2) for t in thetas)
    assert not np.allclose(thetas[0], thetas[2])  # quantile 0.4 against 0.7, treatment 0
    # AND one job record, SUCCEEDED
    assert client.records.get(job_id)["status"] == "SUCCEEDED"
    # AND the effects are DoubleMLQTE's own fit on the job's folds
    result = jobs.result()
    folds = jobs.jobs[0].folds()
    data = doubleml.DoubleMLData(frame, "y", "d", x_cols=X_COLS)
    theirs = doubleml.DoubleMLQTE(data, LogisticRegression(), LogisticRegression(),
                                  quantiles=[0.4, 0.7], n_folds=2, n_rep=3, normalize_ipw=True,
                                  draw_sample_splitting=False)  # fmt: skip
    theirs.set_sample_splitting(dml.folds_to_smpls(folds))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.fit()
    for attr in ("coef", "se", "all_coef", "all_se", "pval"):
        np.testing.assert_allclose(getattr(result, attr), getattr(theirs, attr), rtol=RTOL,
                                   err_msg=attr)  # fmt: skip
    # AND Aggregate wrote them in result.json's combined, with the joint bands of DoubleML's
    # bootstrap after np.random.seed(the job's seed)
    combined = client.store.get_json(storage.result_key(job_id))["combined"]
    assert (combined["model"], combined["quantiles"], combined["seed"]) == ("qte", [0.4, 0.7], 4)
    np.random.seed(4)
    theirs.bootstrap(method="wild", n_rep_boot=100)
    np.testing.assert_allclose(combined["effects"]["ci_joint_95"],
                               theirs.confint(joint=True).to_numpy(), rtol=RTOL)  # fmt: skip
    # AND the job's own printout (fanfit result JOB) lists every part's estimate
    text = str(jobs.jobs[0].job.result())
    assert "Parts of this job" in text and all(label in text for label in jobs.labels)
    assert "Combined result" in text and "joint 97.5 %" in text
    # AND each part's own estimate is DoubleML's model of that (quantile, level)
    models = [m for pair in zip(theirs.modellist_0, theirs.modellist_1) for m in pair]
    for part, model in zip(jobs.jobs, models, strict=True):
        np.testing.assert_allclose(part.result().all_coef, model.all_coef, rtol=RTOL)


def test_an_apos_is_one_job_and_its_contrast_is_doublemls(client) -> None:
    # GIVEN a treatment of three levels and apos options over them
    rng = np.random.default_rng(5)
    n = 240
    x = rng.normal(size=(n, 4))
    d = rng.integers(0, 3, size=n)
    y = x @ np.array([0.5, -0.3, 0.2, 0.1]) + 0.7 * d + rng.normal(size=n)
    import pandas as pd

    frame = pd.DataFrame(x, columns=X_COLS).assign(y=y, d=d.astype(float))
    options = EstimateOptions(data=frame, model="apos", y="y", d="d", x=X_COLS, n_folds=3,
                              n_rep=2, seed=4, ml_g="LinearRegression",
                              ml_m="LogisticRegression", treatment_levels="0,1,2")  # fmt: skip
    # WHEN the client submits it and the steps run
    jobs = capos.submit_apos(client, options=options)
    (job_id,) = jobs.job_ids
    planned = _run_steps(client, job_id)
    # THEN one stage holds the three levels' units, and the contrast is DoubleMLAPOS's
    assert len(planned) == 1 and planned[0].n_units == 3 * 2 * 3 * 3  # levels x reps x keys x folds
    result = jobs.result()
    data = doubleml.DoubleMLData(frame, "y", "d", x_cols=X_COLS)
    theirs = doubleml.DoubleMLAPOS(data, LinearRegression(), LogisticRegression(),
                                   treatment_levels=[0, 1, 2], n_folds=3, n_rep=2,
                                   draw_sample_splitting=False)  # fmt: skip
    theirs.set_sample_splitting(dml.folds_to_smpls(jobs.jobs[0].folds()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs.fit()
    np.testing.assert_allclose([r.coef[0] for r in result.results], theirs.coef, rtol=RTOL)
    contrast = theirs.causal_contrast(reference_levels=0)
    assert result.contrast is not None
    np.testing.assert_allclose(result.contrast.coef, contrast.thetas, rtol=RTOL)
    np.testing.assert_allclose(result.contrast.se, contrast.ses, rtol=RTOL)
    # AND result.json holds them as its combined result, without joint bands (no bootstrap)
    combined = client.store.get_json(storage.result_key(job_id))["combined"]
    assert combined["contrasts"]["names"] == ["1 vs 0", "2 vs 0"]
    assert "ci_joint_95" not in combined["effects"] and "boot_method" not in combined
    # AND fanfit jobs --all lists the job once, its three levels one row
    assert [h["job_id"] for h in client.history()] == [job_id]


def test_parts_that_differ_in_learners_or_splitting_are_refused(client) -> None:
    # GIVEN two checked parts with other learners
    from fanfit.client.check import check_estimate

    frame = _irm_frame(200, seed=2)
    base = dict(model="pq", y="y", d="d", x=X_COLS, n_folds=2, ml_m="LogisticRegression",
                quantiles=0.5, treatment=1)  # fmt: skip
    first = check_estimate(frame, ml_g="LogisticRegression", **base)
    other = check_estimate(frame, ml_g='LogisticRegression:{"C": 0.5}', **base)
    options = EstimateOptions.from_keywords(data=frame, ml_g="LogisticRegression", **base)
    job = client.submit_parts_job("qte", ["a", "b"], [first, other], [options, options])
    # WHEN Prepare plans the job THEN it fails naming the part and the option
    from fanfit.jobs.estimate.prepare import prepare_stage

    with pytest.raises(errors.InvalidJobError, match="part 1 has other learners than part 0"):
        prepare_stage(client.store, client.records, job.job_id, storage.spec_key(job.job_id), 0)
    # AND a label per part is required
    with pytest.raises(errors.InvalidJobError, match="one label and one options per part"):
        client.submit_parts_job("qte", ["a"], [first, other], [options, options])


@pytest.mark.parametrize("model", ["qte", "apos"])
def test_plan_only_plans_the_job_of_several_parts(client, monkeypatch, tmp_path, capsys,
                                                  model) -> None:  # fmt: skip
    # GIVEN a stack whose outputs name its CrossFit size and ThroughputTable (nothing measured),
    # and a QTE at two quantiles (PQ, 2 folds x 2 repetitions: two stages per part) or an APOS
    # over three levels (one stage), as a CSV
    import contextlib
    import json

    from fanfit import cli
    from fanfit.client.estimate import plan as cestimate

    monkeypatch.setattr(cestimate, "_stack_outputs", lambda c: {
        "CrossFitFunctionMemorySizes": "1769", "ThroughputTableName": "fanfit-throughput",
        "GpuWorkerEnabled": "false"})  # fmt: skip
    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(client))
    path = tmp_path / "data.csv"
    if model == "qte":
        _irm_frame(200, seed=3).to_csv(path, index=False)
        extra = ["--quantiles", "0.4,0.7", "--ml-g", "LogisticRegression"]
        parts, units = 4, [[4, 4]] * 4  # each part: 2 repetitions x 2 folds, per stage
    else:
        rng = np.random.default_rng(2)
        import pandas as pd

        frame = pd.DataFrame(rng.normal(size=(150, 4)), columns=X_COLS)
        frame.assign(y=rng.normal(size=150), d=rng.integers(0, 3, size=150)).to_csv(
            path, index=False
        )
        extra = ["--treatment-levels", "0,1,2", "--ml-g", "LinearRegression"]
        parts, units = 3, [[12]] * 3  # each level: 3 learner keys x 2 repetitions x 2 folds
    argv = ["estimate", "--data", str(path), "--model", model, "--y", "y", "--d", "d", "--x",
            ",".join(X_COLS), "--ml-m", "LogisticRegression", "--n-folds", "2", "--n-rep", "2",
            *extra, "--plan-only"]  # fmt: skip
    # WHEN fanfit estimate --model qte|apos --plan-only runs, as JSON
    assert cli.main([*argv, "--output", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # THEN one job of several parts is planned: each part's units per stage, and each stage's
    # first wave holding every part's units (a probe: nothing measured)
    assert doc["model"] == model and len(doc["parts"]) == parts
    assert [p["n_units"] for p in doc["parts"]] == units
    n_stages = len(units[0])
    assert [s["n_units"] for s in doc["stages"]] == [parts * units[0][s] for s in range(n_stages)]
    assert all(s["shards"][0]["probe"] for s in doc["stages"]) and doc["predicted_wall_s"] > 0
    # AND nothing was started
    assert client.records.get("plan-only") is None and not client.history()
    # AND the printout names the parts and their units per stage, then the stages
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert f"one job of {parts} parts (model {model})" in out
    assert all(f"stage {s}: {parts * units[0][s]} fit(s)" in out for s in range(n_stages))
    assert out.splitlines()[-2].startswith("predicted_wall_s: ")
