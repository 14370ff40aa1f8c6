"""Every Lambda function with its layers stays within the unzipped-size budget after ``sam build``.

Lambda refuses a function whose code and layers exceed 262,144,000 bytes unzipped; fanfit keeps a
margin and budgets 240,000,000 bytes (issue 12). The scientific layer (numpy, scipy, scikit-learn,
LightGBM) is most of it; layers/fanfit/Makefile keeps the runtime's own boto3/botocore out of the
fanfit layer and layers/scientific/Makefile drops scipy's and scikit-learn's test suites.

GIVEN the ``sam build`` output of the session's deploy (``Deployer.build_dir``, built once for all
integration modules), WHEN the files of every function's code directory and of each layer it names
are summed, THEN no function exceeds the budget.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from fanfit.local.deploy import Deployer, load_template

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

#: Unzipped bytes a function and its layers may take (Lambda's limit is 262,144,000).
BUDGET_BYTES = 240_000_000


def tree_bytes(path: Path) -> int:
    """Sum of the sizes of the regular files under ``path`` (what Lambda counts unzipped), bytes."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            file = Path(root) / name
            if not file.is_symlink():
                total += file.stat().st_size
    return total


def function_sizes(build_dir: Path) -> dict[str, dict[str, int]]:
    """Per function of a ``sam build`` output: its code's bytes, each layer's, and the total.

    Layers are the template's ``Globals.Function.Layers`` followed by the function's own, as SAM
    merges them; each must be a ``Ref`` to a layer built in ``build_dir``.

    Returns
    -------
    dict
        ``{function: {"code": bytes, <layer>: bytes, ..., "total": bytes}}``.
    """
    template = load_template(build_dir / "template.yaml")  # !Ref X as {"Ref": X}
    resources = template["Resources"]
    global_layers = template.get("Globals", {}).get("Function", {}).get("Layers", [])
    sizes: dict[str, dict[str, int]] = {}
    for name, resource in resources.items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource.get("Properties", {})
        entry = {"code": tree_bytes(build_dir / props["CodeUri"])}
        for layer in [*global_layers, *props.get("Layers", [])]:
            assert isinstance(layer, dict) and "Ref" in layer, (
                f"{name}: layer {layer!r} is not built here"
            )
            content = resources[layer["Ref"]]["Properties"]["ContentUri"]
            entry[layer["Ref"]] = tree_bytes(build_dir / content)
        entry["total"] = sum(entry.values())
        sizes[name] = entry
    return sizes


def test_every_function_with_its_layers_stays_within_the_budget(
    local_stack: Any, fanfit_outputs: dict[str, str]
) -> None:
    # GIVEN the build of the session's deploy
    build_dir = Deployer(local_stack, TEMPLATE).build_dir
    assert (build_dir / "template.yaml").is_file(), f"no sam build output in {build_dir}"
    # WHEN every function's code and layers are measured
    sizes = function_sizes(build_dir)
    for name in sorted(sizes):
        print(f"{name}: {sizes[name]}")
    # THEN every function was measured with both layers, and none outgrows the budget
    assert {"CrossFitFunction", "AggregateFunction", "PrepareFunction"} <= set(sizes)
    for name, entry in sizes.items():
        assert {"ScientificLayer", "FanfitLayer"} <= set(entry), name
        assert entry["ScientificLayer"] > 100_000_000, entry  # numpy, scipy, scikit-learn are there
        assert entry["total"] <= BUDGET_BYTES, (
            f"{name} with its layers is {entry['total']:,} bytes unzipped, over the "
            f"{BUDGET_BYTES:,}-byte budget: {entry}"
        )
    # AND the fanfit layer does not carry the runtime's botocore (it would shadow the runtime's)
    fanfit_layer = build_dir / "FanfitLayer" / "python"
    assert (fanfit_layer / "fanfit").is_dir()
    assert not (fanfit_layer / "botocore").exists()
    assert not (fanfit_layer / "boto3").exists()
    # AND the scientific layer ships the GNU OpenMP runtime LightGBM links (lib/ is Lambda's /opt/lib)
    assert (build_dir / "ScientificLayer" / "lib" / "libgomp.so.1").is_file()
