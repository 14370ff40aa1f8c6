"""S3 objects of a job: JSON, arrays (``.npz``/``.npy``, never unpickled) and the content-addressed data.

Everything a step writes goes to a deterministic key (:mod:`fanfit.storage.keys`), so a retried step
overwrites its own object with the same content and nothing is counted twice.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Any

import numpy as np

from fanfit.errors import InvalidDataError, JobNotFoundError
from fanfit.storage.keys import data_key


def encode_data(columns: list[str], values: np.ndarray) -> tuple[str, bytes]:
    """Serialise a data matrix for upload.

    Parameters
    ----------
    columns : list of str, length n_cols
    values : ndarray of shape (n_obs, n_cols), float64

    Returns
    -------
    key : str
        The content-addressed key (``data/<sha256>.npz``).
    body : bytes
        The ``.npz`` bytes.
    """
    buf = io.BytesIO()
    np.savez(
        buf,
        values=np.ascontiguousarray(values, dtype=np.float64),
        columns=np.array(columns, dtype=str),
    )
    body = buf.getvalue()
    return data_key(hashlib.sha256(body).hexdigest()), body


def decode_data(body: bytes) -> tuple[list[str], np.ndarray]:
    """Inverse of :func:`encode_data`: returns ``(columns, values)``.

    Raises
    ------
    InvalidDataError
        If the object is not a fanfit data object.
    """
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as npz:
            return [str(c) for c in npz["columns"]], np.asarray(npz["values"], dtype=np.float64)
    except (ValueError, KeyError, OSError) as exc:
        raise InvalidDataError(
            f"not a fanfit data object (an .npz with 'values' and 'columns'): {exc}"
        ) from exc


class JobStore:
    """Reads and writes the objects of jobs in one S3 bucket.

    Parameters
    ----------
    bucket : str
        The stack's data bucket.
    s3 : botocore client, optional
        An S3 client; ``boto3.client("s3")`` when omitted (it honours ``AWS_ENDPOINT_URL``).
    """

    def __init__(self, bucket: str, s3: Any = None) -> None:
        if s3 is None:
            import boto3

            s3 = boto3.client("s3")
        self.bucket = bucket
        self.s3 = s3

    def put_bytes(
        self, key: str, body: bytes, content_type: str = "application/octet-stream"
    ) -> str:
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=content_type)
        return key

    def get_bytes(self, key: str) -> bytes:
        """The object's bytes.

        Raises
        ------
        JobNotFoundError
            The object does not exist (a job's spec, plan or schedule: no such job).
        InvalidDataError
            A data object (``data/...``) does not exist.
        """
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
            if key.startswith("data/"):
                raise InvalidDataError(
                    f"data object {key} does not exist in bucket {self.bucket}; upload the data "
                    "again (the client does it on submit)"
                ) from exc
            job = key.split("/")[1] if key.startswith("jobs/") and key.count("/") >= 2 else None
            where = f"job {job!r} has no object {key}" if job else f"no object {key}"
            raise JobNotFoundError(
                f"{where} in bucket {self.bucket}: no such job on this stack, or its objects "
                "were removed"
            ) from exc

    def etag(self, key: str) -> str | None:
        """The object's ETag (one HEAD), None when there is no object at ``key``."""
        try:
            return str(self.s3.head_object(Bucket=self.bucket, Key=key)["ETag"])
        except self.s3.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise

    def exists(self, key: str) -> bool:
        return self.etag(key) is not None

    def put_json(self, key: str, obj: Any) -> str:
        return self.put_bytes(key, json.dumps(obj, allow_nan=False).encode(), "application/json")

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, sorted."""
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def list_prefixes(self, prefix: str) -> list[str]:
        """The "folders" one level under ``prefix`` (``jobs/`` -> ``['jobs/a/', 'jobs/b/']``), sorted."""
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix, Delimiter="/"
        )
        return sorted(p["Prefix"] for page in pages for p in page.get("CommonPrefixes", []))

    def delete_keys(self, keys: list[str], *, all_versions: bool = True) -> int:
        """Remove objects, at most 1,000 per ``DeleteObjects`` call.

        Parameters
        ----------
        keys : list of str
            Keys to remove (a key with no object is ignored).
        all_versions : bool
            In a versioned bucket, also remove every earlier version and delete marker of the keys
            (``ListObjectVersions``), so that nothing of them is left or billed; in a bucket
            without versioning this removes the objects alone.

        Returns
        -------
        int
            Object versions (or objects) removed.

        Raises
        ------
        botocore.exceptions.ClientError
            A removal was refused (e.g. AccessDenied); the message names the first key.
        """
        wanted = set(keys)
        targets: list[dict[str, str]] = [{"Key": k} for k in sorted(wanted)]
        if all_versions and wanted:
            versions: list[dict[str, str]] = []
            pages = self.s3.get_paginator("list_object_versions").paginate(
                Bucket=self.bucket, Prefix=os.path.commonprefix(sorted(wanted))
            )
            for page in pages:
                for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                    if entry["Key"] in wanted and entry.get("VersionId"):
                        versions.append({"Key": entry["Key"], "VersionId": entry["VersionId"]})
            if any(v["VersionId"] != "null" for v in versions):
                targets = versions  # a versioned bucket: every version (a pre-versioning one too)
        removed = 0
        for start in range(0, len(targets), 1000):
            chunk = targets[start : start + 1000]
            got = self.s3.delete_objects(
                Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True}
            )
            failed = got.get("Errors", [])
            if failed:
                first = failed[0]
                raise self.s3.exceptions.ClientError(
                    {"Error": {"Code": first.get("Code", "DeleteFailed"),
                               "Message": f"{first.get('Key')}: {first.get('Message', '')}"}},
                    "DeleteObjects",
                )  # fmt: skip
            removed += len(chunk)
        return removed

    def put_arrays(self, key: str, arrays: dict[str, np.ndarray]) -> str:
        """Write named arrays as one ``.npz`` object."""
        buf = io.BytesIO()
        np.savez(buf, allow_pickle=False, **arrays)
        return self.put_bytes(key, buf.getvalue())

    def get_arrays(self, key: str) -> dict[str, np.ndarray]:
        """Read an ``.npz`` object written by :meth:`put_arrays` (never unpickles)."""
        with np.load(io.BytesIO(self.get_bytes(key)), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}

    def put_array(self, key: str, array: np.ndarray) -> str:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        return self.put_bytes(key, buf.getvalue())

    def get_array(self, key: str) -> np.ndarray:
        return np.load(io.BytesIO(self.get_bytes(key)), allow_pickle=False)

    def put_data(self, columns: list[str], values: np.ndarray) -> str:
        """Upload a data matrix once, keyed by its content; returns the key.

        An object already there is copied onto itself (in S3, no upload): the bucket's lifecycle
        rule (template parameter ``JobRetentionDays``) expires ``data/`` by age, so the age of data
        a new job reuses must count from that job.
        """
        key, body = encode_data(columns, values)
        if not self.exists(key):
            self.put_bytes(key, body)
        else:
            self.s3.copy_object(
                Bucket=self.bucket,
                Key=key,
                CopySource={"Bucket": self.bucket, "Key": key},
                MetadataDirective="REPLACE",
                ContentType="application/octet-stream",
            )
        return key

    def get_data(self, key: str) -> tuple[list[str], np.ndarray]:
        """Read a data object: ``(columns, values)`` with values of shape (n_obs, n_cols)."""
        return decode_data(self.get_bytes(key))
