"""The resources of a deployed fanfit stack, read from its CloudFormation outputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fanfit import errors

__all__ = ["Stack"]


@dataclass(frozen=True)
class Stack:
    """The resources of one deployed fanfit stack, read from its CloudFormation outputs.

    Parameters
    ----------
    name : str
        The CloudFormation stack name.
    bucket, job_table, estimate_state_machine_arn : str
        Outputs ``DataBucketName``, ``JobTableName``, ``EstimateStateMachineArn``.
    endpoint_url : str or None
        The endpoint of a local stack; None for AWS.
    region_name : str or None
    train_state_machine_arn : str or None
        Output ``TrainStateMachineArn``; None on a stack deployed before train jobs existed.
    train_worker_memory_mb : tuple of int
        Output ``TrainWorkerMemorySizes``: the memory sizes (MB) with a TrainShard function, the
        default first.
    partition_table : str or None
        Output ``PartitionTableName`` (running jobs' partitions); None on a stack deployed before
        partitions existed.
    partition_history_table : str or None
        Output ``PartitionHistoryTableName`` (the partition recomputations); None on a stack
        deployed before it existed.
    """

    name: str
    bucket: str
    job_table: str
    estimate_state_machine_arn: str
    endpoint_url: str | None = None
    region_name: str | None = None
    train_state_machine_arn: str | None = None
    train_worker_memory_mb: tuple[int, ...] = ()
    partition_table: str | None = None
    partition_history_table: str | None = None

    @classmethod
    def from_cloudformation(cls, name: str, session: Any, endpoint_url: str | None = None) -> Stack:
        """Read the stack's outputs.

        Raises
        ------
        fanfit.errors.StackError
            If the stack does not exist or lacks an output.
        """
        cfn = session.client("cloudformation", endpoint_url=endpoint_url)
        try:
            desc = cfn.describe_stacks(StackName=name)["Stacks"][0]
        except Exception as exc:  # botocore ClientError, EndpointConnectionError
            raise errors.StackError(
                f"cannot read stack {name!r}"
                + (f" at {endpoint_url}" if endpoint_url else "")
                + f": {exc}. Deploy it with `sam deploy --guided` (AWS) or `fanfit local up`."
            ) from exc
        outputs = {o["OutputKey"]: o["OutputValue"] for o in desc.get("Outputs", [])}
        try:
            return cls(
                name=name,
                bucket=outputs["DataBucketName"],
                job_table=outputs["JobTableName"],
                estimate_state_machine_arn=outputs["EstimateStateMachineArn"],
                endpoint_url=endpoint_url,
                region_name=session.region_name,
                train_state_machine_arn=outputs.get("TrainStateMachineArn"),
                train_worker_memory_mb=tuple(
                    int(m) for m in outputs.get("TrainWorkerMemorySizes", "").split(",") if m
                ),
                partition_table=outputs.get("PartitionTableName"),
                partition_history_table=outputs.get("PartitionHistoryTableName"),
            )
        except KeyError as exc:
            raise errors.StackError(
                f"stack {name!r} has no output {exc}; is it a fanfit stack?"
            ) from exc
