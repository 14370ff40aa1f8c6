"""The model options on the client: cluster_cols, normalize_ipw and subgroups in EstimateOptions,
the CLI's spelling, and the client's data check (check_estimate) before anything is uploaded."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fanfit.client.check import check_estimate
from fanfit.client.options import EstimateOptions
from fanfit.dml import draw_cluster_folds
from fanfit.dml.spec import parse_subgroups
from fanfit.errors import InvalidFoldsError, InvalidJobError, OneSidedNoncomplianceError

LIN = "LinearRegression"
LOGIT = "LogisticRegression"


def _iivm_frame(one_sided: bool, n_obs: int = 300, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, 2))
    z = (rng.uniform(size=n_obs) < 0.5).astype(float)
    takes = (x[:, 0] + rng.normal(size=n_obs) > 0).astype(float)
    d = z * takes if one_sided else np.where(z == 1, takes, (x[:, 1] > 1.0).astype(float))
    y = d + x[:, 1] + rng.normal(size=n_obs)
    return pd.DataFrame({"y": y, "d": d, "z": z, "x1": x[:, 0], "x2": x[:, 1]})


def _cluster_frame(n: int = 10, seed: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    x = rng.normal(size=(n * n, 2))
    d = x[:, 0] + rng.normal(size=n * n)
    y = 0.5 * d + x[:, 1] + rng.normal(size=n * n)
    return pd.DataFrame({"y": y, "d": d, "x1": x[:, 0], "x2": x[:, 1],
                         "firm": i.ravel().astype(float), "year": j.ravel().astype(float)})  # fmt: skip


def test_check_estimate_refuses_one_sided_noncompliance_before_upload() -> None:
    # GIVEN IIVM data where nobody with z == 0 is treated and the default subgroups
    df = _iivm_frame(one_sided=True)
    opts = dict(model="iivm", y="y", d="d", z="z", x="x1,x2", ml_g=LIN, ml_m=LOGIT, ml_r=LOGIT)
    # WHEN the client checks the job THEN the named error says which option to set
    with pytest.raises(OneSidedNoncomplianceError, match="--subgroups always_takers=false"):
        check_estimate(df, **opts)
    # and with the option as the CLI spells it the job is valid and fits no ml_r0
    checked = check_estimate(df, subgroups="always_takers=false", normalize_ipw=True, **opts)
    described = checked.describe()
    assert described["subgroups"] == {"always_takers": False, "never_takers": True}
    assert described["normalize_ipw"] is True
    assert "ml_r0" not in described["prediction_keys"] and "ml_r1" in described["prediction_keys"]


def test_two_sided_noncompliance_passes_with_default_subgroups() -> None:
    # GIVEN IIVM data with always and never takers WHEN checked THEN valid, both ml_r0 and ml_r1 fitted
    checked = check_estimate(_iivm_frame(one_sided=False), model="iivm", y="y", d="d", z="z",
                             x="x1,x2", ml_g=LIN, ml_m=LOGIT, ml_r=LOGIT)  # fmt: skip
    assert {"ml_r0", "ml_r1"} <= set(checked.describe()["prediction_keys"])
    assert checked.spec.subgroups is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("always_takers=false", {"always_takers": False, "never_takers": True}),
        ("never_takers=False, always_takers=TRUE", {"always_takers": True, "never_takers": False}),
        ({"always_takers": False, "never_takers": False}, {"always_takers": False, "never_takers": False}),
    ],
)  # fmt: skip
def test_parse_subgroups_reads_the_cli_string_and_dicts(value, expected) -> None:
    # WHEN / THEN the string form fills the missing key with DoubleML's default (true)
    assert parse_subgroups(value) == expected


@pytest.mark.parametrize("value", ["always_takers", "takers=false", "always_takers=no", 1])
def test_bad_subgroups_strings_name_the_option(value) -> None:
    with pytest.raises(InvalidJobError, match="subgroups"):
        parse_subgroups(value)


def test_cluster_cols_are_uploaded_and_their_folds_checked() -> None:
    # GIVEN a firm x year panel and a two-way clustered PLR
    df = _cluster_frame()
    opts = EstimateOptions(data=df, model="plr", y="y", d="d", x="x1,x2", cluster_cols="firm,year",
                           ml_l=LIN, ml_m=LIN, n_folds=2)  # fmt: skip
    # WHEN the client checks it
    checked = check_estimate(options=opts)
    # THEN the cluster columns are among the uploaded columns and the fits span 2**2 folds
    assert checked.columns[-2:] == ["firm", "year"]
    assert checked.data.cluster_vars is not None and checked.data.cluster_vars.shape == (100, 2)
    assert checked.n_fits == 2 * 4
    assert checked.describe()["cluster_cols"] == ["firm", "year"]
    # and given folds that split a firm across folds are refused
    folds = draw_cluster_folds(df[["firm", "year"]].to_numpy(), 2, 1, 0)
    folds[0, 0] = (folds[0, 0] + 2) % 4  # moves row 0's firm fold, keeps its year fold
    with pytest.raises(InvalidFoldsError, match="cluster variable 0"):
        check_estimate(options=opts.replace(folds=folds))


def test_cluster_cols_and_normalize_ipw_options_are_checked() -> None:
    # GIVEN options of the wrong type or form WHEN built THEN named errors
    base = dict(data="x.csv", model="plr", y="y", d="d", x="x1", ml_l=LIN, ml_m=LIN)
    with pytest.raises(InvalidJobError, match="cluster_cols must be"):
        EstimateOptions(**base, cluster_cols=3).build_spec()
    with pytest.raises(InvalidJobError, match="normalize_ipw must be"):
        EstimateOptions(**base, normalize_ipw="yes").build_spec()
    with pytest.raises(InvalidJobError, match="cluster_cols names 3"):
        EstimateOptions(**base, cluster_cols="a,b,c").build_spec()
