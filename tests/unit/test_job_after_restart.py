"""An earlier job's handle after the local stack restarted: its record outlives its execution.

GIVEN a moto stack whose job records name executions Step Functions no longer knows (a local stack
restarted: its tables are restored from disk, its executions are not), WHEN a job handle waits for
the job, THEN a job that ended answers from its record (its result can be read), and one that had
not ended is ABORTED, with the command that resumes it.
"""

from __future__ import annotations

from typing import Any

import pytest

from fanfit import errors

GONE = "arn:aws:states:us-east-1:123456789012:execution:fanfit-estimate:{}"


@pytest.fixture
def client(moto_stack, moto_client) -> Any:
    with moto_stack():
        yield moto_client()


def test_a_job_that_ended_answers_from_its_record(client) -> None:
    # GIVEN a SUCCEEDED record whose execution is gone
    client.records.update("e-done", execution_arn=GONE.format("e-done"), kind="estimate",
                          status="SUCCEEDED")  # fmt: skip
    # WHEN its handle waits THEN it returns at once
    job = client.job("e-done")
    assert job.wait(timeout=5) is job


def test_a_job_that_failed_raises_its_recorded_error(client) -> None:
    # GIVEN a FAILED record whose execution is gone
    client.records.update("e-failed", execution_arn=GONE.format("e-failed"), kind="estimate",
                          status="FAILED", error="States.Timeout", cause="took too long")  # fmt: skip
    # WHEN its handle waits THEN the recorded error is raised
    with pytest.raises(errors.JobFailedError, match="States.Timeout: took too long"):
        client.job("e-failed").wait(timeout=5)


def test_a_job_cut_short_by_the_restart_is_refused_with_the_resume_command(client) -> None:
    # GIVEN a RUNNING record whose execution went with the stack
    client.records.update("e-cut", execution_arn=GONE.format("e-cut"), kind="estimate",
                          status="RUNNING")  # fmt: skip
    # WHEN its handle waits THEN the error names the job and how to go on
    with pytest.raises(
        errors.JobFailedError, match=r"e-cut.*no longer exists.*fanfit resume e-cut"
    ):
        client.job("e-cut").wait(timeout=5)
    # ... and its status is ABORTED (the stack's stop ended it), its record left as it was
    assert client.job("e-cut").status() == "ABORTED"
    assert client.job("e-cut").record()["status"] == "RUNNING"


def test_the_timings_an_execution_gave_are_left_out_when_it_is_gone(client) -> None:
    # GIVEN ended estimate and train jobs whose executions are gone
    client.records.update("e-old", execution_arn=GONE.format("e-old"), kind="estimate",
                          status="SUCCEEDED")  # fmt: skip
    client.records.update("t-old", execution_arn=GONE.format("t-old"), kind="train",
                          status="SUCCEEDED")  # fmt: skip
    # WHEN their phase and round timings are read THEN there are none (and nothing raises)
    assert client.job("e-old").phase_seconds() == {}
    assert client.job("t-old").round_wall_seconds() == []
