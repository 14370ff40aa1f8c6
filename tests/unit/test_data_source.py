"""s3:// data used in place (moto): the reader, the job documents, the bucket check, the client.

GIVEN a ``.csv``, ``.npz`` or ``.npy`` object in the stack's bucket (or in the bucket of
``ExternalDataBucketName``), WHEN a job names it, THEN the client reads its header only (ranged
GETs, no upload of the data), and Prepare or TrainInit read the submitted version, keep the job's
columns and write them as the content-addressed data object; anything wrong is a named error.
"""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from fanfit import storage
from fanfit.errors import (
    DataBucketNotAllowedError,
    DataSourceChangedError,
    InvalidDataError,
    InvalidDocumentError,
    LambdaLimitError,
)

BUCKET = "fanfit-unit"
EXTERNAL = "fanfit-external-data"
ESTIMATE_OPTIONS = dict(y="y", d="d", x=["x1", "x2", "x3"], ml_l="LinearRegression",
                        ml_m="LinearRegression", n_folds=2, seed=3)  # fmt: skip


@pytest.fixture
def client(moto_stack, moto_client, monkeypatch) -> Any:
    """A client of the moto stack, with a second bucket (``EXTERNAL``) and no external bucket set."""
    monkeypatch.delenv("FANFIT_EXTERNAL_DATA_BUCKET", raising=False)
    with moto_stack() as s3:
        s3.create_bucket(Bucket=EXTERNAL)
        yield moto_client()


def _csv(frame: Any) -> bytes:
    return frame.to_csv(index=False).encode()


def _npz(frame: Any) -> bytes:
    buf = io.BytesIO()
    np.savez(
        buf, values=frame.to_numpy(dtype=np.float64), columns=np.array(frame.columns, dtype=str)
    )
    return buf.getvalue()


def _npy(frame: Any) -> bytes:
    buf = io.BytesIO()
    np.save(buf, frame.to_records(index=False), allow_pickle=False)
    return buf.getvalue()


def _count_calls(s3: Any) -> list[tuple[str, dict]]:
    """Every S3 call of ``s3`` from now on: ``(operation, params)``."""
    calls: list[tuple[str, dict]] = []

    def seen(params: dict, model: Any, **_: Any) -> None:
        calls.append((model.name, dict(params)))

    s3.meta.events.register("provide-client-params.s3.*", seen)
    return calls


@pytest.mark.parametrize("suffix, encode", [(".csv", _csv), (".npz", _npz), (".npy", _npy)])
def test_header_then_source_read_gives_the_jobs_columns(client, make_plr_frame, suffix, encode):
    # GIVEN a data set of 200 rows in each format in the stack's bucket
    frame = make_plr_frame(200, seed=1).round(9)
    client.s3.put_object(Bucket=BUCKET, Key=f"in/plr{suffix}", Body=encode(frame))
    uri = f"s3://{BUCKET}/in/plr{suffix}"
    # WHEN its header is read
    calls = _count_calls(client.s3)
    header = storage.read_source_header(client.s3, uri)
    # THEN the columns and the version come back, and every GET was a ranged one
    assert header.columns == ["y", "d", "x1", "x2", "x3"]
    assert header.obj.etag.startswith('"') and header.size > 0
    # (a CSV's first 64 KiB; an .npz's tail, its directory and columns; an .npy's head)
    gets = [p for op, p in calls if op == "GetObject"]
    assert len(gets) == 1 and "Range" in gets[0]
    if suffix == ".csv":
        assert gets[0]["Range"] == f"bytes=0-{storage.sources.HEADER_BYTES - 1}"
    # WHEN the server reads that version's columns d, x2, y
    names, values = storage.read_source(client.s3, header.obj, ["d", "x2", "y"])
    # THEN they are the columns of the frame, float64, as the client's reader gives them
    assert names == ["d", "x2", "y"] and values.dtype == np.float64
    np.testing.assert_array_equal(values, frame[["d", "x2", "y"]].to_numpy(dtype=np.float64))


def test_a_changed_or_removed_source_is_refused_by_name(client, make_plr_frame):
    # GIVEN a CSV whose header the client read
    client.s3.put_object(Bucket=BUCKET, Key="in/a.csv", Body=_csv(make_plr_frame(20)))
    header = storage.read_source_header(client.s3, f"s3://{BUCKET}/in/a.csv")
    # WHEN the object is overwritten before the server reads it THEN the read is refused
    client.s3.put_object(Bucket=BUCKET, Key="in/a.csv", Body=_csv(make_plr_frame(21)))
    with pytest.raises(DataSourceChangedError, match=r"s3://fanfit-unit/in/a.csv changed since"):
        storage.read_source(client.s3, header.obj, ["y"])
    with pytest.raises(DataSourceChangedError, match="changed since"):
        storage.source_size(client.s3, header.obj)
    # ... and when it is removed
    client.s3.delete_object(Bucket=BUCKET, Key="in/a.csv")
    with pytest.raises(DataSourceChangedError, match="was removed"):
        storage.source_size(client.s3, header.obj)


