"""GPU over one CPU thread: what fanfit's PyTorch code gains on the GPU worker.

The placement benchmark (``benchmarks/placement.py``) and the scheduler's priors need, per
learner, the GPU worker's throughput over one vCPU. This benchmark measures it for the code that
the GPU worker runs (``python -m fanfit.jobs.gpu``), on the machine it runs on, each side on the
same machine and data:

- ``mlp``: one fit + prediction of ``TorchMLPRegressor`` (3 x 256 ReLU layers, batch 256, the
  placement benchmark's MLP) on one training fold of the 401(k) data (examples/data/sipp1991.dta;
  y = net_tfa, nine covariates; 5 folds: 7,932 training rows, 1,983 test rows), counted in
  row-epochs per second; ``mlp_by_batch_size``: the same fit at other batch sizes
  (``--batch-sizes``), since a step this small is bound by kernel launches. The CPU side runs at one thread (``torch.set_num_threads(1)``: one vCPU,
  what Lambda gives at 1,769 MB); the GPU side with ``device='cuda'``. Both fits start from the
  same seed; their test predictions are compared (``prediction_rel_rmse``: RMSE between the two
  over the standard deviation of y; float32 kernels differ between devices, so not bit-equal).
- ``mlp_batched``: K = 1, 10, 100 and 500 fits of that MLP, each on its own fold and repetition of
  the 401(k) data (5 folds, ``ceil(K / 5)`` repetitions, seed 42; fit ``k`` is fold ``k % 5`` of
  repetition ``k // 5`` with ``random_state=k``), trained as the GPU worker trains them: together,
  :func:`fanfit.learners.torch_batched.fit_predict_batched` (data to the device, training,
  test-fold predictions back, all counted). Per K: ``fits_per_s_gpu`` (batched on CUDA, float32),
  ``fits_per_s_cpu_batched`` (batched on one CPU thread), ``fits_per_s_cpu_one_by_one`` (solo
  fits on one CPU thread: the rate does not depend on K, so it is timed over the first
  ``min(K, --solo-fits)`` fits), ``speedup`` (GPU batched over CPU one by one),
  ``max_rel_diff_vs_solo_float64`` (float64 on the CPU: the batched predictions against the solo
  fits', largest relative difference) and ``rmse_ratio_vs_solo`` (float32 on the GPU, else the
  CPU: the median over fits of the batched fit's test-fold RMSE over its solo fit's); the two
  comparisons use the first ``min(K, --check-fits)`` fits (in float64 batched among themselves).
  ``--max-k`` leaves out larger K (a CPU fits K = 100 in minutes); ``--cpu-batched-max-k`` times
  the CPU's batched fits only up to that K (``fits_per_s_cpu_batched`` ``null`` above it: K = 500
  on one CPU thread takes most of an hour); ``--batched-only`` runs this part alone (the others
  ``null``). ``mlp_batched_setup`` says how it was run, with each K's ``step_modes`` on CUDA (the
  mode chosen and every mode's measured seconds per step, from the untimed warm-up run). Each K's
  row also goes to stderr as soon as it is measured.
- ``kmeans_step``: :func:`fanfit.train.torch_steps.kmeans_step_torch` (a worker's E-step and
  M-step sums: the hybrid K-Means round), 200,000 x 16 rows, k = 8, against the numpy step
  :func:`fanfit.train.kmeans.kmeans_step` at one thread; numpy arrays in and out, so the GPU
  side's copies are counted. ``max_abs_diff_sums`` / ``counts_equal`` compare with numpy.
- ``logreg_gradient``: :func:`fanfit.train.torch_steps.loss_gradient_torch` of a logistic
  regression with 1,000 features x 1,000 classes (the DS-Sync benchmark's 1,001,000 parameters) on
  4,000 rows, against :func:`fanfit.train.linear.loss_gradient` at one thread;
  ``max_rel_diff_gradient`` compares the gradients.

Each time is the median of ``--repeats`` runs after one untimed warm-up (CUDA context, kernel
loading); ``speedup`` = CPU seconds / GPU seconds. Without a CUDA device the GPU fields are
``null`` and ``cuda_available`` is false (the CPU side still runs). Prints one JSON object with
``--json``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]
MLP_PARAMS = {"hidden_layer_sizes": (256, 256, 256), "batch_size": 256}


def _median_seconds(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall seconds of ``run()`` over ``repeats`` runs after one untimed warm-up."""
    out = run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _side(cpu_s: float, gpu_s: float | None) -> dict[str, float | None]:
    return {
        "cpu_s": round(cpu_s, 4),
        "gpu_s": None if gpu_s is None else round(gpu_s, 4),
        "speedup": None if gpu_s is None else round(cpu_s / gpu_s, 2),
    }


