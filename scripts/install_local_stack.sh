#!/usr/bin/env bash
# Build the embedded local stack's two interpreters (idempotent; `make install-local` runs it):
#   .venv-localstack  Python 3.13: LocalStack core (localstack-core[runtime]==2026.3.0, its moto-ext)
#                     with fanfit's LocalStack plugins (localstack_plugins/, installed editable).
#   .venv-lambda      Python 3.12 (the template's Runtime: python3.12): what AWS's python3.12 runtime
#                     bundles, boto3/botocore, and nothing else. Functions get the rest from their
#                     layers, so a dependency missing from a layer fails locally as on AWS. sam build
#                     also finds its python3.12 here.
# Interpreters: $FANFIT_PYTHON313 / $FANFIT_PYTHON312, else python3.13 / python3.12 on PATH, else
# pyenv's versions. A venv is rebuilt only when its inputs changed (a stamp file records them).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

LAMBDA_BOTO3="boto3==1.40.76"   # what the python3.12 runtime bundles (1.40.x), pinned for repeatability
PIP_FLAGS=(-q --disable-pip-version-check --no-input)

find_python() {  # find_python <major.minor> <override-var>
  local want="$1" override="${!2:-}" candidate
  local candidates=("$override" "$(command -v "python$want" 2>/dev/null || true)")
  local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}"
  for candidate in "$pyenv_root"/versions/"$want".*/bin/"python$want"; do candidates+=("$candidate"); done
  for candidate in "${candidates[@]}"; do
    [[ -n "$candidate" && -x "$candidate" ]] || continue
    if "$candidate" -c "import sys; sys.exit(0 if '%d.%d' % sys.version_info[:2] == '$want' else 1)" 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "error: no Python $want found (set FANFIT_PYTHON${want/./} or install it, e.g. pyenv install $want)" >&2
  return 1
}

stamp_of() {  # a hash of the given strings and files
  { for item in "$@"; do if [[ -f "$item" ]]; then cat "$item"; else echo "$item"; fi; done; } | sha256sum | cut -d' ' -f1
}

build_venv() {  # build_venv <dir> <python> <stamp> <pip args...>
  local dir="$1" python="$2" stamp="$3"
  shift 3
  if [[ -f "$dir/.fanfit-stamp" && "$(cat "$dir/.fanfit-stamp")" == "$stamp" && -x "$dir/bin/python" ]]; then
    echo "$dir: up to date"
    return 0
  fi
  echo "$dir: building with $python"
  rm -rf "$dir"
  "$python" -m venv "$dir"
  "$dir/bin/python" -m pip install "${PIP_FLAGS[@]}" --upgrade pip
  "$dir/bin/python" -m pip install "${PIP_FLAGS[@]}" "$@"
  echo "$stamp" > "$dir/.fanfit-stamp"
}

PY313="$(find_python 3.13 FANFIT_PYTHON313)"
PY312="$(find_python 3.12 FANFIT_PYTHON312)"

build_venv .venv-localstack "$PY313" \
  "$(stamp_of "$PY313" localstack_plugins/pyproject.toml "$0")" \
  -e "$ROOT/localstack_plugins"

build_venv .venv-lambda "$PY312" \
  "$(stamp_of "$PY312" "$LAMBDA_BOTO3" "$0")" \
  "$LAMBDA_BOTO3"

# Check that LocalStack finds the plugins through their entry points.
.venv-localstack/bin/python - <<'PY'
from importlib.metadata import entry_points

groups = {
    "localstack.lambda.runtime_executor": "local",
    "localstack.aws.provider": ["dynamodb:moto", "batch:local"],
    "localstack.hooks.on_infra_start": ["fanfit_stepfunctions_patches", "fanfit_s3_mirror"],
    "localstack.hooks.on_infra_ready": "fanfit_s3_restore",
    "localstack.cloudformation.resource_providers": [
        "aws::batch::computeenvironment", "aws::batch::jobqueue", "aws::batch::jobdefinition"],
}
for group, names in groups.items():
    for name in [names] if isinstance(names, str) else names:
        if not any(ep.name == name for ep in entry_points(group=group)):
            raise SystemExit(f"fanfit LocalStack plugin {group}:{name} is not registered")
import fanfit_localstack.batch  # noqa: F401  (imports LocalStack and moto: the pins fit)
import fanfit_localstack.executor  # noqa: F401
import fanfit_localstack.s3mirror  # noqa: F401
PY
echo "local stack interpreters ready: .venv-localstack ($("$ROOT/.venv-localstack/bin/python" -V)), .venv-lambda ($("$ROOT/.venv-lambda/bin/python" -V))"
