"""Each Lambda function's init (its handler module's import) on the Lambda runtime's interpreter,
with the layers as deployed, pinned to one CPU (one vCPU: 1,769 MB).

    python benchmarks/cold_start.py --json

Issue 39, item 2. For every function directory that ``template.yaml`` names as a ``CodeUri``
(``functions/crossfit`` is CrossFit, ``functions/train_shard`` TrainShard, ...; ``--functions``
picks some), ``--runs`` (default 5) fresh processes, after ``--warmup`` (default 1) discarded
ones that fill the page cache, each run round-robin over the functions so that a change in the
machine's load falls on all of them. Each process is what the local stack's executor starts
(``fanfit_localstack.executor`` and ``lambda_bootstrap``): the Lambda interpreter
(``.venv-lambda``, Python 3.12 with only the runtime's boto3; ``FANFIT_LAMBDA_PYTHON``) run with
``-P -X importtime``, the function's code dir first on ``sys.path``, then each layer's
``python/lib/python3.12/site-packages`` and ``python/`` (the last layer first), the layers'
``lib`` on ``LD_LIBRARY_PATH``, the working directory in the code dir; its environment the one a
Lambda gets: the template's ``Globals`` and the function's ``Environment`` (intrinsics resolved to
the parameters' defaults and placeholder names), ``LAMBDA_TASK_ROOT``, ``AWS_LAMBDA_FUNCTION_*``,
``AWS_REGION``, dummy credentials, BLAS/OpenMP pools of one thread, and X-Ray's variables when the
template's ``Tracing`` is ``Active`` (``--tracing off``: ``POWERTOOLS_TRACE_DISABLED=true``
instead). The process is pinned to CPU ``--cpu`` (default 0) from its start
(``os.sched_setaffinity``); the init is the wall time of ``import app`` inside it, what
``lambda_bootstrap`` reports as ``init_ms`` (no network: the handlers only create clients).

The layers are ``sam build``'s output as Lambda holds them: ``/opt`` is read-only, so no ``.pyc``
is written (``PYTHONDONTWRITEBYTECODE=1``) and only those the build ships (hash-based, the layers'
Makefiles compile the packages every init imports) are there; the ones an earlier local run wrote
are left out (:func:`deployed_layers`). The build: ``<state dir>/deploy/fanfit/build``
(the local stack's last deploy, ``fanfit local up``), else this benchmark's own
``<state dir>/bench/cold_start/build``, built once with ``sam build ScientificLayer`` and
``sam build FanfitLayer`` (the layers' Makefiles, with the Lambda interpreter's ``python3.12`` on
``PATH``, as the local deploy runs them; pip downloads the wheels). The functions' code is the working tree's
(``--root``, default this checkout), the fanfit library the built layer's (``--library source``:
the working tree's, with whatever ``__pycache__`` it has).

After CrossFit's init, the child imports what its first fit imports (``--first-fit``, default
``sklearn.ensemble,sklearn.linear_model``: scikit-learn and scipy, which the layer does not ship
compiled, so the first shard of every cold environment compiles them) and reports those seconds
apart (``first_fit_import_s``): a cold CrossFit costs the init plus them.

Prints one JSON object: per function its resources, every run's ``init_s``, ``median_init_s``
(and whether it is within ``--target-s``, default 1.0), the same in CPU seconds of the process
(``init_cpu_s``: less sensitive than the wall time to other work on the pinned CPU, which a busy
machine still shares), the median process wall time (interpreter start-up included), the number of
modules loaded, ``top_imports`` (the handler's imports up to ``--depth`` levels down, by median
cumulative seconds as ``-X importtime`` reports them: a module is counted under whichever imported
it first) and ``packages`` (median self seconds summed per top-level package, fanfit's per
subpackage: what each costs on its own); the 1-minute load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LAYER_IDS = ("ScientificLayer", "FanfitLayer")
RUNTIME = "python3.12"
#: The child: put the runtime path first, import the handler's module, time it (as lambda_bootstrap).
CHILD = """\
import json, sys, time
cfg = json.loads(sys.argv[1])
sys.path[0:0] = cfg["path"]
started, cpu_started = time.perf_counter(), time.process_time()
__import__(cfg["module"])  # not importlib.import_module: -X importtime would not time it
module = sys.modules[cfg["module"]]
init_s, init_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
if not callable(getattr(module, cfg["function"], None)):
    raise SystemExit(f"handler {cfg['function']!r} missing on module {cfg['module']!r}")
