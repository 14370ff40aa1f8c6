"""Large data: a 2,000,000-row synthetic PLR estimate through the local stack, within memory limits.

    python benchmarks/large_plr.py --json [--rows 2000000] [--covariates 20] [--learner Lasso]

The data (``y = theta * d + g(x) + e``, ``d = m(x) + v``, 20 Gaussian covariates, theta = 0.5) goes
up once as a content-addressed float64 ``.npz`` (columnar, no CSV), 2 folds x 1 repetition with
``Lasso`` (or ``LinearRegression``) for ``ml_l`` and ``ml_m``: 4 fits of 1,000,000 training rows, one
shard each. Before launch the client checks the data against every function's MemorySize
(:func:`fanfit.limits.check_job`).

Prints one JSON object: ``rows``, ``columns``, ``data_mb`` (the float64 matrix), ``upload_s``,
``wall_s`` (submit to result), the phases' seconds, ``coef``, ``se``, ``estimated_mb`` (the
limits' estimate per function), and ``functions``: per function its ``memory_mb`` (MemorySize),
``peak_rss_mb`` (the largest of its invocations: CrossFit from the shards' statistics, Prepare and
Schedule from their stage records, Aggregate from the result) and ``within_memory``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np


def synthetic_plr(n: int, p: int, theta: float = 0.5, seed: int = 0) -> Any:
    """A PLR data set of ``n`` rows: columns ``y``, ``d``, ``x0..x{p-1}`` (float64 DataFrame)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, p))
    beta = 1.0 / np.arange(1, p + 1)
    d = x @ beta + rng.standard_normal(n)
    y = theta * d + x @ beta[::-1] + rng.standard_normal(n)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(p)])
    frame.insert(0, "d", d)
    frame.insert(0, "y", y)
    return frame


def _peaks(client: Any, job: Any, result: Any) -> dict[str, dict[str, Any]]:
    from fanfit import storage

    sizes = client.function_memory_mb("estimate")
    prefix = storage.job_prefix(job.job_id)
    prepare = client.store.get_json(f"{prefix}stages/0/prepare.json")
    waves = client.store.get_json(storage.schedule_key(job.job_id, 0))["waves"]
    shards = result.timings["shards"]
    aggregate = result.timings.get("aggregate", {})
    peaks = {
        "Prepare": (prepare.get("memory_mb"), prepare.get("peak_rss_mb")),
        "Schedule": (
            max(w.get("memory_mb") or 0 for w in waves),
            max((w.get("peak_rss_mb") or 0.0 for w in waves), default=None),
        ),
        "CrossFit": (
            max(s["memory_mb"] for s in shards),
            max(s["peak_rss_mb"] for s in shards),
        ),
        "Aggregate": (aggregate.get("memory_mb"), aggregate.get("peak_rss_mb")),
    }
    out = {}
    for name, (memory_mb, peak) in peaks.items():
        memory_mb = memory_mb or sizes.get(name)
        out[name] = {
            "memory_mb": memory_mb,
            "peak_rss_mb": None if peak is None else round(float(peak), 1),
            "within_memory": None if peak is None or not memory_mb else bool(peak <= memory_mb),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--covariates", type=int, default=20)
    parser.add_argument("--learner", default='Lasso:{"alpha": 0.01}')
    parser.add_argument("--timeout", type=float, default=3000.0, help="seconds")
    args = parser.parse_args()

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    frame = synthetic_plr(args.rows, args.covariates)
    x_cols = [c for c in frame.columns if c.startswith("x")]
    with ensure_local_stack():
        client = Client.local_stack()
        started = time.perf_counter()
        job = client.submit_estimate(
            frame, model="plr", y="y", d="d", x=x_cols, ml_l=args.learner, ml_m=args.learner,
            n_folds=2, n_rep=1, seed=1, units_per_shard=1,
        )  # fmt: skip
        submitted = time.perf_counter()
        result = job.result(timeout=args.timeout)
        wall = time.perf_counter() - started
        functions = _peaks(client, job, result)
        estimated = client.check_limits("estimate", n_rows=args.rows, n_cols=frame.shape[1])
    out = {
        "rows": args.rows,
        "columns": int(frame.shape[1]),
        "data_mb": round(frame.shape[0] * frame.shape[1] * 8 / 2**20, 1),
        "learner": args.learner,
        "n_folds": 2,
        "n_rep": 1,
        "job_id": job.job_id,
        "upload_s": round(submitted - started, 2),
        "wall_s": round(wall, 2),
        "phases_s": {k: round(v, 2) for k, v in job.phase_seconds().items()},
        "coef": float(result.coef[0]),
        "se": float(result.se[0]),
        "estimated_mb": {k: round(v, 1) for k, v in estimated.items()},
        "functions": functions,
        "all_within_memory": all(f["within_memory"] is not False for f in functions.values()),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(json.dumps(out, indent=2))
    return 0 if out["all_within_memory"] else 1


if __name__ == "__main__":
    sys.exit(main())
