"""``fanfit estimate``: DML with repeated cross-fitting on the stack.

Its options are generated from :class:`fanfit.client.options.EstimateOptions` (flag, type,
default, choices, help), so the command line, ``--config`` files, ``--dry-run`` and
:meth:`fanfit.client.Client.submit_estimate` take the same options.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from fanfit.cli import attach, common, config
from fanfit.cli.jobs import table
from fanfit.client.options import EstimateOptions, check_budget, check_deadline, check_weight
from fanfit.errors import InvalidJobError
from fanfit.jobs.documents.estimate import EstimatePrediction
from fanfit.progress.renderers import placement_lines

__all__ = [
    "add_parser", "print_prediction", "print_table", "run", "run_apos", "run_qte", "run_rdflex",
]  # fmt: skip

log = logging.getLogger("fanfit")


def add_parser(sub: Any) -> None:
    """Add ``fanfit estimate`` to the subcommands ``sub``: one flag per option of
    :class:`EstimateOptions`, then the stack, output and config options."""
    p = sub.add_parser(
        "estimate",
        help="estimate a causal parameter by DML with repeated cross-fitting",
        description="Double/debiased machine learning on the stack; options named as DoubleML names them.",
    )
    common.add_job_options(p, "estimate", EstimateOptions.infos())
    p.add_argument(
        "--plan-only",
        action="store_true",
        help="run nothing: print the placement, the shards, predicted_wall_s and "
        "predicted_cost_usd on the stack, from its measured throughput (with --output json: JSON)",
    )
    tuning = p.add_argument_group(
        "tuning (DoubleML's tune(), its searches on the stack, before the estimate)"
    )
    tuning.add_argument(
        "--param-grid", metavar="FILE", default=None,
        help="JSON or YAML: DoubleML's param_grids, {learner: {parameter: [values]}} for every "
        "learner of the model; the chosen parameters become the estimate's learner_params",
    )  # fmt: skip
    tuning.add_argument("--n-folds-tune", type=int, default=5, help="DoubleML's n_folds_tune")
    tuning.add_argument("--search", choices=("grid", "randomized"), default="grid",
                        help="grid or randomized search (DoubleML's search_mode)")  # fmt: skip
    tuning.add_argument("--n-iter", type=int, default=100,
                        help="candidates of a randomized search (n_iter_randomized_search)")  # fmt: skip
    tuning.add_argument("--tune-on-folds", action="store_true",
                        help="search on every training set of every repetition")  # fmt: skip
    rdd = p.add_argument_group(
        "regression discontinuity (--model rdflex: DoubleML's RDFlex; rdrobust runs here between "
        "the stages)"
    )
    rdd.add_argument("--score-col", metavar="COL", default=None,
                     help="the running variable (DoubleMLRDDData's score_col)")  # fmt: skip
    rdd.add_argument(
        "--cutoff", type=float, default=0.0, help="the cutoff in the score (default 0)"
    )
    rdd.add_argument("--fuzzy", action="store_true",
                     help="a fuzzy design (--ml-m: the treatment's classifier); default sharp")  # fmt: skip
    rdd.add_argument("--fs-specification", default="cutoff",
                     choices=("cutoff", "cutoff and score", "interacted cutoff and score"),
                     help="the first stage's design (DoubleML's fs_specification)")  # fmt: skip
    rdd.add_argument("--fs-kernel", default="triangular",
                     choices=("triangular", "uniform", "epanechnikov"),
                     help="the first stage's kernel (DoubleML's fs_kernel)")  # fmt: skip
    rdd.add_argument("--h-fs", type=float, default=None,
                     help="the first stage's bandwidth (default: rdrobust's without covariates)")  # fmt: skip
    p.set_defaults(func=run)


def options_from_args(args: argparse.Namespace) -> EstimateOptions:
    """The :class:`EstimateOptions` of parsed (and config-resolved) arguments, the weight, the
    deadline and the budget checked under their flags' names (``--weight``, ``--deadline``,
    ``--budget``).

    Raises
    ------
    fanfit.errors.InvalidJobError
        The weight is out of range, a deadline or budget is not a number > 0, or both are given.
    """
    options = EstimateOptions(**{name: getattr(args, name) for name in EstimateOptions.names()})
    deadline = check_deadline(options.deadline, "--deadline")
    budget = check_budget(options.budget, "--budget")
    if deadline is not None and budget is not None:
        raise InvalidJobError(
            "--deadline and --budget are two objectives for the placement; give one, not both"
        )
    return options.replace(
        weight=check_weight(options.weight, "--weight"), deadline=deadline, budget=budget
    )


def run(args: argparse.Namespace) -> int:
    """Run ``fanfit estimate``; returns the exit code: 0 done (or started, with ``--detach``),
    4 ``--timeout`` ran out, 130 Ctrl-C (both detach: the job keeps running)."""
    config.resolve_args(args)  # --config FILE; flags on the command line win
    options = options_from_args(args)
    grids = _param_grid(args, options)
    if options.model == "apos":  # one apo job per level (fanfit.client.apos)
        return run_apos(args, options)
    if options.model == "qte":  # one job per quantile and level (fanfit.client.qte)
        return run_qte(args, options)
    if options.model == "rdflex":  # its stages wait for rdrobust here (fanfit.RDFlex)
        return run_rdflex(args, options, grids)
    if args.dry_run:
        from fanfit.client.check import check_estimate

        return common.print_dry_run("estimate", args, check_estimate(options=options).describe())
    # Reject bad options before any stack is touched (without --x, once the data's columns are read).
    if options.x is not None:
        options.build_spec()
    if getattr(args, "plan_only", False):
        with common.stack_client(args) as client:
            prediction = client.plan_estimate(args.data, options=options)
        print_prediction(prediction, args.output == "json")
        return 0
    with common.stack_client(args) as client:
        if grids is not None:
            options = _tune(args, client, options, grids)
        job = client.submit_estimate(args.data, options=options)
        log.info("started job %s (%s)", job.job_id, job.execution_arn)
        # --detach, --timeout and Ctrl-C: the job keeps running; the command says what next
        return attach.follow(args, job, print_table)


# ---------------------------------------------------------------- --param-grid
def _param_grid(args: argparse.Namespace, options: EstimateOptions) -> dict[str, Any] | None:
    """``--param-grid``'s grids, checked before any stack is touched; None without one.

    Raises
    ------
    fanfit.errors.InvalidJobError
        A grid file that cannot be read, or a grid of the wrong shape; with ``--model apos`` or
        ``qte`` (tuned through their DoubleML classes) or ``--plan-only`` (which plans the
        estimate, not its searches).
    """
    if getattr(args, "param_grid", None) is None:
        return None
    from fanfit.client.doubleml.tune_options import read_param_grid

    if options.model in ("apos", "qte"):
        raise InvalidJobError(
            f"--param-grid tunes a job of one model; a {options.model} is tuned in Python: "
            f"fanfit.DoubleML{options.model.upper()}(...).tune_ml_models(...)"
        )
    if getattr(args, "plan_only", False):
        raise InvalidJobError(
            "--plan-only plans the estimate, not its searches: plan without --param-grid"
        )
    return read_param_grid(args.param_grid)


def _tune(
    args: argparse.Namespace, client: Any, options: EstimateOptions, grids: dict[str, Any]
) -> EstimateOptions:
    """Run ``--param-grid``'s searches on the stack (:func:`fanfit.client.doubleml.tune_options.
    tune_options`) and log each learner's chosen parameters; the options with them."""
    from fanfit.client.doubleml.tune_options import tune_options

    log.info("tuning %s on the stack (%s search, %d folds)", ", ".join(grids), args.search,
             args.n_folds_tune)  # fmt: skip
    tuned, chosen = tune_options(
        client, options, grids, n_folds_tune=args.n_folds_tune,
        search=args.search, n_iter=args.n_iter, tune_on_folds=args.tune_on_folds,
        progress=common.progress(args),
    )  # fmt: skip
    for learner, by_treatment in chosen.items():
        for d_col, params in by_treatment.items():
            log.info("tuned %s (%s): %s", learner, d_col, params)
    return tuned


# ---------------------------------------------------------------- --model apos
def run_apos(args: argparse.Namespace, options: EstimateOptions) -> int:
    """Run ``fanfit estimate --model apos --treatment-levels L,L,...``: one ``apo`` job per level,
    all started before any is awaited (:func:`fanfit.client.apos.submit_apos`), then DoubleMLAPOS's
    fit summary per level, the causal contrast against the first level, and each level's
    printout (:class:`fanfit.client.apos.APOSResult`; ``--output json``: its ``to_dict``).

    ``--dry-run`` checks every level (:func:`~fanfit.client.apos.check_apos`); ``--plan-only``
    plans the job of several parts on the stack and prints it (:func:`~fanfit.client.apos.
    plan_apos`, :func:`print_prediction`); ``--detach`` prints the job's id; ``--timeout`` and
    Ctrl-C detach as for one job. Returns the exit code.

    Raises
    ------
    fanfit.errors.InvalidJobError
        ``--treatment-levels`` missing, malformed, repeated or not in the data (naming it).
    """
    from fanfit.client.apos import check_apos, level_label, submit_apos

    if args.dry_run:
        checked = check_apos(options=options).checked
        info = checked[0].describe()
        info.update(
            model="apos",
            treatment_level=None,
            treatment_levels=", ".join(level_label(c.spec.treatment_level or 0.0) for c in checked),
            jobs=len(checked),
            fits=f"{len(checked)} apo jobs (one per level) x {checked[0].n_fits} fits = "
            f"{sum(c.n_fits for c in checked)} fits",
            n_fits=sum(c.n_fits for c in checked),
        )
        return common.print_dry_run("estimate", args, info)
    if getattr(args, "plan_only", False):
        from fanfit.client.apos import plan_apos

        with common.stack_client(args) as client:
            prediction = plan_apos(client, options=options)
        print_prediction(prediction, args.output == "json")
        return 0
    with common.stack_client(args) as client:
        jobs = submit_apos(client, options=options)
        labels = [f"treatment level {level_label(level)}" for level in jobs.levels]
        detached = {"job_id": jobs.job_ids[0], "treatment_levels": list(jobs.levels)}
        return _follow_jobs(args, jobs, labels, detached)


# ---------------------------------------------------------------- --model rdflex
def run_rdflex(
    args: argparse.Namespace, options: EstimateOptions, grids: dict[str, Any] | None
) -> int:
    """Run ``fanfit estimate --model rdflex --score-col S [--cutoff C] [--fuzzy]``: DoubleML's
    RDFlex as one job on the stack (:func:`fanfit.client.doubleml.rdd.rdflex_from_options`,
    :meth:`fanfit.RDFlex.fit`), whose stages wait for rdrobust on this machine; prints DoubleML's
    printout (``--output json``: the estimate as ``result.json`` holds it). ``--dry-run`` checks
    the job and prints what would run. Returns the exit code.

    Raises
    ------
    fanfit.errors.InvalidJobError
        ``--param-grid``, ``--plan-only`` or ``--detach`` (the job needs this client between its
        stages), and what :func:`~fanfit.client.doubleml.rdd.rdflex_from_options` refuses.
    """
    from fanfit.client.doubleml.rdd import rdflex_from_options

    for flag, given in (("--param-grid", grids is not None),
                        ("--plan-only", getattr(args, "plan_only", False)),
                        ("--detach", getattr(args, "detach", False))):  # fmt: skip
        if given:
            raise InvalidJobError(
                f"--model rdflex does not take {flag}: its job waits for this client between "
                "its stages (rdrobust runs here)"
            )
    model = rdflex_from_options(
        options, score_col=args.score_col, cutoff=args.cutoff, fuzzy=args.fuzzy,
        fs_specification=args.fs_specification, fs_kernel=args.fs_kernel, h_fs=args.h_fs,
    )  # fmt: skip
    n_iterations = options.n_iterations or 2
    job_options = {"max_concurrency": options.max_concurrency,
                   "units_per_shard": options.units_per_shard, "sharding": options.sharding}  # fmt: skip
    if args.dry_run:
        from fanfit.client.doubleml.base import _check

        _, checked = _check(model._fanfit_frame(), model.fanfit_options(n_iterations, options.seed))
        return common.print_dry_run("estimate", args, checked.describe())
    with common.stack_client(args) as client:
        model.fit(n_iterations, client=client, timeout=args.timeout or 3600.0,
                  progress=common.progress(args), seed=options.seed, **job_options)  # fmt: skip
    if args.output == "json":
        print(json.dumps(model.fanfit_result.raw, indent=2))
    else:
        print(model)
    log.info("job %s", model.fanfit_job.job_id)
    return 0


# ---------------------------------------------------------------- --model qte
def run_qte(args: argparse.Namespace, options: EstimateOptions) -> int:
    """Run ``fanfit estimate --model qte --quantiles Q,Q,... [--score PQ|CVaR|LPQ]``: one ``pq``,
    ``cvar`` or ``lpq`` job per (quantile, treatment level 0 and 1), all started before any is
    awaited (:func:`fanfit.client.qte.submit_qte`), then DoubleMLQTE's fit summary per quantile
    (with ``--boot-method`` its joint confidence bands) and each job's potential quantile
    (:class:`fanfit.client.qte.QTEResult`; ``--output json``: its ``to_dict``).

    ``--dry-run`` checks every part (:func:`~fanfit.client.qte.check_qte`); ``--plan-only`` plans
    the job of several parts on the stack and prints it (:func:`~fanfit.client.qte.plan_qte`,
    :func:`print_prediction`); ``--detach`` prints the job's id; ``--timeout`` and Ctrl-C detach
    as for one job. Returns the exit code.

    Raises
    ------
    fanfit.errors.InvalidJobError
        ``--quantiles`` missing, malformed, out of (0, 1) or repeated, ``--treatment`` given,
        ``--score`` not PQ/CVaR/LPQ, LPQ without one ``--z`` (naming the option).
    fanfit.errors.InvalidDataError
        A treatment column that is not binary or lacks a level.
    """
    from fanfit.client.qte import check_qte, part_options, qte_score, submit_qte

    if args.dry_run:
        checked = check_qte(options=options).checked
        parts = part_options(options)
        info = checked[0].describe()
        n_fits = sum(c.n_fits for c in checked)
        info.update(
            model="qte",
            score=qte_score(options.score),
            treatment=None,
            quantile=None,
            quantiles=", ".join(dict.fromkeys(f"{q:g}" for q, _, _ in parts)),
            treatment_levels="0, 1",
            boot_method=options.boot_method,
            n_rep_boot=options.n_rep_boot if options.boot_method else None,
            jobs=len(checked),
            fits=f"{len(checked)} {checked[0].spec.model} jobs (quantiles x treatment levels 0, 1) "
            f"x {checked[0].n_fits} fold units = {n_fits} fold units",
            n_fits=n_fits,
        )
        return common.print_dry_run("estimate", args, info)
    if getattr(args, "plan_only", False):
        from fanfit.client.qte import plan_qte

        with common.stack_client(args) as client:
            prediction = plan_qte(client, options=options)
        print_prediction(prediction, args.output == "json")
        return 0
    with common.stack_client(args) as client:
        jobs = submit_qte(client, options=options)
        return _follow_jobs(args, jobs, jobs.labels, jobs.detached())


def _follow_jobs(
    args: argparse.Namespace, jobs: Any, labels: list[str], detached: dict[str, Any]
) -> int:
    """Log the started jobs; print their ids with ``--detach`` (``detached`` with ``--output
    json``), else wait for ``jobs.result`` and print it; ``--timeout`` and Ctrl-C detach."""
    from fanfit.errors import WaitTimeoutError

    for job_id in jobs.job_ids:  # one job of several parts
        parts = [label for label, job in zip(labels, jobs.jobs) if job.job_id == job_id]
        log.info("started job %s with %d parts (%s)", job_id, len(parts), "; ".join(parts))
    hints = "\n".join(attach.detach_hint(job_id, args) for job_id in jobs.job_ids)
    if getattr(args, "detach", False):
        if args.output == "json":
            print(json.dumps(detached))
        else:
            print("\n".join(jobs.job_ids))
        log.info("%s", hints)
        return 0
    try:
        result = jobs.result(timeout=args.timeout, progress=common.progress(args))
    except WaitTimeoutError:
        print(f"fanfit: --timeout {args.timeout:g} s ran out; detached.\n{hints}", file=sys.stderr)
        return attach.EXIT_DETACHED
    except KeyboardInterrupt:
        print(f"\nfanfit: interrupted; detached.\n{hints}", file=sys.stderr)
        return attach.EXIT_INTERRUPTED
    if args.output == "json":
        print(json.dumps(result.to_dict(), allow_nan=False))
    else:
        print(str(result))
    return 0


def print_table(result: Any) -> None:
    """The printout of a finished estimate: DoubleML's printout of a fitted model (data summary,
    score, learners and their out-of-sample losses, resampling, fit summary), then the run's
    job, seed, phases' seconds, shards and cost (:func:`fanfit.client.printout.format_estimate`)."""
    print(str(result))


def print_prediction(prediction: EstimatePrediction, as_json: bool = False) -> None:
    """The printout of ``--plan-only``: for a job of several parts its parts' units per stage;
    per stage its placement (:func:`fanfit.progress.renderers.placement_lines`) and shards, then
    ``predicted_wall_s`` and ``predicted_cost_usd``; or the
    :class:`~fanfit.jobs.documents.estimate.EstimatePrediction` as JSON."""
    if as_json:
        print(json.dumps(prediction.to_json_dict()))
        return
    print(
        f"plan on stack {prediction.stack}: CrossFit sizes "
        f"{', '.join(str(mb) for mb in prediction.memory_sizes)} MB, GPU worker "
        f"{'on' if prediction.gpu_enabled else 'off'}, account concurrency "
        f"{prediction.account_concurrency}, job concurrency {prediction.job_concurrency}"
    )
    if prediction.parts:
        n_stages = len(prediction.stages)
        print(
            f"one job of {len(prediction.parts)} parts (model {prediction.model}): every part's "
            "units in each stage's waves, one barrier per stage; units per part and stage:"
        )
        header = ("part", *(f"stage {s}" for s in range(n_stages)))
        rows = [(p.label, *(str(n) for n in p.n_units)) for p in prediction.parts]
        for line in table(header, rows):
            print(f"    {line}")
    for stage in prediction.stages:
        print(f"stage {stage.stage}: {stage.n_units} fit(s)")
        for line in placement_lines(stage.placement):
            print(f"    {line}")
        for s in stage.shards:
            print(
                f"    shards on {s.resource}: {s.n_shards} of <= {s.max_units_per_shard} fit(s), "
                f"policy {s.policy}{' (probe wave first)' if s.probe else ''}, "
                f"max concurrency {s.max_concurrency}"
            )
    if prediction.simulation is not None:
        a = prediction.simulation["account"]
        print(
            "predicted by a simulation of the AWS account, not measured (fanfit.sched.simulate): "
            f"concurrency {a['lambda_concurrency']}, child starts {a['child_start_rate_per_s']:g}/s, "
            f"cold starts {a['cold_sandbox_s'] + a['cold_init_s']:g} s at 1,769 MB "
            f"for {a['cold_share']:.0%} of the environments"
        )
    print(f"predicted_wall_s: {prediction.predicted_wall_s:.2f}")
    print(f"predicted_cost_usd: {prediction.predicted_cost_usd:.6f}")
