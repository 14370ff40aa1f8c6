"""What the DoubleML parity tests share: learners, tolerance, DoubleML's classes, and the check
that two estimates agree (test_dml_parity.py, test_dml_losses.py, test_dml_clusters.py).

Imported by name (``from doubleml_helpers import ...``): pytest puts tests/unit on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import doubleml as dml
import numpy as np

#: Relative tolerance of fanfit's estimates against DoubleML's (issue 11: parity at 1e-9).
RTOL = 1e-9
#: The covariates of ``make_frame`` (conftest.py).
X_COLS = [f"x{i}" for i in range(5)]

LIN = "LinearRegression"
LOGIT = "LogisticRegression"
RF_REG = 'RandomForestRegressor:{"n_estimators": 5, "max_depth": 3, "random_state": 42}'
RF_CLF = 'RandomForestClassifier:{"n_estimators": 5, "max_depth": 3, "random_state": 42}'

#: DoubleML's class of each model.
DOUBLEML = {
    "plr": dml.DoubleMLPLR,
    "irm": dml.DoubleMLIRM,
    "pliv": dml.DoubleMLPLIV,
    "iivm": dml.DoubleMLIIVM,
}
#: The models whose DoubleML class takes the propensity options (IPW normalisation, clipping).
PROPENSITY_MODELS = ("irm", "iivm")


def numbered_cols(columns: Iterable[str], prefix: str) -> list[str]:
    """The columns named ``prefix`` or ``prefix<digits>`` (``d``, or ``d1, d2, ...``), in order."""
    return [
        c for c in columns if c == prefix or (c.startswith(prefix) and c[len(prefix) :].isdigit())
    ]


def assert_same_estimate(actual: Any, desired: Any, rtol: float = RTOL) -> None:
    """Assert that two estimates (fanfit's DMLResult, a fitted DoubleML object) agree: ``coef``
    and ``se`` (aggregated over repetitions), ``all_coef`` and ``all_se`` (per repetition), each
    to ``rtol`` relative to ``desired`` and no absolute slack (numpy's ``assert_allclose``)."""
    for name in ("coef", "se", "all_coef", "all_se"):
        np.testing.assert_allclose(
            getattr(actual, name), getattr(desired, name), rtol=rtol, atol=0, err_msg=name
        )
