"""Name the shard that made a wave's Distributed Map fail, and its last error."""

from __future__ import annotations

import json

from fanfit import storage
from fanfit.jobs.documents.estimate import MapRunChild, ShardFailure, parse_list
from fanfit.jobs.estimate.data import read_schedule

#: Longest last error kept in the job record and in the execution's cause, characters.
MAX_ERROR_CHARS = 2_000


def error_text(error: str, cause: str) -> str:
    """``'<name>: <message>'`` from a Step Functions error and cause (a Lambda's cause is the JSON
    of its ``errorType``/``errorMessage``), at most :data:`MAX_ERROR_CHARS` characters."""
    message = cause or ""
    try:
        parsed = json.loads(cause)
    except (TypeError, ValueError):
        parsed = None
    if isinstance(parsed, dict):
        error = str(parsed.get("errorType") or error)
        message = str(parsed.get("errorMessage") or parsed.get("Cause") or cause)
    text = f"{error}: {message}" if message else str(error)
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def map_run_children(store: storage.JobStore, prefix: str, outcome: str) -> list[MapRunChild]:
    """The child executions a Map Run's ResultWriter listed under ``prefix`` in its
    ``<outcome>_*.json`` files (``outcome``: ``SUCCEEDED`` or ``FAILED``)."""
    children: list[MapRunChild] = []
    for key in store.list_keys(prefix):
        if key.rsplit("/", 1)[-1].startswith(f"{outcome}_"):
            entries = store.get_json(key)
            entries = (
                [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
            )
            children += parse_list(MapRunChild, entries, source=key)
    return children


def _failed_children(store: storage.JobStore, prefix: str) -> list[tuple[str, str, str]]:
    """``(shard_id, error, cause)`` of each failed child execution in a Map Run's ResultWriter
    output (``FAILED_*.json`` under ``prefix``)."""
    out = []
    for child in map_run_children(store, prefix, "FAILED"):
        shard_id = child.shard_id_in()
        if shard_id is not None:
            out.append((shard_id, child.Error or "", child.Cause or ""))
    return sorted(out)


def describe_failure(
    store: storage.JobStore,
    records: storage.JobRecords,
    job_id: str,
    stage: int,
    wave: int,
    *,
    error: str,
    cause: str,
) -> ShardFailure:
    """Name the shard that made a wave's Distributed Map fail, and record it in the job record.

    The failed shards and their last errors come from the Map Run's ResultWriter output
    (``FAILED_*.json`` under the wave's ``map_runs_prefix``: each failed child execution's input,
    error and cause); where it wrote none, from the Map's own error when it names a shard, else the
    wave's first shard whose predictions object is missing, with the Map's error as its last error.

    Parameters
    ----------
    store, records : JobStore, JobRecords
    job_id : str
    stage, wave : int
        The wave whose Map failed.
    error, cause : str
        The Map's error name and cause, as its Catch received them.

    Returns
    -------
    ShardFailure
        ``Error`` ``"ShardFailedError"`` and a ``Cause`` naming the shard (stage, wave, id) and its
        last error, for the state machine's Fail state; ``failed_shard``, ``failed_stage``,
        ``failed_wave``, ``shard_error`` and ``failed_shards`` go into the job record.
        When no shard can be named (the Map failed for another reason), ``Error`` and ``Cause``
        are the Map's own.
    """
    schedule = read_schedule(store, job_id, stage)
    entry = next((w for w in schedule.waves if w.wave == wave), None)
    if entry is None:
        return ShardFailure(Error=error, Cause=cause)
    failed = _failed_children(store, entry.map_runs_prefix)
    if not failed:
        ids = [sh.shard_id for sh in entry.shards]
        named = [i for i in ids if f"shard {i}" in cause or f'"shard_id": "{i}"' in cause]
        written = set(store.list_keys(storage.preds_prefix(job_id, stage)))
        missing = [i for i in ids if storage.preds_key(job_id, stage, i) not in written]
        failed = [(i, error, cause) for i in (named or missing)]
    if not failed:
        return ShardFailure(Error=error, Cause=cause)
    shard_id, shard_err, shard_cause = failed[0]
    last_error = error_text(shard_err or error, shard_cause or cause)
    ids = sorted({f[0] for f in failed})
    records.update(
        job_id,
        failed_shard=shard_id,
        failed_stage=stage,
        failed_wave=wave,
        shard_error=last_error,
        failed_shards=ids[:100],
    )
    more = f" ({len(ids)} shards failed: {', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''})"
    return ShardFailure(
        Error="ShardFailedError",
        Cause=(
            f"shard {shard_id} (stage {stage}, wave {wave}) kept failing after its retries: "
            f"{last_error}{more if len(ids) > 1 else ''}. Fix the cause and run `fanfit resume "
            f"{job_id}`: only the shards without predictions run again."
        ),
    )
