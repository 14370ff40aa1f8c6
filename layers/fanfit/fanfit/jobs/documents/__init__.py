"""Job documents: pydantic models of what the client and the steps write to S3 and pass between states.

The step inputs (the Lambda functions' events, :mod:`.events`) and one module per job kind
(:mod:`.estimate`, :mod:`.train`): the job spec, its plan, the wave and round plans and each step's
output. :mod:`.record` holds the readers' view of the job record (the DynamoDB job table's item:
:class:`~fanfit.jobs.documents.record.JobRecord`) and the ``kind`` of a spec read before the spec
itself. Every reader parses a document through its model, so a
malformed document raises :class:`fanfit.errors.InvalidJobError` naming the field.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from fanfit.errors import InvalidDocumentError


def describe_validation_error(name: str, exc: ValidationError) -> str:
    """``<name>: field: what is wrong; ...`` without echoing the offending values (they may be huge)."""
    problems = []
    for err in exc.errors(include_url=False, include_input=False)[:10]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "document"
        problems.append(f"{where}: {err.get('msg', 'invalid')}")
    more = exc.error_count() - len(problems)
    tail = f"; and {more} more" if more > 0 else ""
    return f"malformed {name}: {'; '.join(problems)}{tail}"


class Document(BaseModel):
    """Base of every job document: unknown keys are refused, values are validated on parse.

    Read a document with :meth:`parse` (a dict from ``json.loads`` or a step's state) and write it
    with :meth:`to_json_dict`.
    """

    model_config = ConfigDict(extra="forbid")

    @classmethod
    def parse(cls, data: Any, *, source: str | None = None) -> Self:
        """Validate ``data`` (a JSON object) into this document.

        Parameters
        ----------
        data : Any
            The decoded JSON object.
        source : str, optional
            Where it was read from (an S3 key), named in the error.

        Raises
        ------
        InvalidDocumentError
            When a field is missing, unknown, of the wrong type or out of range; the message names
            the document (and ``source``) and each field.
        """
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            name = f"{cls.__name__} ({source})" if source else cls.__name__
            raise InvalidDocumentError(describe_validation_error(name, exc)) from None

    def to_json_dict(self) -> dict[str, Any]:
        """The document as a JSON-ready dict (what is written to S3 or returned into the state)."""
        return self.model_dump(mode="json")
