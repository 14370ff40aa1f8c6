"""A job's records survive ``fanfit local down`` and ``up`` (issue 13, item 4).

The local stack writes its DynamoDB tables through to ``<state dir>/dynamodb``
(``fanfit_localstack.dynamodb``) and puts them back when it starts; a redeploy of the same stack
takes the restored tables over (CloudFormation names them stably). This test runs a stack of its
own (the session's stays up): a tiny PLR, then stop (SIGTERM, as ``fanfit local down``), start,
redeploy, and the earlier job's status (the CLI's ``fanfit status``), result and report work.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit.local.stack import LocalStack

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[LocalStack]:
    """A local stack of this test's own (state dir under ``tmp_path``); stopped at the end."""
    stack = LocalStack(root=ROOT, home=tmp_path / "home")
    try:
        yield stack
    finally:
        stack.stop()


def _table_name(client: Any, logical_id: str) -> str:
    cloudformation = client.session.client("cloudformation", endpoint_url=client.stack.endpoint_url)
    return cloudformation.describe_stack_resource(StackName="fanfit", LogicalResourceId=logical_id)[
        "StackResourceDetail"
    ]["PhysicalResourceId"]


def test_an_earlier_job_s_status_result_and_report_survive_local_down_and_up(
    own_stack: LocalStack,
    redeploy: Any,
    client_of_stack: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # GIVEN a tiny PLR (2 folds, 1 repetition) run to its end on a stack of its own
    info = own_stack.start()
    redeploy(info)
    client = client_of_stack(info)
    rng = np.random.default_rng(5)
    n = 200
    x = rng.normal(size=(n, 2))
    d = x[:, 0] + rng.normal(size=n)
    frame = pd.DataFrame({"y": 0.5 * d + x[:, 1] + rng.normal(size=n), "d": d,
                          "x0": x[:, 0], "x1": x[:, 1]})  # fmt: skip
    job = client.submit_estimate(frame, model="plr", y="y", d="d", x=["x0", "x1"],
                                 ml_l="LinearRegression", ml_m="LinearRegression", n_folds=2,
                                 n_rep=1, seed=7)  # fmt: skip
    before = job.result(timeout=300)
    record = client.records.get(job.job_id)
    assert record is not None and record["status"] == "SUCCEEDED"
    job_table = _table_name(client, "JobTable")
    # WHEN the stack is stopped as `fanfit local down` stops it, started again and redeployed
    assert own_stack.stop()
    restarted = own_stack.start()
    assert restarted.pid != info.pid
    restored = own_stack.dynamodb_restored(restarted.pid)
    assert restored is not None and restored["tables"] >= 3 and restored["items"] >= 1, restored
    assert restored["skipped"] == 0
    redeploy(restarted)
    client = client_of_stack(restarted)
    # THEN the redeployed stack names the same job table, and the job's record is back as it was
    assert _table_name(client, "JobTable") == job_table
    assert client.records.get(job.job_id) == record
    # ... its result is the same
    after = client.job(job.job_id).result(timeout=30)
    np.testing.assert_array_equal(after.all_coef, before.all_coef)
    np.testing.assert_array_equal(after.se, before.se)
    # ... and `fanfit status` and `fanfit report` of it work
    from fanfit import cli

    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(client))
    capsys.readouterr()  # what the fixtures printed
    assert cli.main(["status", job.job_id, "--output", "json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["status"] == "SUCCEEDED" and status["job_id"] == job.job_id
    assert cli.main(["report", job.job_id, "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "report.html").is_file()
    # (that the stack writes on, jobs running on restored tables, test_restart_on_stack shows: its
    # killed job resumes there)
    print(json.dumps({"restore": restored}))
