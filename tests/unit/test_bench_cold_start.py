"""benchmarks/cold_start.py's model of a deployed layer and its reading of ``-X importtime``.

GIVEN a ``sam build`` output whose layers hold a ``.pyc`` the build shipped (hash-based, as the
layers' Makefiles compile) and one a local run wrote (timestamp-based), WHEN
:func:`deployed_layers` lays them out as Lambda holds them, THEN only the shipped one is there
(none with ``--pyc none``) and the build is untouched; and :func:`parse_importtime` reads the
handler's import tree from ``-X importtime``'s lines.
"""

from __future__ import annotations

import py_compile

from bench_module import load_benchmark

cold_start = load_benchmark("cold_start")


def _build(tmp_path):
    build = tmp_path / "build"
    for layer in cold_start.LAYER_IDS:
        pkg = build / layer / "python" / f"pkg_{layer.lower()}"
        pkg.mkdir(parents=True)
        for name, mode in (("shipped", py_compile.PycInvalidationMode.UNCHECKED_HASH),
                           ("written", py_compile.PycInvalidationMode.TIMESTAMP)):  # fmt: skip
            source = pkg / f"{name}.py"
            source.write_text("X = 1\n")
            py_compile.compile(str(source), invalidation_mode=mode, doraise=True)
    return build


def test_only_the_pyc_the_build_shipped_is_deployed(tmp_path) -> None:
    build = _build(tmp_path)
    kept = cold_start.deployed_layers(build, tmp_path / "opt")
    assert kept == {layer: 1 for layer in cold_start.LAYER_IDS}
    deployed = sorted(p.name for p in (tmp_path / "opt").rglob("*.pyc"))
    assert all(name.startswith("shipped.") for name in deployed) and len(deployed) == 2
    # AND the build keeps both of each layer's
    assert len(list(build.rglob("*.pyc"))) == 4


def test_pyc_none_deploys_no_pyc(tmp_path) -> None:
    build = _build(tmp_path)
    kept = cold_start.deployed_layers(build, tmp_path / "opt", keep_shipped=False)
    assert kept == {layer: 0 for layer in cold_start.LAYER_IDS}
    assert not list((tmp_path / "opt").rglob("*.pyc"))
    assert list((tmp_path / "opt").rglob("shipped.py"))


def test_the_handlers_import_tree_is_read_from_importtime() -> None:
    stderr = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:       100 |        100 | encodings",
        "import time:       300 |        300 |     numpy._core",
        "import time:       200 |        500 |   numpy",
        "import time:        50 |         50 |   json",
        "import time:        10 |        560 | app",
    ])  # fmt: skip
    tree = cold_start.parse_importtime(stderr, "app")
    assert tree == {"numpy._core": (2, 300, 300), "numpy": (1, 200, 500), "json": (1, 50, 50),
                    "app": (0, 10, 560)}  # fmt: skip
