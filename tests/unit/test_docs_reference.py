"""The guide's reference tables follow the code: template parameters and outputs, models and scores.

GIVEN template.yaml, :data:`fanfit.dml.SCORES` and the local stack's settings, WHEN the guide is
read, THEN docs/deploy.md names every Parameter and Output of the template (and the required
ones as required), docs/estimate.md every model and score, and docs/local.md the environment
variables the local stack reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def template() -> dict:
    from cfnlint.decode import decode

    tpl, matches = decode(str(ROOT / "template.yaml"))
    assert not matches, matches
    return tpl


def test_deploy_names_every_parameter_and_output(template) -> None:
    # GIVEN the template's Parameters and Outputs WHEN docs/deploy.md is read THEN it names each
    text = (DOCS / "deploy.md").read_text(encoding="utf-8")
    missing = [
        name
        for section in ("Parameters", "Outputs")
        for name in template.get(section, {})
        if f"`{name}`" not in text
    ]
    assert not missing, f"docs/deploy.md does not document {missing}"


def test_deploy_marks_the_parameters_without_a_default_as_required(template) -> None:
    # GIVEN the parameters without a default WHEN their rows are read THEN they say "required"
    text = (DOCS / "deploy.md").read_text(encoding="utf-8")
    for name, parameter in template["Parameters"].items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        if "Default" not in parameter:
            assert "| required |" in row, f"docs/deploy.md: {name} has no default"
        else:
            assert "| required |" not in row, f"docs/deploy.md: {name} has a default"


def test_estimate_names_every_model_and_score() -> None:
    # GIVEN fanfit's models and scores WHEN docs/estimate.md is read THEN each appears in backticks
    from fanfit import dml

    text = (DOCS / "estimate.md").read_text(encoding="utf-8")
    for model, scores in dml.SCORES.items():
        assert f"`{model}`" in text
        for score in scores:
            assert f"`{score}`" in text, f"docs/estimate.md: score {score!r} of {model}"


@pytest.mark.parametrize(
    "variable",
    ["FANFIT_HOME", "FANFIT_LAMBDA_VCPU_SCALE", "FANFIT_BATCH_VCPU_SCALE", "FANFIT_LAMBDA_CGROUPS",
     "FANFIT_LOCALSTACK_PYTHON", "FANFIT_LAMBDA_PYTHON", "FANFIT_BATCH_PYTHON"],
)  # fmt: skip
def test_local_documents_the_settings_of_the_local_stack(variable) -> None:
    # GIVEN a variable the local stack reads (checked against its code) WHEN docs/local.md is read
    # THEN it is in the table of variables
    sources = [
        ROOT / "layers" / "fanfit" / "fanfit" / "local" / "stack.py",
        *sorted((ROOT / "localstack_plugins" / "fanfit_localstack").glob("*.py")),
    ]
    assert any(variable in p.read_text(encoding="utf-8") for p in sources), (
        f"{variable} is no longer read by the local stack: update docs/local.md and this test"
    )
    text = (DOCS / "local.md").read_text(encoding="utf-8")
    assert f"| `{variable}` |" in text
