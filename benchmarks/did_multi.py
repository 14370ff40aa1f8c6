"""DoubleMLDIDMulti through the local pipeline and through DoubleML in-process, on one machine.

    python benchmarks/did_multi.py --json

Issue 28's benchmark of a staggered-adoption DID: DoubleML's own data generator
(``doubleml.did.datasets.make_did_CS2021``, ``--n-units`` units (default 5,000), 4 periods,
groups first treated in periods 2 and 3 and never treated, ``dgp_type=1``, NumPy's global seed
``--seed``), DoubleMLDIDMulti with ``gt_combinations='standard'`` (6 group-time combinations:
at least 6 are required), ``--n-folds`` x ``--n-rep`` (default 5 x 10) cross-fitting and
``--learner`` (``linear``: LinearRegression for ``ml_g`` and LogisticRegression for ``ml_m``,
the default; ``forest``: random forests of 50 trees, depth 5). ``fanfit.DoubleMLDIDMulti``
submits ONE job: one upload of the panel, one ``did`` part per combination selecting its rows in
the pipeline, every part's units fanned out together; ``doubleml.did.DoubleMLDIDMulti`` fits
in-process with ``n_jobs_models=-1`` (every core). Both get each combination's same sample
splitting (DoubleML's, drawn at construction from the same global seed), so their effects must
be equal (relative 1e-9). The local stack is started (and the template deployed) before the
clock starts. Then ``--runs`` (default 1) pairs, fanfit then DoubleML.

Prints one JSON object, as benchmarks/qte.py: per run ``fanfit_s`` and ``doubleml_s`` (wall
seconds), ``ratio``, ``coef_equal`` (coef and se of every combination at 1e-9), ``n_jobs``,
``n_parts``, ``n_waves`` (Schedule's waves over the stages), ``efficiency`` (the shards' fit
seconds / (wall seconds x the job's concurrency, the local stack's cores)), the billed
GB-seconds and Lambda cost in USD (:mod:`fanfit.cost`), the effects, and the medians.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qte import _waves  # noqa: E402 - Schedule's waves of a job, as the QTE benchmark counts them

#: The combinations the benchmark needs at least (issue 28, item 5).
MIN_COMBINATIONS = 6


def panel(n_units: int, seed: int) -> Any:
    """DoubleML's staggered-adoption panel: make_did_CS2021 (``dgp_type=1``, 4 periods, 2 of
    them before treatment) from NumPy's global seed ``seed``, as a DoubleMLPanelData."""
    import doubleml
    from doubleml.did.datasets import make_did_CS2021

    np.random.seed(seed)  # DoubleML's DID generators draw from the global state
    frame = make_did_CS2021(n_obs=n_units, dgp_type=1, n_periods=4, n_pre_treat_periods=2,
                            time_type="float")  # fmt: skip
    x_cols = [c for c in frame.columns if c.startswith("Z")]
    return doubleml.data.DoubleMLPanelData(frame, y_col="y", d_cols="d", id_col="id", t_col="t",
                                           x_cols=x_cols)  # fmt: skip


def learners(name: str) -> tuple[Any, Any]:
    """``ml_g`` and ``ml_m`` of ``--learner``.

    Raises
    ------
    ValueError
        An unknown name.
    """
    if name == "linear":
        from sklearn.linear_model import LinearRegression, LogisticRegression

        return LinearRegression(), LogisticRegression()
    if name == "forest":
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        kw = {"n_estimators": 50, "max_depth": 5, "random_state": 42}
        return RandomForestRegressor(**kw), RandomForestClassifier(**kw)
    raise ValueError(f"--learner must be linear or forest, got {name!r}")


def models(data: Any, args: Any) -> tuple[Any, Any]:
    """fanfit's and DoubleML's DoubleMLDIDMulti (unfitted) with the same learners and, drawn from
    the same global seed, the same per-combination sample splitting.

    Raises
    ------
    ValueError
        Fewer than :data:`MIN_COMBINATIONS` group-time combinations.
    """
    import doubleml

    import fanfit

    kw = {"n_folds": args.n_folds, "n_rep": args.n_rep}
    np.random.seed(args.seed + 1)  # each combination draws its splitting at construction
    ours = fanfit.DoubleMLDIDMulti(data, *learners(args.learner), **kw)
    np.random.seed(args.seed + 1)
    theirs = doubleml.did.DoubleMLDIDMulti(data, *learners(args.learner), **kw)
    if theirs.n_gt_atts < MIN_COMBINATIONS:
        raise ValueError(
            f"{theirs.n_gt_atts} group-time combinations, fewer than {MIN_COMBINATIONS}"
        )
    return ours, theirs


