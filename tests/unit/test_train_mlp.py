"""The mlp train model: its maths (fanfit.train.mlp with the generic SGD of fanfit.train.sgd) and
its job handlers, in-process on moto, every worker's step through the GPU worker's entry point.

The property that makes data-parallel training exact: the reduce of the workers' gradients,
weighted by b_i / B, is the gradient of the mean loss over the union of their rows, whatever the
split, so a round is one SGD step on the global batch.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from test_train_handlers import _run, _upload, aws  # noqa: F401 - the moto fixture

torch = pytest.importorskip("torch")
#: Where the GPU worker's step runs here ('auto': CUDA on a machine with a GPU) and how close it
#: comes to the float64 reference: equal on the CPU (float64), float32's ~1e-6 relative on CUDA
#: (fanfit.train.mlp's module doc; 6e-9 absolute after 3 rounds, measured on an H100).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {"rtol": 0, "atol": 1e-12} if DEVICE == "cpu" else {"rtol": 1e-4, "atol": 1e-6}


def _problem(n: int = 400, d: int = 6, k: int = 3, seed: int = 0):
    """A synthetic (n, d) design whose k classes come from a random two-layer network."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    H = np.tanh(X @ rng.normal(size=(d, 8)))
    y = (H @ rng.normal(size=(8, k)) * 2 + rng.gumbel(size=(n, k))).argmax(axis=1)
    return X, y


def test_reduce_of_an_uneven_four_way_split_equals_the_full_batch_gradient():
    from fanfit.train.mlp import init_mlp_params, mlp_loss_gradient
    from fanfit.train.sgd import WorkerGradient, reduce_gradients

    # GIVEN a 2-hidden-layer network and 257 rows split 4 ways unevenly (one worker with 1 row)
    X, y = _problem(n=257)
    params = init_mlp_params(6, (16, 12), 3, seed=5)
    pieces = np.split(np.random.default_rng(1).permutation(257), [1, 60, 200])
    # WHEN each piece's gradient (float64, CPU) is reduced with weights b_i / B
    parts = []
    for rows in pieces:
        loss, grads = mlp_loss_gradient(params, X[rows], y[rows], device="cpu")
        parts.append(WorkerGradient(grads, loss, rows.size))
    reduced = reduce_gradients(parts)
    # THEN it equals the gradient and loss over all 257 rows to 1e-10
    loss, grads = mlp_loss_gradient(params, X, y, device="cpu")
    assert set(reduced.grads) == {"W0", "b0", "W1", "b1", "W2", "b2"} and reduced.n_samples == 257
    for key, value in grads.items():
        assert value.dtype == np.float64 and value.shape == params[key].shape
        np.testing.assert_allclose(reduced.grads[key], value, rtol=0, atol=1e-10)
    assert reduced.loss == pytest.approx(loss, abs=1e-10)


def test_autograd_gradient_matches_finite_differences():
    from fanfit.train.mlp import init_mlp_params, mlp_loss_gradient

    # GIVEN a small network WHEN one weight and one bias are nudged by +-1e-6
    X, y = _problem(n=50)
    params = init_mlp_params(6, (5,), 3, seed=2)
    _, grads = mlp_loss_gradient(params, X, y, device="cpu")
    for key, idx in (("W0", (1, 2)), ("b1", (0,)), ("W1", (4, 1))):
        up = {k: v.copy() for k, v in params.items()}
        down = {k: v.copy() for k, v in params.items()}
        up[key][idx] += 1e-6
        down[key][idx] -= 1e-6
        numeric = (
            mlp_loss_gradient(up, X, y, device="cpu")[0]
            - mlp_loss_gradient(down, X, y, device="cpu")[0]
        ) / 2e-6
        # THEN the central difference equals the autograd gradient
        assert grads[key][idx] == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_a_few_rounds_decrease_the_loss():
    from fanfit.train.mlp import init_mlp_params, mlp_accuracy, mlp_loss_gradient, train_mlp

    # GIVEN the synthetic problem, 3 workers, a global batch of 128
    X, y = _problem()
    start = init_mlp_params(6, (32, 32), 3, seed=0)
    # WHEN 30 rounds of SGD run (uneven LB-BSP-like batches)
    params = train_mlp(X, y, 3, (32, 32), global_batch=128, n_workers=3, rounds=30, lr=0.5,
                       seed=0, batches=lambda r: [64, 40, 24])  # fmt: skip
    # THEN the full-data loss went down and the accuracy up
    before = mlp_loss_gradient(start, X, y, device="cpu")[0]
    after = mlp_loss_gradient(params, X, y, device="cpu")[0]
    assert after < 0.8 * before
    assert mlp_accuracy(params, X, y) > mlp_accuracy(start, X, y)
    # ... and the split does not change the model: uniform batches give the same one
    even = train_mlp(X, y, 3, (32, 32), global_batch=128, n_workers=3, rounds=30, lr=0.5, seed=0)
    for key in params:
        np.testing.assert_allclose(even[key], params[key], rtol=0, atol=1e-10)


