"""The four estimate handlers, run in-process on moto with the sample events of events/.

GIVEN the example job of events/ (the 401(k) data, PLR, linear learners, 2 folds, 1 repetition) in a
moto bucket, WHEN Prepare, Schedule, CrossFit (every shard) and Aggregate run in turn on those events, THEN the
result equals the in-process reference and the job record is SUCCEEDED.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def _event(name: str) -> dict:
    return json.loads((EVENTS / f"{name}.json").read_text())


@pytest.fixture
def aws(moto_stack):
    with moto_stack({"FANFIT_CROSSFIT_MEMORY_MB": "1769"}):
        yield


def _upload_example_job(store) -> None:
    """The job events/prepare.json refers to."""
    from fanfit import storage
    from fanfit.client import build_spec
    from fanfit.client.data import to_matrix

    spec, columns = build_spec(
        y="net_tfa", d="e401", x=X_COLS, z=None, model="plr", score=None,
        learners={"ml_l": "LinearRegression", "ml_m": "LogisticRegression:{\"max_iter\": 1000}"},
        n_folds=2, n_rep=1, seed=42,
    )  # fmt: skip
    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    names, values = to_matrix(frame, columns)
    job = {
        "kind": "estimate",
        "dml": spec.to_dict(),
        "data_key": store.put_data(names, values),
        "folds_key": None,
        "max_concurrency": 2,
        "units_per_shard": None,
    }
    store.put_json(storage.spec_key("example-job"), job)


def test_prepare_schedule_crossfit_aggregate_on_sample_events(aws, load_handler, lambda_context):
    from fanfit import dml, storage

    store = storage.JobStore("fanfit-unit")
    _upload_example_job(store)
    ctx = lambda_context()

    # WHEN Prepare runs on its sample event
    planned = load_handler("prepare")(_event("prepare"), ctx)
    # THEN it wrote the plan and the stage's 4 units (2 folds x 2 learners)
    assert planned["n_units"] == 4 and planned["has_next_stage"] is False

    # WHEN Schedule plans wave 0 with an empty throughput table
    schedule = load_handler("schedule")
    wave0 = schedule(_event("schedule"), ctx)
    # THEN it is a probe: single-unit shards, one per learner (max_concurrency 2)
    shards0 = store.get_json(wave0["shards_key"])
    assert wave0["has_wave"] and wave0["n_shards"] == 2 and wave0["max_concurrency"] == 2
    assert sorted(s["units"][0]["learner"] for s in shards0) == ["ml_l", "ml_m"]
    assert all(len(s["units"]) == 1 for s in shards0)
    # ... and the CrossFit sample event is the first shard of that wave (the fixture stays true)
    crossfit_event = _event("crossfit")
    assert crossfit_event["shard"] == shards0[0]

    # WHEN CrossFit runs on every shard of the wave (the sample event first)
    crossfit = load_handler("crossfit")
    outs = [crossfit(crossfit_event, ctx)]
    outs += [crossfit({**crossfit_event, "shard": s}, ctx) for s in shards0[1:]]
    # ... and a retried shard is answered from the idempotency record, not fitted again
    again = crossfit(crossfit_event, ctx)
    assert again == outs[0]

    # WHEN Schedule runs after the wave
    wave1 = schedule({**_event("schedule"), "wave": 1}, ctx)
    # THEN it recorded both learners' throughput and sized the other two units from it
    table = boto3.client("dynamodb").scan(TableName="fanfit-throughput")["Items"]
    assert len(table) == 2 and all(item["resource"]["S"] == "lambda-1769" for item in table)
    assert wave1["has_wave"] and wave1["next_wave"] == 2
    shards1 = store.get_json(wave1["shards_key"])
    keys = [dml.FitUnit.from_dict(u).key for s in shards0 + shards1 for u in s["units"]]
    assert len(keys) == len(set(keys)) == 4
    outs += [crossfit({**crossfit_event, "shard": s}, ctx) for s in shards1]
    record = storage.JobRecords("fanfit-jobs").get("example-job")
    decision = record["schedule"]["waves"][1]["decision"]
    assert decision["probe"] is False and decision["seconds_per_unit"] > 0
    # ... and the wave after that is empty: the stage is done
    assert schedule({**_event("schedule"), "wave": 2}, ctx) == {
        "job_id": "example-job",
        "plan_key": "jobs/example-job/plan.json",
        "stage": 0,
        "wave": 2,
        "has_wave": False,
    }

    # WHEN Aggregate runs
    done = load_handler("aggregate")(_event("aggregate"), ctx)
    result = store.get_json(done["result_key"])

    # THEN the estimate equals the in-process reference with the same folds
    plan = store.get_json(storage.plan_key("example-job"))
    spec = dml.DMLSpec.from_dict(plan["dml"])
    columns, values = store.get_data(plan["data_key"])
    data = dml.validate_data(spec, columns, values)
    folds = store.get_array(plan["folds_key"])
    ref = dml.estimate_in_process(spec, data, folds)
    np.testing.assert_allclose(result["coef"]["e401"], ref.coef[0], rtol=1e-12)
    np.testing.assert_allclose(result["se"]["e401"], ref.se[0], rtol=1e-12)
    # ... with every learner's out-of-sample loss (n_rep x n_treat) and the job's spec
    from fanfit.dml.losses import nuisance_loss

    ref_loss = nuisance_loss(spec, data, ref.predictions)
    assert set(result["nuisance_loss"]) == {"ml_l", "ml_m"}
    for key, loss in ref_loss.items():
        np.testing.assert_allclose(result["nuisance_loss"][key], loss, rtol=1e-12)
    assert result["spec"] == plan["dml"]
    assert len(result["timings"]["shards"]) == len(shards0) + len(shards1)
    assert result["timings"]["billed_gb_s"] > 0
    record = storage.JobRecords("fanfit-jobs").get("example-job")
    assert record["status"] == "SUCCEEDED" and record["result_key"] == done["result_key"]


def test_prepare_rejects_an_unknown_column_with_a_named_error(aws, load_handler, lambda_context):
    from fanfit import storage
    from fanfit.errors import InvalidDataError

    # GIVEN a spec whose outcome column is not in the data
    store = storage.JobStore("fanfit-unit")
    _upload_example_job(store)
    job = store.get_json(storage.spec_key("example-job"))
    job["dml"]["y_col"] = "no_such_column"
    store.put_json(storage.spec_key("example-job"), job)
    # WHEN Prepare runs THEN it raises InvalidDataError naming the column, and writes no plan
    with pytest.raises(InvalidDataError, match="no_such_column"):
        load_handler("prepare")(_event("prepare"), lambda_context())
    assert not store.exists(storage.plan_key("example-job"))


def test_crossfit_rejects_a_malformed_event(aws, load_handler, lambda_context):
    from fanfit.errors import InvalidEventError

    # GIVEN a CrossFit event whose shard has no units WHEN it runs THEN it is rejected before any work
    bad = {**_event("crossfit"), "shard": {"shard_id": "00000", "units": []}}
    with pytest.raises(InvalidEventError, match="units"):
        load_handler("crossfit")(bad, lambda_context())
