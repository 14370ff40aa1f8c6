"""DS-Sync's group all-reduce: no reducer; each worker averages its own group's partials.

GIVEN a DS-Sync logreg job whose round's workers have written their partials (the handlers on
moto), WHEN the next round's Schedule runs, THEN it records the round from the workers' small
records only (no partial, no model); WHEN a worker of the next round steps, THEN it reads exactly
its round-before group's partials (the S3 keys it read) and its model is
:func:`fanfit.train.sgd.dssync_step` of that group, the same for every member. Also the ASL (no
reduce under DS-Sync, names from :mod:`fanfit.jobs.states`) and the documents.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_train_handlers import WORKER_FUNCTIONS, _upload

ROOT = Path(__file__).resolve().parents[2]
JOB = "example-train"


@pytest.fixture
def aws(moto_stack):
    with moto_stack({"FANFIT_TRAIN_WORKER_FUNCTIONS": json.dumps(WORKER_FUNCTIONS)}):
        yield


class _Spy:
    """Records the keys a JobStore reads (get_arrays, get_json, exists)."""

    def __init__(self, store, monkeypatch) -> None:
        self.keys: list[str] = []
        for name in ("get_arrays", "get_json", "exists"):
            real = getattr(store, name)
            monkeypatch.setattr(store, name, self._wrap(real))

    def _wrap(self, real):
        def read(key, *args, **kwargs):
            self.keys.append(key)
            return real(key, *args, **kwargs)

        return read


def _round_0(load_handler, lambda_context, workers: int = 6):
    """A 6-worker DS-Sync job (groups of 2) after round 0's Schedule and workers' Map."""
    from fanfit import storage

    rng = np.random.default_rng(4)
    X = rng.normal(size=(240, 3))
    y = (X @ np.array([1.0, -1.0, 0.5]) > 0).astype(float)
    store = storage.JobStore("fanfit-unit")
    _upload(store, pd.DataFrame(np.column_stack([X, y]), columns=["a", "b", "c", "y"]),
            model="logreg", features="a,b,c", target="y", workers=workers, global_batch=60,
            rounds=3, sync="ds-sync", group_size=2, lr=0.5, seed=5)  # fmt: skip
    load_handler("train_init")({"job_id": JOB, "spec_key": storage.spec_key(JOB),
                                "execution_arn": "arn:x"}, lambda_context())  # fmt: skip
    planned = load_handler("train_schedule")({"job_id": JOB, "round": 0}, lambda_context())
    for item in planned["workers"]:
        load_handler("train_shard")(item, lambda_context(memory_limit_in_mb=1769))
    return store, planned


def _group_reference(store, members: list[int]) -> dict:
    """dssync_step of round 0's group ``members`` from the first model (the in-process maths)."""
    from fanfit import storage
    from fanfit.jobs.train.data import plan_xy, read_plan, read_round_plan
    from fanfit.train.batches import batch_rows
    from fanfit.train.sgd import dssync_step, worker_gradient

    first = store.get_arrays(storage.train_group_state_key(JOB, 0, 0))
    X, y = plan_xy(store, read_plan(store, JOB))
    batches = np.asarray(read_round_plan(store, JOB, 0).batches)
    grads = [
        worker_gradient("logistic", first, X[rows], y[rows])
        for rows in (batch_rows(X.shape[0], batches, 5, 0, i) for i in members)
    ]
    return dssync_step([first] * len(members), grads, [list(range(len(members)))], 0.5)[0]


def test_the_next_schedule_records_the_round_from_the_workers_records_only(
    aws, load_handler, lambda_context, monkeypatch
):
    from fanfit import storage
    from fanfit.jobs.train.data import get_state_groups, read_round_plan
    from fanfit.jobs.train.schedule import schedule_round

    # GIVEN round 0 of a 6-worker DS-Sync job, its workers' partials and records written; no
    # reduce follows the workers' Map, the schedule says where the execution goes on
    store, planned = _round_0(load_handler, lambda_context)
    assert planned["reduce"] is False
    assert planned["advance"] == {"job_id": JOB, "round": 1, "has_next_round": True}
    groups = read_round_plan(store, JOB, 0).groups
    assert not store.exists(storage.train_state_key(JOB, 1))

    # WHEN round 1's Schedule runs, the store's reads recorded
    spy = _Spy(store, monkeypatch)
    out = schedule_round(store, storage.ThroughputRecords("fanfit-throughput"), JOB, 1)

    # THEN it read no partial and no model, only the workers' small records (and plans, states)
    assert not [k for k in spy.keys if k.endswith(".npz") and "/workers/" in k]
    assert {storage.train_worker_record_key(JOB, 0, i) for i in range(6)} <= set(spy.keys)
    # ... and, measured now, it runs rounds 1 and 2 (the rounds left) as one segment
    assert out["reduce"] is False and out["advance"]["round"] == 3
    assert {item["round"] for item in out["workers"]} == {1}
    assert {item["rounds"] for item in out["workers"]} == {2}
    # ... round 1's state holds only the meta, round 0's groups and the flag that its models
    # are the groups' averaged partials
    state, meta = get_state_groups(store, JOB, 1)
    assert meta.groups == groups and meta.from_partials is True
    assert state.arrays == {} and state.n_iter == 1
    # ... and round 0's record covers every worker once, with the batch-weighted loss and the
    # seconds each spent on its group's average
    record = store.get_json(storage.train_round_key(JOB, 0))
    assert [w["worker"] for w in record["workers"]] == list(range(6))
    assert all(w["sync_s"] >= 0 for w in record["workers"])
    parts = [store.get_json(storage.train_worker_record_key(JOB, 0, i)) for i in range(6)]
    n = sum(p["n_samples"] for p in parts)
    loss = sum(p["n_samples"] * p["loss"] for p in parts) / n
    assert record["loss"] == pytest.approx(loss, rel=1e-12)


