"""fanfit.cost: the arithmetic of a job's cost, from plain dicts (no AWS, no moto)."""

from __future__ import annotations

import json
import math

import pytest

from fanfit.cost import (
    JobCost,
    batch_jobs_from_history,
    billed_seconds,
    collect_job_cost,
    count_state_transitions,
    job_cost,
    lambda_cost_usd,
    lambda_invocations_from_history,
    processor_state_counts,
)
from fanfit.errors import InvalidJobError
from fanfit.prices import DEFAULT_PRICES, PriceTable

ARN = "arn:aws:lambda:us-east-1:000000000000:function:"
P = DEFAULT_PRICES


def _ev(i, kind, t, prev=None, **details):
    ev = {"id": i, "type": kind, "timestamp": float(t)}
    if prev is not None:
        ev["previousEventId"] = prev
    if details:
        key = kind[0].lower() + kind[1:] + "EventDetails"
        ev[key] = details
    return ev


def _lambda_task(start_id, t0, t1, fn, payload=None, state="Run"):
    """Events of one Task state that invokes ``fn`` once, from t0 to t1."""
    params = json.dumps({"FunctionName": ARN + fn, "Payload": {}})
    output = json.dumps({"StatusCode": 200, "Payload": payload or {}})
    i = start_id
    return [
        _ev(i, "TaskStateEntered", t0, i - 1, name=state),
        _ev(
            i + 1,
            "TaskScheduled",
            t0,
            i,
            resourceType="lambda",
            resource="invoke",
            parameters=params,
        ),  # fmt: skip
        _ev(i + 2, "TaskStarted", t0, i + 1, resourceType="lambda", resource="invoke"),
        _ev(i + 3, "TaskSucceeded", t1, i + 2, resourceType="lambda", output=output),
        _ev(i + 4, "TaskStateExited", t1, i + 3, name=state),
    ]


def test_billed_seconds_rounds_up_to_the_millisecond():
    # GIVEN durations around millisecond boundaries WHEN billed THEN rounded up to 1 ms
    assert billed_seconds(0.1) == pytest.approx(0.1)
    assert billed_seconds(0.1001) == pytest.approx(0.101)
    assert billed_seconds(1.0000001) == pytest.approx(1.001)
    assert billed_seconds(0.0) == 0.0
    assert billed_seconds(-3.0) == 0.0


def test_job_cost_prices_lambda_per_function_requests_transitions_and_batch():
    # GIVEN two functions' invocations, 10 transitions and one Batch job
    invocations = [
        {"function": "CrossFit", "memory_mb": 1769, "duration_s": 2.0004},
        {"function": "CrossFit", "memory_mb": 1769, "started_at": 10.0, "ended_at": 13.5},
        {"function": "Prepare", "memory_mb": 512, "duration_s": 0.25},
    ]
    batch = [{"instance_s": 1800.0}, {"instance_s": 60.0, "instance_type": "g5.xlarge"}]
    # WHEN priced
    cost = job_cost(invocations, {"parent": 7, "child_starts": 3}, batch, P)
    # THEN each item is quantity x unit price from the table
    items = {(i.service, i.name): i for i in cost.items}
    cf = items[("lambda", "CrossFit")]
    assert cf.quantity == pytest.approx((2.001 + 3.5) * 1769 / 1024)
    assert cf.detail == {"invocations": 2, "billed_s": pytest.approx(5.501), "memory_mb": 1769}
    assert cf.usd == pytest.approx(cf.quantity * P.lambda_gb_second_usd)
    assert items[("lambda", "Prepare")].quantity == pytest.approx(0.25 * 0.5)
    assert items[("lambda-requests", "requests")].quantity == 3
    assert items[("lambda-requests", "requests")].usd == pytest.approx(3 * 0.2e-6)
    sfn = items[("stepfunctions", "state transitions")]
    assert sfn.quantity == 10 and sfn.usd == pytest.approx(10 * 0.025 / 1000)
    assert sfn.detail == {"parent": 7, "child_starts": 3}
    assert items[("batch", "g4dn.xlarge")].usd == pytest.approx(0.5 * 0.526)
    assert items[("batch", "g5.xlarge")].usd == pytest.approx(60 / 3600 * 1.006)
    # AND the totals add up
    expected = sum(i.usd for i in cost.items)
    assert cost.total_usd == pytest.approx(expected)
    assert cost.billed_gb_s == pytest.approx(cf.quantity + 0.125)
    assert (cost.lambda_requests, cost.state_transitions) == (3, 10)
    assert cost.batch_instance_s == pytest.approx(1860.0)


