"""What the documents of an estimate job share: a base that leaves None fields out, and list helpers.

:class:`_OmitNone` is the base of the documents whose unset optional fields are absent in their
JSON; :func:`parse_list` and :func:`to_json_list` read and write a JSON array of documents (a
stage's units, a wave's shards).
"""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar

from pydantic import SerializerFunctionWrapHandler, TypeAdapter, ValidationError, model_serializer

from fanfit.errors import InvalidDocumentError
from fanfit.jobs.documents import Document, describe_validation_error
from fanfit.sched.resources import PlacementKind

__all__ = ["parse_list", "to_json_list"]

#: Where a shard runs (:data:`fanfit.sched.resources.PlacementKind`), as the documents record it.
_Placement = PlacementKind


class _OmitNone(Document):
    """A document whose None-valued fields (all, or those in ``OMIT_NONE``) are left out when written:
    absent in the JSON, as the steps have always written them, not ``null``."""

    OMIT_NONE: ClassVar[frozenset[str] | None] = None

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        names = self.OMIT_NONE
        return {k: v for k, v in out.items() if v is not None or (names and k not in names)}


@cache
def _list_adapter(model: type[Document]) -> TypeAdapter[list[Any]]:
    """The validator of a JSON array of ``model`` documents, built once per model."""
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def parse_list(model: type[Document], data: Any, *, source: str | None = None) -> list[Any]:
    """Validate a JSON array of ``model`` documents (a stage's units, a wave's shards).

    Raises
    ------
    InvalidDocumentError
        Not a list, or an item that does not fit ``model``; the message names the item's index and field.
    """
    try:
        return _list_adapter(model).validate_python(data)
    except ValidationError as exc:
        name = f"list of {model.__name__} ({source})" if source else f"list of {model.__name__}"
        raise InvalidDocumentError(describe_validation_error(name, exc)) from None


def to_json_list(items: list[Any]) -> list[dict[str, Any]]:
    """A list of documents as JSON-ready dicts."""
    return [item.to_json_dict() for item in items]
