"""DS-Sync against BSP on the local stack: the round's synchronisation, one reduce or group all-reduces.

A wide multinomial logistic regression, 1,000 features x 1,000 classes (1,001,000 parameters, an
8 MB model in float64), trained by mini-batch SGD on a synthetic sparse-ish set (4,000 rows, 90% of
the features zero in each row; labels from a random softmax model) by 8 Lambda workers, twice:

- ``bsp``: every round one TrainReduce reads the 8 workers' gradients (8 x 8 MB) and the model and
  writes the next model;
- ``ds-sync`` (Wang et al. 2020, groups of 2, reshuffled every round): no reducer. Each worker
  steps its own model and writes it; at the start of the next round each worker reads its 2
  group members' stepped models and averages them itself (a group all-reduce); the models are
  averaged globally only once, at the end (TrainFinalize). Without a global barrier: round 0 runs
  alone (nothing measured), then one Map invocation of each worker runs the other rounds as a
  segment (:func:`fanfit.jobs.train.schedule.segment_rounds`), each worker waiting only for its
  group's partials; the next schedule (or TrainFinalize) records the segment's rounds from the
  workers' small records.

A round's time is read from the workers' records, the same way for both schemes (a DS-Sync
segment has no per-round state in the execution's history): round ``r``'s end is the latest
``ended_at`` of its workers (their partials written), and round ``r``'s time the difference
between the ends of rounds ``r`` and ``r - 1`` (:func:`record_round_times`), so that what runs
between two rounds' partials counts: BSP's reduce and next schedule, a segment's boundary
(TrainSchedule and the next Map's invocations). Round 0 (cold starts, no round before) has no
time; ``bsp_round_s``/``dssync_round_s`` are the medians over rounds 1.., ``round_speedup`` BSP's
over DS-Sync's, and ``*_mean_round_s`` the means (the end of round ``R - 1`` less that of round 0,
over ``R - 1``). ``bsp_reduce_s`` is BSP's reduce, from the execution's history (the exit of the
workers' Map to the entry of "Is another round to run?"). DS-Sync has no reduce:
``dssync_reduce_s`` is its workers' group-averaging time instead, the slowest worker's ``sync_s``
of the round (reading its group's partials and averaging them). The losses are the last round's
(the batch-weighted mean loss of the workers on their models). ``profile`` breaks a Map down per
scheme, from the history (medians over the Maps after round 0's; a Map is one round under BSP, a
segment under DS-Sync): ``schedule_s``, ``map_s`` (the workers' Map), ``after_map_s`` (reduce or
Pass), and per worker ``invoke_s`` (its Task state, scheduling to result), and from the records
(medians over workers and rounds 1..) ``handler_s`` (one round's step, start to end, I/O
included), ``io_s``, ``compute_s``, ``sync_s`` and ``wait_s`` (a worker's wait for its group's
partials within a segment); under DS-Sync also ``sync_held``, the mean number of its group's
partials a worker's environment still held in memory (the one it wrote) rather than read from
S3. ``dssync_maps`` counts DS-Sync's Maps (``bsp_maps``: one per round).

The benchmark starts its own local stack (state dir ``.fanfit/bench-dssync``) and stops it at the
end. About 2-5 minutes on a 2-core machine, depending on what else runs.

    python benchmarks/dssync.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

N_OBS, N_FEATURES, N_CLASSES, N_WORKERS = 4_000, 1_000, 1_000, 8
DENSITY = 0.1


def synthetic(seed: int = 0) -> pd.DataFrame:
    """A (N_OBS, N_FEATURES) design, ``DENSITY`` of each row's entries non-zero (standard normal),
    with labels from a random softmax model over N_CLASSES classes."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_OBS, N_FEATURES)) * (rng.random((N_OBS, N_FEATURES)) < DENSITY)
    W = rng.normal(size=(N_FEATURES, N_CLASSES)) / np.sqrt(DENSITY * N_FEATURES)
    y = (X @ W + rng.gumbel(size=(N_OBS, N_CLASSES))).argmax(axis=1)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(N_FEATURES)])
    frame["y"] = y.astype(float)
    return frame


def round_timings(sfn: Any, execution_arn: str) -> list[dict[str, Any]]:
    """Per round of an execution, seconds: ``round_s`` (scheduling state entered to "Is another
    round to run?" entered), ``reduce_s`` (workers' Map exited to that Choice entered: the reduce,
    or DS-Sync's Pass), ``schedule_s`` (the scheduling state), ``map_s`` (the workers' Map) and
    ``invoke_s`` (each worker's Task state, entered to exited)."""
    from fanfit.jobs.states import TrainState

    pages = sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn)
    rounds: list[dict[str, Any]] = []
    start = map_start = map_end = schedule_end = None
    tasks: list[Any] = []
    invoke: list[float] = []
    for ev in (ev for page in pages for ev in page["events"]):
        details = ev.get("stateEnteredEventDetails") or ev.get("stateExitedEventDetails") or {}
        name, kind, t = details.get("name"), ev["type"], ev["timestamp"]
        if kind.endswith("StateEntered") and name == TrainState.SCHEDULE_ROUND:
            start, map_end, tasks, invoke = t, None, [], []
        elif kind.endswith("StateExited") and name == TrainState.SCHEDULE_ROUND:
            schedule_end = t
        elif kind == "MapStateEntered" and name == TrainState.RUN_ROUND:
            map_start = t
        elif kind == "MapStateExited" and name == TrainState.RUN_ROUND:
            map_end = t
        elif kind == "TaskStateEntered" and name == TrainState.WORKER_STEP:
            tasks.append(t)
        elif kind == "TaskStateExited" and name == TrainState.WORKER_STEP and tasks:
            invoke.append((t - tasks.pop(0)).total_seconds())
        elif kind.endswith("StateEntered") and name == TrainState.IS_ROUND_LEFT and start:
            if map_end is not None and map_start is not None and schedule_end is not None:
                rounds.append(
                    {
                        "round_s": (t - start).total_seconds(),
                        "reduce_s": (t - map_end).total_seconds(),
                        "schedule_s": (schedule_end - start).total_seconds(),
                        "map_s": (map_end - map_start).total_seconds(),
                        "invoke_s": invoke,
                    }
                )
            start = None
    return rounds


