"""``fanfit plan``: the cost-optimal placement of a job's stages, next to HeterPS's baselines.

The command builds stage profiles (:class:`fanfit.sched.placement.StageProfile`) from options or a
JSON file, solves the placement exactly (:func:`fanfit.sched.placement.solve_placement`, MILP) and runs
the baselines (all-CPU, all-GPU, greedy), then prints the chosen placement with its predicted time and
cost and the baselines beside it, as a table or one JSON object. Nothing runs on AWS.

Stage options: ``--stage NAME:N_SAMPLES:CPU_SAMPLES_PER_S[:GPU_SPEEDUP]``, where the throughput is
one worker's at one vCPU (Lambda at 1,769 MB); other Lambda memory sizes are scaled with
:func:`fanfit.sched.throughput.scale_throughput`, and the GPU's throughput is the CPU's times
``GPU_SPEEDUP`` (no GPU profile without it). Or ``--stages-file FILE`` with
``{"stages": [{"name": ..., "n_samples": ..., "split_input": false, "resources": {"lambda-1769":
{"samples_per_s": ..., "startup_s": ..., "data_in_mb": ..., "data_out_mb": ..., "io_mb_per_s": ...},
"gpu:g4dn.xlarge": {...}}}]}``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fanfit.errors import InvalidJobError
from fanfit.prices import DEFAULT_PRICES, PriceTable
from fanfit.sched.placement import (
    BASELINES,
    Placement,
    ResourceProfile,
    StageProfile,
    compare_placements,
)
from fanfit.sched.resources import gpu_resource, lambda_resource
from fanfit.sched.throughput import LAMBDA_MB_PER_VCPU, scale_throughput

__all__ = [
    "DEFAULT_GPU_STARTUP_S",
    "DEFAULT_LAMBDA_STARTUP_S",
    "add_arguments",
    "add_parser",
    "parse_stage_option",
    "plan_job",
    "plan_report",
    "render_table",
    "run_command",
    "stage_from_throughput",
    "stages_from_dict",
    "stages_from_options",
]

#: Assumed start-up of a Lambda worker, seconds: a Python cold start with the scientific layer
#: (init of numpy, scipy and scikit-learn), about a second.
DEFAULT_LAMBDA_STARTUP_S = 1.0
#: Assumed start-up of a Batch GPU worker, seconds: a compute environment scaled to zero launches an
#: instance and pulls a multi-GB CUDA image first (minutes).
DEFAULT_GPU_STARTUP_S = 180.0


def stage_from_throughput(
    name: str,
    n_samples: int,
    cpu_samples_per_s: float,
    *,
    gpu_speedup: float | None = None,
    memory_mb: Sequence[int] = (LAMBDA_MB_PER_VCPU,),
    threads: float = 1.0,
    gpu_instance: str = DEFAULT_PRICES.gpu_instance_type,
    lambda_startup_s: float = DEFAULT_LAMBDA_STARTUP_S,
    gpu_startup_s: float = DEFAULT_GPU_STARTUP_S,
    data_in_mb: float = 0.0,
    data_out_mb: float = 0.0,
    split_input: bool = False,
    lambda_allowed: bool = True,
) -> StageProfile:
    """A stage profile from one throughput measured at one vCPU.

    Parameters
    ----------
    name : str
        Stage name.
    n_samples : int
        Samples the stage processes.
    cpu_samples_per_s : float
        One worker's throughput at one vCPU (Lambda at 1,769 MB), samples/s.
    gpu_speedup : float, optional
        GPU worker throughput / ``cpu_samples_per_s``; None: no GPU profile.
    memory_mb : sequence of int, default (1769,)
        Lambda memory sizes to offer, MB; throughput scaled with
        :func:`~fanfit.sched.throughput.scale_throughput` (``threads`` cores usable).
    threads : float, default 1
        Parallelism the workload can use on Lambda.
    gpu_instance : str
        EC2 instance type of the Batch GPU worker.
    lambda_startup_s, gpu_startup_s : float
        Start-up latencies, seconds.
    data_in_mb, data_out_mb : float
        MB read and written (see :class:`~fanfit.sched.placement.StageProfile`).
    split_input : bool
        Whether the input is split over the workers.
    lambda_allowed : bool, default True
        False for work that cannot run on Lambda (e.g. a learner in
        :data:`fanfit.learners.specs.GPU_ONLY_LEARNERS`).

    Returns
    -------
    StageProfile

    Raises
    ------
    InvalidJobError
        A value out of range, or no resource left (no Lambda and no GPU speed-up).
    """
    resources: dict[str, ResourceProfile] = {}
    if lambda_allowed:
        for mb in memory_mb:
            rate = scale_throughput(cpu_samples_per_s, LAMBDA_MB_PER_VCPU, mb, threads)
            resources[lambda_resource(mb)] = ResourceProfile(
                rate, lambda_startup_s, data_in_mb, data_out_mb
            )
    if gpu_speedup is not None:
        if not (
            isinstance(gpu_speedup, int | float) and math.isfinite(gpu_speedup) and gpu_speedup > 0
        ):
            raise InvalidJobError(
                f"stage {name}: the GPU speed-up must be > 0, got {gpu_speedup!r}."
            )
        resources[gpu_resource(gpu_instance)] = ResourceProfile(
            cpu_samples_per_s * gpu_speedup, gpu_startup_s, data_in_mb, data_out_mb
        )
    if not resources:
        raise InvalidJobError(
            f"stage {name} can run nowhere: it is GPU-only and has no GPU speed-up; give "
            f"--stage {name}:N:RATE:SPEEDUP."
        )
    return StageProfile(name, n_samples, resources, split_input=split_input)


def parse_stage_option(text: str) -> tuple[str, int, float, float | None]:
    """Parse ``NAME:N_SAMPLES:CPU_SAMPLES_PER_S[:GPU_SPEEDUP]``.

    Returns
    -------
    (name, n_samples, cpu_samples_per_s, gpu_speedup or None)

    Raises
    ------
    InvalidJobError
        Wrong number of fields, or a field that is not a number.
    """
    parts = [p.strip() for p in str(text).split(":")]
    if len(parts) not in (3, 4) or not parts[0]:
        raise InvalidJobError(
            f"--stage {text!r}: write NAME:N_SAMPLES:CPU_SAMPLES_PER_S[:GPU_SPEEDUP], "
            "e.g. ml_l:118980:2500:8."
        )
    try:
        n_samples = int(parts[1])
        rate = float(parts[2])
        speedup = float(parts[3]) if len(parts) == 4 else None
    except ValueError as exc:
        raise InvalidJobError(
            f"--stage {text!r}: N_SAMPLES must be an integer and the rates numbers ({exc})."
        ) from exc
    return parts[0], n_samples, rate, speedup


def stages_from_options(
    stage_texts: Sequence[str],
    *,
    memory_mb: Sequence[int] = (LAMBDA_MB_PER_VCPU,),
    threads: float = 1.0,
    gpu_instance: str = DEFAULT_PRICES.gpu_instance_type,
    lambda_startup_s: float = DEFAULT_LAMBDA_STARTUP_S,
    gpu_startup_s: float = DEFAULT_GPU_STARTUP_S,
    data_in_mb: float = 0.0,
    data_out_mb: float = 0.0,
    gpu_only: Sequence[str] = (),
) -> list[StageProfile]:
    """Stage profiles from ``--stage`` texts (:func:`parse_stage_option`) and shared options.

    Parameters are those of :func:`stage_from_throughput`; ``gpu_only`` names stages that may not
    run on Lambda.

    Raises
    ------
    InvalidJobError
        A malformed ``--stage``, or a ``gpu_only`` name that is not a stage.
    """
    parsed = [parse_stage_option(t) for t in stage_texts]
    unknown = sorted(set(gpu_only) - {p[0] for p in parsed})
    if unknown:
        raise InvalidJobError(f"--gpu-only names unknown stage(s) {unknown}.")
    return [
        stage_from_throughput(
            name,
            n,
            rate,
            gpu_speedup=speedup,
            memory_mb=memory_mb,
            threads=threads,
            gpu_instance=gpu_instance,
            lambda_startup_s=lambda_startup_s,
            gpu_startup_s=gpu_startup_s,
            data_in_mb=data_in_mb,
            data_out_mb=data_out_mb,
            lambda_allowed=name not in gpu_only,
        )
        for name, n, rate, speedup in parsed
    ]


def stages_from_dict(d: Any) -> list[StageProfile]:
    """Stage profiles from the JSON layout in the module doc.

    Raises
    ------
    InvalidJobError
        A missing or unknown key, or a value out of range.
    """
    if not isinstance(d, Mapping) or not isinstance(d.get("stages"), list) or not d["stages"]:
        raise InvalidJobError(
            'a stages file must be a JSON object {"stages": [...]} with at least one stage.'
        )
    known_stage = {"name", "n_samples", "split_input", "resources"}
    known_profile = {"samples_per_s", "startup_s", "data_in_mb", "data_out_mb", "io_mb_per_s"}
    stages = []
    for i, s in enumerate(d["stages"]):
        if not isinstance(s, Mapping):
            raise InvalidJobError(f"stages[{i}] must be an object, got {s!r}.")
        extra = sorted(set(s) - known_stage)
        if (
            extra
            or "name" not in s
            or "n_samples" not in s
            or not isinstance(s.get("resources"), Mapping)
        ):
            raise InvalidJobError(
                f"stages[{i}] needs 'name', 'n_samples' and 'resources' (an object), and may have "
                f"'split_input'; unknown keys: {extra}."
            )
        resources = {}
        for resource, p in s["resources"].items():
            if (
                not isinstance(p, Mapping)
                or sorted(set(p) - known_profile)
                or "samples_per_s" not in p
            ):
                raise InvalidJobError(
                    f"stages[{i}].resources[{resource!r}] must be an object with 'samples_per_s' and "
                    f"optionally {sorted(known_profile - {'samples_per_s'})}."
                )
            resources[resource] = ResourceProfile(**p)
        stages.append(
            StageProfile(s["name"], s["n_samples"], resources, bool(s.get("split_input", False)))
        )
    return stages


def plan_job(
    stages: Sequence[StageProfile],
    *,
    deadline_s: float | None = None,
    min_throughput: float | None = None,
    max_workers: int | Mapping[str, int] = 40,
    prices: PriceTable = DEFAULT_PRICES,
) -> dict[str, Placement | None]:
    """The exact plan (MILP) and the three baselines.

    Returns
    -------
    dict
        ``{"milp": Placement, "all-cpu": ..., "all-gpu": ..., "greedy": ...}``; a baseline with no plan
        at all (e.g. all-GPU where a stage has no GPU profile) is None.

    Raises
    ------
    InfeasiblePlacementError
        No plan meets the deadline / throughput floor.
    """
    return compare_placements(
        stages,
        deadline_s=deadline_s,
        min_throughput=min_throughput,
        max_workers=max_workers,
        prices=prices,
        methods=("milp", *BASELINES),
    )


def plan_report(results: Mapping[str, Placement | None]) -> dict[str, Any]:
    """One JSON-safe object: the plan, each baseline, and their costs side by side.

    Returns
    -------
    dict
        ``plan`` (the MILP's placement), ``baselines`` (method to placement or None),
        ``plan_cost_usd``, ``all_cpu_cost_usd``, ``all_gpu_cost_usd``, ``greedy_cost_usd`` (None where
        a baseline has no plan), ``meets_deadline`` (the plan's) and ``baselines_meet_deadline``.
    """
    plan = results["milp"]
    assert plan is not None
    out: dict[str, Any] = {
        "deadline_s": plan.deadline_s,
        "min_throughput": plan.min_throughput,
        "plan_cost_usd": plan.cost_usd,
        "plan_total_s": plan.total_s,
        "meets_deadline": plan.meets_deadline,
    }
    for method in BASELINES:
        p = results.get(method)
        out[f"{method.replace('-', '_')}_cost_usd"] = None if p is None else p.cost_usd
    out["baselines_meet_deadline"] = {
        m: (None if results.get(m) is None else results[m].meets_deadline)  # type: ignore[union-attr]
        for m in BASELINES
    }
    out["plan"] = plan.to_dict()
    out["baselines"] = {
        m: (None if results.get(m) is None else results[m].to_dict())  # type: ignore[union-attr]
        for m in BASELINES
    }
    return out


def render_table(results: Mapping[str, Placement | None], console: Any = None) -> None:
    """Print the plan per stage and the comparison with the baselines as rich tables.

    Parameters
    ----------
    results : mapping
        As returned by :func:`plan_job`.
    console : rich.console.Console, optional
        Default: a console on stdout.
    """
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    plan = results["milp"]
    assert plan is not None
    limits = []
    if plan.deadline_s is not None:
        limits.append(f"deadline {plan.deadline_s:.6g} s")
    if plan.min_throughput is not None:
        limits.append(f"throughput >= {plan.min_throughput:.6g} samples/s per stage")
    stages = Table(title=f"Placement (exact, MILP){': ' + ', '.join(limits) if limits else ''}")
    for col in ("stage", "resource", "workers", "seconds", "USD"):
        stages.add_column(col, justify="left" if col in ("stage", "resource") else "right")
    for c in plan.stages:
        stages.add_row(c.stage, c.resource, str(c.workers), f"{c.seconds:.2f}", f"{c.cost_usd:.6f}")
    stages.add_row("total", "", "", f"{plan.total_s:.2f}", f"{plan.cost_usd:.6f}", style="bold")
    console.print(stages)
    compare = Table(title="Against HeterPS's baselines")
    for col in ("method", "seconds", "USD", "vs plan", "meets deadline"):
        compare.add_column(col, justify="left" if col == "method" else "right")
    for method, p in results.items():
        label = "plan (milp)" if method == "milp" else method
        if p is None:
            compare.add_row(label, "-", "-", "-", "no plan (a stage lacks the resource)")
            continue
        ratio = f"{p.cost_usd / plan.cost_usd:.2f}x" if plan.cost_usd > 0 else "-"
        compare.add_row(
            label,
            f"{p.total_s:.2f}",
            f"{p.cost_usd:.6f}",
            ratio,
            "yes" if p.meets_deadline else "no",
        )
    console.print(compare)


def _csv_ints(text: str, option: str) -> list[int]:
    try:
        return [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError as exc:
        raise InvalidJobError(f"{option} must be comma-separated integers, got {text!r}.") from exc


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``fanfit plan``'s options to its subparser."""
    p.add_argument(
        "--stage",
        action="append",
        default=[],
        metavar="NAME:N_SAMPLES:CPU_SAMPLES_PER_S[:GPU_SPEEDUP]",
        help="a stage, in run order; throughput of one worker at 1 vCPU (Lambda 1769 MB)",
    )
    p.add_argument("--stages-file", help="JSON file of stage profiles (see fanfit.cli.plan)")
    p.add_argument("--memory", default=str(LAMBDA_MB_PER_VCPU), metavar="MB[,MB...]",
                   help="Lambda memory sizes to consider")  # fmt: skip
    p.add_argument("--threads", type=float, default=1.0,
                   help="cores a stage can use on Lambda (scales throughput with memory)")  # fmt: skip
    p.add_argument("--gpu-instance", default=DEFAULT_PRICES.gpu_instance_type,
                   help="EC2 instance type of the Batch GPU worker")  # fmt: skip
    p.add_argument("--lambda-startup", type=float, default=DEFAULT_LAMBDA_STARTUP_S, help="seconds")
    p.add_argument("--gpu-startup", type=float, default=DEFAULT_GPU_STARTUP_S, help="seconds")
    p.add_argument("--data-in-mb", type=float, default=0.0, help="MB every worker reads")
    p.add_argument("--data-out-mb", type=float, default=0.0, help="MB a stage writes")
    p.add_argument("--gpu-only", default="", metavar="NAME[,NAME...]",
                   help="stages that may not run on Lambda (e.g. TorchMLP learners)")  # fmt: skip
    p.add_argument("--deadline", type=float, help="bound on the total predicted time, seconds")
    p.add_argument("--min-throughput", type=float, help="floor on every stage's samples/s")
    p.add_argument("--max-workers", type=int, default=40, help="concurrency cap of Lambda workers")
    p.add_argument("--max-gpu-workers", type=int, default=4, help="cap of Batch GPU instances")
    p.add_argument("--prices", help="JSON file of price overrides (fanfit.prices.PriceTable)")
    p.add_argument("--output", choices=["table", "json"], default="table")


def run_command(args: argparse.Namespace) -> int:
    """Run ``fanfit plan``: build the profiles, solve, print; returns the exit code (0).

    Raises
    ------
    InvalidJobError
        Invalid options (the CLI exits with 2), including an infeasible deadline
        (:class:`~fanfit.errors.InfeasiblePlacementError`).
    """
    if bool(args.stage) == bool(args.stages_file):
        raise InvalidJobError(
            "give the stages either as --stage ... (one or more) or as --stages-file FILE."
        )
    if args.stages_file:
        try:
            data = json.loads(Path(args.stages_file).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidJobError(f"cannot read --stages-file {args.stages_file!r}: {exc}") from exc
        stages = stages_from_dict(data)
    else:
        stages = stages_from_options(
            args.stage,
            memory_mb=_csv_ints(args.memory, "--memory"),
            threads=args.threads,
            gpu_instance=args.gpu_instance,
            lambda_startup_s=args.lambda_startup,
            gpu_startup_s=args.gpu_startup,
            data_in_mb=args.data_in_mb,
            data_out_mb=args.data_out_mb,
            gpu_only=[s.strip() for s in args.gpu_only.split(",") if s.strip()],
        )
    prices = PriceTable.from_file(args.prices) if args.prices else DEFAULT_PRICES
    results = plan_job(
        stages,
        deadline_s=args.deadline,
        min_throughput=args.min_throughput,
        max_workers={"lambda": args.max_workers, "gpu": args.max_gpu_workers},
        prices=prices,
    )
    if args.output == "json":
        print(json.dumps(plan_report(results), allow_nan=False))
    else:
        render_table(results)
    return 0


def add_parser(sub: Any) -> None:
    """Add ``fanfit plan`` to the subcommands ``sub`` (options: :func:`add_arguments`)."""
    p = sub.add_parser(
        "plan",
        help="cost-optimal placement of a job's stages on Lambda or Batch GPU (HeterPS), before it runs",
        description="Chooses a resource and a worker count per stage at least cost within a deadline, "
        "and prints it next to the all-CPU, all-GPU and greedy baselines. Nothing runs on AWS.",
    )
    add_arguments(p)
    p.set_defaults(func=run_command)
