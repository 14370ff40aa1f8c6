"""``--model apo`` and ``--treatment-level`` on the command line and in job files, dry runs only.

GIVEN the 401(k) data WHEN ``fanfit estimate --dry-run`` runs with APO's option right, missing,
malformed or on another model THEN it is valid, or the error names the option and what to do.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fanfit import cli

ROOT = Path(__file__).resolve().parents[2]
BASE = ["estimate", "--data", str(ROOT / "examples" / "data" / "sipp1991.dta"), "--y", "net_tfa",
        "--d", "e401", "--x", "age,inc", "--dry-run"]  # fmt: skip
APO = ["--model", "apo", "--ml-g", "LinearRegression", "--ml-m", "LogisticRegression"]


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (APO + ["--treatment-level", "1"], 0, "treatment_level: 1.0"),
        (APO, 2, "needs treatment_level"),
        (APO + ["--treatment-level", "abc"], 2, "--treatment-level: invalid float value"),
        (APO + ["--treatment-level", "7"], 2, "treatment-level=7: 0 row(s) of 'e401'"),
        (["--model", "plr", "--ml-l", "Ridge", "--ml-m", "Ridge", "--treatment-level", "1"], 2,
         "is an option of model 'apo' only"),
    ],
    ids=["valid", "missing", "not-a-number", "absent-level", "other-model"],
)  # fmt: skip
def test_treatment_level_is_checked_by_name(extra, code, message, capsys) -> None:
    # WHEN the dry run runs THEN its exit code and output name the option
    rc = cli.main(BASE + extra)
    out = capsys.readouterr()
    assert message in out.out + out.err
    assert (rc != 0) == (code != 0)


def test_a_job_file_names_a_bad_treatment_level(tmp_path, capsys) -> None:
    # GIVEN a job file whose treatment_level is not a number WHEN it is run THEN the error names
    # the file and the key
    job = tmp_path / "job.yaml"
    job.write_text(
        f"data: {ROOT / 'examples' / 'data' / 'sipp1991.dta'}\nmodel: apo\ny: net_tfa\nd: e401\n"
        "x: age,inc\nml_g: LinearRegression\nml_m: LogisticRegression\ntreatment_level: one\n",
        encoding="utf-8",
    )
    rc = cli.main(["estimate", "--config", str(job), "--dry-run"])
    assert rc != 0
    assert "treatment_level must be a number, got 'one'" in capsys.readouterr().err
