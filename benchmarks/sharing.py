"""Sharing the account: Dorm's partitions against static equal partitions and FCFS, simulated.

    python benchmarks/sharing.py --json

A trace of 20 jobs (estimate and train, mixed; arrivals from a seeded Poisson process) runs in a
discrete-event simulation against three partitioning policies of :mod:`fanfit.sched.partition`:

- ``dorm``: the utilization-fairness optimizer (a MILP per event), at most ``--max-changes`` running jobs
  resized per event (Sun et al. 2017);
- ``static``: the concurrency cut into ``--static-partitions`` equal, fixed parts, one job per part,
  later jobs wait for a part to free;
- ``fcfs``: first come, first served, each job takes its whole demand from what is left.

Partitions are recomputed when a job arrives or ends (as Dorm does). A job's work comes from throughput
measured in-process before the simulation, on this machine's one core (one 1,769 MB Lambda = 1 vCPU):

- estimate: one (repetition, fold, learner) unit = one fit on 4/5 of the 401(k) data
  (examples/data/sipp1991.dta, DoubleML's 9 covariates): random forests (100 trees, depth 8) as in
  ``make demo``, or LassoCV (cv=3) as in benchmarks/shard_sizing.py. Units are independent: a job with
  ``x`` slots runs at ``x`` fits' worth of speed up to its units left (its demand).
- train: one worker step of logistic regression (``fanfit.train.worker_gradient``) on 50,000 rows x 50
  features (the shape of benchmarks/straggler.py's per-worker batch), plus the per-invocation read and
  write of the model (``--invoke-overhead-s``). Rounds are bulk synchronous: with ``x < W`` slots the
  ``W`` workers of a round run in ``ceil(W / x)`` waves, so only ``W / ceil(W / x)`` slots do work.

Metrics (over the busy time, when at least one job has arrived and not finished):
``utilization`` = slot-seconds of work done / (concurrency x busy time); ``fairness_loss`` = the
time-average of Dorm's fairness loss (:func:`fanfit.sched.partition.fairness_loss` against the weighted,
demand-capped fair shares of the jobs present); ``mean_jct_s`` = mean job completion time (arrival to
end); ``overhead_share`` = the policy's real wall time computing partitions / the makespan.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def measure(repeats: int = 3) -> dict[str, float]:
    """Seconds per estimate unit (random forest, LassoCV) and per train worker step, measured here."""
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LassoCV

    from fanfit.train import init_params, worker_gradient

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    x = frame[X_COLS].to_numpy(float)
    train = np.arange(len(x)) % 5 != 0  # one fold's training rows (5 folds)
    y, d = frame["net_tfa"].to_numpy(float), frame["e401"].to_numpy(float)

    def best(fn) -> float:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    rf = {"n_estimators": 100, "max_depth": 8, "random_state": 0, "n_jobs": 1}
    rf_l = best(lambda: RandomForestRegressor(**rf).fit(x[train], y[train]))
    rf_m = best(lambda: RandomForestClassifier(**rf).fit(x[train], d[train]))
    lasso_l = best(lambda: LassoCV(cv=3).fit(x[train], y[train]))
    lasso_m = best(lambda: LassoCV(cv=3).fit(x[train], d[train]))
    rng = np.random.default_rng(0)
    xb, yb = rng.normal(size=(50_000, 50)), rng.integers(0, 2, 50_000)
    params = init_params(50, 2)
    step = best(lambda: worker_gradient("logistic", params, xb, yb))
    return {
        "rf_unit_s": (rf_l + rf_m) / 2,
        "lasso_unit_s": (lasso_l + lasso_m) / 2,
        "train_step_s": step,
        "rf_ml_l_s": rf_l,
        "rf_ml_m_s": rf_m,
        "lasso_ml_l_s": lasso_l,
        "lasso_ml_m_s": lasso_m,
    }


@dataclass
class Job:
    """One job of the trace; ``work`` and ``left`` in slot-seconds."""

    job_id: str
    kind: str
    arrival: float
    weight: float
    work: float
    unit_s: float  # estimate: seconds per unit; train: seconds per worker step
    workers: int = 0  # train: W
    left: float = 0.0
    end: float | None = None
    describe: dict = field(default_factory=dict)

    def demand(self) -> int:
        """Most slots this job can use now (estimate: units left; train: its workers)."""
        if self.kind == "train":
            return self.workers
        return max(1, math.ceil(self.left / self.unit_s - 1e-9))

    def rate(self, slots: int) -> float:
        """Slot-seconds of work done per second with ``slots`` slots."""
        if slots <= 0:
            return 0.0
        if self.kind == "train":
            return self.workers / math.ceil(self.workers / slots)  # BSP: rounds run in waves
        return float(min(slots, self.demand()))


def make_trace(n_jobs: int, seed: int, m: dict, overhead_s: float, load: float, capacity: int):
    """``n_jobs`` jobs: 60% estimate (5 folds, 5-20 repetitions, RF or LassoCV), 40% train (4-32
    workers, 50-200 rounds); Poisson arrivals whose mean gap makes the offered load ``load``
    (mean work / (gap x capacity)). Returns (jobs, mean inter-arrival seconds)."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, n_jobs)
    jobs = []
    for i in range(n_jobs):
        t = 0.0
        weight = 2.0 if rng.uniform() < 0.2 else 1.0
        if rng.uniform() < 0.6:
            learner = "rf" if rng.uniform() < 0.5 else "lasso"
            n_rep = int(rng.choice([5, 10, 20]))
            units = 5 * n_rep * 2
            unit_s = m[f"{learner}_unit_s"]
            job = Job(f"est-{i:02d}", "estimate", float(t), weight, units * unit_s, unit_s)
            job.describe = {"learner": learner, "n_folds": 5, "n_rep": n_rep, "units": units}
        else:
            workers = int(rng.choice([4, 8, 16, 32]))
            rounds = int(rng.choice([50, 100, 200]))
            step = m["train_step_s"] + overhead_s
            job = Job(f"train-{i:02d}", "train", float(t), weight, rounds * workers * step, step)
            job.workers = workers
            job.describe = {"workers": workers, "rounds": rounds}
        job.left = job.work
        job.describe["work_slot_s"] = round(job.work, 2)
        jobs.append(job)
    mean_gap = float(np.mean([j.work for j in jobs])) / (load * capacity)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[1:] * mean_gap)])
    for job, t in zip(jobs, arrivals):
        job.arrival = float(t)
    return jobs, mean_gap