def test_init_is_deterministic_in_the_seed_and_glorot_bounded():
    from fanfit.train.mlp import init_mlp_params

    # GIVEN a 64-256-256-256-10 network WHEN initialised twice with seed 7 and once with 8
    a = init_mlp_params(64, (256, 256, 256), 10, seed=7)
    b = init_mlp_params(64, (256, 256, 256), 10, seed=7)
    c = init_mlp_params(64, (256, 256, 256), 10, seed=8)
    # THEN the same seed gives the same arrays, another seed others
    assert list(a) == ["W0", "b0", "W1", "b1", "W2", "b2", "W3", "b3"]
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
        assert not np.array_equal(a[key], c[key])
    # ... with the layers' shapes and within sqrt(6 / (fan_in + fan_out))
    assert a["W0"].shape == (64, 256) and a["b3"].shape == (10,) and a["W3"].shape == (256, 10)
    assert np.abs(a["W1"]).max() <= np.sqrt(6 / 512) and np.abs(a["W0"]).max() > 0.9 * np.sqrt(
        6 / 320
    )


def test_sgd_step_penalises_weight_matrices_only_and_the_arrays_round_trip():
    import io

    from fanfit.train.sgd import WorkerGradient, average_params, sgd_step

    # GIVEN MLP-shaped parameters and gradients
    rng = np.random.default_rng(0)
    params = {"W0": rng.normal(size=(3, 4)), "b0": rng.normal(size=4),
              "W1": rng.normal(size=(4, 2)), "b1": rng.normal(size=2)}  # fmt: skip
    grads = {k: rng.normal(size=v.shape) for k, v in params.items()}
    # WHEN one step with lr 0.1 and l2 0.5 runs
    new = sgd_step(params, grads, 0.1, 0.5)
    # THEN weights get the penalty, biases not
    for key in params:
        penalty = 0.5 * params[key] if key.startswith("W") else 0.0
        np.testing.assert_allclose(new[key], params[key] - 0.1 * (grads[key] + penalty))
    # ... the average of two models is per key
    avg = average_params([params, new], [1, 3])
    np.testing.assert_allclose(avg["b1"], 0.25 * params["b1"] + 0.75 * new["b1"])
    # ... and a worker's gradient survives numpy.savez under grad_<key>
    part = WorkerGradient(grads, 1.5, 10)
    assert sorted(part.to_arrays()) == ["grad_W0", "grad_W1", "grad_b0", "grad_b1", "loss",
                                        "n_samples"]  # fmt: skip
    buf = io.BytesIO()
    np.savez(buf, **part.to_arrays())
    buf.seek(0)
    back = WorkerGradient.from_arrays(dict(np.load(buf)))
    assert back.loss == 1.5 and back.n_samples == 10
    for key in grads:
        np.testing.assert_array_equal(back.grads[key], grads[key])


def test_mismatched_parameters_raise_invalid_job_error():
    from fanfit.errors import InvalidJobError
    from fanfit.train.sgd import WorkerGradient, reduce_gradients, sgd_step

    a = WorkerGradient({"W0": np.zeros((2, 2)), "b0": np.zeros(2)}, 0.0, 1)
    b = WorkerGradient({"W": np.zeros((2, 2)), "b": np.zeros(2)}, 0.0, 1)
    with pytest.raises(InvalidJobError, match="different parameters"):
        reduce_gradients([a, b])
    with pytest.raises(InvalidJobError, match="different parameters"):
        sgd_step(a.grads, b.grads, 0.1)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"workers": 2, "gpu_workers": 1, "hidden": "8"}, "--gpu-workers must equal"),
        ({"workers": 2, "gpu_workers": 0, "hidden": "8"}, "--gpu-workers must equal"),
        ({"workers": 2, "gpu_workers": 2}, "--hidden"),
        ({"workers": 2, "gpu_workers": 2, "hidden": "8,0"}, "--hidden"),
        ({"workers": 2, "gpu_workers": 2, "hidden": "8,x"}, "--hidden must be integers"),
    ],
)
def test_mlp_options_are_checked_naming_the_option(options, named):
    from fanfit.client.train import build_train_spec
    from fanfit.errors import InvalidJobError

    # GIVEN an mlp spec with one bad option WHEN built THEN InvalidJobError names it
    with pytest.raises(InvalidJobError, match=named):
        build_train_spec(model="mlp", features="a,b", target="y", global_batch=8, **options)


