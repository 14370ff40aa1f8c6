"""What a Lambda step imports when it starts cold.

A handler's import time is most of a cold start (on the local stack, every new environment of a
function pays it again), and scikit-learn, LightGBM, SciPy's optimiser and special functions, and
pandas take most of it. Only the steps that use them should load them: a fit (CrossFit, a train
worker) imports its learner's module when it builds the learner (fanfit.learners.ClassMap), the
Dorm solver imports scipy.optimize when it solves, and a result imports scipy.special when it
computes p-values.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

LAYER = Path(__file__).resolve().parents[2] / "layers" / "fanfit"
HEAVY = ("sklearn", "lightgbm", "scipy.optimize", "scipy.special", "scipy.stats", "pandas", "torch")


def _imported(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(LAYER), "PATH": "/usr/bin:/bin"},
    )
    return out.stdout.split()


@pytest.mark.parametrize(
    "module",
    [
        "fanfit.jobs.estimate.prepare",
        "fanfit.jobs.estimate.schedule",
        "fanfit.jobs.estimate.crossfit",
        "fanfit.jobs.estimate.aggregate",
        "fanfit.jobs.sharing",
        "fanfit.jobs.train.init",
        "fanfit.jobs.train.schedule",
        "fanfit.jobs.train.shard",
        "fanfit.jobs.train.reduce",
        "fanfit.jobs.train.finalize",
    ],
)
def test_a_step_module_imports_no_heavy_library(module):
    # GIVEN a fresh interpreter WHEN a step's module is imported (what its handler does at start)
    # THEN none of the heavy libraries is loaded yet
    assert _imported(f"import {module}") == []


def test_a_learner_imports_its_own_module_on_first_lookup():
    # GIVEN the allow-list WHEN a spec of a linear model is validated and built
    statement = (
        "from fanfit.learners import ALLOWED_LEARNERS, LearnerSpec\n"
        "assert 'LGBMRegressor' in ALLOWED_LEARNERS and len(ALLOWED_LEARNERS) > 20\n"
        "LearnerSpec.parse('Lasso:{\"alpha\": 0.1}').build()"
    )
    loaded = _imported(statement)
    # THEN scikit-learn is loaded, LightGBM and torch (other learners' modules) are not
    assert "sklearn" in loaded
    assert "lightgbm" not in loaded and "torch" not in loaded


def test_the_class_map_resolves_every_name_to_its_class():
    from fanfit.learners import ALLOWED_LEARNERS, ALLOWED_TRANSFORMERS, COMPOSITE_LEARNERS

    # GIVEN every allowed name WHEN looked up THEN it is the class of that name; unknown names are not
    for table in (ALLOWED_LEARNERS, ALLOWED_TRANSFORMERS, COMPOSITE_LEARNERS):
        for name in table:
            assert isinstance(table[name], type) and table[name].__name__ == name
        assert "EvilRegressor" not in table and table.get("EvilRegressor") is None
        with pytest.raises(KeyError):
            table["EvilRegressor"]