started = time.perf_counter()
for name in cfg["first_fit"]:  # what the first shard's fit imports (not compiled in the layer)
    __import__(name)
first_fit_s = time.perf_counter() - started
print(json.dumps({"init_s": init_s, "init_cpu_s": init_cpu_s, "n_modules": len(sys.modules),
                  "first_fit_import_s": first_fit_s}))
"""
_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)\s*$")


# -- the template ---------------------------------------------------------------------------------
def resolve(value: Any, template: dict[str, Any]) -> Any:
    """A template value with its intrinsic functions resolved for a local process.

    ``Ref`` to a parameter gives its default, to ``AWS::Region`` ``us-east-1``, to a resource
    ``fanfit-<logical id>``; ``Fn::If`` takes its false branch (every condition off, as the
    parameters' defaults leave the optional GPU worker); ``Fn::Select``, ``Fn::Join`` and
    ``Fn::Sub`` are evaluated; ``Fn::GetAtt`` gives a placeholder ARN. ``AWS::NoValue`` is None.
    """
    params = template.get("Parameters", {})
    if isinstance(value, list):
        return [resolve(v, template) for v in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        name = value["Ref"]
        pseudo = {"AWS::Region": "us-east-1", "AWS::AccountId": "000000000000",
                  "AWS::Partition": "aws", "AWS::StackName": "fanfit", "AWS::NoValue": None}  # fmt: skip
        if name in pseudo:
            return pseudo[name]
        if name in params:
            default = params[name].get("Default", "")
            return ",".join(map(str, default)) if isinstance(default, list) else str(default)
        return f"fanfit-{name}"
    if "Fn::If" in value:
        return resolve(value["Fn::If"][2], template)
    if "Fn::Select" in value:
        index, items = value["Fn::Select"]
        items = resolve(items, template)
        items = items.split(",") if isinstance(items, str) else items
        return items[int(resolve(index, template))]
    if "Fn::Join" in value:
        sep, items = value["Fn::Join"]
        return sep.join(str(resolve(i, template)) for i in resolve(items, template))
    if "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        name = target.split(".")[0] if isinstance(target, str) else target[0]
        return f"arn:aws:lambda:us-east-1:000000000000:function:fanfit-{name}"
    if "Fn::Sub" in value:
        text = value["Fn::Sub"]
        text, extra = (text, {}) if isinstance(text, str) else text

        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in extra:
                return str(resolve(extra[name], template))
            if "." in name:
                return str(resolve({"Fn::GetAtt": name}, template))
            return str(resolve({"Ref": name}, template))

        return re.sub(r"\$\{([^}!]+)\}", sub, text)
    return value


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The template's functions by code dir (``functions/<name>``): resources, handler, env, tracing.

    A code dir deployed as several functions (CrossFit at three memory sizes) is measured once,
    with its first function's settings.
    """
    glob = template.get("Globals", {}).get("Function", {})
    out: dict[str, dict[str, Any]] = {}
    for logical, res in template["Resources"].items():
        props = res.get("Properties", {})
        if res.get("Type") != "AWS::Serverless::Function" or not isinstance(
            props.get("CodeUri"), str
        ):
            continue
        name = Path(props["CodeUri"]).name
        if name in out:
            out[name]["resources"].append(logical)
            continue
        env = {
            **glob.get("Environment", {}).get("Variables", {}),
            **props.get("Environment", {}).get("Variables", {}),
        }
        env = {k: resolve(v, template) for k, v in env.items()}
        layers = [*glob.get("Layers", []), *props.get("Layers", [])]
        out[name] = {
            "resources": [logical],
            "code_uri": props["CodeUri"],
            "handler": props.get("Handler", glob.get("Handler", "app.lambda_handler")),
            "memory_mb": int(
                resolve(props.get("MemorySize", glob.get("MemorySize", 128)), template)
            ),
            "tracing": props.get("Tracing", glob.get("Tracing", "PassThrough")) == "Active",
            "layers": [layer["Ref"] for layer in layers if isinstance(layer, dict)],
            "env": {k: str(v) for k, v in env.items() if v is not None},
        }
    return out


# -- the layers -----------------------------------------------------------------------------------
def layer_build_dir(root: Path, build: str | None, lambda_python: Path) -> Path:
    """A ``sam build`` output holding both layers: ``build``, the local deploy's, or our own
    (built here when missing)."""
    from fanfit.local.process import state_dir

    state = state_dir(ROOT)
    candidates = [Path(build)] if build else [state / "deploy" / "fanfit" / "build"]
    own = state / "bench" / "cold_start" / "build"
    for candidate in [*candidates, own]:
        if all((candidate / layer / "python").is_dir() for layer in LAYER_IDS):
            return candidate
    if build:
        raise SystemExit(f"{build}: no built {' and '.join(LAYER_IDS)} there")
    from fanfit.local.deploy import sam_executable

    env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}
    env["PATH"] = os.pathsep.join([str(lambda_python.parent), env.get("PATH", "")])
    for layer in LAYER_IDS:
        print(f"cold_start: building {layer} with sam build into {own}", file=sys.stderr)
        subprocess.run(  # the project's template and the layers' Makefiles
            [sam_executable(), "build", layer, "--template-file", str(root / "template.yaml"),
             "--build-dir", str(own), "--cache-dir", str(own.parent / "cache"),
             "--base-dir", str(root), "--cached"],
            cwd=str(root), env=env, check=True, stdout=sys.stderr,
        )  # fmt: skip
    return own


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        import shutil

        shutil.copy2(src, dst)


