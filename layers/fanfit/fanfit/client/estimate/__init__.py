"""Estimate jobs: start one (:func:`submit_estimate`), follow it (:class:`EstimateJob`), read its
result (:class:`EstimateResult`, laid out as DoubleML lays out a fitted model).

Modules, bottom to top (each imports only those before it):

- :mod:`~fanfit.client.estimate.callbacks`: :class:`~fanfit.client.estimate.callbacks.
  ClientCallbacks`, a base of :class:`EstimateJob`: a client-inputs model's requests, inputs and
  estimate (Step Functions' callback pattern);
- :mod:`~fanfit.client.estimate.handles`: :class:`EstimateJob`, :class:`PartJob` and the
  :class:`EstimateResult` they read;
- :mod:`~fanfit.client.estimate.submit`: :func:`submit_estimate`, :func:`submit_parts_job`;
- :mod:`~fanfit.client.estimate.plan`: :func:`plan_estimate`, :func:`plan_parts_estimate`
  (``--plan-only``).

This package only re-exports their public names.
"""

from fanfit.client.estimate.handles import EstimateJob, EstimateResult, PartJob
from fanfit.client.estimate.plan import plan_estimate, plan_parts_estimate
from fanfit.client.estimate.submit import same_data, submit_estimate, submit_parts_job

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