def test_csv_errors_name_the_column_and_line(client):
    def read(body: bytes, columns: list[str]) -> Any:
        client.s3.put_object(Bucket=BUCKET, Key="in/bad.csv", Body=body)
        header = storage.read_source_header(client.s3, f"s3://{BUCKET}/in/bad.csv")
        return storage.read_source(client.s3, header.obj, columns)

    # GIVEN CSVs with a missing column, a word, an empty field, a short row, quoted names
    with pytest.raises(
        InvalidDataError, match=r"column\(s\) 'z' not in s3://.*its columns are: y, d"
    ):
        read(b"y,d\n1,2\n", ["y", "z"])
    with pytest.raises(InvalidDataError, match=r"column 'd' .* not numeric: line 3 holds 'abc'"):
        read(b"y,d\n1,2\n3,abc\n", ["y", "d"])
    with pytest.raises(InvalidDataError, match=r"column 'y' .* line 2 holds ''"):
        read(b"y,d\n,2\n", ["y", "d"])
    with pytest.raises(InvalidDataError, match="line 3 .* has 1 fields; its header has 2"):
        read(b"y,d\n1,2\n3\n", ["y", "d"])
    with pytest.raises(InvalidDataError, match="is empty"):
        read(b"", ["y"])
    # THEN a quoted header, a BOM and CRLF line ends read as numbers
    _, values = read(b'\xef\xbb\xbf"y","d"\r\n1.5,"2"\r\n-3e2,nan\r\n', ["d", "y"])
    np.testing.assert_array_equal(values, [[2.0, 1.5], [np.nan, -300.0]])
    # AND a single row keeps two dimensions
    assert read(b"y,d\n1,2\n", ["y"])[1].shape == (1, 1)


def test_npz_and_npy_that_are_not_fanfits_layout_are_refused(client):
    buf = io.BytesIO()
    np.savez(buf, x=np.zeros(3))
    client.s3.put_object(Bucket=BUCKET, Key="in/other.npz", Body=buf.getvalue())
    with pytest.raises(InvalidDataError, match="must hold arrays 'values'.*it holds x"):
        storage.read_source_header(client.s3, f"s3://{BUCKET}/in/other.npz")
    buf = io.BytesIO()
    np.save(buf, np.zeros((3, 2)))
    client.s3.put_object(Bucket=BUCKET, Key="in/plain.npy", Body=buf.getvalue())
    with pytest.raises(InvalidDataError, match="1-d structured array"):
        storage.read_source_header(client.s3, f"s3://{BUCKET}/in/plain.npy")


def test_the_document_takes_exactly_one_of_data_key_and_data_source():
    from fanfit.jobs.documents import DataSource
    from fanfit.jobs.documents.estimate import EstimateSpec
    from fanfit.jobs.documents.train import TrainJobFile

    source = {"bucket": BUCKET, "key": "in/a.csv", "etag": '"abc"'}
    key = storage.data_key("0" * 64)
    # GIVEN a spec with a data source THEN it parses, and the source reads back as written
    spec = EstimateSpec.parse({"dml": {}, "data_source": source})
    assert spec.data_source == DataSource(**source) and spec.data_key is None
    assert spec.data_source.uri == "s3://fanfit-unit/in/a.csv"
    assert EstimateSpec.parse(spec.to_json_dict()) == spec
    # WHEN it names both, or neither THEN it is refused by name
    for cls, base in ((EstimateSpec, {"dml": {}}), (TrainJobFile, {"spec": {}})):
        with pytest.raises(
            InvalidDocumentError, match="exactly one of data_key .* and data_source"
        ):
            cls.parse({**base, "data_key": key, "data_source": source})
        with pytest.raises(InvalidDocumentError, match="exactly one of data_key"):
            cls.parse(base)
    # ... and a bad bucket, a format not read in place, or no ETag are refused, naming the field
    with pytest.raises(InvalidDocumentError, match=r"data_source\.bucket"):
        EstimateSpec.parse({"dml": {}, "data_source": {**source, "bucket": "Not_A_Bucket"}})
    with pytest.raises(InvalidDocumentError, match=r"data_source\.key: .*\.csv, \.npz, \.npy"):
        EstimateSpec.parse({"dml": {}, "data_source": {**source, "key": "in/a.parquet"}})
    with pytest.raises(InvalidDocumentError, match=r"data_source\.etag"):
        TrainJobFile.parse({"spec": {}, "data_source": {**source, "etag": ""}})