def test_job_cost_to_dict_is_json_and_round_trips():
    # GIVEN a cost WHEN serialised THEN JSON with total_usd and per-item usd, and read back equal
    cost = job_cost([{"function": "f", "memory_mb": 1024, "duration_s": 1.0}], 4, notes=["n"])
    d = json.loads(json.dumps(cost.to_dict(), allow_nan=False))
    assert d["total_usd"] == pytest.approx(
        P.lambda_gb_second_usd + P.lambda_request_usd + 4 * P.sfn_transition_usd
    )
    assert [i["usd"] for i in d["items"]] == pytest.approx([i.usd for i in cost.items])
    assert d["notes"] == ["n"]
    back = JobCost.from_dict(d)
    assert back.total_usd == pytest.approx(cost.total_usd) and back.notes == ("n",)


def test_job_cost_uses_the_given_price_table_and_rejects_unpriced_instances():
    # GIVEN a table with other prices WHEN priced THEN those prices are used
    prices = PriceTable.from_dict({"lambda_gb_second_usd": 1.0, "lambda_request_usd": 0.0})
    cost = job_cost([{"function": "f", "memory_mb": 2048, "duration_s": 3.0}], prices=prices)
    assert cost.total_usd == pytest.approx(6.0)
    # AND an instance type without a price is an error naming it
    with pytest.raises(InvalidJobError, match="p9.huge"):
        job_cost(batch_jobs=[{"instance_s": 1.0, "instance_type": "p9.huge"}])


def test_empty_usage_costs_nothing():
    cost = job_cost()
    assert cost.items == () and cost.total_usd == 0.0


def test_lambda_cost_usd_uses_the_price_table():
    # GIVEN one invocation of 1.5 s at 1024 MB WHEN priced by cost.lambda_cost_usd THEN PriceTable's numbers
    gb_s, usd = lambda_cost_usd(1.5, 1024)
    assert gb_s == pytest.approx(1.5)
    assert usd == pytest.approx(P.lambda_cost_usd(1024, 1.5))
    assert lambda_cost_usd(1.5, 1024, PriceTable.from_dict({"lambda_request_usd": 1.0}))[1] > 1.0


def test_count_state_transitions_counts_entered_states_and_retries():
    # GIVEN a history: a Task state entered once with one retry, a Choice, a Map with one iteration
    events = [
        _ev(1, "ExecutionStarted", 0),
        _ev(2, "TaskStateEntered", 0, 1),
        _ev(3, "TaskScheduled", 0, 2, resourceType="lambda"),
        _ev(4, "TaskFailed", 1, 3),
        _ev(5, "TaskScheduled", 2, 4, resourceType="lambda"),
        _ev(6, "TaskSucceeded", 3, 5),
        _ev(7, "TaskStateExited", 3, 6),
        _ev(8, "ChoiceStateEntered", 3, 7),
        _ev(9, "ChoiceStateExited", 3, 8),
        _ev(10, "MapStateEntered", 3, 9),
        _ev(11, "MapIterationStarted", 3, 10),
        _ev(12, "PassStateEntered", 3, 11),
        _ev(13, "PassStateExited", 3, 12),
        _ev(14, "MapStateExited", 3, 13),
        _ev(15, "ExecutionSucceeded", 3, 14),
    ]
    # WHEN counted THEN 4 states entered + 1 retry
    assert count_state_transitions(events) == 5


