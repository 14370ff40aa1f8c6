"""Placement at run time on the session stack: the CrossFit functions of the offered memory sizes
and the placement decision a tiny job records (issue 14, items 1 and 2)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit import storage

pytestmark = pytest.mark.integration


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(14)
    x = rng.normal(size=(120, 3))
    d = x[:, 0] + rng.normal(size=120)
    y = 0.5 * d + x[:, 1] + rng.normal(size=120)
    return pd.DataFrame({"y": y, "d": d, "X1": x[:, 0], "X2": x[:, 1], "X3": x[:, 2]})


def test_a_tiny_job_records_its_placement(local_client: Any, fanfit_outputs: dict) -> None:
    started = time.perf_counter()
    # GIVEN the session stack: three CrossFit functions, one per offered memory size
    sizes = [int(mb) for mb in fanfit_outputs["CrossFitFunctionMemorySizes"].split(",")]
    assert sizes == [1769, 3538, 10240]
    names = [fanfit_outputs[k] for k in ("CrossFitFunctionName", "CrossFitFunction2Name",
                                         "CrossFitFunction3Name")]  # fmt: skip
    assert len(set(names)) == 3
    # WHEN a tiny PLR job with linear learners runs
    job = local_client.submit_estimate(
        _frame(), model="plr", y="y", d="d", x=["X1", "X2", "X3"], n_folds=2, n_rep=1,
        ml_l="LinearRegression", ml_m="LinearRegression", seed=1,
    )  # fmt: skip
    job.result(timeout=300)
    # THEN every shard ran on one of the offered sizes (its resource names it)
    store = local_client.store
    schedule = store.get_json(storage.schedule_key(job.job_id, 0))
    resources = {sh.get("resource") for w in schedule["waves"] for sh in w["shards"]}
    print(f"resources {resources}; {time.perf_counter() - started:.1f} s")
    assert resources and resources <= {f"lambda-{mb}" for mb in sizes}
