#!/usr/bin/env bash
# One GPU check, for a machine with an NVIDIA GPU (written for one H200; under 8 minutes there):
# builds the extension for that GPU, runs the CUDA tests, compute-sanitizer (memcheck, racecheck)
# on a small case when the tool is present, and the GPU benchmark; ends with a short table.
# Logs go to $OUT (default build/gpu_check).
#   PYTHON=python3 TORCH_CUDA_ARCH_LIST=9.0 bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-build/gpu_check}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" FLIP_LOSS_CUDA=1 MAX_JOBS="${MAX_JOBS:-16}"
export PYTHONUNBUFFERED=1
status=()

echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
echo "== build (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"
start=$(date +%s)
if $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  status+=("build: ok ($(( $(date +%s) - start )) s)")
else
  tail -40 "$OUT/build.log"; echo "build failed"; exit 1
fi

echo "== CUDA tests"
$PY -m pytest tests/test_cuda.py tests/test_api.py tests/test_ops.py tests/test_gpu_emulation.py -q \
  -p no:cacheprovider > "$OUT/tests.log" 2>&1
rc=$?; tail -15 "$OUT/tests.log"; status+=("tests: $(tail -1 "$OUT/tests.log")")

if command -v compute-sanitizer > /dev/null; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 $PY benchmarks/sanitize_case.py \
      > "$OUT/sanitizer_$tool.log" 2>&1
    src=$?; tail -3 "$OUT/sanitizer_$tool.log"; status+=("compute-sanitizer $tool: rc=$src")
  done
else
  status+=("compute-sanitizer: not installed")
fi

echo "== benchmark"
$PY benchmarks/gpu_bench.py --json "$OUT/bench.json" | tee "$OUT/bench.md"
echo "== HDR benchmark"
(cd benchmarks && $PY hdr_bench.py --device cuda) | tee "$OUT/hdr_bench.md"
echo
echo "== summary"
printf '%s\n' "${status[@]}"
exit $rc
