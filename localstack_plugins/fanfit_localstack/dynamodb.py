"""A DynamoDB provider for LocalStack backed by moto.

LocalStack's own DynamoDB provider forwards to DynamoDB Local, which needs Java and a download from
the internet. This provider implements no operation itself: LocalStack's
:class:`~localstack.services.moto.MotoFallbackDispatcher` sends every operation to moto's DynamoDB
backend (LocalStack's ``moto-ext``), as LocalStack does for its other moto-backed services (EC2,
IAM, ...). Selected with ``PROVIDER_OVERRIDE_DYNAMODB=moto``.
"""

from __future__ import annotations

from localstack.aws.api.dynamodb import DynamodbApi
from localstack.services.plugins import Service, ServiceLifecycleHook, aws_provider


class MotoDynamoDBProvider(DynamodbApi, ServiceLifecycleHook):
    """DynamoDB served by moto: every operation falls through to moto's backend."""


@aws_provider(api="dynamodb", name="moto")
def dynamodb_moto() -> Service:
    """The ``dynamodb:moto`` service plugin."""
    from localstack.services.moto import MotoFallbackDispatcher

    return Service.for_provider(
        MotoDynamoDBProvider(), dispatch_table_factory=MotoFallbackDispatcher
    )
