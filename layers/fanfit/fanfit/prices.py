"""AWS prices that fanfit's cost figures and placement decisions use.

One table, in one place. The defaults are AWS's published on-demand list prices for us-east-1 as of
2026 (the pages each field cites). Prices change and differ by region and contract: a user passes their
own with :meth:`PriceTable.from_dict` (``fanfit ... --prices prices.json``), which accepts any subset of
the fields and rejects unknown ones by name.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from fanfit.errors import InvalidJobError

__all__ = ["DEFAULT_PRICES", "PriceTable"]


def _default_instances() -> dict[str, float]:
    # Amazon EC2 On-Demand Pricing, Linux, us-east-1 (https://aws.amazon.com/ec2/pricing/on-demand/).
    # AWS Batch itself has no charge; its jobs pay for the instances (https://aws.amazon.com/batch/pricing/).
    return {
        "g4dn.xlarge": 0.526,  # 1 NVIDIA T4, 4 vCPU, 16 GiB
        "g5.xlarge": 1.006,  # 1 NVIDIA A10G, 4 vCPU, 16 GiB
        "g6.xlarge": 0.8048,  # 1 NVIDIA L4, 4 vCPU, 16 GiB
        "p3.2xlarge": 3.06,  # 1 NVIDIA V100, 8 vCPU, 61 GiB
    }


@dataclass(frozen=True)
class PriceTable:
    """Unit prices in USD.

    Attributes
    ----------
    lambda_gb_second_usd : float
        Lambda compute, x86, per GB-second of billed duration (memory in GB = MB / 1024), first pricing
        tier (AWS Lambda pricing, https://aws.amazon.com/lambda/pricing/).
    lambda_request_usd : float
        Lambda, per invocation ($0.20 per million requests; same page).
    sfn_transition_usd : float
        Step Functions Standard Workflows, per state transition ($0.025 per 1,000; a Distributed Map's
        child executions are billed the same way; https://aws.amazon.com/step-functions/pricing/).
    s3_put_usd, s3_get_usd : float
        S3 Standard, per PUT/LIST and per GET request ($0.005 and $0.0004 per 1,000;
        https://aws.amazon.com/s3/pricing/).
    dynamodb_write_usd, dynamodb_read_usd : float
        DynamoDB on-demand, per write and read request unit ($0.625 and $0.125 per million;
        https://aws.amazon.com/dynamodb/pricing/on-demand/).
    gpu_instance_hour_usd : dict of str to float
        EC2 on-demand price per instance-hour of the GPU instance types a Batch compute environment
        may launch (Amazon EC2 On-Demand Pricing).
    gpu_instance_type : str
        The instance type Batch GPU jobs are priced at by default.
    """

    lambda_gb_second_usd: float = 0.0000166667
    lambda_request_usd: float = 0.20 / 1_000_000
    sfn_transition_usd: float = 0.025 / 1000
    s3_put_usd: float = 0.005 / 1000
    s3_get_usd: float = 0.0004 / 1000
    dynamodb_write_usd: float = 0.625 / 1_000_000
    dynamodb_read_usd: float = 0.125 / 1_000_000
    gpu_instance_hour_usd: dict[str, float] = field(default_factory=_default_instances)
    gpu_instance_type: str = "g4dn.xlarge"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float | int) and not (math.isfinite(value) and value >= 0):
                raise InvalidJobError(
                    f"price {f.name} must be a finite number >= 0, got {value!r}."
                )
        for name, hourly in self.gpu_instance_hour_usd.items():
            if not (isinstance(hourly, float | int) and math.isfinite(hourly) and hourly >= 0):
                raise InvalidJobError(
                    f"price gpu_instance_hour_usd[{name!r}] must be a number >= 0, got {hourly!r}."
                )
        if self.gpu_instance_type not in self.gpu_instance_hour_usd:
            raise InvalidJobError(
                f"gpu_instance_type {self.gpu_instance_type!r} has no price; known: "
                f"{sorted(self.gpu_instance_hour_usd)}."
            )

    def lambda_cost_usd(self, memory_mb: float, billed_s: float, invocations: int = 1) -> float:
        """Cost of Lambda invocations: ``memory_mb / 1024 * billed_s * gb_s + invocations * request``.

        ``memory_mb`` in MB, ``billed_s`` the total billed duration in seconds (Lambda bills each
        invocation's duration rounded up to 1 ms).
        """
        return (
            memory_mb / 1024.0 * billed_s * self.lambda_gb_second_usd
            + invocations * self.lambda_request_usd
        )

    def gpu_cost_usd(self, instance_s: float, instance_type: str | None = None) -> float:
        """Cost of ``instance_s`` seconds of one Batch instance (EC2 bills Linux per second).

        Raises
        ------
        InvalidJobError
            If ``instance_type`` has no price in the table.
        """
        name = instance_type or self.gpu_instance_type
        if name not in self.gpu_instance_hour_usd:
            raise InvalidJobError(
                f"instance type {name!r} has no price; known: {sorted(self.gpu_instance_hour_usd)}."
            )
        return instance_s / 3600.0 * self.gpu_instance_hour_usd[name]

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-serialisable) of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, overrides: dict[str, Any]) -> PriceTable:
        """The default table with ``overrides`` applied.

        Raises
        ------
        InvalidJobError
            If a key is not a field of the table or a value is not a non-negative number.
        """
        if not isinstance(overrides, dict):
            raise InvalidJobError(f"prices must be a JSON object, got {type(overrides).__name__}.")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise InvalidJobError(f"unknown price field(s) {unknown}; known: {sorted(known)}.")
        base = cls()
        values = dict(overrides)
        if "gpu_instance_hour_usd" in values:
            if not isinstance(values["gpu_instance_hour_usd"], dict):
                raise InvalidJobError("gpu_instance_hour_usd must map instance type to USD/hour.")
            values["gpu_instance_hour_usd"] = {
                **base.gpu_instance_hour_usd,
                **values["gpu_instance_hour_usd"],
            }
        for key, value in values.items():
            if key not in ("gpu_instance_hour_usd", "gpu_instance_type") and (
                isinstance(value, bool) or not isinstance(value, float | int)
            ):
                raise InvalidJobError(f"price {key} must be a number, got {value!r}.")
        return replace(base, **values)

    @classmethod
    def from_file(cls, path: str | Path) -> PriceTable:
        """Read overrides from a JSON file (see :meth:`from_dict`).

        Raises
        ------
        InvalidJobError
            If the file cannot be read or is not valid JSON.
        """
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise InvalidJobError(f"cannot read prices file {str(path)!r}: {exc}") from exc
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise InvalidJobError(f"prices file {str(path)!r} is not valid JSON: {exc}") from exc


#: The published us-east-1 list prices.
DEFAULT_PRICES = PriceTable()
