"""A DynamoDB provider for LocalStack backed by moto, its tables written through to disk.

LocalStack's own DynamoDB provider forwards to DynamoDB Local, which needs Java and a download from
the internet. This provider implements no operation itself: LocalStack's
:class:`~localstack.services.moto.MotoFallbackDispatcher` sends every operation to moto's DynamoDB
backend (LocalStack's ``moto-ext``), as LocalStack does for its other moto-backed services (EC2,
IAM, ...). Selected with ``PROVIDER_OVERRIDE_DYNAMODB=moto``.

moto keeps tables in memory. With ``$FANFIT_DYNAMODB_DIR`` set (the local stack sets
``<state dir>/dynamodb``), the tables outlive the process, as S3 does
(:mod:`fanfit_localstack.s3mirror`), so job records survive ``fanfit local down`` and ``up``:

- **Write-through.** Every successful ``CreateTable``, ``DeleteTable``, ``UpdateTimeToLive``,
  ``PutItem``, ``UpdateItem``, ``DeleteItem``, ``BatchWriteItem`` and ``TransactWriteItems`` is
  appended to the table's journal (:mod:`fanfit_localstack.dynamojournal`: the request of a
  table, the whole state of each item it wrote, read back from moto) before the response leaves
  LocalStack, under one lock, so the journal's order is the order moto applied them. Tables whose
  name contains a part of ``$FANFIT_DYNAMODB_SKIP`` are left out. PartiQL writes and
  ``UpdateTable`` are not written through (logged once).
- **Restore.** ``on_infra_ready`` compacts every journal, creates its table again and puts its
  items back into moto, then writes ``restored.json`` (the process id and the counts), which
  :class:`fanfit.local.LocalStack` waits for.
- **CloudFormation.** A template's table without ``TableName`` gets a name of the stack and the
  logical id with a hash of the two (``<stack>-<LogicalId>-<8 hex>``) instead of LocalStack's
  random suffix, so redeploying a stack after a restart names the same tables; a table restored
  at start-up with the key schema the template asks for is taken over by the deploy instead of
  created (a restored table whose key schema differs is dropped and created again, empty).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from localstack.aws.api.dynamodb import DynamodbApi
from localstack.runtime import hooks
from localstack.services.plugins import Service, ServiceLifecycleHook, aws_provider

from fanfit_localstack import dynamojournal

LOG = logging.getLogger(__name__)

#: Operations whose effect is written through (the item writes read the items back from moto).
TABLE_WRITES = ("CreateTable", "DeleteTable", "UpdateTimeToLive")
ITEM_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
#: Writes that are not written through (said once in LocalStack's log).
NOT_JOURNALED = ("UpdateTable", "ExecuteStatement", "BatchExecuteStatement", "ExecuteTransaction")

_journal: dynamojournal.Journal | None = None
_journal_guard = threading.Lock()
#: One lock over every written-through write: the journal's order is moto's.
_write_lock = threading.RLock()
_restoring = threading.Event()
#: (account, region, table) restored at start-up and not yet taken over by a CloudFormation deploy.
_restored: set[tuple[str, str, str]] = set()
_warned: set[str] = set()


class MotoDynamoDBProvider(DynamodbApi, ServiceLifecycleHook):
    """DynamoDB served by moto: every operation falls through to moto's backend."""


def journal() -> dynamojournal.Journal | None:
    """The journal of this process, or None when ``$FANFIT_DYNAMODB_DIR`` is unset."""
    global _journal
    root = dynamojournal.journal_dir()
    if root is None:
        return None
    with _journal_guard:
        if _journal is None:
            _journal = dynamojournal.Journal(root)
        return _journal


def _backend(account_id: str, region: str) -> Any:
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[account_id][region]


def _item_state(
    backend: Any, table_name: str, key: dict[str, Any]
) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """``(table name, key, item or None)`` of one key after a write, from moto."""
    table = backend.get_table(table_name)
    attributes = [a for a in (table.hash_key_attr, table.range_key_attr) if a]
    key = {a: key[a] for a in attributes if a in key}
    item = backend.get_item(table.name, key)
    return table.name, key, (None if item is None else dynamojournal.item_json(item))