def test_hidden_is_rejected_for_other_models():
    from fanfit.client.train import build_train_spec
    from fanfit.errors import InvalidJobError

    with pytest.raises(InvalidJobError, match="--hidden applies to --model mlp only"):
        build_train_spec(model="logreg", features="a", target="y", global_batch=8, hidden="8")


def test_importing_the_train_handlers_library_does_not_import_torch():
    # GIVEN a fresh interpreter (as a Lambda function's) WHEN fanfit.jobs.train is imported and an
    # MLP is initialised and evaluated THEN torch was never imported
    code = (
        "import sys, numpy as np, fanfit.jobs.train, fanfit.train.mlp as m; "
        "p = m.init_mlp_params(3, (4,), 2, 0); m.mlp_predict(p, np.zeros((1, 3))); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_mlp_job_on_the_handlers_with_every_worker_on_batch_equals_train_mlp(
    aws,  # noqa: F811
    load_handler,
    lambda_context,
):
    from fanfit import storage
    from fanfit.client.train import TrainResult
    from fanfit.train.mlp import train_mlp

    # GIVEN a 3-class problem, 3 workers all on the GPU worker, LB-BSP, a 2-hidden-layer network
    X, y = _problem(n=300)
    frame = pd.DataFrame(np.column_stack([X, y]), columns=[*"abcdef", "y"])
    store = storage.JobStore("fanfit-unit")
    _upload(store, frame, model="mlp", features="a,b,c,d,e,f", target="y", workers=3,
            gpu_workers=3, hidden="16,16", global_batch=96, rounds=6, balance="lb-bsp",
            lr=0.3, l2=1e-3, seed=4)  # fmt: skip

    # WHEN the handlers run the job, each worker's step through fanfit.jobs.gpu
    done, schedules = _run(load_handler, lambda_context)
    raw = store.get_json(done["result_key"])
    result = TrainResult(raw=raw)

    # THEN every worker was placed on Batch and ran in torch (the CPU here, float64; CUDA on a GPU)
    assert all(w["placement"] == "gpu" for s in schedules for w in s["workers"])
    assert all(w["resource"] == "gpu:g4dn.xlarge" and w["device"] == DEVICE
               for r in result.rounds for w in r["workers"])  # fmt: skip
    # ... and the model equals train_mlp's with the batches the scheduler chose
    plans = [store.get_json(storage.train_round_plan_key("example-train", r)) for r in range(6)]
    ref = train_mlp(X, y.astype(int), 3, (16, 16), global_batch=96, n_workers=3, rounds=6, lr=0.3,
                    l2=1e-3, seed=4, batches=lambda r: plans[r]["batches"])  # fmt: skip
    assert result.params is not None and result.hidden == [16, 16]
    assert sorted(result.params) == ["W0", "W1", "W2", "b0", "b1", "b2"]
    for key, value in ref.items():
        np.testing.assert_allclose(result.params[key], value, **TOL)
    # ... its per-round loss is recorded, predictions are class labels
    assert result.loss is not None and len(result.loss) == 6 and result.loss[-1] < result.loss[0]
    assert set(np.unique(result.predict(X))) <= {0.0, 1.0, 2.0}
    assert json.loads(json.dumps(raw))["classes"] == [0.0, 1.0, 2.0]


def test_mlp_job_with_ds_sync_equals_train_mlp(aws, load_handler, lambda_context):  # noqa: F811
    from fanfit import storage
    from fanfit.sched.dssync import dssync_groups
    from fanfit.train.mlp import train_mlp

    # GIVEN an mlp job with DS-Sync in groups of 2 over 4 Batch workers
    X, y = _problem(n=200)
    frame = pd.DataFrame(np.column_stack([X, y]), columns=[*"abcdef", "y"])
    store = storage.JobStore("fanfit-unit")
    _upload(store, frame, model="mlp", features="a,b,c,d,e,f", target="y", workers=4,
            gpu_workers=4, hidden="8", global_batch=64, rounds=3, sync="ds-sync", lr=0.3,
            seed=1)  # fmt: skip
    # WHEN it runs THEN the averaged model equals the reference's
    done, _ = _run(load_handler, lambda_context)
    result = store.get_json(done["result_key"])
    ref = train_mlp(X, y.astype(int), 3, (8,), global_batch=64, n_workers=4, rounds=3, lr=0.3,
                    seed=1, sync="ds-sync", group_size=2,
                    groups=lambda r: dssync_groups(4, 2, 1, r))  # fmt: skip
    for key, value in ref.items():
        np.testing.assert_allclose(result["params"][key], value, **TOL)
