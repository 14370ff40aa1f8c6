"""What a Lambda step imports when it starts cold.

A handler's import time is most of a cold start (on the local stack, every new environment of a
function pays it again), and scikit-learn, LightGBM, SciPy's optimiser and special functions, and
pandas take most of it. Only the steps that use them should load them: a fit (CrossFit, a train
worker) imports its learner's module when it builds the learner (fanfit.learners.ClassMap), the
Dorm solver imports scipy.optimize when it solves, and a result imports scipy.special when it
computes p-values.
"""

from __future__ import annotations

import json
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
        "fanfit.jobs.estimate.client_inputs",
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


FUNCTIONS = LAYER.parents[1] / "functions"
#: What a handler reads at import (the template's Globals), tracing off as in the unit tests.
HANDLER_ENV = {
    "PATH": "/usr/bin:/bin",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "FANFIT_BUCKET": "fanfit-unit",
    "FANFIT_JOB_TABLE": "fanfit-jobs",
    "FANFIT_IDEMPOTENCY_TABLE": "fanfit-idempotency",
    "FANFIT_PARTITION_TABLE": "fanfit-partitions",
    "POWERTOOLS_SERVICE_NAME": "fanfit",
    "POWERTOOLS_METRICS_NAMESPACE": "FanfitTest",
    "POWERTOOLS_TRACE_DISABLED": "true",
}
_HANDLER_PROBE = """\
import json, sys
sys.path[0:0] = sys.argv[1:3]
import app
from pydantic import BaseModel
def walk(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from walk(sub)
models = {m for m in walk(BaseModel) if m.__module__.startswith("fanfit.")}
print(json.dumps({"modules": sorted(sys.modules), "models": len(models),
                  "built": sorted(m.__name__ for m in models if m.__pydantic_complete__)}))
"""


def _handler_init(name: str) -> dict:
    """What importing functions/<name>/app.py loads in a fresh interpreter (its Lambda init)."""
    out = subprocess.run(
        [sys.executable, "-c", _HANDLER_PROBE, str(FUNCTIONS / name), str(LAYER)],
        capture_output=True,
        text=True,
        check=True,
        cwd=str(FUNCTIONS / name),
        env=HANDLER_ENV,
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize(
    ("function", "not_loaded"),
    [
        # a worker's step: neither Finalize's cost accounting (fanfit.jobs.train re-exports it) nor
        # the estimate's documents and maths, which the cost history readers parse
        ("train_shard", ["fanfit.jobs.train.finalize", "fanfit.cost", "fanfit.dml",
                         "fanfit.jobs.documents.estimate"]),
        ("crossfit", ["fanfit.cost", "fanfit.jobs.train"]),
        # Finalize prices the job (fanfit.cost.pricing) but reads no execution history
        ("train_finalize", ["fanfit.cost.collect", "fanfit.cost.history", "fanfit.dml"]),
    ],
)  # fmt: skip
def test_a_handler_init_loads_only_its_steps_modules(function, not_loaded):
    # GIVEN a fresh interpreter WHEN the handler's module is imported (its Lambda init)
    init = _handler_init(function)
    # THEN the modules of the other steps are not loaded
    assert [m for m in not_loaded if m in init["modules"]] == []
    # AND no job document's validator is built yet: each is built once, when first parsed
    assert init["models"] > 0 and init["built"] == []


def test_the_lazy_re_exports_are_the_submodules_objects():
    import importlib

    import fanfit.cost
    import fanfit.jobs.train

    # GIVEN the packages that re-export their submodules' names on first use
    for package in (fanfit.cost, fanfit.jobs.train):
        # WHEN each name of __all__ is looked up THEN it is its submodule's object
        for name in package.__all__:
            module = importlib.import_module(package._EXPORTS[name])
            assert getattr(package, name) is getattr(module, name)
        assert sorted(package._EXPORTS) == sorted(package.__all__)
        # AND an unknown name is an AttributeError, a submodule still imports as one
        with pytest.raises(AttributeError):
            package.no_such_name  # noqa: B018
    from fanfit.jobs.train import shard

    assert shard.train_shard is fanfit.jobs.train.train_shard


def test_a_list_of_documents_is_validated_by_one_adapter_per_model():
    from fanfit.jobs.documents.estimate import MapRunChild, parse_list
    from fanfit.jobs.documents.estimate.common import _list_adapter

    # GIVEN two arrays of the same document WHEN both are parsed
    before = _list_adapter.cache_info()
    parse_list(MapRunChild, [])
    parse_list(MapRunChild, [])
    # THEN the adapter was built at most once for them
    after = _list_adapter.cache_info()
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 1