def _written_keys(operation: str, request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(table, key or item)`` of every item ``request`` of ``operation`` may have written."""
    if operation == "PutItem":
        return [(request["TableName"], request["Item"])]
    if operation in ("UpdateItem", "DeleteItem"):
        return [(request["TableName"], request["Key"])]
    if operation == "BatchWriteItem":
        return [
            (table, (entry.get("PutRequest") or {}).get("Item")
             or (entry.get("DeleteRequest") or {}).get("Key") or {})
            for table, entries in (request.get("RequestItems") or {}).items()
            for entry in entries
        ]  # fmt: skip
    written = []
    for entry in request.get("TransactItems") or []:
        for kind, field in (("Put", "Item"), ("Update", "Key"), ("Delete", "Key")):
            if kind in entry:
                written.append((entry[kind]["TableName"], entry[kind][field]))
    return written


def _record(context: Any, operation: str, request: dict[str, Any], response: Any) -> None:
    """Write the effect of a successful write through to the journal."""
    store = journal()
    if store is None or _restoring.is_set():
        return
    account, region = context.account_id, context.region
    if operation == "CreateTable":
        name = response["TableDescription"]["TableName"]
        if dynamojournal.journaled(name):
            store.create_table(account, region, name, dict(request))
        return
    if operation == "DeleteTable":
        store.delete_table(account, region, response["TableDescription"]["TableName"])
        return
    backend = _backend(account, region)
    if operation == "UpdateTimeToLive":
        name = backend.get_table(request["TableName"]).name
        if dynamojournal.journaled(name):
            store.set_ttl(account, region, name, dict(request["TimeToLiveSpecification"]))
        return
    by_table: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {}
    for table_name, key in _written_keys(operation, request):
        if not dynamojournal.journaled(table_name):  # a name or an ARN that contains it
            continue
        name, key, item = _item_state(backend, table_name, key)
        by_table.setdefault(name, []).append((key, item))
    for name, states in by_table.items():
        store.write_items(account, region, name, states)


def _tables_of(operation: str, request: dict[str, Any]) -> set[str]:
    """The tables (names or ARNs) a write request names."""
    if operation == "BatchWriteItem":
        return set(request.get("RequestItems") or {})
    if operation == "TransactWriteItems":
        return {
            entry[kind]["TableName"]
            for entry in request.get("TransactItems") or []
            for kind in ("Put", "Update", "Delete", "ConditionCheck")
            if kind in entry
        }
    return {request.get("TableName") or ""}


def _journaled_handler(operation: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    def _call(context: Any, request: Any) -> Any:
        if dynamojournal.journal_dir() is None or (
            operation in ITEM_WRITES
            and not any(dynamojournal.journaled(t) for t in _tables_of(operation, request))
        ):
            return handler(context, request)  # nothing to write through: no lock either
        with _write_lock:
            response = handler(context, request)
            try:
                _record(context, operation, request, response)
            except Exception:  # the write succeeded: answer it, say the journal missed it
                LOG.exception(
                    "fanfit: could not write %s through to the DynamoDB journal", operation
                )
        return response

    return _call


def _warning_handler(operation: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    def _call(context: Any, request: Any) -> Any:
        if dynamojournal.journal_dir() is not None and operation not in _warned:
            _warned.add(operation)
            LOG.warning("fanfit: DynamoDB %s is not written through to disk", operation)
        return handler(context, request)

    return _call


def journaling_dispatcher(provider: object) -> dict[str, Callable[..., Any]]:
    """moto's fall-through dispatch table, its writes written through to the journal."""
    from localstack.services.moto import MotoFallbackDispatcher

    table: dict[str, Callable[..., Any]] = MotoFallbackDispatcher(provider)
    for operation in (*TABLE_WRITES, *ITEM_WRITES):
        if operation in table:
            table[operation] = _journaled_handler(operation, table[operation])
    for operation in NOT_JOURNALED:
        if operation in table:
            table[operation] = _warning_handler(operation, table[operation])
    return table


@aws_provider(api="dynamodb", name="moto")
def dynamodb_moto() -> Service:
    """The ``dynamodb:moto`` service plugin."""
    return Service.for_provider(
        MotoDynamoDBProvider(), dispatch_table_factory=journaling_dispatcher
    )


def stable_table_name(stack_name: str, logical_id: str) -> str:
    """The name of a template's table without ``TableName``: LocalStack's form
    (``<stack>-<LogicalId>-<8 chars>``) with a hash of the two instead of a random part."""
    digest = hashlib.sha256(f"{stack_name}/{logical_id}".encode()).hexdigest()[:8]
    resource = logical_id[:24]
    return f"{stack_name[: 63 - 2 - len(digest) - len(resource)]}-{resource}-{digest}"


@hooks.on_infra_start(should_load=lambda: dynamojournal.journal_dir() is not None)
def stable_cloudformation_tables() -> None:
    """Patch CloudFormation's table provider: stable names, restored tables taken over."""
    from localstack.services.cloudformation.resource_provider import (
        OperationStatus,
        ProgressEvent,
    )
    from localstack.services.dynamodb.resource_providers import aws_dynamodb_table as cfn_table
    from localstack.utils.patch import patch

    @patch(cfn_table.DynamoDBTableProvider.create)
    def create(fn: Any, self: Any, request: Any) -> Any:
        model = request.desired_state
        if request.custom_context.get(cfn_table.REPEATED_INVOCATION):
            return fn(self, request)
        if not model.get("TableName"):
            model["TableName"] = stable_table_name(request.stack_name, request.logical_resource_id)
        restored = (request.account_id, request.region_name, model["TableName"])
        if restored not in _restored:
            return fn(self, request)
        _restored.discard(restored)
        dynamodb = request.aws_client_factory.dynamodb
        table = dynamodb.describe_table(TableName=model["TableName"])["Table"]
        if _schema(table.get("KeySchema")) != _schema(model.get("KeySchema")):
            LOG.warning(
                "fanfit: restored table %s has another key schema than stack %s asks for: "
                "created again, empty",
                model["TableName"],
                request.stack_name,
            )
            dynamodb.delete_table(TableName=model["TableName"])
            return fn(self, request)
        LOG.info(
            "fanfit: stack %s takes over restored table %s", request.stack_name, table["TableName"]
        )
        model["Arn"] = table["TableArn"]
        request.custom_context[cfn_table.REPEATED_INVOCATION] = True
        return ProgressEvent(
            status=OperationStatus.IN_PROGRESS,
            resource_model=model,
            custom_context=request.custom_context,
        )


def _schema(keys: Any) -> list[tuple[str, str]]:
    return sorted((k["AttributeName"], k["KeyType"]) for k in keys or [])


def restore(root: Any) -> dict[str, Any]:
    """Create every journaled table again and put its items back into moto; return the counts."""
    from localstack.aws.connect import connect_to

    started = time.monotonic()
    tables, skipped = dynamojournal.load(root)
    items = 0
    _restoring.set()
    try:
        for state in tables:
            client = connect_to(
                aws_access_key_id=state.account_id, region_name=state.region
            ).dynamodb
            request = {k: v for k, v in state.create_request.items() if v is not None}
            client.create_table(**request)
            if state.ttl and state.ttl.get("Enabled"):
                client.update_time_to_live(TableName=state.name, TimeToLiveSpecification=state.ttl)
            backend = _backend(state.account_id, state.region)
            for item in state.items.values():
                backend.put_item(state.name, item)
                items += 1
            _restored.add((state.account_id, state.region, state.name))
    finally:
        _restoring.clear()
    return {
        "pid": os.getpid(),
        "tables": len(tables),
        "items": items,
        "skipped": skipped,
        "seconds": round(time.monotonic() - started, 3),
    }


@hooks.on_infra_ready(should_load=lambda: dynamojournal.journal_dir() is not None)
def restore_journal() -> None:
    """Restore the journal into DynamoDB at start-up, then write ``restored.json``."""
    root = dynamojournal.journal_dir()
    if root is None:
        return
    root.mkdir(parents=True, exist_ok=True)
    marker = root / dynamojournal.RESTORED_FILE
    marker.unlink(missing_ok=True)
    try:
        counts = restore(root)
    except Exception as exc:  # recorded for the waiting client, which names it
        LOG.exception("fanfit: restoring DynamoDB from %s failed", root)
        counts = {"pid": os.getpid(), "error": f"{type(exc).__name__}: {exc}"}
    tmp = marker.with_name(f".{marker.name}.tmp")
    tmp.write_text(json.dumps(counts))
    os.replace(tmp, marker)
    LOG.info("fanfit: DynamoDB restored from %s: %s", root, counts)