def record_round_times(records: list[dict[str, Any]]) -> list[float]:
    """Per round ``r >= 1`` of a job's round records, seconds: the latest ``ended_at`` of round
    ``r``'s workers less that of round ``r - 1`` (epoch seconds from the workers' own clocks)."""
    ends = [max(float(w["ended_at"]) for w in r["workers"]) for r in records]
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


def profile(timings: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over rounds 1.. of the execution's states (:func:`round_timings`) and, over the
    workers of those rounds, of their Task states and their own measures (the round records:
    ``handler_s`` = ``ended_at - started_at``, ``io_s``, ``compute_s``, ``sync_s``), seconds."""
    later = timings[1:]
    workers = [w for r in records[1:] for w in r["workers"]]
    out = {
        f"{k}": statistics.median(r[k] for r in later) for k in ("schedule_s", "map_s", "reduce_s")
    }
    out["after_map_s"] = out.pop("reduce_s")
    out["invoke_s"] = statistics.median(x for r in later for x in r["invoke_s"])
    out["handler_s"] = statistics.median(w["ended_at"] - w["started_at"] for w in workers)
    for k in ("io_s", "compute_s", "sync_s", "wait_s"):
        values = [w[k] for w in workers if w.get(k) is not None]
        out[k] = statistics.median(values) if values else 0.0
    held = [w["sync_held"] for w in workers if w.get("sync_held") is not None]
    if held:  # DS-Sync: partials a worker's environment still held, per worker (of group_size)
        out["sync_held"] = statistics.fmean(held)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--group-size", type=int, default=2)
    args = parser.parse_args(argv)

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame = synthetic()
    features = [c for c in frame.columns if c != "y"]
    options = dict(model="logreg", features=features, target="y", workers=N_WORKERS,
                   global_batch=N_OBS, rounds=args.rounds, lr=0.5, seed=0,
                   group_size=args.group_size)  # fmt: skip
    os.environ["FANFIT_HOME"] = str(
        Path(__file__).resolve().parents[1] / ".fanfit" / "bench-dssync"
    )
    runs: dict[str, Any] = {}
    timings: dict[str, list[dict[str, float]]] = {}
    with ensure_local_stack(keep_running=False):
        client = Client.local_stack()
        for sync in ("bsp", "ds-sync"):
            job = client.submit_train(frame, sync=sync, **options)
            runs[sync] = job.result(timeout=900)
            timings[sync] = round_timings(client.sfn, job.execution_arn)

    bsp, ds = runs["bsp"], runs["ds-sync"]
    times = {"bsp": record_round_times(bsp.rounds), "ds-sync": record_round_times(ds.rounds)}
    median = {sync: statistics.median(t) for sync, t in times.items()}
    mean = {sync: statistics.fmean(t) for sync, t in times.items()}
    # DS-Sync has no reduce: its synchronisation is the workers' group averaging, the round's
    # slowest worker's sync_s
    ds_sync_s = statistics.median(
        max(float(w.get("sync_s") or 0.0) for w in r["workers"]) for r in ds.rounds[1:]
    )
    loss_bsp, loss_ds = float(bsp.rounds[-1]["loss"]), float(ds.rounds[-1]["loss"])
    out = {
        "n_workers": N_WORKERS,
        "n_params": (N_FEATURES + 1) * N_CLASSES,
        "bsp_round_s": median["bsp"],
        "dssync_round_s": median["ds-sync"],
        "round_speedup": median["bsp"] / median["ds-sync"],
        "bsp_reduce_s": statistics.median(r["reduce_s"] for r in timings["bsp"][1:]),
        "dssync_reduce_s": ds_sync_s,
        "loss_bsp": loss_bsp,
        "loss_dssync": loss_ds,
        "loss_rel_diff": abs(loss_ds - loss_bsp) / abs(loss_bsp),
        "group_size": args.group_size,
        "rounds": args.rounds,
        "n_obs": N_OBS,
        "global_batch": N_OBS,
        "bsp_mean_round_s": mean["bsp"],
        "dssync_mean_round_s": mean["ds-sync"],
        "mean_round_speedup": mean["bsp"] / mean["ds-sync"],
        "bsp_rounds_s": times["bsp"],
        "dssync_rounds_s": times["ds-sync"],
        "bsp_maps": len(timings["bsp"]),
        "dssync_maps": len(timings["ds-sync"]),
        "profile": {
            "bsp": profile(timings["bsp"], bsp.rounds),
            "ds-sync": profile(timings["ds-sync"], ds.rounds),
        },
    }
    print(json.dumps(out, indent=None if args.json else 2))  # --json: one line
    return 0


if __name__ == "__main__":
    sys.exit(main())