def deployed_layers(build: Path, tmp: Path, keep_shipped: bool = True) -> dict[str, int]:
    """Both layers of ``build`` as Lambda holds them, under ``tmp`` (hard links, no copy): every
    ``.pyc`` that a run wrote (timestamp-based; ``PYTHONDONTWRITEBYTECODE`` keeps this benchmark's
    processes from writing any) removed, the ones the build shipped (hash-based, the layers'
    Makefiles) kept unless not ``keep_shipped`` (``--pyc none``: a layer without them); returns
    each layer's ``.pyc`` files kept."""
    import shutil

    shipped = {}
    for layer in LAYER_IDS:
        target = tmp / layer
        shutil.copytree(build / layer, target, symlinks=True, copy_function=_link_or_copy)
        shipped[layer] = 0
        for pyc in target.rglob("*.pyc"):
            with pyc.open("rb") as f:
                flags = int.from_bytes(f.read(8)[4:8], "little")
            if flags & 1 and keep_shipped:  # PEP 552: hash-based, written by the build
                shipped[layer] += 1
            else:
                pyc.unlink()
    return shipped


def runtime_path(code_dir: Path, layer_dirs: list[Path], library: Path | None) -> list[str]:
    """``sys.path`` as the executor builds it: code dir, then the layers (last first);
    ``library`` (a dir holding the ``fanfit`` package) just before the layer that ships fanfit."""
    entries = [str(code_dir)]
    for layer in reversed(layer_dirs):
        if library is not None and (layer / "python" / "fanfit").is_dir():
            entries.append(str(library))
        entries += [
            str(layer / "python" / "lib" / RUNTIME / "site-packages"),
            str(layer / "python"),
        ]
    return entries


