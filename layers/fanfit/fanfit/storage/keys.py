"""The S3 key layout of a job: every key and prefix fanfit reads or writes is built here.

Key layout (``<job>`` is the job id)::

    data/<sha256>.npz                      the data, content-addressed: arrays ``values`` (n_obs, n_cols)
                                           float64 and ``columns`` (n_cols,) str
    jobs/<job>/spec.json                   the job spec the client wrote
    jobs/<job>/plan.json                   the validated plan (Prepare)
    jobs/<job>/input-folds.npy             the folds the user gave (client), (n_obs, n_rep) int64
    jobs/<job>/input-init.npy              the starting centroids the user gave a K-Means job (client)
    jobs/<job>/folds.npy                   test-fold index per row and repetition, (n_obs, n_rep) int64
    jobs/<job>/stages/<s>/units.json       the (repetition, fold, learner) units of stage s (Prepare)
    jobs/<job>/stages/<s>/prepare.json     Prepare's record of stage s: started_at, ended_at, memory_mb
    jobs/<job>/stages/<s>/schedule.json    the waves of stage s so far: decision and shard ids (Schedule)
    jobs/<job>/stages/<s>/waves/<w>.json   the shard list of wave w of stage s (the Map's ItemReader)
    jobs/<job>/stages/<s>/inputs.json      inputs of stage s computed from earlier stages (Prepare), or
                                           sent by the client (a model with ``client_inputs``)
    jobs/<job>/stages/<s>/request.json     the execution's request for the client's inputs of stage s:
                                           its task token (ClientInputs; a ``client_inputs`` model)
    jobs/<job>/estimate-request.json       the execution's request for the client's estimate (ClientInputs)
    jobs/<job>/client-estimate.json        the estimate the client computed and sent (a ``client_inputs``
                                           model: RDFlex's rdrobust), read by Aggregate
    jobs/<job>/stages/<s>/preds/<shard>.npz  out-of-fold predictions of one shard, one array per unit
                                           (named by the unit's key), ``__stats__``, and a unit's
                                           auxiliary array as ``__aux__<unit key>`` where it has one
                                           (PQ/LPQ stage 0: the fold's preliminary propensities,
                                           :func:`aux_array_name`); with store_models each unit's
                                           fitted estimator as ``__model__<unit key>``
                                           (:func:`model_array_name`)
    jobs/<job>/map-runs/<s>/<w>/...        the Distributed Map's ResultWriter output of wave w of stage s
    jobs/<job>/result.json                 the estimate (Aggregate) or the trained model (TrainFinalize)
    jobs/<job>/predictions.npz             every out-of-fold prediction of an estimate (Aggregate): one
                                           (n_obs, n_rep) float64 array per treatment and learner,
                                           ``t<i_treat>_<key>``, and ``d_cols`` (DoubleML's
                                           external_predictions, see fanfit.dml.interop)
    jobs/<job>/train/state/<r>.npz         a train job's model at the start of round r (TrainInit, TrainReduce)
    jobs/<job>/train/rounds/<r>/plan.json  round r's batches, groups and predicted throughput (TrainSchedule)
    jobs/<job>/train/rounds/<r>/workers/<i>.npz  worker i's partial of round r (TrainShard)
    jobs/<job>/train/rounds/<r>/record.json  what round r measured (TrainReduce)
    jobs/<job>/train/throughput.json       the job's per-worker throughput averages (TrainSchedule)
"""

from __future__ import annotations

import re
from typing import Any

from fanfit.errors import InvalidJobError

#: The step of a client request (:func:`client_request_key`) that is not a stage: the client's estimate.
CLIENT_ESTIMATE_STEP = "estimate"


def data_key(digest: str) -> str:
    """Key of a content-addressed data object, from the hex SHA-256 of its bytes."""
    return f"data/{digest}.npz"


#: What a data key looks like: ``data/<sha256 hex>.<ext>`` (content-addressed, one level deep).
DATA_KEY_PATTERN = re.compile(r"data/[0-9a-f]{64}\.[a-z0-9]{2,8}")