@functools.cache
def _fold_401k() -> tuple[Any, Any, Any, Any]:
    """``(x, y, train, test)``: the 401(k) covariates and net_tfa, fold 0 of 5 (seed 42), read once
    for every batch size of the sweep."""
    import numpy as np
    import pandas as pd

    from fanfit.dml import draw_folds

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    x = frame[X_COLS].to_numpy(dtype=float)
    y = frame["net_tfa"].to_numpy(dtype=float)
    folds = draw_folds(len(frame), 5, 1, 42)
    return x, y, np.flatnonzero(folds[:, 0] != 0), np.flatnonzero(folds[:, 0] == 0)


def bench_mlp(epochs: int, repeats: int, cuda: bool, batch_size: int = 256) -> dict[str, Any]:
    """TorchMLPRegressor on one 401(k) training fold: CPU (one thread) against CUDA."""
    import numpy as np

    from fanfit.learners.torch_mlp import TorchMLPRegressor

    x, y, train, test = _fold_401k()

    def fit_predict(device: str) -> Callable[[], Any]:
        def run() -> Any:
            est = TorchMLPRegressor(
                **{**MLP_PARAMS, "batch_size": batch_size},
                epochs=epochs,
                device=device,
                random_state=0,
            )
            return est.fit(x[train], y[train]).predict(x[test])

        return run

    cpu_s, cpu_pred = _median_seconds(fit_predict("cpu"), repeats)
    gpu_s, gpu_pred = _median_seconds(fit_predict("cuda"), repeats) if cuda else (None, None)
    row_epochs = len(train) * epochs
    out: dict[str, Any] = {
        "batch_size": batch_size,
        "train_rows": int(len(train)),
        "test_rows": int(len(test)),
        "epochs": epochs,
        **_side(cpu_s, gpu_s),
        "cpu_row_epochs_per_s": round(row_epochs / cpu_s),
        "gpu_row_epochs_per_s": None if gpu_s is None else round(row_epochs / gpu_s),
        "prediction_rel_rmse": None,
    }
    if gpu_pred is not None:
        rmse = float(np.sqrt(np.mean((np.asarray(gpu_pred) - np.asarray(cpu_pred)) ** 2)))
        out["prediction_rel_rmse"] = round(rmse / float(np.std(y)), 6)
    return out


