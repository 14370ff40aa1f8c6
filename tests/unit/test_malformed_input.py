"""Malformed input, thrown with hypothesis at every handler and at the client's spec builders.

GIVEN an event (or a job spec in S3, or client options) that is malformed (wrong types, missing or
unknown keys, huge, negative or NaN numbers, path traversal or code in strings, not a JSON object),
WHEN a handler of functions/*/app.py or a spec builder takes it, THEN it raises a named fanfit error
(a FanfitError subclass) and never a KeyError/TypeError/AttributeError, and the bucket is unchanged.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fanfit.errors import FanfitError, InvalidEventError

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
HANDLERS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/app.py"))
ARN = "arn:aws:lambda:us-east-1:123456789012:function:fanfit-TrainShard{}Function"
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

NASTY_STRINGS = st.sampled_from(
    [
        "",
        "../../etc/passwd",
        "jobs/../../secrets",
        "jobs/x/../../other-job/spec.json",
        "__import__('os').system('touch /tmp/pwned')",
        "'; DROP TABLE jobs; --",
        "${jndi:ldap://x}",
        "{{7*7}}",
        "\x00\n\r",
        "a" * 5000,
        "NaN",
        "1e309",
    ]
)
NUMBERS = st.sampled_from([-1, -(2**63), 2**63, 10**30, math.nan, math.inf, -math.inf, 0.5, 1e308])
ANY_JSON = st.recursive(
    st.none() | st.booleans() | NUMBERS | st.integers() | NASTY_STRINGS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NASTY_STRINGS, inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture
def aws(moto_stack):
    env = {
        "FANFIT_PARTITION_TABLE": "fanfit-partitions",
        "FANFIT_CROSSFIT_MEMORY_MB": "1769",
        "FANFIT_TRAIN_WORKER_FUNCTIONS": json.dumps(
            {"1769": ARN.format("Large"), "885": ARN.format("Small")}
        ),
    }
    with moto_stack(env) as s3:
        yield s3


def _event(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


def _bucket(s3) -> dict[str, str]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="fanfit-unit"):
        out.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
    return out


@st.composite
def malformed_event(draw, base: dict):
    """A sample event broken one or more ways, or not an object at all."""
    how = draw(st.sampled_from(["not-object", "drop", "unknown", "replace", "json-string"]))
    if how == "not-object":
        return draw(
            st.none() | st.booleans() | NUMBERS | NASTY_STRINGS | st.lists(ANY_JSON, max_size=3)
        )
    event = json.loads(json.dumps(base))
    if how == "drop":
        required = [k for k in event if k != "execution_arn"]
        for key in draw(st.lists(st.sampled_from(required), min_size=1, unique=True)):
            event.pop(key)
    elif how == "unknown":
        event[draw(NASTY_STRINGS.filter(lambda k: k not in event) | st.just("extra"))] = draw(
            ANY_JSON
        )
    elif how == "replace":
        key = draw(st.sampled_from(sorted(event)))
        event[key] = draw(ANY_JSON | st.integers(-(10**12), 10**12))
    else:
        event = json.dumps({**event, "stage": -1, "round": -1}, allow_nan=True)
    return event


def _model_accepts(module, event) -> bool:
    """Whether the handler's event model takes the event (such cases are not malformed)."""
    from aws_lambda_powertools.utilities.parser import parse
    from pydantic import ValidationError

    from fanfit.jobs.documents import events

    model = {
        "prepare": events.PrepareEvent,
        "schedule": events.ScheduleEvent,
        "crossfit": events.CrossFitEvent,
        "aggregate": events.AggregateEvent,
        "train_init": events.TrainInitEvent,
        "train_schedule": events.TrainRoundEvent,
        "train_reduce": events.TrainRoundEvent,
        "train_shard": events.TrainShardEvent,
        "train_finalize": events.TrainFinalizeEvent,
        "release": events.ReleaseEvent,
        "watch_gpu_job": events.WatchGpuJobEvent,
        "client_inputs": events.ClientInputsEvent,
    }[module]
    try:
        parse(event=event, model=model)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("name", HANDLERS)
