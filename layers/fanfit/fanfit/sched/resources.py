"""Resource names: where a shard or a worker runs, as the throughput records and the placement say it.

Two kinds of resource, one spelling each:

- ``lambda-<MB>``: a Lambda function with that memory size (1,769 MB buys one vCPU; AWS Lambda,
  "Memory and computing power");
- ``gpu:<EC2 instance type>``: fanfit's GPU worker, an AWS Batch job on that instance type (the
  template's ``GpuInstanceTypes``; the worker and the steps read the first of them from
  ``$FANFIT_GPU_INSTANCE_TYPE``).

Every module that writes or reads a resource name builds or parses it here.
"""

from __future__ import annotations

import os
import re
from typing import Literal

from fanfit.errors import InvalidJobError

__all__ = [
    "DEFAULT_GPU_INSTANCE_TYPE",
    "GPU_PREFIX",
    "LAMBDA_MAX_MB",
    "LAMBDA_MIN_MB",
    "PlacementKind",
    "gpu_resource",
    "crossfit_memory_sizes",
    "lambda_resource",
    "resource_kind",
    "resource_memory_mb",
    "stack_gpu_resource",
]

#: Where a shard or worker runs: a Lambda function or the GPU worker (the state machines' Choice).
PlacementKind = Literal["lambda", "gpu"]
#: Prefix of the GPU worker's resource names: ``"gpu:<EC2 instance type>"``.
GPU_PREFIX = "gpu:"
#: The template's default ``GpuInstanceTypes`` (one NVIDIA T4).
DEFAULT_GPU_INSTANCE_TYPE = "g4dn.xlarge"
#: Lambda's memory sizes, MB (AWS Lambda quotas).
LAMBDA_MIN_MB, LAMBDA_MAX_MB = 128, 10240

_LAMBDA_RE = re.compile(r"^lambda-(\d+)$")
_GPU_RE = re.compile(r"^gpu:([A-Za-z0-9.\-]+)$")


def lambda_resource(memory_mb: int) -> str:
    """The resource name of a Lambda function with ``memory_mb`` MB, e.g. ``'lambda-1769'``."""
    return f"lambda-{int(memory_mb)}"


def gpu_resource(instance_type: str) -> str:
    """The resource name of the GPU worker on ``instance_type``, e.g. ``'gpu:g4dn.xlarge'``."""
    return f"{GPU_PREFIX}{instance_type}"


def stack_gpu_resource() -> str:
    """The GPU worker's resource name on this stack: ``gpu:$FANFIT_GPU_INSTANCE_TYPE``.

    The template sets the variable to the first of ``GpuInstanceTypes`` in the functions and in the
    GPU worker's job; without it, :data:`DEFAULT_GPU_INSTANCE_TYPE`.
    """
    return gpu_resource(os.environ.get("FANFIT_GPU_INSTANCE_TYPE") or DEFAULT_GPU_INSTANCE_TYPE)


def resource_memory_mb(resource: str) -> int | None:
    """The memory (MB) of a ``'lambda-<MB>'`` resource name; None for other resources."""
    match = _LAMBDA_RE.match(resource)
    return int(match.group(1)) if match else None


def resource_kind(resource: str) -> PlacementKind:
    """``'lambda'`` for ``'lambda-<MB>'``, ``'gpu'`` for ``'gpu:<instance type>'``.

    Raises
    ------
    InvalidJobError
        Any other name, or a Lambda memory outside 128..10,240 MB.
    """
    memory_mb = resource_memory_mb(resource) if isinstance(resource, str) else None
    if memory_mb is not None:
        if not LAMBDA_MIN_MB <= memory_mb <= LAMBDA_MAX_MB:
            raise InvalidJobError(
                f"resource {resource!r}: Lambda memory must be {LAMBDA_MIN_MB}..{LAMBDA_MAX_MB} MB."
            )
        return "lambda"
    if isinstance(resource, str) and _GPU_RE.match(resource):
        return "gpu"
    raise InvalidJobError(
        f"unknown resource {resource!r}; write 'lambda-<MB>' (e.g. 'lambda-1769') or "
        f"'gpu:<instance type>' (e.g. 'gpu:g4dn.xlarge')."
    )


def crossfit_memory_sizes(value: str | None = None, default_mb: int = 1769) -> list[int]:
    """The memory sizes (MB) the stack's CrossFit functions offer, the first the default.

    Parameters
    ----------
    value : str, optional
        Comma-separated sizes (the template's ``CrossFitMemorySizes``, which it passes as
        ``$FANFIT_CROSSFIT_MEMORY_SIZES``); default: that variable, else ``default_mb`` alone.
    default_mb : int
        The size when nothing is set, MB.

    Returns
    -------
    list of int
        Distinct sizes in their order.

    Raises
    ------
    InvalidJobError
        A size that is not an integer in 128..10,240.
    """
    text = value if value is not None else os.environ.get("FANFIT_CROSSFIT_MEMORY_SIZES", "")
    sizes: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit() or not LAMBDA_MIN_MB <= int(part) <= LAMBDA_MAX_MB:
            raise InvalidJobError(
                f"CrossFitMemorySizes: {part!r} is not a memory size in "
                f"{LAMBDA_MIN_MB}..{LAMBDA_MAX_MB} MB."
            )
        if int(part) not in sizes:
            sizes.append(int(part))
    return sizes or [int(default_mb)]