def _batched_fits(n_fits: int) -> tuple[list[Any], list[Any]]:
    """The first ``n_fits`` fits of the 401(k) data (fold ``k % 5`` of repetition ``k // 5``) and
    each fit's test-fold outcomes."""
    import numpy as np
    import pandas as pd

    from fanfit.dml import draw_folds
    from fanfit.learners.torch_batched import BatchedFit

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    x = frame[X_COLS].to_numpy(dtype=float)
    y = frame["net_tfa"].to_numpy(dtype=float)
    folds = draw_folds(len(frame), 5, -(-n_fits // 5), 42)
    fits, y_tests = [], []
    for k in range(n_fits):
        col = folds[:, k // 5]
        train, test = np.flatnonzero(col != k % 5), np.flatnonzero(col == k % 5)
        fits.append(BatchedFit(x[train], y[train], x[test], k))
        y_tests.append(y[test])
    return fits, y_tests


def _timed(run: Callable[[], Any], repeats: int, warm_up: bool) -> tuple[float, Any]:
    """Median seconds of ``run()`` over ``repeats`` runs (after an untimed one if ``warm_up``)."""
    if warm_up:
        return _median_seconds(run, repeats)
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def bench_mlp_batched(
    epochs: int,
    repeats: int,
    cuda: bool,
    max_k: int,
    solo_fits: int,
    check_fits: int,
    cpu_batched_max_k: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """K fits trained together (GPU, CPU) against one by one on one CPU thread (issue 32)."""
    import numpy as np

    from fanfit.learners.torch_batched import fit_predict_batched
    from fanfit.learners.torch_mlp import TorchMLPRegressor

    def estimator(device: str, dtype: str = "float32") -> TorchMLPRegressor:
        return TorchMLPRegressor(**MLP_PARAMS, epochs=epochs, device=device, dtype=dtype)

    def solo(fits: list[Any], device: str, dtype: str = "float32") -> list[Any]:
        est = estimator(device, dtype)
        return [
            est.set_params(random_state=f.random_state).fit(f.x_train, f.y_train).predict(f.x_test)
            for f in fits
        ]

    def rmse(pred: Any, y_test: Any) -> float:
        return float(np.sqrt(np.mean((np.asarray(pred) - y_test) ** 2)))

    t_start = time.perf_counter()
    sizes = [k for k in (1, 10, 100, 500) if k <= max_k]
    all_fits, y_tests = _batched_fits(max(sizes)) if sizes else ([], [])
    # one by one on one CPU thread: the rate per fit does not depend on K
    n_solo = min(max(sizes, default=1), solo_fits)
    solo(all_fits[:1], "cpu")  # untimed warm-up: torch initialises its kernels on the first fit
    one_by_one_s, _ = _timed(lambda: solo(all_fits[:n_solo], "cpu"), repeats, warm_up=False)
    one_by_one = n_solo / one_by_one_s
    print(json.dumps({"fits_per_s_cpu_one_by_one": round(one_by_one, 3),
                      "elapsed_s": round(time.perf_counter() - t_start, 1)}),
          file=sys.stderr, flush=True)  # fmt: skip
    out: dict[str, Any] = {}
    batches: dict[str, list[int]] = {}
    step_modes: dict[str, dict[str, Any]] = {}
    for k in sizes:
        fits = all_fits[:k]
        cpu_s, cpu_run = (
            _timed(
                lambda fits=fits: fit_predict_batched(estimator("cpu"), fits),
                repeats,
                warm_up=False,
            )
            if k <= cpu_batched_max_k
            else (None, None)
        )
        gpu_s, gpu_run = None, None
        if cuda:
            # untimed warm-up: CUDA context, kernels, and the step mode measured for this shape
            first = fit_predict_batched(estimator("cuda"), fits)
            step_modes[str(k)] = {"chosen": first.step_mode, "s_per_step": first.step_timings}
            gpu_s, gpu_run = _timed(
                lambda fits=fits: fit_predict_batched(estimator("cuda"), fits),
                repeats,
                warm_up=False,
            )
        check = fits[: min(k, check_fits)]
        exact = fit_predict_batched(estimator("cpu", "float64"), check)
        reference = solo(check, "cpu", "float64")
        max_rel = max(
            float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))
            for a, b in zip(exact.predictions, reference)
        )
        device = "cuda" if cuda else "cpu"
        float32_run = gpu_run or cpu_run or fit_predict_batched(estimator("cpu"), check)
        batched32 = float32_run.predictions[: len(check)]
        solo32 = solo(check, device)
        ratios = [rmse(a, yt) / rmse(b, yt) for a, b, yt in zip(batched32, solo32, y_tests)]
        batches[str(k)] = float32_run.batches
        gpu_rate = None if gpu_s is None else k / gpu_s
        out[str(k)] = {
            "fits_per_s_gpu": None if gpu_rate is None else round(gpu_rate, 3),
            "fits_per_s_cpu_batched": None if cpu_s is None else round(k / cpu_s, 3),
            "fits_per_s_cpu_one_by_one": round(one_by_one, 3),
            "speedup": None if gpu_rate is None else round(gpu_rate / one_by_one, 2),
            "max_rel_diff_vs_solo_float64": float(f"{max_rel:.3g}"),
            "rmse_ratio_vs_solo": round(float(np.median(ratios)), 5),
        }
        # each K's row as it is measured (stderr), so a run stopped at a time limit keeps it
        row = {"k": k, **out[str(k)], "step_modes": step_modes.get(str(k))}
        print(json.dumps({**row, "elapsed_s": round(time.perf_counter() - t_start, 1)}),
              file=sys.stderr, flush=True)  # fmt: skip
    setup = {
        "epochs": epochs,
        "n_folds": 5,
        "train_rows": sorted({len(f.x_train) for f in all_fits}),
        "max_k": max_k,
        "one_by_one_fits_timed": n_solo,
        "check_fits": check_fits,
        "rmse_ratio_device": "cuda" if cuda else "cpu",
        "cpu_batched_max_k": cpu_batched_max_k,
        "batches": batches,
        "step_modes": step_modes,
    }
    return out, setup


def bench_kmeans(repeats: int, cuda: bool) -> dict[str, Any]:
    """kmeans_step_torch on CUDA against the numpy kmeans_step, 200,000 x 16, k = 8."""
    import numpy as np

    from fanfit.train.kmeans import kmeans_step
    from fanfit.train.torch_steps import kmeans_step_torch

    rng = np.random.default_rng(0)
    centres = rng.normal(scale=4.0, size=(8, 16))
    X = centres[rng.integers(0, 8, 200_000)] + rng.normal(size=(200_000, 16))
    C = X[rng.choice(len(X), 8, replace=False)]
    cpu_s, ref = _median_seconds(lambda: kmeans_step(X, C), repeats)
    out: dict[str, Any] = {"n_obs": len(X), "n_features": 16, "k": 8}
    if not cuda:
        return {**out, **_side(cpu_s, None), "counts_equal": None, "max_abs_diff_sums": None}
    gpu_s, got = _median_seconds(lambda: kmeans_step_torch(X, C, device="cuda"), repeats)
    return {
        **out,
        **_side(cpu_s, gpu_s),
        "counts_equal": bool(np.array_equal(got.counts, ref.counts)),
        "max_abs_diff_sums": float(np.max(np.abs(got.sums - ref.sums))),
    }


def bench_logreg(repeats: int, cuda: bool) -> dict[str, Any]:
    """loss_gradient_torch on CUDA against numpy: logistic, 1,000 features x 1,000 classes."""
    import numpy as np

    from fanfit.train.linear import loss_gradient
    from fanfit.train.torch_steps import loss_gradient_torch

    rng = np.random.default_rng(0)
    n, p, k = 4_000, 1_000, 1_000
    X = rng.normal(size=(n, p)) * (rng.random((n, p)) < 0.1)
    y = rng.integers(0, k, n)
    params = {"W": rng.normal(scale=0.01, size=(p, k)), "b": np.zeros(k)}
    cpu_s, (_, ref) = _median_seconds(lambda: loss_gradient("logistic", params, X, y), repeats)
    out: dict[str, Any] = {"n_obs": n, "n_params": p * k + k}
    if not cuda:
        return {**out, **_side(cpu_s, None), "max_rel_diff_gradient": None}
    gpu_s, (_, got) = _median_seconds(
        lambda: loss_gradient_torch("logistic", params, X, y, device="cuda"), repeats
    )
    scale = float(np.max(np.abs(ref["W"])))
    return {
        **out,
        **_side(cpu_s, gpu_s),
        "max_rel_diff_gradient": float(np.max(np.abs(got["W"] - ref["W"])) / scale),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--epochs", type=int, default=20, help="MLP epochs per fit")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side (median)")
    parser.add_argument(
        "--batch-sizes",
        type=lambda text: [int(b) for b in text.split(",")],
        default=[64, 1024, 4096],
        help="further MLP batch sizes, comma-separated (mlp_by_batch_size)",
    )
    parser.add_argument(
        "--max-k", type=int, default=500, help="largest K of mlp_batched (1, 10, 100, 500)"
    )
    parser.add_argument(
        "--solo-fits", type=int, default=5, help="fits timed one by one on one CPU thread"
    )
    parser.add_argument(
        "--check-fits", type=int, default=10, help="fits compared with their solo fits per K"
    )
    parser.add_argument(
        "--cpu-batched-max-k",
        type=int,
        default=500,
        help="largest K timed batched on the CPU (larger K: fits_per_s_cpu_batched null)",
    )
    parser.add_argument(
        "--batched-only", action="store_true", help="run mlp_batched only (the other parts: null)"
    )
    args = parser.parse_args()

    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    cuda = torch.cuda.is_available()
    with threadpool_limits(1):
        result = {
            "cuda_available": cuda,
            "device_name": torch.cuda.get_device_name(0) if cuda else None,
            "torch_version": torch.__version__,
            "cpu_threads": 1,
            "mlp": None if args.batched_only else bench_mlp(args.epochs, args.repeats, cuda),
            "mlp_by_batch_size": None
            if args.batched_only
            else {
                str(b): {
                    k: v
                    for k, v in bench_mlp(args.epochs, args.repeats, cuda, b).items()
                    if k in ("cpu_s", "gpu_s", "speedup")
                }
                for b in args.batch_sizes
            },
            "kmeans_step": None if args.batched_only else bench_kmeans(args.repeats, cuda),
            "logreg_gradient": None if args.batched_only else bench_logreg(args.repeats, cuda),
        }
        batched, setup = bench_mlp_batched(
            args.epochs,
            args.repeats,
            cuda,
            args.max_k,
            args.solo_fits,
            args.check_fits,
            args.cpu_batched_max_k,
        )
        result["mlp_batched"] = batched
        result["mlp_batched_setup"] = setup
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
