"""An append-only, per-table journal of the local stack's DynamoDB on disk (no LocalStack import).

moto keeps DynamoDB in memory, so a stopped or killed local stack forgot every job record.
:mod:`fanfit_localstack.dynamodb` writes each table through to this journal, after the operation
succeeded and before its response leaves LocalStack, and puts it back at start-up; this module is
the file format, the write path and the compaction, usable (and tested) without LocalStack.

Layout (one file per table; DynamoDB table names are ``[a-zA-Z0-9_.-]{3,255}``, safe as names)::

    <dir>/<account id>/<region>/<table name>.jsonl

Each line is one JSON object, in the order the writes were applied:

- ``{"table": {...}}``: the table's ``CreateTable`` request (the first line; a table created again
  under the same name starts a new file);
- ``{"ttl": {...}}``: its ``TimeToLiveSpecification``;
- ``{"put": {...}}``: an item's whole state after a write (DynamoDB JSON, as moto holds it);
- ``{"del": {...}}``: the key of an item a write removed.

A line is written with one ``write(2)`` on an ``O_APPEND`` descriptor, so a process killed at any
point leaves whole lines, and at most a torn last one (skipped on load); ``fsync`` after every
line only with ``FANFIT_DYNAMODB_FSYNC=1`` (a killed process loses nothing without it; a machine
that loses power may lose the last writes). :func:`load` folds a file into its tables' latest
state and rewrites it compacted (atomically), so the journal grows only between two starts.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOG = logging.getLogger(__name__)

#: Environment variable naming the journal directory; unset, DynamoDB is not written through.
JOURNAL_DIR_ENV = "FANFIT_DYNAMODB_DIR"
#: Environment variable: comma-separated substrings of table names that are not written through.
SKIP_ENV = "FANFIT_DYNAMODB_SKIP"
#: Environment variable: ``1`` fsyncs the journal after every line.
FSYNC_ENV = "FANFIT_DYNAMODB_FSYNC"
#: Written into the journal directory once the restore at start-up is complete.
RESTORED_FILE = "restored.json"
SUFFIX = ".jsonl"


def journal_dir() -> Path | None:
    """The journal directory from :data:`JOURNAL_DIR_ENV`, or None when the journal is off."""
    value = os.environ.get(JOURNAL_DIR_ENV)
    return Path(value) if value else None


def journaled(table_name: str) -> bool:
    """Whether ``table_name`` is written through (it contains none of :data:`SKIP_ENV`'s parts)."""
    parts = [p.strip() for p in os.environ.get(SKIP_ENV, "").split(",") if p.strip()]
    return not any(part in table_name for part in parts)


def _default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _dumps(document: dict[str, Any]) -> bytes:
    return (json.dumps(document, separators=(",", ":"), default=_default) + "\n").encode()


def attribute_json(value: Any) -> dict[str, Any]:
    """DynamoDB JSON of a moto ``DynamoType`` (duck-typed: ``.type`` and ``.value``).

    The same as moto's ``Item.to_json()`` gives for one attribute, five to ten times faster (moto
    converts nested maps and lists through boto3's deserializer and back).
    """
    kind, inner = value.type, value.value
    if kind == "M":
        return {"M": {name: attribute_json(v) for name, v in inner.items()}}
    if kind == "L":
        return {"L": [attribute_json(v) for v in inner]}
    if isinstance(inner, bytes | bytearray):
        return {kind: base64.b64encode(inner).decode()}
    return {kind: inner}


def item_json(item: Any) -> dict[str, Any]:
    """DynamoDB JSON of a moto ``Item`` (its ``.attrs``): name -> :func:`attribute_json`."""
    return {name: attribute_json(value) for name, value in item.attrs.items()}


def key_attributes(create_request: dict[str, Any]) -> list[str]:
    """The key attribute names of a table (hash first) from its ``CreateTable`` request."""
    schema = sorted(create_request.get("KeySchema", []), key=lambda k: k.get("KeyType") != "HASH")
    return [k["AttributeName"] for k in schema]


def key_of(item: dict[str, Any], attributes: list[str]) -> str:
    """A string naming the item's key: the canonical JSON of its key attributes."""
    return json.dumps({a: item.get(a) for a in attributes}, sort_keys=True, default=_default)


@dataclass
class TableState:
    """One table as the journal holds it.

    Attributes
    ----------
    account_id, region, name : str
    create_request : dict
        Its ``CreateTable`` request.
    ttl : dict or None
        Its ``TimeToLiveSpecification``.
    items : dict of str to dict
        Item key (:func:`key_of`) -> the item (DynamoDB JSON), in the order first written.
    """

    account_id: str
    region: str
    name: str
    create_request: dict[str, Any]
    ttl: dict[str, Any] | None = None
    items: dict[str, dict[str, Any]] = field(default_factory=dict)


class Journal:
    """The write side: one append descriptor per table file, opened on first use.

    Parameters
    ----------
    root : path-like
        The journal directory.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.fsync = os.environ.get(FSYNC_ENV, "").lower() in ("1", "true", "yes", "on")
        self._fds: dict[Path, int] = {}
        self._lock = threading.Lock()

    def path(self, account_id: str, region: str, table: str) -> Path:
        """The file of ``table`` in ``account_id``/``region``."""
        return self.root / account_id / region / f"{table}{SUFFIX}"

    def _fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._fds[path] = fd
        return fd

    def _append(self, path: Path, lines: list[dict[str, Any]]) -> None:
        data = b"".join(_dumps(line) for line in lines)
        with self._lock:
            fd = self._fd(path)
            os.write(fd, data)
            if self.fsync:
                os.fsync(fd)

    def _close(self, path: Path) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def create_table(
        self, account_id: str, region: str, table: str, create_request: dict[str, Any]
    ) -> None:
        """Start the file of a new table with its ``CreateTable`` request (replacing any file of
        an earlier table of that name)."""
        path = self.path(account_id, region, table)
        with self._lock:
            self._close(path)
            _write_atomic(path, _dumps({"table": create_request}))

    def delete_table(self, account_id: str, region: str, table: str) -> None:
        """Remove the file of a deleted table."""
        path = self.path(account_id, region, table)
        with self._lock:
            self._close(path)
            path.unlink(missing_ok=True)

    def set_ttl(self, account_id: str, region: str, table: str, spec: dict[str, Any]) -> None:
        """Record the table's ``TimeToLiveSpecification``."""
        self._append(self.path(account_id, region, table), [{"ttl": spec}])

    def write_items(
        self,
        account_id: str,
        region: str,
        table: str,
        states: list[tuple[dict[str, Any], dict[str, Any] | None]],
    ) -> None:
        """Record the state of items after a write: ``(key, item)`` pairs, ``item`` None when the
        write removed it. A table without a file (created before the journal) is skipped."""
        path = self.path(account_id, region, table)
        if path not in self._fds and not path.exists():
            return
        lines = [{"put": item} if item is not None else {"del": key} for key, item in states]
        if lines:
            self._append(path, lines)

    def close(self) -> None:
        """Close every descriptor."""
        with self._lock:
            for path in list(self._fds):
                self._close(path)


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read_table(path: Path, account_id: str, region: str) -> tuple[TableState | None, int]:
    """Fold one table file into its latest state.

    Returns
    -------
    (TableState or None, int)
        The table (None when the file has no readable ``table`` line) and the number of lines
        skipped (torn or not a journal line).
    """
    state: TableState | None = None
    attributes: list[str] = []
    skipped = 0
    with open(path, "rb") as lines:
        for raw in lines:
            try:
                line = json.loads(raw)
            except ValueError:
                skipped += 1
                continue
            if not isinstance(line, dict):
                skipped += 1
            elif "table" in line:
                name = path.name[: -len(SUFFIX)]
                state = TableState(account_id, region, name, line["table"])
                attributes = key_attributes(line["table"])
            elif state is None:
                skipped += 1
            elif "ttl" in line:
                state.ttl = line["ttl"]
            elif "put" in line:
                state.items[key_of(line["put"], attributes)] = line["put"]
            elif "del" in line:
                state.items.pop(key_of(line["del"], attributes), None)
            else:
                skipped += 1
    return state, skipped


def compact(state: TableState, path: Path) -> None:
    """Rewrite ``path`` (atomically) as the shortest journal of ``state``."""
    lines = [{"table": state.create_request}]
    if state.ttl is not None:
        lines.append({"ttl": state.ttl})
    lines.extend({"put": item} for item in state.items.values())
    _write_atomic(path, b"".join(_dumps(line) for line in lines))


def load(root: Path) -> tuple[list[TableState], int]:
    """Every journaled table's latest state, each file compacted on the way.

    Returns
    -------
    (list of TableState, int)
        The tables, and the number of lines or files skipped (logged).
    """
    tables: list[TableState] = []
    skipped = 0
    for path in sorted(root.glob(f"*/*/*{SUFFIX}")):
        account_id, region = path.parent.parent.name, path.parent.name
        try:
            state, bad = read_table(path, account_id, region)
        except OSError as exc:
            LOG.warning("fanfit: skipping unreadable DynamoDB journal %s: %s", path, exc)
            skipped += 1
            continue
        if bad:
            LOG.warning("fanfit: skipped %d unreadable lines of %s", bad, path)
            skipped += bad
        if state is None:
            LOG.warning("fanfit: skipping %s: it records no CreateTable", path)
            skipped += 1
            continue
        compact(state, path)
        tables.append(state)
    for stray in root.glob("*/*/.*.tmp"):  # a compaction cut short
        with contextlib.suppress(OSError):
            stray.unlink()
    return tables, skipped
