"""The ``fanfit`` command line.

    fanfit estimate --data FILE --model plr --y COL --d COL[,COL] --x COL,... [--ml-l SPEC] ...
    fanfit train --data FILE --model {kmeans,logreg,linreg,mlp} --features COL,... [--target COL] ...
    fanfit report JOB --out DIR
    fanfit resume JOB
    fanfit jobs
    fanfit local up | down | status

Without ``--stack`` a command uses the running local stack, or starts one for its duration. Results go
to stdout (a DoubleML-style table, or one JSON object with ``--output json``); logs go to stderr, and
so does the live progress of ``estimate`` and ``train`` (a bar on a terminal, plain lines otherwise;
none with ``--quiet``).
Exit codes: 0 done, 2 invalid input, 3 the job failed, 4 the stack cannot be reached.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

from fanfit import config, errors

log = logging.getLogger("fanfit")

EXIT_INVALID, EXIT_FAILED, EXIT_STACK = 2, 3, 4


def _estimate_parser(sub: Any) -> None:
    p = sub.add_parser(
        "estimate",
        help="estimate a causal parameter by DML with repeated cross-fitting",
        description="Double/debiased machine learning on the stack; options named as DoubleML names them.",
    )
    p.add_argument("--data", required=True, help="CSV, Parquet or Stata (.dta) file, or s3:// URI")
    p.add_argument("--model", default="plr", choices=["plr", "irm", "pliv", "iivm"])
    p.add_argument(
        "--score", help="plr: 'partialling out' | 'IV-type'; irm: ATE | ATTE; iivm: LATE"
    )
    p.add_argument("--y", required=True, help="outcome column")
    p.add_argument("--d", required=True, help="treatment column(s), comma-separated")
    p.add_argument("--x", required=True, help="covariate columns, comma-separated")
    p.add_argument("--z", help="instrument column(s) (pliv, iivm)")
    for name in ("l", "m", "g", "r"):
        p.add_argument(
            f"--ml-{name}",
            dest=f"ml_{name}",
            metavar="SPEC",
            help=f"learner ml_{name}: a scikit-learn class name, optionally NAME:{{json params}}",
        )
    p.add_argument("--n-folds", type=int, default=5)
    p.add_argument("--n-rep", type=int, default=1)
    p.add_argument("--seed", type=int, default=0, help="seed of the sample splitting and learners")
    p.add_argument("--folds", help="CSV: one column per repetition, one row per observation, "
                   "holding the 0-based test fold of that row")  # fmt: skip
    p.add_argument("--trimming-threshold", type=float, default=0.01)
    p.add_argument("--boot-method", choices=["normal", "Bayes", "wild"])
    p.add_argument("--n-rep-boot", type=int, default=500)
    p.add_argument(
        "--max-concurrency", type=int, help="cap on concurrent cross-fitting invocations"
    )
    p.add_argument(
        "--sharding",
        choices=["auto", "per-fold", "per-repetition"],
        default="auto",
        help="auto: sized from measured throughput (a probe wave first); per-fold / per-repetition: "
        "DoubleML-Serverless's fixed layouts",
    )
    p.add_argument("--units-per-shard", type=int, help="fixed fits per invocation")
    p.add_argument("--weight", type=float, default=1.0, metavar="W",
                   help="the job's weight in the fair shares of the account's concurrency when "
                   "jobs run at once: a number in (0, 100], default 1")  # fmt: skip
    p.add_argument("--stack", help="name of a deployed stack (default: the local stack)")
    p.add_argument("--region", help="AWS region of --stack")
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the job")
    _add_quiet_option(p)
    _add_config_options(p, "estimate")
    p.set_defaults(func=_cmd_estimate)


def _train_parser(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="train a model data-parallel in synchronous rounds (BSP, LB-BSP, DS-Sync)",
        description="Data-parallel training on the stack: K-Means (Lloyd) or mini-batch SGD for "
        "logistic / least-squares regression, one Lambda per worker per round, or for an MLP "
        "classifier on the GPU worker (AWS Batch).",
    )
    p.add_argument("--data", required=True, help="CSV, Parquet or Stata (.dta) file, or s3:// URI")
    p.add_argument("--model", required=True, help="kmeans | logreg | linreg | mlp")
    p.add_argument("--features", required=True, help="feature columns, comma-separated")
    p.add_argument("--target", help="target column (logreg, mlp: class labels; linreg: values)")
    p.add_argument("--hidden", metavar="H[,H...]",
                   help="mlp: hidden layer widths, e.g. 256,256,256")  # fmt: skip
    p.add_argument("--workers", type=int, default=4, help="workers per round (1..40)")
    p.add_argument(
        "--worker-memory",
        dest="worker_memory",
        metavar="MB[,MB...]",
        help="memory of every worker, or one per worker (e.g. 1769,1769,885,885)",
    )
    p.add_argument("--batch-workers", dest="batch_workers", type=int, default=0,
                   help="how many of the workers run on the GPU worker (AWS Batch)")  # fmt: skip
    p.add_argument("--global-batch", dest="global_batch", type=int,
                   help="samples per SGD round, split over the workers")  # fmt: skip
    p.add_argument("--rounds", type=int, default=10, help="most rounds")
    p.add_argument("--balance", default="uniform",
                   help="uniform | lb-bsp (Chen et al. 2021) | static (--worker-batches)")  # fmt: skip
    p.add_argument("--worker-batches", dest="worker_batches", metavar="B[,B...]",
                   help="static: each worker's batch, summing to --global-batch")  # fmt: skip
    p.add_argument("--sync", default="bsp", help="bsp | ds-sync (Wang et al. 2020)")
    p.add_argument(
        "--group-size", dest="group_size", type=int, default=2, help="DS-Sync group size"
    )
    p.add_argument("--n-clusters", dest="n_clusters", type=int, help="K-Means' k")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate")
    p.add_argument("--l2", type=float, default=0.0, help="SGD L2 penalty")
    p.add_argument("--tol", type=float, default=0.0,
                   help="K-Means: absolute tolerance on the squared centre shift")  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--standardize", action="store_true", help="scale features to unit variance")
    p.add_argument("--weight", type=float, default=1.0, metavar="W",
                   help="the job's weight in the fair shares of the account's concurrency when "
                   "jobs run at once: a number in (0, 100], default 1")  # fmt: skip
    p.add_argument("--stack", help="name of a deployed stack (default: the local stack)")
    p.add_argument("--region", help="AWS region of --stack")
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the job")
    _add_quiet_option(p)
    _add_config_options(p, "train")
    p.set_defaults(func=_cmd_train)


_TRAIN_OPTIONS = ("model", "features", "target", "workers", "worker_memory", "batch_workers",
                  "global_batch", "rounds", "balance", "worker_batches", "sync", "group_size",
                  "n_clusters", "lr", "l2", "tol", "seed", "standardize", "hidden")  # fmt: skip


def _cmd_train(args: argparse.Namespace) -> int:
    config.resolve_args(args)  # --config FILE; flags on the command line win
    options = {k: getattr(args, k) for k in _TRAIN_OPTIONS}
    # Reject bad options before any stack is touched (memory sizes are checked against the stack's).
    from fanfit.client import options as opt
    from fanfit.client.train import build_train_spec

    weight = opt.check_weight(args.weight, "--weight")
    spec = build_train_spec(**options)
    if args.dry_run:
        return _dry_run_train(args, spec, weight)
    with _client(args) as client:
        job = client.submit_train(args.data, weight=weight, **options)
        log.info("started job %s (%s)", job.job_id, job.execution_arn)
        result = job.result(timeout=args.timeout, progress=_progress(args))
    if args.output == "json":
        print(json.dumps(result.to_dict(), allow_nan=False))
        return 0
    _print_train(result, job.job_id)
    return 0


def _print_train(result: Any, job_id: str) -> None:
    """The table of a finished train job: its model and one line per round."""
    print(f"fanfit train {result.model}: {result.n_iter} round(s), job {job_id}")
    if result.inertia is not None:
        print(f"inertia: {result.inertia:.6g}")
    for r in result.rounds:
        batches = ",".join(str(w["batch"]) for w in r["workers"])
        print(
            f"round {r['round']:>4} ({r['phase']}): batches {batches}; time {r['round_s']:.3f} s, "
            f"idle {100 * r['idle_fraction']:.1f} %"
            + (f", loss {r['loss']:.5g}" if r.get("loss") is not None else "")
        )
    print(f"execution: {result.execution_arn}")


def _add_quiet_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no live progress and no info lines on stderr, only the result and "
                   "warnings (default: a progress bar on a terminal, plain progress lines "
                   "otherwise)")  # fmt: skip


def _progress(args: argparse.Namespace) -> bool:
    """The ``progress=`` of a command's wait: on unless ``--quiet`` (a bar on a terminal, plain
    lines on stderr otherwise; :func:`fanfit.progress.make_renderer`)."""
    return not getattr(args, "quiet", False)


def _add_config_options(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument("--config", metavar="FILE",
                   help="YAML file of the options (keys as the long flags: n_folds or n-folds); "
                   "flags given here override it")  # fmt: skip
    p.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help=f"check the data and the options, print what would run, and exit "
                   f"without contacting any stack (fanfit {command})")  # fmt: skip
    config.prepare_parser(p)


def _print_dry_run(command: str, args: argparse.Namespace, info: dict[str, Any]) -> int:
    info = {"command": command, "dry_run": True, "data": str(args.data), **info}
    if args.output == "json":
        print(json.dumps(info, allow_nan=False))
        return 0
    print(f"fanfit {command} --dry-run: valid; nothing was uploaded or started")
    for key, value in info.items():
        if key in ("command", "dry_run", "learners", "n_fits", "prediction_keys") or value in (
            None, [], ()
        ):  # fmt: skip
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        print(f"{key}: {shown}")
    for name, learner in info.get("learners", {}).items():
        print(f"learner {name}: {learner}")
    return 0


def _dry_run_train(args: argparse.Namespace, spec: Any, weight: float) -> int:
    from fanfit.client.data import read_table, to_matrix

    columns = [*spec.features, *([spec.target] if spec.target else [])]
    names, values = to_matrix(read_table(args.data), columns)
    spec.check_data(names, values)
    info = {"model": spec.model, "n_obs": int(values.shape[0]), **spec.to_dict(), "weight": weight}
    info["worker_steps"] = spec.workers * spec.rounds
    info["fits"] = (
        f"{spec.workers} workers x {spec.rounds} rounds = {info['worker_steps']} worker steps at most"
    )
    return _print_dry_run("train", args, info)


def _status_parser(sub: Any) -> None:
    p = sub.add_parser(
        "status", help="a job's record: status, error, and the scheduler's decisions"
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument("--stack", help="name of a deployed stack (default: the local stack)")
    p.add_argument("--region", help="AWS region of --stack")
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=_cmd_status)


def _cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.job(args.job_id)
        record = job.record()
        cost, cost_error = _job_cost(job)
    if cost is not None:
        record["cost"] = cost.to_dict()
    if args.output == "json":
        print(json.dumps(record, default=str))
        return 0
    for key in (
        "job_id",
        "status",
        "model",
        "score",
        "execution_arn",
        "result_key",
        "error",
        "cause",
        "failed_shard",
        "failed_stage",
        "failed_wave",
        "shard_error",
    ):
        if record.get(key) is not None:
            print(f"{key}: {record[key]}")
    print(_cost_line(cost, cost_error, record.get("status")))
    schedule = record.get("schedule") or {}
    for wave in schedule.get("waves", []):
        d = wave["decision"]
        predicted = d.get("predicted_makespan_s")
        print(
            f"stage {wave['stage']} wave {wave['wave']}: {'probe, ' if d.get('probe') else ''}"
            f"policy {d['policy']}, {d['n_shards']} shard(s) of <= {d['units_per_shard']} fit(s), "
            f"max concurrency {d['max_concurrency']}, "
            f"{d['n_units']} fit(s) left; seconds per fit "
            f"{_fmt(d.get('seconds_per_unit'))}, start-up {_fmt(wave.get('startup_s'))} s, "
            f"predicted makespan {_fmt(predicted)} s on {wave['resource']}"
        )
        for signature, rate in sorted(wave.get("predicted_samples_per_s", {}).items()):
            print(f"    throughput {signature}: {rate:,.0f} samples/s")
        if wave.get("partition"):
            part = wave["partition"]
            print(
                f"    partition {part['lambda_concurrency']} of demand {part['demand']} "
                f"(gpus {part['gpus']}, version {part['version']})"
            )
    return 0 if record.get("status") != "FAILED" else EXIT_FAILED


def _resume_parser(sub: Any) -> None:
    p = sub.add_parser(
        "resume",
        help="run a stopped or failed job again from what S3 holds: an estimate's shards "
        "without predictions, a train job's rounds from the first one not reduced",
        description="Starts a new execution of JOB. An estimate keeps its plan and folds, and "
        "every shard whose predictions are in S3 counts as done; a train job keeps its plan and "
        "every reduced round, and starts at the first round whose reduced model is not in S3, "
        "from the last reduced model (this works after a restart of the stack too).",
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument("--stack", help="name of a deployed stack (default: the local stack)")
    p.add_argument("--region", help="AWS region of --stack")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the result")
    p.add_argument("--output", choices=["table", "json"], default="table")
    _add_quiet_option(p)
    p.set_defaults(func=_cmd_resume)


def _cmd_resume(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.resume(args.job_id)
        log.info("resumed job %s (%s)", job.job_id, job.execution_arn)
        result = job.result(timeout=args.timeout, progress=_progress(args))
    if args.output == "json":
        print(json.dumps(result.to_dict(), allow_nan=False))
    elif job.kind == "train":
        _print_train(result, job.job_id)
    else:
        _print_table(result)
    return 0


def _jobs_parser(sub: Any) -> None:
    p = sub.add_parser(
        "jobs", help="running jobs with their partitions of the shared concurrency (Dorm)"
    )
    p.add_argument("--stack", help="name of a deployed stack (default: the local stack)")
    p.add_argument("--region", help="AWS region of --stack")
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=_cmd_jobs)


def _cmd_jobs(args: argparse.Namespace) -> int:
    with _client(args) as client:
        jobs = client.jobs()
    if args.output == "json":
        print(json.dumps(jobs, default=str))
        return 0
    header = ("job", "kind", "status", "weight", "demand", "partition", "gpus")
    rows = [
        (j["job_id"], j["kind"], j["status"], f"{j['weight']:g}", str(j["demand"]),
         str(j["partition"]), f"{j['gpus']}/{j['gpu_demand']}")
        for j in jobs
    ]  # fmt: skip
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for row in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        print("(no running jobs)")
    return 0


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.3g}"


def _job_cost(job: Any) -> tuple[Any, str | None]:
    """The job's :class:`fanfit.cost.JobCost` (kept in its record once it has ended), or None and
    why not: the status of a job never fails for want of its cost."""
    try:
        return job.cost(), None
    except Exception as exc:  # history not readable, no permission
        return None, f"{type(exc).__name__}: {exc}"


def _cost_line(cost: Any, error: str | None, status: Any) -> str:
    if cost is None:
        return f"cost: n/a ({error})"
    so_far = " so far" if status == "RUNNING" else ""
    return (
        f"cost{so_far}: ${cost.total_usd:.6f} at AWS list prices: Lambda {cost.billed_gb_s:.1f} GB-s "
        f"in {cost.lambda_requests} request(s), {cost.state_transitions} state transition(s), "
        f"Batch {cost.batch_instance_s:.0f} instance-s"
    )


def _report_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="write a job's report: report.html (self-contained) and its PNG figures",
        description="Estimate: the coefficients with confidence intervals, the per-repetition "
        "estimates and the shards' timeline (cold starts marked); train: loss or inertia per "
        "round and each worker's batch and compute time per round. Both: the job's cost.",
    )
    p.add_argument("job_id", metavar="JOB")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for report.html and PNGs")
    p.add_argument("--prices", metavar="FILE",
                   help="JSON of price overrides (fields of fanfit.prices.PriceTable)")  # fmt: skip
    p.add_argument("--stack", help="name of a deployed stack (default: the local stack)")
    p.add_argument("--region", help="AWS region of --stack")
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fanfit.prices import PriceTable
    from fanfit.report import write_report

    prices = PriceTable.from_file(args.prices) if args.prices else None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise errors.InvalidJobError(f"--out {args.out!r} is a file; give a directory")
    with _client(args) as client:
        job = client.job(args.job_id)
        status = job.status()
        if status == "RUNNING":
            raise errors.InvalidJobError(
                f"job {args.job_id} is still running; report it once it has ended "
                f"(fanfit status {args.job_id})"
            )
        if status != "SUCCEEDED":
            raise errors.JobFailedError(
                f"job {args.job_id} ended {status}: there is no result to report "
                f"(fanfit status {args.job_id} shows why)"
            )
        if job.record().get("kind") == "train":
            from fanfit.client.train import TrainJob

            result: Any = TrainJob(client, args.job_id, job.execution_arn).result(timeout=60.0)
        else:
            result = job.result(timeout=60.0)
        if prices is not None:
            result.cost = job.cost(prices).to_dict()
    try:
        path = write_report(result, out, job_id=args.job_id)
    except OSError as exc:
        raise errors.InvalidJobError(
            f"cannot write the report to --out {args.out!r}: {exc}"
        ) from exc
    files = sorted(str(f) for f in path.parent.glob("*.png"))
    if args.output == "json":
        print(json.dumps({"job_id": args.job_id, "report": str(path), "figures": files,
                          "cost": result.cost}, allow_nan=False))  # fmt: skip
    else:
        print(f"report: {path}")
        for f in files:
            print(f"figure: {f}")
    return 0


def _plan_parser(sub: Any) -> None:
    from fanfit import planning

    p = sub.add_parser(
        "plan",
        help="cost-optimal placement of a job's stages on Lambda or Batch GPU (HeterPS), before it runs",
        description="Chooses a resource and a worker count per stage at least cost within a deadline, "
        "and prints it next to the all-CPU, all-GPU and greedy baselines. Nothing runs on AWS.",
    )
    planning.add_arguments(p)
    p.set_defaults(func=planning.run_command)


def _local_parser(sub: Any) -> None:
    p = sub.add_parser("local", help="manage the embedded local stack (LocalStack on this host)")
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--output", choices=["table", "json"], default="table")
    p.set_defaults(func=_cmd_local)


@contextlib.contextmanager
def _client(args: argparse.Namespace) -> Iterator[Any]:
    from fanfit.client import Client

    if args.stack:
        yield Client(stack=args.stack, region_name=args.region)
        return
    from fanfit.local import stack as local_stack

    with local_stack.ensure_local_stack():
        yield Client.local_stack()


def _cmd_estimate(args: argparse.Namespace) -> int:
    config.resolve_args(args)  # --config FILE; flags on the command line win
    options = {
        k: getattr(args, k)
        for k in (
            "y",
            "d",
            "x",
            "z",
            "model",
            "score",
            "ml_l",
            "ml_m",
            "ml_g",
            "ml_r",
            "n_folds",
            "n_rep",
            "seed",
            "folds",
            "trimming_threshold",
            "boot_method",
            "n_rep_boot",
            "max_concurrency",
            "units_per_shard",
            "sharding",
            "weight",
        )  # fmt: skip
    }
    from fanfit.client import options as opt

    options["weight"] = opt.check_weight(options["weight"], "--weight")
    if args.dry_run:
        from fanfit.client import check_estimate

        return _print_dry_run("estimate", args, check_estimate(args.data, **options).describe())
    # Reject bad options before any stack is touched.
    from fanfit.client import build_spec

    build_spec(
        **{k: options[k] for k in ("y", "d", "x", "z", "model", "score", "n_folds", "n_rep", "seed",
                                   "trimming_threshold", "boot_method", "n_rep_boot")},
        learners={k: options[k] for k in ("ml_l", "ml_m", "ml_g", "ml_r")},
    )  # fmt: skip
    with _client(args) as client:
        job = client.submit_estimate(args.data, **options)
        log.info("started job %s (%s)", job.job_id, job.execution_arn)
        result = job.result(timeout=args.timeout, progress=_progress(args))
    if args.output == "json":
        print(json.dumps(result.to_dict(), allow_nan=False))
    else:
        _print_table(result)
    return 0


def _print_table(result: Any) -> None:
    import pandas as pd

    t = result.timings
    print(f"================== fanfit {result.model.upper()} ({result.score}) ==================")
    print(f"n_obs: {result.n_obs}   n_folds: {result.n_folds}   n_rep: {result.n_rep}")
    print("------------------ Fit summary ------------------")
    with pd.option_context("display.float_format", "{:.6g}".format, "display.width", 120):
        print(result.summary.to_string())
    print("------------------ Run ------------------")
    print(
        f"prepare {t.get('prepare_s', 0):.2f} s, cross-fitting {t.get('crossfit_s', 0):.2f} s, "
        f"aggregate {t.get('aggregate_s', 0):.2f} s; {len(t.get('shards', []))} shards"
    )
    cost = getattr(result, "cost", None)
    if cost:  # the whole job priced (fanfit.cost): Lambda, Step Functions, Batch
        print(_cost_line(SimpleNamespace(**cost), None, "SUCCEEDED"))
    else:  # the job's cost could not be counted: the shards' billed Lambda time alone
        print(
            f"cost: about ${t.get('lambda_cost_usd', 0):.5f} for {t.get('billed_gb_s', 0):.1f} "
            "GB-s of cross-fitting Lambda time (the rest of the job could not be counted)"
        )
    print(f"execution: {result.execution_arn}")


def _cmd_local(args: argparse.Namespace) -> int:
    from fanfit.local import stack as local_stack

    if args.action == "up":
        info = local_stack.up()
    elif args.action == "down":
        local_stack.down()
        info = local_stack.status()
    else:
        info = local_stack.status()
    if args.output == "json":
        print(json.dumps(info, default=str))
    else:
        for key, value in info.items():
            print(f"{key}: {value}")
    return 0 if args.action != "status" or info.get("running") else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fanfit", description="Serverless DML cross-fitting on AWS Step Functions and Lambda."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    _estimate_parser(sub)
    _train_parser(sub)
    _status_parser(sub)
    _resume_parser(sub)
    _jobs_parser(sub)
    _report_parser(sub)
    _local_parser(sub)
    _plan_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fanfit`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        # --quiet leaves the result and the warnings: no progress and no "started job" line
        level=logging.DEBUG
        if args.verbose
        else logging.WARNING
        if getattr(args, "quiet", False)
        else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(args.func(args))
    except errors.InvalidJobError as exc:
        print(f"fanfit: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except errors.StackError as exc:
        print(f"fanfit: error: {exc}", file=sys.stderr)
        return EXIT_STACK
    except errors.FanfitError as exc:
        print(f"fanfit: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
