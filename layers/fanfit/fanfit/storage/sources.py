"""Data used in place: a user's ``s3://bucket/key`` object read where it lies, without pandas.

A job may name its data by a *source* (bucket, key and the object's ETag, optionally its VersionId)
instead of an uploaded ``data/<sha256>.npz`` object. The client reads only the source's header
(:func:`read_source_header`: the column names, from a ranged GET of the first bytes) and the server
(Prepare, TrainInit) reads the whole object once (:func:`read_source`), keeps the job's columns and
writes them as the content-addressed data object, so every later step reads what it always read.

Supported formats, by the key's suffix (:data:`SOURCE_FORMATS`); numpy only, as the Lambda layer has
no pandas or pyarrow:

- ``.csv``: comma-separated, a header row of column names, then numbers only (``1``, ``-2.5e3``,
  ``nan``, ``inf``); UTF-8, an optional byte-order mark, ``"``-quoted fields. An empty field or a word
  such as ``NA`` is refused by name (pandas would read it as NaN).
- ``.npz``: fanfit's own data layout: ``values`` (n_obs, n_cols) numeric and ``columns`` (n_cols,) str
  (:func:`fanfit.storage.encode_data` writes it).
- ``.npy``: a one-dimensional structured array whose fields are the columns (bool, integer or
  float fields), as ``np.save(path, frame.to_records(index=False))`` writes it.

Anything else (``.parquet``, ``.dta``, a CSV with text columns) is read by the client with pandas and
uploaded, as before.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import numpy as np

from fanfit.errors import DataSourceChangedError, InvalidDataError

__all__ = [
    "HEADER_BYTES",
    "SOURCE_FORMATS",
    "RangedObject",
    "S3Object",
    "SourceHeader",
    "parse_s3_uri",
    "read_source",
    "read_source_header",
    "source_format",
    "source_size",
]

#: Key suffix -> format of a data source read in place.
SOURCE_FORMATS = {".csv": "csv", ".npz": "npz", ".npy": "npy"}

#: Bytes of a CSV's first ranged GET (the header row must end within them).
HEADER_BYTES = 65_536

_NOT_FOUND = ("404", "NoSuchKey", "NotFound", "NoSuchVersion")
_CHANGED = ("412", "PreconditionFailed")


@dataclass(frozen=True)
class S3Object:
    """One version of one S3 object: ``bucket``, ``key``, its ``etag`` (quoted, as S3 returns it)
    and ``version_id`` (None in a bucket without versioning)."""

    bucket: str
    key: str
    etag: str
    version_id: str | None = None

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def get_args(self) -> dict[str, str]:
        """``Bucket``, ``Key``, ``IfMatch`` (and ``VersionId``) of a GET or HEAD of this version."""
        args = {"Bucket": self.bucket, "Key": self.key, "IfMatch": self.etag}
        if self.version_id:
            args["VersionId"] = self.version_id
        return args


@dataclass(frozen=True)
class SourceHeader:
    """What the client reads of a source before submitting: its ``columns``, its version (``obj``:
    the ETag and VersionId the server must find) and its size, bytes."""

    obj: S3Object
    columns: list[str]
    size: int


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key``.

    Raises
    ------
    InvalidDataError
        Not an ``s3://`` URI with a bucket and a key.
    """
    parsed = urlparse(str(uri))
    key = parsed.path.lstrip("/")
    if parsed.scheme != "s3" or not parsed.netloc or not key:
        raise InvalidDataError(f"{uri!r} is not an s3://bucket/key URI")
    return parsed.netloc, key


def source_format(key: str) -> str | None:
    """``"csv"``, ``"npz"`` or ``"npy"`` from ``key``'s suffix (case-insensitive); None for a format
    that is not read in place."""
    dot = key.rfind(".")
    return SOURCE_FORMATS.get(key[dot:].lower()) if dot >= 0 else None


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _s3_error(exc: Exception, obj: S3Object) -> InvalidDataError:
    """The named error for a failed GET or HEAD of ``obj``."""
    code = _code(exc)
    if code in _CHANGED:
        return DataSourceChangedError(
            f"data source {obj.uri} changed since the job was submitted (its ETag is no longer "
            f"{obj.etag}); submit the job again to use the new object"
        )
    if code in _NOT_FOUND:
        if obj.etag:
            return DataSourceChangedError(
                f"data source {obj.uri} (ETag {obj.etag}"
                + (f", version {obj.version_id}" if obj.version_id else "")
                + ") was removed since the job was submitted"
            )
        return InvalidDataError(f"data source {obj.uri} does not exist")
    return InvalidDataError(
        f"cannot read data source {obj.uri}: {code or type(exc).__name__}: {exc}"
    )