def test_lambda_invocations_prefer_the_handlers_own_duration_and_memory():
    # GIVEN one task whose payload reports its duration and memory, one that does not
    events = [_ev(1, "ExecutionStarted", 100.0)]
    events += _lambda_task(2, 100.0, 104.0, "fanfit-CrossFit-1",
                           payload={"started_at": 100.5, "ended_at": 103.0, "memory_mb": 1769})  # fmt: skip
    events += _lambda_task(7, 104.0, 104.75, "fanfit-Aggregate-1", payload={"result_key": "k"})
    # WHEN read, with the configured memory of the second function
    invs, notes = lambda_invocations_from_history(events, {ARN + "fanfit-Aggregate-1": 2048})
    # THEN the first uses the handler's numbers and the second the history's interval
    assert [i["function"] for i in invs] == ["fanfit-CrossFit-1", "fanfit-Aggregate-1"]
    assert invs[0]["duration_s"] == pytest.approx(2.5) and invs[0]["source"] == "handler"
    assert invs[0]["memory_mb"] == 1769
    assert invs[1]["duration_s"] == pytest.approx(0.75) and invs[1]["source"] == "history"
    assert invs[1]["memory_mb"] == 2048 and invs[1]["status"] == "TaskSucceeded"
    assert notes == []


def test_a_payload_whose_timing_fields_are_not_numbers_falls_back_to_the_history():
    # GIVEN a step output whose timing fields are malformed (a string, a bool, a negative memory)
    events = [_ev(1, "ExecutionStarted", 100.0)]
    events += _lambda_task(2, 100.0, 101.5, "fanfit-Schedule-1",
                           payload={"started_at": "soon", "ended_at": True, "memory_mb": -5})  # fmt: skip
    # WHEN read through StepTiming
    invs, notes = lambda_invocations_from_history(events, {"fanfit-Schedule-1": 512})
    # THEN the history's interval and the configured memory are used, not the payload's values
    assert invs[0]["duration_s"] == pytest.approx(1.5) and invs[0]["source"] == "history"
    assert invs[0]["memory_mb"] == 512 and notes == []


def test_lambda_invocations_count_every_attempt_and_pair_interleaved_iterations():
    # GIVEN two concurrent Map iterations whose events interleave, one of them retried
    p = json.dumps({"FunctionName": ARN + "w"})
    events = [
        _ev(1, "TaskScheduled", 0.0, 0, resourceType="lambda", parameters=p),
        _ev(2, "TaskScheduled", 0.0, 0, resourceType="lambda", parameters=p),
        _ev(3, "TaskStarted", 0.5, 1),
        _ev(4, "TaskStarted", 0.25, 2),
        _ev(5, "TaskSucceeded", 1.25, 4, output=json.dumps({"Payload": {}})),
        _ev(6, "TaskFailed", 2.5, 3),
        _ev(7, "TaskScheduled", 3.0, 6, resourceType="lambda", parameters=p),
        _ev(8, "TaskStarted", 3.0, 7),
        _ev(9, "TaskSucceeded", 3.5, 8, output=json.dumps({"Payload": {}})),
    ]
    # WHEN read THEN three attempts, each with its own interval
    invs, notes = lambda_invocations_from_history(events)
    assert [round(i["duration_s"], 3) for i in invs] == [2.0, 1.0, 0.5]
    assert [i["status"] for i in invs] == ["TaskFailed", "TaskSucceeded", "TaskSucceeded"]
    # AND the memory is unknown (no configuration given), which a note says
    assert all(i["memory_mb"] is None for i in invs) and "'w'" in notes[0]


def test_non_lambda_tasks_are_not_lambda_invocations():
    events = [_ev(1, "TaskScheduled", 0, 0, resourceType="dynamodb", parameters="{}"),
              _ev(2, "TaskSucceeded", 1, 1)]  # fmt: skip
    assert lambda_invocations_from_history(events) == ([], [])


def test_batch_jobs_from_history_use_the_job_times_else_the_interval():
    # GIVEN a submitJob.sync task whose output has StartedAt/StoppedAt (ms), and one without
    out = json.dumps({"StartedAt": 1_000_000, "StoppedAt": 1_090_000,
                      "Container": {"InstanceType": "g5.xlarge"}})  # fmt: skip
    events = [
        _ev(1, "TaskScheduled", 0, 0, resourceType="batch", resource="submitJob.sync"),
        _ev(2, "TaskStarted", 0, 1),
        _ev(3, "TaskSucceeded", 120, 2, output=out),
        _ev(4, "TaskScheduled", 200, 3, resourceType="batch", resource="submitJob.sync"),
        _ev(5, "TaskStarted", 200, 4),
        _ev(6, "TaskSucceeded", 230, 5, output="{}"),
    ]
    # WHEN read THEN 90 s on g5.xlarge, and 30 s on the default type
    assert batch_jobs_from_history(events) == [
        {"instance_s": 90.0, "instance_type": "g5.xlarge"},
        {"instance_s": 30.0, "instance_type": None},
    ]


