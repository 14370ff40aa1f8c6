"""DS-Sync's parallel groups: each group's reduce reads only its own members' partials.

GIVEN a DS-Sync logreg job whose round's workers have written their partials (the handlers on
moto), WHEN one group's TrainReduce runs, THEN it reads exactly its members' partials (the S3 keys
it read), writes the group's model (equal to :func:`fanfit.train.sgd.dssync_step` of the group) and
its record; the round's reduce then reads the groups' records and no partial or model. Also the
ASL (the new Map over groups, named from :mod:`fanfit.jobs.states`) and the documents.
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


def test_a_group_reduce_reads_only_its_members_partials_and_writes_the_groups_model(
    aws, load_handler, lambda_context, monkeypatch
):
    from fanfit import storage
    from fanfit.jobs.train.data import read_round_plan
    from fanfit.jobs.train.reduce import reduce_group
    from fanfit.train.sgd import WorkerGradient, dssync_step, worker_gradient

    # GIVEN round 0 of a 6-worker DS-Sync job, its workers' partials written
    store, planned = _round_0(load_handler, lambda_context)
    groups = read_round_plan(store, JOB, 0).groups
    assert len(groups) == 3 and planned["reduce_in_groups"] is True
    assert [g["group"] for g in planned["groups"]] == [0, 1, 2]
    partials = {storage.train_partial_key(JOB, 0, i) for i in range(6)}

    # WHEN group 1 reduces, the store's reads recorded
    spy = _Spy(store, monkeypatch)
    out = reduce_group(store, JOB, 0, 1)

    # THEN it read exactly its two members' partials and no other partial or model state
    members = groups[1]
    read_partials = {k for k in spy.keys if k in partials}
    assert read_partials == {storage.train_partial_key(JOB, 0, i) for i in members}
    assert not [k for k in spy.keys if "/train/state/" in k]
    # ... and wrote the group's model: dssync_step of its members from the first model
    model = store.get_arrays(storage.train_group_state_key(JOB, 1, 1))
    first = store.get_arrays(storage.train_group_state_key(JOB, 0, 0))
    from fanfit.jobs.train.data import plan_xy, read_plan
    from fanfit.train.batches import batch_rows

    X, y = plan_xy(store, read_plan(store, JOB))
    batches = np.asarray(read_round_plan(store, JOB, 0).batches)
    grads = []
    for i in members:
        rows = batch_rows(X.shape[0], batches, 5, 0, i)
        grads.append(worker_gradient("logistic", first, X[rows], y[rows]))
    ref = dssync_step([first] * 2, grads, [[0, 1]], 0.5)[0]
    for key in ("W", "b"):
        np.testing.assert_array_equal(model[key], ref[key])
    # ... and its record names the members, their losses and batches
    record = store.get_json(out["record_key"])
    assert record["members"] == members and record["group"] == 1
    assert record["losses"] == [g.loss for g in grads]
    assert record["n_samples"] == [int(b) for b in batches[members]]
    assert isinstance(grads[0], WorkerGradient)


def test_the_rounds_reduce_reads_the_groups_records_only_and_the_next_round_their_models(
    aws, load_handler, lambda_context, monkeypatch
):
    from fanfit import storage
    from fanfit.jobs.train.data import get_state_groups, read_round_plan, worker_params
    from fanfit.jobs.train.reduce import reduce_group, reduce_round

    # GIVEN round 0 whose three groups have reduced
    store, planned = _round_0(load_handler, lambda_context)
    for item in planned["groups"]:
        reduce_group(store, JOB, 0, item["group"])
    groups = read_round_plan(store, JOB, 0).groups

    # WHEN the round's reduce runs
    spy = _Spy(store, monkeypatch)
    out = reduce_round(store, storage.JobRecords("fanfit-jobs"), JOB, 0)

    # THEN it read no partial and no group model, only the groups' records (and plans, state)
    assert not [k for k in spy.keys if "/workers/" in k or "/groups/" in k and k.endswith(".npz")]
    assert {storage.train_group_record_key(JOB, 0, g) for g in range(3)} <= set(spy.keys)
    assert out == {"job_id": JOB, "round": 1, "has_next_round": True}
    # ... and round 1's state holds only the meta and round 0's groups, each worker's model
    # being its group's
    state, held = get_state_groups(store, JOB, 1)
    assert held == groups and state.arrays == {} and state.n_iter == 1
    for g, members in enumerate(groups):
        model = store.get_arrays(storage.train_group_state_key(JOB, 1, g))
        for i in members:
            np.testing.assert_array_equal(
                worker_params(store, JOB, 1, state, i, held)["W"], model["W"]
            )
    # ... and the round's record covers every worker once, with the batch-weighted loss
    record = store.get_json(storage.train_round_key(JOB, 0))
    assert [w["worker"] for w in record["workers"]] == list(range(6))
    parts = [store.get_json(storage.train_group_record_key(JOB, 0, g)) for g in range(3)]
    n = sum(sum(p["n_samples"]) for p in parts)
    loss = sum(b * v for p in parts for b, v in zip(p["n_samples"], p["losses"])) / n
    assert record["loss"] == pytest.approx(loss, rel=1e-12)


def test_a_group_reduce_refuses_a_group_outside_the_round_and_a_malformed_event(
    aws, load_handler, lambda_context
):
    from fanfit.errors import InvalidEventError, InvalidJobError
    from fanfit.jobs.train.reduce import reduce_group

    # GIVEN round 0 of a DS-Sync job with 3 groups
    store, _ = _round_0(load_handler, lambda_context)
    # WHEN a group past the last one reduces THEN InvalidJobError names the range
    with pytest.raises(InvalidJobError, match=r"group must be in 0\.\.2 in round 0, got 3"):
        reduce_group(store, JOB, 0, 3)
    # ... and the handler refuses a malformed group event by name
    with pytest.raises(InvalidEventError, match="group"):
        load_handler("train_reduce")({"job_id": JOB, "round": 0, "group": -1}, lambda_context())


def test_the_asl_runs_a_map_over_the_groups_after_the_workers_map_named_from_jobs_states():
    from fanfit.jobs.states import TrainState

    # GIVEN the train state machine
    states = json.loads((ROOT / "orchestrator" / "train.asl.json").read_text())["States"]
    # THEN the workers' Map goes to the Choice on reduce_in_groups: BSP's single reduce by default,
    # DS-Sync's Map over the groups, then the round's record
    assert states[TrainState.RUN_ROUND]["Next"] == TrainState.IS_REDUCE_IN_GROUPS
    choice = states[TrainState.IS_REDUCE_IN_GROUPS]
    assert choice["Default"] == TrainState.REDUCE
    assert choice["Choices"] == [{"Variable": "$.schedule.reduce_in_groups",
                                  "BooleanEquals": True, "Next": TrainState.REDUCE_GROUPS}]  # fmt: skip
    group_map = states[TrainState.REDUCE_GROUPS]
    assert group_map["Type"] == "Map" and group_map["ItemsPath"] == "$.schedule.groups"
    assert group_map["Next"] == TrainState.RECORD_GROUPS and group_map["ResultPath"] is None
    inner = group_map["ItemProcessor"]["States"][TrainState.REDUCE_GROUP]
    assert inner["Parameters"]["FunctionName"] == "${TrainReduceFunctionArn}"
    assert inner["Parameters"]["Payload"] == {"job_id.$": "$.job_id", "round.$": "$.round",
                                              "group.$": "$.group"}  # fmt: skip
    # ... each Task retried on Lambda's errors as the other Task states, the state kept small
    assert inner["Retry"] == states[TrainState.REDUCE]["Retry"]
    assert inner["ResultSelector"] == {"record_key.$": "$.Payload.record_key"}
    assert states[TrainState.RECORD_GROUPS]["Next"] == TrainState.IS_ROUND_LEFT
    assert states[TrainState.RECORD_GROUPS]["Retry"] == states[TrainState.REDUCE]["Retry"]
    selector = states[TrainState.SCHEDULE_ROUND]["ResultSelector"]
    assert selector["groups.$"] == "$.Payload.groups"
    assert selector["reduce_in_groups.$"] == "$.Payload.reduce_in_groups"


def test_the_group_documents_refuse_inconsistent_fields_by_name():
    from fanfit.errors import InvalidDocumentError
    from fanfit.jobs.documents.train import GroupRecord, ScheduleOutput

    worker = {"worker": 2, "memory_mb": 1769, "resource": "lambda-1769", "batch": 10,
              "compute_s": 0.1, "io_s": 0.0, "samples_per_s": 100.0,
              "predicted_samples_per_s": 1.0, "cold_start": False, "started_at": 0.0,
              "ended_at": 1.0, "peak_rss_mb": 1.0}  # fmt: skip
    good = {"round": 0, "group": 0, "members": [2], "workers": [worker], "losses": [0.5],
            "n_samples": [10], "model_key": "jobs/j/train/state/00001/groups/000.npz"}  # fmt: skip
    # GIVEN a valid group record THEN it round-trips
    record = GroupRecord.parse(good)
    assert GroupRecord.parse(record.to_json_dict()) == record and record.members == [2]
    # WHEN a member has no loss, or the workers are not the members THEN the error names them
    with pytest.raises(InvalidDocumentError, match="one entry per member"):
        GroupRecord.parse({**good, "losses": []})
    with pytest.raises(InvalidDocumentError, match="workers must be the members"):
        GroupRecord.parse({**good, "members": [3]})
    # ... and a schedule output's flag must say whether it has groups
    out = {"job_id": "j", "round": 0, "max_concurrency": 1, "workers": []}
    assert ScheduleOutput.parse(out).reduce_in_groups is False
    with pytest.raises(InvalidDocumentError, match="reduce_in_groups"):
        ScheduleOutput.parse({**out, "reduce_in_groups": True})
