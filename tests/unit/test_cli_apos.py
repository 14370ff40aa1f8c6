"""``--model apos --treatment-levels``: parsing, named errors, the jobs per level and the contrast.

GIVEN the 401(k) data (binary e401) or DoubleML's discrete-treatment data WHEN ``fanfit estimate
--model apos`` runs as a dry run or on a fake stack THEN bad levels are refused
naming the option, one job with an ``apo`` part per level is started, and the causal contrast
(Aggregate's combined result, read by the client) equals DoubleML 0.11.4's
``DoubleMLAPOS.causal_contrast`` at 1e-12 (the maths alone: test_combined.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fanfit import cli, errors
from fanfit import dml as fdml
from fanfit.client import apos as capos
from fanfit.client.options import EstimateOptions, parse_treatment_levels

dml = pytest.importorskip("doubleml")

from doubleml.irm.datasets import make_irm_data_discrete_treatments  # noqa: E402
from fake_stack import FakeClient as _FakeClient  # noqa: E402
from fake_stack import patch_stack_client  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SIPP = str(ROOT / "examples" / "data" / "sipp1991.dta")
BASE = ["estimate", "--data", SIPP, "--y", "net_tfa", "--d", "e401", "--x", "age,inc",
        "--dry-run"]  # fmt: skip
APOS = ["--model", "apos", "--ml-g", "LinearRegression", "--ml-m", "LogisticRegression"]
X_COLS = [f"x{i}" for i in range(5)]


# ------------------------------------------------------------------------- parsing and errors
@pytest.mark.parametrize(
    ("value", "levels"),
    [("0,1,2", (0.0, 1.0, 2.0)), (" 2, 0.5 ", (2.0, 0.5)), ([0, 1], (0.0, 1.0)),
     (np.array([3, 1]), (3.0, 1.0)), ("1", (1.0,)), (2, (2.0,))],
)  # fmt: skip
def test_levels_are_parsed_in_order(value, levels) -> None:
    # WHEN levels are parsed THEN they are floats in the given order
    assert parse_treatment_levels(value) == levels


@pytest.mark.parametrize(
    ("value", "message"),
    [("0,a", "'a' is not a finite number"), ("0,,1", "'' is not a finite number"),
     ("", "at least one treatment level"), ([], "at least one treatment level"),
     ("0,nan", "'nan' is not a finite number"), ([0, True], "True is not a finite number"),
     ("0,1,0", "names level 0 twice"), ([1, 1.0], "names level 1 twice")],
)  # fmt: skip
def test_bad_levels_are_named(value, message) -> None:
    # WHEN bad levels are parsed THEN the InvalidJobError names the option and the fault
    with pytest.raises(errors.InvalidJobError, match="treatment_levels") as info:
        parse_treatment_levels(value)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (APOS + ["--treatment-levels", "0,1"], 0, "treatment_levels: 0, 1"),
        (APOS, 2, "model 'apos' needs --treatment-levels"),
        (APOS + ["--treatment-levels", "0,x"], 2, "--treatment-levels must be numbers"),
        (APOS + ["--treatment-levels", "1,0,1"], 2, "--treatment-levels names level 1 twice"),
        (APOS + ["--treatment-levels", "0,7"], 2,
         "--treatment-levels: level 7 is not a value of 'e401' (it holds 0, 1)"),
        (APOS + ["--treatment-levels", "0,1", "--treatment-level", "1"], 2,
         "--treatment-level is an option of model 'apo'"),
        (APOS + ["--treatment-levels", "0,1", "--cluster-cols", "age"], 2,
         "--cluster-cols is not supported with model 'apos'"),
        (["--model", "apo", "--ml-g", "LinearRegression", "--ml-m", "LogisticRegression",
          "--treatment-levels", "0,1"], 2, "--treatment-levels is an option of model 'apos' only"),
        (APOS + ["--treatment-levels", "0,1", "--ml-m", "NoSuchLearner"], 2, "NoSuchLearner"),
    ],
    ids=["valid", "missing", "not-a-number", "duplicate", "absent-level", "with-treatment-level",
         "clusters", "other-model", "bad-learner"],
)  # fmt: skip
def test_dry_run_names_the_option(extra, code, message, capsys) -> None:
    # WHEN the dry run runs THEN its exit code and output name the option
    rc = cli.main(BASE + extra)
    out = capsys.readouterr()
    assert message in out.out + out.err
    assert rc == code


def test_dry_run_counts_the_jobs_and_fits(capsys) -> None:
    # WHEN a valid apos dry run prints THEN it says one apo job per level and the fits of each
    assert cli.main(BASE + APOS + ["--treatment-levels", "1,0"]) == 0
    out = capsys.readouterr().out
    assert "jobs: 2" in out and "model: apos" in out
    assert "fits: 2 apo jobs (one per level) x 15 fits = 30 fits" in out


def test_level_options_are_apo_jobs_in_order() -> None:
    # GIVEN apos options WHEN split per level THEN each is model apo at its level, the rest kept
    options = EstimateOptions(data=SIPP, model="apos", y="net_tfa", d="e401", x="age", n_rep=3,
                              treatment_levels="2,0", ml_g="Ridge")  # fmt: skip
    out = capos.level_options(options)
    assert [(o.model, o.treatment_level, o.treatment_levels) for o in out] == [
        ("apo", 2.0, None), ("apo", 0.0, None)]  # fmt: skip
    assert all(o.n_rep == 3 and o.ml_g == "Ridge" for o in out)


# ------------------------------------------------------------------------- data
def _frame(n_obs: int = 300, seed: int = 3) -> pd.DataFrame:
    raw = make_irm_data_discrete_treatments(n_obs=n_obs, n_levels=3, random_state=seed)
    return pd.DataFrame(raw["x"], columns=X_COLS).assign(y=raw["y"], d=raw["d"])


# ------------------------------------------------------------------------- jobs on a fake stack
def test_submit_apos_starts_every_level_then_contrasts() -> None:
    # GIVEN DoubleML's discrete-treatment data and apos options over three levels
    frame = _frame(n_obs=240, seed=5)
    options = EstimateOptions(data=frame, model="apos", y="y", d="d", x=X_COLS, n_folds=3,
                              n_rep=2, seed=4, ml_g="LinearRegression",
                              ml_m="LogisticRegression", treatment_levels="0,1,2",
                              boot_method="normal", n_rep_boot=120)  # fmt: skip
    client = _FakeClient()
    # WHEN submitted on the fake stack and awaited
    jobs = capos.submit_apos(client, options=options)
    result = jobs.result()
    # THEN one job was started, its parts the levels' apo models
    assert [kind for kind, _ in client.log] == ["submit"] + ["result"] * 3  # each part read once
    assert client.parts_submitted == [("apos", [f"treatment level {v}" for v in (0, 1, 2)])]
    assert [(c.spec.model, c.spec.treatment_level) for c in client.parts_checked] == [
        ("apo", 0.0), ("apo", 1.0), ("apo", 2.0)]  # fmt: skip
    # AND the contrast equals DoubleML's from the same folds and predictions
    folds = jobs.jobs[0].folds()
    assert all(np.array_equal(j.folds(), folds) for j in jobs.jobs)
    data = dml.DoubleMLData(frame, "y", "d", x_cols=X_COLS)
    obj = dml.DoubleMLAPOS(data, LinearRegression(), LogisticRegression(), [0, 1, 2], n_folds=3,
                           n_rep=2, draw_sample_splitting=False)  # fmt: skip
    obj.set_sample_splitting(fdml.folds_to_smpls(folds))
    external = {lvl: j.predictions()["d"] for lvl, j in zip([0, 1, 2], jobs.jobs)}
    obj.fit(external_predictions=external)
    theirs = obj.causal_contrast(0)
    assert result.contrast is not None and result.contrast.names == ["1 vs 0", "2 vs 0"]
    np.testing.assert_allclose(result.contrast.coef, theirs.thetas, rtol=1e-12)
    np.testing.assert_allclose(result.contrast.se, theirs.ses, rtol=1e-12)
    np.testing.assert_allclose(result.summary.to_numpy(), obj.summary.to_numpy(), rtol=1e-12,
                               atol=1e-12)  # fmt: skip
    # AND the joint bands of the levels and of the contrasts are DoubleML's after
    # np.random.seed(the job's seed), each level's part itself not bootstrapped
    np.random.seed(4)
    obj.bootstrap(method="normal", n_rep_boot=120)
    np.testing.assert_allclose(result.effects.ci_joint_95, obj.confint(joint=True).to_numpy(),
                               rtol=1e-12)  # fmt: skip
    np.random.seed(4)
    theirs.bootstrap(method="normal", n_rep_boot=120)
    np.testing.assert_allclose(result.contrast.ci_joint_95,
                               theirs.confint(joint=True).to_numpy(), rtol=1e-12)  # fmt: skip
    assert all(r.doc.ci_joint_95 is None for r in result.results)
    # AND the printout is DoubleMLAPOS's, then each level's; the JSON has the contrast
    text = str(result)
    assert text.startswith("================== DoubleMLAPOS Object ==================")
    assert "causal_contrast(reference_levels=0)" in text and "2 vs 0" in text
    assert text.count("================== DoubleMLAPO Object ==================") == 3
    out = json.loads(json.dumps(result.to_dict()))
    assert out["treatment_levels"] == [0.0, 1.0, 2.0]
    assert out["causal_contrast"]["names"] == ["1 vs 0", "2 vs 0"]
    assert out["boot_method"] == "normal" and len(out["causal_contrast"]["ci_joint_95"]) == 2


@pytest.fixture
def fake_stack(monkeypatch):
    """``fanfit estimate`` against the fake client (no stack): ``common.stack_client`` yields it."""
    return patch_stack_client(monkeypatch)


def _cli_args(tmp_path, *extra):
    path = tmp_path / "levels.csv"
    _frame(n_obs=200, seed=6).to_csv(path, index=False)
    return ["estimate", "--data", str(path), "--model", "apos", "--y", "y", "--d", "d",
            "--treatment-levels", "2,0", "--ml-g", "LinearRegression", "--ml-m",
            "LogisticRegression", "--n-folds", "3", "-q", *extra]  # fmt: skip


def test_the_command_prints_doublemlapos_and_the_contrast(
    tmp_path, fake_stack, capsys, monkeypatch
) -> None:
    # GIVEN a CSV with a three-level treatment, and pandas as in a 30-column terminal
    import pandas as pd

    monkeypatch.setenv("COLUMNS", "30")
    # WHEN fanfit estimate --model apos runs (fake stack)
    with pd.option_context("display.max_columns", 0):
        assert cli.main(_cli_args(tmp_path)) == 0
    out = capsys.readouterr().out
    # THEN no table is cut by pandas
    assert "..." not in out and "rows x" not in out
    # AND one job ran an apo part per level, and the printout is DoubleMLAPOS's, contrasted
    # with level 2
    assert [c.spec.treatment_level for c in fake_stack.parts_checked] == [2.0, 0.0]
    assert out.startswith("================== DoubleMLAPOS Object ==================")
    assert "causal_contrast(reference_levels=2)" in out and "0 vs 2" in out
    assert "########## treatment level 0 ##########" in out


def test_the_command_as_json_and_detached(tmp_path, fake_stack, capsys) -> None:
    # WHEN --output json THEN one JSON object with the levels and the contrast
    assert cli.main(_cli_args(tmp_path, "--output", "json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "apos" and out["causal_contrast"]["names"] == ["0 vs 2"]
    assert [lvl["job_id"] for lvl in out["levels"]] == ["est-fake-1", "est-fake-1"]  # one job
    # AND --detach prints the job's id without waiting
    assert cli.main(_cli_args(tmp_path, "--detach")) == 0
    assert capsys.readouterr().out.split() == ["est-fake-2"]