def test_a_worker_reads_only_its_groups_partials_and_every_member_gets_the_same_model(
    aws, load_handler, lambda_context, monkeypatch
):
    from fanfit import storage
    from fanfit.jobs.train import data
    from fanfit.jobs.train.data import get_state_groups, read_round_plan, worker_params
    from fanfit.jobs.train.shard import train_shard

    # GIVEN round 0 done and round 1 scheduled
    store, _ = _round_0(load_handler, lambda_context)
    planned = load_handler("train_schedule")({"job_id": JOB, "round": 1}, lambda_context())
    groups = read_round_plan(store, JOB, 0).groups
    members = groups[1]
    partials = {storage.train_partial_key(JOB, 0, i) for i in range(6)}

    # WHEN a member of round 0's group 1 steps in round 1 in an environment that holds no
    # partial, the store's reads recorded
    monkeypatch.setattr(data, "_OWN_PARTIAL", {})
    spy = _Spy(store, monkeypatch)
    assert planned["workers"][members[0]]["worker"] == members[0]
    out = train_shard(store, JOB, 1, members[0], memory_mb=1769)

    # THEN it read exactly its group's partials of round 0, and no stored model
    assert {k for k in spy.keys if k in partials} == {
        storage.train_partial_key(JOB, 0, i) for i in members
    }
    assert not [k for k in spy.keys if "/groups/" in k]
    assert out["sync_s"] > 0 and out["sync_held"] == 0
    # ... and every member's model is dssync_step of the group, bit for bit, other groups' not
    state, meta = get_state_groups(store, JOB, 1)
    ref = _group_reference(store, members)
    for i in members:
        model = worker_params(store, JOB, 1, state, i, meta)
        for key in ("W", "b"):
            np.testing.assert_array_equal(model[key], ref[key])
    other = worker_params(store, JOB, 1, state, groups[0][0], meta)
    assert not np.array_equal(other["W"], ref["W"])


def test_a_worker_takes_the_partial_its_environment_wrote_from_memory(
    aws, load_handler, lambda_context, monkeypatch
):
    from fanfit import storage
    from fanfit.jobs.train import data
    from fanfit.jobs.train.data import read_round_plan, remember_partial
    from fanfit.jobs.train.shard import train_shard

    # GIVEN round 1 scheduled, and an environment that wrote round 0's partial of worker A last
    store, _ = _round_0(load_handler, lambda_context)
    load_handler("train_schedule")({"job_id": JOB, "round": 1}, lambda_context())
    a, b = read_round_plan(store, JOB, 0).groups[2]
    key_a, key_b = (storage.train_partial_key(JOB, 0, i) for i in (a, b))
    monkeypatch.setattr(data, "_OWN_PARTIAL", {})
    remember_partial(store.bucket, key_a, store.get_arrays(key_a))

    # WHEN worker B (A's group member) steps in round 1 there, the store's reads recorded
    spy = _Spy(store, monkeypatch)
    out = train_shard(store, JOB, 1, b, memory_mb=1769)

    # THEN it read only B's partial and took A's from memory
    assert key_b in spy.keys and key_a not in spy.keys and out["sync_held"] == 1
    # ... the environment now holds B's round-1 partial, as written
    key = storage.train_partial_key(JOB, 1, b)
    held = data.own_partial(store.bucket, key)
    assert held is not None and data.own_partial(store.bucket, key_a) is None
    written = store.get_arrays(key)
    np.testing.assert_array_equal(held["model_W"], written["model_W"])
    # ... and B's step is the one an environment holding nothing computes, bit for bit
    monkeypatch.setattr(data, "_OWN_PARTIAL", {})
    assert train_shard(store, JOB, 1, b, memory_mb=1769)["sync_held"] == 0
    again = store.get_arrays(key)
    for name in ("model_W", "model_b", "loss"):
        np.testing.assert_array_equal(again[name], written[name])


