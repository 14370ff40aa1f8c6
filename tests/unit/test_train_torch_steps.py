"""The GPU worker's torch steps (K-Means, logreg, linreg) against the numpy steps, on CPU torch.

On the CPU the torch steps compute in float64, so they must equal the numpy steps to rounding:
the same labels, counts, far rows and changed rows, sums/inertia/gradients at rtol 1e-12.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fanfit.errors import InvalidDataError, InvalidJobError
from fanfit.split import even_batches
from fanfit.train import kmeans_reduce, kmeans_step, loss_gradient, sgd_step
from fanfit.train.kmeans import KMeansPartial
from fanfit.train.model import ModelState
from fanfit.train.models import model_for
from fanfit.train.torch_steps import kmeans_step_torch, loss_gradient_torch, torch_device

pytest.importorskip("torch")

RTOL = 1e-12


def _blobs(seed: int, n: int = 600, d: int = 5, k: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 4, (k, d))
    X = centres[rng.integers(0, k, n)] + rng.normal(0, 1, (n, d))
    return X, centres + rng.normal(0, 0.5, (k, d))


def _same_partial(a: KMeansPartial, b: KMeansPartial) -> None:
    np.testing.assert_array_equal(a.counts, b.counts)
    assert a.n_changed == b.n_changed
    np.testing.assert_array_equal(a.far_ids, b.far_ids)
    np.testing.assert_array_equal(a.far_labels, b.far_labels)
    np.testing.assert_allclose(a.sums, b.sums, rtol=RTOL, atol=1e-12)
    np.testing.assert_allclose(a.far_rows, b.far_rows, rtol=RTOL)
    np.testing.assert_allclose(a.far_dist, b.far_dist, rtol=RTOL)
    assert a.inertia == pytest.approx(b.inertia, rel=RTOL)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_torch_kmeans_step_equals_the_numpy_step_on_the_cpu(seed):
    # GIVEN a worker's rows, the round's centroids and the previous round's
    X, C = _blobs(seed)
    prev = C + 0.3
    # WHEN the step runs in numpy and in torch (CPU, float64)
    ref = kmeans_step(X[100:400], C, prev, row_offset=100)
    got = kmeans_step_torch(X[100:400], C, prev, row_offset=100, device="cpu")
    # THEN assignments, counts, sums, inertia, changed rows and far rows agree
    _same_partial(got, ref)
    assert got.sums.dtype == np.float64 and got.counts.dtype == np.int64


def test_lloyd_rounds_of_torch_workers_end_where_numpy_workers_end():
    # GIVEN three workers' rows and a start
    X, C0 = _blobs(7, n=900)
    batches = even_batches(900, 3)
    bounds = np.concatenate([[0], np.cumsum(batches)])
    C_np, C_t, prev = C0, C0, None
    # WHEN ten Lloyd rounds run, one with numpy workers, one with torch workers
    for _ in range(10):
        parts_np = [kmeans_step(X[a:b], C_np, prev, a) for a, b in zip(bounds, bounds[1:])]
        parts_t = [
            kmeans_step_torch(X[a:b], C_t, prev, a, device="cpu")
            for a, b in zip(bounds, bounds[1:])
        ]
        out_np, out_t = kmeans_reduce(parts_np, C_np), kmeans_reduce(parts_t, C_t)
        assert out_t.n_changed == out_np.n_changed
        prev, C_np, C_t = C_np, out_np.centroids, out_t.centroids
    # THEN the centroids agree to rounding
    np.testing.assert_allclose(C_t, C_np, rtol=1e-10)


def test_the_torch_kmeans_step_on_no_rows_and_an_empty_cluster():
    # GIVEN a centroid far from every row, and a worker with no rows
    X, C = _blobs(3, n=50)
    C = np.vstack([C, np.full((1, C.shape[1]), 1e3)])
    # WHEN both steps run THEN they agree (an empty cluster counts 0) and no rows give zero sums
    ref, got = kmeans_step(X, C), kmeans_step_torch(X, C, device="cpu")
    _same_partial(got, ref)
    assert got.counts[-1] == 0
    empty = kmeans_step_torch(X[:0], C, device="cpu")
    assert empty.counts.sum() == 0 and empty.far_ids.size == 0 and empty.inertia == 0.0


@pytest.mark.parametrize("model", ["logistic", "least-squares"])
def test_the_torch_linear_gradient_equals_the_numpy_gradient_on_the_cpu(model):
    # GIVEN a model with nonzero parameters and a mini-batch
    rng = np.random.default_rng(11)
    X = rng.normal(size=(257, 6))
    K = 3
    params = {"W": rng.normal(size=(6, K)), "b": rng.normal(size=K)}
    y = rng.integers(0, K, 257) if model == "logistic" else rng.normal(size=(257, K))
    # WHEN the loss and gradient are computed in numpy and in torch
    loss_np, g_np = loss_gradient(model, params, X, y)
    loss_t, g_t = loss_gradient_torch(model, params, X, y, device="cpu")
    # THEN they agree to rounding, and a step from each agrees
    assert loss_t == pytest.approx(loss_np, rel=RTOL)
    for key in ("W", "b"):
        np.testing.assert_allclose(g_t[key], g_np[key], rtol=RTOL, atol=1e-14)
        assert g_t[key].dtype == np.float64 and g_t[key].shape == g_np[key].shape
    step_np, step_t = sgd_step(params, g_np, 0.1, 0.01), sgd_step(params, g_t, 0.1, 0.01)
    np.testing.assert_allclose(step_t["W"], step_np["W"], rtol=RTOL)


def test_the_torch_linear_gradient_checks_its_inputs_as_numpy_does():
    # GIVEN parameters of 4 features and 2 classes
    params = {"W": np.zeros((4, 2)), "b": np.zeros(2)}
    X = np.ones((3, 4))
    # WHEN rows of the wrong width, an unknown class or an unknown model come in THEN the same errors
    with pytest.raises(InvalidDataError, match=r"shape \(n, 4\)"):
        loss_gradient_torch("logistic", params, np.ones((3, 5)), np.zeros(3), device="cpu")
    with pytest.raises(InvalidDataError, match="holds class 2"):
        loss_gradient_torch("logistic", params, X, np.array([0, 1, 2]), device="cpu")
    with pytest.raises(InvalidJobError, match="model must be one of"):
        loss_gradient_torch("hinge", params, X, np.zeros(3), device="cpu")
    # ... and no rows give a zero loss and zero gradients
    loss, grads = loss_gradient_torch("logistic", params, X[:0], np.zeros(0), device="cpu")
    assert loss == 0.0 and not grads["W"].any()


def test_the_torch_device_is_named_and_checked(monkeypatch):
    # GIVEN no device variable WHEN the device is asked THEN the CPU here (CPU torch), and a bad
    # name is an error naming the variable
    monkeypatch.delenv("FANFIT_TORCH_DEVICE", raising=False)
    monkeypatch.delenv("FANFIT_MLP_DEVICE", raising=False)
    import torch

    assert torch_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("FANFIT_TORCH_DEVICE", "tpu")
    with pytest.raises(InvalidJobError, match="FANFIT_TORCH_DEVICE"):
        torch_device()


def _spec(model: str, **kw):
    base = dict(model=model, features=("a", "b", "c"), workers=2, gpu_workers=1, rounds=3,
                sync="bsp", n_clusters=None, lr=0.1, l2=0.0, tol=0.0, seed=5, hidden=(),
                global_batch=120)  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


@pytest.mark.parametrize("name", ["kmeans", "logreg", "linreg"])
def test_a_model_steps_on_the_torch_backend_as_on_the_numpy_backend(name, monkeypatch):
    # GIVEN a model, its round-0 state and a round's batches
    monkeypatch.setenv("FANFIT_TORCH_DEVICE", "cpu")
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 3))
    y = rng.integers(0, 3, 300).astype(float) if name != "linreg" else rng.normal(size=300)
    model = model_for(name)
    spec = _spec(name, n_clusters=4 if name == "kmeans" else None)
    n_out = model.n_outputs(spec, 3 if name == "logreg" else None)
    state = model.init(spec, X, n_out)
    if name != "kmeans":  # a nonzero model, so the gradients are not trivial
        state = ModelState({k: v + 0.1 for k, v in state.arrays.items()})
    batches = np.array([200, 100]) if name == "kmeans" else np.array([80, 40])
    # WHEN worker 1 steps on each backend (the interface's device for it)
    assert model.device("numpy") is None and model.device("torch") == "cpu"
    ref = model.worker_step(spec, state, X, y, batches, 1, 0, model.device("numpy"))
    got = model.worker_step(spec, state, X, y, batches, 1, 0, model.device("torch"))
    # THEN the partials hold the same arrays, equal to rounding, and reduce to the same state
    assert set(got) == set(ref)
    for key in ref:
        np.testing.assert_allclose(got[key], ref[key], rtol=RTOL, atol=1e-13)
    if name != "kmeans":
        parts = [model.worker_step(spec, state, X, y, batches, 0, 0, None), got]
        nxt, _ = model.reduce(spec, state, parts, [[0, 1]])
        ref_parts = [parts[0], ref]
        ref_nxt, _ = model.reduce(spec, state, ref_parts, [[0, 1]])
        np.testing.assert_allclose(nxt.arrays["W"], ref_nxt.arrays["W"], rtol=RTOL)
    with pytest.raises(InvalidJobError, match="backend must be one of"):
        model.device("jax")