def test_processor_state_counts_take_the_shortest_path_through_each_distributed_map():
    # GIVEN a Distributed Map whose children choose Lambda (2 states) or Batch (3 states)
    processor = {
        "ProcessorConfig": {"Mode": "DISTRIBUTED"},
        "StartAt": "Where?",
        "States": {
            "Where?": {"Type": "Choice", "Choices": [{"Next": "Batch"}], "Default": "Lambda"},
            "Batch": {"Type": "Task", "Next": "Report"},
            "Report": {"Type": "Pass", "End": True},
            "Lambda": {"Type": "Task", "End": True},
        },
    }
    inline = {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": "A",
              "States": {"A": {"Type": "Pass", "End": True}}}  # fmt: skip
    definition = {"StartAt": "M", "States": {"M": {"Type": "Map", "ItemProcessor": processor,
                  "Next": "I"}, "I": {"Type": "Map", "ItemProcessor": inline, "End": True}}}  # fmt: skip
    # WHEN counted THEN the distributed one only, at its shortest path
    assert processor_state_counts(json.dumps(definition)) == {"M": 2}


def test_processor_state_counts_of_fanfits_state_machines():
    # GIVEN fanfit's definitions WHEN read THEN the estimate has one Distributed Map, train none
    with open("orchestrator/estimate.asl.json") as f:
        counts = processor_state_counts(f.read())
    assert list(counts) == ["Cross-fit every shard of the wave"]
    assert counts["Cross-fit every shard of the wave"] >= 1
    with open("orchestrator/train.asl.json") as f:
        assert processor_state_counts(json.load(f)) == {}


class _FakeSfn:
    """A Step Functions client of plain dicts: parent and child histories, map runs."""

    def __init__(self, histories, children=None, map_run_total=0, definition=None):
        self.histories = histories
        self.children = children  # None: ListExecutions(mapRunArn) fails, as on LocalStack
        self.map_run_total = map_run_total
        self.definition = definition or {}

    def get_paginator(self, name):
        fake = self

        class _Pages:
            def paginate(self, **kw):
                if name == "get_execution_history":
                    return [{"events": fake.histories[kw["executionArn"]]}]
                if fake.children is None:
                    raise RuntimeError("Must provide a StateMachine ARN or MapRun ARN")
                return [{"executions": [{"executionArn": a} for a in fake.children]}]

        return _Pages()

    def describe_map_run(self, mapRunArn):
        return {"executionCounts": {"total": self.map_run_total}}

    def describe_state_machine_for_execution(self, executionArn):
        return {"definition": json.dumps(self.definition)}


class _FakeLambda:
    def __init__(self, sizes):
        self.sizes = sizes
        self.calls = 0

    def get_function_configuration(self, FunctionName):
        self.calls += 1
        return {"MemorySize": self.sizes[FunctionName.rsplit(":", 1)[-1]]}


def _parent_with_map_run():
    events = [_ev(1, "ExecutionStarted", 0.0)]
    events += _lambda_task(2, 0.0, 1.0, "Prepare")
    events += [
        _ev(7, "MapStateEntered", 1.0, 6, name="Map"),
        _ev(8, "MapRunStarted", 1.0, 7, mapRunArn="arn:map-run"),
        _ev(9, "MapRunSucceeded", 5.0, 8),
        _ev(10, "MapStateExited", 5.0, 9, name="Map"),
    ]
    events += _lambda_task(11, 5.0, 5.5, "Aggregate")
    return events


