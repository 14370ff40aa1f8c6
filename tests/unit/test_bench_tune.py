"""benchmarks/tune.py's configuration and figures, without a stack.

GIVEN the benchmark's grid and models, THEN the grid is issue 37's 24 candidates (4 with
``--small``) and fanfit's and DoubleML's PLR hold the same sample splitting and learners with a
``random_state``; WHEN the runs are summarised THEN the medians are over the runs and any run
whose parameters, scores or estimate differ makes the summary say so.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from bench_module import load_benchmark

dml = pytest.importorskip("doubleml")


def test_the_grid_is_the_issues_and_both_models_split_alike() -> None:
    bench = load_benchmark("tune")
    # GIVEN the benchmark's grid THEN 24 candidates over the three parameters (4 when small)
    from sklearn.model_selection import ParameterGrid

    assert len(ParameterGrid(bench.grid(small=False))) == 24
    assert bench.grid(small=False)["max_depth"] == [4, 8, None]
    assert len(ParameterGrid(bench.grid(small=True))) == 4
    # AND both PLRs split alike, with seeded forests (no draws from the global state)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(60, 11)), columns=["y", "d", *bench.X_COLS])
    frame["d"] = (frame["d"] > 0).astype(float)
    data = dml.DoubleMLData(frame, "y", "d", x_cols=bench.X_COLS)
    ours, theirs = bench.models(data, SimpleNamespace(n_folds=3, n_rep=2))
    for (train, test), (their_train, their_test) in zip(
        ours.smpls[1], theirs.smpls[1], strict=True
    ):
        np.testing.assert_array_equal(train, their_train)
        np.testing.assert_array_equal(test, their_test)
    assert ours.learner["ml_l"].random_state == theirs.learner["ml_m"].random_state == bench.SEED


def test_the_summary_takes_medians_and_any_unequal_run() -> None:
    bench = load_benchmark("tune")
    run = {"fanfit_s": 10.0, "fanfit_tune_s": 8.0, "doubleml_s": 9.0, "doubleml_tune_s": 7.0,
           "ratio": 1.11, "params_equal": True, "scores_equal": True, "coef_equal": True}  # fmt: skip
    runs = [run, {**run, "fanfit_s": 12.0, "ratio": 1.3}, {**run, "fanfit_s": 11.0, "ratio": 1.2,
                                                           "scores_equal": False}]  # fmt: skip
    out = bench.summary(runs, SimpleNamespace(small=False, n_folds=5, n_rep=2))
    assert (out["fanfit_s"], out["ratio"], out["n_runs"]) == (11.0, 1.2, 3)
    assert out["params_equal"] and out["coef_equal"] and not out["scores_equal"]
    assert (out["n_candidates"], out["n_tune_fits"], out["n_fits"]) == (24, 240, 20)
