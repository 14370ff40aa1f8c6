"""``fanfit estimate --dry-run`` and ``fanfit train --dry-run``: checked locally, no stack touched.

GIVEN commands run through :func:`fanfit.cli.main` with boto3 sessions and the local stack made to
fail if anything creates or contacts them, WHEN ``--dry-run`` is given, THEN valid jobs print what
would run and exit 0, and invalid ones exit 2 with the named error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fanfit.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = str(ROOT / "examples" / "data" / "sipp1991.dta")
EXAMPLE = str(ROOT / "examples" / "plr_401k.yaml")
X401K = "age,inc,educ,fsize,marr,twoearn,db,pira,hown"
BASE = ["estimate", "--dry-run", "--data", DATA, "--y", "net_tfa", "--d", "e401", "--x", X401K]
PLR = [*BASE, "--ml-l", "LassoCV", "--ml-m", "LogisticRegression"]
IRM = [*BASE, "--model", "irm", "--ml-g", "LassoCV", "--ml-m", "LogisticRegression"]


#: Every test runs with the ``no_aws`` guard of conftest.py: boto3 and the local stack fail it.
pytestmark = pytest.mark.usefixtures("no_aws")


def test_the_guard_catches_a_client(no_aws) -> None:
    import boto3

    with pytest.raises(no_aws):
        boto3.client("s3")


def test_estimate_dry_run_prints_the_plan(capsys) -> None:
    # WHEN a valid PLR job is dry-run
    code = main([*PLR, "--n-folds", "4", "--n-rep", "3"])
    out = capsys.readouterr().out
    # THEN it exits 0 and says what would run
    assert code == 0
    assert "nothing was uploaded or started" in out
    assert "model: plr" in out and "n_obs: 9915" in out
    assert "4 folds x 3 repetitions x 2 learners (ml_l, ml_m) = 24 fits" in out
    assert "learner ml_l: LassoCV:{}" in out and "learner ml_m: LogisticRegression:{}" in out


def test_estimate_dry_run_shows_and_checks_the_learner_params(capsys, tmp_path) -> None:
    # GIVEN DoubleML's nuisance parameters in a YAML file, one of them misspelt in a second
    good, bad = tmp_path / "params.yaml", tmp_path / "bad.json"
    good.write_text("ml_l:\n  e401: {alpha: 0.5}\nml_m:\n  e401: {C: 0.1}\n")
    bad.write_text('{"ml_m": {"e401": {"Cee": 0.1}}}')
    cmd = [*BASE, "--ml-l", "Lasso", "--ml-m", "LogisticRegression"]
    # WHEN dry-run THEN the good file's parameters are shown with the plan
    assert main([*cmd, "--learner-params", str(good)]) == 0
    out = capsys.readouterr().out
    assert "learner_params: {'ml_l': {'e401': {'alpha': 0.5}}, 'ml_m': {'e401': {'C': 0.1}}}" in out
    # AND the misspelt parameter exits 2 naming the nuisance and the parameter
    assert main([*cmd, "--learner-params", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--learner-params['ml_m']['e401']" in err and "Cee" in err


def test_estimate_dry_run_json_from_the_example_config(capsys) -> None:
    # WHEN the example file is dry-run with a flag overriding it, as JSON
    code = main(["estimate", "--config", EXAMPLE, "--dry-run", "--n-rep", "2", "--output", "json"])
    info = json.loads(capsys.readouterr().out)
    # THEN the job is the file's with the flag's n_rep
    assert code == 0 and info["dry_run"] is True and info["command"] == "estimate"
    assert info["n_obs"] == 9915 and info["n_folds"] == 5 and info["n_rep"] == 2
    assert info["n_fits"] == 5 * 2 * 2 and info["seed"] == 42
    assert info["learners"]["ml_l"] == 'RandomForestRegressor:{"max_depth":8,"n_estimators":100}'
    assert Path(info["data"]) == Path(DATA)


def test_irm_and_iv_type_count_every_nuisance_fit(capsys) -> None:
    irm = ["estimate", "--dry-run", "--data", DATA, "--model", "irm", "--y", "net_tfa", "--d",
           "e401", "--x", X401K, "--ml-g", "LinearRegression", "--ml-m", "LogisticRegression",
           "--n-rep", "2", "--output", "json"]  # fmt: skip
    assert main(irm) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["prediction_keys"] == ["ml_g0", "ml_g1", "ml_m"] and info["n_fits"] == 5 * 2 * 3
    iv = [*PLR, "--score", "IV-type", "--ml-g", "LinearRegression", "--d", "e401,p401",
          "--output", "json"]  # fmt: skip
    assert main(iv) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["n_fits"] == 5 * 1 * 3 * 2
    assert info["fits"].endswith("x 2 treatments = 30 fits")


def test_dry_run_checks_given_folds(tmp_path: Path, capsys) -> None:
    folds = tmp_path / "folds.csv"
    np.savetxt(folds, np.arange(9915) % 3, fmt="%d")
    assert main([*PLR, "--n-folds", "3", "--folds", str(folds)]) == 0
    assert "folds: given" in capsys.readouterr().out
    # ... and folds that do not fit the data are a named error
    np.savetxt(folds, np.arange(100) % 3, fmt="%d")
    assert main([*PLR, "--n-folds", "3", "--folds", str(folds)]) == 2
    assert "InvalidFoldsError" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([*PLR, "--x", "age,income"], r"InvalidDataError: .*'income'"),
        ([*PLR, "--ml-l", "SVR"], r"InvalidLearnerError: --ml-l: Unknown learner 'SVR'"),
        (
            [*IRM, "--ml-m", "LassoCV"],
            r"InvalidLearnerError: Learner --ml-m \(LassoCV\) must be a classifier",
        ),
        ([*IRM, "--ml-l", "LassoCV"], r"InvalidJobError: .*does not use learner\(s\) 'ml_l'"),
        ([*PLR, "--n-folds", "1"], r"InvalidJobError: --n-folds must be an integer in \[2, 100\]"),
        ([*PLR, "--n-rep", "0"], r"InvalidJobError: --n-rep must be an integer in \[1, 100\]"),
        ([*PLR, "--max-concurrency", "0"], r"--max-concurrency must be an integer of at least 1"),
        (
            [*IRM, "--trimming-threshold", "0.7"],
            r"--trimming-threshold must be a number in \(0, 0.5\)",
        ),
        (
            [*PLR, "--data", "nowhere.csv"],
            r"InvalidDataError: data file 'nowhere.csv' does not exist",
        ),
        ([*IRM, "--d", "nifa"], r"InvalidDataError: Column 'nifa' must be binary"),
        ([*PLR, "--d", "nifa"], r"InvalidLearnerError: Column 'nifa' must be binary"),
        (
            [*PLR, "--d", "e401", "--x", "age,e401"],
            r"InvalidJobError: Column 'e401' is set as both",
        ),
    ],
)
def test_invalid_estimate_exits_2_naming_the_error(argv, named, capsys) -> None:
    import re

    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(named, err), err


def test_a_bad_config_file_exits_2_naming_key_and_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("n_fold: 3\n")
    assert main([*PLR, "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "InvalidJobError" in err and "'n_fold'" in err and str(path) in err


def test_train_dry_run(tmp_path: Path, capsys) -> None:
    # GIVEN a small numeric table
    rng = np.random.default_rng(0)
    csv = tmp_path / "blobs.csv"
    pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"]).assign(
        y=rng.integers(0, 2, 60)
    ).to_csv(csv, index=False)
    cfg = tmp_path / "train.yaml"
    cfg.write_text("data: blobs.csv\nmodel: logreg\nfeatures: [a, b, c]\ntarget: y\n"
                   "global_batch: 32\nworkers: 4\nrounds: 5\n")  # fmt: skip
    # WHEN it is dry-run from a config file with an override
    code = main(["train", "--config", str(cfg), "--dry-run", "--rounds", "6"])
    out = capsys.readouterr().out
    # THEN it prints the plan and exits 0
    assert code == 0
    assert "model: logreg" in out and "n_obs: 60" in out
    assert "4 workers x 6 rounds = 24 worker steps" in out
    # ... and a missing column or bad option exits 2 with the named error
    assert main(["train", "--config", str(cfg), "--dry-run", "--target", "label"]) == 2
    assert "InvalidDataError" in capsys.readouterr().err
    assert main(["train", "--config", str(cfg), "--dry-run", "--workers", "0"]) == 2
    assert "InvalidJobError" in capsys.readouterr().err