class RangedObject(io.RawIOBase):
    """A seekable, read-only view of one S3 object that fetches byte ranges as they are read.

    The object's tail (``block`` bytes) is fetched first when ``tail_first``, so a zip's central
    directory and its last member (the ``columns`` of a data ``.npz``, the ``__stats__`` of a
    shard's predictions) usually cost one ranged GET, whatever the size of the arrays before them.
    :mod:`zipfile` and :mod:`numpy.lib.format` read an ``.npz``'s directory or an ``.npy``'s header
    through it without the rest.

    Parameters
    ----------
    s3 : botocore S3 client
    bucket, key : str
    size : int
        The object's size, bytes.
    block : int
        Bytes of the smallest ranged GET.
    tail_first : bool
        Fetch the last ``block`` bytes at once.
    if_match, version_id : str, optional
        Every GET asks for this ETag (``IfMatch``: a changed object fails with 412) and version.

    Attributes
    ----------
    requests : int
        Ranged GETs made so far.
    """

    def __init__(
        self, s3: Any, bucket: str, key: str, size: int, block: int = 1 << 16, *,
        tail_first: bool = True, if_match: str | None = None, version_id: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self._s3, self._bucket, self._key = s3, bucket, key
        self._size, self._block, self._pos = int(size), int(block), 0
        self._args: dict[str, str] = {"Bucket": bucket, "Key": key}
        if if_match:
            self._args["IfMatch"] = if_match
        if version_id:
            self._args["VersionId"] = version_id
        self._chunks: list[tuple[int, bytes]] = []
        self.requests = 0
        if self._size > 0 and tail_first:
            self._fetch(max(0, self._size - self._block), self._size)

    def _fetch(self, start: int, end: int) -> None:
        body = self._s3.get_object(**self._args, Range=f"bytes={start}-{end - 1}")
        self._chunks.append((start, body["Body"].read()))
        self.requests += 1

    def _slice(self, start: int, end: int) -> bytes:
        for _ in range(2):
            for offset, body in self._chunks:
                if offset <= start and end <= offset + len(body):
                    return body[start - offset : end - offset]
            self._fetch(start, min(self._size, max(end, start + self._block)))
        raise OSError(f"cannot read bytes {start}-{end} of s3://{self._bucket}/{self._key}")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self._size - self._pos)
        if n <= 0:
            return 0
        buffer[:n] = self._slice(self._pos, self._pos + n)
        self._pos += n
        return n


def _csv_columns(line: bytes, uri: str) -> list[str]:
    try:
        text = line.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise InvalidDataError(f"the header row of {uri} is not UTF-8: {exc}") from exc
    names = next(csv.reader([text]), [])
    if not names or names == [""]:
        raise InvalidDataError(f"{uri} has no header row of column names (its first line is empty)")
    return names


def _npz_columns(npz: Any, uri: str) -> list[str]:
    if "columns" not in npz.files or "values" not in npz.files:
        raise InvalidDataError(
            f"{uri} must hold arrays 'values' (n_obs, n_cols) and 'columns' (n_cols,) of str; "
            f"it holds {', '.join(npz.files) or 'none'}"
        )
    columns = npz["columns"]
    if columns.ndim != 1 or columns.dtype.kind not in "US":
        raise InvalidDataError(
            f"'columns' of {uri} must be a 1-d array of str, got {columns.dtype}"
        )
    return [str(c) for c in columns]


def _npy_columns(dtype: np.dtype, shape: tuple[int, ...], uri: str) -> list[str]:
    if dtype.names is None or len(shape) != 1:
        raise InvalidDataError(
            f"{uri} must hold a 1-d structured array whose fields are the columns "
            f"(np.save(path, frame.to_records(index=False))); it holds shape {shape}, dtype {dtype}"
        )
    return list(dtype.names)


