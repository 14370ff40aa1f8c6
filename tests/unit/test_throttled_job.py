"""A job that Lambda kept throttling ends with a named error that says what to do.

GIVEN a job handle whose execution failed because a step stayed throttled
(``Lambda.TooManyRequestsException`` through every retry of the throttle policy, directly or as a
shard's last error) WHEN the client turns the failure into an exception THEN it is
:class:`fanfit.errors.LambdaThrottledError`, naming the bound and the way out; any other failure
keeps its own class.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from fanfit import errors
from fanfit.client.jobs import JobHandle


class _Records:
    def __init__(self, record: dict[str, Any] | None) -> None:
        self.record = record

    def get(self, job_id: str) -> dict[str, Any] | None:
        return self.record


class _Client:
    def __init__(self, record: dict[str, Any] | None = None) -> None:
        self.records = _Records(record)


def _handle(record: dict[str, Any] | None = None) -> JobHandle:
    return JobHandle(_Client(record), "job-7", "arn:aws:states:us-east-1:0:execution:m:e")  # type: ignore[arg-type]


def test_a_step_that_stayed_throttled_raises_lambda_throttled_error() -> None:
    # GIVEN an execution that failed on Prepare's last throttled attempt
    desc = {
        "status": "FAILED",
        "error": "Lambda.TooManyRequestsException",
        "cause": "Rate Exceeded. (Service: AWSLambda; Status Code: 429)",
    }
    # WHEN the client names the failure
    exc = _handle({"status": "FAILED"})._failure(desc)
    # THEN it is the named throttle error, with the retries' bound and what to do
    assert isinstance(exc, errors.LambdaThrottledError)
    assert isinstance(exc, errors.JobFailedError)
    assert "20 retries" in str(exc) and "331 s" in str(exc)
    assert "Concurrent executions" in str(exc) and "fanfit resume job-7" in str(exc)


def test_a_shard_whose_last_error_was_a_throttle_raises_lambda_throttled_error() -> None:
    # GIVEN a failed estimate whose shard kept being throttled (the failure step's message)
    cause = json.dumps(
        {
            "errorMessage": "shard 00003 (stage 0, wave 1) kept failing after its retries: "
            "Lambda.TooManyRequestsException: Rate Exceeded.",
            "errorType": "ShardFailedError",
        }
    )
    desc = {"status": "FAILED", "error": "ShardFailedError", "cause": cause}
    # WHEN named THEN the throttle error names the shard
    exc = _handle({"status": "FAILED"})._failure(desc)
    assert isinstance(exc, errors.LambdaThrottledError)
    assert "shard 00003" in str(exc)


@pytest.mark.parametrize(
    ("error", "expected"),
    [("ShardFailedError", errors.ShardFailedError), ("States.Timeout", errors.JobFailedError)],
)
def test_other_failures_keep_their_class(error: str, expected: type) -> None:
    # GIVEN a failure that is not a throttle
    desc = {"status": "FAILED", "error": error, "cause": "shard 00001 (stage 0, wave 0) crashed"}
    # WHEN named THEN it is not called a throttle
    exc = _handle({"status": "FAILED"})._failure(desc)
    assert type(exc) is expected