def check_data_key(key: Any, *, field: str = "data_key") -> str:
    """Check a data key read from a job file: ``data/<sha256>.npz`` and nothing else.

    Parameters
    ----------
    key : any
        The value of the job file's ``field``.
    field : str
        Its name, for the message.

    Returns
    -------
    str
        ``key``.

    Raises
    ------
    InvalidJobError
        ``key`` is not a string of that form (null, a path that climbs out with ``..``, another
        job's object); the value is not echoed when long.
    """
    if not isinstance(key, str) or not DATA_KEY_PATTERN.fullmatch(key):
        shown = repr(key) if len(repr(key)) <= 100 else f"a {type(key).__name__} value"
        raise InvalidJobError(
            f"{field} must be a data key 'data/<sha256>.npz' as the client uploads it, got {shown}"
        )
    return key


def check_job_key(key: Any, job_id: str, *, field: str) -> str:
    """Check an S3 key read from a job file lies under ``jobs/<job_id>/`` without ``..`` segments.

    Raises
    ------
    InvalidJobError
        It is not a string, lies outside the job's prefix, or has an empty, ``.`` or ``..`` segment.
    """
    if (
        not isinstance(key, str)
        or len(key) > 1024
        or not key.startswith(job_prefix(job_id))
        or any(part in ("", ".", "..") for part in key.split("/"))
    ):
        shown = repr(key) if len(repr(key)) <= 100 else f"a {type(key).__name__} value"
        raise InvalidJobError(
            f"{field} must be a key under {job_prefix(job_id)} without '..' segments, got {shown}"
        )
    return key


def job_prefix(job_id: str) -> str:
    """Prefix under which every object of ``job_id`` lives."""
    return f"jobs/{job_id}/"


def spec_key(job_id: str) -> str:
    """Key of the job spec written by the client."""
    return f"jobs/{job_id}/spec.json"


def input_folds_key(job_id: str, part: int = 0) -> str:
    """Key of the folds the user gave an estimate job (int64, shape (n_obs, n_rep)), written by
    the client; of one ``part`` that selects its rows (its own folds; part 0 keeps the job's key)."""
    name = f"input-folds-p{part}.npy" if part else "input-folds.npy"
    return f"{job_prefix(job_id)}{name}"


def input_init_key(job_id: str) -> str:
    """Key of the initial K-Means centroids the user gave a train job (float64, shape
    (n_clusters, n_features)), written by the client."""
    return f"{job_prefix(job_id)}input-init.npy"


def plan_key(job_id: str) -> str:
    """Key of the plan written by Prepare."""
    return f"jobs/{job_id}/plan.json"


def folds_key(job_id: str, part: int = 0) -> str:
    """Key of the folds array, shape (n_obs, n_rep); of one ``part`` that selects its rows (its own
    folds; part 0 keeps the job's key)."""
    return f"jobs/{job_id}/folds-p{part}.npy" if part else f"jobs/{job_id}/folds.npy"


def units_key(job_id: str, stage: int) -> str:
    """Key of a stage's (repetition, fold, learner) units, as Prepare wrote them."""
    return f"{job_prefix(job_id)}stages/{stage}/units.json"


def schedule_key(job_id: str, stage: int) -> str:
    """Key of a stage's schedule: its waves so far, each with its decision and shard ids."""
    return f"{job_prefix(job_id)}stages/{stage}/schedule.json"


def wave_key(job_id: str, stage: int, wave: int) -> str:
    """Key of the shard list of one wave of a stage (the Distributed Map's ItemReader input)."""
    return f"{job_prefix(job_id)}stages/{stage}/waves/{wave}.json"


def stage_prefix(job_id: str, stage: int) -> str:
    """Prefix of every object of one stage of an estimate (units, schedule, waves, predictions)."""
    return f"{job_prefix(job_id)}stages/{stage}/"


def prepare_record_key(job_id: str, stage: int) -> str:
    """Key of what Prepare measured while planning a stage (seconds, memory; for the cost)."""
    return f"{stage_prefix(job_id, stage)}prepare.json"


def preds_prefix(job_id: str, stage: int) -> str:
    """Prefix of the predictions objects of a stage's shards (:func:`preds_key`)."""
    return f"{stage_prefix(job_id, stage)}preds/"


def map_runs_prefix(job_id: str, stage: int, wave: int) -> str:
    """Prefix the Distributed Map of a wave writes its results under (its ResultWriter's Prefix)."""
    return f"{job_prefix(job_id)}map-runs/{stage}/{wave}"


