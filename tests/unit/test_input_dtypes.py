"""Every way data reaches an estimate computes in float64, whatever the storage types (issue 27).

The 401(k) Stata file holds ``net_tfa``, ``inc`` and ``tw`` as float32 (``pd.read_stata``); in
float32, scikit-learn's least squares on columns of magnitude 1e5-1e6 loses most of its digits and
the PLR estimate moves by 32 % (3563.84 instead of 5210.20). GIVEN each input path (CSV, Parquet,
Stata, an ``s3://`` ``.npz`` used in place, an ``s3://`` CSV, a DataFrame, a job file) WHEN a job is
submitted and Prepare plans it (moto) THEN the arrays the fits read (:func:`fanfit.jobs.estimate.
data.load`, as CrossFit reads them) are float64 and the plan records no other dtype; and the
401(k) PLR of the issue through the CLI equals R's DoubleML (5210.20, se 1087.56) at 1e-7.
Only fanfit's DoubleML classes keep DoubleML's float32 (test_float32_frames.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit import cli, storage
from fanfit.cli import common

ROOT = Path(__file__).resolve().parents[2]
SIPP = ROOT / "examples" / "data" / "sipp1991.dta"
BUCKET = "fanfit-unit"
X_401K = ["tw", "age", "inc", "fsize", "educ", "db", "marr", "twoearn", "pira", "hown"]
COLUMNS = ["net_tfa", "e401", *X_401K]
OPTIONS = dict(y="net_tfa", d="e401", x=X_401K, ml_l="LinearRegression",
               ml_m="LinearRegression", n_folds=3, seed=1)  # fmt: skip
#: The 401(k) PLR of issue 27 (LinearRegression for both nuisances, 3 folds, row i in fold
#: (i + 1) mod 3): R's DoubleML, and Python's DoubleML 0.11.4 on the frame cast to float64,
#: print 5210.20 (se 1087.56); DoubleML on the float32 columns as read gives 3563.84 (1231.80).
R_COEF, R_SE = 5210.20498275, 1087.5610154


@pytest.fixture(scope="module")
def sipp() -> pd.DataFrame:
    """The 401(k) data as ``pd.read_stata`` gives it: net_tfa, inc and tw float32."""
    frame = pd.read_stata(SIPP)[COLUMNS]
    assert frame["net_tfa"].dtype == np.float32 and frame["inc"].dtype == np.float32
    return frame


@pytest.fixture
def client(moto_stack, moto_client) -> Any:
    with moto_stack() as s3:
        assert s3 is not None
        yield moto_client()


def _npz(frame: pd.DataFrame) -> bytes:
    """fanfit's ``.npz`` layout (``values`` and ``columns``), in the frame's own float32/int8
    columns as stored: np.savez keeps each column's dtype in a record array, so store a float32
    matrix where every column fits (the 401(k) columns are float32 or small ints)."""
    buf = io.BytesIO()
    np.savez(buf, values=frame.to_numpy(dtype=np.float32), columns=np.array(frame.columns, str))
    return buf.getvalue()


def _fits_see(client: Any, job_id: str) -> tuple[Any, Any]:
    """Prepare the submitted job (moto), then what its fits read: the plan and the data."""
    from fanfit.jobs.estimate.data import load, read_plan
    from fanfit.jobs.estimate.prepare import prepare_stage

    prepare_stage(client.store, client.records, job_id, storage.spec_key(job_id), 0,
                  memory_mb=1769)  # fmt: skip
    plan = read_plan(client.store, storage.plan_key(job_id))
    data, _ = load(client.store, plan)
    return plan, data


def _assert_float64(plan: Any, data: Any, frame: pd.DataFrame) -> None:
    assert plan.dml.dtypes is None
    for role in ("y", "d", "x"):
        assert getattr(data, role).dtype == np.float64, role
    # the float32 storage values, exactly (float32 -> float64 is exact)
    np.testing.assert_array_equal(data.y, frame["net_tfa"].to_numpy(dtype=np.float64))


@pytest.mark.parametrize("kind", ["csv", "parquet", "dta", "dataframe"])
def test_a_local_file_or_frame_computes_in_float64(client, sipp, tmp_path, kind) -> None:
    # GIVEN the 401(k) data as a CSV, a Parquet file (float32 columns kept), the Stata file or
    # the frame pandas reads from it
    if kind == "csv":
        data: Any = tmp_path / "sipp.csv"
        sipp.to_csv(data, index=False)
    elif kind == "parquet":
        data = tmp_path / "sipp.parquet"
        sipp.to_parquet(data, index=False)
        assert pd.read_parquet(data)["inc"].dtype == np.float32
    elif kind == "dta":
        data = SIPP
    else:
        data = sipp
    # WHEN an estimate is submitted through the client and Prepare plans it
    client.submit_estimate(data, job_id=f"est-{kind}", **OPTIONS)
    # THEN the fits read float64 arrays and the plan names no float32 role
    _assert_float64(*_fits_see(client, f"est-{kind}"), sipp)


@pytest.mark.parametrize(("key", "body"), [("in/sipp.npz", _npz), ("in/sipp.csv", None)])
def test_an_s3_object_computes_in_float64(client, sipp, key, body) -> None:
    # GIVEN the data as an .npz of float32 values, or as a CSV, in the stack's bucket
    raw = body(sipp) if body else sipp.to_csv(index=False).encode()
    client.s3.put_object(Bucket=BUCKET, Key=key, Body=raw)
    # WHEN an estimate names it (used in place: Prepare reads the object)
    client.submit_estimate(f"s3://{BUCKET}/{key}", job_id="est-s3", **OPTIONS)
    # THEN the fits read float64 arrays
    _assert_float64(*_fits_see(client, "est-s3"), sipp)


def test_a_job_file_computes_in_float64(client, sipp, tmp_path, monkeypatch, capsys) -> None:
    # GIVEN a job file naming the Stata file, run by `fanfit estimate --config` on the stack
    job = tmp_path / "plr.yaml"
    job.write_text(
        f"data: {SIPP}\nmodel: plr\ny: net_tfa\nd: e401\nx: [{', '.join(X_401K)}]\n"
        "ml_l: LinearRegression\nml_m: LinearRegression\nn_folds: 3\n"
    )
    monkeypatch.setattr(common, "stack_client", lambda args: contextlib.nullcontext(client))
    # WHEN the CLI submits it (detached) and Prepare plans it
    assert cli.main(["estimate", "--config", str(job), "--detach", "--output", "json"]) == 0
    job_id = json.loads(capsys.readouterr().out)["job_id"]
    # THEN the fits read float64 arrays
    _assert_float64(*_fits_see(client, job_id), sipp)


def test_the_401k_plr_through_the_cli_is_r_doublemls(tmp_path, monkeypatch, capsys) -> None:
    from fake_stack import patch_stack_client

    # GIVEN the issue's command: the Stata file, LinearRegression for ml_l and ml_m, 3 folds,
    # row i in fold (i + 1) mod 3, on a stack that runs the job in-process
    folds = tmp_path / "FOLDS.csv"
    np.savetxt(folds, (np.arange(9915) + 1) % 3, fmt="%d")
    fake = patch_stack_client(monkeypatch)
    # WHEN `fanfit estimate` runs it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = cli.main(["estimate", "--data", str(SIPP), "--model", "plr", "--y", "net_tfa",
                         "--d", "e401", "--x", ",".join(X_401K), "--ml-l", "LinearRegression",
                         "--ml-m", "LinearRegression", "--n-folds", "3", "--folds", str(folds),
                         "--output", "json"])  # fmt: skip
    # THEN it prints R's DoubleML figure, 5210.20 (se 1087.56), at 1e-7
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["coef"].keys() == {"e401"}
    np.testing.assert_allclose(printed["coef"]["e401"], R_COEF, rtol=1e-7)
    np.testing.assert_allclose(printed["se"]["e401"], R_SE, rtol=1e-7)
    # AND the job it ran computed in float64
    (options,) = fake.submitted
    assert options.data == str(SIPP) and printed["spec"].get("dtypes") is None
