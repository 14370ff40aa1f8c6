"""An estimate's running CrossFit shard stops between two units when its job failed or was cancelled.

GIVEN a PLR job on moto (2 repetitions x 2 folds x 2 learners) prepared and scheduled into one
shard of every unit, WHEN the job's stop marker (``jobs/<id>/stop.json``) of the shard's execution
appears before its first unit or between two units, THEN the shard stops there with
ShardStoppedError naming the job, the shard, the units done and the reason, writes no predictions
(a resume must not take a partial shard for a finished one) and logs why; a marker of another
execution (the one ``fanfit resume`` replaced) does not stop it. A marker written during a long
unit stops the shard within about UNIT_WATCH_S (the StopWatch), not at the unit's end.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from fanfit import errors, storage

E1, E2 = (
    "arn:aws:states:us-east-1:1:execution:estimate:e1",
    "arn:aws:states:us-east-1:1:execution:estimate:e2",
)


@pytest.fixture
def shard(job_storage, make_partitions, put_estimate_spec):
    """``(store, job_id, shard)``: the job's first shard, given all 8 units of its stage."""
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave

    store, records, throughput = job_storage
    parts = make_partitions()
    job = "est-stop"
    key = put_estimate_spec(store, storage.spec_key(job), n_rep=2, max_concurrency=1)
    prepare_stage(store, records, job, key, 0, partitions=parts)
    out = schedule_wave(store, records, throughput, job, 0, 0, 1769, 1, partitions=parts)
    first = store.get_json(out.shards_key)[0]
    units = store.get_json(storage.units_key(job, 0))
    assert len(units) == 8
    return store, job, {**first, "units": units}


def test_a_marker_of_the_shards_execution_stops_it_before_its_first_unit(shard, caplog) -> None:
    from fanfit.jobs.estimate.crossfit import crossfit_shard
    from fanfit.jobs.stop import write_stop

    store, job, item = shard
    # GIVEN the job was cancelled in execution E1
    write_stop(store, storage.estimate_stop_key(job), "cancelled", execution_arn=E1)
    # WHEN a shard of E1 starts
    with (
        caplog.at_level(logging.WARNING, logger="fanfit"),
        pytest.raises(errors.ShardStoppedError) as stopped,
    ):
        crossfit_shard(store, job, storage.plan_key(job), 0, item, 1769, execution_arn=E1)
    # THEN it stops before any unit, says why, and writes no predictions
    message = str(stopped.value)
    assert f"job {job}: shard {item['shard_id']}" in message
    assert "after 0 of 8 units" in message and "the job was cancelled" in message
    assert message in caplog.text
    assert not store.exists(storage.preds_key(job, 0, item["shard_id"]))
    # AND a shard of the resumed execution E2 is not stopped by E1's marker
    out = crossfit_shard(store, job, storage.plan_key(job), 0, item, 1769, execution_arn=E2)
    assert out["n_units"] == 8 and store.exists(out["preds_key"])


def test_a_marker_written_during_the_shard_stops_it_at_the_next_unit(shard, monkeypatch) -> None:
    from fanfit import dml
    from fanfit.dml import unit_fits
    from fanfit.jobs.estimate import crossfit
    from fanfit.jobs.stop import write_stop

    store, job, item = shard
    # GIVEN a check before every unit, and a job that fails (its failure branch writes the
    # marker of E1) while the shard fits its third unit
    monkeypatch.setattr(crossfit, "STOP_CHECK_S", 0.0)
    fit = dml.fit_predict_aux
    fitted: list[str] = []

    def fit_and_fail(plan, unit, *args, **kwargs):
        fitted.append(unit.key)
        if len(fitted) == 3:
            write_stop(store, storage.estimate_stop_key(job), "failed", execution_arn=E1,
                       error="States.TaskFailed")  # fmt: skip
        return fit(plan, unit, *args, **kwargs)

    # (CrossFit fits a shard's units through fit_predict_units, which calls fit_predict_aux)
    monkeypatch.setattr(unit_fits, "fit_predict_aux", fit_and_fail)
    # WHEN the shard of E1 runs
    with pytest.raises(errors.ShardStoppedError, match="after 3 of 8 units") as stopped:
        crossfit.crossfit_shard(store, job, storage.plan_key(job), 0, item, 1769, execution_arn=E1)
    # THEN it stopped before the fourth unit, naming the failure, and wrote nothing
    assert len(fitted) == 3
    assert "failed (States.TaskFailed)" in str(stopped.value)
    assert not store.exists(storage.preds_key(job, 0, item["shard_id"]))


