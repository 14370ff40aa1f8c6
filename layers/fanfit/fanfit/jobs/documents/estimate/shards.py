"""The shards of an estimate job: what CrossFit writes and returns, and what Schedule reads of a failed wave.

:class:`ShardStats` (the ``__stats__`` of a shard's predictions object), :class:`CrossFitOutput`
(CrossFit's return, in the Map Run's ResultWriter output), :class:`MapRunChild` (one child execution
in a Map Run's ResultWriter file) and :class:`ShardFailure` (the failed wave's error and cause).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ConfigDict

from fanfit.jobs.documents import Document
from fanfit.jobs.documents.estimate.common import _OmitNone, _Placement

__all__ = ["CrossFitOutput", "MapRunChild", "ShardFailure", "ShardStats"]


class ShardFailure(Document):
    """What Schedule returns for a failed wave: the error and cause of the job's Fail state."""

    Error: str
    Cause: str


class MapRunChild(Document):
    """One child execution in a Map Run's ResultWriter file (``SUCCEEDED_*.json``, ``FAILED_*.json``):
    Step Functions' format, of which only these fields are read."""

    model_config = ConfigDict(extra="ignore")

    StartDate: str | None = None
    StopDate: str | None = None
    Input: Any = None
    Output: Any = None
    Error: str | None = None
    Cause: str | None = None

    def shard_id_out(self) -> str | None:
        """The shard id in the child's output (CrossFit's :class:`CrossFitOutput`), if there is one."""
        return _shard_id(self.Output, ("shard_id",))

    def shard_id_in(self) -> str | None:
        """The shard id in the child's input (the Map item: ``{"shard": {"shard_id": ...}}``)."""
        return _shard_id(self.Input, ("shard", "shard_id"))


def _shard_id(value: Any, path: tuple[str, ...]) -> str | None:
    try:
        obj = json.loads(value) if isinstance(value, str) else value
        for name in path:
            obj = obj[name]
    except (KeyError, TypeError, ValueError):
        return None
    return None if obj is None else str(obj)


class ShardStats(_OmitNone):
    """A shard's statistics: the ``__stats__`` array of its predictions object, and the records
    of ``timings.shards`` in ``result.json`` (there with ``billed_gb_s``).

    Times are epoch seconds (``started_at``, ``ended_at``) and seconds (``fit_s``, ``io_s``);
    ``unit_fit_s`` maps unit keys to fit seconds; ``resource`` is ``lambda-<MB>`` or the GPU worker's.
    ``unit_batch`` maps unit keys to the fits trained together with the unit (absent: each alone).
    """

    shard_id: str
    stage: int
    n_units: int
    unit_fit_s: dict[str, float]
    started_at: float
    fit_s: float
    io_s: float
    memory_mb: int
    resource: str | None = None
    placement: _Placement = "lambda"
    peak_rss_mb: float
    cold_start: bool
    pid: int | None = None
    ended_at: float
    billed_gb_s: float | None = None
    unit_batch: dict[str, int] | None = None


class CrossFitOutput(ShardStats):
    """What CrossFit returns: its predictions object's key and its statistics (``io_s`` counting
    the write)."""

    preds_key: str
