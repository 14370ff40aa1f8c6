"""A train round with Lambda and GPU workers: Proteus' drift-plus-penalty split (hybrid_batches)
and the round documents that record it."""

from __future__ import annotations

import numpy as np
import pytest

from fanfit.errors import InvalidDocumentError
from fanfit.jobs.documents.train import RoundPlan, RoundRecord, TrainWorker, WorkerRecord
from fanfit.jobs.train.schedule import BACKLOG_SLACK, hybrid_batches

WORKERS = [
    TrainWorker(worker=0, memory_mb=1769),
    TrainWorker(worker=1, memory_mb=885),
    TrainWorker(worker=2, memory_mb=15000, placement="gpu"),
]
NO_BOUND = [10**9] * 3


def _times(batches: np.ndarray, speeds: np.ndarray) -> tuple[float, float]:
    return float(batches[:2].sum() / speeds[:2].sum()), float(batches[2] / speeds[2])


@pytest.mark.parametrize(
    "speeds", [[1000.0, 500.0, 4000.0], [1000.0, 500.0, 400.0], [300.0, 300.0, 600.0]]
)
@pytest.mark.parametrize("total", [240, 5000])
def test_a_hybrid_round_ends_within_the_slack_of_the_even_split(speeds, total):
    # GIVEN two Lambda workers and the GPU worker with measured speeds (samples/s)
    v = np.asarray(speeds)
    # WHEN the round's samples are split by drift-plus-penalty
    batches, dispatch = hybrid_batches(WORKERS, total, v, NO_BOUND)
    # THEN every sample is placed, every worker gets at least one, and the slower side ends at
    # most the slack (plus a fragment's rounding) after the even split's time
    assert int(batches.sum()) == total and batches.min() >= 1
    balanced = (total - 3) / v.sum()
    assert max(_times(batches, v)) <= balanced * (1 + BACKLOG_SLACK) + 4 / v[:2].sum()
    # ... and the plan records both queues: their workers, prices and samples
    lam, gpu = dispatch.queues
    assert (lam.name, lam.workers, gpu.name, gpu.workers) == ("lambda", [0, 1], "gpu", [2])
    assert lam.samples + gpu.samples == total and lam.samples == int(batches[:2].sum())
    assert lam.fragments + gpu.fragments == dispatch.n_fragments == min(total - 3, 200)
    assert lam.samples_per_s == pytest.approx(v[:2].sum()) and lam.backlog_start == 0.0


def test_the_cheaper_side_takes_more_than_its_share_and_lb_bsp_splits_it():
    # GIVEN equal Lambda and GPU throughput (Lambda is cheaper per sample at these prices)
    v = np.array([500.0, 500.0, 1000.0])
    batches, dispatch = hybrid_batches(WORKERS, 10_003, v, NO_BOUND)
    lam, gpu = dispatch.queues
    # THEN Lambda is the cheaper queue, takes more than half, and its two workers split its
    # samples evenly (LB-BSP by their equal speeds)
    assert lam.cost_per_sample_usd < gpu.cost_per_sample_usd and dispatch.V > 0
    assert 5_000 < lam.samples <= 5_000 * (1 + BACKLOG_SLACK) + 50
    assert abs(int(batches[0]) - int(batches[1])) <= 1


def _record(compute_s: list[float], batches: list[int], start_s: list[float]) -> RoundRecord:
    # each worker starts start_s after the schedule (at epoch 100), computes, and writes at once
    memory, resources = (1769, 885, 15000), ("lambda-1769", "lambda-885", "gpu:g4dn.xlarge")
    workers = [
        WorkerRecord(
            worker=i,
            memory_mb=memory[i],
            resource=resources[i],
            batch=b,
            compute_s=t,
            io_s=0.0,
            samples_per_s=b / t,
            predicted_samples_per_s=1.0,
            cold_start=False,
            started_at=100.0 + s0,
            ended_at=100.0 + s0 + t,
            peak_rss_mb=100.0,
        )
        for i, (b, t, s0) in enumerate(zip(batches, compute_s, start_s))
    ]
    return RoundRecord(round=0, phase="train", workers=workers, round_s=max(compute_s),
                       idle_fraction=0.0, span_s=max(compute_s), groups=[[0, 1, 2]],
                       prediction_source="job")  # fmt: skip


def test_a_side_that_starts_later_starts_with_a_backlog_and_gets_less():
    # GIVEN the speeds, and a last round where the GPU worker started 2 s after the schedule (its
    # Batch job), the Lambda workers 0.5 s after it
    v = np.array([500.0, 500.0, 1000.0])
    last = _record([2.0, 2.0, 3.0], [1000, 1000, 3000], [0.5, 0.5, 2.0])
    # WHEN the next round is split with and without that record
    _, fresh = hybrid_batches(WORKERS, 10_003, v, NO_BOUND)
    batches, after = hybrid_batches(WORKERS, 10_003, v, NO_BOUND, last, last_scheduled_at=100.0)
    # THEN the GPU starts 1.5 s of its throughput behind, and gets fewer samples: both sides end
    # about together once the start-up is counted
    lam, gpu = after.queues
    assert (lam.overhead_s, gpu.overhead_s) == pytest.approx((0.5, 2.0))
    assert (lam.backlog_start, gpu.backlog_start) == pytest.approx((0.0, 1500.0))
    assert gpu.samples < fresh.queues[1].samples - 500
    end = [0.5 + batches[:2].sum() / v[:2].sum(), 2.0 + batches[2] / v[2]]
    assert abs(end[0] - end[1]) <= BACKLOG_SLACK * max(end) + 0.05


def test_a_side_beyond_its_memory_bounds_gives_the_excess_to_the_other():
    # GIVEN a GPU worker far faster than Lambda, but whose memory holds 100 samples
    v = np.array([10.0, 10.0, 10_000.0])
    batches, dispatch = hybrid_batches(WORKERS, 1_000, v, [10**6, 10**6, 100])
    # THEN it gets its bound and the Lambda workers the rest
    assert int(batches[2]) == 100 and int(batches[:2].sum()) == 900
    assert dispatch.queues[1].samples == 100


def test_round_documents_carry_the_dispatch_and_name_a_bad_field():
    # GIVEN a round plan with a dispatch
    batches, dispatch = hybrid_batches(WORKERS, 240, np.array([1.0, 0.5, 4.0]), NO_BOUND)
    plan = RoundPlan(round=0, phase="train", max_concurrency=3, batches=batches.tolist(),
                     groups=[[0, 1, 2]], predicted_samples_per_s=[1.0, 0.5, 4.0],
                     prediction_source="cpu-share", started_at=0.0, ended_at=1.0,
                     dispatch=dispatch)  # fmt: skip
    # WHEN it is written and read back THEN it is the same; a record carries it too
    data = plan.to_json_dict()
    assert RoundPlan.parse(data) == plan and data["dispatch"]["rule"] == "drift-plus-penalty"
    record = _record([1.0, 1.0, 1.0], [1, 1, 1], [0.0, 0.0, 0.0])
    record.dispatch = dispatch
    assert RoundRecord.parse(record.to_json_dict()).dispatch == dispatch
    # ... and a negative V or an unknown queue is refused, naming the field
    data["dispatch"]["V"] = -1.0
    with pytest.raises(InvalidDocumentError, match="dispatch.V"):
        RoundPlan.parse(data, source="rounds/0/plan.json")
    data["dispatch"]["V"] = 1.0
    data["dispatch"]["queues"][0]["name"] = "tpu"
    with pytest.raises(InvalidDocumentError, match="queues.0.name"):
        RoundPlan.parse(data)
