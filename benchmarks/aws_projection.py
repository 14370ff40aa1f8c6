"""The AWS projection of DoubleML's 401(k) PLR with RF(500), 5 folds x 100 repetitions (issue 14, item 2).

    python benchmarks/aws_projection.py --json

A simulation, not a run on AWS: no stack and no AWS call. Steps:

1. Measures here, in-process (``n_jobs=1``, one core), one fit and prediction of each nuisance
   learner on a training fold of the 401(k) data (examples/data/sipp1991.dta; DoubleML's
   covariates, y ``net_tfa``, d ``e401``): ``RandomForestRegressor`` for ml_l and
   ``RandomForestClassifier`` for ml_m, 500 trees with the settings of DoubleML's 401(k) example
   (``max_depth=7, max_features=3, min_samples_leaf=3``); the median of ``--repeats`` fits.
2. Puts those throughputs (training rows/s) into a throughput table as measured at 1,769 MB (one
   vCPU; this machine's core taken as one Lambda vCPU: an assumption) and plans the job with
   Schedule's own code (:func:`fanfit.jobs.estimate.wave.plan_job`) on the template's default
   CrossFit sizes (1,769, 3,538, 10,240 MB), no GPU worker, AWS's default concurrency (1,000).
   CrossFit's cold start is measured here too (``--cold-init measure``, the default:
   benchmarks/cold_start.py's median init of 5 fresh processes on one CPU with the layers as
   Lambda holds them, plus its first fit's imports of scikit-learn and scipy, which the layer
   does not ship compiled) and replaces the account model's ``cold_init_s`` constant.
3. Simulates the plan on the default AWS account model (:mod:`fanfit.sched.simulate`:
   concurrency, cold starts, the Distributed Map's child start rate, transitions, S3 round trips;
   :func:`fanfit.jobs.estimate.projection.project_prediction`).
4. The comparison: DoubleML in-process on this machine, ``fit seconds x n_fits / cores`` (the fits
   spread perfectly over the cores; DoubleML's own overhead left out).

``--model qte --quantiles 0.5,0.7,0.9`` (issue 28, item 5): DoubleMLQTE with score PQ and
logistic regressions for ``ml_g`` and ``ml_m`` on the same data, as ONE job of 6 parts (3 quantiles x
2 treatment levels) of two stages (5 folds x 100 repetitions: 3,000 fold units a stage). Step 1 then
times, in-process on one core, every fold unit of both stages of each part at ``--measure-rep``
(default 2) repetitions (:func:`fanfit.dml.fit_predict_aux`, the chain of start values between
the stages as Prepare computes it, :func:`fanfit.dml.stage_inputs`); steps 2-3 plan and simulate
the job of several parts (its plan's units of every part, :meth:`EstimatePlan.units`); step 4 is
``sum over units of the median unit seconds / cores`` (DoubleML's own score time left out: its
default kde, ``doubleml_kde_s`` per part and repetition, runs once per part and repetition on top).

Prints one JSON object: model, learners, n_folds, n_rep, n_fits, placement, predicted_wall_s,
predicted_cost_usd, account, cold_init_measured, limit_s (the slowest fit plus a cold start:
what no fan-out can beat) and ratio_to_limit, fit_s_measured, doubleml_inprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]
#: DoubleML's 401(k) example's forests (DoubleML user guide / examples: "Impact of 401(k) on
#: Financial Wealth"), 500 trees.
RF_PARAMS = {"n_estimators": 500, "max_depth": 7, "max_features": 3, "min_samples_leaf": 3}


def measured_cold_init(runs: int) -> dict[str, float]:
    """CrossFit's cold start measured here (benchmarks/cold_start.py, one CPU, the layers as
    Lambda holds them): its init and its first fit's imports (scikit-learn and scipy, not
    compiled in the layer), medians of ``runs`` fresh processes; ``cold_init_s`` their sum."""
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cold_start.py"), "--json",
         "--functions", "crossfit", "--runs", str(runs)],
        capture_output=True, text=True, check=True, timeout=900,
    )  # fmt: skip
    fn = json.loads(done.stdout)["functions"]["crossfit"]
    init, first_fit = float(fn["median_init_s"]), float(fn["median_first_fit_import_s"])
    return {"init_s": init, "first_fit_import_s": first_fit, "cold_init_s": init + first_fit}


def _account(args: argparse.Namespace) -> tuple[Any, dict[str, float] | None]:
    """The account model: AWS's defaults, with CrossFit's cold start measured here unless
    ``--cold-init constant`` (the module default of :mod:`fanfit.sched.simulate`)."""
    from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY
    from fanfit.sched.simulate import AccountModel

    measured = measured_cold_init(args.cold_init_runs) if args.cold_init == "measure" else None
    extra = {"cold_init_s": round(measured["cold_init_s"], 3)} if measured else {}
    return AccountModel(lambda_concurrency=DEFAULT_ACCOUNT_CONCURRENCY, **extra), measured


def _measure(x, y, folds, estimator_cls, repeats: int, seed: int, classifier: bool) -> list[float]:
    """Seconds of ``repeats`` fits + predictions of one unit (repetition 0, fold 0), n_jobs=1."""
    train = folds[:, 0] != 0
    times = []
    for _ in range(repeats):
        est = estimator_cls(**RF_PARAMS, random_state=seed, n_jobs=1)
        t0 = time.perf_counter()
        est.fit(x[train], y[train])
        if classifier:
            est.predict_proba(x[~train])
        else:
            est.predict(x[~train])
        times.append(time.perf_counter() - t0)
    return times


def _time_units(parts: list[Any], data: Any, folds: Any, unit_s: dict[str, list[float]]) -> None:
    """Every fold unit of every stage of each part, run as CrossFit runs it; its seconds by learner
    into ``unit_s`` (the chain of start values between the stages as Prepare computes it)."""
    from fanfit import dml

    for part in parts:
        spec = part.dml
        preds, aux = dml.init_preds(spec, len(data.y)), {}
        for stage in range(dml.n_stages(spec)):
            inputs = dml.stage_inputs(spec, stage, data, folds, preds, aux) if stage else None
            for unit in dml.fit_units(spec, stage):
                t0 = time.perf_counter()
                values, aux[unit.key] = dml.fit_predict_aux(spec, unit, data, folds, inputs)
                unit_s.setdefault(unit.learner, []).append(time.perf_counter() - t0)
                dml.put_predictions(preds, unit, folds, values, spec)


def _qte(args: argparse.Namespace) -> int:
    """``--model qte``: the QTE as one job of several parts, its fold units timed here."""
    import numpy as np
    import pandas as pd
    from doubleml.utils._estimation import _default_kde

    from fanfit import dml
    from fanfit.client.options import EstimateOptions
    from fanfit.client.qte import check_qte, part_options
    from fanfit.jobs.documents.estimate import EstimatePlan, PlanPart
    from fanfit.jobs.estimate.data import unit_signature
    from fanfit.jobs.estimate.projection import project_prediction
    from fanfit.jobs.estimate.wave import plan_job
    from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY
    from fanfit.sched.simulate import cold_start_s
    from fanfit.sched.throughput import EwmaThroughput, ThroughputEntry

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta").astype("float64")
    learners = {"ml_g": "LogisticRegression", "ml_m": "LogisticRegression"}

    def parts(n_rep: int) -> tuple[list[PlanPart], Any]:
        options = EstimateOptions(
            data=frame, model="qte", y="net_tfa", d="e401", x=X_COLS, quantiles=args.quantiles,
            n_folds=args.n_folds, n_rep=n_rep, seed=args.seed, **learners,
        )  # fmt: skip
        checked = check_qte(options=options)
        labels = [f"quantile {q:g} of treatment {t}" for q, t, _ in part_options(options)]
        specs = [c.spec for c in checked.checked]
        return [PlanPart(label=lb, dml=sp) for lb, sp in zip(labels, specs)], checked.checked[0]

    # 1. every fold unit of both stages of each part, timed in-process at --measure-rep
    measured, first = parts(args.measure_rep)
    data = first.data
    folds = first.folds if first.folds is not None else dml.draw_spec_folds(measured[0].dml, data)
    unit_s: dict[str, list[float]] = {}
    with threadpool_limits(1):  # one core, as a 1,769 MB Lambda has (BLAS threads included)
        _time_units(measured, data, folds, unit_s)
    fit_s = {k: statistics.median(v) for k, v in unit_s.items()}
    u = np.asarray(frame["net_tfa"]) - np.median(frame["net_tfa"])
    t0 = time.perf_counter()
    _default_kde(u, np.ones(len(u)))
    kde_s = time.perf_counter() - t0

    # 2. the job of several parts at --n-rep, its throughput table and Schedule's plan
    plan_parts, first = parts(args.n_rep)
    spec = plan_parts[0].dml
    n_obs = int(first.data.y.shape[0])
    folds = first.folds if first.folds is not None else dml.draw_spec_folds(spec, first.data)
    rows = int(np.count_nonzero(folds[:, 0] != 0))
    account, measured_init = _account(args)
    overhead = cold_start_s(account, 1769) + account.shard_s3_round_trips * account.s3_round_trip_s
    n_features = len(spec.x_cols) + spec.n_treat - 1
    plan = EstimatePlan(
        job_id="plan-only", dml=spec, data_key="", folds_key="", n_obs=n_obs,
        n_stages=max(dml.n_stages(p.dml) for p in plan_parts), model="qte", parts=plan_parts,
        max_concurrency=DEFAULT_ACCOUNT_CONCURRENCY, sharding="auto", spec_sha256="",
    )  # fmt: skip
    entries = {}
    for stage in range(plan.n_stages):
        for unit in plan.units(stage):
            sig = unit_signature(spec, unit, n_obs, n_features)
            entries[sig] = ThroughputEntry(
                sig, "lambda-1769", rows / fit_s[unit.learner], overhead, 1
            )
    prediction = plan_job(
        plan, folds, EwmaThroughput(entries=list(entries.values())), stack="aws (simulated)",
        memory_sizes=[1769, 3538, 10240], gpu_enabled=False,
        account_concurrency=DEFAULT_ACCOUNT_CONCURRENCY,
    )  # fmt: skip

    # 3. the simulation; 4. DoubleML in-process on this machine (its fits spread over the cores)
    projected, projection = project_prediction(prediction, plan, account)
    n_units = {s: len(plan.units(s)) for s in range(plan.n_stages)}
    cores = os.cpu_count() or 1
    inprocess_s = (
        sum(fit_s[unit.learner] for s in range(plan.n_stages) for unit in plan.units(s)) / cores
    )
    out = {
        "model": "qte",
        "score": "PQ",
        "quantiles": args.quantiles,
        "n_parts": len(plan_parts),
        "learners": learners,
        "n_folds": args.n_folds,
        "n_rep": args.n_rep,
        "n_fits": sum(n_units.values()),
        "units_per_stage": n_units,
        "predicted_wall_s": round(projected.predicted_wall_s, 2),
        "predicted_cost_usd": round(projected.predicted_cost_usd, 6),
        "simulated_stages": [s.to_dict() for s in projection.stages],
        "account": account.to_dict(),
        "cold_init_measured": measured_init,
        "unit_s_measured": {k: round(v, 4) for k, v in fit_s.items()},
        "units_timed": {k: len(v) for k, v in unit_s.items()},
        "doubleml_kde_s": round(kde_s, 3),
        "doubleml_inprocess": {
            "cores": cores,
            "predicted_wall_s": round(inprocess_s, 1),
            "formula": "sum over units of the median unit seconds / cores (kde left out)",
        },
        "note": "a simulation of an AWS account, not measured on AWS; units timed on this machine",
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


def _tune(args: argparse.Namespace) -> int:
    """``--model tune``: DoubleML's tuning of the 401(k) PLR's forests (benchmarks/tune.py's grid of
    24 candidates), simulated on AWS from each candidate's fit seconds timed here (one core):
    ``tune()`` with ``tune_on_folds`` (a search of 24 candidates x 5 search folds on every
    training set of 5 folds x 10 repetitions, for ml_l and ml_m: 100 searches, 12,000 fits, all
    submitted at once, then the fit's 100 fits), and ``tune_ml_models`` (100 Optuna trials per
    learner, 10 at a time, cv 5 on the whole sample: 10 waves of 100 fits, one after another,
    then the fit). Every fit is one shard at 1,769 MB (as Schedule sizes multi-second forests);
    the searches that run side by side share the account's concurrency and the Map's child start
    rate (one stage of all their shards); environments are warm after the first stage. A trial's
    forest is the candidate ``trial mod 24`` (a stand-in for what TPE suggests in that space).
    Prepare and Aggregate are left out, as in the other projections."""
    import dataclasses

    import numpy as np
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    from sklearn.model_selection import ParameterGrid

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from tune import grid  # the 24 candidates of benchmarks/tune.py

    from fanfit.sched.simulate import SimShard, SimStage, cold_start_s, simulate_stage

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta").astype("float64")
    x = np.asarray(frame[X_COLS], dtype=float)
    targets = {"ml_l": np.asarray(frame["net_tfa"]), "ml_m": np.asarray(frame["e401"]).astype(int)}
    classes = {"ml_l": RandomForestRegressor, "ml_m": RandomForestClassifier}
    n_obs, k, k_tune = len(frame), args.n_folds, 5
    outer = n_obs * (k - 1) // k  # a training set of the outer folds
    inner = outer * (k_tune - 1) // k_tune  # a search fold's training rows
    candidates = list(ParameterGrid(grid(False)))
    rng = np.random.default_rng(args.seed)
    rows = rng.permutation(n_obs)
    train, test = rows[:inner], rows[inner : inner + (outer - inner)]

    # 1. every candidate's fit (and prediction of a search fold) here, one core
    fit_s: dict[str, list[float]] = {name: [] for name in classes}
    with threadpool_limits(1):
        for name, cls in classes.items():
            for params in candidates:
                est = cls(**params, random_state=args.seed, n_jobs=1)
                t0 = time.perf_counter()
                est.fit(x[train], targets[name][train])
                (est.predict_proba if name == "ml_m" else est.predict)(x[test])
                fit_s[name].append(time.perf_counter() - t0)
    # the fits after tuning (and Optuna's, on the whole sample): a training set of outer rows
    scale = outer / inner
    best = {"ml_l": {"max_depth": 8, "min_samples_leaf": 20, "n_estimators": 300},
            "ml_m": {"max_depth": None, "min_samples_leaf": 20, "n_estimators": 300}}  # fmt: skip
    final_s = {name: fit_s[name][candidates.index(best[name])] * scale for name in classes}

    account, measured_init = _account(args)
    warm = dataclasses.replace(account, cold_share=0.0)
    cold = cold_start_s(account, 1769)
    cores = os.cpu_count() or 1

    def stage(works: list[float], acct: Any) -> Any:
        shards = [SimShard("lambda-1769", w) for w in works]
        return simulate_stage(SimStage(shards, account.lambda_concurrency), acct)

    final = [final_s[name] for name in classes for _ in range(k * args.tune_rep)]

    # 2a. tune(tune_on_folds=True): every search at once, then the fit
    searches = [fit_s[name][c] for name in classes for _ in range(k * args.tune_rep)
                for c in range(len(candidates)) for _ in range(k_tune)]  # fmt: skip
    a1, a2 = stage(searches, account), stage(final, warm)
    on_folds = {
        "n_fits": len(searches) + len(final),
        "predicted_wall_s": round(a1.wall_s + a2.wall_s, 2),
        "predicted_cost_usd": round(a1.cost_usd + a2.cost_usd, 4),
        "stages": [a1.to_dict(), a2.to_dict()],
        "limit_s": round(max(searches) + max(final) + cold, 2),
        "doubleml_inprocess_s": round((sum(searches) + sum(final)) / cores, 1),
        "doubleml_serial_s": round(sum(searches) + sum(final), 1),
    }
    on_folds["ratio_to_limit"] = round(on_folds["predicted_wall_s"] / on_folds["limit_s"], 3)

    # 2b. tune_ml_models: 100 trials per learner, args.trials_per_wave at a time, then the fit
    waves, path, trial_fits = [], 0.0, []
    for start in range(0, args.trials, args.trials_per_wave):
        trials = range(start, min(start + args.trials_per_wave, args.trials))
        works = [fit_s[name][t % len(candidates)] * scale for name in classes for t in trials
                 for _ in range(5)]  # fmt: skip
        waves.append(stage(works, account if not waves else warm))
        path += max(works)
        trial_fits += works
    b2 = stage(final, warm)
    optuna_out = {
        "n_fits": len(trial_fits) + len(final),
        "n_waves": len(waves),
        "predicted_wall_s": round(sum(w.wall_s for w in waves) + b2.wall_s, 2),
        "predicted_cost_usd": round(sum(w.cost_usd for w in waves) + b2.cost_usd, 4),
        "limit_s": round(path + max(final) + cold, 2),
        "doubleml_inprocess_s": round((sum(trial_fits) + sum(final)) / cores, 1),
        "doubleml_serial_s": round(sum(trial_fits) + sum(final), 1),
    }
    optuna_out["ratio_to_limit"] = round(optuna_out["predicted_wall_s"] / optuna_out["limit_s"], 3)
    out = {
        "model": "tune",
        "grid": grid(False),
        "n_candidates": len(candidates),
        "n_folds": k,
        "n_rep": args.tune_rep,
        "n_folds_tune": k_tune,
        "rows": {"n_obs": n_obs, "training_set": outer, "search_training": inner},
        "tune_on_folds": on_folds,
        "tune_ml_models": {
            "trials": args.trials,
            "trials_per_wave": args.trials_per_wave,
            **optuna_out,
        },  # fmt: skip
        "fit_s_measured": {name: [round(v, 3) for v in vals] for name, vals in fit_s.items()},
        "account": account.to_dict(),
        "cold_init_measured": measured_init,
        "note": "a simulation of an AWS account, not measured on AWS; fits timed on this machine",
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3, help="fits measured per learner")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--model", choices=["plr", "qte", "tune"], default="plr")
    parser.add_argument("--tune-rep", type=int, default=10, help="repetitions (--model tune)")
    parser.add_argument("--trials", type=int, default=100, help="Optuna trials (--model tune)")
    parser.add_argument("--trials-per-wave", type=int, default=10, help="(--model tune)")
    parser.add_argument(
        "--cold-init",
        choices=["measure", "constant"],
        default="measure",
        help="CrossFit's cold start: measured here (cold_start.py) or the default",
    )
    parser.add_argument("--cold-init-runs", type=int, default=5)
    parser.add_argument("--quantiles", default="0.5,0.7,0.9", help="with --model qte")
    parser.add_argument(
        "--measure-rep", type=int, default=2, help="repetitions timed per part (--model qte)"
    )
    args = parser.parse_args()
    if args.model == "qte":
        return _qte(args)
    if args.model == "tune":
        return _tune(args)

    import numpy as np
    import pandas as pd
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    from fanfit import dml
    from fanfit.client.check import check_estimate
    from fanfit.jobs.documents.estimate import EstimatePlan
    from fanfit.jobs.estimate.data import unit_signature
    from fanfit.jobs.estimate.projection import project_prediction
    from fanfit.jobs.estimate.wave import plan_job
    from fanfit.sched.shards import DEFAULT_ACCOUNT_CONCURRENCY
    from fanfit.sched.simulate import cold_start_s
    from fanfit.sched.throughput import EwmaThroughput, ThroughputEntry

    frame = pd.read_stata(ROOT / "examples" / "data" / "sipp1991.dta")
    learners = {
        "ml_l": "RandomForestRegressor:" + json.dumps({**RF_PARAMS, "random_state": args.seed}),
        "ml_m": "RandomForestClassifier:" + json.dumps({**RF_PARAMS, "random_state": args.seed}),
    }
    checked = check_estimate(
        frame, model="plr", y="net_tfa", d="e401", x=X_COLS, n_folds=args.n_folds,
        n_rep=args.n_rep, seed=args.seed, **learners,
    )  # fmt: skip
    spec = checked.spec
    data = checked.data
    folds = checked.folds if checked.folds is not None else dml.draw_spec_folds(spec, data)
    n_obs = int(data.y.shape[0])
    x = np.asarray(frame[X_COLS], dtype=float)

    # 1. one fit of each learner, in-process, one core
    fit_l = _measure(x, np.asarray(frame["net_tfa"], float), folds, RandomForestRegressor,
                     args.repeats, args.seed, classifier=False)  # fmt: skip
    fit_m = _measure(x, np.asarray(frame["e401"], int), folds, RandomForestClassifier,
                     args.repeats, args.seed, classifier=True)  # fmt: skip
    fit_s = {"ml_l": statistics.median(fit_l), "ml_m": statistics.median(fit_m)}
    rows = int(np.count_nonzero(folds[:, 0] != 0))

    # 2. the throughput table as if measured at 1,769 MB, and Schedule's plan
    account, measured_init = _account(args)
    overhead = cold_start_s(account, 1769) + account.shard_s3_round_trips * account.s3_round_trip_s
    n_features = len(spec.x_cols) + spec.n_treat - 1
    entries = {}
    for stage in range(dml.n_stages(spec)):
        for u in dml.fit_units(spec, stage):
            sig = unit_signature(spec, u, n_obs, n_features)
            rows_per_s = rows / fit_s[dml.learner_name(u.learner)]
            entries[sig] = ThroughputEntry(sig, "lambda-1769", rows_per_s, overhead, 1)
    plan = EstimatePlan(
        job_id="plan-only", dml=spec, data_key="", folds_key="", n_obs=n_obs,
        n_stages=dml.n_stages(spec), max_concurrency=DEFAULT_ACCOUNT_CONCURRENCY,
        sharding="auto", spec_sha256="",
    )  # fmt: skip
    prediction = plan_job(
        plan, folds, EwmaThroughput(entries=list(entries.values())), stack="aws (simulated)",
        memory_sizes=[1769, 3538, 10240], gpu_enabled=False,
        account_concurrency=DEFAULT_ACCOUNT_CONCURRENCY,
    )  # fmt: skip

    # 3. the simulation
    projected, projection = project_prediction(prediction, spec, account)

    # 4. DoubleML in-process on this machine
    n_fits = sum(len(dml.fit_units(spec, s)) for s in range(dml.n_stages(spec)))
    cores = os.cpu_count() or 1
    per_learner = {name: n_fits // len(fit_s) for name in fit_s}
    inprocess_s = sum(fit_s[name] * per_learner[name] for name in fit_s) / cores

    out = {
        "model": "plr",
        "learners": learners,
        "n_folds": args.n_folds,
        "n_rep": args.n_rep,
        "n_fits": n_fits,
        "placement": [
            {
                "stage": s.stage,
                "resource": s.resource,
                "seconds": round(s.seconds, 3),
                "cost_usd": s.cost_usd,
            }
            for st in projected.stages
            for s in st.placement.stages
        ],  # fmt: skip
        "shards": [s.to_json_dict() for st in projected.stages for s in st.shards],
        "predicted_wall_s": round(projected.predicted_wall_s, 2),
        "predicted_cost_usd": round(projected.predicted_cost_usd, 6),
        "simulated_stages": [s.to_dict() for s in projection.stages],
        "account": account.to_dict(),
        "cold_init_measured": measured_init,
        "limit_s": round(max(fit_s.values()) + cold_start_s(account, 1769), 2),
        "ratio_to_limit": round(
            projected.predicted_wall_s / (max(fit_s.values()) + cold_start_s(account, 1769)), 3
        ),
        "fit_s_measured": {k: round(v, 3) for k, v in fit_s.items()},
        "fit_s_runs": {"ml_l": [round(t, 3) for t in fit_l], "ml_m": [round(t, 3) for t in fit_m]},
        "train_rows_per_fit": rows,
        "doubleml_inprocess": {
            "cores": cores,
            "predicted_wall_s": round(inprocess_s, 1),
            "formula": "sum over learners of fit_s x fits / cores",
        },
        "note": "a simulation of an AWS account, not measured on AWS; fits measured on this "
        "machine (shared with other work)",
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
