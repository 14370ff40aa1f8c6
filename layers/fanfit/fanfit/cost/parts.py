"""What each part of a job of several parts (a QTE's quantiles and levels, an APOS's levels) cost.

The parts of one job share its shards, waves and steps, so AWS bills the job, not its parts. A part
is attributed its share of the fitting: each shard's billed GB-seconds are split among the parts
whose units it fitted in proportion to the units' fit seconds (``unit_fit_s`` of the shard's
statistics; by unit count where a shard measured none), and the part's share of all shards'
billed GB-seconds is its share of the job's total cost (the job's other items, Prepare, Schedule,
Aggregate, requests and state transitions, spread in the same proportion). A unit's part is named
by its key (:attr:`fanfit.dml.FitUnit.key`: ``p3-s1-t0-r2-f4-ml_g`` is part 3; no prefix, part 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fanfit.cost.pricing import lambda_cost_usd
from fanfit.dml.units import FitUnit
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.estimate import ShardStats

__all__ = ["PartCost", "part_costs"]


@dataclass(frozen=True)
class PartCost:
    """One part's share of its job.

    Attributes
    ----------
    part : int
    label : str
    n_units : int
        Units fitted (every stage).
    fit_s : float
        Seconds its units' fits took (sum over its units, each as its shard measured it).
    billed_gb_s : float
        Its share of the shards' billed Lambda GB-seconds.
    share : float
        ``billed_gb_s`` over all shards' billed GB-seconds (0 when none was billed).
    usd : float
        ``share`` of the job's total cost, USD.
    """

    part: int
    label: str
    n_units: int
    fit_s: float
    billed_gb_s: float
    share: float
    usd: float

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: every attribute."""
        return {"part": self.part, "label": self.label, "n_units": self.n_units,
                "fit_s": self.fit_s, "billed_gb_s": self.billed_gb_s, "share": self.share,
                "usd": self.usd}  # fmt: skip


def part_costs(
    shards: Sequence[ShardStats | Mapping[str, Any]],
    labels: Sequence[str],
    total_usd: float,
) -> list[PartCost]:
    """Each part's fit seconds, billed GB-seconds and share of the job's cost (see the module
    docstring for the attribution).

    Parameters
    ----------
    shards : sequence of ShardStats (or their dicts)
        The job's shard records (``timings.shards`` of ``result.json``); a record without
        ``billed_gb_s`` is billed from its start, end and memory
        (:func:`fanfit.cost.pricing.lambda_cost_usd`).
    labels : sequence of str
        Every part's label, in order (``result.json``'s ``parts``).
    total_usd : float
        The job's total cost (:attr:`fanfit.cost.JobCost.total_usd`).

    Returns
    -------
    list of PartCost
        One per label, in order; the shares sum to 1 when any shard was billed.

    Raises
    ------
    fanfit.errors.InvalidJobError
        A unit key of a part the labels do not have, or one that is no unit key.
    fanfit.errors.InvalidDocumentError
        A shard record that does not fit :class:`ShardStats`.
    """
    n_parts = len(labels)
    units, fit_s, gb_s = [0] * n_parts, [0.0] * n_parts, [0.0] * n_parts
    for i, raw in enumerate(shards):
        s = (
            raw
            if isinstance(raw, ShardStats)
            else ShardStats.parse(raw, source=f"shard record {i}")
        )
        billed = s.billed_gb_s
        if billed is None:
            billed = lambda_cost_usd(s.ended_at - s.started_at, s.memory_mb)[0]
        per_part: dict[int, float] = {}
        count: dict[int, int] = {}
        for key, seconds in s.unit_fit_s.items():
            k = FitUnit.from_key(key).part
            if not 0 <= k < n_parts:
                raise InvalidJobError(f"shard {s.shard_id} fitted unit {key} of part {k}; the job "
                                      f"has {n_parts} parts")  # fmt: skip
            per_part[k] = per_part.get(k, 0.0) + float(seconds)
            count[k] = count.get(k, 0) + 1
        total_fit = sum(per_part.values())
        n = sum(count.values())
        for k in count:
            units[k] += count[k]
            fit_s[k] += per_part[k]
            weight = per_part[k] / total_fit if total_fit > 0 else count[k] / n
            gb_s[k] += billed * weight
    all_gb_s = sum(gb_s)
    return [
        PartCost(
            part=k,
            label=str(labels[k]),
            n_units=units[k],
            fit_s=fit_s[k],
            billed_gb_s=gb_s[k],
            share=gb_s[k] / all_gb_s if all_gb_s > 0 else 0.0,
            usd=(gb_s[k] / all_gb_s if all_gb_s > 0 else 0.0) * float(total_usd),
        )  # fmt: skip
        for k in range(n_parts)
    ]