def read_source_header(s3: Any, uri: str) -> SourceHeader:
    """Read a source's column names and version without reading its data (the client's check).

    A ``.csv``: one ranged GET of the first :data:`HEADER_BYTES` bytes. An ``.npz``/``.npy``: a HEAD
    and ranged GETs of its zip directory and ``columns`` member, or of its ``.npy`` header.

    Parameters
    ----------
    s3 : botocore S3 client
    uri : str
        ``s3://bucket/key`` with a suffix of :data:`SOURCE_FORMATS`.

    Returns
    -------
    SourceHeader
        The columns, the ETag (and VersionId) read, and the object's size, bytes.

    Raises
    ------
    InvalidDataError
        The object is missing or unreadable, of a format not read in place, or has no header row
        (a CSV whose first line is longer than :data:`HEADER_BYTES`, an ``.npz`` without ``values``
        and ``columns``, an ``.npy`` that is not a structured array).
    """
    bucket, key = parse_s3_uri(uri)
    fmt = source_format(key)
    if fmt is None:
        raise InvalidDataError(
            f"{uri} is not read in place: only {', '.join(SOURCE_FORMATS)} are (fanfit.storage.sources)"
        )
    probe = S3Object(bucket, key, "")
    try:
        if fmt == "csv":
            got = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{HEADER_BYTES - 1}")
        else:
            got = s3.head_object(Bucket=bucket, Key=key)
    except Exception as exc:  # botocore raises per-service exception classes
        if _code(exc) in ("416", "InvalidRange"):
            raise InvalidDataError(f"{uri} is empty: it has no header row") from exc
        raise _s3_error(exc, probe) from exc
    obj = S3Object(bucket, key, got["ETag"], got.get("VersionId"))
    if fmt == "csv":
        head = got["Body"].read()
        total = str(got.get("ContentRange", "")).rpartition("/")[2]
        size = int(total) if total.isdigit() else len(head)
        end = head.find(b"\n")
        if end < 0 and size > len(head):
            raise InvalidDataError(
                f"the header row of {uri} is longer than {HEADER_BYTES:,} bytes (or the file has "
                "no line breaks)"
            )
        return SourceHeader(obj, _csv_columns(head[: end if end >= 0 else len(head)], uri), size)
    size = int(got["ContentLength"])
    try:
        # an .npz's directory and last member (its columns) are at its end, an .npy's header first
        raw = RangedObject(s3, bucket, key, size, tail_first=fmt == "npz", if_match=obj.etag,
                           version_id=obj.version_id)  # fmt: skip
        if fmt == "npz":
            with np.load(raw, allow_pickle=False) as npz:
                return SourceHeader(obj, _npz_columns(npz, uri), size)
        version = np.lib.format.read_magic(raw)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(raw)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(raw)
        return SourceHeader(obj, _npy_columns(dtype, shape, uri), size)
    except InvalidDataError:
        raise
    except (ValueError, OSError, KeyError, EOFError) as exc:
        raise InvalidDataError(f"cannot read the header of {uri} as .{fmt}: {exc}") from exc
    except Exception as exc:  # botocore raises per-service exception classes
        if _code(exc):
            raise _s3_error(exc, obj) from exc
        raise


def source_size(s3: Any, obj: S3Object) -> int:
    """Size of the submitted version of ``obj``, bytes (a HEAD with ``IfMatch``).

    Raises
    ------
    DataSourceChangedError
        The object changed or was removed since it was submitted.
    InvalidDataError
        Another S3 error (AccessDenied, ...), with its code.
    """
    try:
        return int(s3.head_object(**obj.get_args())["ContentLength"])
    except Exception as exc:  # botocore raises per-service exception classes
        raise _s3_error(exc, obj) from exc


def _select(names: list[str], columns: Sequence[str], uri: str) -> list[int]:
    """Indices of ``columns`` in ``names``; the message of a missing one lists what there is."""
    missing = [c for c in columns if c not in names]
    if missing:
        shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
        raise InvalidDataError(
            f"column(s) {', '.join(map(repr, missing))} not in {uri}; its columns are: {shown}"
        )
    twice = sorted({c for c in columns if names.count(c) > 1})
    if twice:
        raise InvalidDataError(f"column(s) {', '.join(map(repr, twice))} appear twice in {uri}")
    return [names.index(c) for c in columns]


