"""``--model ssm`` and ``--s`` on the command line and in job files, dry runs only.

GIVEN DoubleML's sample selection data (make_ssm_data, missing at random) as a CSV WHEN
``fanfit estimate --dry-run`` runs with SSM's selection column right, missing, not binary or on
another model THEN it is valid, or the error names the option and what to do.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from doubleml.irm.datasets import make_ssm_data

from fanfit import cli

SSM = ["--model", "ssm", "--ml-g", "LinearRegression", "--ml-pi", "LogisticRegression",
       "--ml-m", "LogisticRegression"]  # fmt: skip


@pytest.fixture(scope="module")
def csv(tmp_path_factory) -> str:
    np.random.seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = make_ssm_data(n_obs=200, dim_x=4, mar=True, return_type="DataFrame")
    path = tmp_path_factory.mktemp("ssm") / "ssm.csv"
    frame.to_csv(path, index=False)
    return str(path)


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (SSM + ["--s", "s"], 0, "s_col: s"),
        (SSM, 2, "needs s_col, the binary selection column"),
        (SSM + ["--s", "X1"], 2, "Column 'X1' must be binary"),
        (SSM + ["--s", "s", "--ml-pi", "LinearRegression"], 2,
         "Learner --ml-pi (LinearRegression) must be a classifier"),
        (["--model", "irm", "--ml-g", "Ridge", "--ml-m", "LogisticRegression", "--s", "s"], 2,
         "s_col is an option of model 'ssm' only"),
    ],
    ids=["valid", "missing", "not-binary", "regressor-ml_pi", "other-model"],
)  # fmt: skip
def test_selection_column_is_checked_by_name(csv, extra, code, message, capsys) -> None:
    # WHEN the dry run runs THEN its exit code and output name the option
    rc = cli.main(["estimate", "--data", csv, "--y", "y", "--d", "d", "--dry-run", *extra])
    out = capsys.readouterr()
    assert message in out.out + out.err
    assert (rc != 0) == (code != 0)


def test_a_job_file_runs_ssm_with_its_selection_column(csv, tmp_path, capsys) -> None:
    # GIVEN a job file naming the selection column s and the learner ml_pi WHEN it is dry-run
    # THEN it is valid, with the four fits of SSM and x defaulted without s
    job = tmp_path / "job.yaml"
    job.write_text(
        f"data: {csv}\nmodel: ssm\ny: y\nd: d\ns: s\nml_g: LinearRegression\n"
        "ml_pi: LogisticRegression\nml_m: LogisticRegression\nn_folds: 2\n",
        encoding="utf-8",
    )
    rc = cli.main(["estimate", "--config", str(job), "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "ml_g_d0, ml_g_d1, ml_pi, ml_m" in out and "x_cols: X1, X2, X3, X4" in out
