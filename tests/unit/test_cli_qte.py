"""``--model qte --quantiles [--score PQ|CVaR|LPQ]``: parsing, named errors, the jobs and the effects.

GIVEN the 401(k) data (binary e401) or DoubleML's IRM/IIVM data WHEN ``fanfit estimate --model
qte`` runs as a dry run or on a fake stack THEN bad options are refused naming
the option, one job per (quantile, treatment level) is started before any is awaited, and the
effects (Aggregate's combined result, read by the client) equal DoubleML 0.11.4's ``DoubleMLQTE``
own fit on the same folds at 1e-9 (the maths alone, from DoubleML's own scores:
test_combined.py).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fanfit import cli
from fanfit import dml as fdml
from fanfit.client import qte as cqte
from fanfit.client.options import EstimateOptions

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_iivm_data, make_irm_data  # noqa: E402
from fake_stack import FakeClient, patch_stack_client  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SIPP = str(ROOT / "examples" / "data" / "sipp1991.dta")
BASE = ["estimate", "--data", SIPP, "--y", "net_tfa", "--d", "e401", "--x", "age,inc",
        "--dry-run"]  # fmt: skip
QTE = ["--model", "qte", "--ml-g", "LogisticRegression", "--ml-m", "LogisticRegression"]
X_COLS = ["X1", "X2", "X3", "X4"]
#: DoubleML's score of each model of a part, and the outcome learner it takes.
ML_G = {"PQ": LogisticRegression, "CVaR": LinearRegression, "LPQ": LogisticRegression}


# ------------------------------------------------------------------------- parsing and errors
@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (QTE + ["--quantiles", "0.5,0.75"], 0,
         "fits: 4 pq jobs (quantiles x treatment levels 0, 1) x 5 fold units = 20 fold units"),
        (QTE + ["--quantiles", "0.5", "--score", "CVaR", "--ml-g", "LinearRegression"], 0,
         "2 cvar jobs"),
        (QTE, 2, "--quantiles must be given with model 'qte'"),
        (QTE + ["--quantiles", "0.5,x"], 2, "--quantiles must be numbers in (0, 1), got 'x'"),
        (QTE + ["--quantiles", "0.25,1"], 2, "--quantiles must be numbers in (0, 1), got 1.0"),
        (QTE + ["--quantiles", "0.5,0.25,0.5"], 2, "--quantiles must differ: 0.5 is given twice"),
        (QTE + ["--quantiles", "0.5", "--treatment", "1"], 2,
         "--treatment must be left out with model 'qte'"),
        (QTE + ["--quantiles", "0.5", "--score", "ATE"], 2, "--score must be PQ, CVaR or LPQ"),
        (QTE + ["--quantiles", "0.5", "--score", "LPQ"], 2,
         "--z must name exactly one binary instrument column with score 'LPQ'"),
        (QTE + ["--quantiles", "0.5", "--z", "db"], 2, "--z must be left out with score 'PQ'"),
        (QTE + ["--quantiles", "0.5", "--d", "age"], 2,
         "model 'qte' needs a binary treatment: 'age' holds"),
        (QTE + ["--quantiles", "0.5", "--d", "e401,p401"], 2,
         "model 'qte' takes one binary treatment column d, got 2"),
        (QTE + ["--quantiles", "0.5", "--cluster-cols", "fsize"], 2,
         "does not take --cluster-cols"),
        (QTE + ["--quantiles", "0.5", "--ml-m", "NoSuchLearner"], 2, "NoSuchLearner"),
        (["--model", "irm", "--ml-g", "LinearRegression", "--ml-m", "LogisticRegression",
          "--quantiles", "0.5,0.75"], 2, "takes one quantile"),
    ],
    ids=["valid", "cvar", "missing", "not-a-number", "out-of-range", "duplicate", "treatment",
         "bad-score", "lpq-no-z", "pq-with-z", "not-binary", "two-treatments", "clusters",
         "bad-learner", "other-model"],
)  # fmt: skip
def test_dry_run_names_the_option(extra, code, message, capsys) -> None:
    # WHEN the dry run runs THEN its exit code and output name the option
    rc = cli.main(BASE + extra)
    out = capsys.readouterr()
    assert message in out.out + out.err
    assert rc == code


def test_a_treatment_without_one_level_is_refused(tmp_path, capsys) -> None:
    # GIVEN a binary treatment whose every row is treated WHEN qte is checked THEN the error
    # names the column and the missing level
    path = tmp_path / "treated.csv"
    pd.DataFrame({"y": [1.0, 2.0, 3.0, 4.0], "d": [1, 1, 1, 1], "x": [0.1, 0.2, 0.3, 0.4]}).to_csv(
        path, index=False
    )
    rc = cli.main(["estimate", "--data", str(path), "--y", "y", "--d", "d", "--dry-run", *QTE,
                   "--quantiles", "0.5"])  # fmt: skip
    assert rc == 2
    assert "'d' has no row with value 0" in capsys.readouterr().err


def test_dry_run_of_lpq_checks_every_part(tmp_path, capsys) -> None:
    # GIVEN DoubleML's IIVM data (binary instrument z) WHEN a QTE of score LPQ is checked as JSON
    np.random.seed(1)
    path = tmp_path / "iivm.csv"
    make_iivm_data(n_obs=200, dim_x=4, return_type="DataFrame").to_csv(path, index=False)
    rc = cli.main(["estimate", "--data", str(path), "--y", "y", "--d", "d", "--z", "z", "--dry-run",
                   *QTE, "--quantiles", "0.3,0.6,0.9", "--score", "LPQ", "--n-rep", "2",
                   "--boot-method", "wild", "--output", "json"])  # fmt: skip
    # THEN six lpq jobs of 2 stages of 2 x 5 fold units, the bootstrap the effects'
    assert rc == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["model"], info["score"], info["jobs"], info["n_fits"]) == ("qte", "LPQ", 6, 120)
    assert info["quantiles"] == "0.3, 0.6, 0.9" and info["boot_method"] == "wild"


def test_part_options_are_one_job_per_quantile_and_level() -> None:
    # GIVEN qte options of score CVaR with a bootstrap WHEN split into parts
    options = EstimateOptions(data=SIPP, model="qte", y="net_tfa", d="e401", x="age", n_rep=3,
                              quantiles="0.7,0.2", score="CVaR", boot_method="normal",
                              ml_g="Ridge")  # fmt: skip
    parts = cqte.part_options(options)
    # THEN per quantile (given order) level 0 then 1, each a cvar job without the bootstrap
    assert [(q, t) for q, t, _ in parts] == [(0.7, 0), (0.7, 1), (0.2, 0), (0.2, 1)]
    assert [(o.model, o.score, o.treatment, o.quantiles, o.boot_method) for _, _, o in parts] == [
        ("cvar", None, 0, 0.7, None), ("cvar", None, 1, 0.7, None),
        ("cvar", None, 0, 0.2, None), ("cvar", None, 1, 0.2, None)]  # fmt: skip
    assert all(o.n_rep == 3 and o.ml_g == "Ridge" for _, _, o in parts)


# ------------------------------------------------------------------------- DoubleML's QTE
def _irm_frame(score: str, n_obs: int, seed: int) -> pd.DataFrame:
    np.random.seed(seed)
    if score == "LPQ":
        return make_iivm_data(n_obs=n_obs, dim_x=4, theta=0.5, alpha_x=1.0, return_type="DataFrame")
    return make_irm_data(n_obs=n_obs, dim_x=4, theta=0.5, return_type="DataFrame")


def _doubleml_qte(frame, score, quantiles, folds, normalize_ipw=True):
    """DoubleML's DoubleMLQTE fitted in-process on the given folds."""
    z = "z" if score == "LPQ" else None
    data = dml.DoubleMLData(frame, "y", "d", x_cols=X_COLS, z_cols=z)
    obj = dml.DoubleMLQTE(data, ML_G[score](), LogisticRegression(), quantiles=quantiles,
                          n_folds=int(folds.max()) + 1, n_rep=folds.shape[1], score=score,
                          normalize_ipw=normalize_ipw, draw_sample_splitting=False)  # fmt: skip
    obj.set_sample_splitting(fdml.folds_to_smpls(folds))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obj.fit()
    return obj


