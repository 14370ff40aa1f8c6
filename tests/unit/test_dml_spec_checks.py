"""fanfit.dml.spec_checks: the spec's checks as functions of the spec, and the limits they enforce.

GIVEN a spec WHEN one check runs on it directly THEN it raises what :meth:`DMLSpec.validate`
raises for that concern; and every limit the checks use is importable from fanfit.dml.spec, the
same object (tests/unit/test_dml_spec.py covers validate's messages in full).
"""

from __future__ import annotations

import pytest

from fanfit.dml import spec as spec_module
from fanfit.dml import spec_checks
from fanfit.dml.spec import DMLSpec
from fanfit.errors import InvalidJobError, InvalidLearnerError


def _spec(**overrides) -> DMLSpec:
    base = {
        "model": "plr",
        "score": "partialling out",
        "y_col": "y",
        "d_cols": ("d",),
        "x_cols": ("x0", "x1"),
        "learners": {"ml_l": "Lasso", "ml_m": "Lasso"},
    }
    return DMLSpec(**(base | overrides))


@pytest.mark.parametrize(
    "name",
    ["BOOT_METHODS", "CRE_APPROACHES", "DEFAULT_SUBGROUPS", "DTYPES", "MAX_CLUSTER_VARS",
     "MAX_N_FOLDS", "MAX_N_REP", "MAX_N_REP_BOOT", "MODEL_COLUMNS"],
)  # fmt: skip
def test_the_spec_module_re_exports_the_limits(name) -> None:
    assert getattr(spec_module, name) is getattr(spec_checks, name)


@pytest.mark.parametrize(
    ("check", "overrides", "error", "match"),
    [
        (spec_checks.validate_score, {"score": "ATE"}, InvalidJobError, "Invalid score 'ATE'"),
        (spec_checks.validate_columns, {"x_cols": ("d",)}, InvalidJobError, "both d_cols and x_cols"),
        (spec_checks.validate_options, {"n_folds": 1}, InvalidJobError, r"n_folds must be .* \[2, 100\]"),
        (spec_checks.validate_clusters, {"cluster_cols": ("a", "b", "c")}, InvalidJobError, "at most 2"),
        (spec_checks.validate_model_options, {"t_col": "t"}, InvalidJobError, "t_col is an option of"),
        (spec_checks.validate_d_mean, {"approach": "cre_normal"}, InvalidJobError, "needs d_mean_cols"),
        (spec_checks.validate_dtypes, {"dtypes": {"z": "float32"}}, InvalidJobError, "names role 'z'"),
        (spec_checks.validate_store_models, {"store_models": 1}, InvalidJobError, "store_models must be"),
    ],
)  # fmt: skip
def test_a_check_raises_what_validate_raises(check, overrides, error, match) -> None:
    spec = _spec(**overrides)
    with pytest.raises(error, match=match) as direct:
        check(spec)
    with pytest.raises(error) as through_validate:
        spec.validate()
    assert str(through_validate.value) == str(direct.value)


def test_the_learner_check_takes_the_learners_the_model_needs() -> None:
    needed = spec_module.required_learners("irm", "ATE")
    spec = _spec(model="irm", score="ATE", learners={"ml_g": "Ridge", "ml_m": "Ridge"})
    with pytest.raises(InvalidLearnerError, match="ml_m .* must be a classifier"):
        spec_checks.validate_learners(spec, needed)
    spec_checks.validate_learners(_spec(), spec_module.required_learners("plr", "partialling out"))
