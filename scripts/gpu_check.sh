#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, in one go: the CUDA unit tests of the Torch code, then
# benchmarks/gpu_speedup.py (the batched MLP fits three times, the other parts once). About 15
# minutes; on a machine lent for less, lower the limits (PYTEST_S, BATCHED_S, FULL_S seconds).
# Run from the repository root on a machine with CUDA and PyTorch, numpy, pandas, scipy,
# scikit-learn and pytest installed (fanfit's layer is put on PYTHONPATH, nothing is installed):
#   OUT=gpu-check bash scripts/gpu_check.sh
# Every result goes to $OUT as it is produced (steps.txt, pytest.txt, batched_1..3.json, full.json,
# stderr in errors.log), so a run stopped early keeps what it measured. PYTHON picks the interpreter (default python3).
set -u
OUT=${OUT:-gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/layers/fanfit${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/steps.txt"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' \
    | tee -a "$OUT/steps.txt"
step() {  # step NAME SECONDS COMMAND...: one check under a time limit, timed, output to $OUT
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name" >>"$OUT/errors.log"
    timeout "$limit" "$@" >"$OUT/$name" 2>>"$OUT/errors.log"
    echo "$name: exit $? in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
# The Torch tests that need no AWS libraries (a bare CUDA image has no pydantic, boto3 or doubleml)
step pytest.txt "${PYTEST_S:-120}" "$PY" -m pytest -q -p no:cacheprovider -o addopts="-ra" \
    tests/unit/test_torch_batched.py tests/unit/test_torch_mlp.py \
    tests/unit/test_train_torch_steps.py \
    --deselect tests/unit/test_torch_mlp.py::test_plr_with_torch_learners_equals_doubleml
tail -5 "$OUT/pytest.txt"
# each K's row reaches errors.log as soon as it is measured, also from a run stopped at its limit
BATCHED=(--json --batched-only --check-fits 1 --cpu-batched-max-k 1)
step batched_1.json "${BATCHED_S:-240}" "$PY" benchmarks/gpu_speedup.py "${BATCHED[@]}"
for i in 2 3; do
    step "batched_$i.json" "${BATCHED_S:-240}" "$PY" benchmarks/gpu_speedup.py "${BATCHED[@]}"
done
step full.json "${FULL_S:-120}" "$PY" benchmarks/gpu_speedup.py --json --max-k 1
