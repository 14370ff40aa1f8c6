"""Every public model class of DoubleML has a fanfit class of the same name.

GIVEN the public names of ``doubleml``, ``doubleml.did`` and ``doubleml.rdd`` (their ``__all__``)
WHEN the classes that are not models (data containers, result objects, DIDMulti's building
blocks, the heterogeneity tools, each listed with the reason) are set aside THEN each remaining
class is a fanfit class of the same name (``fanfit.<Name>``), so that the next model DoubleML
ships cannot go missing unnoticed; what fanfit does not run yet is listed in
:data:`NOT_YET` with its issue and is expected to fail until then.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

dml = pytest.importorskip("doubleml")

import fanfit  # noqa: E402

#: Public classes of DoubleML that are not models a user fits, and why.
NOT_MODELS = {
    "DoubleMLData": "data",
    "DoubleMLClusterData": "data",
    "DoubleMLDIDData": "data",
    "DoubleMLPanelData": "data",
    "DoubleMLRDDData": "data",
    "DoubleMLSSMData": "data",
    "DoubleMLFramework": "a fitted model's results (fanfit's classes keep DoubleML's)",
    "DoubleMLCore": "a framework's estimates (inside DoubleMLFramework)",
    "DoubleMLDIDAggregation": "DoubleMLDIDMulti.aggregate()'s result (DoubleML's own, after the fit)",
    "DoubleMLDIDBinary": "one group-time combination of DoubleMLDIDMulti (a part of its job)",
    "DoubleMLDIDCSBinary": "one group-time combination of DoubleMLDIDMulti with panel=False",
    "DoubleMLBLP": "heterogeneity of a fitted model (fanfit's cate/gate: docs/heterogeneity.md)",
    "DoubleMLPolicyTree": "heterogeneity of a fitted model (fanfit's policy_tree)",
}
#: DoubleML's models fanfit does not run yet, by the issue that adds them.
NOT_YET: dict[str, str] = {}
MODULES = ("doubleml", "doubleml.did", "doubleml.rdd")


def _public_classes() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in module.__all__:
            if inspect.isclass(getattr(module, attr)):
                out.setdefault(attr, name)
    return out


MODELS = sorted(set(_public_classes()) - set(NOT_MODELS))


def test_the_lists_name_only_doublemls_classes() -> None:
    # a name DoubleML dropped must leave the lists too
    assert set(NOT_MODELS) | set(NOT_YET) <= set(_public_classes())


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=NOT_YET[n], strict=True))
        if n in NOT_YET
        else n
        for n in MODELS
    ],
)
def test_every_doubleml_model_has_a_fanfit_class(name) -> None:
    ours = getattr(fanfit, name, None)
    assert ours is not None, f"DoubleML's {name} has no fanfit class"
    theirs = getattr(importlib.import_module(_public_classes()[name]), name)
    assert issubclass(ours, theirs), f"fanfit.{name} is not a {theirs.__module__}.{name}"