def simulate(policy: str, jobs: list[Job], capacity: int, args) -> dict:
    """Discrete-event simulation of one policy; events are arrivals and job ends."""
    from fanfit.sched.partition import (
        dorm_partitions,
        fair_shares,
        fairness_loss,
        fcfs_partitions,
        static_partitions,
    )

    cap = np.array([capacity, 0])  # Lambda concurrency; no GPU work in this trace
    now, policy_s, n_changes, n_events = 0.0, 0.0, 0, 0
    busy = work_done = fair_integral = 0.0
    held: dict[str, int] = {}
    pending = sorted(jobs, key=lambda j: j.arrival)
    for j in pending:
        j.left, j.end = j.work, None
    arrived: list[Job] = []
    while pending or any(j.end is None for j in arrived):
        while pending and pending[0].arrival <= now + 1e-9:
            arrived.append(pending.pop(0))
        running = [j for j in arrived if j.end is None]  # arrival order
        if not running:
            now = pending[0].arrival
            continue
        demand = np.array([[j.demand(), 0] for j in running])
        weight = np.array([j.weight for j in running])
        t0 = time.perf_counter()
        if policy == "dorm":
            current = np.array(
                [[held.get(j.job_id, -1), 0 if j.job_id in held else -1] for j in running]
            )
            out = dorm_partitions(demand, cap, weight, current, max_changes=args.max_changes)
            x = out.partitions
        elif policy == "static":
            x = static_partitions(demand, cap, args.static_partitions)
        else:
            x = fcfs_partitions(demand, cap)
        policy_s += time.perf_counter() - t0
        n_events += 1
        n_changes += sum(
            1 for j, xi in zip(running, x[:, 0]) if j.job_id in held and held[j.job_id] != xi
        )
        held = {j.job_id: int(xi) for j, xi in zip(running, x[:, 0])}
        fair = fair_shares(demand, cap, weight)
        loss = fairness_loss(x, fair, cap)
        next_arrival = pending[0].arrival if pending else math.inf
        # advance with these partitions until the next arrival or a job's end; between, an estimate's
        # rate falls as its units left drop below its partition (the tail of its last wave)
        while True:
            rates = np.array([j.rate(int(xi)) for j, xi in zip(running, x[:, 0])])
            horizon = next_arrival - now
            for j, r, xi in zip(running, rates, x[:, 0]):
                if r <= 0:
                    continue
                horizon = min(horizon, j.left / r)
                if j.kind == "estimate":
                    floor_left = (min(int(xi), j.demand()) - 1) * j.unit_s
                    if j.left - floor_left > 1e-9 and floor_left > 0:
                        horizon = min(horizon, (j.left - floor_left) / r)
            if not math.isfinite(horizon):
                raise RuntimeError(f"{policy}: no job can progress at t={now}")
            dt = max(horizon, 1e-9)
            ended = False
            for j, r in zip(running, rates):
                j.left -= r * dt
                if j.end is None and j.left <= 1e-6:
                    j.left, j.end, ended = 0.0, now + dt, True
            busy += dt
            work_done += float(rates.sum()) * dt
            fair_integral += loss * dt
            now += dt
            if ended or now >= next_arrival - 1e-9:
                break
    jct = [j.end - j.arrival for j in jobs]
    makespan = max(j.end for j in jobs) - min(j.arrival for j in jobs)
    return {
        "utilization": round(work_done / (capacity * busy), 4),
        "fairness_loss": round(fair_integral / busy, 4),
        "mean_jct_s": round(float(np.mean(jct)), 2),
        "makespan_s": round(makespan, 2),
        "overhead_share": round(policy_s / makespan, 6),
        "policy_wall_s": round(policy_s, 4),
        "events": n_events,
        "partition_changes": n_changes,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64, help="Lambda slots shared")
    parser.add_argument(
        "--load", type=float, default=0.8, help="offered load: mean work / (gap x concurrency)"
    )
    parser.add_argument("--static-partitions", type=int, default=4)
    parser.add_argument("--max-changes", type=int, default=3, help="Dorm's theta")
    parser.add_argument("--invoke-overhead-s", type=float, default=0.05)
    args = parser.parse_args()

    measured = measure()
    jobs, mean_gap = make_trace(
        args.jobs, args.seed, measured, args.invoke_overhead_s, args.load, args.concurrency
    )
    policies = {p: simulate(p, jobs, args.concurrency, args) for p in ("dorm", "static", "fcfs")}
    dorm, static = policies["dorm"], policies["static"]
    out = {
        "trace": {
            "jobs": args.jobs,
            "estimate": sum(j.kind == "estimate" for j in jobs),
            "train": sum(j.kind == "train" for j in jobs),
            "seed": args.seed,
            "offered_load": args.load,
            "mean_interarrival_s": round(mean_gap, 3),
            "concurrency": args.concurrency,
            "static_partitions": args.static_partitions,
            "max_changes": args.max_changes,
            "total_work_slot_s": round(sum(j.work for j in jobs), 1),
        },
        "measured": {k: round(v, 4) for k, v in measured.items()},
        "policies": policies,
        "utilization_ratio_vs_static": round(dorm["utilization"] / static["utilization"], 3),
        "fairness_loss_ratio_vs_static": round(dorm["fairness_loss"] / static["fairness_loss"], 3)
        if static["fairness_loss"] > 0
        else None,
        "targets": {
            "utilization_ratio_ge_1_5": bool(dorm["utilization"] >= 1.5 * static["utilization"]),
            "fairness_loss_ratio_le_0_67": bool(
                dorm["fairness_loss"] <= 0.67 * static["fairness_loss"]
            ),
            "overhead_lt_5pct": bool(dorm["overhead_share"] < 0.05),
        },
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
