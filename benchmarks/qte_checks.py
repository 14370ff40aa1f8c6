"""What ``submit_qte`` spends checking its parts on the client, before anything is uploaded.

    PYTHONPATH=$PWD/layers/fanfit .venv/bin/python benchmarks/qte_checks.py --json

DoubleMLQTE's 401(k) case of benchmarks/qte.py (score PQ, ``--n-quantiles`` quantiles 0.5-0.9,
so twice as many ``pq`` parts; outcome ``net_tfa``, treatment ``e401``, examples/data/
sipp1991.dta, 9,915 rows), submitted with :func:`fanfit.client.qte.submit_qte` to an in-process
client whose ``submit_estimate`` does what :meth:`fanfit.client.Client.submit_estimate` does
before it uploads (:func:`fanfit.client.check.check_estimate` of data it is handed, nothing for a
:class:`~fanfit.client.check.CheckedEstimate`, as tests/unit/fake_stack.py's client) and returns
a job that runs nothing. So the time measured is the client's checks alone: ``--runs`` times,
the median reported, wall and CPU seconds of this process (the CPU seconds move less with the
machine's other load), with the number of times the data frame was turned into a matrix
(:func:`fanfit.client.data.to_matrix`, counted in every ``fanfit.client`` module that calls it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


class _ChecksOnlyClient:
    """``submit_estimate`` checks as the client does before uploading, and starts nothing."""

    s3 = None

    def __init__(self) -> None:
        self.submitted = 0

    def submit_estimate(self, data: Any, *, options: Any) -> Any:
        from fanfit.client import check

        if not isinstance(data, check.CheckedEstimate):
            check.check_estimate(data, options=options)
        self.submitted += 1
        return argparse.Namespace(job_id=f"est-checks-{self.submitted}")

    def submit_parts_job(
        self, model: str, labels: Any, checked: Any, options: Any, **_: Any
    ) -> Any:
        """One job of several parts, already checked (:func:`fanfit.client.parts.check_parts`):
        nothing more to check; a handle whose ``part(k, label)`` names the part."""
        self.submitted += 1
        job_id = f"est-checks-{self.submitted}"
        return argparse.Namespace(
            job_id=job_id, part=lambda k, label: argparse.Namespace(job_id=job_id, label=label)
        )


def _count_to_matrix() -> list[int]:
    """Count every call of ``to_matrix`` from the ``fanfit.client`` modules (imported by name)."""
    import fanfit.client.qte  # noqa: F401  (and what it imports)

    calls = [0]
    for name, module in list(sys.modules.items()):
        original = getattr(module, "to_matrix", None)
        if not name.startswith("fanfit.client") or original is None:
            continue

        def counted(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            calls[0] += 1
            return _original(*args, **kwargs)

        module.to_matrix = counted
    return calls


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-quantiles", type=int, default=9)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    import numpy as np

    from fanfit.client.data import read_table
    from fanfit.client.options import EstimateOptions
    from fanfit.client.qte import submit_qte

    frame = read_table(str(ROOT / "examples" / "data" / "sipp1991.dta"))
    quantiles = ",".join(f"{q:g}" for q in np.linspace(0.5, 0.9, args.n_quantiles))
    options = EstimateOptions(data=frame, model="qte", y="net_tfa", d="e401", x=X_COLS,
                              quantiles=quantiles, score="PQ", n_folds=5, n_rep=10,
                              ml_g="LogisticRegression", ml_m="LogisticRegression")  # fmt: skip
    calls = _count_to_matrix()
    submit_qte(_ChecksOnlyClient(), options=options)  # warm-up: imports, learner allow-list
    seconds, cpu_seconds, n_calls, n_parts = [], [], [], 0
    for _ in range(args.runs):
        client = _ChecksOnlyClient()
        calls[0] = 0
        started, cpu_started = time.perf_counter(), time.process_time()
        jobs = submit_qte(client, options=options)
        seconds.append(time.perf_counter() - started)
        cpu_seconds.append(time.process_time() - cpu_started)
        n_calls.append(calls[0])
        n_parts = len(jobs.jobs)
    out = {
        "n_quantiles": args.n_quantiles,
        "parts": n_parts,
        "n_obs": len(frame),
        "to_matrix_calls": n_calls[0],
        "check_s": [round(s, 4) for s in seconds],
        "check_s_median": round(statistics.median(seconds), 4),
        "check_cpu_s_median": round(statistics.median(cpu_seconds), 4),
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return out


if __name__ == "__main__":
    main()
