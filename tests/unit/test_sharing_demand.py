"""An estimate's demand follows its waves (issue 15, item 3).

GIVEN a moto partition table (capacity 4) and an estimate job, WHEN Schedule cuts each wave of a
stage, THEN the job's registered demand is the concurrency of the wave it is about to run (its
shards at once, capped by ``max_concurrency`` and by the units that remain), re-registered as a
``"resize"`` event of the partition history, and it falls to :data:`IDLE_DEMAND` once nothing
remains, handing the rest of the capacity to the other jobs.
"""

from __future__ import annotations

import pytest


def test_wave_demand_is_the_waves_concurrency_capped_by_what_remains_and_the_jobs_cap():
    from fanfit.jobs.estimate.demand import stage_demand, wave_demand

    # GIVEN a stage of 16 units and a job cap of 4 THEN Prepare's demand is 4
    assert stage_demand(16, 4) == 4
    # WHEN a wave runs 3 shards at once THEN it asks for 3, not the cap
    assert wave_demand([3], n_units=12, max_concurrency=4) == 3
    # WHEN two resources' shards run side by side THEN their concurrencies add, within the cap
    assert wave_demand([3, 2], n_units=12, max_concurrency=4) == 4
    # WHEN only 2 units remain (the stage's last wave) THEN it asks for 2 at most
    assert wave_demand([4], n_units=2, max_concurrency=8) == 2
    # WHEN the wave has no Lambda shard (all on the GPU worker) THEN no Lambda demand
    assert wave_demand([], n_units=0, max_concurrency=4) == 0


def _jobs(parts) -> dict[str, tuple[int, int]]:
    """job id -> (demand, partition)."""
    return {j["job_id"]: (int(j["demand"]), int(j["partition"])) for j in parts.jobs()}


@pytest.mark.parametrize("n_rep", [2, 3])
def test_a_jobs_demand_equals_its_next_waves_shards_and_falls_to_what_remains(
    job_storage, make_partitions, put_estimate_spec, n_rep
):
    from fanfit import storage
    from fanfit.jobs.estimate.crossfit import crossfit_shard
    from fanfit.jobs.estimate.demand import IDLE_DEMAND
    from fanfit.jobs.estimate.prepare import prepare_stage
    from fanfit.jobs.estimate.schedule import schedule_wave

    store, records, throughput = job_storage
    parts = make_partitions()
    job = f"est-{n_rep}"
    spec_key = put_estimate_spec(store, storage.spec_key(job), n_rep=n_rep, max_concurrency=4)
    # GIVEN the job alone: Prepare registers its stage (4 * n_rep units) capped at 4
    prepare_stage(store, records, job, spec_key, 0, partitions=parts)
    n_units = len(store.get_json(storage.units_key(job, 0)))
    assert _jobs(parts) == {job: (4, 4)}
    done, demands = 0, []
    for wave in range(8):  # bounded: a stage of <= 12 units has a probe wave and one more
        # WHEN Schedule cuts the next wave
        out = schedule_wave(store, records, throughput, job, 0, wave, 1769, 4, partitions=parts)
        demand, held = _jobs(parts)[job]
        if not out.has_wave:
            # THEN with nothing left it asks only for the idle minimum
            assert done == n_units and (demand, held) == (IDLE_DEMAND, IDLE_DEMAND)
            break
        # THEN its demand is the shards the wave runs at once (alone: its whole partition), at
        # most the units that remain
        assert demand == held == out.max_concurrency <= min(4, n_units - done)
        entry = store.get_json(storage.schedule_key(job, 0))["waves"][wave]
        assert entry["partition"]["demand"] == demand
        demands.append(demand)
        for shard in store.get_json(out.shards_key):
            crossfit_shard(store, job, storage.plan_key(job), 0, shard, memory_mb=1769)
            done += len(shard["units"])
    else:
        pytest.fail("the stage did not end within 8 waves")
    # AND the partition history shows each change of demand as a resize of this job
    history = parts.history()
    assert history[0]["event"] == "arrive"
    resized = [h["jobs"][job]["demand"] for h in history[1:]]
    assert all(h["event"] == "resize" and h["job_id"] == job for h in history[1:])
    expected = [d for i, d in enumerate([*demands, IDLE_DEMAND]) if d != ([4, *demands])[i]]
    # (a resize with an unchanged demand registered new completion figures: test_wave_figures.py)
    changes = [d for prev, d in zip([4, *resized], resized, strict=False) if d != prev]
    assert changes == expected and resized[-1] == IDLE_DEMAND


