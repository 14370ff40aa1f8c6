"""Shared fixtures of the unit tests: small synthetic data sets for the DML models, and fanfit's
bucket and tables on moto for the handler tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
import pytest


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
