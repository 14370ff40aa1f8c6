"""``--model pq|cvar|lpq`` with ``--treatment`` and ``--quantiles`` on the command line, dry runs only.

GIVEN DoubleML's IIVM data (binary treatment and instrument) as a CSV WHEN ``fanfit estimate
--dry-run`` runs a quantile model with its options right, missing or wrong THEN it is valid (one
fold unit per fold and repetition), or the error names the option.
"""

from __future__ import annotations

import numpy as np
import pytest
from doubleml.irm.datasets import make_iivm_data

from fanfit import cli

LEARNERS = ["--ml-g", "LogisticRegression", "--ml-m", "LogisticRegression"]


@pytest.fixture(scope="module")
def csv(tmp_path_factory) -> str:
    np.random.seed(1)
    frame = make_iivm_data(n_obs=200, dim_x=4, return_type="DataFrame")
    path = tmp_path_factory.mktemp("quantile") / "iivm.csv"
    frame.to_csv(path, index=False)
    return str(path)


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--model", "pq", "--x", "X1,X2", "--treatment", "0", "--quantiles", "0.25", "--n-rep",
          "2"], 0, "= 20 fold units in 2 stages (10 + 10;"),
        (["--model", "lpq", "--z", "z", "--treatment", "1", "--quantiles", "0.5"], 0,
         "each fold fitting ml_m_z, ml_m_d_z0, ml_m_d_z1, ml_g_du_z0, ml_g_du_z1"),
        (["--model", "pq", "--x", "X1", "--treatment", "1"], 2, "needs quantile"),
        (["--model", "cvar", "--x", "X1", "--quantiles", "0.5"], 2, "needs treatment, 0 or 1"),
        (["--model", "pq", "--x", "X1", "--treatment", "1", "--quantiles", "0.2,0.8"], 2,
         "takes one quantile"),
        (["--model", "pq", "--x", "X1", "--treatment", "1", "--quantiles", "0"], 2,
         "--quantiles must be numbers in (0, 1)"),
        (["--model", "lpq", "--x", "X1", "--treatment", "1", "--quantiles", "0.5"], 2,
         "'lpq' needs exactly one binary instrument"),
        (["--model", "irm", "--x", "X1", "--quantiles", "0.5"], 2,
         "quantile is an option of model 'pq' or 'cvar' or 'lpq' only"),
    ],
    ids=["pq", "lpq", "no-quantile", "no-treatment", "two-quantiles", "out-of-range", "lpq-no-z",
         "other-model"],
)  # fmt: skip
def test_quantile_options_are_checked_by_name(csv, extra, code, message, capsys) -> None:
    # WHEN the dry run runs THEN its exit code and output name the option
    rc = cli.main(["estimate", "--data", csv, "--y", "y", "--d", "d", "--dry-run", *LEARNERS,
                   *extra])  # fmt: skip
    out = capsys.readouterr()
    assert message in out.out + out.err
    assert (rc != 0) == (code != 0)
