"""``fanfit estimate --model did|didcs`` on the command line and in job files (dry runs, no stack).

GIVEN the repeated cross-sections of examples/data/did_sz2020_cs.csv (make_did_SZ2020), WHEN the
DIDCS options come from flags or a job file, THEN the dry run shows the time column and the
normalization; a missing or misplaced DID option is refused with its name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fanfit.cli import main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "data" / "did_sz2020_cs.csv"
LEARNERS = ["--ml-g", "LinearRegression", "--ml-m", "LogisticRegression"]


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["estimate", "--data", str(DATA), "--y", "y", "--d", "d", *argv, "--dry-run"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_didcs_flags_reach_the_spec(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN --model didcs with --t and --no-in-sample-normalization WHEN dry-run
    code, out, _ = _dry_run(
        capsys, "--model", "didcs", "--t", "t", "--no-in-sample-normalization", *LEARNERS
    )
    # THEN the spec has the time column (not a covariate), the option and DIDCS's four ml_g fits
    assert code == 0
    assert "x_cols: z1, z2, z3, z4\n" in out and "t_col: t\n" in out
    assert "in_sample_normalization: False\n" in out
    assert "(ml_g_d0_t0, ml_g_d0_t1, ml_g_d1_t0, ml_g_d1_t1, ml_m) = 25 fits" in out


def test_did_options_in_a_job_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # GIVEN a job file with model didcs, score experimental, t and in_sample_normalization
    job = tmp_path / "did.yaml"
    job.write_text(
        f"data: {DATA}\nmodel: didcs\nscore: experimental\ny: y\nd: d\nt: t\n"
        "in_sample_normalization: true\nml_g: LinearRegression\nn_folds: 2\n",
        encoding="utf-8",
    )
    # WHEN dry-run from the file THEN the experimental score fits ml_g only, per group and period
    code = main(["estimate", "--config", str(job), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "in_sample_normalization: True\n" in out
    assert "2 folds x 1 repetitions x 4 learners" in out
    # AND a non-boolean in the file is refused naming the key
    job.write_text(job.read_text(encoding="utf-8").replace(": true", ": 1"), encoding="utf-8")
    assert main(["estimate", "--config", str(job), "--dry-run"]) != 0
    assert "in_sample_normalization must be true or false" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--model", "didcs", *LEARNERS], "Model 'didcs' needs t_col"),
        (["--model", "did", "--t", "t", *LEARNERS], "t_col is an option of model 'didcs' only"),
        (
            ["--model", "irm", "--x", "z1,z2", "--no-in-sample-normalization", *LEARNERS],
            "in-sample-normalization is an option of model 'did' or 'didcs' only",
        ),
        (
            ["--model", "did", "--score", "experimental", *LEARNERS],
            "does not use learner(s) 'ml_m'",
        ),
    ],
)
def test_misplaced_did_options_are_named(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    # GIVEN a DID option missing or given to another model WHEN dry-run THEN the error names it
    code, out, err = _dry_run(capsys, *argv)
    assert code != 0 and named in err + out
