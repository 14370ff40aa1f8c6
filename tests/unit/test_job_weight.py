"""A job's weight in the fair shares is a user option: client, CLI, job files, spec, registration.

GIVEN ``weight`` (a positive finite number, at most 100, default 1) on the client's submit methods,
``--weight`` on ``fanfit estimate`` and ``fanfit train``, or ``weight:`` in a job file, WHEN a job
is checked and started, THEN a bad value is a named InvalidJobError before anything is uploaded or
launched, a good one travels in the job spec to the plan and to the job's registration in the
partition table (moto), where Dorm's fair shares follow it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fanfit.cli import build_parser, config, main
from fanfit.errors import InvalidJobError

ROOT = Path(__file__).resolve().parents[2]
DATA = str(ROOT / "examples" / "data" / "sipp1991.dta")
X401K = "age,inc,educ,fsize,marr,twoearn,db,pira,hown"
ESTIMATE = ["estimate", "--data", DATA, "--y", "net_tfa", "--d", "e401", "--x", X401K,
            "--ml-l", "LassoCV", "--ml-m", "LogisticRegression"]  # fmt: skip
TRAIN = ["train", "--data", DATA, "--model", "kmeans", "--features", "age,inc",
         "--n-clusters", "3", "--workers", "2"]  # fmt: skip
TABLE = "fanfit-partitions"
BAD = [0, 0.0, -1, 100.5, 1e9, math.nan, math.inf, -math.inf, True, "2", [1]]


# ------------------------------------------------------------------------------------ Validation


@pytest.mark.parametrize("value", [1, 0.25, 2.5, 100, 100.0, np.float64(3.0), None])
def test_good_weights_are_floats(value) -> None:
    from fanfit.client.options import check_weight

    assert check_weight(value) == (1.0 if value is None else float(value))
    assert isinstance(check_weight(value), float)


@pytest.mark.parametrize("value", BAD)
def test_bad_weights_are_named_errors(value) -> None:
    from fanfit.client.options import check_weight

    with pytest.raises(InvalidJobError, match=r"^weight must be a (positive finite )?number"):
        check_weight(value)
    with pytest.raises(InvalidJobError, match=r"^--weight must"):
        check_weight(value, "--weight")


def test_check_estimate_carries_and_checks_the_weight() -> None:
    from fanfit.client import check_estimate

    options = dict(y="net_tfa", d="e401", x=X401K, ml_l="LassoCV", ml_m="LogisticRegression")
    assert check_estimate(DATA, **options).describe()["weight"] == 1.0
    assert check_estimate(DATA, weight=4, **options).weight == 4.0
    with pytest.raises(InvalidJobError, match="weight must be a positive finite number"):
        check_estimate(DATA, weight=0, **options)


# ------------------------------------------------------------------------------------------ CLI


@pytest.mark.parametrize("argv", [ESTIMATE, TRAIN], ids=["estimate", "train"])
def test_the_cli_parses_weight_with_default_1(argv) -> None:
    assert config.resolve_args(build_parser().parse_args(argv)).weight == 1.0
    assert config.resolve_args(build_parser().parse_args([*argv, "--weight", "2.5"])).weight == 2.5


@pytest.mark.parametrize("argv", [ESTIMATE, TRAIN], ids=["estimate", "train"])
def test_the_dry_run_shows_the_weight(argv, no_aws, capsys) -> None:
    code = main([*argv, "--weight", "3", "--dry-run", "--output", "json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["weight"] == 3.0


@pytest.mark.parametrize("argv", [ESTIMATE, TRAIN], ids=["estimate", "train"])
@pytest.mark.parametrize("weight", ["0", "-2", "nan", "inf", "101"])
@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "run"])
def test_a_bad_weight_exits_2_before_any_stack_is_touched(argv, weight, dry_run, no_aws,
                                                          capsys) -> None:  # fmt: skip
    # WHEN the command runs with a bad --weight (without --dry-run it would start the job)
    code = main([*argv, f"--weight={weight}", *(["--dry-run"] if dry_run else [])])
    # THEN it exits 2 naming the flag, and no boto3 client or local stack was touched
    assert code == 2
    assert "InvalidJobError: --weight must be a positive finite number" in capsys.readouterr().err


def test_a_job_file_sets_the_weight(tmp_path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("weight: 2\n", encoding="utf-8")
    args = config.resolve_args(build_parser().parse_args([*ESTIMATE, "--config", str(path)]))
    assert args.weight == 2.0
    # a flag overrides the file
    args = config.resolve_args(
        build_parser().parse_args([*TRAIN, "--config", str(path), "--weight", "0.5"])
    )
    assert args.weight == 0.5


@pytest.mark.parametrize("text", ["weight: 0", "weight: -1", "weight: .inf", "weight: .nan",
                                  "weight: 1000"])  # fmt: skip
def test_a_job_file_with_a_bad_weight_names_the_file_and_key(tmp_path, text) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(InvalidJobError, match=rf"^{path}: weight must be a positive finite"):
        config.resolve_args(build_parser().parse_args([*ESTIMATE, "--config", str(path)]))


@pytest.mark.parametrize("text", ["weight: two", "weight: true", "weight: [1]"])
def test_a_job_file_weight_of_the_wrong_type_is_named(tmp_path, text) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(InvalidJobError, match=rf"^{path}: weight must be a number"):
        config.resolve_args(build_parser().parse_args([*TRAIN, "--config", str(path)]))


# ---------------------------------------------------------------- Spec and registration (moto)


ESTIMATE_OPTIONS = dict(y="y", d="d", x=["x1", "x2", "x3"], ml_l="LinearRegression",
                        ml_m="LinearRegression", n_folds=2, max_concurrency=4)  # fmt: skip


def test_an_estimates_weight_goes_from_the_spec_to_its_registration(
    moto_client, partition_stack, make_plr_frame
) -> None:
    from fanfit import storage
    from fanfit.jobs.estimate.prepare import prepare_stage

    client = moto_client(partition_table=TABLE)
    # WHEN an estimate is submitted with weight 2.5
    job = client.submit_estimate(
        make_plr_frame(300), weight=2.5, job_id="est-w", **ESTIMATE_OPTIONS
    )
    # THEN the job spec carries it ...
    spec = client.store.get_json(storage.spec_key("est-w"))
    assert spec["weight"] == 2.5
    # ... Prepare writes it into the plan and registers the job with it and its execution
    prepare_stage(client.store, client.records, "est-w", storage.spec_key("est-w"), 0,
                  execution_arn=job.execution_arn, partitions=client.partitions)  # fmt: skip
    assert client.store.get_json(storage.plan_key("est-w"))["weight"] == 2.5
    item = client.partitions.get("est-w")
    assert item["weight"] == 2.5 and item["execution_arn"] == job.execution_arn
    # AND `fanfit jobs` (client.jobs()) shows it
    assert [(j["job_id"], j["weight"]) for j in client.jobs()] == [("est-w", 2.5)]


def test_a_train_jobs_weight_goes_from_the_spec_to_its_registration(
    moto_client, partition_stack, make_plr_frame
) -> None:
    from fanfit import storage
    from fanfit.jobs.train.init import init_job

    client = moto_client(partition_table=TABLE)
    job = client.submit_train(make_plr_frame(300), model="kmeans", features=["x1", "x2"],
                              n_clusters=3, workers=2, weight=3, job_id="train-w")  # fmt: skip
    assert client.store.get_json(storage.spec_key("train-w"))["weight"] == 3.0
    functions = {1769: "arn:aws:lambda:us-east-1:123456789012:function:large"}
    init_job(client.store, client.records, "train-w", storage.spec_key("train-w"), functions,
             job.execution_arn, partitions=client.partitions)  # fmt: skip
    item = client.partitions.get("train-w")
    assert item["weight"] == 3.0 and item["execution_arn"] == job.execution_arn


def test_register_job_receives_the_weight(
    moto_client, partition_stack, make_plr_frame, monkeypatch
) -> None:
    from fanfit import storage
    from fanfit.jobs import sharing
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.train.init import init_job

    seen: list[tuple[str, float]] = []
    real = sharing.register_job

    def spy(partitions, job_id, kind, demand, gpu_demand=0, weight=1.0, **kwargs):
        seen.append((job_id, weight))
        return real(partitions, job_id, kind, demand, gpu_demand, weight, **kwargs)

    monkeypatch.setattr(sharing, "register_job", spy)
    client = moto_client(partition_table=TABLE)
    client.submit_estimate(make_plr_frame(300), weight=0.5, job_id="est-s", **ESTIMATE_OPTIONS)
    prepare_stage(client.store, client.records, "est-s", storage.spec_key("est-s"), 0,
                  partitions=client.partitions)  # fmt: skip
    client.submit_train(make_plr_frame(300), model="kmeans", features=["x1", "x2"], n_clusters=3,
                        workers=2, weight=7, job_id="train-s")  # fmt: skip
    init_job(client.store, client.records, "train-s", storage.spec_key("train-s"),
             {1769: "arn:aws:lambda:us-east-1:123456789012:function:large"},
             partitions=client.partitions)  # fmt: skip
    assert seen == [("est-s", 0.5), ("train-s", 7.0)]


def test_weights_set_the_fair_shares(make_partitions) -> None:
    from fanfit.jobs.sharing import register_job

    parts = make_partitions()
    # GIVEN capacity 4 and two jobs of demand 4 with weights 3 and 1 THEN they hold 3 and 1
    register_job(parts, "heavy", "estimate", 4, weight=3.0, capacity=(4, 0))
    register_job(parts, "light", "estimate", 4, weight=1.0, capacity=(4, 0))
    assert {j["job_id"]: j["partition"] for j in parts.jobs()} == {"heavy": 3, "light": 1}


def test_a_bad_weight_uploads_and_starts_nothing(
    moto_client, partition_stack, make_plr_frame
) -> None:
    client = moto_client(partition_table=TABLE)

    class Refuse:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"{name} called for a job with a bad weight")

    client.store = Refuse()  # type: ignore[assignment]
    client.sfn = Refuse()
    with pytest.raises(InvalidJobError, match="weight must be a positive finite number"):
        client.submit_estimate(make_plr_frame(300), weight=-1, **ESTIMATE_OPTIONS)
    with pytest.raises(InvalidJobError, match="weight must be a number"):
        client.submit_train(make_plr_frame(300), model="kmeans", features=["x1", "x2"],
                            n_clusters=3, weight="heavy")  # fmt: skip


@pytest.mark.parametrize("kind", ["estimate", "train"])
def test_a_crafted_spec_with_a_bad_weight_fails_in_the_function(
    moto_client, partition_stack, make_plr_frame, kind
) -> None:
    from fanfit import storage
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.train.init import init_job

    client = moto_client(partition_table=TABLE)
    if kind == "estimate":
        client.submit_estimate(make_plr_frame(300), job_id="bad", **ESTIMATE_OPTIONS)
    else:
        client.submit_train(make_plr_frame(300), model="kmeans", features=["x1", "x2"],
                            n_clusters=3, workers=2, job_id="bad")  # fmt: skip
    key = storage.spec_key("bad")
    spec = client.store.get_json(key)
    # an older client's spec has no weight: 1
    spec.pop("weight")
    client.store.put_json(key, spec)
    if kind == "estimate":
        prepare_stage(client.store, client.records, "bad", key, 0, partitions=client.partitions)
    else:
        init_job(client.store, client.records, "bad", key, {1769: "arn:fn"},
                 partitions=client.partitions)  # fmt: skip
    assert client.partitions.get("bad")["weight"] == 1.0
    # a crafted one is refused, naming the option
    client.store.put_json(storage.spec_key("bad2"), {**spec, "weight": 0})
    with pytest.raises(InvalidJobError, match="weight must be a positive finite number"):
        if kind == "estimate":
            prepare_stage(client.store, client.records, "bad2", storage.spec_key("bad2"), 0)
        else:
            init_job(client.store, client.records, "bad2", storage.spec_key("bad2"),
                     {1769: "arn:fn"})  # fmt: skip


def test_fanfit_jobs_shows_the_weight(monkeypatch, capsys) -> None:
    import contextlib

    from fanfit import cli

    jobs = [{"job_id": "est-1", "kind": "estimate", "status": "RUNNING", "weight": 2.5,
             "demand": 4, "partition": 3, "gpu_demand": 0, "gpus": 0}]  # fmt: skip

    class Fake:
        def jobs(self) -> list[dict]:
            return jobs

    monkeypatch.setattr(cli, "_client", lambda args: contextlib.nullcontext(Fake()))
    assert main(["jobs"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["job", "kind", "status", "weight", "demand", "partition", "gpus"]
    assert row.split() == ["est-1", "estimate", "RUNNING", "2.5", "4", "3", "0/0"]
