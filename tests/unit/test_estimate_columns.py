"""The column options of an estimate: ``x`` defaults to every other column (DoubleML's
``x_cols=None``) and DoubleML's ``y_col``/``d_cols``/``x_cols``/``z_cols`` are aliases in Python.

GIVEN a small data set, WHEN an estimate is checked without a stack (``check_estimate``, which
:meth:`fanfit.client.Client.submit_estimate` runs before any upload, and ``fanfit estimate
--dry-run``), THEN the spec's columns are DoubleML's, and an option given twice is a named error.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fanfit.cli import main
from fanfit.client import EstimateOptions, check_estimate
from fanfit.errors import InvalidJobError

pytestmark = pytest.mark.usefixtures("no_aws")

LEARNERS = {"ml_l": "LinearRegression", "ml_m": "LinearRegression"}


@pytest.fixture
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    n = 60
    x = rng.normal(size=(n, 3))
    z = (rng.uniform(size=n) < 0.5).astype(float)
    d = x[:, 0] + z + rng.normal(size=n)
    y = 0.5 * d + x[:, 1] + rng.normal(size=n)
    return pd.DataFrame({"x1": x[:, 0], "y": y, "x2": x[:, 1], "d": d, "z": z, "x3": x[:, 2]})


def test_x_defaults_to_every_column_not_y_d_or_z_in_the_data_order(frame) -> None:
    # WHEN a PLIV job is checked without x
    checked = check_estimate(
        frame, model="pliv", y="y", d="d", z="z", ml_r="LinearRegression", **LEARNERS
    )
    # THEN x is x1, x2, x3 (DoubleML's x_cols=None), and the uploaded columns are y, d, x, z
    assert checked.spec.x_cols == ("x1", "x2", "x3")
    assert checked.columns == ["y", "d", "x1", "x2", "x3", "z"]


def test_x_given_is_kept(frame) -> None:
    # WHEN x names a subset THEN only that subset is used
    checked = check_estimate(frame, y="y", d="d", x="x2", **LEARNERS)
    assert checked.spec.x_cols == ("x2",)
    # AND the unused columns z and x1, x3 are neither covariates nor uploaded
    assert checked.columns == ["y", "d", "x2"]


def test_with_data_columns_without_other_columns_is_a_named_error() -> None:
    # GIVEN options without x WHEN the data has only y and d THEN the error names x
    options = EstimateOptions(data=None, y="y", d="d")
    with pytest.raises(InvalidJobError, match="name the covariate columns with x"):
        options.with_data_columns(["y", "d"])


def test_doubleml_column_names_are_aliases(frame) -> None:
    # WHEN the columns are given with DoubleMLData's names
    checked = check_estimate(
        frame, model="pliv", y_col="y", d_cols=["d"], x_cols=["x1", "x3"], z_cols="z",
        ml_r="LinearRegression", **LEARNERS,
    )  # fmt: skip
    # THEN they are fanfit's y, d, x, z
    spec = checked.spec
    assert (spec.y_col, spec.d_cols, spec.x_cols, spec.z_cols) == (
        "y",
        ("d",),
        ("x1", "x3"),
        ("z",),
    )


@pytest.mark.parametrize(("alias", "name"), [("y_col", "y"), ("d_cols", "d"), ("x_cols", "x"),
                                             ("z_cols", "z")])  # fmt: skip
def test_an_option_under_both_names_is_a_named_error(frame, alias, name) -> None:
    # GIVEN an option under fanfit's and DoubleML's name
    kwargs = {"y": "y", "d": "d", **LEARNERS, name: "y" if name == "y" else "x1", alias: "x1"}
    # WHEN checked THEN the error names both
    with pytest.raises(InvalidJobError, match=f"{name} and {alias} name the same option"):
        check_estimate(frame, **kwargs)


def test_build_spec_without_x_says_how_to_resolve_it() -> None:
    # GIVEN options without x WHEN their spec is built without the data THEN a named error
    with pytest.raises(InvalidJobError, match="x is not given"):
        EstimateOptions(data=None, y="y", d="d", **LEARNERS).build_spec()


def test_cli_dry_run_without_x_uses_the_other_columns(frame, tmp_path, capsys) -> None:
    # GIVEN a CSV WHEN `fanfit estimate --dry-run` runs without --x
    path = tmp_path / "data.csv"
    frame.drop(columns="z").to_csv(path, index=False)
    code = main(["estimate", "--dry-run", "--data", str(path), "--y", "y", "--d", "d",
                 "--ml-l", "LinearRegression", "--ml-m", "LinearRegression", "--output", "json"])  # fmt: skip
    # THEN it exits 0 and the plan's covariates are every other column
    assert code == 0
    info = json.loads(capsys.readouterr().out)
    assert info["x_cols"] == ["x1", "x2", "x3"]