def _csv_problem(text: str, names: list[str], idx: list[int], uri: str) -> str:
    """Why ``np.loadtxt`` refused a CSV: the first row with a wrong field count or a job column
    that is not a number, by line and column."""
    rows = csv.reader(io.StringIO(text))
    next(rows, None)
    for line, row in enumerate(rows, start=2):
        if not row:
            continue
        if len(row) != len(names):
            return f"line {line} of {uri} has {len(row)} fields; its header has {len(names)}"
        for j in idx:
            try:
                float(row[j])
            except ValueError:
                return (
                    f"column {names[j]!r} of {uri} is not numeric: line {line} holds {row[j]!r} "
                    "(data read in place must be numbers only, an empty field or 'NA' included; "
                    "encode it as numbers, or use a local file)"
                )
    return f"cannot parse {uri} as numeric CSV"


def _read_csv(body: bytes, columns: Sequence[str], uri: str) -> np.ndarray:
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidDataError(f"{uri} is not UTF-8 text: {exc}") from exc
    del body
    end = text.find("\n")
    names = _csv_columns(text[: end if end >= 0 else len(text)].encode(), uri)
    idx = _select(names, columns, uri)
    try:
        values = np.loadtxt(
            io.StringIO(text), delimiter=",", skiprows=1, usecols=idx, dtype=np.float64,
            ndmin=2, comments=None, quotechar='"',
        )  # fmt: skip
    except ValueError as exc:
        raise InvalidDataError(_csv_problem(text, names, idx, uri)) from exc
    return values.reshape(-1, len(idx))


def _read_npz(body: bytes, columns: Sequence[str], uri: str) -> np.ndarray:
    with np.load(io.BytesIO(body), allow_pickle=False) as npz:
        names = _npz_columns(npz, uri)
        idx = _select(names, columns, uri)
        values = npz["values"]
    if values.ndim != 2 or values.shape[1] != len(names) or values.dtype.kind not in "biuf":
        raise InvalidDataError(
            f"'values' of {uri} must be a numeric (n_obs, {len(names)}) array, got shape "
            f"{values.shape}, dtype {values.dtype}"
        )
    return np.asarray(values[:, idx], dtype=np.float64)


def _read_npy(body: bytes, columns: Sequence[str], uri: str) -> np.ndarray:
    records = np.load(io.BytesIO(body), allow_pickle=False)
    names = _npy_columns(records.dtype, records.shape, uri)
    idx = _select(names, columns, uri)
    out = np.empty((records.shape[0], len(idx)), dtype=np.float64)
    for j, i in enumerate(idx):
        field = records[names[i]]
        if field.dtype.kind not in "biuf" or field.ndim != 1:
            raise InvalidDataError(
                f"column {names[i]!r} of {uri} is not numeric (dtype {field.dtype}); encode it as "
                "numbers first"
            )
        out[:, j] = field
    return out


def read_source(s3: Any, obj: S3Object, columns: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Read the submitted version of a source and keep ``columns`` (the server's read).

    Parameters
    ----------
    s3 : botocore S3 client
    obj : S3Object
        The source, with the ETag (and VersionId) the client submitted: the GET sends ``IfMatch``.
    columns : sequence of str
        The columns the job uses, in the job's order.

    Returns
    -------
    (columns, values) : list of str, ndarray of shape (n_obs, n_cols), float64

    Raises
    ------
    DataSourceChangedError
        The object changed or was removed since it was submitted.
    InvalidDataError
        A column is missing (the message lists those there are), a value is not a number (named
        by column and line), or the object is not of its suffix's format.
    """
    fmt = source_format(obj.key)
    if fmt is None:
        raise InvalidDataError(
            f"{obj.uri} is not read in place: only {', '.join(SOURCE_FORMATS)} are"
        )
    try:
        body = s3.get_object(**obj.get_args())["Body"].read()
    except Exception as exc:  # botocore raises per-service exception classes
        raise _s3_error(exc, obj) from exc
    reader = {"csv": _read_csv, "npz": _read_npz, "npy": _read_npy}[fmt]
    try:
        values = reader(body, columns, obj.uri)
    except InvalidDataError:
        raise
    except (ValueError, OSError, KeyError, EOFError) as exc:
        raise InvalidDataError(f"cannot read {obj.uri} as .{fmt}: {exc}") from exc
    return list(columns), values