def test_collect_job_cost_reads_child_histories_where_the_api_lists_them():
    # GIVEN a parent whose map run has two child executions with one Lambda task each (as on AWS)
    histories = {
        "arn:parent": _parent_with_map_run(),
        "arn:c1": [_ev(1, "ExecutionStarted", 1.0), *_lambda_task(2, 1.0, 3.0, "CrossFit")],
        "arn:c2": [_ev(1, "ExecutionStarted", 1.0), *_lambda_task(2, 1.0, 4.0, "CrossFit")],
    }
    sfn = _FakeSfn(histories, children=["arn:c1", "arn:c2"])
    lam = _FakeLambda({"Prepare": 512, "Aggregate": 1024, "CrossFit": 2048})
    # WHEN collected
    cost = collect_job_cost(sfn, "arn:parent", lambda_client=lam)
    # THEN transitions: parent 3 states, 2 child starts, 1 state per child
    t = next(i for i in cost.items if i.service == "stepfunctions")
    assert t.detail == {"parent": 3, "child_starts": 2, "children": 2}
    # AND Lambda GB-s per function from the intervals and the configured memory
    gb = {i.name: i.quantity for i in cost.items if i.service == "lambda"}
    assert gb == pytest.approx({"Prepare": 0.5, "Aggregate": 0.5, "CrossFit": 10.0})
    assert cost.lambda_requests == 4 and cost.notes == ()
    assert lam.calls == 3  # one lookup per function


def test_throttled_invocations_are_counted_as_throttles_and_not_billed():
    # GIVEN a child execution whose CrossFit task was throttled twice (refused for lack of
    # concurrency, then retried by the state machine) before it ran for 2 s
    p = json.dumps({"FunctionName": ARN + "CrossFit"})
    throttled = {"error": "Lambda.TooManyRequestsException", "cause": "Rate Exceeded."}
    child = [
        _ev(1, "ExecutionStarted", 1.0),
        _ev(2, "TaskScheduled", 1.0, 1, resourceType="lambda", parameters=p),
        _ev(3, "TaskFailed", 1.0, 2, resourceType="lambda", **throttled),
        _ev(4, "TaskScheduled", 1.5, 3, resourceType="lambda", parameters=p),
        _ev(5, "TaskFailed", 1.5, 4, resourceType="lambda", **throttled),
        _ev(6, "TaskScheduled", 2.5, 5, resourceType="lambda", parameters=p),
        _ev(7, "TaskStarted", 2.5, 6),
        _ev(8, "TaskSucceeded", 4.5, 7, output=json.dumps({"Payload": {}})),
    ]
    sfn = _FakeSfn({"arn:parent": _parent_with_map_run(), "arn:c1": child}, children=["arn:c1"])
    lam = _FakeLambda({"Prepare": 512, "Aggregate": 1024, "CrossFit": 2048})
    # WHEN collected
    cost = collect_job_cost(sfn, "arn:parent", lambda_client=lam)
    # THEN the two throttles are counted, and neither is billed (requests or seconds)
    assert cost.throttles == 2
    assert cost.lambda_requests == 3
    gb = {i.name: i.quantity for i in cost.items if i.service == "lambda"}
    assert gb == pytest.approx({"Prepare": 0.5, "Aggregate": 0.5, "CrossFit": 4.0})
    # AND the count survives the record's round trip
    kept = json.loads(json.dumps(cost.to_dict()))
    assert kept["throttles"] == 2 and JobCost.from_dict(kept).throttles == 2


def test_collect_job_cost_falls_back_to_shard_records_without_child_histories():
    # GIVEN a LocalStack-like API: no child executions listed, the map run counts 3 children
    definition = {"States": {"Map": {"Type": "Map", "ItemProcessor": {
        "ProcessorConfig": {"Mode": "DISTRIBUTED"}, "States": {"Fit": {"Type": "Task"}}}}}}  # fmt: skip
    sfn = _FakeSfn({"arn:parent": _parent_with_map_run()}, None, 3, definition)
    shards = [_shard(i, 1.0, 2.0, 1024) for i in range(3)]
    lam = _FakeLambda({"Prepare": 512, "Aggregate": 1024})
    # WHEN collected with the job's shard records
    cost = collect_job_cost(sfn, "arn:parent", lambda_client=lam, shard_records=shards)
    # THEN each child counts its start and one state, marked estimated in a note
    t = next(i for i in cost.items if i.service == "stepfunctions")
    assert t.detail == {"parent": 3, "child_starts": 3, "children_estimated": 3}
    assert cost.state_transitions == 9
    assert any("no readable history" in n for n in cost.notes)
    # AND the shards are CrossFit invocations of 1 s at 1 GB
    gb = {i.name: i.quantity for i in cost.items if i.service == "lambda"}
    assert gb["CrossFit"] == pytest.approx(3.0) and cost.lambda_requests == 5
    assert math.isclose(
        cost.total_usd,
        4.0 * P.lambda_gb_second_usd + 5 * P.lambda_request_usd + 9 * P.sfn_transition_usd,
    )