def figures(
    ours: Any, theirs: Any, fanfit_s: float, doubleml_s: float, waves: int, concurrency: int
) -> dict[str, Any]:
    """One run's figures from the two fitted models, as benchmarks/qte.py reports them.

    Parameters
    ----------
    ours : fanfit.DoubleMLDIDMulti
        Fitted: ``fanfit_jobs`` (one per part, sharing the job id) and ``fanfit_results``
        (each with the job's ``timings``: ``shards`` with ``fit_s``, ``billed_gb_s``,
        ``lambda_cost_usd``).
    theirs : doubleml.did.DoubleMLDIDMulti
        Fitted.
    fanfit_s, doubleml_s : float
        Wall seconds of each fit.
    waves : int
        Schedule's waves over the job's stages.
    concurrency : int
        The job's concurrency (the local stack's cores).

    Returns
    -------
    dict
        ``fanfit_s``, ``doubleml_s``, ``ratio``, ``coef_equal``, ``se_equal``, ``n_jobs``,
        ``n_parts``, ``n_waves``, ``efficiency`` (shards' fit seconds / (wall x concurrency)),
        ``billed_gb_s``, ``lambda_cost_usd``, ``coef``.
    """
    # one job of several parts: every part's result carries the job's timings; count each once
    jobs = {job.job_id: r.timings for job, r in zip(ours.fanfit_jobs, ours.fanfit_results)}
    timings = list(jobs.values())
    fit_s = sum(float(s["fit_s"]) for t in timings for s in t.get("shards", []))
    return {
        "fanfit_s": round(fanfit_s, 3),
        "doubleml_s": round(doubleml_s, 3),
        "ratio": round(fanfit_s / doubleml_s, 4),
        "coef_equal": bool(np.allclose(ours.coef, theirs.coef, rtol=1e-9, atol=0.0)),
        "se_equal": bool(np.allclose(ours.se, theirs.se, rtol=1e-9, atol=0.0)),
        "n_jobs": len(jobs),
        "n_parts": len(ours.fanfit_results),
        "n_waves": waves,
        "efficiency": round(fit_s / (fanfit_s * concurrency), 4),
        "billed_gb_s": round(sum(float(t.get("billed_gb_s", 0.0)) for t in timings), 3),
        "lambda_cost_usd": round(sum(float(t.get("lambda_cost_usd", 0.0)) for t in timings), 6),
        "coef": [round(float(c), 6) for c in ours.coef],
    }


def summary(runs: list[dict[str, Any]], args: Any, n_combinations: int) -> dict[str, Any]:
    """The medians of the runs and the configuration (the printed JSON object)."""

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 6)

    return {
        "fanfit_s": median("fanfit_s"),
        "doubleml_s": median("doubleml_s"),
        "ratio": median("ratio"),
        "lambda_cost_usd": median("lambda_cost_usd"),
        "efficiency": median("efficiency"),
        "n_waves": median("n_waves"),
        "coef_equal": all(r["coef_equal"] and r["se_equal"] for r in runs),
        "n_jobs": max(r["n_jobs"] for r in runs),
        "n_combinations": n_combinations,
        "n_units": args.n_units,
        "learner": args.learner,
        "n_folds": args.n_folds,
        "n_rep": args.n_rep,
        "n_runs": len(runs),
        "runs": runs,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def _run(client: Any, data: Any, args: Any) -> dict[str, Any]:
    """One timed pair: fanfit's DIDMulti on the stack, then DoubleML's in-process."""
    ours, theirs = models(data, args)
    t0 = time.perf_counter()
    ours.fit(client=client, seed=args.seed, timeout=args.timeout)
    fanfit_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    theirs.fit(n_jobs_models=-1)
    doubleml_s = time.perf_counter() - t1
    waves = sum(_waves(client, job_id) for job_id in {j.job_id for j in ours.fanfit_jobs})
    return figures(ours, theirs, fanfit_s, doubleml_s, waves, os.cpu_count() or 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=1, help="timed pairs (default 1)")
    parser.add_argument("--n-units", type=int, default=5000)
    parser.add_argument("--learner", choices=("linear", "forest"), default="linear")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=10)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per job")
    args = parser.parse_args()

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    data = panel(args.n_units, args.seed)
    runs = []
    with warnings.catch_warnings(), ensure_local_stack():
        # DoubleML's deprecation notes and lbfgs convergence on the unscaled covariates
        warnings.simplefilter("ignore")
        client = Client.local_stack()
        for _ in range(args.runs):
            runs.append(_run(client, data, args))
    out = summary(runs, args, runs[0]["n_parts"])
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