# ------------------------------------------------------------------------- jobs on a fake stack
@pytest.mark.parametrize(("score", "n_rep"), [("PQ", 2), ("CVaR", 1), ("LPQ", 1)])
def test_submit_qte_starts_every_part_then_equals_doubleml(score, n_rep) -> None:
    # GIVEN DoubleML's data and qte options at two quantiles, 2 folds x n_rep repetitions
    frame = _irm_frame(score, 300, seed=11)
    options = EstimateOptions(
        data=frame, model="qte", y="y", d="d", x=X_COLS, z="z" if score == "LPQ" else None,
        n_folds=2, n_rep=n_rep, seed=4, ml_g=ML_G[score].__name__, ml_m="LogisticRegression",
        quantiles="0.3,0.6", score=score, normalize_ipw=True, boot_method="normal",
        n_rep_boot=100,
    )  # fmt: skip
    client = FakeClient()
    # WHEN submitted on the fake stack and awaited
    jobs = cqte.submit_qte(client, options=options)
    result = jobs.result()
    # THEN one job of four parts, one per (quantile, level), was started, with one folds
    assert [kind for kind, _ in client.log] == ["submit"] + ["result"] * 4  # each part read once
    model = cqte.SCORES[score]
    assert client.parts_submitted == [("qte", jobs.labels)] and len(jobs.job_ids) == 1
    assert [(c.spec.model, c.spec.quantile, c.spec.treatment) for c in client.parts_checked] == [
        (model, 0.3, 0), (model, 0.3, 1), (model, 0.6, 0), (model, 0.6, 1)]  # fmt: skip
    folds = jobs.jobs[0].folds()
    assert all(np.array_equal(j.folds(), folds) for j in jobs.jobs)
    # AND the effects are DoubleMLQTE's own fit on the same folds (the jobs equal DoubleML at 1e-9)
    theirs = _doubleml_qte(frame, score, [0.3, 0.6], folds)
    for attr in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(getattr(result, attr), getattr(theirs, attr), rtol=1e-9,
                                   err_msg=attr)  # fmt: skip
    np.testing.assert_allclose(result.summary.to_numpy(), theirs.summary.to_numpy(), rtol=1e-9)
    np.random.seed(4)
    theirs.bootstrap(method="normal", n_rep_boot=100)
    np.testing.assert_allclose(result.confint(joint=True).to_numpy(),
                               theirs.confint(joint=True).to_numpy(), rtol=1e-9)  # fmt: skip
    # AND the printout is DoubleMLQTE's, then the bands and the jobs; the JSON has both
    text = str(result)
    assert text.startswith("================== DoubleMLQTE Object ==================")
    assert "confint(joint=True), normal bootstrap, 100 draws" in text
    assert text.count("est-fake-") == 4
    out = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert (out["model"], out["score"], out["quantiles"]) == ("qte", score, [0.3, 0.6])
    assert [(p["quantile"], p["treatment"], p["model"]) for p in out["parts"]] == [
        (0.3, 0, model), (0.3, 1, model), (0.6, 0, model), (0.6, 1, model)]  # fmt: skip
    assert len(out["ci_joint_95"]) == 2


