"""Data-parallel mini-batch SGD: gradients, batches, BSP reduce, DS-Sync, and the 401(k) data."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from fanfit.errors import InvalidDataError, InvalidJobError
from fanfit.sched.dssync import dssync_groups
from fanfit.sched.lbbsp import lbbsp_batches
from fanfit.train import (
    WorkerGradient,
    accuracy,
    average_params,
    batch_rows,
    dssync_step,
    even_batches,
    global_batch_rows,
    init_params,
    loss_gradient,
    mse,
    predict,
    predict_proba,
    reduce_gradients,
    sgd_step,
    train_sgd,
    worker_gradient,
)

DATA = Path(__file__).resolve().parents[2] / "examples" / "data" / "sipp1991.dta"
COVARIATES = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def random_problem(model: str, seed: int = 0, n: int = 300, d: int = 4, k: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    params = {"W": rng.normal(size=(d, k)), "b": rng.normal(size=k)}
    if model == "logistic":
        y = (X @ params["W"] + params["b"] + rng.gumbel(size=(n, k))).argmax(axis=1)
    else:
        y = X @ params["W"] + params["b"] + rng.normal(size=(n, k))
    return X, y, {"W": 0.1 * rng.normal(size=(d, k)), "b": 0.1 * rng.normal(size=k)}


@pytest.mark.parametrize("model", ["logistic", "least-squares"])
def test_gradient_matches_finite_differences(model) -> None:
    # GIVEN a problem and a point
    X, y, params = random_problem(model)
    loss, grads = loss_gradient(model, params, X, y)
    # THEN each partial derivative matches a central difference of the mean loss
    eps = 1e-6
    for key in ("W", "b"):
        numeric = np.zeros_like(params[key])
        for idx in np.ndindex(params[key].shape):
            up = {k: v.copy() for k, v in params.items()}
            down = {k: v.copy() for k, v in params.items()}
            up[key][idx] += eps
            down[key][idx] -= eps
            numeric[idx] = (
                loss_gradient(model, up, X, y)[0] - loss_gradient(model, down, X, y)[0]
            ) / (2 * eps)
        np.testing.assert_allclose(grads[key], numeric, rtol=1e-6, atol=1e-8)
    assert loss > 0


def test_batch_rows_cut_one_global_batch() -> None:
    # GIVEN a round's uneven batches
    b = lbbsp_batches(64, [1.0, 3.0, 2.0, 2.0])
    pieces = [batch_rows(1000, b, 7, 5, i) for i in range(4)]
    # THEN the workers' rows are disjoint and together are the round's global batch, in order
    np.testing.assert_array_equal(np.concatenate(pieces), global_batch_rows(1000, 64, 7, 5))
    assert len(set(np.concatenate(pieces).tolist())) == 64
    assert [len(p) for p in pieces] == b.tolist()
    # AND the draw is pinned to SeedSequence(seed, spawn_key=(3, round)) and depends on the round
    rng = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(3, 5)))
    np.testing.assert_array_equal(
        global_batch_rows(1000, 64, 7, 5), rng.choice(1000, 64, replace=False)
    )
    assert not np.array_equal(global_batch_rows(1000, 64, 7, 6), global_batch_rows(1000, 64, 7, 5))
    with pytest.raises(InvalidJobError):
        batch_rows(10, [8, 8], 0, 0, 0)


@settings(max_examples=40, deadline=None)
@given(
    model=st.sampled_from(["logistic", "least-squares"]),
    seed=st.integers(min_value=0, max_value=1000),
    speeds=st.lists(st.floats(min_value=0.1, max_value=10.0), min_size=2, max_size=6),
)
def test_a_round_is_one_step_on_the_global_batch_whatever_the_split(model, seed, speeds) -> None:
    # GIVEN a problem and one round's global batch of B = 96 rows, split 1 way or unevenly
    X, y, params = random_problem(model, seed)
    B = 96
    one = [worker_gradient(model, params, X[r], y[r]) for r in [batch_rows(300, [B], seed, 3, 0)]]
    b = lbbsp_batches(B, speeds)
    rows = [batch_rows(300, b, seed, 3, i) for i in range(len(b))]
    many = [worker_gradient(model, params, X[r], y[r]) for r in rows]
    # WHEN each is reduced and stepped
    step_one = sgd_step(params, reduce_gradients(one).grads, lr=0.1, l2=0.01)
    step_many = sgd_step(params, reduce_gradients(many).grads, lr=0.1, l2=0.01)
    # THEN the updates agree to round-off, and so do the mean losses
    for key in ("W", "b"):
        np.testing.assert_allclose(step_many[key], step_one[key], rtol=0, atol=1e-12)
    assert reduce_gradients(many).loss == pytest.approx(reduce_gradients(one).loss, abs=1e-12)
    assert reduce_gradients(many).n_samples == B


def test_training_does_not_depend_on_the_split() -> None:
    # GIVEN a BSP run with even batches and one re-split by LB-BSP every round
    X, y, _ = random_problem("logistic", seed=1, n=500)
    kw = {"global_batch": 60, "n_workers": 4, "rounds": 25, "lr": 0.5, "l2": 1e-3, "seed": 3}
    even = train_sgd("logistic", X, y, 3, **kw)
    resized = train_sgd(
        "logistic", X, y, 3, batches=lambda r: lbbsp_batches(60, [1 + r % 4, 2, 3, 1]), **kw
    )
    # THEN the models agree to round-off
    for key in ("W", "b"):
        np.testing.assert_allclose(resized[key], even[key], rtol=0, atol=1e-10)


def test_dssync_groups_average_their_stepped_models() -> None:
    # GIVEN four workers with different models and gradients, in groups {0, 2} and {1, 3}
    X, y, _ = random_problem("least-squares", seed=2)
    rng = np.random.default_rng(0)
    models = [{"W": rng.normal(size=(4, 3)), "b": rng.normal(size=3)} for _ in range(4)]
    b = [10, 30, 20, 40]
    parts = [
        worker_gradient("least-squares", m, X[i * 50 : i * 50 + n], y[i * 50 : i * 50 + n])
        for i, (m, n) in enumerate(zip(models, b))
    ]
    new = dssync_step(models, parts, [[0, 2], [1, 3]], lr=0.05, l2=0.1)
    # THEN members of a group share the batch-weighted mean of their stepped models
    stepped = [sgd_step(m, p.grads, 0.05, 0.1) for m, p in zip(models, parts)]
    expected = {k: (10 * stepped[0][k] + 20 * stepped[2][k]) / 30 for k in ("W", "b")}
    for i in (0, 2):
        for key in ("W", "b"):
            np.testing.assert_allclose(new[i][key], expected[key], rtol=1e-12)
    np.testing.assert_array_equal(new[1]["W"], new[3]["W"])
    assert not np.allclose(new[0]["W"], new[1]["W"])
    # AND one group of workers that share a model is exactly the BSP step
    same = [models[0]] * 4
    bsp = sgd_step(models[0], reduce_gradients(parts).grads, 0.05, 0.1)
    for m in dssync_step(same, parts, [[0, 1, 2, 3]], 0.05, 0.1):
        for key in ("W", "b"):
            np.testing.assert_allclose(m[key], bsp[key], rtol=1e-12)
    # AND groups that do not partition the workers are refused
    with pytest.raises(InvalidJobError):
        dssync_step(models, parts, [[0, 1], [1, 2, 3]], 0.05)


def test_worker_gradient_round_trips_through_npz() -> None:
    # GIVEN a worker's result
    X, y, params = random_problem("logistic", seed=4)
    part = worker_gradient("logistic", params, X[:17], y[:17])
    # WHEN it is written with numpy.savez and read back
    buf = io.BytesIO()
    np.savez(buf, **part.to_arrays())
    buf.seek(0)
    back = WorkerGradient.from_arrays(dict(np.load(buf)))
    # THEN it is the same
    assert (back.loss, back.n_samples) == (part.loss, 17)
    np.testing.assert_array_equal(back.grads["W"], part.grads["W"])
    # AND a worker with no rows contributes nothing
    empty = worker_gradient("logistic", params, X[:0], y[:0])
    assert empty.n_samples == 0 and not empty.grads["W"].any()


def test_predictions_and_scores() -> None:
    # GIVEN a fitted-looking logistic model and a least-squares model
    X, y, params = random_problem("logistic", seed=5)
    proba = predict_proba(params, X)
    # THEN probabilities sum to one and the labels are their argmax
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(predict("logistic", params, X), proba.argmax(axis=1))
    assert accuracy(params, X, y) == pytest.approx(np.mean(proba.argmax(axis=1) == y))
    Xr, yr, pr = random_problem("least-squares", seed=5, k=1)
    yr = yr[:, 0]
    assert predict("least-squares", pr, Xr).shape == (300,)
    assert mse(pr, Xr, yr) == pytest.approx(np.mean((Xr @ pr["W"][:, 0] + pr["b"][0] - yr) ** 2))
    # AND labels outside the classes, bad shapes and unknown models are refused
    with pytest.raises(InvalidDataError):
        loss_gradient("logistic", params, X, np.full(300, 3))
    with pytest.raises(InvalidDataError):
        loss_gradient("logistic", params, X[:, :2], y)
    with pytest.raises(InvalidJobError):
        loss_gradient("poisson", params, X, y)
    with pytest.raises(InvalidJobError):
        sgd_step(params, params, lr=0.0)
    with pytest.raises(InvalidJobError):
        average_params([])
    with pytest.raises(InvalidJobError):
        init_params(0, 2)
    assert init_params(4, 3)["W"].shape == (4, 3) and not init_params(4, 3)["b"].any()


def test_least_squares_reaches_ordinary_least_squares() -> None:
    # GIVEN a linear problem with two targets
    X, y, _ = random_problem("least-squares", seed=6, n=2000, k=2)
    # WHEN trained by BSP SGD over 4 workers
    params = train_sgd(
        "least-squares", X, y, 2, global_batch=400, n_workers=4, rounds=300, lr=0.3, seed=0
    )
    # THEN its mean squared error is within 2 % of the OLS fit's
    ols = LinearRegression().fit(X, y)
    assert mse(params, X, y) <= 1.02 * np.mean((ols.predict(X) - y) ** 2)


@pytest.fixture(scope="module")
def k401():
    df = pd.read_stata(DATA)
    X = df[COVARIATES].to_numpy(dtype=float)
    y = df["p401"].to_numpy().astype(np.int64)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0)
    scaler = StandardScaler().fit(X_tr)
    return scaler.transform(X_tr), scaler.transform(X_te), y_tr, y_te


@pytest.mark.parametrize("sync", ["bsp", "ds-sync"])
def test_logistic_on_401k_matches_sklearn(k401, sync) -> None:
    # GIVEN the 401(k) data, standardised, split 75/25; sklearn's L2 logistic regression (C=1)
    X_tr, X_te, y_tr, y_te = k401
    ref = LogisticRegression().fit(X_tr, y_tr)
    # WHEN 4 workers with LB-BSP batches train for 300 rounds (DS-Sync: groups of 2)
    params = train_sgd(
        "logistic",
        X_tr,
        y_tr,
        2,
        global_batch=512,
        n_workers=4,
        rounds=300,
        lr=1.0,
        l2=1.0 / len(X_tr),
        seed=0,
        sync=sync,
        group_size=2,
        batches=lambda r: lbbsp_batches(512, [1.0, 2.0, 3.0, 4.0]),
        groups=lambda r: dssync_groups(4, 2, 0, r),
    )
    # THEN test accuracy is within 1 percentage point of sklearn's, and so is the test log loss
    assert abs(accuracy(params, X_te, y_te) - ref.score(X_te, y_te)) <= 0.01
    assert (
        log_loss(y_te, predict_proba(params, X_te))
        <= log_loss(y_te, ref.predict_proba(X_te)) + 0.01
    )


def test_the_even_split_gives_the_remainder_to_the_first_workers() -> None:
    # GIVEN global batches B and worker counts N WHEN fanfit.train splits a round evenly (the rule
    # fanfit.split shares with the scheduler, which fanfit.train does not import)
    for B in range(1, 40):
        for N in range(1, B + 1):
            b = even_batches(B, N)
            # THEN it sums to B, B // N + 1 for the first B % N workers and B // N for the others
            assert b.sum() == B and b.dtype == np.int64
            np.testing.assert_array_equal(b, [B // N + (i < B % N) for i in range(N)])
    # AND fewer samples than workers, or a worker count that is not an integer, is refused by name
    with pytest.raises(InvalidJobError, match="global_batch"):
        even_batches(3, 4)
    with pytest.raises(InvalidJobError, match="n_workers"):
        even_batches(3, True)


def test_ds_sync_without_groups_is_refused() -> None:
    # GIVEN DS-Sync and no groups WHEN train_sgd runs THEN a named error (the schedule is an input)
    X, y, _ = random_problem("logistic", seed=1, n=50)
    with pytest.raises(InvalidJobError, match="needs groups"):
        train_sgd(
            "logistic", X, y, 3, global_batch=8, n_workers=2, rounds=1, lr=0.1, sync="ds-sync"
        )
