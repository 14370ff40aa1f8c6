"""Placement: the exact cost-optimal plan against HeterPS's baselines, on measured stage profiles.

    python benchmarks/placement.py --json

The job: PLR on the 401(k) data (examples/data/sipp1991.dta; y = net_tfa, d = e401, nine covariates),
5 folds x 10 repetitions, four stages run one after another:

- ``ml_l:RandomForestRegressor`` and ``ml_m:RandomForestClassifier`` (100 trees, depth 8);
- ``ml_l:TorchMLPRegressor`` and ``ml_m:TorchMLPClassifier`` (3 x 256 ReLU layers, 300 epochs,
  batch 256).

Why this size: a g4dn.xlarge costs about 5x a 1-vCPU Lambda per second. With the MLP's GPU speed-up
of one fit at a time (2.0x, below) a GPU sample costs about 2.5x a Lambda one, so the GPU could only
pay for a stage by time (a deadline all-CPU misses), never by cost; the forests' 4x (below) make
it nearly as dear per sample, less its 180 s start-up. With the stage's fits batched (issue 32) a
GPU sample is cheaper than a Lambda one once the batched speed-up passes about 5x, and the MLP
stages (50 fits x 300 epochs) are long enough to pay for the start-up. ``deadline_sweep`` shows
where each baseline stops meeting the deadline.

A stage's samples are the training rows it processes: fits x training rows (x epochs for the MLPs).

CPU profiles are measured here: one fit (and prediction) of each learner on one fold's training rows,
in this process at one thread (scikit-learn n_jobs=1, BLAS and torch threads 1), best of
``--repeats``. One thread is one vCPU, which is what Lambda gives at 1,769 MB (AWS Lambda documentation:
1,769 MB = 1 vCPU); other memory sizes are scaled with ``fanfit.sched.throughput.scale_throughput``
(threads=1: no speed-up past one vCPU). The MLP's throughput is measured over ``--measure-epochs``
epochs and counted per row-epoch. Measurements run on a shared 2-core machine, so they carry its load.

GPU profiles: a speed-up over one vCPU per learner, for a Batch ``g4dn.xlarge`` (one NVIDIA T4,
4 vCPUs):

- the 3 x 256 MLPs: the GPU worker trains a stage's fits together as one batched model
  (:mod:`fanfit.learners.torch_batched`, issue 32), so its rate is the BATCHED rate of the stage's
  ``n_folds x n_rep`` fits (50 by default), per row-epoch, over one vCPU's one-by-one rate. By
  default it is MEASURED HERE, ON THIS CPU: the stage's fits batched at one thread
  (``--measure-epochs`` epochs) over the same fits one by one at one thread (``mlp_batched_speedup``
  in the output; a CPU gains little from batching, so this is far below what a GPU does). Give the
  GPU's figure with ``--mlp-gpu-speedup`` (``speedup`` of ``benchmarks/gpu_speedup.py --json``'s
  ``mlp_batched`` at the K nearest the stage's fits, measured on the GPU) to plan with it instead.
  Before issue 32 the table below held 2.0x, the one-by-one figure MEASURED on an NVIDIA H100
  (``python benchmarks/gpu_speedup.py --json``, 2026-11-25, median of 3 runs: 2.01x at batch 256);
- random forests, 4x: ASSUMED. The GPU worker runs scikit-learn's forest, which has no GPU code,
  on the instance's 4 vCPUs (cuML is not in its image), so at most 4x over one vCPU.

Other assumptions: Lambda start-up 1 s (Python cold start with the scientific layer); Batch start-up
180 s (scale-to-zero compute environment: instance launch and a multi-GB CUDA image pull); every
worker reads the whole data file and writes its predictions. The MLP stages are offered on Lambda
too, as a container-image function (the CPU build of torch fits the 10 GB image limit, not the
250 MB zip + layers limit that keeps fanfit's TorchMLP learners Batch-only today), so that the
all-CPU baseline exists as in HeterPS. Caps: one Lambda worker per fit (50), 4 GPU
instances. Prices: ``fanfit.prices.DEFAULT_PRICES``.

The hybrid K-Means round (``hybrid_kmeans_round``; ``--skip-hybrid`` leaves it out): a K-Means
train job on a local stack of its own (state dir ``.fanfit/bench-placement-hybrid``), 3 workers
in every round: 2 Lambda workers of 1,769 MB and 1 GPU worker (AWS Batch, ``--gpu-workers 1``)
emulated on the CPU. The stack starts with ``FANFIT_LAMBDA_VCPU_SCALE=0.25`` (a 1,769 MB worker
gets a quarter of a local core through its cgroup) and ``FANFIT_BATCH_VCPU_SCALE=0.125`` (the
job definition's 4 vCPUs get half a core): the GPU worker is then about twice as fast as each
Lambda worker, and the three ask for one core of the two. Data: ``--hybrid-n-obs`` x 50 overlapping
Gaussian blobs around 32 centres, k = 32, fixed initial centroids. After a 3-round warm-up job (the
throughput table then knows both resources), two runs of ``--hybrid-rounds`` Lloyd rounds:

- ``lb-bsp``: each worker's share of the rows from the throughput the scheduler predicts;
- ``oracle``: ``--balance static`` with the rows split in proportion to each worker's speed
  measured in the LB-BSP run (median samples/s over its rounds 1..).

A round's time is its barrier's compute time (``round_s``: the largest worker ``compute_s``);
reported: the mean over rounds 1.. of both runs and ``lbbsp_over_oracle`` (target: at most 1.10),
with each worker's measured speed and batches, and the host's load average.

The deadline (``--deadline``) defaults to 900 s; ``deadline_sweep`` repeats the comparison for
deadlines of 1.5 to 8 times the fastest possible plan's time (each baseline as ``[cost_usd,
meets_deadline]``). Prints one JSON object: ``plan_cost_usd`` (MILP), ``optimal_cost_usd``
(exact Pareto DP, an independent solver), ``all_cpu_cost_usd``, ``all_gpu_cost_usd``,
``greedy_cost_usd``, ``meets_deadline``, each baseline's ``meets_deadline``, the per-stage plan, the
measured throughputs and the assumptions. Target: plan == optimum, below every baseline that meets
the deadline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]

#: GPU worker (g4dn.xlarge) throughput over one vCPU, per learner: the forests' assumed; the MLPs'
#: the batched rate, measured at run time (see the module doc: these 2.0x are the one-by-one H100
#: figure, used only by ``--mlp-one-by-one``).
GPU_SPEEDUP = {
    "RandomForestRegressor": 4.0,
    "RandomForestClassifier": 4.0,
    "TorchMLPRegressor": 2.0,
    "TorchMLPClassifier": 2.0,
}
BATCHED = ("TorchMLPRegressor", "TorchMLPClassifier")
RF = '{"n_estimators": 100, "max_depth": 8}'
MLP = '{{"hidden_layer_sizes": [256, 256, 256], "epochs": {epochs}, "batch_size": 256}}'
LAMBDA_MEMORY_MB = (885, 1769, 3538)
LAMBDA_STARTUP_S = 1.0
GPU_STARTUP_S = 180.0
#: Local cores per 1,769 MB and per Batch vCPU in the hybrid K-Means benchmark (see the module doc).
HYBRID_LAMBDA_VCPU_SCALE = 0.25
HYBRID_BATCH_VCPU_SCALE = 0.125


def hybrid_kmeans_round(n_obs: int, rounds: int, seed: int = 0) -> dict:
    """LB-BSP against the oracle split on a hybrid round of 2 Lambda workers + 1 GPU worker.

    Starts (and stops) a local stack of its own with the CPU shares of the module doc.

    Parameters
    ----------
    n_obs : int
        Rows of the synthetic data (50 features, 32 clusters).
    rounds : int
        Lloyd rounds of each run (the job adds its final E-step round).
    seed : int

    Returns
    -------
    dict
        ``lbbsp_round_s`` and ``oracle_round_s`` (mean seconds of ``max_i compute_s`` over rounds
        1..), ``lbbsp_over_oracle``, ``within_10_percent``, the measured ``worker_samples_per_s``
        (Lambda, Lambda, GPU worker), batches, idle fractions, CPU shares and the load average.
    """
    import os
    import statistics

    import numpy as np
    import pandas as pd

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack
    from fanfit.sched.lbbsp import lbbsp_batches

    rng = np.random.default_rng(seed)
    d, k = 50, 32
    centres = rng.normal(scale=0.3, size=(k, d))  # overlapping: Lloyd takes many rounds
    X = centres[rng.integers(0, k, n_obs)] + rng.normal(size=(n_obs, d))
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(d)])
    init = X[rng.choice(n_obs, k, replace=False)]
    options = dict(model="kmeans", features=list(frame.columns), n_clusters=k, init=init,
                   workers=3, gpu_workers=1, worker_memory=[1769, 1769], rounds=rounds,
                   seed=seed, timeout=3600)  # fmt: skip
    os.environ["FANFIT_LAMBDA_VCPU_SCALE"] = str(HYBRID_LAMBDA_VCPU_SCALE)
    os.environ["FANFIT_BATCH_VCPU_SCALE"] = str(HYBRID_BATCH_VCPU_SCALE)
    os.environ["FANFIT_HOME"] = str(ROOT / ".fanfit" / "bench-placement-hybrid")
    load_before = os.getloadavg()
    with ensure_local_stack(root=ROOT):
        client = Client.local_stack()
        client.train(frame, balance="lb-bsp", **{**options, "rounds": 3})  # warm-up
        lbbsp = client.train(frame, balance="lb-bsp", **options)
        speed = np.array(
            [
                statistics.median(r["workers"][i]["samples_per_s"] for r in lbbsp.rounds[1:])
                for i in range(3)
            ]
        )
        oracle_batches = lbbsp_batches(n_obs, speed)
        oracle = client.train(
            frame, balance="static", worker_batches=oracle_batches.tolist(), **options
        )
    load_after = os.getloadavg()

    def mean_of(res, key: str) -> float:
        return statistics.mean(r[key] for r in res.rounds[1:])

    ratio = mean_of(lbbsp, "round_s") / mean_of(oracle, "round_s")
    return {
        "lbbsp_round_s": round(mean_of(lbbsp, "round_s"), 4),
        "oracle_round_s": round(mean_of(oracle, "round_s"), 4),
        "lbbsp_over_oracle": round(ratio, 4),
        "within_10_percent": bool(ratio <= 1.10),
        "lbbsp_idle_fraction": round(mean_of(lbbsp, "idle_fraction"), 4),
        "oracle_idle_fraction": round(mean_of(oracle, "idle_fraction"), 4),
        "lbbsp_round_wall_s": round(mean_of(lbbsp, "wall_s"), 3),
        "oracle_round_wall_s": round(mean_of(oracle, "wall_s"), 3),
        "worker_samples_per_s": [round(float(v), 1) for v in speed],
        "worker_resources": [w["resource"] for w in lbbsp.rounds[-1]["workers"]],
        "lbbsp_batches_per_round": [[w["batch"] for w in r["workers"]] for r in lbbsp.rounds],
        "oracle_batches": oracle_batches.tolist(),
        "centroids_equal": bool(np.allclose(lbbsp.centroids, oracle.centroids, atol=1e-8)),
        "n_obs": n_obs,
        "n_features": d,
        "n_clusters": k,
        "rounds": rounds,
        "measured_rounds": len(lbbsp.rounds) - 1,
        "lambda_memory_mb": [1769, 1769],
        "local_cores": {
            "lambda_1769_mb": HYBRID_LAMBDA_VCPU_SCALE,
            "batch_4_vcpu": 4 * HYBRID_BATCH_VCPU_SCALE,
        },
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "load_average_1_5_15_after": [round(x, 2) for x in load_after],
    }


def _measure(spec_text, x, y, train, test, repeats):
    """Best-of-``repeats`` seconds of one fit + predict at one thread."""
    from threadpoolctl import threadpool_limits

    from fanfit.learners import LearnerSpec

    spec = LearnerSpec.parse(spec_text)
    with threadpool_limits(1):  # untimed warm-up: torch initialises its kernels on the first fit
        spec.build(random_state=0).fit(x[train[::30]], y[train[::30]])
    best = float("inf")
    for r in range(repeats):
        est = spec.build(random_state=r)
        with threadpool_limits(1):
            t0 = time.perf_counter()
            est.fit(x[train], y[train])
            if spec.is_classifier:
                est.predict_proba(x[test])
            else:
                est.predict(x[test])
            best = min(best, time.perf_counter() - t0)
    return best


def _measure_batched(spec_text, x, y, folds, n_fits, repeats):
    """Best-of-``repeats`` seconds of the stage's ``n_fits`` fits trained together at one thread
    (:func:`fanfit.learners.torch_batched.fit_predict_batched`; fit ``k`` on the rows outside
    fold ``k % n_folds`` of repetition ``k // n_folds``, predicting that fold), and their training
    rows."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from fanfit.learners import LearnerSpec
    from fanfit.learners.torch_batched import BatchedFit, fit_predict_batched

    n_folds = int(folds.max()) + 1
    fits = []
    for k in range(n_fits):
        col = folds[:, k // n_folds]
        train, test = np.flatnonzero(col != k % n_folds), np.flatnonzero(col == k % n_folds)
        fits.append(BatchedFit(x[train], y[train], x[test], k))
    estimator = LearnerSpec.parse(spec_text).build()
    best = float("inf")
    for _ in range(repeats):
        with threadpool_limits(1):
            t0 = time.perf_counter()
            fit_predict_batched(estimator, fits)
            best = min(best, time.perf_counter() - t0)
    return best, sum(len(f.x_train) for f in fits)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=300, help="MLP epochs of the planned job")
    parser.add_argument("--measure-epochs", type=int, default=2, help="MLP epochs timed here")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds")
    parser.add_argument("--skip-hybrid", action="store_true",
                        help="leave out the hybrid K-Means round (it starts a local stack)")  # fmt: skip
    parser.add_argument("--hybrid-n-obs", type=int, default=100_000)
    parser.add_argument("--hybrid-rounds", type=int, default=10)
    parser.add_argument("--mlp-gpu-speedup", type=float, default=None,
                        help="the GPU worker's batched MLP rate over one vCPU (gpu_speedup.py's "
                        "mlp_batched speedup); default: the CPU-batched rate measured here")  # fmt: skip
    parser.add_argument("--mlp-one-by-one", action="store_true",
                        help="plan the MLPs at the one-by-one H100 figure (2.0x), as before issue 32")  # fmt: skip
    args = parser.parse_args()

    import numpy as np
    import pandas as pd
    import torch

    from fanfit import dml
    from fanfit.cli.plan import plan_report, stage_from_throughput
    from fanfit.sched.placement import compare_placements, solve_placement, stage_options

    torch.set_num_threads(1)
    path = ROOT / "examples" / "data" / "sipp1991.dta"
    frame = pd.read_stata(path)
    x = frame[X_COLS].to_numpy(dtype=float)
    outcome = frame["net_tfa"].to_numpy(dtype=float)
    treatment = frame["e401"].to_numpy(dtype=float)
    folds = dml.draw_folds(len(frame), args.n_folds, args.n_rep, 42)
    train, test = np.flatnonzero(folds[:, 0] != 0), np.flatnonzero(folds[:, 0] == 0)
    n_fits = args.n_folds * args.n_rep
    data_in_mb = path.stat().st_size / 1e6
    data_out_mb = len(frame) * args.n_rep * 8 / 1e6  # one float64 prediction per row and repetition

    stages_def = [
        ("ml_l:RandomForestRegressor", f"RandomForestRegressor:{RF}", outcome, 1),
        ("ml_m:RandomForestClassifier", f"RandomForestClassifier:{RF}", treatment, 1),
        ("ml_l:TorchMLPRegressor", "TorchMLPRegressor:" + MLP.format(epochs=args.measure_epochs), outcome, args.epochs),
        ("ml_m:TorchMLPClassifier", "TorchMLPClassifier:" + MLP.format(epochs=args.measure_epochs), treatment, args.epochs),
    ]  # fmt: skip
    stages, measured = [], {}
    gpu_speedups: dict[str, object] = {k: v for k, v in GPU_SPEEDUP.items()}
    for name, spec_text, target, epochs in stages_def:
        seconds = _measure(spec_text, x, target, train, test, args.repeats)
        measured_epochs = args.measure_epochs if epochs > 1 else 1
        rate = len(train) * measured_epochs / seconds  # rows (x epochs) per second at one vCPU
        learner = name.split(":", 1)[1]
        measured[name] = {"fit_s": round(seconds, 4), "samples_per_s_1vcpu": round(rate, 1)}
        speedup = GPU_SPEEDUP[learner]
        if learner in BATCHED and not args.mlp_one_by_one:
            batch_s, batch_rows = _measure_batched(
                spec_text, x, target, folds, n_fits, args.repeats
            )
            batched_rate = batch_rows * args.measure_epochs / batch_s
            measured[name].update(
                batched_fits=n_fits,
                batched_fit_s=round(batch_s, 4),
                batched_samples_per_s_1vcpu=round(batched_rate, 1),
                mlp_batched_speedup=round(batched_rate / rate, 3),
            )
            speedup = args.mlp_gpu_speedup or batched_rate / rate
            gpu_speedups[learner] = {
                "speedup": round(speedup, 3),
                "source": "given (--mlp-gpu-speedup)"
                if args.mlp_gpu_speedup
                else "cpu-batched, measured here (no GPU)",
            }
        stages.append(
            stage_from_throughput(
                name,
                n_fits * len(train) * epochs,
                rate,
                gpu_speedup=speedup,
                memory_mb=LAMBDA_MEMORY_MB,
                lambda_startup_s=LAMBDA_STARTUP_S,
                gpu_startup_s=GPU_STARTUP_S,
                data_in_mb=data_in_mb,
                data_out_mb=data_out_mb,
            )
        )
    caps = {"lambda": n_fits, "gpu": 4}
    fastest = sum(min(c.seconds for c in stage_options(s, caps)) for s in stages)
    deadline = args.deadline

    results = compare_placements(
        stages,
        deadline_s=deadline,
        max_workers=caps,
        methods=("milp", "all-cpu", "all-gpu", "greedy"),
    )
    optimum = solve_placement(stages, deadline_s=deadline, max_workers=caps, method="dp")
    report = plan_report(results)
    plan = results["milp"]
    assert plan is not None
    feasible_baselines = [
        p for m, p in results.items() if m != "milp" and p is not None and p.meets_deadline
    ]
    out = {
        "plan_cost_usd": report["plan_cost_usd"],
        "optimal_cost_usd": optimum.cost_usd,
        "all_cpu_cost_usd": report["all_cpu_cost_usd"],
        "all_gpu_cost_usd": report["all_gpu_cost_usd"],
        "greedy_cost_usd": report["greedy_cost_usd"],
        "meets_deadline": report["meets_deadline"],
        "baselines_meet_deadline": report["baselines_meet_deadline"],
        "plan_equals_optimum": abs(plan.cost_usd - optimum.cost_usd) <= 1e-9 * optimum.cost_usd,
        "plan_below_every_baseline_meeting_deadline": all(
            plan.cost_usd < p.cost_usd * (1 - 1e-9) for p in feasible_baselines
        ),
        "deadline_s": round(deadline, 3),
        "fastest_plan_s": round(fastest, 3),
        "plan_total_s": round(plan.total_s, 3),
        "plan": [
            {k: (round(v, 6) if isinstance(v, float) else v) for k, v in c.to_dict().items()}
            for c in plan.stages
        ],
        "baseline_total_s": {
            m: (None if p is None else round(p.total_s, 3))
            for m, p in results.items()
            if m != "milp"
        },
        "job": {
            "data": "examples/data/sipp1991.dta",
            "n_obs": len(frame),
            "n_folds": args.n_folds,
            "n_rep": args.n_rep,
            "n_train_per_fit": int(len(train)),
            "mlp_epochs": args.epochs,
        },
        "measured_cpu_1vcpu": measured,
        "assumptions": {
            "gpu_speedup_over_1vcpu": gpu_speedups,
            "gpu_instance": "g4dn.xlarge",
            "lambda_startup_s": LAMBDA_STARTUP_S,
            "gpu_startup_s": GPU_STARTUP_S,
            "lambda_memory_mb": list(LAMBDA_MEMORY_MB),
            "lambda_1769mb_is_1_vcpu": True,
            "mlp_on_lambda_as_container_image": True,
            "max_workers": caps,
        },
    }
    # The same comparison over a sweep of deadlines (multiples of the fastest plan's time).
    sweep = []
    for factor in (1.5, 2.0, 3.0, 4.0, 6.0, 8.0):
        d = factor * fastest
        r = compare_placements(stages, deadline_s=d, max_workers=caps)
        best = r["milp"]
        assert best is not None
        row = {"deadline_s": round(d, 1), "plan_cost_usd": round(best.cost_usd, 6)}
        for m in ("all-cpu", "all-gpu", "greedy"):
            p = r[m]
            row[m] = None if p is None else [round(p.cost_usd, 6), p.meets_deadline]
        row["plan_uses_gpu"] = any(c.resource.startswith("gpu:") for c in best.stages)
        row["plan_below_every_baseline_meeting_deadline"] = all(
            best.cost_usd < p.cost_usd * (1 - 1e-9)
            for m, p in r.items()
            if m != "milp" and p is not None and p.meets_deadline
        )
        sweep.append(row)
    out["deadline_sweep"] = sweep
    if not args.skip_hybrid:
        out["hybrid_kmeans_round"] = hybrid_kmeans_round(args.hybrid_n_obs, args.hybrid_rounds)
    if args.json:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
