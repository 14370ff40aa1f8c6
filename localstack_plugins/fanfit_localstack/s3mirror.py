"""A write-through disk mirror of LocalStack's S3, so the buckets outlive a killed local stack.

LocalStack community keeps S3 in memory (its ``PERSISTENCE=1`` snapshots are not part of the
community build): a LocalStack that is killed, or stopped, forgets every object. fanfit treats S3 as
the source of truth of a job (a shard is done when its predictions object exists; ``fanfit resume``
rebuilds a job from S3 alone), as it is on AWS, where S3 does not forget. This module gives the local
stack that property:

- **Write-through.** ``localstack.hooks.on_infra_start`` patches the S3 provider's mutating
  operations (``CreateBucket``, ``DeleteBucket``, ``PutObject``, ``CopyObject``,
  ``CompleteMultipartUpload``, ``DeleteObject``, ``DeleteObjects``). After the operation succeeds,
  and before its response leaves LocalStack, the key's current object (its latest version, or its
  absence) is written to ``$FANFIT_S3_MIRROR_DIR`` with an atomic ``os.replace``. Buckets whose
  names start with a prefix in ``$FANFIT_S3_MIRROR_SKIP`` (comma-separated) are left out. A client that got
  a response therefore finds its write on disk, whenever the process dies afterwards.
- **Restore.** ``localstack.hooks.on_infra_ready`` puts every mirrored bucket and object back
  through LocalStack's own S3 API (the internal client) and then writes ``restored.json`` (the
  LocalStack process id and the counts) into the mirror directory. :class:`fanfit.local.LocalStack`
  waits for that file, so nothing (a deploy, a job) sees a half-restored S3.

Layout of the mirror (keys are hashed, so no key can name a path outside it)::

    <dir>/<bucket>/bucket.json                   {"name", "region", "account_id"}
    <dir>/<bucket>/objects/<sha256(key)>         one JSON header line, then the object's bytes

What comes back: each key's latest content, content type and encoding, cache control,
disposition, language and user metadata, so a single-part object has the same ETag (the MD5 of its
bytes). Not kept: older versions, delete markers, LastModified (restore time), the ETag of a
multipart upload (it becomes the MD5 of the whole object), bucket configuration (the CloudFormation
stack that owns the bucket applies it again when it is redeployed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from localstack.runtime import hooks

LOG = logging.getLogger(__name__)

#: Environment variable naming the mirror directory; unset, the mirror is off.
MIRROR_DIR_ENV = "FANFIT_S3_MIRROR_DIR"
#: Environment variable: comma-separated bucket-name prefixes that are not mirrored (buckets every
#: deploy fills again: LocalStack's own Lambda code bucket, the deploy's artifact buckets).
SKIP_ENV = "FANFIT_S3_MIRROR_SKIP"
#: Written into the mirror directory once the restore is complete.
RESTORED_FILE = "restored.json"
#: System metadata kept with an object and passed back to PutObject on restore.
SYSTEM_FIELDS = (
    "ContentType",
    "ContentEncoding",
    "ContentLanguage",
    "ContentDisposition",
    "CacheControl",
)
_CHUNK = 1 << 20

_applied = False
_apply_lock = threading.Lock()
_key_locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
_key_locks_guard = threading.Lock()


def mirror_dir() -> Path | None:
    """The mirror directory from :data:`MIRROR_DIR_ENV`, or None when the mirror is off."""
    value = os.environ.get(MIRROR_DIR_ENV)
    return Path(value) if value else None


def mirrored(bucket: str) -> bool:
    """Whether ``bucket`` is mirrored (its name starts with none of :data:`SKIP_ENV`'s prefixes)."""
    prefixes = [p.strip() for p in os.environ.get(SKIP_ENV, "").split(",") if p.strip()]
    return not bucket.startswith(tuple(prefixes))


def object_path(root: Path, bucket: str, key: str) -> Path:
    """Where ``key`` of ``bucket`` is mirrored: ``<root>/<bucket>/objects/<sha256(key)>``."""
    return root / bucket / "objects" / hashlib.sha256(key.encode()).hexdigest()


def _key_lock(bucket: str, key: str) -> threading.Lock:
    with _key_locks_guard:
        return _key_locks[(bucket, key)]


def _write_atomic(path: Path, chunks: Any) -> None:
    """Write ``chunks`` (bytes) to ``path`` through a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def write_bucket(root: Path, name: str, region: str, account_id: str) -> None:
    """Record bucket ``name`` (so an empty bucket comes back too)."""
    body = json.dumps({"name": name, "region": region, "account_id": account_id}).encode()
    _write_atomic(root / name / "bucket.json", [body])


def _parse_header(line: bytes) -> dict[str, Any] | None:
    """The header of a mirrored object (its first line), or None when it is not one."""
    try:
        header = json.loads(line)
    except ValueError:
        return None
    if not isinstance(header, dict) or not isinstance(header.get("key"), str):
        return None
    return header


def sync_key(provider: Any, context: Any, bucket: str, key: str) -> None:
    """Make the mirror of ``bucket``/``key`` equal to what S3 now holds there.

    Reads the key's current object from the provider's store (under a per-key lock, so the last
    sync to finish wrote the latest state) and writes it, or removes the mirror entry when the key
    is gone or its latest version is a delete marker.
    """
    root = mirror_dir()
    if root is None or not mirrored(bucket):
        return
    from localstack.services.s3.models import S3DeleteMarker

    path = object_path(root, bucket, key)
    with _key_lock(bucket, key):
        try:
            _store, s3_bucket = provider._get_cross_account_bucket(context, bucket)
            s3_object = s3_bucket.objects.get(key)
        except Exception:  # the bucket is gone
            s3_object = None
        if s3_object is None or isinstance(s3_object, S3DeleteMarker):
            path.unlink(missing_ok=True)
            return
        header = {
            "key": key,
            "etag": s3_object.etag,
            "size": s3_object.size,
            "user_metadata": dict(s3_object.user_metadata or {}),
            "system_metadata": {
                k: v for k, v in (s3_object.system_metadata or {}).items() if k in SYSTEM_FIELDS
            },
        }
        if _header_of(path) == header:  # unchanged (a restore putting it back, a same-bytes put)
            return
        stored = provider._storage_backend.open(bucket, s3_object, mode="r")
        try:
            _write_atomic(path, _with_header(header, stored))
        finally:
            stored.close()


def _header_of(path: Path) -> dict[str, Any] | None:
    """The header line of the mirrored object at ``path``, or None."""
    try:
        with open(path, "rb") as f:
            return _parse_header(f.readline())
    except OSError:
        return None


def _with_header(header: dict[str, Any], stored: Any) -> Any:
    yield json.dumps(header).encode() + b"\n"
    while chunk := stored.read(_CHUNK):
        yield chunk


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    """Argument ``name`` of a provider method called positionally or with keywords."""
    return kwargs[name] if name in kwargs else args[index]


def _bucket_synced(provider: Any, context: Any, bucket: str) -> None:
    root = mirror_dir()
    if root is None or not mirrored(bucket):
        return
    try:
        _store, s3_bucket = provider._get_cross_account_bucket(context, bucket)
    except Exception:
        return
    write_bucket(root, bucket, s3_bucket.bucket_region, s3_bucket.bucket_account_id)


def _bucket_deleted(bucket: str) -> None:
    root = mirror_dir()
    if root is None:
        return
    target = root / bucket
    if target.is_dir():
        for child in sorted(target.rglob("*"), reverse=True):
            child.unlink() if not child.is_dir() else child.rmdir()
        target.rmdir()


@hooks.on_infra_start(should_load=lambda: mirror_dir() is not None)
def mirror_s3_writes() -> None:
    """Patch the S3 provider's mutating operations to write through to the mirror."""
    global _applied
    with _apply_lock:
        if _applied:
            return
        _applied = True
    from localstack.services.s3.provider import S3Provider
    from localstack.utils.patch import patch

    # Handlers with a request shape (``expand=False``) get ``(context, request)``; expanded ones are
    # called with keyword arguments (``context=..., bucket=..., key=...``) by LocalStack's dispatcher.
    @patch(S3Provider.create_bucket)
    def create_bucket(fn: Any, self: Any, context: Any, request: Any) -> Any:
        result = fn(self, context, request)
        _bucket_synced(self, context, request["Bucket"])
        return result

    @patch(S3Provider.delete_bucket)
    def delete_bucket(fn: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        result = fn(self, *args, **kwargs)
        _bucket_deleted(_arg(args, kwargs, 1, "bucket"))
        return result

    def _request_key(fn: Any, self: Any, context: Any, request: Any) -> Any:
        result = fn(self, context, request)
        sync_key(self, context, request["Bucket"], request["Key"])
        return result

    patch(S3Provider.put_object)(_request_key)
    patch(S3Provider.copy_object)(_request_key)

    def _expanded_key(fn: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        result = fn(self, *args, **kwargs)
        context = _arg(args, kwargs, 0, "context")
        sync_key(self, context, _arg(args, kwargs, 1, "bucket"), _arg(args, kwargs, 2, "key"))
        return result

    patch(S3Provider.complete_multipart_upload)(_expanded_key)
    patch(S3Provider.delete_object)(_expanded_key)

    @patch(S3Provider.delete_objects)
    def delete_objects(fn: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
        result = fn(self, *args, **kwargs)
        context, bucket = _arg(args, kwargs, 0, "context"), _arg(args, kwargs, 1, "bucket")
        for item in (_arg(args, kwargs, 2, "delete") or {}).get("Objects", []):
            sync_key(self, context, bucket, item["Key"])
        return result

    LOG.info("fanfit: S3 writes are mirrored to %s", mirror_dir())


def restore(root: Path) -> dict[str, Any]:
    """Put every mirrored bucket and object back into LocalStack's S3; return the counts.

    A file that is not a mirrored object (a torn temporary file, something else) is skipped and
    logged; it never stops the restore.
    """
    from localstack.aws.connect import connect_to

    started = time.monotonic()
    buckets = objects = skipped = 0
    for meta in sorted(root.glob("*/bucket.json")):
        try:
            info = json.loads(meta.read_text())
            name, region, account = info["name"], info["region"], info["account_id"]
        except (OSError, ValueError, KeyError, TypeError):
            LOG.warning("fanfit: skipping unreadable bucket record %s", meta)
            skipped += 1
            continue
        # a 12-digit access key id is the account LocalStack files the request under
        s3 = connect_to(aws_access_key_id=account, region_name=region).s3
        params: dict[str, Any] = {"Bucket": name}
        if region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": region}
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(**params)
        buckets += 1
        for path in sorted((meta.parent / "objects").glob("*")):
            if path.name.startswith("."):
                continue
            try:
                stream = open(path, "rb")  # noqa: SIM115 - closed below, after the upload
            except OSError:
                LOG.warning("fanfit: skipping unreadable mirrored object %s", path)
                skipped += 1
                continue
            with stream:
                header = _parse_header(stream.readline())
                if header is None:
                    LOG.warning("fanfit: skipping %s: not a mirrored S3 object", path)
                    skipped += 1
                    continue
                extra = {
                    k: v for k, v in header.get("system_metadata", {}).items() if k in SYSTEM_FIELDS
                }
                # the rest of the file is the object's bytes (read whole: botocore checksums a
                # stream from its start, which here would be the header)
                s3.put_object(
                    Bucket=name,
                    Key=header["key"],
                    Body=stream.read(),
                    Metadata=header.get("user_metadata") or {},
                    **extra,
                )
            objects += 1
    return {
        "pid": os.getpid(),
        "buckets": buckets,
        "objects": objects,
        "skipped": skipped,
        "seconds": round(time.monotonic() - started, 3),
    }


@hooks.on_infra_ready(should_load=lambda: mirror_dir() is not None)
def restore_mirror() -> None:
    """Restore the mirror into S3 at start-up, then write :data:`RESTORED_FILE`."""
    root = mirror_dir()
    if root is None:
        return
    root.mkdir(parents=True, exist_ok=True)
    (root / RESTORED_FILE).unlink(missing_ok=True)
    try:
        counts = restore(root)
    except Exception as exc:  # recorded for the waiting client, which names it
        LOG.exception("fanfit: restoring S3 from %s failed", root)
        counts = {"pid": os.getpid(), "error": f"{type(exc).__name__}: {exc}"}
    _write_atomic(root / RESTORED_FILE, [json.dumps(counts).encode()])
    LOG.info("fanfit: S3 restored from %s: %s", root, counts)
