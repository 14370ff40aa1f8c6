"""PQ on the 401(k) data as pandas reads the Stata file (float32 outcome and covariates): fanfit
in-process against DoubleMLPQ on the same frame, repetition by repetition.

The check of the float32 parity (issue 16): the spec records the dtypes DoubleML computes in
(:func:`fanfit.client.data.doubleml_dtypes`), :func:`fanfit.dml.validate_data` casts the float64
data back to them, and every repetition's coefficient must equal DoubleML's (relative 1e-9). The
learners and settings are benchmarks/qte.py's (logistic ``ml_g`` and ``ml_m``, ``normalize_ipw``,
folds drawn from seed 42). One process, one core's work (the machine is shared)::

    PYTHONPATH=layers/fanfit .venv/bin/python benchmarks/pq_float32.py \
        --quantiles 0.8 0.9 --treatments 0 1 --n-folds 5 --n-rep 10

``--float64`` runs fanfit as before this change (no dtypes: everything float64) for comparison.
Prints one line per (quantile, treatment) with both coefficients per repetition and whether each
is equal; exits 1 when any differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "examples" / "data" / "sipp1991.dta"
X_COLS = ["age", "inc", "educ", "fsize", "marr", "twoearn", "db", "pira", "hown"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quantiles", type=float, nargs="+", default=[0.8, 0.9])
    parser.add_argument("--treatments", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--n-rep", type=int, default=10)
    parser.add_argument("--float64", action="store_true", help="fanfit without dtypes (before)")
    args = parser.parse_args(argv)

    import doubleml
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    from fanfit import dml
    from fanfit.client.check import with_doubleml_dtypes
    from fanfit.client.data import to_matrix

    warnings.simplefilter("ignore")  # lbfgs on the unscaled covariates, as in DoubleML
    frame = pd.read_stata(DATA)
    folds = dml.draw_folds(len(frame), args.n_folds, args.n_rep, 42)
    data = doubleml.DoubleMLData(frame, y_col="net_tfa", d_cols="e401", x_cols=X_COLS)
    all_equal = True
    for quantile in args.quantiles:
        for treatment in args.treatments:
            t0 = time.perf_counter()
            theirs = doubleml.DoubleMLPQ(
                data, LogisticRegression(), LogisticRegression(), treatment=treatment,
                quantile=quantile, n_folds=args.n_folds, n_rep=args.n_rep,
                draw_sample_splitting=False, normalize_ipw=True,
            )  # fmt: skip
            theirs.set_sample_splitting(dml.folds_to_smpls(folds))
            theirs.fit()
            t1 = time.perf_counter()
            spec = dml.DMLSpec(
                model="pq", score="PQ", y_col="net_tfa", d_cols=("e401",), x_cols=tuple(X_COLS),
                n_folds=args.n_folds, n_rep=args.n_rep, seed=42, normalize_ipw=True,
                treatment=treatment, quantile=quantile,
                learners={"ml_g": "LogisticRegression", "ml_m": "LogisticRegression"},
            )  # fmt: skip
            spec = with_doubleml_dtypes(spec, frame)
            if args.float64:
                spec = dataclasses.replace(spec, dtypes=None)
            names, values = to_matrix(frame, spec.used_cols)
            ours = dml.estimate_in_process(spec, dml.validate_data(spec, names, values), folds)
            t2 = time.perf_counter()
            a, b = np.asarray(ours.all_coef).ravel(), np.asarray(theirs.all_coef).ravel()
            equal = np.isclose(a, b, rtol=1e-9, atol=0.0)
            se_equal = np.isclose(np.asarray(ours.all_se).ravel(), theirs.all_se.ravel(), rtol=1e-9)
            all_equal &= bool(equal.all() and se_equal.all())
            print(
                f"q={quantile} treatment={treatment} dtypes={spec.dtypes} "
                f"doubleml {t1 - t0:.0f} s, fanfit {t2 - t1:.0f} s; all equal: "
                f"{bool(equal.all())}, se equal: {bool(se_equal.all())}"
            )
            for i_rep in range(args.n_rep):
                print(
                    f"  rep {i_rep}: fanfit {a[i_rep]:.6f} doubleml {b[i_rep]:.6f} {equal[i_rep]}"
                )
            sys.stdout.flush()
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
