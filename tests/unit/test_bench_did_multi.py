"""benchmarks/did_multi.py's configuration and figures, without a stack.

GIVEN the benchmark's panel (make_did_CS2021 from a fixed seed) and models, WHEN they are built,
THEN DoubleMLDIDMulti has at least 6 group-time combinations and fanfit's and DoubleML's classes
hold the same sample splitting per combination; WHEN one run's figures are computed from fitted
models of one job of several parts, THEN the job is counted once (its timings in every part's
result), the efficiency is the shards' fit seconds over wall x concurrency, a coef off DoubleML's
by more than 1e-9 is not equal, and the summary gives the medians over the runs.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from bench_module import load_benchmark

pytest.importorskip("doubleml")

pytestmark = pytest.mark.filterwarnings(
    "ignore:DoubleMLDIDData is deprecated", "ignore:DoubleMLDID.* is deprecated"
)


def _args(**changes):
    base = {"n_units": 300, "learner": "linear", "n_folds": 2, "n_rep": 2, "seed": 42}
    return SimpleNamespace(**{**base, **changes})


def test_the_benchmark_has_six_combinations_on_the_same_splitting() -> None:
    bench = load_benchmark("did_multi")
    # GIVEN the benchmark's panel and models
    args = _args()
    ours, theirs = bench.models(bench.panel(args.n_units, args.seed), args)
    # THEN at least 6 group-time combinations, each with DoubleML's own splitting in both
    assert theirs.n_gt_atts >= bench.MIN_COMBINATIONS == 6
    for mine, dmls in zip(ours.modellist, theirs.modellist, strict=True):
        for (a_train, a_test), (b_train, b_test) in zip(mine.smpls[1], dmls.smpls[1]):
            np.testing.assert_array_equal(a_test, b_test)
            np.testing.assert_array_equal(a_train, b_train)
    # AND an unknown learner is refused by name
    with pytest.raises(ValueError, match="--learner"):
        bench.learners("svm")


def _fitted(coef, job_ids, shards_fit_s):
    timings = {"shards": [{"fit_s": s} for s in shards_fit_s], "billed_gb_s": 2.0,
               "lambda_cost_usd": 1e-4}  # fmt: skip
    return SimpleNamespace(
        coef=np.asarray(coef), se=np.full(len(coef), 0.1),
        fanfit_jobs=[SimpleNamespace(job_id=j) for j in job_ids],
        fanfit_results=[SimpleNamespace(timings=timings) for _ in job_ids],
    )  # fmt: skip


def test_one_runs_figures_count_the_one_job_once() -> None:
    bench = load_benchmark("did_multi")
    # GIVEN fanfit's model of one job with six parts (each part's result: the job's timings)
    # and DoubleML's with the same effects
    ours = _fitted([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], ["est-1"] * 6, [3.0, 5.0])
    theirs = SimpleNamespace(coef=ours.coef.copy(), se=ours.se.copy())
    # WHEN the run's figures are computed (10 s against 8 s, 2 cores)
    out = bench.figures(ours, theirs, 10.0, 8.0, waves=3, concurrency=2)
    # THEN one job of six parts, its shards counted once: efficiency 8 / (10 x 2)
    assert (out["n_jobs"], out["n_parts"], out["n_waves"]) == (1, 6, 3)
    assert out["efficiency"] == pytest.approx(0.4)
    assert out["ratio"] == pytest.approx(1.25)
    assert out["coef_equal"] and out["se_equal"]
    assert out["billed_gb_s"] == pytest.approx(2.0)
    # AND a coef off by 1e-8 relative is not equal
    theirs.coef = ours.coef * (1 + 1e-8)
    assert not bench.figures(ours, theirs, 10.0, 8.0, waves=3, concurrency=2)["coef_equal"]


def test_the_summary_gives_the_medians_of_the_runs() -> None:
    bench = load_benchmark("did_multi")
    # GIVEN three runs' figures
    runs = [
        {"fanfit_s": f, "doubleml_s": d, "ratio": f / d, "lambda_cost_usd": 1e-4,
         "efficiency": e, "n_waves": 3, "coef_equal": True, "se_equal": True, "n_jobs": 1}
        for f, d, e in ((12.0, 10.0, 0.5), (11.0, 10.0, 0.6), (30.0, 9.0, 0.2))
    ]  # fmt: skip
    # WHEN they are summarised THEN every figure is the median, and the configuration is there
    out = bench.summary(runs, _args(), 6)
    assert (out["fanfit_s"], out["doubleml_s"], out["efficiency"]) == (12.0, 10.0, 0.5)
    assert out["ratio"] == pytest.approx(1.2)
    assert out["coef_equal"] and out["n_jobs"] == 1 and out["n_combinations"] == 6
    assert (out["n_runs"], out["n_folds"], out["n_rep"]) == (3, 2, 2)
