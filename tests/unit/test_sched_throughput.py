"""Throughput observations, workload signatures, memory scaling and the EWMA predictor."""

from __future__ import annotations

import json
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fanfit.errors import InvalidJobError
from fanfit.sched.resources import lambda_resource, resource_memory_mb
from fanfit.sched.throughput import (
    DEFAULT_ALPHA,
    EwmaThroughput,
    ShardObservation,
    ThroughputEntry,
    ThroughputPredictor,
    batched_throughput,
    lambda_vcpus,
    scale_throughput,
    workload_signature,
)

SIG = workload_signature("estimate", {"class": "RandomForestRegressor"}, 9)


def obs(samples: int, compute_s: float, resource: str = "lambda-1769", **kw) -> ShardObservation:
    fields = {"io_s": 0.5, "memory_mb": resource_memory_mb(resource) or 4096, "cold_start": False}
    return ShardObservation(
        samples, compute_s, resource=resource, signature=SIG, **{**fields, **kw}
    )


def test_workload_signature_is_canonical_and_discriminating() -> None:
    # GIVEN the same inputs in another key order and with numpy ints, and inputs that differ
    a = workload_signature("estimate", {"class": "Lasso", "alpha": 0.1}, 9, n_classes=2)
    b = workload_signature("estimate", {"alpha": 0.1, "class": "Lasso"}, np.int64(9), n_classes=2)
    c = workload_signature("estimate", {"class": "Lasso", "alpha": 0.2}, 9, n_classes=2)
    d = workload_signature("train", {"class": "Lasso", "alpha": 0.1}, 9, n_classes=2)
    # THEN equal inputs give one key, any difference another, and the kind stays readable
    assert a == b
    assert len({a, c, d}) == 3
    assert a.startswith("estimate-") and len(a) == len("estimate-") + 16
    # AND inputs that are not JSON are refused
    with pytest.raises(InvalidJobError):
        workload_signature("estimate", object(), 9)
    with pytest.raises(InvalidJobError):
        workload_signature("", "ols", 9)


def test_lambda_cpu_share_and_scaling() -> None:
    # THEN 1,769 MB is one vCPU, the share is proportional below and capped at six vCPUs
    assert lambda_vcpus(1769) == 1.0
    assert lambda_vcpus(884.5) == 0.5
    assert lambda_vcpus(10240) == pytest.approx(10240 / 1769)
    assert lambda_vcpus(20000) == 6.0
    # AND a single-threaded workload speeds up with memory only up to one vCPU
    assert scale_throughput(100.0, 1769, 884.5) == pytest.approx(50.0)
    assert scale_throughput(100.0, 1769, 3538) == pytest.approx(100.0)
    # AND a 4-thread workload up to four vCPUs
    assert scale_throughput(100.0, 1769, 3538, threads=4) == pytest.approx(200.0)
    assert scale_throughput(100.0, 1769, 10240, threads=4) == pytest.approx(400.0)
    with pytest.raises(InvalidJobError):
        scale_throughput(100.0, 0, 1769)
    assert lambda_resource(1769) == "lambda-1769" and resource_memory_mb("gpu:g4dn.xlarge") is None


def test_observation_validates_and_round_trips_through_dynamodb_types() -> None:
    # GIVEN an observation
    o = obs(1000, 4.0, cold_start=True)
    # THEN its throughput is samples per compute second
    assert o.samples_per_s == 250.0
    # WHEN it goes through JSON with Decimal numbers (what DynamoDB gives back) and str numbers
    as_decimal = json.loads(json.dumps(o.to_dict()), parse_float=Decimal)
    as_str = {k: str(v) if isinstance(v, int | float) else v for k, v in o.to_dict().items()}
    # THEN it reads back equal
    assert ShardObservation.from_dict(as_decimal) == o
    assert ShardObservation.from_dict(as_str) == o
    # AND malformed observations are refused
    with pytest.raises(InvalidJobError):
        obs(1000, 0.0)
    with pytest.raises(InvalidJobError):
        ShardObservation.from_dict({k: v for k, v in o.to_dict().items() if k != "samples"})
    with pytest.raises(InvalidJobError):
        ShardObservation.from_dict({**o.to_dict(), "compute_s": "nan"})


