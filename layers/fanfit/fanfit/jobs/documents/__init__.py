"""Job documents: pydantic models of what the client and the steps write to S3 and pass between states.

The step inputs (the Lambda functions' events, :mod:`.events`) and one module per job kind
(:mod:`.estimate`, :mod:`.train`): the job spec, its plan, the wave and round plans and each step's
output. :mod:`.record` holds the readers' view of the job record (the DynamoDB job table's item:
:class:`~fanfit.jobs.documents.record.JobRecord`) and the ``kind`` of a spec read before the spec
itself. Every reader parses a document through its model, so a
malformed document raises :class:`fanfit.errors.InvalidJobError` naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError, field_validator

from fanfit import storage
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

    Each model's validator and serializer are built once, on its first use (``defer_build``), not
    when its module is imported: a Lambda function's init builds only the documents it reads and
    writes (of the ~80 in this package, a TrainShard uses a handful).
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

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


#: An S3 bucket name (the rules for general purpose buckets: 3-63 characters, lower-case letters,
#: digits, dots and hyphens, beginning and ending with a letter or digit).
BUCKET_NAME_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"


class DataSource(Document):
    """A job's data used in place: one version of the user's object ``s3://bucket/key``.

    The alternative to a spec's ``data_key`` (exactly one of the two): the client read only the
    object's header and recorded its ``etag`` (and ``version_id`` in a versioned bucket); Prepare or
    TrainInit reads that very version (a changed object is refused,
    :class:`fanfit.errors.DataSourceChangedError`) and writes the job's columns as the content-addressed
    data object (:func:`fanfit.jobs.source.materialize_source`). The key's suffix is one of
    :data:`fanfit.storage.sources.SOURCE_FORMATS`; the bucket must be the stack's or the one named by
    the template parameter ``ExternalDataBucketName`` (checked server-side).
    """

    bucket: Annotated[str, StringConstraints(pattern=BUCKET_NAME_PATTERN)]
    key: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    etag: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    version_id: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        if storage.source_format(value) is None:
            raise ValueError(
                f"must end with one of {', '.join(storage.SOURCE_FORMATS)} (the formats read in place)"
            )
        return value

    @property
    def uri(self) -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.bucket}/{self.key}"

    @classmethod
    def of(cls, obj: storage.S3Object) -> DataSource:
        """The source of one version of an object, as the client read its header."""
        return cls(bucket=obj.bucket, key=obj.key, etag=obj.etag, version_id=obj.version_id)

    def to_object(self) -> storage.S3Object:
        """The :class:`fanfit.storage.S3Object` the readers take."""
        return storage.S3Object(self.bucket, self.key, self.etag, self.version_id)


def check_one_data(data_key: str | None, data_source: DataSource | None) -> None:
    """A spec names its data by exactly one of ``data_key`` and ``data_source``.

    Raises
    ------
    ValueError
        Neither or both (pydantic reports it as the document's error).
    """
    if (data_key is None) == (data_source is None):
        raise ValueError(
            "give exactly one of data_key (the uploaded data object) and data_source (an "
            "s3://bucket/key used in place)"
        )
