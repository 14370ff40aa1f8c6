"""Lambda limits checked before launch (fanfit.limits).

GIVEN a data shape and the functions' memory sizes, WHEN the job is checked, THEN data that fits
passes with each function's estimated need, and data over a limit raises LambdaLimitError naming
the function, the sizes and the fix.
"""

from __future__ import annotations

import pytest

from fanfit import limits
from fanfit.errors import InvalidJobError, LambdaLimitError

MEMORY = {"Prepare": 1024, "CrossFit": 1769, "Aggregate": 1769}


def test_the_401k_data_fits_every_function():
    # GIVEN 9,915 rows x 11 columns (the 401(k) example) THEN every function has room
    needs = limits.check_job(n_rows=9915, n_cols=11, memory_mb=MEMORY, spec={"dml": {"n_folds": 5}})
    assert set(needs) == set(MEMORY)
    assert all(limits.DEFAULT_BASELINE_MB < v < 300 for v in needs.values())


def test_data_too_large_for_a_function_suggests_more_memory_or_batch():
    # GIVEN 2,000,000 rows x 20 columns (305 MB as float64; ~1,116 MB with 3 copies + runtime)
    with pytest.raises(LambdaLimitError) as info:
        limits.check_job(n_rows=2_000_000, n_cols=20, memory_mb=MEMORY)
    msg = str(info.value)
    # THEN the first function too small is named, with the size that would fit and Batch
    assert msg.startswith("Prepare needs about 1,116 MB") and "MemorySize 1,024 MB" in msg
    assert "at least 1,152 MB" in msg and "AWS Batch" in msg
    assert isinstance(info.value, InvalidJobError)
    # ... and with enough memory everywhere it passes
    assert limits.check_job(n_rows=2_000_000, n_cols=20, memory_mb={"CrossFit": 1769})


def test_data_beyond_lambdas_largest_memory_routes_to_batch():
    with pytest.raises(LambdaLimitError, match=r"more than Lambda's largest \(10,240 MB\).*Batch"):
        limits.check_memory(limits.data_bytes(50_000_000, 40), 10_240, function="TrainShard")


def test_overhead_factor_and_baseline_are_documented_parameters():
    n = limits.data_bytes(1_000_000, 10)  # 80 MB
    assert limits.memory_needed_mb(n) == pytest.approx(200 + 3 * 80_000_000 / 2**20)
    assert limits.memory_needed_mb(n, overhead_factor=1.0, baseline_mb=0) == pytest.approx(
        76.29, 1e-3
    )


def test_tmp_over_the_default_and_over_the_maximum():
    limits.check_tmp(400 * 2**20)  # fits the default 512 MB
    with pytest.raises(LambdaLimitError, match="at least 2,048 MB"):
        limits.check_tmp(2048 * 2**20, function="Prepare")
    with pytest.raises(LambdaLimitError, match="largest /tmp"):
        limits.check_tmp(11_000 * 2**20)
    # per-function ephemeral storage in check_job
    with pytest.raises(LambdaLimitError, match="CrossFit writes 600 MB"):
        limits.check_job(
            n_rows=10, n_cols=2, memory_mb={"CrossFit": 1769}, tmp_bytes=600 * 2**20,
            ephemeral_mb={"CrossFit": 512},
        )  # fmt: skip


def test_state_over_256_kb_says_to_pass_an_s3_key():
    assert limits.check_state({"job_id": "a", "data_key": "data/x.npz"}) < 100
    with pytest.raises(LambdaLimitError, match="256 KB.*S3"):
        limits.check_state({"folds": list(range(60_000))}, state="Prepare's input")
    with pytest.raises(LambdaLimitError, match="not JSON"):
        limits.check_state({"x": float("nan")})


@pytest.mark.parametrize("bad", [-1, 1.5, True, "10"])
def test_bad_shapes_are_named_errors(bad):
    with pytest.raises(LambdaLimitError, match="n_rows"):
        limits.data_bytes(bad, 3)