def test_ewma_first_observation_then_weighted_average() -> None:
    # GIVEN the default predictor, which satisfies the protocol
    p = EwmaThroughput()
    assert isinstance(p, ThroughputPredictor) and p.alpha == DEFAULT_ALPHA == 0.3
    assert p.predict(SIG, "lambda-1769") is None
    # WHEN it sees 100 then 200 samples/s
    p.update(obs(100, 1.0, io_s=1.0))
    assert p.predict(SIG, "lambda-1769") == 100.0
    p.update(obs(400, 2.0, io_s=2.0))
    # THEN the estimate is 0.3 * 200 + 0.7 * 100, and the I/O seconds average the same way
    assert p.predict(SIG, "lambda-1769") == pytest.approx(130.0)
    assert p.predict_io(SIG, "lambda-1769") == pytest.approx(1.3)
    assert p.entries[0].n_observations == 2


def test_the_overhead_of_warm_shards_is_averaged_apart_from_cold_starts() -> None:
    # GIVEN a probe shard that started a fresh environment (8 s of overhead on the local stack)
    p = EwmaThroughput()
    p.update(obs(100, 1.0, io_s=8.0, cold_start=True))
    # THEN it predicts the overhead until a warm shard is seen
    assert p.predict_io(SIG, "lambda-1769") == 8.0
    # WHEN a warm shard measures 1 s THEN it replaces the cold average, which is kept apart
    p.update(obs(100, 1.0, io_s=1.0))
    assert p.predict_io(SIG, "lambda-1769") == 1.0
    assert p.entries[0].cold_io_s == 8.0 and p.entries[0].n_warm == 1
    # WHEN another cold start (6 s) then a warm shard (2 s) follow
    p.update(obs(100, 1.0, io_s=6.0, cold_start=True))
    assert p.predict_io(SIG, "lambda-1769") == 1.0
    p.update(obs(100, 1.0, io_s=2.0))
    # THEN each average takes its own kind, and the throughput every shard
    entry = p.entries[0]
    assert entry.io_s == pytest.approx(0.3 * 2.0 + 0.7 * 1.0)
    assert entry.cold_io_s == pytest.approx(0.3 * 6.0 + 0.7 * 8.0)
    assert (entry.n_observations, entry.n_warm) == (4, 2)
    # ... and the entry reads back from DynamoDB's numbers; one stored before has no warm count
    assert (
        ThroughputEntry.from_dict(json.loads(json.dumps(entry.to_dict()), parse_float=Decimal))
        == entry
    )
    old = {k: v for k, v in entry.to_dict().items() if k not in ("cold_io_s", "n_warm")}
    assert ThroughputEntry.from_dict(old).n_warm == 0
    assert "cold_io_s" not in ThroughputEntry(SIG, "lambda-1769", 1.0, 1.0, 1).to_dict()


@settings(max_examples=50, deadline=None)
@given(
    alpha=st.floats(min_value=0.01, max_value=1.0),
    speeds=st.lists(st.floats(min_value=1.0, max_value=1e6), min_size=1, max_size=30),
)
def test_ewma_stays_within_the_observed_range_and_tracks_a_constant(alpha, speeds) -> None:
    # GIVEN any sequence of throughputs
    p = EwmaThroughput(alpha=alpha)
    for v in speeds:
        p.update(obs(1000, 1000 / v))
    estimate = p.predict(SIG, "lambda-1769")
    # THEN the estimate lies between the smallest and the largest observation
    assert estimate is not None
    assert min(speeds) * (1 - 1e-9) <= estimate <= max(speeds) * (1 + 1e-9)
    # AND m observations of a new constant speed shrink the gap to it by (1 - alpha) ** m
    for _ in range(20):
        p.update(obs(500, 1.0))
    gap = p.predict(SIG, "lambda-1769") - 500.0
    assert gap == pytest.approx((1 - alpha) ** 20 * (estimate - 500.0), rel=1e-6, abs=1e-6)


