"""The client checks a job's data against the stack's function memory before it launches it.

GIVEN a client whose stack's functions have known MemorySize values, WHEN a job's data would not fit
one of them (fanfit.limits.check_job), THEN submit raises LambdaLimitError naming the function, and
nothing is uploaded or started; data that fits goes on to the upload.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit import storage
from fanfit.client import Client, Stack
from fanfit.errors import LambdaLimitError, StackError


class _Refuse:
    """Any call is a test failure: nothing may be uploaded or started."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} called before the limits were checked")


class _Uploaded(Exception):
    """Raised by the fake store: the job got past the limit check to its upload."""


class _Store:
    bucket = "b"

    def put_data(self, *args: Any, **kwargs: Any) -> str:
        raise _Uploaded


class _Session:
    """CloudFormation outputs and Lambda configurations of a fake stack."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.region_name = "us-east-1"

    def client(self, service: str, endpoint_url: str | None = None) -> Any:
        sizes = self.sizes

        class _Cfn:
            def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 - boto3's
                outputs = [
                    {"OutputKey": f"{n}FunctionName", "OutputValue": f"fn-{n}"} for n in sizes
                ]
                return {"Stacks": [{"Outputs": outputs}]}

        class _Lambda:
            def get_function_configuration(self, FunctionName: str) -> dict[str, Any]:  # noqa: N803
                return {"MemorySize": sizes[FunctionName.removeprefix("fn-")]}

        return _Cfn() if service == "cloudformation" else _Lambda()


def _client(sizes: dict[str, int]) -> Client:
    client = Client.__new__(Client)
    client.session = _Session(sizes)
    client.local = True
    client.stack = Stack(name="fanfit", bucket="b", job_table="t", estimate_state_machine_arn="arn",
                         train_state_machine_arn="arn-train", train_worker_memory_mb=(1769, 885))  # fmt: skip
    client.s3 = _Refuse()
    client.sfn = _Refuse()
    client.store = _Store()  # type: ignore[assignment]
    return client


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(rng.normal(size=(n, 4)), columns=["y", "d", "x0", "x1"])


OPTIONS = dict(model="plr", y="y", d="d", x=["x0", "x1"], ml_l="LinearRegression",
               ml_m="LinearRegression", n_folds=2)  # fmt: skip


def test_an_estimate_over_a_functions_memory_is_rejected_before_launch():
    # GIVEN a stack whose Prepare has 128 MB, and 200,000 rows x 4 columns (6 MB of float64)
    client = _client({"Prepare": 128, "CrossFit": 1769, "Aggregate": 1769})
    # WHEN the estimate is submitted THEN LambdaLimitError names Prepare, nothing uploaded or started
    with pytest.raises(LambdaLimitError, match="Prepare needs about .* MemorySize 128 MB"):
        client.submit_estimate(_frame(200_000), **OPTIONS)


def test_an_estimate_that_fits_goes_on_to_the_upload():
    client = _client({"Prepare": 1769, "CrossFit": 1769, "Aggregate": 1769})
    with pytest.raises(_Uploaded):
        client.submit_estimate(_frame(1_000), **OPTIONS)
    assert client.function_memory_mb("estimate") == {
        "Prepare": 1769, "CrossFit": 1769, "Aggregate": 1769,
    }  # fmt: skip


def test_a_train_job_over_a_workers_memory_is_rejected_before_launch():
    # GIVEN a stack whose small TrainShard has 128 MB
    client = _client({"TrainInit": 1024, "TrainShardSmall": 128, "TrainShardLarge": 1769,
                      "TrainReduce": 1769})  # fmt: skip
    frame = _frame(200_000).rename(columns={"y": "a", "d": "b", "x0": "c", "x1": "e"})
    with pytest.raises(LambdaLimitError, match="TrainShardSmall"):
        client.submit_train(frame, model="kmeans", features=["a", "b", "c", "e"], n_clusters=3,
                            workers=2)  # fmt: skip


def test_memory_sizes_that_cannot_be_read_are_a_stack_error():
    client = _client({})
    client.session = object()  # no .client(): reading the stack fails
    with pytest.raises(StackError, match="memory sizes"):
        client.function_memory_mb("estimate")


def test_storage_key_checks_name_the_field():
    from fanfit.errors import InvalidJobError

    with pytest.raises(InvalidJobError, match="data_key"):
        storage.check_data_key("../../etc/passwd")
    with pytest.raises(InvalidJobError, match="folds_key"):
        storage.check_job_key("jobs/a/../b/x.npy", "a", field="folds_key")
    assert storage.check_job_key("jobs/a/input-folds.npy", "a", field="folds_key")