def test_materialize_refuses_other_buckets_and_data_over_the_memory(client, make_plr_frame,
                                                                    monkeypatch):  # fmt: skip
    from fanfit.jobs.documents import DataSource
    from fanfit.jobs.source import materialize_source

    frame = make_plr_frame(100)
    client.s3.put_object(Bucket=EXTERNAL, Key="a.csv", Body=_csv(frame))
    header = storage.read_source_header(client.s3, f"s3://{EXTERNAL}/a.csv")
    source = DataSource(bucket=EXTERNAL, key="a.csv", etag=header.obj.etag)
    # GIVEN a source in another bucket and no ExternalDataBucketName THEN it is refused by name
    with pytest.raises(
        DataBucketNotAllowedError, match=rf"'{EXTERNAL}' .*ExternalDataBucketName={EXTERNAL}"
    ):
        materialize_source(client.store, source, ["y"])
    # WHEN the stack names that bucket THEN the columns are written as the data object
    monkeypatch.setenv("FANFIT_EXTERNAL_DATA_BUCKET", EXTERNAL)
    key = materialize_source(client.store, source, ["y", "d"], memory_mb=1769)
    names, values = client.store.get_data(key)
    assert names == ["y", "d"]
    np.testing.assert_allclose(values, frame[["y", "d"]].to_numpy(), rtol=1e-15, atol=0)
    # AND an object over the function's memory is refused, naming the template parameter
    with pytest.raises(LambdaLimitError, match="PrepareMemorySize="):
        materialize_source(client.store, source, ["y"], memory_mb=128)


def test_client_uses_the_stacks_csv_in_place_and_prepare_writes_the_data(client, make_plr_frame):
    from fanfit.jobs.estimate.prepare import prepare_stage

    # GIVEN a CSV in the stack's bucket
    frame = make_plr_frame(300, seed=2)
    client.s3.put_object(Bucket=BUCKET, Key="in/plr.csv", Body=_csv(frame))
    calls = _count_calls(client.s3)
    # WHEN an estimate is submitted with it
    client.submit_estimate(f"s3://{BUCKET}/in/plr.csv", job_id="est-src", **ESTIMATE_OPTIONS)
    # THEN the client read its header only and put no data object
    gets = [p for op, p in calls if op == "GetObject"]
    assert len(gets) == 1 and "Range" in gets[0]
    puts = [p["Key"] for op, p in calls if op in ("PutObject", "CopyObject")]
    assert puts == [storage.spec_key("est-src")]
    spec = client.store.get_json(storage.spec_key("est-src"))
    assert "data_key" not in spec or spec["data_key"] is None
    assert spec["data_source"]["bucket"] == BUCKET and spec["data_source"]["etag"]
    # WHEN Prepare plans it THEN the plan names the data object of the job's columns
    prepare_stage(client.store, client.records, "est-src", storage.spec_key("est-src"), 0,
                  memory_mb=1769)  # fmt: skip
    plan = client.store.get_json(storage.plan_key("est-src"))
    names, values = client.store.get_data(plan["data_key"])
    assert names == ["y", "d", "x1", "x2", "x3"] and plan["n_obs"] == 300
    np.testing.assert_allclose(values, frame[names].to_numpy(), rtol=1e-15, atol=0)


def test_client_downloads_other_buckets_and_uses_the_external_one_in_place(client,
                                                                           make_plr_frame):  # fmt: skip
    # GIVEN a CSV in a bucket the stack does not name
    client.s3.put_object(Bucket=EXTERNAL, Key="plr.csv", Body=_csv(make_plr_frame(100)))
    client.__dict__["_stack_outputs"] = {}  # the stack's outputs: no ExternalDataBucketName
    calls = _count_calls(client.s3)
    # WHEN an estimate is submitted THEN it is downloaded whole and uploaded as before
    client.submit_estimate(f"s3://{EXTERNAL}/plr.csv", job_id="est-dl", **ESTIMATE_OPTIONS)
    assert any(op == "GetObject" and "Range" not in p for op, p in calls)
    assert client.store.get_json(storage.spec_key("est-dl"))["data_key"].startswith("data/")
    # WHEN the stack names that bucket (ExternalDataBucketName) THEN it is used in place
    client.__dict__["_stack_outputs"] = {"ExternalDataBucketName": EXTERNAL}
    calls.clear()
    client.submit_train(f"s3://{EXTERNAL}/plr.csv", model="kmeans", features=["x1", "x2"],
                        n_clusters=3, workers=2, job_id="train-src")  # fmt: skip
    assert all("Range" in p for op, p in calls if op == "GetObject")
    job = client.store.get_json(storage.spec_key("train-src"))
    assert job["data_source"]["bucket"] == EXTERNAL and job.get("data_key") is None
    # AND a column the job uses that is not in the header is refused before submission
    with pytest.raises(InvalidDataError, match=r"'x9' not in s3://fanfit-external-data/plr.csv"):
        client.submit_train(f"s3://{EXTERNAL}/plr.csv", model="kmeans", features=["x1", "x9"],
                            n_clusters=3, workers=2)  # fmt: skip


