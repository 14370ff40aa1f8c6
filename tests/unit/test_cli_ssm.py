"""``--model ssm``, ``--s`` and ``--score nonignorable --z`` on the command line and in job files,
dry runs only.

GIVEN DoubleML's sample selection data (make_ssm_data, missing at random and nonignorable) as a
CSV WHEN ``fanfit estimate --dry-run`` runs with SSM's selection column right, missing, not binary
or on another model, or with the nonignorable score's instrument right, missing, doubled or
unknown THEN it is valid, or the error names the option and what to do.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from doubleml.irm.datasets import make_ssm_data

from fanfit import cli

SSM = ["--model", "ssm", "--ml-g", "LinearRegression", "--ml-pi", "LogisticRegression",
       "--ml-m", "LogisticRegression"]  # fmt: skip


def _ssm_csv(tmp_path_factory, mar: bool, seed: int) -> str:
    np.random.seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = make_ssm_data(n_obs=200, dim_x=4, mar=mar, return_type="DataFrame")
    path = tmp_path_factory.mktemp("ssm") / f"ssm_{'mar' if mar else 'nonignorable'}.csv"
    frame.to_csv(path, index=False)
    return str(path)


@pytest.fixture(scope="module")
def csv(tmp_path_factory) -> str:
    return _ssm_csv(tmp_path_factory, mar=True, seed=1)


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


@pytest.fixture(scope="module")
def csv_nonignorable(tmp_path_factory) -> str:
    return _ssm_csv(tmp_path_factory, mar=False, seed=2)


NONIGNORABLE = SSM + ["--s", "s", "--score", "nonignorable"]


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (NONIGNORABLE + ["--z", "z"], 0, "each fold fitting ml_g_d0, ml_g_d1, ml_pi, ml_m"),
        (NONIGNORABLE, 2, "'nonignorable' needs exactly one instrument for selection in z_cols"),
        (NONIGNORABLE + ["--z", "z,X4"], 2, "got ['z', 'X4']"),
        (NONIGNORABLE + ["--z", "zz"], 2, "'zz' not in the data"),
        (SSM + ["--s", "s", "--z", "z"], 2, "or use score 'nonignorable'"),
        (NONIGNORABLE + ["--z", "z", "--cluster-cols", "X4"], 2,
         "Model 'ssm' does not take --cluster-cols"),
    ],
    ids=["valid", "no-z", "two-z", "unknown-z", "z-under-mar", "clusters"],
)  # fmt: skip
def test_nonignorable_instrument_is_checked_by_name(
    csv_nonignorable, extra, code, message, capsys
) -> None:
    # WHEN the dry run runs THEN its exit code and output name the option
    rc = cli.main(
        ["estimate", "--data", csv_nonignorable, "--y", "y", "--d", "d", "--dry-run", *extra]
    )
    out = capsys.readouterr()
    assert message in out.out + out.err
    assert (rc != 0) == (code != 0)


def test_a_job_file_runs_nonignorable_ssm_with_its_instrument(
    csv_nonignorable, tmp_path, capsys
) -> None:
    # GIVEN a job file with score nonignorable and the instrument z WHEN it is dry-run
    # THEN it is valid: one fold unit per fold, z as the instrument, x defaulted without z and s
    job = tmp_path / "job.yaml"
    job.write_text(
        f"data: {csv_nonignorable}\nmodel: ssm\nscore: nonignorable\ny: y\nd: d\ns: s\nz: z\n"
        "ml_g: LinearRegression\nml_pi: LogisticRegression\nml_m: LogisticRegression\n"
        "n_folds: 2\n",
        encoding="utf-8",
    )
    rc = cli.main(["estimate", "--config", str(job), "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "2 fold units" in out and "z_cols: z" in out and "x_cols: X1, X2, X3, X4" in out
