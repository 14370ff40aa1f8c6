"""A small job's ``fanfit estimate`` wall time, from the command to the printed result, against
its execution's own time (``startDate`` to ``stopDate`` of the Step Functions execution).

    python benchmarks/cli_overhead.py --json

Runs the command ``--runs`` times (default 3) on the running local stack (``fanfit local up``
first; a warm-up job runs before the clock, so the stack's functions are warm and the throughput
of the learners is known), each as a fresh process (``python -m fanfit.cli``, as the ``fanfit``
script runs it) on 500 rows of seeded synthetic data: PLR, LinearRegression and
LogisticRegression, 5 folds x 2 repetitions, printing the table (progress lines on stderr, as
when not on a terminal; ``--quiet``: ``--output json -q``). ``overhead_s`` = wall - execution: the CLI's
imports, the stack check, the data upload, the polling and the printout.
Prints one JSON object: per run ``wall_s``, ``execution_s``, ``overhead_s``, and their medians.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def write_data(path: Path, n_obs: int, seed: int) -> None:
    """Seeded PLR data: outcome y, binary treatment d, covariates x1..x3 (CSV)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, 3))
    d = (x[:, 0] + rng.normal(size=n_obs) > 0).astype(float)
    y = 0.5 * d + x @ np.array([1.0, 0.5, -0.2]) + rng.normal(size=n_obs)
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["y", "d", "x1", "x2", "x3"])
        out.writerows([[y[i], d[i], *x[i]] for i in range(n_obs)])


def command(data: Path, args: argparse.Namespace) -> list[str]:
    """The measured command (``fanfit estimate ... --output json -q``)."""
    return [sys.executable, "-m", "fanfit.cli", "estimate", "--data", str(data), "--model", "plr",
            "--y", "y", "--d", "d", "--x", "x1,x2,x3", "--ml-l", "LinearRegression",
            "--ml-m", "LogisticRegression", "--n-folds", str(args.n_folds),
            "--n-rep", str(args.n_rep), "--seed", str(args.seed),
            *(["--output", "json", "-q"] if args.quiet else [])]  # fmt: skip


def run_once(cmd: list[str], sfn: Any) -> dict[str, float]:
    """One run: its wall seconds, its execution's seconds, and the difference."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=os.environ)  # noqa: S603
    wall_s = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"fanfit estimate failed ({done.returncode}): {done.stderr[-2000:]}")
    if done.stdout.lstrip().startswith("{"):  # --output json
        arn = json.loads(done.stdout)["execution_arn"]
    else:  # the table's last section ends with "Execution: ARN"
        arn = next(x for x in done.stdout.splitlines() if x.startswith("Execution: ")).split()[1]
    desc = sfn.describe_execution(executionArn=arn)
    execution_s = (desc["stopDate"] - desc["startDate"]).total_seconds()
    return {"wall_s": round(wall_s, 3), "execution_s": round(execution_s, 3),
            "overhead_s": round(wall_s - execution_s, 3)}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n-obs", type=int, default=500)
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="measure `--output json -q` (default: the table, with progress lines on stderr)",
    )
    args = parser.parse_args()

    from fanfit.client import Client
    from fanfit.local.stack import ensure_local_stack

    with tempfile.TemporaryDirectory() as tmp, ensure_local_stack():
        data = Path(tmp) / "small.csv"
        write_data(data, args.n_obs, args.seed)
        sfn = Client.local_stack().sfn
        cmd = command(data, args)
        warm_up = run_once(cmd, sfn)
        runs = [run_once(cmd, sfn) for _ in range(args.runs)]
    out = {
        "command": " ".join(["fanfit", *cmd[3:]]),
        "warm_up": warm_up,
        "runs": runs,
        **{
            f"median_{k}": statistics.median(r[k] for r in runs)
            for k in ("wall_s", "execution_s", "overhead_s")
        },  # fmt: skip
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