def test_train_init_reads_a_source_and_resume_keeps_its_data_object(client, make_plr_frame,
                                                                    monkeypatch):  # fmt: skip
    from fanfit.jobs.train.init import init_job

    # GIVEN a train job submitted with an .npz in the stack's bucket
    client.s3.put_object(Bucket=BUCKET, Key="in/plr.npz", Body=_npz(make_plr_frame(200)))
    client.submit_train(f"s3://{BUCKET}/in/plr.npz", model="kmeans", features=["x1", "x2"],
                        n_clusters=3, workers=2, job_id="train-npz")  # fmt: skip
    functions = {1769: "arn:aws:lambda:us-east-1:123456789012:function:large"}
    # WHEN TrainInit runs THEN its plan names the data object of the features
    init_job(client.store, client.records, "train-npz", storage.spec_key("train-npz"), functions,
             memory_mb=1769)  # fmt: skip
    plan = client.store.get_json(storage.plan_key("train-npz"))
    assert client.store.get_data(plan["data_key"])[0] == ["x1", "x2"] and plan["n_obs"] == 200
    # WHEN it runs again (resume) after the source was removed THEN it keeps the plan's data
    client.s3.delete_object(Bucket=BUCKET, Key="in/plr.npz")
    out = init_job(client.store, client.records, "train-npz", storage.spec_key("train-npz"),
                   functions)  # fmt: skip
    assert out["resumed"] is True


def test_the_client_does_not_import_pandas_until_it_reads_a_table(tmp_path):
    # GIVEN a fresh interpreter WHEN the client and its data module are imported THEN pandas is not
    # (the CLI's start-up does not pay for it); reading a table imports it
    code = (
        "import sys, fanfit.client, fanfit.client.data as d; print('pandas' in sys.modules); "
        "d.to_matrix(d.read_table(sys.argv[1]), ['a']); print('pandas' in sys.modules)"
    )
    path = tmp_path / "t.csv"
    path.write_text("a\n1\n")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.split() == ["False", "True"]


def _if_statements(statements: list[Any], condition: str) -> list[dict]:
    """The policy statements of a list that are guarded by ``Fn::If [condition, ...]``."""
    out = []
    for stmt in statements:
        if isinstance(stmt, dict) and "Fn::If" in stmt and stmt["Fn::If"][0] == condition:
            assert stmt["Fn::If"][2] == {"Ref": "AWS::NoValue"}
            out.append(stmt["Fn::If"][1])
    return out


def test_the_template_grants_the_external_bucket_only_when_named():
    from pathlib import Path

    from cfnlint.decode import decode

    # GIVEN the template
    template, matches = decode(str(Path(__file__).resolve().parents[2] / "template.yaml"))
    assert not matches
    parameter = template["Parameters"]["ExternalDataBucketName"]
    res = template["Resources"]
    # THEN the parameter defaults to none, and the functions read it from their environment
    assert parameter["Default"] == ""
    assert template["Conditions"]["HasExternalDataBucket"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "ExternalDataBucketName"}, ""]}]
    }
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["FANFIT_EXTERNAL_DATA_BUCKET"] == {"Ref": "ExternalDataBucketName"}
    want = [
        {"Fn::Sub": "arn:${AWS::Partition}:s3:::${ExternalDataBucketName}"},
        {"Fn::Sub": "arn:${AWS::Partition}:s3:::${ExternalDataBucketName}/*"},
    ]
    for function in ("PrepareFunction", "TrainInitFunction"):
        statements = [
            s for p in res[function]["Properties"]["Policies"] if isinstance(p, dict)
            for s in p.get("Statement", [])
        ]  # fmt: skip
        # ... Prepare and TrainInit read that bucket (by name, never "*") only when it is set
        (external,) = _if_statements(statements, "HasExternalDataBucket")
        assert "s3:GetObject" in external["Action"] and external["Resource"] == want
        # ... and write the data object of a source under data/ of the stack's bucket
        puts = [s for s in statements if s.get("Action") == "s3:PutObject"]
        assert {"Fn::Sub": "${DataBucket.Arn}/data/*"} in puts[0]["Resource"]
        assert all(s.get("Resource") != "*" for s in statements if "Fn::If" not in s)
    # ... and so does the client policy, for the header it reads
    client = res["ClientPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    (external,) = _if_statements(client, "HasExternalDataBucket")
    assert "s3:GetObject" in external["Action"] and external["Resource"] == want
    # AND the bucket is an output only when it is set
    assert template["Outputs"]["ExternalDataBucketName"]["Condition"] == "HasExternalDataBucket"