def lambda_env(fn: dict[str, Any], code_dir: Path, layer_dirs: list[Path], python: Path,
               tmp: Path, tracing: bool) -> dict[str, str]:  # fmt: skip
    """The environment of the function's process (the executor's and AWS's variables)."""
    logical = fn["resources"][0]
    env = {
        "PATH": f"{python.parent}:/usr/local/bin:/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",  # /opt is read-only on Lambda: no .pyc is ever written
        "PYTHONNOUSERSITE": "1",
        "TMPDIR": str(tmp),
        "LAMBDA_TASK_ROOT": str(code_dir),
        "LAMBDA_RUNTIME_DIR": str(ROOT / "localstack_plugins" / "fanfit_localstack"),
        "LD_LIBRARY_PATH": os.pathsep.join(str(d / "lib") for d in reversed(layer_dirs)),
        "_HANDLER": fn["handler"],
        "AWS_EXECUTION_ENV": f"AWS_Lambda_{RUNTIME}",
        "AWS_LAMBDA_FUNCTION_NAME": f"fanfit-{logical}",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(fn["memory_mb"]),
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/fanfit-{logical}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2026/01/01/[$LATEST]0",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",  # noqa: S105 - a placeholder, nothing is called
        "AWS_SESSION_TOKEN": "test",  # noqa: S105
        **{k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        **fn["env"],
    }
    if tracing:
        env.update(
            AWS_XRAY_DAEMON_ADDRESS="127.0.0.1:2000",
            AWS_XRAY_CONTEXT_MISSING="LOG_ERROR",
            _X_AMZN_TRACE_ID="Root=1-00000000-000000000000000000000000;Parent=0000000000000000;Sampled=1",
        )
    else:
        env["POWERTOOLS_TRACE_DISABLED"] = "true"
    return env


# -- one process ----------------------------------------------------------------------------------
def parse_importtime(stderr: str, module: str) -> dict[str, tuple[int, int, int]]:
    """The handler module's import tree from ``-X importtime``: ``{module: (level, self_us, cum_us)}``,
    level 0 the handler's module, 1 what it imports, ..."""
    rows = []
    for line in stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            rows.append((len(match.group(3)) // 2, match.group(4), int(match.group(1)),
                         int(match.group(2))))  # fmt: skip
    # post-order: a module's line follows its imports' lines; the handler's is at level 0
    end = next((i for i in range(len(rows) - 1, -1, -1) if rows[i][:2] == (0, module)), None)
    if end is None:
        return {}
    start = end
    while start > 0 and rows[start - 1][0] > 0:
        start -= 1
    return {
        name: (level, self_us, cum_us) for level, name, self_us, cum_us in rows[start : end + 1]
    }


def run_once(python: Path, code_dir: Path, cfg: dict[str, Any], env: dict[str, str],
             cpu: int | None) -> dict[str, Any]:  # fmt: skip
    """One fresh process: its init seconds, wall seconds, modules and import tree."""

    def pin() -> None:
        if cpu is not None and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {cpu})

    t0 = time.perf_counter()
    done = subprocess.run(
        [str(python), "-P", "-X", "importtime", "-c", CHILD, json.dumps(cfg)],
        cwd=str(code_dir), env=env, capture_output=True, text=True, check=False,
        preexec_fn=pin, timeout=300,
    )  # fmt: skip
    wall_s = time.perf_counter() - t0
    if done.returncode != 0:
        tail = [x for x in done.stderr.splitlines() if not x.startswith("import time:")][-15:]
        return {"error": "\n".join(tail)}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {"init_s": out["init_s"], "init_cpu_s": out["init_cpu_s"], "wall_s": wall_s, "n_modules": out["n_modules"],
            "first_fit_import_s": out["first_fit_import_s"],
            "tree": parse_importtime(done.stderr, cfg["module"])}  # fmt: skip