class Running:
    """A ``stepfunctions`` client for which every execution still runs."""

    def describe_execution(self, executionArn: str) -> dict[str, str]:  # noqa: N803 - boto3's name
        return {"executionArn": executionArn, "status": "RUNNING"}


def test_a_lower_demand_hands_the_capacity_to_the_other_jobs(make_partitions):
    from fanfit.jobs.estimate.demand import IDLE_DEMAND, follow_wave
    from fanfit.jobs.sharing import register_job

    parts = make_partitions()
    arn = "arn:aws:states:us-east-1:123456789012:execution:fanfit-estimate:est"
    # GIVEN an estimate (weight 2, its execution recorded) and a train job, both asking for 4
    register_job(parts, "est", "estimate", 4, weight=2.0, execution_arn=arn)
    register_job(parts, "train", "train", 4, sfn=Running())
    assert sum(p for _, p in _jobs(parts).values()) == 4
    # WHEN the estimate's next wave asks for what it already asked THEN nothing is recomputed
    follow_wave(parts, "est", 2.0, demand=4)
    assert len(parts.history()) == 2
    # WHEN its last wave asks for 1 THEN it holds at most 1 and the train job at least the other
    # 3, in one resize (Dorm may leave the estimate 0: it still runs at 1, Partition.concurrency)
    p = follow_wave(parts, "est", 2.0, demand=1)
    assert p is not None and p.demand == 1 and p.lambda_concurrency <= 1 and p.concurrency == 1
    held = _jobs(parts)
    assert held["train"][1] >= 3 and held["est"][1] + held["train"][1] <= 4
    last = parts.history()[-1]
    assert (last["event"], last["job_id"], last["jobs"]["est"]["demand"]) == ("resize", "est", 1)
    # AND the job keeps its weight and execution (a stale check can still drop it)
    item = parts.get("est")
    assert float(item["weight"]) == 2.0 and item["execution_arn"] == arn
    # WHEN nothing is left THEN it asks for IDLE_DEMAND; a job holding no partition is left alone
    assert follow_wave(parts, "est", 2.0, demand=0).demand == IDLE_DEMAND
    assert follow_wave(parts, "gone", 1.0, demand=3) is None and parts.get("gone") is None
    assert follow_wave(None, "est", 1.0, demand=3) is None


def test_the_wave_is_the_plan_its_demand_came_from_when_the_partition_holds_it():
    from types import SimpleNamespace

    from fanfit.jobs.documents.estimate import PartitionUsed
    from fanfit.jobs.estimate.wave import Placement, within_partition

    # GIVEN the wave planned under the job's own cap (4): 3 shards at once, which it registered
    unbound = Placement(gpu_shards=[], lambda_units=[], job_concurrency=4, partition=None)
    sizings = [SimpleNamespace(shards=[["a"], ["b"], ["c"]],
                               decision=SimpleNamespace(max_concurrency=3))]  # fmt: skip

    def read(held: int) -> Placement:  # Schedule's placement under the partition it read
        used = PartitionUsed(lambda_concurrency=held, gpus=0, demand=3, version=1,
                             concurrency=held)  # fmt: skip
        return Placement(gpu_shards=[], lambda_units=[], job_concurrency=min(4, held),
                         partition=used)  # fmt: skip

    # WHEN the partition holds the 3 THEN the wave is that very plan, recorded with the partition
    placement, got = within_partition((unbound, sizings), read(3))
    assert got is sizings
    assert (placement.partition.lambda_concurrency, placement.job_concurrency) == (3, 3)
    # AND with less than it asked for (or no plan) Schedule cuts the wave again within it
    assert within_partition((unbound, sizings), read(2)) is None
    assert within_partition(None, read(3)) is None
