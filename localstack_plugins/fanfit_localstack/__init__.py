"""fanfit's LocalStack plugins, installed into LocalStack's virtualenv and found by entry point.

- ``localstack.lambda.runtime_executor`` ``local``: :mod:`fanfit_localstack.executor` runs Lambda
  execution environments as local processes (``LAMBDA_RUNTIME_EXECUTOR=local``);
- ``localstack.aws.provider`` ``dynamodb:moto``: :mod:`fanfit_localstack.dynamodb`
  (``PROVIDER_OVERRIDE_DYNAMODB=moto``);
- ``localstack.hooks.on_infra_start``: :mod:`fanfit_localstack.stepfunctions` completes the
  Distributed Map features the project's state machines use.
"""
