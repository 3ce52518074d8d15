#!/usr/bin/env bash
# The first GPU run, in one command that fits in 10 minutes on one H200, build included:
#   1. build for this GPU (TORCH_CUDA_ARCH_LIST=9.0 by default)
#   2. the CUDA tests, once, with CUDA_LAUNCH_BLOCKING=1 (an error names the launch that failed)
#   3. compute-sanitizer memcheck (twice: fused forward and tiled backward, forced row passes),
#      racecheck, synccheck, initcheck (with the tiled backward's scratch cut to 200 KB, so that
#      every image takes several bands and a read of a gradient-plane row no band wrote shows) on
#      benchmarks/sanitize_case.py, with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that out-of-bounds
#      accesses are not hidden inside the caching allocator's larger blocks
#   4. benchmarks/gpu_bench.py (back-to-back launches and graph replays, per-kernel profile)
# Every step prints "== STEP name" first and one "RESULT name: ..." line, repeated in the summary.
# Each step has its own time limit, so one hang cannot eat the others' time. Logs go to $OUT
# (default build/gpu_check).
#   PYTHON=python3 bash benchmarks/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-build/gpu_check}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" FLIP_LOSS_CUDA=1 MAX_JOBS="${MAX_JOBS:-16}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
summary=()
failed=0
began=$(date +%s)

result() {  # result NAME TEXT [failed]
  echo "RESULT $1: $2"
  summary+=("$1: $2")
  [ "${3:-}" = failed ] && failed=1
  return 0
}

echo "== STEP device"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || true
$PY -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda,
                           'devices', torch.cuda.device_count())"

echo "== STEP build (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST, MAX_JOBS=$MAX_JOBS)"
start=$(date +%s)
if timeout 300 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  result build "ok ($(( $(date +%s) - start )) s)"
else
  tail -40 "$OUT/build.log"
  result build "FAILED (see $OUT/build.log)" failed
  printf '%s\n' "== SUMMARY" "${summary[@]}"
  exit 1
fi

echo "== STEP CUDA tests (CUDA_LAUNCH_BLOCKING=1)"
CUDA_LAUNCH_BLOCKING=1 timeout 240 $PY -m pytest tests/test_cuda.py tests/test_cuda_graphs.py -q -rs \
  -p no:cacheprovider > "$OUT/tests.log" 2>&1
rc=$?
tail -25 "$OUT/tests.log"
if [ $rc -eq 0 ]; then result tests "$(tail -1 "$OUT/tests.log")"
elif [ $rc -eq 124 ]; then result tests "TIMED OUT after 240 s (see $OUT/tests.log)" failed
else result tests "FAILED: $(tail -1 "$OUT/tests.log")" failed
fi

sanitize() {  # sanitize LABEL TOOL LIMIT_S [ENV=VALUE...]
  local label=$1 tool=$2 limit=$3; shift 3
  local log="$OUT/sanitizer_$label.log"
  echo "== STEP compute-sanitizer $label"
  env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$@" timeout "$limit" compute-sanitizer --tool "$tool" \
    --error-exitcode 9 $PY benchmarks/sanitize_case.py > "$log" 2>&1
  local src=$?
  grep -E "^sanitize_case:" "$log"
  tail -4 "$log"
  if grep -qi "device not supported\|not supported on this device\|unsupported device" "$log"; then
    result "sanitizer $label" "device not supported by this compute-sanitizer (not a finding)"
  elif [ $src -eq 124 ]; then
    result "sanitizer $label" "TIMED OUT after $limit s (no verdict)" failed
  elif [ $src -eq 0 ] && grep -q "^sanitize_case: done" "$log"; then
    result "sanitizer $label" "clean ($(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$log" | tail -1))"
  else
    local errors
    errors=$(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$log" | tail -1)
    result "sanitizer $label" "FINDINGS or failure, rc=$src: $errors (see $log)" failed
  fi
}

if command -v compute-sanitizer > /dev/null; then
  sanitize memcheck memcheck 90
  sanitize memcheck_row_passes memcheck 90 FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1
  sanitize racecheck racecheck 100
  sanitize synccheck synccheck 60
  sanitize initcheck initcheck 60 FLIP_LOSS_CUDA_BACKWARD_SCRATCH=200000
else
  result sanitizer "compute-sanitizer not installed (no verdict)"
fi

echo "== STEP benchmark"
timeout 120 $PY benchmarks/gpu_bench.py --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.md"
rc=${PIPESTATUS[0]}
if [ $rc -eq 0 ]; then result benchmark "ok (table above, $OUT/bench.md)"
else result benchmark "FAILED rc=$rc" failed
fi

echo
echo "== SUMMARY ($(( $(date +%s) - began )) s)"
printf '%s\n' "${summary[@]}"
exit $failed