def package_of(module: str) -> str:
    """The package a module's self time is charged to: its top-level one, fanfit's subpackages apart."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "fanfit" and len(parts) > 1 else parts[0]


def summarize(runs: list[dict[str, Any]], module: str, depth: int, top: int,
              target_s: float) -> dict[str, Any]:  # fmt: skip
    """Medians over the runs of one function."""
    errors = [r["error"] for r in runs if "error" in r]
    runs = [r for r in runs if "error" not in r]
    if not runs:
        return {"error": errors[0] if errors else "no run"}
    init = [r["init_s"] for r in runs]
    names = set.intersection(*(set(r["tree"]) for r in runs))
    cum = {n: statistics.median(r["tree"][n][2] for r in runs) / 1e6 for n in names}
    level = {n: runs[0]["tree"][n][0] for n in names}
    packages: dict[str, list[float]] = {}
    for r in runs:
        sums: dict[str, float] = {}
        for name, (lvl, self_us, _) in r["tree"].items():
            if lvl > 0:
                sums[package_of(name)] = sums.get(package_of(name), 0.0) + self_us / 1e6
        for key, value in sums.items():
            packages.setdefault(key, []).append(value)
    median_init = statistics.median(init)
    top_imports = sorted((n for n in names if 0 < level[n] <= depth), key=lambda n: -cum[n])[:top]
    by_package = sorted(packages.items(), key=lambda kv: -statistics.median(kv[1]))[:top]
    return {
        "init_s": [round(x, 3) for x in init],
        "median_init_s": round(median_init, 3),
        "within_target": median_init <= target_s,
        "init_cpu_s": [round(r["init_cpu_s"], 3) for r in runs],
        "median_init_cpu_s": round(statistics.median(r["init_cpu_s"] for r in runs), 3),
        "median_wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
        "median_first_fit_import_s": round(
            statistics.median(r["first_fit_import_s"] for r in runs), 3
        ),
        "n_modules": runs[0]["n_modules"],
        "handler_module_self_s": round(
            statistics.median(r["tree"][module][1] for r in runs) / 1e6, 3
        ),
        "top_imports": [
            {"module": n, "level": level[n], "cumulative_s": round(cum[n], 3)} for n in top_imports
        ],  # fmt: skip
        "packages": {k: round(statistics.median(v), 3) for k, v in by_package},
        **({"errors": errors} if errors else {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per function")
    parser.add_argument("--warmup", type=int, default=1, help="discarded processes per function")
    parser.add_argument("--functions", default="", help="code dirs, comma-separated (default all)")
    parser.add_argument("--cpu", type=int, default=0, help="the CPU to pin to (-1: no pinning)")
    parser.add_argument("--tracing", choices=("template", "on", "off"), default="template")
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose code is measured")
    parser.add_argument("--library", choices=("build", "source"), default="build")
    parser.add_argument(
        "--pyc",
        choices=("shipped", "none"),
        default="shipped",
        help="none: leave out the .pyc the layers ship (every module compiled)",
    )
    parser.add_argument("--build-dir", default=None, help="a sam build output with both layers")
    parser.add_argument(
        "--first-fit", default="sklearn.ensemble,sklearn.linear_model",
        help="modules CrossFit's first fit imports, timed after its init (empty: none)",
    )  # fmt: skip
    parser.add_argument("--depth", type=int, default=2, help="import levels in top_imports")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--target-s", type=float, default=1.0)
    args = parser.parse_args()

    from fanfit.local.deploy import load_template
    from fanfit.local.process import lambda_python

    root = Path(args.root).resolve()
    python = lambda_python(ROOT)
    build = layer_build_dir(root, args.build_dir, python)
    library = root / "layers" / "fanfit" if args.library == "source" else None
    template = load_template(root / "template.yaml")
    fns = functions(template)
    if args.functions:
        wanted = args.functions.split(",")
        unknown = sorted(set(wanted) - set(fns))
        if unknown:
            raise SystemExit(f"--functions: no such code dir in the template: {unknown}")
        fns = {k: fns[k] for k in wanted}
    cpu = None if args.cpu < 0 else args.cpu

    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in fns}
    with tempfile.TemporaryDirectory(prefix="cold-start-") as tmp:
        shipped = deployed_layers(build, Path(tmp) / "opt", args.pyc == "shipped")
        plans = {}
        for name, fn in fns.items():
            code_dir = root / fn["code_uri"]
            layer_dirs = [Path(tmp) / "opt" / layer for layer in fn["layers"]]
            tracing = {"template": fn["tracing"], "on": True, "off": False}[args.tracing]
            module, function = fn["handler"].rsplit(".", 1)
            first_fit = args.first_fit.split(",") if name == "crossfit" and args.first_fit else []
            cfg = {"path": runtime_path(code_dir, layer_dirs, library),
                   "module": module.replace("/", "."), "function": function,
                   "first_fit": first_fit}  # fmt: skip
            env = lambda_env(fn, code_dir, layer_dirs, python, Path(tmp), tracing)
            plans[name] = (code_dir, cfg, env, tracing)
        for i in range(args.warmup + args.runs):
            for name, (code_dir, cfg, env, _) in plans.items():
                result = run_once(python, code_dir, cfg, env, cpu)
                if i >= args.warmup:
                    runs[name].append(result)
    out = {
        "command": " ".join(
            ["python", "benchmarks/cold_start.py", *map(shlex.quote, sys.argv[1:])]
        ),
        "python": str(python),
        "build_dir": str(build),
        "library": str(library) if library else "the built FanfitLayer's copy",
        "layer_pyc_shipped": shipped,
        "cpu": cpu,
        "runs": args.runs,
        "target_s": args.target_s,
        "functions": {
            name: {
                "resources": fns[name]["resources"],
                "tracing": plans[name][3],
                **summarize(
                    runs[name], plans[name][1]["module"], args.depth, args.top, args.target_s
                ),  # fmt: skip
            }
            for name in fns
        },
        "load_average_1m_before": round(load_before, 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out) if args.json else json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