def test_a_missing_partial_or_worker_record_is_named(aws, load_handler, lambda_context):
    import boto3

    from fanfit import storage
    from fanfit.errors import InvalidJobError
    from fanfit.jobs.train.data import group_average
    from fanfit.jobs.train.reduce import record_round

    # GIVEN round 0 done, then worker 3's partial and worker 4's record removed
    store, _ = _round_0(load_handler, lambda_context)
    s3 = boto3.client("s3")
    s3.delete_object(Bucket="fanfit-unit", Key=storage.train_partial_key(JOB, 0, 3))
    s3.delete_object(Bucket="fanfit-unit", Key=storage.train_worker_record_key(JOB, 0, 4))
    # WHEN a group with worker 3 averages, or the round is recorded THEN the error names them
    with pytest.raises(InvalidJobError, match="round 0: worker 3 wrote no partial"):
        group_average(store, JOB, 0, [1, 3])
    with pytest.raises(InvalidJobError, match="round 0: worker 4 wrote no record"):
        record_round(store, None, JOB, 0)


def test_a_bsp_job_is_not_recorded_from_worker_records(aws, load_handler, lambda_context):
    from fanfit import storage
    from fanfit.errors import InvalidJobError
    from fanfit.jobs.train.reduce import record_round

    # GIVEN a BSP job through its first schedule
    rng = np.random.default_rng(2)
    store = storage.JobStore("fanfit-unit")
    _upload(store, pd.DataFrame(rng.normal(size=(50, 3)), columns=["a", "b", "y"]),
             model="linreg", features="a,b", target="y", workers=2, global_batch=20)  # fmt: skip
    load_handler("train_init")({"job_id": JOB, "spec_key": storage.spec_key(JOB),
                                "execution_arn": "arn:x"}, lambda_context())  # fmt: skip
    planned = load_handler("train_schedule")({"job_id": JOB, "round": 0}, lambda_context())
    # THEN a reduce follows its Map, and recording it as DS-Sync is refused by name
    assert planned["reduce"] is True and planned["advance"] is None
    with pytest.raises(InvalidJobError, match="sync 'bsp'"):
        record_round(store, None, JOB, 0)


def test_the_asl_runs_no_reduce_under_ds_sync_named_from_jobs_states():
    from fanfit.jobs.states import TrainState

    # GIVEN the train state machine
    states = json.loads((ROOT / "orchestrator" / "train.asl.json").read_text())["States"]
    # THEN the workers' Map goes to the Choice on the schedule's "reduce": BSP's single reduce,
    # or DS-Sync's Pass to the next round (no reducer, no Map over groups)
    assert states[TrainState.RUN_ROUND]["Next"] == TrainState.IS_REDUCE_NEEDED
    choice = states[TrainState.IS_REDUCE_NEEDED]
    assert choice["Default"] == TrainState.ADVANCE_ROUND
    assert choice["Choices"] == [{"Variable": "$.schedule.reduce", "BooleanEquals": True,
                                  "Next": TrainState.REDUCE}]  # fmt: skip
    advance = states[TrainState.ADVANCE_ROUND]
    assert advance["Type"] == "Pass" and advance["ResultPath"] == "$.progress"
    assert advance["Parameters"] == {"round.$": "$.schedule.advance.round",
                                     "has_next_round.$": "$.schedule.advance.has_next_round"}  # fmt: skip
    assert advance["Next"] == TrainState.IS_ROUND_LEFT == states[TrainState.REDUCE]["Next"]
    assert [n for n, s in states.items() if s["Type"] == "Map"] == [TrainState.RUN_ROUND]
    selector = states[TrainState.SCHEDULE_ROUND]["ResultSelector"]
    assert selector["reduce.$"] == "$.Payload.reduce"
    assert selector["advance.$"] == "$.Payload.advance"


def test_the_ds_sync_documents_refuse_inconsistent_fields_by_name():
    from fanfit.errors import InvalidDocumentError
    from fanfit.jobs.documents.train import ScheduleOutput, ShardRecord

    # GIVEN a schedule output: a reduce follows (BSP) unless it says where the execution goes
    out = {"job_id": "j", "round": 0, "max_concurrency": 1, "workers": []}
    assert ScheduleOutput.parse(out).reduce is True
    advance = {"job_id": "j", "round": 1, "has_next_round": False}
    assert ScheduleOutput.parse({**out, "reduce": False, "advance": advance}).advance.round == 1
    # WHEN one is given without the other THEN the error names them
    with pytest.raises(InvalidDocumentError, match="advance"):
        ScheduleOutput.parse({**out, "reduce": False})
    with pytest.raises(InvalidDocumentError, match="advance"):
        ScheduleOutput.parse({**out, "advance": advance})
    # ... and a worker's record refuses a negative batch by name
    stats = {"worker": 0, "round": 0, "batch": 1, "compute_s": 0.1, "io_s": 0.0,
             "memory_mb": 1769, "resource": "lambda-1769", "placement": "lambda",
             "cold_start": False, "signature": "s", "started_at": 0.0, "peak_rss_mb": 1.0,
             "pid": 1}  # fmt: skip
    good = ShardRecord.parse({"stats": stats, "loss": 0.5, "n_samples": 1})
    assert ShardRecord.parse(good.to_json_dict()) == good
    with pytest.raises(InvalidDocumentError, match="n_samples"):
        ShardRecord.parse({"stats": stats, "loss": 0.5, "n_samples": -1})