def test_every_handler_rejects_malformed_events_by_name_and_writes_nothing(
    aws, load_handler, lambda_context, name
):
    handler = load_handler(name, "fanfit_fn_malformed")
    base = _event(name)
    before = _bucket(aws)

    @SETTINGS
    @given(event=malformed_event(base))
    def check(event):
        assume(not _model_accepts(name, event))
        # WHEN the handler takes the malformed event THEN it raises InvalidEventError naming a field
        with pytest.raises(InvalidEventError, match="malformed"):
            handler(event, lambda_context())
        # ... and nothing was written
        assert _bucket(aws) == before

    check()


def test_malformed_event_messages_name_the_field_without_echoing_the_value(
    aws, load_handler, lambda_context
):
    handler = load_handler("schedule", "fanfit_fn_malformed")
    huge = "x" * 100_000
    with pytest.raises(InvalidEventError) as info:
        handler({"job_id": huge, "stage": 0, "wave": 0}, lambda_context())
    assert "job_id" in str(info.value) and huge not in str(info.value)


def test_keys_outside_the_job_are_rejected(aws, load_handler, lambda_context):
    # GIVEN an event whose spec_key points into another job's prefix, or climbs out with ..
    handler = load_handler("prepare", "fanfit_fn_malformed")
    for key in ("jobs/other-job/spec.json", "jobs/example-job/../other/spec.json"):
        # THEN it is malformed
        with pytest.raises(InvalidEventError):
            handler({**_event("prepare"), "spec_key": key}, lambda_context())


# --- malformed job specs in S3 (what Prepare and TrainInit read) ---------------------------------


def _estimate_job(store) -> dict:
    import numpy as np

    return {
        "kind": "estimate",
        "dml": {
            "model": "plr",
            "score": "partialling out",
            "y_col": "y",
            "d_cols": ["d"],
            "x_cols": ["x0", "x1"],
            "z_cols": [],
            "n_folds": 2,
            "n_rep": 1,
            "seed": 1,
            "learners": {
                "ml_l": {"name": "LinearRegression", "params": {}},
                "ml_m": {"name": "LinearRegression", "params": {}},
            },
        },
        "data_key": store.put_data(
            ["y", "d", "x0", "x1"], np.random.default_rng(0).normal(size=(40, 4))
        ),
        "folds_key": None,
        "max_concurrency": 2,
        "units_per_shard": None,
    }


def _train_job(store) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    values = np.column_stack([rng.normal(size=(60, 2)), rng.integers(0, 2, 60)])
    return {
        "kind": "train",
        "spec": {
            "model": "logreg",
            "features": ["a", "b"],
            "target": "label",
            "workers": 2,
            "rounds": 2,
            "global_batch": 20,
        },
        "data_key": store.put_data(["a", "b", "label"], values),
    }


SPEC_CASES = {
    "not-an-object": lambda job, section: ["not", "a", "job"],
    "section-missing": lambda job, section: {k: v for k, v in job.items() if k != section},
    "section-not-an-object": lambda job, section: {**job, section: "__import__('os')"},
    "data-key-null": lambda job, section: {**job, "data_key": None},
    "data-key-traversal": lambda job, section: {**job, "data_key": "../../etc/passwd"},
    "unknown-model": lambda job, section: {**job, section: {**job[section], "model": "rm -rf"}},
    "negative-count": lambda job, section: {
        **job,
        section: {**job[section], ("n_folds" if section == "dml" else "workers"): -3},
    },
    "max-concurrency-text": lambda job, section: {**job, "max_concurrency": "lots"},
    "max-concurrency-float": lambda job, section: {**job, "max_concurrency": 2.5},
    "absurd-count": lambda job, section: {
        **job,
        section: {**job[section], ("n_folds" if section == "dml" else "workers"): 10**9},
    },
    "absurd-repetitions": lambda job, section: {
        **job,
        section: {**job[section], ("n_rep" if section == "dml" else "rounds"): 10**12},
    },
    "init-key-traversal": lambda job, section: {**job, "init_key": "jobs/../../etc/passwd"},
}