@pytest.fixture
def fake_stack(monkeypatch):
    """``fanfit estimate`` against the fake client (no stack)."""
    return patch_stack_client(monkeypatch)


def _cli_args(tmp_path, *extra):
    path = tmp_path / "irm.csv"
    _irm_frame("PQ", 200, seed=6).to_csv(path, index=False)
    return ["estimate", "--data", str(path), "--model", "qte", "--y", "y", "--d", "d",
            "--quantiles", "0.4,0.6", "--ml-g", "LogisticRegression", "--ml-m",
            "LogisticRegression", "--n-folds", "2", "-q", *extra]  # fmt: skip


def test_the_command_prints_doublemlqte(tmp_path, fake_stack, capsys, monkeypatch) -> None:
    # GIVEN a CSV with a binary treatment, and pandas as in a 30-column terminal (max_columns 0)
    import pandas as pd

    monkeypatch.setenv("COLUMNS", "30")
    # WHEN fanfit estimate --model qte runs (fake stack)
    with pd.option_context("display.max_columns", 0):
        assert cli.main(_cli_args(tmp_path)) == 0
    out = capsys.readouterr().out
    # THEN no table is cut by pandas
    assert "..." not in out and "rows x" not in out
    # AND one job ran a pq part per (quantile, level), and the printout is DoubleMLQTE's
    specs = [c.spec for c in fake_stack.parts_checked]
    assert [(s.model, s.quantile, s.treatment) for s in specs] == [
        ("pq", 0.4, 0), ("pq", 0.4, 1), ("pq", 0.6, 0), ("pq", 0.6, 1)]  # fmt: skip
    assert out.startswith("================== DoubleMLQTE Object ==================")
    assert "Potential quantiles" in out and "Joint bands" not in out


def test_the_command_as_json_and_detached(tmp_path, fake_stack, capsys) -> None:
    # WHEN --output json THEN one JSON object with the effects and the parts
    assert cli.main(_cli_args(tmp_path, "--output", "json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "qte" and len(out["coef"]) == 2 and "ci_joint_95" not in out
    assert [p["job_id"] for p in out["parts"]] == ["est-fake-1"] * 4  # one job
    # AND --detach prints the job's id without waiting; as JSON with the quantiles
    assert cli.main(_cli_args(tmp_path, "--detach")) == 0
    assert capsys.readouterr().out.split() == ["est-fake-2"]
    assert cli.main(_cli_args(tmp_path, "--detach", "--output", "json")) == 0
    assert json.loads(capsys.readouterr().out) == {
        "job_id": "est-fake-3", "quantiles": [0.4, 0.6], "treatment_levels": [0, 1]}  # fmt: skip