def test_a_marker_written_during_a_long_unit_stops_it_within_seconds(shard, monkeypatch) -> None:
    from fanfit.dml import unit_fits
    from fanfit.jobs.estimate import crossfit
    from fanfit.jobs.stop import write_stop

    store, job, item = shard
    monkeypatch.setattr(crossfit, "UNIT_WATCH_S", 0.05)
    # GIVEN a first unit whose fit runs a minute of Python (a forest of many trees), and a job
    # cancelled 0.3 s into it
    cancel = threading.Timer(
        0.3, write_stop, (store, storage.estimate_stop_key(job), "cancelled"), {"execution_arn": E1}
    )

    def minute_long_fit(*args, **kwargs):
        cancel.start()
        end = time.perf_counter() + 60.0
        while time.perf_counter() < end:
            sum(range(100))
        raise AssertionError("the unit was not interrupted")

    monkeypatch.setattr(unit_fits, "fit_predict_aux", minute_long_fit)
    # WHEN the shard of E1 runs
    t0 = time.perf_counter()
    with pytest.raises(errors.ShardStoppedError, match="during a unit after 0 of 8") as stopped:
        crossfit.crossfit_shard(store, job, storage.plan_key(job), 0, item, 1769, execution_arn=E1)
    # THEN it stopped within seconds of the cancel, naming it, and wrote nothing
    assert time.perf_counter() - t0 < 10.0
    assert "the job was cancelled" in str(stopped.value)
    assert not store.exists(storage.preds_key(job, 0, item["shard_id"]))


@pytest.mark.parametrize(("spacing_s", "expected_reads"), [(60.0, 1), (0.0, 8)])
def test_checks_are_spaced_by_stop_check_s(shard, monkeypatch, spacing_s, expected_reads) -> None:
    from fanfit.jobs.estimate import crossfit
    from fanfit.jobs.stop import StopReader

    store, job, item = shard
    # GIVEN a shard of 8 quick units and a spacing of the marker's checks
    monkeypatch.setattr(crossfit, "STOP_CHECK_S", spacing_s)
    monkeypatch.setattr(crossfit, "UNIT_WATCH_S", 60.0)  # the watch reads only in a long unit
    reads: list[str] = []
    read = StopReader.read

    def counted(self):
        reads.append(self.key)
        return read(self)

    monkeypatch.setattr(StopReader, "read", counted)
    # WHEN it runs
    crossfit.crossfit_shard(store, job, storage.plan_key(job), 0, item, 1769, execution_arn=E1)
    # THEN it read the marker before its first unit and then only once the spacing had passed:
    # once in all with a minute's spacing, before every unit with none
    assert reads == [storage.estimate_stop_key(job)] * expected_reads


def test_the_estimate_failure_branch_writes_a_marker_the_shards_read() -> None:
    import json
    from pathlib import Path

    from fanfit.jobs.documents.train import TrainStop
    from fanfit.jobs.states import EstimateState

    root = Path(__file__).resolve().parents[2]
    # GIVEN the estimate state machine's failure branch
    states = json.loads((root / "orchestrator" / "estimate.asl.json").read_text())["States"]
    assert states[EstimateState.RECORD_FAILURE]["Next"] == EstimateState.WRITE_STOP
    write = states[EstimateState.WRITE_STOP]
    assert write["Next"] == EstimateState.RELEASE
    assert write["Resource"] == "arn:aws:states:::aws-sdk:s3:putObject"
    params = write["Parameters"]
    # WHEN its Body's fields are filled as Step Functions fills them
    values = {"$$.Execution.Id": E1, "$.error.Error": "States.ExceedToleratedFailureThreshold",
              "$.error.Cause": "The specified tolerated failure threshold was exceeded",
              "$$.State.EnteredTime": "2026-11-28T16:00:00.000Z"}  # fmt: skip
    body = {k.removesuffix(".$"): values[v] if k.endswith(".$") else v
            for k, v in params["Body"].items()}  # fmt: skip
    # THEN they make a marker of that execution, at the key the shards read
    marker = TrainStop.parse(body)
    assert (marker.reason, marker.execution_arn) == ("failed", E1)
    template = params["Key.$"].split("'")[1]
    assert template.replace("{}", "JOB") == storage.estimate_stop_key("JOB")
    # ... and every shard of the Map gets the parent's execution (ItemSelector runs in the
    # parent's context; inside a Distributed Map's child, $$.Execution.Id is the child's)
    selector = states[EstimateState.CROSSFIT_WAVE]["ItemSelector"]
    assert selector["execution_arn.$"] == "$$.Execution.Id"