class _FakeRecords:
    def __init__(self, record):
        self.record, self.updates = record, []

    def get(self, job_id):
        return dict(self.record)

    def update(self, job_id, **fields):
        self.updates.append(fields)
        self.record.update(fields)


class _FakeStore:
    def __init__(self, objects):
        self.objects = objects

    def exists(self, key):
        return key in self.objects

    def get_json(self, key):
        return self.objects[key]


class _FakeClient:
    def __init__(self, status, record=None):
        histories = {"arn:parent": _parent_with_map_run()}
        self.sfn = _FakeSfn(histories, None, 2, {})
        self.sfn.describe_execution = lambda executionArn: {"status": status}
        lam = _FakeLambda({"Prepare": 512, "Aggregate": 1024})
        self.session = type("S", (), {"client": lambda self, name, endpoint_url=None: lam})()
        self.stack = type("St", (), {"endpoint_url": None})()
        self.records = _FakeRecords(record or {"job_id": "j"})
        shards = [_shard(i, 0.0, 2.0, 2048) for i in range(2)]
        self.store = _FakeStore({"jobs/j/result.json": _result_json(shards)})


def _shard(i, started_at, ended_at, memory_mb, placement="lambda"):
    """A shard's statistics as CrossFit writes them (a valid ShardStats)."""
    return {"shard_id": f"{i:05d}", "stage": 0, "n_units": 1, "unit_fit_s": {},
            "started_at": started_at, "fit_s": ended_at - started_at, "io_s": 0.0,
            "ended_at": ended_at, "memory_mb": memory_mb, "placement": placement,
            "peak_rss_mb": 100.0, "cold_start": False}  # fmt: skip


def _result_json(shards):
    """``result.json`` of a one-treatment estimate with these shard records (a valid
    EstimateResultDoc: what the client reads the shards of a finished job from)."""
    timings = {"shards": shards, "billed_gb_s": 8.0, "lambda_cost_usd": 0.0,
               "aggregate": {"memory_mb": 1024, "peak_rss_mb": 100.0},
               "price_usd_per_gb_s": 1.66667e-05, "price_usd_per_request": 2e-07}  # fmt: skip
    one = {"d": 1.0}
    return {"model": "plr", "score": "partialling out", "d_cols": ["d"], "coef": one, "se": one,
            "t_stat": one, "pval": one, "ci_95": {"d": [0.0, 2.0]}, "all_coef": {"d": [1.0]},
            "all_se": {"d": [1.0]}, "n_obs": 10, "n_folds": 2, "n_rep": 1, "job_id": "j",
            "execution_arn": "arn:parent", "predictions_key": "jobs/j/predictions.npz",
            "folds_key": "jobs/j/folds.npy", "timings": timings}  # fmt: skip


def test_client_cost_of_an_ended_job_is_counted_once_and_kept_in_its_record():
    from fanfit.client.jobs import collect_cost as _collect_cost

    # GIVEN a succeeded job whose record has no cost yet
    client = _FakeClient("SUCCEEDED")
    # WHEN its cost is asked for
    cost = _collect_cost(client, "j", "arn:parent", None, False)
    # THEN it counts the shards from result.json and keeps the cost in the record
    gb = {i.name: i.quantity for i in cost.items if i.service == "lambda"}
    assert gb["CrossFit"] == pytest.approx(8.0)
    assert client.records.updates == [{"cost": cost.to_dict()}]
    # AND the next call reads the record, unless other prices or refresh are asked for
    client.sfn.histories.clear()
    assert _collect_cost(client, "j", "arn:parent", None, False).total_usd == pytest.approx(
        cost.total_usd
    )
    with pytest.raises(KeyError):
        _collect_cost(client, "j", "arn:parent", None, True)


