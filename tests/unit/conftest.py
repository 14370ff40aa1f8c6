"""Shared fixtures of the unit tests: small synthetic data sets for the DML models, fanfit's
bucket and tables on moto for the handler tests, the functions' handlers with a stand-in
LambdaContext, and a guard that fails a test touching boto3 or the local stack."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _make_frame(
    model: str,
    n_obs: int = 250,
    n_treat: int = 1,
    n_instr: int = 1,
    binary_d: bool = False,
    binary_y: bool = False,
    seed: int = 0,
) -> pd.DataFrame:
    """A synthetic data set with columns x0..x4, the treatment(s), instrument(s) and y.

    Treatments are ``d`` (one) or ``d1, d2, ...``; instruments ``z`` (one) or ``z1, z2, ...``.
    plr: continuous (or binary) treatments confounded by x; irm: one binary treatment;
    pliv: an unobserved confounder u and continuous instruments; iivm: binary instrument and treatment.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, 5))
    cols = {f"x{i}": x[:, i] for i in range(5)}
    u = rng.normal(size=n_obs)
    d_names = ["d"] if n_treat == 1 else [f"d{j + 1}" for j in range(n_treat)]
    z_names = ["z"] if n_instr == 1 else [f"z{k + 1}" for k in range(n_instr)]
    ds: list[np.ndarray] = []
    signal = x[:, 2] + 0.5 * x[:, 3]
    if model in ("plr", "pliv"):
        zs = (
            [x[:, k] * 0.3 + rng.normal(size=n_obs) for k in range(n_instr)]
            if model == "pliv"
            else []
        )
        for j in range(n_treat):
            latent = (
                0.6 * x[:, j] + (0.8 * sum(zs) if zs else 0.0) + (u if model == "pliv" else 0.0)
            )
            latent = latent + rng.normal(size=n_obs)
            ds.append((latent > 0).astype(float) if binary_d else latent)
        for name, z in zip(z_names, zs):
            cols[name] = z
        signal = signal + (u if model == "pliv" else 0.0)
    elif model == "irm":
        p = 1 / (1 + np.exp(-(0.8 * x[:, 0] - 0.4 * x[:, 1])))
        ds.append((rng.uniform(size=n_obs) < p).astype(float))
    elif model == "iivm":
        pz = 1 / (1 + np.exp(-0.5 * x[:, 0]))
        z = (rng.uniform(size=n_obs) < pz).astype(float)
        ds.append((1.2 * z + 0.4 * x[:, 1] + rng.normal(size=n_obs) > 0.6).astype(float))
        cols["z"] = z
    else:
        raise ValueError(model)
    for name, dj in zip(d_names, ds):
        cols[name] = dj
    latent_y = sum(0.5 * dj for dj in ds) + signal + rng.normal(size=n_obs)
    cols["y"] = (latent_y > np.median(latent_y)).astype(float) if binary_y else latent_y
    return pd.DataFrame(cols)


@pytest.fixture(scope="session")
def make_frame():
    """Factory ``make_frame(model, n_obs=250, n_treat=1, n_instr=1, binary_d=False, binary_y=False, seed=0)``."""
    return _make_frame


