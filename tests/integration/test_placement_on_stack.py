"""Placement at run time on the session stack (issue 14, items 1 and 2): the CrossFit functions of
the offered memory sizes, ``--plan-only`` (nothing runs), and a tiny job whose placement decision
``fanfit status`` shows."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fanfit import storage
from fanfit.cli import main

pytestmark = pytest.mark.integration

X = ["X1", "X2", "X3"]


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(14)
    x = rng.normal(size=(120, 3))
    d = x[:, 0] + rng.normal(size=120)
    y = 0.5 * d + x[:, 1] + rng.normal(size=120)
    return pd.DataFrame({"y": y, "d": d, "X1": x[:, 0], "X2": x[:, 1], "X3": x[:, 2]})


def test_plan_only_then_a_tiny_job_shows_its_placement(
    local_client: Any, fanfit_outputs: dict, local_stack_env: dict, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
) -> None:  # fmt: skip
    started = time.perf_counter()
    monkeypatch.setenv("FANFIT_HOME", local_stack_env["FANFIT_HOME"])
    # GIVEN the session stack: three CrossFit functions, one per offered memory size
    sizes = [int(mb) for mb in fanfit_outputs["CrossFitFunctionMemorySizes"].split(",")]
    assert sizes == [1769, 3538, 10240]
    names = [fanfit_outputs[k] for k in ("CrossFitFunctionName", "CrossFitFunction2Name",
                                         "CrossFitFunction3Name")]  # fmt: skip
    assert len(set(names)) == 3
    data = tmp_path / "plr.csv"
    _frame().to_csv(data, index=False)
    args = ["estimate", "--data", str(data), "--y", "y", "--d", "d", "--x", ",".join(X),
            "--n-folds", "2", "--ml-l", "LinearRegression", "--ml-m", "LinearRegression",
            "--seed", "1"]  # fmt: skip
    # WHEN --plan-only runs THEN nothing starts, and it predicts from the stack's figures
    before = len(local_client.sfn.list_executions(
        stateMachineArn=local_client.stack.estimate_state_machine_arn)["executions"])  # fmt: skip
    assert main([*args, "--plan-only", "--output", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["memory_sizes"] == sizes and plan["stages"][0]["n_units"] == 4
    assert plan["stages"][0]["placement"]["resources"][:3] == [f"lambda-{mb}" for mb in sizes]
    assert plan["predicted_wall_s"] > 0 and plan["predicted_cost_usd"] > 0
    after = local_client.sfn.list_executions(
        stateMachineArn=local_client.stack.estimate_state_machine_arn)["executions"]  # fmt: skip
    assert len(after) == before
    # WHEN the job runs
    job = local_client.submit_estimate(
        _frame(), y="y", d="d", x=X, n_folds=2, ml_l="LinearRegression",
        ml_m="LinearRegression", seed=1,
    )  # fmt: skip
    job.result(timeout=300)
    # THEN every shard ran on an offered size, the one its wave's placement chose ...
    schedule = local_client.store.get_json(storage.schedule_key(job.job_id, 0))
    chosen = {s["resource"] for w in schedule["waves"] for s in w["placement"]["stages"]}
    ran = {sh["resource"] for w in schedule["waves"] for sh in w["shards"]}
    assert ran == chosen and ran <= {f"lambda-{mb}" for mb in sizes}
    # ... for one-thread linear learners only the first size: a larger one would be no faster
    # (and each size used is a cold start more on the local stack)
    assert ran == {"lambda-1769"}
    # ... and fanfit status shows the decision
    assert main(["status", job.job_id]) == 0
    out = capsys.readouterr().out
    assert "placement (least cost within 5% of the fastest plan's time)" in out
    assert "ml_l on lambda-" in out and "input ml_m lambda-1769" in out
    # ... with the split of each learner between Lambda and the session stack's GPU worker
    # (drift-plus-penalty; the GPU worker's prior start-up keeps a tiny job's fits on Lambda)
    assert "    dispatch ml_l (drift-plus-penalty, V " in out and " 0 on gpu:" in out
    print(f"placement on stack: ran on {sorted(ran)}; {time.perf_counter() - started:.1f} s")