def test_a_result_shows_a_kept_cost_and_never_counts_one():
    from fanfit.client.jobs import collect_cost as _collect_cost
    from fanfit.client.jobs import cost_or_none

    # GIVEN a succeeded job whose record has no cost yet, and a history that cannot be read
    client = _FakeClient("SUCCEEDED")
    job = type("Job", (), {"client": client, "job_id": "j"})()
    client.sfn.histories.clear()
    # WHEN a result asks for the cost THEN it is None: no history is read (it would raise)
    assert cost_or_none(job) is None
    # GIVEN the cost counted on demand and kept in the record
    client.sfn.histories["arn:parent"] = _parent_with_map_run()
    counted = _collect_cost(client, "j", "arn:parent", None, False).to_dict()
    client.sfn.histories.clear()
    # WHEN a result asks again THEN it gets the kept cost, still without reading any history
    assert cost_or_none(job) == counted


def test_a_record_that_cannot_be_read_gives_no_cost():
    from fanfit.client.jobs import cost_or_none

    # GIVEN a job whose record read fails
    class _Failing:
        def get(self, job_id):
            raise RuntimeError("AccessDenied")

    job = type("Job", (), {"client": type("C", (), {"records": _Failing()})(), "job_id": "j"})()
    # WHEN a result asks for its cost THEN it is None
    assert cost_or_none(job) is None


def test_children_are_listed_once_per_job_when_the_api_cannot_list_them():
    # GIVEN a LocalStack-like API and a parent with three Map Runs (three waves)
    parent = _parent_with_map_run()
    for k in (2, 3):
        parent.append(_ev(100 + k, "MapRunStarted", 5.0, 10, mapRunArn=f"arn:map-run-{k}"))
    sfn = _FakeSfn({"arn:parent": parent}, None, 2, {})
    asked = []
    paginator = sfn.get_paginator

    def counting(name):
        if name == "list_executions":
            asked.append(name)
        return paginator(name)

    sfn.get_paginator = counting
    # WHEN the cost is collected
    cost = collect_job_cost(sfn, "arn:parent", shard_records=[])
    # THEN the children were asked for once, and every run's children are still counted
    assert asked == ["list_executions"]
    t = next(i for i in cost.items if i.service == "stepfunctions")
    assert t.detail["child_starts"] == 6


def test_client_cost_of_a_running_job_is_not_kept():
    from fanfit.client.jobs import collect_cost as _collect_cost

    client = _FakeClient("RUNNING")
    cost = _collect_cost(client, "j", "arn:parent", None, False)
    assert cost.lambda_requests == 2  # Prepare and Aggregate; no shard records while running
    assert client.records.updates == []


def test_shard_records_placed_on_the_gpu_worker_are_batch_instance_seconds():
    # GIVEN no child histories and one of two shards placed on the GPU worker
    sfn = _FakeSfn({"arn:parent": _parent_with_map_run()}, None, 2, {})
    shards = [_shard(0, 0.0, 1.0, 1024), _shard(1, 0.0, 60.0, 0, placement="gpu")]
    lam = _FakeLambda({"Prepare": 512, "Aggregate": 1024})
    cost = collect_job_cost(sfn, "arn:parent", lambda_client=lam, shard_records=shards)
    # THEN the Lambda shard is CrossFit GB-s and the Batch one 60 instance-s at the default type
    assert {i.name for i in cost.items if i.service == "lambda"} == {
        "Prepare",
        "Aggregate",
        "CrossFit",
    }
    assert cost.batch_instance_s == pytest.approx(60.0)
    assert next(i for i in cost.items if i.service == "batch").name == P.gpu_instance_type