def _make_plr_frame(n: int = 400, seed: int = 0) -> pd.DataFrame:
    """A partially linear data set: columns y, d (confounded by x1) and x1, x2, x3."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    d = x[:, 0] + rng.normal(size=n)
    y = 0.5 * d + x[:, 1] + rng.normal(size=n)
    return pd.DataFrame({"y": y, "d": d, "x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2]})


@pytest.fixture(scope="session")
def make_plr_frame():
    """Factory ``make_plr_frame(n=400, seed=0)`` of a data set with columns y, d, x1, x2, x3."""
    return _make_plr_frame


#: The environment every handler reads (as the template's Globals set it), pointing at moto.
MOTO_ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "FANFIT_BUCKET": "fanfit-unit",
    "FANFIT_JOB_TABLE": "fanfit-jobs",
    "FANFIT_IDEMPOTENCY_TABLE": "fanfit-idempotency",
    "FANFIT_THROUGHPUT_TABLE": "fanfit-throughput",
    "POWERTOOLS_SERVICE_NAME": "fanfit",
    "POWERTOOLS_METRICS_NAMESPACE": "FanfitTest",
    "POWERTOOLS_TRACE_DISABLED": "true",
}


@pytest.fixture
def moto_stack(monkeypatch):
    """A context manager: moto with fanfit's bucket, job, idempotency and throughput tables.

    ``moto_stack(env, hash_tables)`` sets :data:`MOTO_ENV` plus ``env``, creates the bucket and the
    tables (plus one ``job_id``-keyed table per name in ``hash_tables``) and yields an S3 client.
    """
    moto = pytest.importorskip("moto")
    import boto3

    @contextlib.contextmanager
    def start(env: Mapping[str, str] = (), hash_tables: tuple[str, ...] = ()) -> Iterator[Any]:
        for key, value in {**MOTO_ENV, **dict(env)}.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        with moto.mock_aws():
            s3 = boto3.client("s3")
            s3.create_bucket(Bucket="fanfit-unit")
            ddb = boto3.client("dynamodb")
            keys = [("fanfit-jobs", "job_id"), ("fanfit-idempotency", "id")]
            for table, key in keys + [(name, "job_id") for name in hash_tables]:
                ddb.create_table(
                    TableName=table,
                    KeySchema=[{"AttributeName": key, "KeyType": "HASH"}],
                    AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                    BillingMode="PAY_PER_REQUEST",
                )
            ddb.create_table(
                TableName="fanfit-throughput",
                KeySchema=[
                    {"AttributeName": "signature", "KeyType": "HASH"},
                    {"AttributeName": "resource", "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": "signature", "AttributeType": "S"},
                    {"AttributeName": "resource", "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
            yield s3

    return start


#: The partition table of the job-sharing tests (``partition_stack``), and its history table.
PARTITION_TABLE = "fanfit-partitions"
PARTITION_HISTORY_TABLE = "fanfit-partition-history"


@pytest.fixture
def partition_stack(moto_stack):
    """:func:`moto_stack` with the partition table, an account concurrency of 4, no Batch vCPUs."""
    import boto3

    env = {
        "FANFIT_PARTITION_TABLE": PARTITION_TABLE,
        "FANFIT_PARTITION_HISTORY_TABLE": PARTITION_HISTORY_TABLE,
        "FANFIT_ACCOUNT_CONCURRENCY": "4",
        "FANFIT_BATCH_MAX_VCPUS": "0",
    }
    with moto_stack(env, hash_tables=(PARTITION_TABLE,)):
        boto3.client("dynamodb").create_table(
            TableName=PARTITION_HISTORY_TABLE,
            KeySchema=[{"AttributeName": "version", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "version", "AttributeType": "N"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield


@pytest.fixture
def moto_client():
    """A builder of :class:`fanfit.client.Client` s of the moto stack: no CloudFormation and no
    functions, two pass-through state machines (estimate, train). ``moto_client()`` inside a
    :func:`moto_stack`; ``moto_client(partition_table=...)`` also reads the partition table."""
    import json

    import boto3

    from fanfit import storage
    from fanfit.client import Client, Stack

    def build(partition_table: str | None = None) -> Any:
        session = boto3.Session()
        sfn = session.client("stepfunctions")
        definition = json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}})
        arns = {
            kind: sfn.create_state_machine(
                name=f"fanfit-{kind}",
                definition=definition,
                roleArn="arn:aws:iam::123456789012:role/fanfit-states",
            )["stateMachineArn"]
            for kind in ("estimate", "train")
        }
        client = Client.__new__(Client)
        client.session = session
        client.local = True
        client.stack = Stack(name="fanfit", bucket="fanfit-unit", job_table="fanfit-jobs",
                             estimate_state_machine_arn=arns["estimate"],
                             train_state_machine_arn=arns["train"], train_worker_memory_mb=(1769,),
                             partition_table=partition_table)  # fmt: skip
        client.s3 = session.client("s3")
        client.sfn = sfn
        client.store = storage.JobStore("fanfit-unit", client.s3)
        client.records = storage.JobRecords("fanfit-jobs", session.client("dynamodb"))
        client.partitions = (
            storage.Partitions(
                partition_table,
                session.client("dynamodb"),
                history_table=os.environ.get("FANFIT_PARTITION_HISTORY_TABLE"),
            )
            if partition_table
            else None
        )
        client.__dict__["_memory_mb"] = {"estimate": {}, "train": {}}  # no functions to check
        return client

    return build


@pytest.fixture
def make_partitions(partition_stack):
    """Factory ``make_partitions()``: a new :class:`fanfit.storage.Partitions` of the moto table."""
    from fanfit.storage import Partitions

    return lambda: Partitions(PARTITION_TABLE, history_table=PARTITION_HISTORY_TABLE)


@pytest.fixture
def job_storage(partition_stack):
    """fanfit's bucket, job table and throughput table on moto (with ``partition_stack``): a
    ``(JobStore, JobRecords, ThroughputRecords)`` tuple."""
    from fanfit import storage

    return (
        storage.JobStore("fanfit-unit"),
        storage.JobRecords("fanfit-jobs"),
        storage.ThroughputRecords("fanfit-throughput"),
    )


@pytest.fixture(scope="session")
def put_estimate_spec(make_plr_frame):
    """``put_estimate_spec(store, key, n_rep=2, max_concurrency=4, **extra)``: put an estimate job
    (PLR of y on d and x1..x3 of ``make_plr_frame()``, linear learners, 2 folds, seed 3) at ``key``,
    with ``extra`` added to the job file; returns what ``store.put_json`` returns."""

    def put(store, key: str, n_rep: int = 2, max_concurrency: int = 4, **extra: Any) -> str:
        from fanfit.client import build_spec
        from fanfit.client.data import to_matrix

        spec, columns = build_spec(
            y="y", d="d", x=["x1", "x2", "x3"], z=None, model="plr", score=None,
            learners={"ml_l": "LinearRegression", "ml_m": "LinearRegression"},
            n_folds=2, n_rep=n_rep, seed=3,
        )  # fmt: skip
        names, values = to_matrix(make_plr_frame(), columns)
        job = {"kind": "estimate", "dml": spec.to_dict(), "data_key": store.put_data(names, values),
               "folds_key": None, "max_concurrency": max_concurrency, "units_per_shard": None,
               **extra}  # fmt: skip
        return store.put_json(key, job)

    return put


@pytest.fixture(scope="session")
def put_train_spec(make_plr_frame):
    """``put_train_spec(store, key)``: put a train job (K-Means of x1, x2 of ``make_plr_frame()``,
    4 workers, 3 clusters, 3 rounds, seed 1) at ``key``; returns what ``store.put_json`` returns."""

    def put(store, key: str) -> str:
        from fanfit.client.data import to_matrix
        from fanfit.client.train import build_train_spec

        spec = build_train_spec(model="kmeans", features=["x1", "x2"], workers=4, n_clusters=3,
                                rounds=3, seed=1)  # fmt: skip
        names, values = to_matrix(make_plr_frame(), list(spec.features))
        job = {"kind": "train", "spec": spec.to_dict(), "data_key": store.put_data(names, values),
               "init_key": None}  # fmt: skip
        return store.put_json(key, job)

    return put


@dataclass
class FakeContext:
    """The parts of LambdaContext the handlers and Powertools read."""

    function_name: str = "fanfit-test"
    memory_limit_in_mb: int = 1769
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:fanfit-test"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 300_000


@pytest.fixture(scope="session")
def lambda_context():
    """Factory ``lambda_context(memory_limit_in_mb=1769, ...)`` of a stand-in LambdaContext."""
    return FakeContext


def _load_handler(name: str, prefix: str = "fanfit_fn"):
    # The functions all name their module app.py, as SAM's Handler app.lambda_handler expects.
    spec = importlib.util.spec_from_file_location(
        f"{prefix}_{name}", ROOT / "functions" / name / "app.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.lambda_handler


@pytest.fixture(scope="session")
def load_handler():
    """``load_handler(name, prefix="fanfit_fn")``: the ``lambda_handler`` of
    functions/<name>/app.py, imported afresh as module ``<prefix>_<name>`` (so that, under moto,
    its module-level clients are moto's)."""
    return _load_handler


class AwsContacted(AssertionError):
    """Raised by the ``no_aws`` guard."""


@pytest.fixture
def no_aws(monkeypatch):
    """Any boto3 session, client or resource, and any local stack call, fails the test (raising
    :class:`AwsContacted`, which the fixture returns)."""
    import boto3
    import boto3.session

    from fanfit.local import stack as local_stack

    def boom(*args, **kwargs):
        raise AwsContacted("a boto3 session/client was created or the local stack touched")

    monkeypatch.setattr(boto3.session.Session, "__init__", boom)
    monkeypatch.setattr(boto3.session.Session, "client", boom)
    monkeypatch.setattr(boto3.session.Session, "resource", boom)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    for name in ("ensure_local_stack", "status", "up", "down"):
        monkeypatch.setattr(local_stack, name, boom)
    return AwsContacted
