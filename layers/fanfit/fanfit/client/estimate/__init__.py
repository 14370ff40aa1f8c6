"""Estimate jobs: start one (:func:`submit_estimate`), follow it (:class:`EstimateJob`), read its
result (:class:`EstimateResult`, laid out as DoubleML lays out a fitted model).

This package only re-exports the public names of its modules.
"""

from fanfit.client.estimate.handles import (
    EstimateJob,
    EstimateResult,
    PartJob,
    plan_estimate,
    plan_parts_estimate,
    same_data,
    submit_estimate,
    submit_parts_job,
)

__all__ = [
    "EstimateJob",
    "EstimateResult",
    "PartJob",
    "plan_estimate",
    "plan_parts_estimate",
    "same_data",
    "submit_estimate",
    "submit_parts_job",
]