def _table_result(cost):
    from fanfit.client.estimate import EstimateResult

    raw = {
        "model": "plr",
        "score": "partialling out",
        "d_cols": ["d"],
        "coef": {"d": 1.0},
        "se": {"d": 0.5},
        "t_stat": {"d": 2.0},
        "pval": {"d": 0.05},
        "ci_95": {"d": [0.0, 2.0]},
        "all_coef": {"d": [1.0]},
        "all_se": {"d": [0.5]},
        "n_obs": 100,
        "n_folds": 5,
        "n_rep": 1,
        "job_id": "est-1",
        "execution_arn": "arn:exec",
        "predictions_key": "p",
        "folds_key": "f",
        "timings": {
            "shards": [],
            "billed_gb_s": 7.25,
            "lambda_cost_usd": 0.000121,
            "aggregate": {"memory_mb": 1769, "peak_rss_mb": 100.0},
            "price_usd_per_gb_s": 1.6667e-05,
            "price_usd_per_request": 2e-07,
        },
    }
    timings = {
        "prepare_s": 1.0,
        "crossfit_s": 2.0,
        "aggregate_s": 0.5,
        "total_s": 3.5,
        "shards": [{}] * 3,
        "billed_gb_s": 7.25,
        "lambda_cost_usd": 0.000121,
    }
    return EstimateResult(raw=raw, timings=timings, cost=cost)  # fmt: skip


def test_the_estimate_table_prints_the_whole_jobs_cost_or_says_what_it_covers(capsys):
    from fanfit.cli.estimate import print_table as _print_table

    # GIVEN a result whose job was priced, and one whose cost could not be counted
    priced = job_cost(
        [{"function": "crossfit", "memory_mb": 1769, "duration_s": 2.0}] * 2, transitions=40
    ).to_dict()
    # WHEN the table is printed THEN the cost line is the job's total with its parts ...
    _print_table(_table_result(priced))
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("Cost"))
    assert line.startswith(f"Cost: ${priced['total_usd']:.6f} at AWS list prices: Lambda ")
    assert f"in {priced['lambda_requests']} request(s), 40 state transition(s)" in line
    # ... and without it, the shards' Lambda time, said to be only that, and where the rest is
    _print_table(_table_result(None))
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("Cost"))
    assert line == (
        "Cost: about $0.00012 for the shards' Lambda time (the whole job's: fanfit status est-1)"
    )
    assert "Shards: 3, billed 7.2 GB-s" in out
    assert out.startswith("================== DoubleMLPLR Object ==================")


class _Raw:
    """The raw body of a canned HTTP response."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_):
        yield self.body


def _sfn_answering(reply: dict):
    """A real botocore Step Functions client whose ListExecutions calls get the error in ``reply``
    (``status``, ``code``, ``message``; no network: a ``before-send`` handler answers), and the
    list of requests it sent."""
    import boto3
    from botocore.awsrequest import AWSResponse

    sfn = boto3.client("stepfunctions", region_name="us-east-1", endpoint_url="http://127.0.0.1:9",
                       aws_access_key_id="test", aws_secret_access_key="test")  # fmt: skip
    sent: list = []

    def answer(request, **_):
        sent.append(request)
        body = json.dumps({"__type": reply["code"], "message": reply["message"]}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0"}
        return AWSResponse(request.url, reply["status"], headers, _Raw(body))

    sfn.meta.events.register("before-send.sfn.ListExecutions", answer)
    return sfn, sent


def test_child_listing_that_localstack_cannot_do_is_not_retried(monkeypatch):
    import botocore.endpoint

    from fanfit.cost.collect import _child_executions

    sleeps: list = []
    monkeypatch.setattr(botocore.endpoint.time, "sleep", sleeps.append)
    # GIVEN LocalStack's answer to ListExecutions(mapRunArn): HTTP 500, its wrapped provider crash
    reply = {"status": 500, "code": "InternalError", "message": "exception while calling "
             "stepfunctions.ListExecutions: expected string or bytes-like object"}  # fmt: skip
    sfn, sent = _sfn_answering(reply)
    # WHEN the map run's children are listed THEN the API cannot list them: one request, no sleep
    assert _child_executions(sfn, "arn:map-run") is None
    assert len(sent) == 1 and sleeps == []
    # AND on the same client, afterwards, an error that may pass (a throttle) is retried as before
    reply.update(status=400, code="ThrottlingException", message="Rate exceeded")
    assert _child_executions(sfn, "arn:map-run") is None
    assert len(sent) == 1 + 5 and len(sleeps) == 4  # botocore's legacy mode: 4 retries
    # AND so is a plain server error of AWS's
    reply.update(status=500, code="InternalError", message="Internal error")
    sent.clear()
    sleeps.clear()
    assert _child_executions(sfn, "arn:map-run") is None
    assert len(sent) == 5
