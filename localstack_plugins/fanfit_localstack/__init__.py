"""fanfit's LocalStack plugins, installed into LocalStack's virtualenv and found by entry point.

- ``localstack.lambda.runtime_executor`` ``local``: :mod:`fanfit_localstack.executor` runs Lambda
  execution environments as local processes (``LAMBDA_RUNTIME_EXECUTOR=local``);
- ``localstack.aws.provider`` ``dynamodb:moto``: :mod:`fanfit_localstack.dynamodb`
  (``PROVIDER_OVERRIDE_DYNAMODB=moto``);
- ``localstack.hooks.on_infra_start``: :mod:`fanfit_localstack.stepfunctions` completes the
  Distributed Map features the project's state machines use; :mod:`fanfit_localstack.s3mirror`
  and :mod:`fanfit_localstack.dynamodb` write S3 and DynamoDB through to the state dir;
- ``localstack.hooks.on_infra_ready``: the two restore what they wrote
  (:mod:`fanfit_localstack.dynamojournal` is the DynamoDB journal's format), and
  :mod:`fanfit_localstack.executor` says which CPU and memory limits apply
  (:mod:`fanfit_localstack.cgroups`).
"""
