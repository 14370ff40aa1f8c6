"""The fixed cost of a job on the warm local stack: each execution cut into its states' seconds.

    python benchmarks/fixed_cost.py --json

Issue 39, item 1. Two jobs on the local stack, after a warm-up job of each (so that every
function has a warm environment and the ThroughputTable knows the learners):

- ``small``: a PLR of 500 rows (DoubleML's ``make_plr_CCDDHNR2018``, 20 covariates, NumPy seed
  ``--seed``), ``LinearRegression`` for ``ml_l`` and ``ml_m``, 5 folds x 2 repetitions (20 fits),
  through :meth:`fanfit.client.Client.submit_estimate`;
- ``did_multi``: benchmarks/did_multi.py's DoubleMLDIDMulti (5,000 units, 6 group-time
  combinations, linear learners, 5 folds x 10 repetitions) as ONE job of 6 parts, against
  DoubleML's in-process fit (``n_jobs_models=-1``), as that benchmark times it.

Each execution is read from its history (``GetExecutionHistory``): ``execution_s`` (start to stop),
``states`` (seconds per top-level state of orchestrator/estimate.asl.json, summed over its
entries: Prepare, the Schedule steps, each wave's Map, Aggregate) and ``between_states_s`` (the
execution's seconds outside any state: the interpreter's transitions). The fits' critical path
``fit_path_s`` is, per wave (a Map state's entry), the slowest of its shards' ``fit_s`` (the
shards' statistics in ``result.json``, a shard belonging to the wave whose Map it ran in), summed
over the waves; ``fixed_s = execution_s - fit_path_s``. ``client_s`` is the client's wall from
``submit_estimate`` to the result in hand (the upload, StartExecution and the polling included).

Target (issue 39): ``fixed_s`` <= 2.0 s for ``small``; DIDMulti's ``ratio`` (client wall over
DoubleML's) <= 1.3. Medians of ``--runs`` (default 3).

Prints one JSON object: per job the runs (``client_s``, ``execution_s``, ``fit_path_s``,
``fixed_s``, ``states``, ``between_states_s``, ``n_waves``, ``n_shards``, ``cold_shards``; DIDMulti
also ``doubleml_s`` and ``ratio``) and their medians; the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from did_multi import models, panel  # noqa: E402 - the DIDMulti benchmark's data and models

from fanfit.jobs.states import EstimateState  # noqa: E402

#: The Map state whose entries are the waves.
MAP_STATE = str(EstimateState.CROSSFIT_WAVE)


def execution_profile(events: list[dict[str, Any]], shards: list[dict[str, Any]]) -> dict[str, Any]:
    """An execution's seconds cut into its top-level states, and its fits' critical path.

    Parameters
    ----------
    events : list of dict
        ``GetExecutionHistory``'s events of the execution, in order (``timestamp`` datetimes,
        ``type``, ``stateEnteredEventDetails`` / ``stateExitedEventDetails`` with ``name``).
    shards : list of dict
        ``result.json``'s ``timings.shards``: each shard's ``started_at`` (epoch s) and ``fit_s``.

    Returns
    -------
    dict
        ``execution_s``, ``states`` (name -> seconds), ``between_states_s``, ``fit_path_s`` (sum
        over the waves of the slowest shard's fit seconds), ``fixed_s``, ``n_waves``,
        ``n_shards``, ``cold_shards``.

    Raises
    ------
    ValueError
        A history without ExecutionStarted and a terminal event.
    """
    start = next((e["timestamp"] for e in events if e["type"] == "ExecutionStarted"), None)
    end = next((e["timestamp"] for e in reversed(events)
                if e["type"] in ("ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted",
                                 "ExecutionTimedOut")), None)  # fmt: skip
    if start is None or end is None:
        raise ValueError("the history has no ExecutionStarted and terminal event")
    states: dict[str, float] = {}
    waves: list[tuple[float, float]] = []
    entered: dict[str, Any] = {}
    depth = 0  # a Map's inner states (inline children) are not top-level
    for e in events:
        kind = e["type"]
        if kind.endswith("StateEntered"):
            name = e["stateEnteredEventDetails"]["name"]
            if depth == 0:
                entered[name] = e["timestamp"]
            if kind == "MapStateEntered":
                depth += 1
        elif kind.endswith("StateExited"):
            name = e["stateExitedEventDetails"]["name"]
            if kind == "MapStateExited":
                depth -= 1
            if depth == 0 and name in entered:
                began = entered.pop(name)
                states[name] = states.get(name, 0.0) + (e["timestamp"] - began).total_seconds()
                if name == MAP_STATE:
                    waves.append((began.timestamp(), e["timestamp"].timestamp()))
    path = 0.0
    for began, ended in waves:
        fits = [float(s["fit_s"]) for s in shards if began <= float(s["started_at"]) <= ended]
        path += max(fits, default=0.0)
    execution_s = (end - start).total_seconds()
    return {
        "execution_s": round(execution_s, 3),
        "states": {k: round(v, 3) for k, v in states.items()},
        "between_states_s": round(execution_s - sum(states.values()), 3),
        "fit_path_s": round(path, 3),
        "fixed_s": round(execution_s - path, 3),
        "n_waves": len(waves),
        "n_shards": len(shards),
        "cold_shards": sum(bool(s.get("cold_start")) for s in shards),
    }


def _history(client: Any, execution_arn: str) -> list[dict[str, Any]]:
    pages = client.sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn)
    return [e for page in pages for e in page["events"]]


def small_job(client: Any, frame: Any, args: Any) -> dict[str, Any]:
    """One run of the small PLR: the client's wall and its execution's profile."""
    t0 = time.perf_counter()
    job = client.submit_estimate(
        frame, model="plr", y="y", d="d", x=[c for c in frame.columns if c.startswith("X")],
        ml_l="LinearRegression", ml_m="LinearRegression", n_folds=5, n_rep=2, seed=args.seed,
    )  # fmt: skip
    result = job.result(timeout=args.timeout)
    client_s = time.perf_counter() - t0
    profile = execution_profile(_history(client, job.execution_arn),
                                list(result.timings.get("shards", [])))  # fmt: skip
    return {"client_s": round(client_s, 3), **profile}


def did_multi_job(client: Any, data: Any, args: Any) -> dict[str, Any]:
    """One run of the DIDMulti: fanfit's wall, DoubleML's, and the one execution's profile."""
    ns = argparse.Namespace(n_folds=5, n_rep=10, learner="linear", seed=args.seed)
    ours, theirs = models(data, ns)
    t0 = time.perf_counter()
    ours.fit(client=client, seed=args.seed, timeout=args.timeout)
    client_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    theirs.fit(n_jobs_models=-1)
    doubleml_s = time.perf_counter() - t1
    job, result = ours.fanfit_jobs[0], ours.fanfit_results[0]
    profile = execution_profile(_history(client, job.execution_arn),
                                list(result.timings.get("shards", [])))  # fmt: skip
    return {"client_s": round(client_s, 3), "doubleml_s": round(doubleml_s, 3),
            "ratio": round(client_s / doubleml_s, 3), **profile}  # fmt: skip


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every number of the runs (states by name)."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = round(statistics.median(r[key] for r in runs), 3)
        elif isinstance(value, dict):
            out[key] = {k: round(statistics.median(r[key].get(k, 0.0) for r in runs), 3)
                        for k in value}  # fmt: skip
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", default="small,did_multi", help="which jobs, comma-separated")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per job")
    args = parser.parse_args()

    import numpy as np
    from doubleml.plm.datasets import make_plr_CCDDHNR2018

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    jobs = args.jobs.split(",")
    np.random.seed(args.seed)
    frame = make_plr_CCDDHNR2018(n_obs=500, dim_x=20, return_type="DataFrame")
    data = panel(5000, args.seed) if "did_multi" in jobs else None
    load_before = os.getloadavg()[0]
    out: dict[str, Any] = {"command": "python benchmarks/fixed_cost.py " + " ".join(sys.argv[1:])}
    with warnings.catch_warnings(), ensure_local_stack():
        warnings.simplefilter("ignore")  # DoubleML's deprecation notes, lbfgs on raw covariates
        client = Client.local_stack()
        for name, run in (("small", lambda: small_job(client, frame, args)),
                          ("did_multi", lambda: did_multi_job(client, data, args))):  # fmt: skip
            if name not in jobs:
                continue
            run()  # the warm-up: warm environments, the learners in the ThroughputTable
            runs = [run() for _ in range(args.runs)]
            out[name] = {"median": medians(runs), "runs": runs}
    out["targets"] = {"small_fixed_s": 2.0, "did_multi_ratio": 1.3}
    out["load_average_1m_before"] = round(load_before, 2)
    out["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