@pytest.mark.parametrize("case", sorted(SPEC_CASES))
@pytest.mark.parametrize(("name", "section"), [("prepare", "dml"), ("train_init", "spec")])
def test_prepare_and_train_init_reject_malformed_specs_by_name(
    aws, load_handler, lambda_context, name, section, case
):
    from fanfit import storage

    if name == "train_init" and case.startswith("max-concurrency"):
        pytest.skip("a train job file has no max_concurrency (its top-level extras are ignored)")
    if name == "prepare" and case == "init-key-traversal":
        pytest.skip("an estimate job file has no init_key")
    handler = load_handler(name, "fanfit_fn_malformed")
    store = storage.JobStore("fanfit-unit")
    job_id = _event(name)["job_id"]
    base = _estimate_job(store) if name == "prepare" else _train_job(store)
    # GIVEN a malformed job file at the job's spec key
    store.put_bytes(storage.spec_key(job_id), json.dumps(SPEC_CASES[case](base, section)).encode())
    before = _bucket(aws)
    # WHEN the first function of the job reads it THEN a named error, and nothing written
    with pytest.raises(FanfitError):
        handler(_event(name), lambda_context())
    assert _bucket(aws) == before


@pytest.mark.parametrize("name", ["prepare", "schedule", "crossfit", "aggregate", "train_init",
                                  "train_schedule", "train_reduce", "train_shard", "train_finalize"])  # fmt: skip
def test_a_well_formed_event_naming_a_job_that_does_not_exist_raises_job_not_found(
    aws, load_handler, lambda_context, name
):
    from fanfit.errors import JobNotFoundError

    # GIVEN the sample event of a function, for a job with no object in the bucket
    handler = load_handler(name, "fanfit_fn_malformed")
    before = _bucket(aws)
    # WHEN the function takes it THEN JobNotFoundError (not botocore's NoSuchKey), nothing written
    with pytest.raises(JobNotFoundError, match="example-(job|train)"):
        handler(_event(name), lambda_context())
    assert _bucket(aws) == before


# --- the client's spec builders ---------------------------------------------------------------------

BUILD_SPEC = {
    "y": "y",
    "d": "d",
    "x": ["x0", "x1"],
    "z": None,
    "model": "plr",
    "score": None,
    "learners": {"ml_l": "LinearRegression", "ml_m": "LinearRegression"},
    "n_folds": 2,
    "n_rep": 1,
    "seed": 0,
}
BUILD_TRAIN = {"model": "logreg", "features": ["a", "b"], "target": "label", "workers": 2}


@SETTINGS
@given(
    key=st.sampled_from(sorted(BUILD_SPEC) + ["trimming_threshold", "n_rep_boot", "boot_method"]),
    value=ANY_JSON | st.integers(-(10**12), 10**12),
)
def test_build_spec_raises_only_named_errors(key, value):
    from fanfit.client import build_spec

    with contextlib.suppress(FanfitError):
        build_spec(**{**BUILD_SPEC, key: value})


@SETTINGS
@given(
    key=st.sampled_from(
        sorted(BUILD_TRAIN)
        + ["worker_memory", "global_batch", "rounds", "balance", "sync", "group_size"]
        + ["n_clusters", "lr", "l2", "tol", "seed", "standardize"]
    ),
    value=ANY_JSON | st.integers(-(10**12), 10**12),
)
def test_build_train_spec_raises_only_named_errors(key, value):
    from fanfit.client.train import build_train_spec

    with contextlib.suppress(FanfitError):
        build_train_spec(**{**BUILD_TRAIN, key: value})
