"""The local stack's DynamoDB journal: write-through lines folded into each table's latest state.

GIVEN :mod:`fanfit_localstack.dynamojournal` (loaded from its file: LocalStack is not installed
here) and a journal directory in ``tmp_path``, WHEN tables and items are written, overwritten and
deleted, THEN loading gives each table's latest state, compacts its file, skips a torn last line
(a process killed mid-write), and forgets a deleted table.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    name = "fanfit_localstack_dynamojournal"
    if name not in sys.modules:
        path = ROOT / "localstack_plugins" / "fanfit_localstack" / "dynamojournal.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


dj = _load()
ACCOUNT, REGION = "000000000000", "us-east-1"
JOBS = {
    "TableName": "fanfit-JobTable-1a2b3c4d",
    "KeySchema": [{"AttributeName": "job_id", "KeyType": "HASH"}],
    "AttributeDefinitions": [{"AttributeName": "job_id", "AttributeType": "S"}],
    "BillingMode": "PAY_PER_REQUEST",
}
THROUGHPUT = {
    "TableName": "fanfit-ThroughputTable-5e6f7a8b",
    "KeySchema": [
        {"AttributeName": "resource", "KeyType": "RANGE"},
        {"AttributeName": "learner", "KeyType": "HASH"},
    ],
    "AttributeDefinitions": [
        {"AttributeName": "learner", "AttributeType": "S"},
        {"AttributeName": "resource", "AttributeType": "S"},
    ],
    "BillingMode": "PAY_PER_REQUEST",
}


def _job(job_id: str, status: str) -> dict:
    return {"job_id": {"S": job_id}, "status": {"S": status}, "n": {"N": "3"},
            "schedule": {"M": {"waves": {"L": [{"N": "1"}]}}}}  # fmt: skip


def _by_name(tables):
    return {t.name: t for t in tables}


def test_the_latest_state_of_every_item_comes_back_and_the_file_is_compacted(tmp_path) -> None:
    # GIVEN two tables (one with a range key listed first), a TTL, items put, overwritten, deleted
    journal = dj.Journal(tmp_path)
    journal.create_table(ACCOUNT, REGION, JOBS["TableName"], JOBS)
    journal.create_table(ACCOUNT, REGION, THROUGHPUT["TableName"], THROUGHPUT)
    journal.set_ttl(ACCOUNT, REGION, JOBS["TableName"], {"Enabled": True, "AttributeName": "ttl"})
    jobs = JOBS["TableName"]
    for i in range(5):
        journal.write_items(
            ACCOUNT, REGION, jobs, [({"job_id": {"S": f"j{i}"}}, _job(f"j{i}", "RUNNING"))]
        )
    journal.write_items(ACCOUNT, REGION, jobs, [({"job_id": {"S": "j1"}}, _job("j1", "SUCCEEDED")),
                                                ({"job_id": {"S": "j2"}}, None)])  # fmt: skip
    key = {"learner": {"S": "lasso"}, "resource": {"S": "lambda-1769"}}
    journal.write_items(ACCOUNT, REGION, THROUGHPUT["TableName"],
                        [(key, {**key, "samples_per_s": {"N": "1200.5"}})])  # fmt: skip
    journal.write_items(ACCOUNT, REGION, THROUGHPUT["TableName"],
                        [(key, {**key, "samples_per_s": {"N": "1300"}})])  # fmt: skip
    journal.close()
    path = journal.path(ACCOUNT, REGION, jobs)
    assert len(path.read_text().splitlines()) == 1 + 1 + 5 + 2
    # WHEN the journal is loaded (as a starting LocalStack does)
    tables, skipped = dj.load(tmp_path)
    # THEN each table holds its latest items, none deleted, its request and TTL
    assert skipped == 0
    state = _by_name(tables)[jobs]
    assert state.create_request == JOBS
    assert state.ttl == {"Enabled": True, "AttributeName": "ttl"}
    statuses = {item["job_id"]["S"]: item["status"]["S"] for item in state.items.values()}
    assert statuses == {"j0": "RUNNING", "j1": "SUCCEEDED", "j3": "RUNNING", "j4": "RUNNING"}
    throughput = _by_name(tables)[THROUGHPUT["TableName"]]
    assert [i["samples_per_s"]["N"] for i in throughput.items.values()] == ["1300"]
    # ... and the file is compacted to the table, its TTL and one line per item
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"table": JOBS} and lines[1] == {"ttl": state.ttl}
    assert len(lines) == 2 + 4 and all("put" in line for line in lines[2:])
    # ... which loads to the same state again
    again, _ = dj.load(tmp_path)
    assert _by_name(again)[jobs].items == state.items


def test_a_torn_last_line_is_skipped_and_the_rest_kept(tmp_path) -> None:
    # GIVEN a journal whose last line a killed process left half written
    journal = dj.Journal(tmp_path)
    journal.create_table(ACCOUNT, REGION, JOBS["TableName"], JOBS)
    journal.write_items(ACCOUNT, REGION, JOBS["TableName"],
                        [({"job_id": {"S": "j0"}}, _job("j0", "SUCCEEDED"))])  # fmt: skip
    journal.close()
    path = journal.path(ACCOUNT, REGION, JOBS["TableName"])
    with open(path, "ab") as out:
        out.write(b'{"put": {"job_id": {"S": "j1"}, "sta')
    # WHEN it is loaded
    tables, skipped = dj.load(tmp_path)
    # THEN the whole lines are back, the torn one is counted as skipped and compacted away
    assert skipped == 1
    assert [i["job_id"]["S"] for i in tables[0].items.values()] == ["j0"]
    assert all(
        line.startswith("{") and line.endswith("}") for line in path.read_text().splitlines()
    )


def test_a_deleted_table_is_forgotten_and_a_new_one_of_its_name_starts_empty(tmp_path) -> None:
    # GIVEN a table with an item, deleted, and a table of the same name created again
    journal = dj.Journal(tmp_path)
    name = JOBS["TableName"]
    journal.create_table(ACCOUNT, REGION, name, JOBS)
    journal.write_items(ACCOUNT, REGION, name, [({"job_id": {"S": "old"}}, _job("old", "FAILED"))])
    journal.delete_table(ACCOUNT, REGION, name)
    assert not journal.path(ACCOUNT, REGION, name).exists()
    # (a write to a table the journal does not hold, such as the deleted one, is dropped)
    journal.write_items(ACCOUNT, REGION, name, [({"job_id": {"S": "x"}}, _job("x", "FAILED"))])
    assert not journal.path(ACCOUNT, REGION, name).exists()
    journal.create_table(ACCOUNT, REGION, name, JOBS)
    journal.write_items(ACCOUNT, REGION, name, [({"job_id": {"S": "new"}}, _job("new", "RUNNING"))])
    # WHEN loaded THEN only the new table's item is there
    tables, _ = dj.load(tmp_path)
    assert [i["job_id"]["S"] for i in tables[0].items.values()] == ["new"]


def test_a_file_without_its_table_line_is_skipped(tmp_path) -> None:
    # GIVEN a journal file that records no CreateTable (not written by the journal)
    path = tmp_path / ACCOUNT / REGION / "stray.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text('{"put": {"id": {"S": "1"}}}\n')
    # WHEN loaded THEN no table comes of it and it is counted
    tables, skipped = dj.load(tmp_path)
    assert tables == [] and skipped >= 1


@pytest.mark.parametrize(
    ("name", "written"),
    [("fanfit-JobTable-1a2b3c4d", True), ("fanfit-IdempotencyTable-1a2b3c4d", False)],
)
def test_tables_named_in_the_skip_list_are_not_written_through(monkeypatch, name, written) -> None:
    # GIVEN the local stack's skip list WHEN a table name is checked THEN only the others are kept
    monkeypatch.setenv(dj.SKIP_ENV, "IdempotencyTable")
    assert dj.journaled(name) is written


def test_binary_values_are_kept_as_base64(tmp_path) -> None:
    # GIVEN an item with a binary value as moto may hold it (bytes) WHEN written and loaded
    journal = dj.Journal(tmp_path)
    journal.create_table(ACCOUNT, REGION, JOBS["TableName"], JOBS)
    item = {"job_id": {"S": "b"}, "blob": {"B": b"\x00\xff"}}
    journal.write_items(ACCOUNT, REGION, JOBS["TableName"], [({"job_id": {"S": "b"}}, item)])
    tables, _ = dj.load(tmp_path)
    # THEN it comes back base64-encoded, as DynamoDB's JSON protocol carries it
    assert next(iter(tables[0].items.values()))["blob"] == {"B": "AP8="}


def test_item_json_is_moto_s_own_json_of_an_item() -> None:
    # GIVEN an item with every attribute type fanfit's records hold, stored by moto
    import boto3
    from moto import mock_aws
    from moto.dynamodb.models import dynamodb_backends

    item = {"job_id": {"S": "j"}, "n": {"N": "1.5"}, "ok": {"BOOL": True}, "none": {"NULL": True},
            "tags": {"SS": ["a", "b"]}, "sizes": {"NS": ["1", "2"]},
            "schedule": {"M": {"waves": {"L": [{"M": {"wave": {"N": "0"}, "p": {"S": "auto"}}},
                                                {"L": [{"N": "1"}, {"S": "x"}]}]}}}}  # fmt: skip
    with mock_aws():
        boto3.client("dynamodb", region_name="us-east-1").create_table(**JOBS)
        backend = dynamodb_backends["123456789012"]["us-east-1"]
        backend.put_item(JOBS["TableName"], item)
        stored = backend.get_item(JOBS["TableName"], {"job_id": {"S": "j"}})
        # WHEN the journal converts it THEN it is what moto's to_json gives, and the item put
        assert dj.item_json(stored) == stored.to_json()["Attributes"] == item


def test_the_start_waits_for_the_dynamodb_restore_only_where_the_plugins_have_it(
    tmp_path, monkeypatch
) -> None:
    # GIVEN LocalStack virtualenvs with the plugins installed before and after the journal existed
    from fanfit.local.process import DYNAMODB_RESTORE_HOOK, plugin_hooks

    monkeypatch.delenv("PYTHONPATH", raising=False)
    pyproject = (ROOT / "localstack_plugins" / "pyproject.toml").read_text()
    for name, hooks in (("old", "fanfit_s3_restore = x:y\n"),
                        ("new", f"fanfit_s3_restore = x:y\n{DYNAMODB_RESTORE_HOOK} = x:z\n")):  # fmt: skip
        info = (
            tmp_path
            / name
            / "lib"
            / "python3.13"
            / "site-packages"
            / "fanfit_localstack-0.1.0.dist-info"
        )
        info.mkdir(parents=True)
        (info / "entry_points.txt").write_text(f"[localstack.hooks.on_infra_ready]\n{hooks}")
    # WHEN their hooks are read THEN only the new one restores DynamoDB (start waits for it there)
    assert DYNAMODB_RESTORE_HOOK not in plugin_hooks(tmp_path / "old" / "bin" / "python")
    assert DYNAMODB_RESTORE_HOOK in plugin_hooks(tmp_path / "new" / "bin" / "python")
    # ... and the plugins' pyproject.toml declares that hook
    assert f'{DYNAMODB_RESTORE_HOOK} = "fanfit_localstack.dynamodb:restore_journal"' in pyproject