def test_ewma_scales_from_the_nearest_memory_and_keys_are_separate() -> None:
    # GIVEN history at 1,769 MB and 7,076 MB for a 4-thread workload, and on a GPU
    p = EwmaThroughput(threads=4)
    p.update(obs(100, 1.0, resource="lambda-1769"))
    p.update(obs(360, 1.0, resource="lambda-7076"))
    p.update(obs(5000, 1.0, resource="gpu:g4dn.xlarge"))
    # THEN a known key is predicted from its own history
    assert p.predict(SIG, "lambda-7076") == 360.0
    # AND 3,538 MB (ratio 2 to both) scales from the smaller size: 2 vCPUs vs 1
    assert p.predict(SIG, "lambda-3538") == pytest.approx(200.0)
    # AND 6,000 MB scales from the nearer 7,076 MB
    assert p.predict(SIG, "lambda-6000") == pytest.approx(360.0 * (6000 / 1769) / 4)
    # AND a resource without history and without a memory size has no prediction
    assert p.predict(SIG, "batch-cpu") is None
    assert p.predict("other-signature", "lambda-1769") is None


def test_ewma_serialises_to_plain_dicts() -> None:
    # GIVEN a predictor with history on two keys
    p = EwmaThroughput(alpha=0.5, threads=2)
    for samples in (100, 300):
        p.update(obs(samples, 1.0))
    p.update(obs(50, 1.0, resource="gpu:g4dn.xlarge"))
    # WHEN it is written as JSON and read back with Decimal numbers
    d = json.loads(json.dumps(p.to_dict()), parse_float=Decimal)
    q = EwmaThroughput.from_dict(d)
    # THEN it predicts the same and keeps updating the same way
    assert q.to_dict() == p.to_dict()
    for r in (p, q):
        r.update(obs(400, 1.0))
    assert q.predict(SIG, "lambda-1769") == p.predict(SIG, "lambda-1769") == 300.0
    # AND bad parameters are refused
    with pytest.raises(InvalidJobError):
        EwmaThroughput(alpha=0.0)
    with pytest.raises(InvalidJobError):
        EwmaThroughput.from_dict({"entries": [{"signature": SIG}]})


def test_a_batched_throughput_scales_down_to_smaller_batches_and_not_up() -> None:
    # GIVEN 50,000 rows/s measured with 100 fits to a batch
    # THEN 10 fits to a batch are predicted at a tenth (a batch's seconds do not shrink), 500 at
    # the measured figure (they grow at most in proportion), and 100 exactly
    assert batched_throughput(50_000.0, 100, 10) == pytest.approx(5_000.0)
    assert batched_throughput(50_000.0, 100, 500) == 50_000.0
    assert batched_throughput(50_000.0, 100, 100) == 50_000.0
    assert batched_throughput(800.0, 1, 1) == 800.0
    for bad in ((0.0, 1, 1), (1.0, 0.5, 1), (1.0, 1, 0)):
        with pytest.raises(InvalidJobError):
            batched_throughput(*bad)


def test_the_table_keeps_the_batch_its_gpu_figure_was_measured_at() -> None:
    # GIVEN GPU observations of batched Torch fits: 40 fits to a batch, then 80
    gpu = "gpu:g4dn.xlarge"
    p = EwmaThroughput(alpha=0.5)
    p.update(obs(40_000, 2.0, resource=gpu, fits_per_batch=40))
    p.update(obs(80_000, 2.0, resource=gpu, fits_per_batch=80))
    (entry,) = p.entries
    # THEN the entry averages the batch size as it averages the throughput
    assert entry.samples_per_s == pytest.approx(30_000.0)
    assert entry.fits_per_batch == pytest.approx(60.0)
    # AND predicts a smaller batch's throughput in proportion, a larger one's as measured
    assert p.predict_batched(SIG, gpu, 6) == pytest.approx(3_000.0)
    assert p.predict_batched(SIG, gpu, 600) == pytest.approx(30_000.0)
    assert p.predict_batched(SIG, "gpu:other", 6) is None
    # AND the figure survives the table (DynamoDB numbers), while unbatched entries keep their
    # fields as before
    q = EwmaThroughput.from_dict(json.loads(json.dumps(p.to_dict()), parse_float=Decimal))
    assert q.entries == p.entries
    assert "fits_per_batch" not in ThroughputEntry(SIG, "lambda-1769", 1.0, 0.1, 1).to_dict()
    assert ShardObservation.from_dict(obs(10, 1.0).to_dict()).fits_per_batch == 1.0
    with pytest.raises(InvalidJobError):
        obs(10, 1.0, fits_per_batch=0.5)
