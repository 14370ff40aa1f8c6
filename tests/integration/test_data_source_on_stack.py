"""s3:// data used in place on the local stack: the same estimate as from the local file.

GIVEN a small PLR data set written as a CSV file and put into the stack's bucket, WHEN one estimate
is submitted with ``data="s3://<stack bucket>/<key>"`` (the client reads the header only and
Prepare reads the object) and one with the local file (the client uploads it), THEN the first
job's spec names the source and not a data key, and both estimates agree to a relative 1e-12.
"""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

pytestmark = pytest.mark.integration

OPTIONS = dict(y="y", d="d", x=["x1", "x2"], ml_l="LinearRegression", ml_m="LinearRegression",
               n_folds=2, n_rep=1, seed=7, units_per_shard=4)  # fmt: skip


def test_an_estimate_from_s3_in_place_equals_the_local_files(local_client, tmp_path) -> None:
    import pandas as pd

    from fanfit import storage

    # GIVEN 120 rows of a partially linear model, as a CSV file and as an object in the stack's bucket
    rng = np.random.default_rng(5)
    x = rng.normal(size=(120, 2))
    d = x @ [0.5, -0.2] + rng.normal(size=120)
    y = 0.7 * d + x @ [1.0, 0.3] + rng.normal(size=120)
    frame = pd.DataFrame({"y": y, "d": d, "x1": x[:, 0], "x2": x[:, 1]}).round(8)
    path = tmp_path / "plr.csv"
    frame.to_csv(path, index=False)
    bucket, key = local_client.store.bucket, f"inputs/{uuid.uuid4().hex[:8]}/plr.csv"
    local_client.s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    # WHEN the same estimate runs from s3:// (in place) and from the local file, side by side
    started = time.perf_counter()
    in_place = local_client.submit_estimate(f"s3://{bucket}/{key}", **OPTIONS)
    uploaded = local_client.submit_estimate(str(path), **OPTIONS)
    ours, theirs = in_place.result(timeout=300), uploaded.result(timeout=300)
    print(f"\ntwo estimates (in place, uploaded) in {time.perf_counter() - started:.1f} s")
    # THEN the in-place job was submitted by reference and Prepare wrote its data object
    spec = local_client.store.get_json(storage.spec_key(in_place.job_id))
    assert spec.get("data_key") is None and spec["data_source"]["key"] == key
    plan = local_client.store.get_json(storage.plan_key(in_place.job_id))
    assert local_client.store.get_data(plan["data_key"])[0] == ["y", "d", "x1", "x2"]
    # AND the two estimates agree
    np.testing.assert_allclose(ours.coef, theirs.coef, rtol=1e-12, atol=0)
    np.testing.assert_allclose(ours.se, theirs.se, rtol=1e-12, atol=0)
