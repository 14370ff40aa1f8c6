"""Hybrid train rounds (Lambda workers + the GPU worker) against Lambda-only rounds, on the local stack.

K-Means (Lloyd, exact: both runs must end on the same centroids) on a synthetic 200,000 x 16 set of
8 Gaussian blobs, a fixed start, ``tol=0`` so every run does the same rounds, ``--balance lb-bsp``:

- ``lambda``: three Lambda workers of 1,769 MB;
- ``hybrid``: two Lambda workers of 1,769 MB and the GPU worker (``--gpu-workers 1``). Each round's
  rows are split between the Lambda workers and the GPU worker by Proteus' drift-plus-penalty rule
  on the measured throughputs and backlogs (``fanfit.jobs.train.schedule.hybrid_batches``), then
  by LB-BSP within the Lambda side; the GPU worker computes its step in PyTorch.

**On the local stack the GPU worker is a host process** (the local Batch provider runs
``python -m fanfit.jobs.gpu`` on this machine, CPU PyTorch: this machine has no GPU), started anew
for every round, while a Lambda worker is a warm local executor process capped at
``--vcpu-scale`` cores per 1,769 MB. The figures therefore compare a CPU host process with capped
Lambda workers, not a GPU: they show the dispatch working on measured speeds, not a GPU's speed.

A round's ``round_s`` is its barrier's compute time (``max_i`` of the workers' compute seconds);
``wall_s`` the round's Map state with the Lambda, Batch and Step Functions overhead (for the GPU
worker: a process start and the torch import every round). Round 0 (cold starts, the prior's split)
is left out of the means. The benchmark starts its own local stack (state dir
``.fanfit/bench-hybrid``) and stops it on exit.

    python benchmarks/hybrid_rounds.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

N_OBS, N_FEATURES, N_CLUSTERS = 200_000, 16, 8


def blobs(seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """N_OBS rows around N_CLUSTERS random centres, and a start of jittered rows."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (N_CLUSTERS, N_FEATURES))
    X = centres[rng.integers(0, N_CLUSTERS, N_OBS)] + rng.normal(size=(N_OBS, N_FEATURES))
    init = X[rng.choice(N_OBS, N_CLUSTERS, replace=False)] + rng.normal(
        0, 0.1, (N_CLUSTERS, N_FEATURES)
    )
    return pd.DataFrame(X, columns=[f"x{i}" for i in range(N_FEATURES)]), init


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--vcpu-scale", type=float, default=0.5,
                        help="local cores per 1,769 MB (FANFIT_LAMBDA_VCPU_SCALE)")  # fmt: skip
    args = parser.parse_args(argv)

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame, init = blobs()
    options = dict(model="kmeans", features=list(frame.columns), n_clusters=N_CLUSTERS, init=init,
                   rounds=args.rounds, tol=0.0, balance="lb-bsp", seed=0, timeout=900)  # fmt: skip
    setups = {
        "lambda": dict(workers=3, worker_memory=[1769, 1769, 1769]),
        "hybrid": dict(workers=3, gpu_workers=1, worker_memory=[1769, 1769]),
    }
    os.environ["FANFIT_LAMBDA_VCPU_SCALE"] = str(args.vcpu_scale)
    root = Path(__file__).resolve().parents[1]
    os.environ["FANFIT_HOME"] = str(root / ".fanfit" / "bench-hybrid")
    runs, job_wall = {}, {}
    # keep_running=False: the stack this starts is stopped on exit
    with ensure_local_stack(root=root, home=os.environ["FANFIT_HOME"], keep_running=False):
        client = Client.local_stack()
        # A short warm-up job of each kind first: no measured job pays for first imports.
        for setup in setups.values():
            client.train(frame.iloc[:20_000], **{**options, **setup, "rounds": 1})
        for name, setup in setups.items():
            t0 = time.perf_counter()
            runs[name] = client.train(frame, **options, **setup)
            job_wall[name] = time.perf_counter() - t0

    def mean(name: str, key: str) -> float:
        return statistics.mean(float(r[key]) for r in runs[name].rounds[1:])

    hybrid = runs["hybrid"].rounds
    gpu_share = [r["dispatch"]["queues"][1]["samples"] / N_OBS for r in hybrid if "dispatch" in r]
    out = {
        "note": (
            "local stack: the GPU worker is a host process (CPU PyTorch, no GPU on this machine), "
            "started for every round; Lambda workers are local executor processes capped at "
            f"{args.vcpu_scale} cores per 1,769 MB; machine shared with other work"
        ),
        "gpu_worker_device": [r["workers"][2].get("device") for r in hybrid],
        "lambda_round_s": mean("lambda", "round_s"),
        "hybrid_round_s": mean("hybrid", "round_s"),
        "lambda_round_wall_s": mean("lambda", "wall_s"),
        "hybrid_round_wall_s": mean("hybrid", "wall_s"),
        "lambda_idle_fraction": mean("lambda", "idle_fraction"),
        "hybrid_idle_fraction": mean("hybrid", "idle_fraction"),
        "lambda_job_wall_s": job_wall["lambda"],
        "hybrid_job_wall_s": job_wall["hybrid"],
        "hybrid_gpu_share_per_round": gpu_share,
        "hybrid_dispatch_V": [r["dispatch"]["V"] for r in hybrid if "dispatch" in r],
        "hybrid_gpu_backlog_start": [
            r["dispatch"]["queues"][1]["backlog_start"] for r in hybrid if "dispatch" in r
        ],
        "hybrid_overhead_s_lambda_gpu": [
            [q["overhead_s"] for q in r["dispatch"]["queues"]] for r in hybrid if "dispatch" in r
        ],
        "hybrid_last_batches": [w["batch"] for w in hybrid[-1]["workers"]],
        "hybrid_worker_samples_per_s": [
            statistics.median(float(r["workers"][i]["samples_per_s"]) for r in hybrid[1:])
            for i in range(3)
        ],
        "lambda_worker_samples_per_s": [
            statistics.median(
                float(r["workers"][i]["samples_per_s"]) for r in runs["lambda"].rounds[1:]
            )
            for i in range(3)
        ],
        "centroids_max_abs_diff": float(
            np.max(
                np.abs(np.asarray(runs["hybrid"].centroids) - np.asarray(runs["lambda"].centroids))
            )
        ),
        "rounds": len(hybrid),
        "n_obs": N_OBS,
        "n_features": N_FEATURES,
        "n_clusters": N_CLUSTERS,
        "local_vcpu_per_1769_mb": args.vcpu_scale,
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
