"""Chaos run: mixed jobs on one local stack under injected faults, killed workers, a restart, a cancel.

Issue 31, item 4. ``--small`` (the default, and so far the only size) runs N = 5 jobs:

- ``estimate-plr``: a PLR on 400 synthetic rows (3 covariates, ``LinearRegression`` learners),
  5 folds x 2 repetitions, one unit per shard (20 CrossFit shards);
- ``qte``: a QTE (one job of two parts: quantiles 0.4 and 0.6 of a binary treatment, 400 rows,
  ``LogisticRegression`` learners, 2 folds; :func:`fanfit.client.qte.submit_qte`: a
  ``model='qte'`` estimate is refused by ``Client.submit_estimate``);
- ``train-dssync``: multinomial logistic regression (2,000 rows x 20 features, 5 classes) by 4
  Lambda workers, DS-Sync in groups of 2, 40 rounds of 800 rows (round 0 alone, then rounds 1-39
  as one segment: each worker runs them in one invocation);
- ``train-lbbsp``: K-Means (8 clusters) on scikit-learn's digits (1,797 x 64) by 4 workers of
  1,769, 1,769, 885 and 885 MB, LB-BSP batches, 6 rounds;
- ``cancel-victim``: a PLR whose shards fit 20 random-forest units each, one shard at a time: it is
  cancelled while one of its shards runs.

First every job except the victim runs once on a fault-free local stack (state dir
``.fanfit/bench-chaos``): the reference. Then the stack is started again with
``FANFIT_LOCAL_FAULTS`` (``--faults``, default ``error=0.1,timeout=0.03,crash=0.03,seed=7``: Lambda
service errors, timeouts and crashes after the handler's work) and the chaos phase runs:

1. ``train-dssync``, ``estimate-plr``, ``qte`` and ``cancel-victim`` are submitted together;
2. once a worker of ``train-dssync`` recorded round :data:`KILL_AT_ROUND` of its segment, that
   worker's handler process (its record's ``pid``, checked to be a ``lambda_bootstrap`` of a
   TrainShard function of this stack: the handler's child of the environment's init) is
   SIGKILLed: the invocation fails with ``Runtime.ExitError``, and its retry, finding the step's
   record INPROGRESS, writes the job's stop marker (:func:`fanfit.jobs.train.shard.
   stop_on_unfinished_attempt`). ``kill_stop_s`` is the seconds from the kill until the last
   TrainShard invocation that was running at the kill or started after it returned (its
   ``REPORT`` line in CloudWatch Logs; :func:`stop_after`), read once the job's execution has
   ended; ``billed_after_kill_s`` the Lambda seconds those invocations were billed after the kill
   (:func:`billed_after`). Only the DS-Sync job runs TrainShard then, so those lines are its;
3. then, once a shard of the victim runs, the victim is cancelled (``job.cancel()``, which returns when
   none of the job's steps runs any more): ``cancel_stop_s`` is the seconds from the cancel call
   until it returned (:func:`fanfit.client.jobs.cancel_job`'s wait on the idempotency records);
4. ``train-lbbsp`` is submitted, and once its round 2 runs (3 models in S3) LocalStack is SIGKILLed (its whole
   process group), started again with the same faults and state dir, and the project redeployed
   (S3 and DynamoDB come back from their mirrors; the running executions do not);
5. every job that was not cancelled and has not succeeded is resumed once (``client.resume``);
   ``resumed`` says which. Each job's numbers are then compared with the reference
   (:func:`equal_to_fault_free`: estimates' ``coef``/``se``/``all_coef``/``all_se`` and the DS-Sync
   model bit for bit; LB-BSP's centroids to 1e-9 relative, since its batches, and so the order of
   the sums, follow the measured throughput).

Output (``--json``: one line): ``jobs`` (a list of ``{name, kind, status, resumed,
equal_to_fault_free}``), ``cancel_stop_s``, ``kill_stop_s``, ``billed_after_kill_s``, and
``faults``, ``n_jobs``, ``wall_s``, ``notes`` (what did not happen as planned). Every wait is bounded
and ends early, naming why, once the job it waits on has ended (:func:`_wait_until`). About 5 minutes
on an idle 2-core machine (273 s to 338 s measured), 7 to 18 minutes shared with other work (two
stack starts, three deploys, the jobs twice).

    python benchmarks/chaos.py --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
FAULTS = "error=0.1,timeout=0.03,crash=0.03,seed=7"
#: Keys of an estimate's result document compared with the reference (anywhere in it: a job of
#: several parts holds them per part).
ESTIMATE_KEYS = ("coef", "se", "all_coef", "all_se")
#: Attributes of a train result compared with the reference.
TRAIN_KEYS = ("coef", "intercept", "centroids", "inertia")
#: Relative tolerance per job name (others: bit for bit).
RTOL = {"train-lbbsp": 1e-9}
POLL_S = 0.2


# -- pure parts (tests/unit/test_bench_chaos.py) --------------------------------------------------
def fingerprint(result: Any, keys: Iterable[str]) -> dict[str, np.ndarray]:
    """The numbers of a job's result that must not depend on faults, by path.

    Parameters
    ----------
    result : mapping or object
        An estimate's result document (nested dicts and lists; every number under one of
        ``keys``, at any depth, is taken, its path joined by ``/``: under such a key a mapping's
        numbers are taken by their keys, as ``coef/d``, and its strings left out), or a train
        result (its attributes ``keys``, those it has).
    keys : iterable of str

    Returns
    -------
    dict of str to ndarray
        Path -> float64 array (a scalar as shape ``()``); empty when nothing matched.
    """
    wanted = tuple(keys)
    out: dict[str, np.ndarray] = {}

    def take(node: Any, path: str) -> None:
        # under a compared key: its numbers, at any depth (result.json holds ``coef`` as
        # ``{treatment: value}`` and ``all_coef`` as ``{treatment: [per repetition]}``)
        if isinstance(node, Mapping):
            for key, value in node.items():
                take(value, f"{path}/{key}")
            return
        if node is None or isinstance(node, str | bool):
            return
        with contextlib.suppress(TypeError, ValueError):  # not numbers: left out
            out[path] = np.asarray(node, dtype=float)

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                sub = f"{path}/{key}" if path else str(key)
                if key in wanted:
                    take(value, sub)
                    continue
                walk(value, sub)
        elif isinstance(node, list | tuple):
            for i, value in enumerate(node):
                walk(value, f"{path}/{i}")

    if isinstance(result, Mapping):
        walk(result, "")
    else:
        for key in wanted:
            value = getattr(result, key, None)
            if value is not None:
                out[key] = np.asarray(value, dtype=float)
    return out


def equal_to_fault_free(
    got: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], rtol: float = 0.0
) -> bool:
    """Whether a chaos run's numbers equal the fault-free run's.

    Parameters
    ----------
    got, reference : dict of str to ndarray
        :func:`fingerprint` of the two results.
    rtol : float
        0: bit for bit (``np.array_equal``, NaN equal to NaN); else ``np.allclose`` with this
        relative tolerance and ``atol=1e-12``.

    Returns
    -------
    bool
        False also when either side is empty or they hold different paths or shapes: nothing
        compared is not equal.
    """
    if not reference or set(got) != set(reference):
        return False
    for key, ref in reference.items():
        mine = got[key]
        if mine.shape != ref.shape:
            return False
        if rtol == 0.0:
            if not np.array_equal(mine, ref, equal_nan=True):
                return False
        elif not np.allclose(mine, ref, rtol=rtol, atol=1e-12, equal_nan=True):
            return False
    return True


def report_lines(messages: Iterable[tuple[int, str]]) -> list[tuple[float, float]]:
    """The Lambda ``REPORT`` lines among CloudWatch log events, as (end, billed seconds).

    Parameters
    ----------
    messages : iterable of (int, str)
        ``(timestamp in epoch ms, message)`` of log events.

    Returns
    -------
    list of (float, float)
        Epoch seconds at which the invocation returned (the event's timestamp) and its ``Billed
        Duration`` in seconds, in the order given.
    """
    out: list[tuple[float, float]] = []
    for stamp, message in messages:
        if not message.startswith("REPORT RequestId:"):
            continue
        for field in message.split("\t"):
            name, _, value = field.strip().partition(": ")
            if name == "Billed Duration":
                out.append((stamp / 1000.0, float(value.split()[0]) / 1000.0))
                break
    return out


def _after(reports: Iterable[tuple[float, float]], t0: float) -> list[tuple[float, float]]:
    """(end, seconds billed after ``t0``) of the invocations still running at ``t0`` or later."""
    return [(end, min(billed, end - t0)) for end, billed in reports if end > t0]


def stop_after(reports: Iterable[tuple[float, float]], t0: float) -> float:
    """Seconds from ``t0`` (epoch s) until the last invocation running at or after it returned.

    0.0 when none returned after ``t0`` (nothing was running). See :func:`report_lines`.
    """
    return max((end - t0 for end, _ in _after(reports, t0)), default=0.0)


def billed_after(reports: Iterable[tuple[float, float]], t0: float) -> float:
    """Lambda seconds billed after ``t0`` (epoch s): each invocation that returned after it
    counts its billed duration, at most the part after ``t0`` (Lambda bills per ms of duration;
    https://aws.amazon.com/lambda/pricing/)."""
    return float(sum(part for _, part in _after(reports, t0)))


def job_entry(
    name: str, kind: str, status: str, resumed: bool, equal: bool | None
) -> dict[str, Any]:
    """One item of the output's ``jobs``: ``equal_to_fault_free`` is None for the cancelled job
    (no result to compare)."""
    return {"name": name, "kind": kind, "status": status, "resumed": resumed,
            "equal_to_fault_free": equal}  # fmt: skip


def assemble(
    jobs: list[dict[str, Any]],
    cancel_stop_s: float | None,
    kill_stop_s: float | None,
    billed_after_kill_s: float | None,
    **extra: Any,
) -> dict[str, Any]:
    """The benchmark's JSON object: the issue's fields first (seconds rounded to 0.01), then
    ``targets_met``: every job not cancelled SUCCEEDED and equals the reference, and the cancel and
    the kill stopped within 10 s (False where a figure is missing), then ``extra``."""
    kept = [j for j in jobs if j["status"] != "CANCELLED"]
    met = bool(kept) and all(
        j["status"] == "SUCCEEDED" and j["equal_to_fault_free"] is True for j in kept
    )

    def seconds(x: float | None) -> float | None:
        return None if x is None else round(float(x), 2)

    within = all(x is not None and x <= 10.0 for x in (cancel_stop_s, kill_stop_s))
    return {
        "jobs": jobs,
        "cancel_stop_s": seconds(cancel_stop_s),
        "kill_stop_s": seconds(kill_stop_s),
        "billed_after_kill_s": seconds(billed_after_kill_s),
        "targets_met": {"jobs_equal_fault_free": met, "stopped_within_10_s": within},
        **extra,
    }


# -- the run --------------------------------------------------------------------------------------
def _plr_frame(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    d = x[:, 0] + rng.normal(size=n)
    return pd.DataFrame({"y": 0.5 * d + x[:, 1] + rng.normal(size=n), "d": d,
                         "x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2]})  # fmt: skip


def _qte_frame(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    d = (x[:, 0] + rng.normal(size=n) > 0).astype(float)
    return pd.DataFrame({"y": d + x[:, 1] + rng.normal(size=n), "d": d,
                         "x0": x[:, 0], "x1": x[:, 1], "x2": x[:, 2]})  # fmt: skip


def _logreg_frame(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(2000, 20))
    W = rng.normal(size=(20, 5))
    y = (X @ W + rng.gumbel(size=(2000, 5))).argmax(axis=1)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(20)])
    frame["y"] = y.astype(float)
    return frame


def _digits() -> tuple[pd.DataFrame, np.ndarray]:
    from sklearn.datasets import load_digits

    X = load_digits().data
    rng = np.random.default_rng(1)
    init = X[rng.choice(len(X), 8, replace=False)] + rng.normal(0, 0.1, (8, X.shape[1]))
    return pd.DataFrame(X, columns=[f"p{i}" for i in range(X.shape[1])]), init


def _specs() -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """name -> (kind, submit(client) -> job handle)."""
    from fanfit.client.options import EstimateOptions
    from fanfit.client.qte import submit_qte

    plr = dict(model="plr", y="y", d="d", x=["x0", "x1", "x2"], ml_l="LinearRegression",
               ml_m="LinearRegression", n_folds=5, n_rep=2, seed=3, units_per_shard=1)  # fmt: skip
    rf = 'RandomForestRegressor:{"n_estimators": 200, "random_state": 0}'
    victim = dict(plr, ml_l=rf, ml_m=rf, seed=5, units_per_shard=20, max_concurrency=1)
    qte_frame = _qte_frame(12, 400)
    qte = EstimateOptions(data=qte_frame, model="qte", y="y", d="d", x=["x0", "x1", "x2"],
                          quantiles=[0.4, 0.6], ml_g="LogisticRegression",
                          ml_m="LogisticRegression", n_folds=2, seed=3)  # fmt: skip
    logreg = _logreg_frame(0)
    digits, init = _digits()
    dssync = dict(model="logreg", features=[c for c in logreg.columns if c != "y"], target="y",
                  workers=4, global_batch=800, rounds=DSSYNC_ROUNDS, lr=0.5, seed=0, sync="ds-sync",
                  group_size=2)  # fmt: skip
    lbbsp = dict(model="kmeans", features=list(digits.columns), n_clusters=8, init=init,
                 workers=4, worker_memory="1769,1769,885,885", rounds=6, balance="lb-bsp")  # fmt: skip
    return {
        "estimate-plr": ("estimate", lambda c: c.submit_estimate(_plr_frame(11, 400), **plr)),
        "qte": ("qte", lambda c: submit_qte(c, qte_frame, options=qte)),
        "train-dssync": ("train", lambda c: c.submit_train(logreg, **dssync)),
        "train-lbbsp": ("train", lambda c: c.submit_train(digits, **lbbsp)),
        "cancel-victim": ("estimate", lambda c: c.submit_estimate(_plr_frame(13, 3000), **victim)),
    }


def _handle(job: Any) -> Any:
    """The EstimateJob/TrainJob of a handle (a QTE's :class:`QTEJobs` holds one job's parts)."""
    jobs = getattr(job, "jobs", None)
    if jobs is None:
        return job
    return jobs[0].job  # a PartJob of the QTE's one job of several parts


def _fingerprint_of(kind: str, job: Any, timeout: float) -> dict[str, np.ndarray]:
    handle = _handle(job)
    if kind == "train":
        return fingerprint(handle.result(timeout=timeout), TRAIN_KEYS)
    return fingerprint(handle.result(timeout=timeout).raw, ESTIMATE_KEYS)


def _wait_until(
    predicate: Callable[[], Any],
    timeout_s: float,
    ended: Callable[[], str | None] | None = None,
    poll_s: float = POLL_S,
) -> tuple[Any, str]:
    """Poll ``predicate`` every ``poll_s`` seconds (bounded: at most timeout_s / poll_s + 1 polls).

    Returns
    -------
    value : object or None
        Its first truthy value; None when the wait ended without one.
    why : str
        Empty on success; else why the wait ended: ``ended()``'s answer (a job's status once it is
        no longer RUNNING: waiting on for it is pointless) or ``'timed out after N s'``.
    """
    for i in range(int(timeout_s / poll_s) + 1):
        value = predicate()
        if value:
            return value, ""
        if ended is not None and i % 5 == 0:
            why = ended()
            if why:
                value = predicate()  # once more: it may have happened just before the end
                return (value, "") if value else (None, why)
        time.sleep(poll_s)
    return None, f"timed out after {timeout_s:.0f} s"


def _ended(job: Any) -> Callable[[], str | None]:
    """``ended()`` for :func:`_wait_until`: the job's status once it is not RUNNING, else None."""

    def ended() -> str | None:
        status = job.status()
        return None if status == "RUNNING" else f"the job ended {status}"

    return ended


def _running(client: Any, job: Any, kind: str) -> list[str]:
    """The job's steps in progress (:func:`fanfit.client.running.running_steps`; a train job's
    workers of its current execution)."""
    from fanfit.client.jobs import _outputs
    from fanfit.client.running import running_steps, step_keys

    table = _outputs(client).get("IdempotencyTableName")
    dynamodb = client.session.client("dynamodb", endpoint_url=client.stack.endpoint_url)
    keys = step_keys(client.store, job.job_id, kind, (job.execution_arn,))
    return running_steps(dynamodb, table, keys)


def _is_handler_of(pid: int, endpoint: str) -> bool:
    """Whether ``pid`` is a local Lambda handler process (``lambda_bootstrap``, the handler's
    child of the environment's init) of a TrainShard function of the stack at ``endpoint`` (its
    ``AWS_ENDPOINT_URL``): other stacks on the machine are never touched."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    mine = f"AWS_ENDPOINT_URL={endpoint}".encode()
    return b"lambda_bootstrap" in cmd and b"TrainShard" in env and mine in env.split(b"\0")


def _segment_worker(
    client: Any, job: Any, endpoint: str, min_round: int, last_round: int
) -> tuple[int, int] | None:
    """(worker, pid) of a DS-Sync worker that recorded round ``min_round`` or later of its segment
    but none after ``last_round - 3`` (it still runs: its segment ends at ``last_round``), from its
    record's ``stats.pid`` (the handler process running the segment), when that process is a
    TrainShard handler of this stack; else None."""
    from fanfit import storage

    pages = client.s3.get_paginator("list_objects_v2").paginate(
        Bucket=client.stack.bucket, Prefix=storage.train_rounds_prefix(job.job_id)
    )
    found = []
    for page in pages:
        for item in page.get("Contents", []):
            parts = item["Key"].split("/")
            if item["Key"].endswith(".json") and parts[-2] == "workers":
                found.append((int(parts[-3]), int(parts[-1].split(".")[0]), item["Key"]))
    latest: dict[int, int] = {}
    for r, worker, _ in found:
        latest[worker] = max(r, latest.get(worker, -1))
    for r, worker, key in sorted(found):
        if r >= min_round and latest[worker] <= last_round - 3:
            pid = int(client.store.get_json(key)["stats"]["pid"])
            if _is_handler_of(pid, endpoint):
                return worker, pid
    return None


def _reports(client: Any, since_s: float) -> list[tuple[float, float]]:
    """REPORT lines of the TrainShard functions' log groups from ``since_s`` (epoch s) on."""
    logs = client.session.client("logs", endpoint_url=client.stack.endpoint_url)
    events: list[tuple[int, str]] = []
    groups = logs.describe_log_groups(logGroupNamePrefix="/aws/lambda/")["logGroups"]
    for group in groups:
        if "TrainShard" not in group["logGroupName"]:
            continue
        pages = logs.get_paginator("filter_log_events").paginate(
            logGroupName=group["logGroupName"], startTime=int(since_s * 1000)
        )
        events += [(e["timestamp"], e["message"]) for p in pages for e in p.get("events", [])]
    return report_lines(events)


#: Rounds of the DS-Sync job.
DSSYNC_ROUNDS = 40
#: The DS-Sync worker killed is one that recorded this round of its segment (rounds 1 ..) or later.
KILL_AT_ROUND = 3


def _n_models(client: Any, job: Any) -> int:
    """Reduced models of a train job in S3 (``train/state/<r>``: round ``r``'s model)."""
    pages = client.s3.get_paginator("list_objects_v2").paginate(
        Bucket=client.stack.bucket, Prefix=f"jobs/{job.job_id}/train/state/"
    )
    return sum(len(page.get("Contents", [])) for page in pages)


#: Seconds without a new TrainShard REPORT line after which the killed job's invocations are over.
REPORT_QUIET_S = 15.0


def _quiet_reports(client: Any, since_s: float, timeout_s: float = 600.0) -> None:
    """Poll (bounded by ``timeout_s``) until no TrainShard REPORT line newer than ``since_s``
    came for :data:`REPORT_QUIET_S` seconds."""
    count, changed = -1, time.monotonic()
    for _ in range(int(timeout_s / 1.0) + 1):
        now = len([r for r in _reports(client, since_s - 900) if r[0] > since_s])
        if now != count:
            count, changed = now, time.monotonic()
        elif time.monotonic() - changed >= REPORT_QUIET_S:
            return
        time.sleep(1.0)


def _start(stack: Any, faults: str | None) -> Any:
    from fanfit.local.deploy import Deployer

    saved = os.environ.pop("FANFIT_LOCAL_FAULTS", None)
    if faults:
        os.environ["FANFIT_LOCAL_FAULTS"] = faults
    try:
        info = stack.start()
    finally:
        os.environ.pop("FANFIT_LOCAL_FAULTS", None)
        if saved is not None:
            os.environ["FANFIT_LOCAL_FAULTS"] = saved
    Deployer(info, ROOT / "template.yaml").run(verify=True)
    return info


def _kill_stack(pid: int) -> None:
    """SIGKILL LocalStack's process group and reap it (bounded: 30 s)."""
    os.killpg(pid, signal.SIGKILL)
    for _ in range(150):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--small", action="store_true", default=True,
                        help="the 5 small jobs of the docstring (the default)")  # fmt: skip
    parser.add_argument("--faults", default=FAULTS, help="FANFIT_LOCAL_FAULTS of the chaos phase")
    args = parser.parse_args(argv)

    from fanfit.client import Client
    from fanfit.local.process import LocalStack

    home = ROOT / ".fanfit" / "bench-chaos"
    home.mkdir(parents=True, exist_ok=True)
    os.environ["FANFIT_HOME"] = str(home)
    plugins = str(ROOT / "localstack_plugins")  # this checkout's plugins, as straggler.py
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (plugins, os.environ.get("PYTHONPATH", "")) if p
    )
    started = time.perf_counter()
    specs = _specs()
    notes: list[str] = []
    stack = LocalStack(root=ROOT, home=home)
    if stack.running() is not None:
        stack.stop()
    # a fresh stack state: the S3 and DynamoDB mirrors of earlier runs (restored at every start;
    # thousands of objects after a few runs outlast the start's health wait) and the Lambda
    # environments' files; the deploy cache stays
    for name in ("s3", "dynamodb", "tmp"):
        shutil.rmtree(home / name, ignore_errors=True)
    reference: dict[str, dict[str, np.ndarray]] = {}
    try:
        # Reference: every job but the victim, fault-free, at the same time.
        _start(stack, None)
        client = Client.local_stack()
        ref_jobs = {n: specs[n][1](client) for n in specs if n != "cancel-victim"}
        for name, job in ref_jobs.items():
            reference[name] = _fingerprint_of(specs[name][0], job, 900)
        stack.stop()

        # Chaos.
        info = _start(stack, args.faults)
        client = Client.local_stack()
        jobs = {n: specs[n][1](client) for n in ("train-dssync", "estimate-plr", "qte",
                                                  "cancel-victim")}  # fmt: skip

        # Kill one DS-Sync worker's handler process in the middle of its segment.
        dssync = _handle(jobs["train-dssync"])
        kill_stop_s = billed_s = None
        target, why = _wait_until(
            lambda: _segment_worker(client, dssync, info.endpoint, KILL_AT_ROUND, DSSYNC_ROUNDS - 1),
            600, _ended(dssync), poll_s=0.05,
        )  # fmt: skip
        killed_at = None
        if target is not None:
            worker, pid = target
            killed_at = time.time()
            os.kill(pid, signal.SIGKILL)
            notes.append(f"kill: worker {worker} (pid {pid}) of train-dssync in round >= "
                         f"{KILL_AT_ROUND}")  # fmt: skip
        else:
            notes.append(f"kill: no DS-Sync segment worker was seen running ({why})")

        # Cancel the victim while one of its shards runs (meanwhile the killed job stops).
        victim = _handle(jobs["cancel-victim"])
        cancel_stop_s: float | None = None
        running, why = _wait_until(lambda: _running(client, victim, "estimate"), 300,
                                   _ended(victim))  # fmt: skip
        if running:
            t0 = time.perf_counter()
            out = victim.cancel()
            cancel_stop_s = time.perf_counter() - t0
            if out.get("still_running"):
                notes.append(f"cancel: still running {out['still_running']}")
        else:
            notes.append(f"cancel: no shard of the victim was seen running ({why})")

        if killed_at is not None:
            _, why = _wait_until(lambda: dssync.status() != "RUNNING", 600)
            if why:
                notes.append(f"kill: train-dssync still running: {why}")
            # a worker still running when the execution ended returns up to its deadline later;
            # its REPORT line then comes: wait until no new one came for REPORT_QUIET_S
            _quiet_reports(client, killed_at)
            reports = _reports(client, killed_at - 900)
            kill_stop_s = stop_after(reports, killed_at)
            billed_s = billed_after(reports, killed_at)
            notes.append(f"kill: train-dssync then {dssync.status()}")

        # Restart the stack mid-job.
        jobs["train-lbbsp"] = specs["train-lbbsp"][1](client)
        lbbsp = _handle(jobs["train-lbbsp"])
        _, why = _wait_until(lambda: _n_models(client, lbbsp) >= 3, 600, _ended(lbbsp))
        if why:
            notes.append(f"restart: train-lbbsp's round 2 was not seen ({why})")
        _kill_stack(info.pid)
        _start(stack, args.faults)
        client = Client.local_stack()

        entries = []
        for name, job in jobs.items():
            kind = specs[name][0]
            handle = _handle(job)
            handle = type(handle)(client, handle.job_id, handle.execution_arn)  # the new stack
            if name == "cancel-victim":
                entries.append(job_entry(name, kind, handle.status(), False, None))
                continue
            resumed = False
            if handle.status() == "RUNNING":  # started before the restart: not on this stack
                with contextlib.suppress(Exception):
                    handle.wait(timeout=600)
            if handle.status() != "SUCCEEDED":
                handle, resumed = client.resume(handle.job_id), True
            try:
                got = _fingerprint_of(kind, handle, 900)
                status = "SUCCEEDED"
            except Exception as exc:  # the job failed after its resume: say so
                got, status = {}, f"{handle.status()}: {type(exc).__name__}"
            equal = equal_to_fault_free(got, reference[name], RTOL.get(name, 0.0))
            entries.append(job_entry(name, kind, status, resumed, equal))
    finally:
        stack.stop()
    out = assemble(entries, cancel_stop_s, kill_stop_s, billed_s, faults=args.faults,
                   n_jobs=len(entries), wall_s=round(time.perf_counter() - started, 1),
                   notes=notes)  # fmt: skip
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
