"""Job documents of an estimate job: what the client and the steps write to S3 and return into the state.

Every reader parses a document through its model (:meth:`~fanfit.jobs.documents.Document.parse`), so a
malformed one raises :class:`fanfit.errors.InvalidDocumentError` naming the field. The JSON shapes are
the ones the client, :mod:`fanfit.progress`, :mod:`fanfit.cost`, :mod:`fanfit.report` and ``fanfit
status`` read.

============================  ===========================================  =================  ======================================
document                      where (:mod:`fanfit.storage`)                written by         read by
============================  ===========================================  =================  ======================================
:class:`EstimateSpec`         ``spec_key(job)``                            client             Prepare; progress (``dml``)
:class:`EstimatePlan`         ``plan_key(job)``                            Prepare            Schedule, CrossFit, Aggregate, client
:class:`FitUnitDoc` (list)    ``units_key(job, s)``                        Prepare            Schedule
:class:`StageInputs`          ``stage_inputs_key(job, s)``                 Prepare (s > 0);   CrossFit
                                                                           the client (a
                                                                           client-inputs
                                                                           model, every s)
:class:`ClientRequest`        ``client_request_key(job, s)``,              ClientInputs       the client (``EstimateJob.
                              ``client_request_key(job, "estimate")``                         client_request``)
:class:`StepRecord`           ``prepare_record_key(job, s)``               Prepare            Aggregate (cost), progress
:class:`Shard` (list)         ``wave_key(job, s, w)``                      Schedule           the Map's ItemReader: CrossFit's
                                                                                              event, the GPU worker's task
:class:`StageSchedule`        ``schedule_key(job, s)``                     Schedule           Schedule, Aggregate, describe_failure,
                                                                                              progress
:class:`ScheduleSummary`      the job record's ``schedule``                Schedule           ``fanfit status``
:class:`ShardStats`           ``__stats__`` of ``preds_key(job, s, id)``   CrossFit           Schedule, Aggregate, progress, cost
:class:`ClientEstimate`       ``client_estimate_key(job)``                 client (RDFlex)    Aggregate
:class:`EstimateResultDoc`    ``result_key(job)``                          Aggregate          client, report, cost, ``fanfit status``
:class:`PrepareOutput`        state ``$.plan``                             Prepare            the state machine
:class:`WaveOutput`           state ``$.schedule.wave``                    Schedule           the state machine
:class:`ShardFailure`         state (the failed wave's Catch)              Schedule           the state machine's Fail state
:class:`CrossFitOutput`       the Map Run's ResultWriter ``Output``        CrossFit           Schedule (wall seconds per shard)
:class:`AggregateOutput`      state                                        Aggregate          the state machine
:class:`ReleaseOutput`        state                                        Release            the state machine
:class:`MapRunChild` (list)   ``map_runs_prefix(job, s, w)``/.../*.json    Step Functions     Schedule, describe_failure
============================  ===========================================  =================  ======================================

A client-inputs model (``ModelDef.client_inputs``, RDFlex) has the execution wait for the client
(Step Functions' callback pattern): ClientInputs writes a :class:`ClientRequest` with the task token,
the client writes the stage's :class:`StageInputs` (or its estimate) and resumes the execution with
``SendTaskSuccess``. :class:`ClientRequest` is defined with the event models, as ClientInputs
imports no :mod:`fanfit.dml`.

``placement`` ``'gpu'`` (and a wave's ``policy`` ``'gpu'``) is fanfit's GPU worker, an AWS Batch job.
"""

from __future__ import annotations

from fanfit.jobs.documents.estimate.common import parse_list, to_json_list
from fanfit.jobs.documents.estimate.plan import (
    DMLSpecField,  # noqa: F401 (not in __all__, as before: a public alias)
    EstimatePlan,
    PlanPart,
    PrepareOutput,
    StageInputs,
    StepRecord,
    fit_unit,
    unit_doc,
)
from fanfit.jobs.documents.estimate.result import (
    AggregateOutput,
    AggregateStats,  # noqa: F401 (not in __all__; imported by jobs.estimate.aggregate)
    ClientEstimate,
    CombinedFramework,
    CombinedResult,
    EstimateResultDoc,
    EstimateTimings,
    PartResult,
)
from fanfit.jobs.documents.estimate.schedule import (
    DispatchedQueue,
    EstimatePrediction,
    PartitionUsed,
    PlacedStage,
    PlacementDecision,
    PlacementInput,
    PlannedPart,
    PlannedShards,
    PlannedStage,
    RecoveredCount,  # noqa: F401 (not in __all__; imported by jobs.estimate.schedule)
    ScheduledShard,
    ScheduleSummary,
    StageSchedule,
    WaveDecision,
    WaveDispatch,
    WaveEntry,
    WaveOutput,
    WaveSummary,
)
from fanfit.jobs.documents.estimate.shards import (
    CrossFitOutput,
    MapRunChild,
    ShardFailure,
    ShardStats,
)
from fanfit.jobs.documents.estimate.spec import (
    MAX_CONCURRENCY,
    MAX_PARTS,
    MAX_UNITS_PER_SHARD,
    EstimateSpec,
    PartSelect,
    SpecPart,
)

# FitUnitDoc (an item of units.json and of a shard's units) and Shard (an item of a wave's shard list,
# the Distributed Map's ItemReader input, which is CrossFit's event's ``shard``) are defined with the
# event models (:mod:`fanfit.jobs.documents.events`), which the train functions import without fanfit.dml; so is
# ReleaseOutput (Release needs no fanfit.dml either), and ClientRequest (ClientInputs neither).
from fanfit.jobs.documents.events import ClientRequest, FitUnitDoc, ReleaseOutput, Shard

__all__ = [
    "MAX_CONCURRENCY",
    "MAX_UNITS_PER_SHARD",
    "AggregateOutput",
    "ClientEstimate",
    "ClientRequest",
    "CombinedFramework",
    "CombinedResult",
    "CrossFitOutput",
    "DispatchedQueue",
    "EstimatePlan",
    "EstimatePrediction",
    "EstimateResultDoc",
    "EstimateSpec",
    "MAX_PARTS",
    "PartSelect",
    "PlanPart",
    "PlannedPart",
    "SpecPart",
    "EstimateTimings",
    "FitUnitDoc",
    "MapRunChild",
    "PartResult",
    "PartitionUsed",
    "PlannedShards",
    "PlannedStage",
    "PlacedStage",
    "PlacementDecision",
    "PlacementInput",
    "PrepareOutput",
    "ReleaseOutput",
    "ScheduleSummary",
    "ScheduledShard",
    "Shard",
    "ShardFailure",
    "ShardStats",
    "StageInputs",
    "StageSchedule",
    "StepRecord",
    "WaveDecision",
    "WaveDispatch",
    "WaveEntry",
    "WaveOutput",
    "WaveSummary",
    "fit_unit",
    "parse_list",
    "to_json_list",
    "unit_doc",
]