def stage_inputs_key(job_id: str, stage: int, part: int = 0) -> str:
    """Key of the inputs of ``stage`` computed from the predictions of earlier stages (of one
    ``part`` of a job of several parts; part 0 keeps the key of a job of one)."""
    name = f"inputs-p{part}.json" if part else "inputs.json"
    return f"jobs/{job_id}/stages/{stage}/{name}"


def client_request_key(job_id: str, step: int | str) -> str:
    """Key of the execution's request to the client (a model with ``ModelDef.client_inputs``:
    :class:`~fanfit.jobs.documents.events.ClientRequest`, the task token the execution waits on),
    written by ClientInputs, read by the client.

    Parameters
    ----------
    job_id : str
    step : int or str
        The stage whose inputs the execution waits for (``jobs/<job>/stages/<s>/request.json``), or
        :data:`CLIENT_ESTIMATE_STEP` for the client's estimate (``jobs/<job>/estimate-request.json``).

    Raises
    ------
    InvalidJobError
        ``step`` is neither a stage (an int >= 0) nor :data:`CLIENT_ESTIMATE_STEP`.
    """
    if step == CLIENT_ESTIMATE_STEP:
        return f"{job_prefix(job_id)}estimate-request.json"
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidJobError(
            f"a client request's step is a stage (an int >= 0) or {CLIENT_ESTIMATE_STEP!r}, "
            f"got {step!r}"
        )
    return f"{stage_prefix(job_id, step)}request.json"


def client_estimate_key(job_id: str) -> str:
    """Key of the estimate the client computed and sent (a model with ``ModelDef.client_inputs``:
    RDFlex's ``rdrobust`` on the client), written by the client, read by Aggregate."""
    return f"{job_prefix(job_id)}client-estimate.json"


def preds_key(job_id: str, stage: int, shard_id: str) -> str:
    """Key of the out-of-fold predictions of one shard."""
    return f"{preds_prefix(job_id, stage)}{shard_id}.npz"


#: Prefix of the name of a unit's auxiliary array inside its shard's predictions object.
AUX_PREFIX = "__aux__"
#: Prefix of a unit's stored model inside its shard's ``.npz`` (:func:`model_array_name`).
MODEL_PREFIX = "__model__"


def aux_array_name(unit_key: str) -> str:
    """Name of a fit unit's auxiliary array inside its shard's predictions object (:func:`preds_key`).

    A stage-0 unit of a split fold procedure (PQ, LPQ: :class:`fanfit.dml.models.FoldSplit`)
    returns, besides its predictions (array ``<unit key>``), its fold's preliminary propensities on
    the first half of the nested split, float64 of shape (1, n_train_1) (PQ) or (3, n_train_1)
    (LPQ); CrossFit stores them as ``__aux__<unit key>`` in the same ``.npz``, and Prepare of
    stage 1 reads them (:func:`fanfit.dml.stage_inputs`).

    Parameters
    ----------
    unit_key : str
        :attr:`fanfit.dml.FitUnit.key`, e.g. ``'s0-t0-r1-f3-ml_m'``.

    Returns
    -------
    str
        E.g. ``'__aux__s0-t0-r1-f3-ml_m'``.
    """
    return f"{AUX_PREFIX}{unit_key}"


def model_array_name(unit_key: str) -> str:
    """Name of a fit unit's fitted estimator inside its shard's predictions object
    (:func:`preds_key`), with ``store_models``: its :func:`fanfit.learners.persist.dumps` bytes as
    a uint8 array, e.g. ``'__model__s0-t0-r1-f3-ml_m'``."""
    return f"{MODEL_PREFIX}{unit_key}"


def result_key(job_id: str) -> str:
    """Key of the job's result."""
    return f"jobs/{job_id}/result.json"


def predictions_key(job_id: str, part: int = 0) -> str:
    """Key of an estimate's out-of-fold predictions (``.npz``; :mod:`fanfit.dml.interop` layout),
    of one ``part`` of a job of several parts (part 0 keeps the key of a job of one)."""
    name = f"predictions-p{part}.npz" if part else "predictions.npz"
    return f"{job_prefix(job_id)}{name}"


