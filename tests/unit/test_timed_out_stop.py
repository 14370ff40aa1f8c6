"""A job whose execution timed out gets its stop marker from the client (issue 31, item 1), on moto.

An execution past its ``TimeoutSeconds`` ends ``TIMED_OUT`` without running its failure branch, so
the marker the failure branch writes for the job's running DS-Sync workers and CrossFit shards
(:mod:`fanfit.jobs.stop`) is not written. The client writes it when it sees the status:
``wait()`` (before it raises) and ``status()`` (``fanfit status``, ``fanfit resume``'s look).

moto cannot time an execution out, so its DescribeExecution answers TIMED_OUT for the job's
(stopped) execution here; the marker is written to and read from moto's S3.
"""

from __future__ import annotations

from typing import Any

import pytest

from fanfit import errors, storage
from fanfit.jobs.stop import StopReader


@pytest.fixture
def client(moto_stack, moto_client) -> Any:
    """A client of the moto stack (state machines of one Pass state, fanfit's bucket and tables)."""
    with moto_stack({}):
        yield moto_client()


def _timed_out(client: Any, monkeypatch: pytest.MonkeyPatch, job_id: str, kind: str) -> str:
    """Start a job's execution, record it, stop it, and make DescribeExecution say TIMED_OUT."""
    client.store.put_json(storage.spec_key(job_id), {"kind": kind})
    machine = (client.stack.train_state_machine_arn if kind == "train"
               else client.stack.estimate_state_machine_arn)  # fmt: skip
    arn = str(
        client.sfn.start_execution(stateMachineArn=machine, name=job_id, input="{}")["executionArn"]
    )
    client.records.mark_running(job_id, execution_arn=arn, kind=kind)
    client.sfn.stop_execution(executionArn=arn)
    real = client.sfn.describe_execution

    def describe(**kwargs: Any) -> dict[str, Any]:
        desc = dict(real(**kwargs))
        if kwargs.get("executionArn") == arn:
            desc.update(status="TIMED_OUT", error="States.Timeout", cause="")
        return desc

    monkeypatch.setattr(client.sfn, "describe_execution", describe)
    return arn


def test_waiting_on_a_timed_out_train_job_writes_its_stop_marker_for_its_workers(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a train job whose execution timed out, no marker written (no failure branch ran)
    arn = _timed_out(client, monkeypatch, "train-t", "train")
    key = storage.train_stop_key("train-t")
    assert not client.store.exists(key)
    # WHEN the client waits for it
    with pytest.raises(errors.JobFailedError, match="TIMED_OUT"):
        client.job("train-t").wait(timeout=1.0)
    # THEN its marker is there, says why, and stops a DS-Sync worker of that execution
    marker = StopReader(client.store, key, arn).read()
    assert marker is not None
    assert (marker.reason, marker.error, marker.execution_arn) == ("failed", "States.Timeout", arn)
    # ... but not a worker of a later execution of the job (fanfit resume)
    assert StopReader(client.store, key, arn + "-r1").read() is None
    # AND the estimate's marker key was not touched
    assert not client.store.exists(storage.estimate_stop_key("train-t"))


def test_status_of_a_timed_out_estimate_writes_its_marker_once(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an estimate whose execution timed out
    arn = _timed_out(client, monkeypatch, "est-t", "estimate")
    key = storage.estimate_stop_key("est-t")
    # WHEN its status is read twice
    assert client.job("est-t").status() == "TIMED_OUT"
    first = client.store.etag(key)
    assert client.job("est-t").status() == "TIMED_OUT"
    # THEN the marker for its shards was written by the first look and not again
    assert first is not None and client.store.etag(key) == first
    marker = StopReader(client.store, key, arn).read()
    assert marker is not None and marker.error == "States.Timeout"


def test_a_running_or_succeeded_job_gets_no_marker(client: Any) -> None:
    # GIVEN a running estimate (moto's Pass machine: RUNNING until stopped)
    client.store.put_json(storage.spec_key("est-r"), {"kind": "estimate"})
    arn = client.sfn.start_execution(stateMachineArn=client.stack.estimate_state_machine_arn,
                                     name="est-r", input="{}")["executionArn"]  # fmt: skip
    client.records.mark_running("est-r", execution_arn=arn, kind="estimate")
    # WHEN its status is read and it is waited for a moment
    assert client.job("est-r").status() == "RUNNING"
    with pytest.raises(errors.WaitTimeoutError):
        client.job("est-r").wait(timeout=0.0)
    # THEN no marker stops its shards
    assert not client.store.exists(storage.estimate_stop_key("est-r"))
