"""Client models that are several registry jobs side by side (:mod:`fanfit.client.parts`).

GIVEN model ``apos`` (one ``apo`` job per treatment level) or ``qte`` (one ``pq`` job per quantile
and treatment level) WHEN its options come from a job file, build one job's spec, or are submitted
to the fake stack (tests/unit/fake_stack.py) THEN the job file's list option is read or refused by
its key, one job's spec is refused naming the submit function, bad data is refused before any job
starts, and every part is checked exactly once on the client and started as checked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fake_stack import FakeClient

from fanfit import cli, errors
from fanfit.client import apos as capos
from fanfit.client import parts as cparts
from fanfit.client import qte as cqte
from fanfit.client.options import EstimateOptions

ROOT = Path(__file__).resolve().parents[2]
SIPP = str(ROOT / "examples" / "data" / "sipp1991.dta")
#: Per model: its job-file lines (after data, y, d and x), its submit function, and the options
#: of a small job on a binary treatment d.
MODELS = {
    "apos": (
        "model: apos\nml_g: LinearRegression\nml_m: LogisticRegression\ntreatment_levels: {}\n",
        capos.submit_apos,
        {"ml_g": "LinearRegression", "ml_m": "LogisticRegression", "treatment_levels": "0,1"},
    ),
    "qte": (
        "model: qte\nscore: PQ\nml_g: LogisticRegression\nml_m: LogisticRegression\n"
        "quantiles: {}\n",
        cqte.submit_qte,
        {"ml_g": "LogisticRegression", "ml_m": "LogisticRegression", "quantiles": "0.5"},
    ),
}


def _binary_frame(n_obs: int = 160, seed: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, 2))
    d = (x[:, 0] + rng.normal(size=n_obs) > 0).astype(float)
    return pd.DataFrame({"y": d + x[:, 1] + rng.normal(size=n_obs), "d": d, "x1": x[:, 0],
                         "x2": x[:, 1]})  # fmt: skip


def _options(model: str, frame: pd.DataFrame, **extra) -> EstimateOptions:
    given = {"data": frame, "model": model, "y": "y", "d": "d", "x": ["x1", "x2"], "n_folds": 2,
             "seed": 3, **MODELS[model][2]}  # fmt: skip
    return EstimateOptions(**{**given, **extra})


@pytest.mark.parametrize(
    ("model", "value", "code", "message"),
    [("apos", '"0,1"', 0, "treatment_levels: 0, 1"), ("apos", "0,1", 0, "treatment_levels: 0, 1"),
     ("apos", '"0,one"', 2, "must be numbers separated by commas"),
     ("apos", "[0, 1]", 0, "treatment_levels: 0, 1"),
     ("apos", "[0, one]", 2, "treatment_levels must be a number or a list of numbers"),
     ("qte", '"0.25,0.75"', 0, "quantiles: 0.25, 0.75"), ("qte", "0.25,0.75", 0, "quantiles: 0.25, 0.75"),
     ("qte", "0.5", 0, "quantiles: 0.5"), ("qte", "[0.25, 0.75]", 0, "quantiles: 0.25, 0.75"),
     ("qte", '"0.25,2"', 2, "must be numbers in (0, 1)"), ("qte", "[0.25, 2]", 2, "must be numbers in (0, 1)")],
)  # fmt: skip
def test_a_job_file_takes_the_list_option(tmp_path, capsys, model, value, code, message) -> None:
    # GIVEN a job file of the model WHEN it is run as a dry run THEN it is valid, or the error
    # names the key
    job = tmp_path / "job.yaml"
    job.write_text(f"data: {SIPP}\ny: net_tfa\nd: e401\nx: age,inc\n" + MODELS[model][0].format(value),
                   encoding="utf-8")  # fmt: skip
    rc = cli.main(["estimate", "--config", str(job), "--dry-run"])
    out = capsys.readouterr()
    assert rc == code
    assert message in out.out + out.err


@pytest.mark.parametrize("model", ["apos", "qte"])
def test_a_single_job_spec_refuses_a_model_of_several_jobs(model) -> None:
    # GIVEN the model WHEN one job's spec is built (Client.submit_estimate) THEN the error says
    # it is several jobs and names the function that submits them
    options = _options(model, _binary_frame())
    with pytest.raises(errors.InvalidJobError, match=f"submit_{model}"):
        options.build_spec()


@pytest.mark.parametrize(
    ("model", "extra", "d_value", "message"),
    [("apos", {"treatment_levels": "0,9"}, 1.0, "treatment_levels: level 9 is not a value of 'd'"),
     ("apos", {"d": "d,x1"}, 1.0, "model 'apos' takes one treatment column d, got 2"),
     ("qte", {}, 2.0, "'d' holds 2"), ("qte", {"ml_m": "NoSuchLearner"}, 1.0, "NoSuchLearner")],
)  # fmt: skip
def test_bad_data_or_options_start_nothing(model, extra, d_value, message) -> None:
    # GIVEN data or options that the model or one of its parts refuses (d_value: row 3's d)
    frame = _binary_frame()
    frame.loc[3, "d"] = d_value
    client = FakeClient()
    # WHEN submitted THEN the named error comes before any job is started
    with pytest.raises(errors.FanfitError, match=message):
        MODELS[model][1](client, options=_options(model, frame, **extra))
    assert client.submitted == []


@pytest.mark.parametrize(("model", "n_parts"), [("apos", 2), ("qte", 2)])
def test_every_part_is_checked_once_and_started_as_checked(monkeypatch, model, n_parts) -> None:
    # GIVEN the fake stack, whose submit_estimate checks what comes unchecked, and the client's
    # checks of the parts recorded
    made = []
    check_estimate = cparts.check_estimate
    monkeypatch.setattr(cparts, "check_estimate",
                        lambda **kw: made.append(check_estimate(**kw)) or made[-1])  # fmt: skip
    client = FakeClient()
    # WHEN the model is submitted
    jobs = MODELS[model][1](client, options=_options(model, _binary_frame()))
    # THEN each part was checked once, and the stack started each with that very check
    assert len(made) == n_parts and client.checks == 0
    assert len(jobs.jobs) == len(client.submitted) == n_parts
    assert all(job.checked is c for job, c in zip(jobs.jobs, made))