def train_state_key(job_id: str, round_index: int) -> str:
    """Key of a train job's model at the start of round ``round_index`` (``.npz``)."""
    return f"{job_prefix(job_id)}train/state/{round_index:05d}.npz"


def train_state_prefix(job_id: str) -> str:
    """Prefix of a train job's model states (:func:`train_state_key`), for listing them."""
    return f"{job_prefix(job_id)}train/state/"


def train_state_index(job_id: str, key: str) -> int | None:
    """The round of a model state's key (:func:`train_state_key`); None for any other key."""
    prefix = train_state_prefix(job_id)
    name = key[len(prefix) :] if key.startswith(prefix) else ""
    return int(name[:-4]) if name.endswith(".npz") and name[:-4].isdigit() else None


def train_group_state_key(job_id: str, round_index: int, group: int) -> str:
    """Key of one DS-Sync group's model at the start of round ``round_index`` (``.npz``), shared by
    that group's members: only round 0's (group 0, every worker, the first model); later rounds'
    models are their groups' averages of the round before's partials, computed by each worker."""
    return f"{job_prefix(job_id)}train/state/{round_index:05d}/groups/{group:03d}.npz"


def train_worker_record_key(job_id: str, round_index: int, worker: int) -> str:
    """Key of one DS-Sync worker's record of a round (``.json``: its statistics, loss and batch,
    without the model), merged into the round's record by the next TrainSchedule or TrainFinalize."""
    return f"{job_prefix(job_id)}train/rounds/{round_index:05d}/workers/{worker:03d}.json"


def train_round_plan_key(job_id: str, round_index: int) -> str:
    """Key of a round's plan: per-worker batches, DS-Sync groups, predicted throughput."""
    return f"{job_prefix(job_id)}train/rounds/{round_index:05d}/plan.json"


def train_partial_key(job_id: str, round_index: int, worker: int) -> str:
    """Key of one worker's partial of a round (``.npz``)."""
    return f"{job_prefix(job_id)}train/rounds/{round_index:05d}/workers/{worker:03d}.npz"


def train_round_key(job_id: str, round_index: int) -> str:
    """Key of a round's record: per-worker batch, compute seconds, throughput; round time."""
    return f"{job_prefix(job_id)}train/rounds/{round_index:05d}/record.json"


def train_stop_key(job_id: str) -> str:
    """Key of a train job's stop marker (``.json``, :class:`~fanfit.jobs.documents.train.TrainStop`):
    written when the job failed (a worker's step raised, or the state machine's failure branch) or
    was cancelled; a DS-Sync segment's worker that finds it (of its own execution) stops at once
    instead of waiting for its group (:func:`fanfit.jobs.train.shard.wait_for_group`).
    ``orchestrator/train.asl.json`` writes the same key in its failure branch."""
    return f"{job_prefix(job_id)}train/stop.json"


def estimate_stop_key(job_id: str) -> str:
    """Key of an estimate job's stop marker (``.json``, the same document as
    :func:`train_stop_key`'s, :class:`~fanfit.jobs.documents.train.TrainStop`): written when the
    job failed (the state machine's failure branch) or was cancelled; a CrossFit shard that finds
    it (of its own execution) between two units stops at once and writes no predictions
    (:mod:`fanfit.jobs.stop`). ``orchestrator/estimate.asl.json`` writes the same key in its
    failure branch."""
    return f"{job_prefix(job_id)}stop.json"


def train_throughput_key(job_id: str) -> str:
    """Key of a train job's per-worker throughput averages (an ``EwmaThroughput`` dict)."""
    return f"{job_prefix(job_id)}train/throughput.json"


def shard_id_of_preds_key(key: str) -> str:
    """The shard id of a predictions key (:func:`preds_key`): ``.../preds/00012.npz`` -> ``00012``."""
    return key.rsplit("/", 1)[-1].removesuffix(".npz")


def train_rounds_prefix(job_id: str) -> str:
    """Prefix of a train job's per-round objects (plans, partials, records)."""
    return f"{job_prefix(job_id)}train/rounds/"


def is_train_round_key(key: str) -> bool:
    """Whether ``key`` is a round record (:func:`train_round_key`), of any job and round."""
    return "/train/rounds/" in key and key.endswith("/record.json")
