#!/usr/bin/env bash
# The GPU machine's one command: build, smoke test, benchmarks, CUDA tests and compute-sanitizer on a
# fresh machine, inside one deadline, with the most important results first.
#
#   bash scripts/gpu/gpu_check.sh                         # on the GPU machine (one H200, 16 cores)
#   GPU_CHECK_DRY_RUN=1 bash scripts/gpu/gpu_check.sh     # anywhere: the plan and the outputs' skeleton
#
# Why it is built this way: the device tool runs one command of at most 600 s on a bare machine (so
# the build comes first, from scratch), returns at most 8 files from $OUT, and returns what is there
# even when the command is killed.
#
# Time. One deadline, GPU_CHECK_DEADLINE_S seconds from the start (default 540, leaving the tool's
# 600 s some slack). Each step runs under `timeout` for the smaller of its own limit and the time
# left before the deadline, less GPU_CHECK_RESERVE_S (default 15) for the summary and less
# timeout's 5 s kill grace; a step with less than its minimum left is not started and reads
# "SKIPPED: no time". The limits add up to more than the deadline on purpose: what a fast step does
# not use goes to the steps after it, and no step, however slow, can push the end past the deadline.
#
# Order, most important first (the last steps are the first lost). Step, own limit / minimum (s):
#   device           20 / 5    nvidia-smi, torch's view of the GPU
#   build           300 / 60   python setup.py build_ext --inplace (TORCH_CUDA_ARCH_LIST=9.0, MAX_JOBS=16)
#   smoke            45 / 10   scripts/gpu/smoke.py: the kernels load, run and agree with the CPU
#   gpu_bench        90 / 20   benchmarks/gpu_bench.py --quick (LDR; oracle.py on the same GPU)
#   hdr_bench        60 / 15   benchmarks/hdr_bench.py --device cuda --quick (HDR, automatic exposures)
#   tests           200 / 30   tests/test_cuda.py, tests/test_cuda_graphs.py, launches asynchronous
#                              as users run them (pytest-xdist / pytest-timeout where installed)
#   tests_blocking   90 / 15   only the tests that failed, again with CUDA_LAUNCH_BLOCKING=1, so an
#                              error names the launch that failed (skipped when none failed)
#   nan_scratch      90 / 20   the tests' backward cases with FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1 and
#                              a 200 KB tiled-backward scratch (many bands): a read of scratch no
#                              phase of its band wrote turns a gradient NaN
#   sanitizer_probe  45 / 10   compute-sanitizer --version and one tiny run; when either fails, every
#                              sanitizer step below is skipped with one line
#   memcheck        120 / 40   compute-sanitizer on scripts/gpu/sanitize_case.py, in this order of
#   racecheck       120 / 40   priority; PYTORCH_NO_CUDA_MEMORY_CACHING=1, so an out-of-bounds access
#   synccheck        90 / 40   is not hidden inside a larger cached block; initcheck with the 200 KB
#   initcheck        90 / 40   scratch (several bands; no NaN fill, which would count as a write);
#   memcheck_rows    90 / 40   the last, memcheck of the forced row passes
# The limits add up to 1450 s. With a build of about 150 s the steps up to the tests fit; the
# sanitizers get what is left, so a second run can leave out what the first one settled:
# GPU_CHECK_SKIP="gpu_bench hdr_bench tests nan_scratch" (step names; "SKIPPED: GPU_CHECK_SKIP").
# A step that needs the build is skipped ("SKIPPED: build failed") when the build failed or did not run.
#
# Outputs: 4 files directly under $OUT (default build/gpu_check), within the tool's 8:
#   SUMMARY.txt  one RESULT line per step, then one PASS/MISS line per speed target with its number
#                (scripts/gpu/summary.py; the same block ends this script's output)
#   bench.json   the targets' verdicts and every row of both benchmarks
#   bench.md     both benchmarks' tables and the per-kernel profile
#   logs.tar.gz  every step's log (logs/<step>.log) and the plan
# SUMMARY.txt and logs.tar.gz are rewritten after every step, so a run killed from outside still
# leaves everything up to its last finished step. The logs themselves live in a temporary folder
# (printed first), not under $OUT, whose file count the tool limits.
#
# Dry run (GPU_CHECK_DRY_RUN=1): builds and runs nothing (no torch needed); prints one PLAN line per
# step with the seconds it would be given, assuming each step takes all of them plus the kill grace
# (GPU_CHECK_DRY_RUN_TAKES=<s>: each step takes that long instead), and writes the outputs' skeleton.
# tests/test_gpu_check_script.py runs it in CI.
#
# Environment: PYTHON (default python3), OUT, MAX_JOBS (16), TORCH_CUDA_ARCH_LIST (9.0),
# GPU_CHECK_DEADLINE_S, GPU_CHECK_RESERVE_S, GPU_CHECK_SKIP, GPU_CHECK_TEST_WORKERS (pytest-xdist
# workers, default 4; 0: one process), GPU_CHECK_DRY_RUN, GPU_CHECK_DRY_RUN_TAKES.
# Exit status: 0 when every step ran and none failed, 1 when one failed, 2 when none failed but a
# step was skipped for lack of time. A missed speed target is reported, not a failure.
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT="${OUT:-build/gpu_check}"
PY="${PYTHON:-python3}"
DEADLINE_S="${GPU_CHECK_DEADLINE_S:-540}"
RESERVE_S="${GPU_CHECK_RESERVE_S:-15}"
GRACE_S=5
DRY="${GPU_CHECK_DRY_RUN:-0}"
DRY_TAKES="${GPU_CHECK_DRY_RUN_TAKES:-}"
WORKERS="${GPU_CHECK_TEST_WORKERS:-4}"
SKIP=" ${GPU_CHECK_SKIP:-} "
for v in DEADLINE_S RESERVE_S WORKERS ${DRY_TAKES:+DRY_TAKES}; do
  case ${!v} in ''|*[!0-9]*) echo "gpu_check: $v must be a whole number of seconds, not '${!v}'" >&2; exit 64;; esac
done
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" FLIP_LOSS_CUDA=1 MAX_JOBS="${MAX_JOBS:-16}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

mkdir -p "$OUT" || exit 1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX") || exit 1
LOGS="$WORK/logs"
mkdir -p "$LOGS"
PLAN="$LOGS/plan.log"
: > "$PLAN"
START_S=$(date +%s)
SIM_S=0              # the dry run's clock
STEP_N=0
FAILED=0
SKIPPED=0
BUILD_OK=1
NO_BUILD="build failed"
RESULTS=()
TARGETS_FILE="$WORK/targets.txt"

elapsed() {
  if [ "$DRY" = 1 ]; then echo "$SIM_S"; else echo $(( $(date +%s) - START_S )); fi
}

# Writes SUMMARY.txt from the results so far (and the targets, once judged) and re-packs the logs;
# after every step, so that a run killed from outside still returns what it had.
checkpoint() {  # checkpoint [final]
  local state="partial: still running, or stopped from outside, after the steps below"
  [ "${1:-}" = final ] && state="final"
  [ "$DRY" = 1 ] && state="$state; DRY RUN: nothing was built or run"
  {
    echo "== SUMMARY ($state; $(elapsed) s of a $DEADLINE_S s deadline)"
    printf 'RESULT %s\n' "${RESULTS[@]}"
    echo "== TARGETS"
    if [ -s "$TARGETS_FILE" ]; then cat "$TARGETS_FILE"; else echo "(not judged yet)"; fi
  } > "$OUT/SUMMARY.txt.tmp" && mv "$OUT/SUMMARY.txt.tmp" "$OUT/SUMMARY.txt"
  tar -czf "$OUT/logs.tar.gz.tmp" -C "$WORK" logs 2> /dev/null && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}

result() {  # result NAME TEXT [failed|skipped]
  echo "RESULT $1: $2"
  RESULTS+=("$1: $2")
  case "${3:-}" in failed) FAILED=1;; skipped) SKIPPED=1;; esac
  checkpoint
}

# step NAME LIMIT MIN -- COMMAND...: runs COMMAND for min(LIMIT, time left) seconds, output in
# $LOGS/NAME.log. Sets GIVEN (0: not started), TOOK, and RC (124: timed out, 125: not started for
# lack of time, 126: left out by GPU_CHECK_SKIP).
step() {
  local name=$1 limit=$2 min=$3 at left
  shift 4
  STEP_N=$((STEP_N + 1))
  at=$(elapsed)
  if [[ "$SKIP" == *" $name "* ]]; then
    echo "PLAN $STEP_N $name limit=$limit given=0 start=$at end=$at SKIPPED: GPU_CHECK_SKIP" | tee -a "$PLAN"
    GIVEN=0 TOOK=0 RC=126
    return
  fi
  left=$(( DEADLINE_S - at - RESERVE_S - GRACE_S ))
  GIVEN=$(( limit < left ? limit : left ))
  [ "$GIVEN" -lt "$min" ] && GIVEN=0
  if [ "$GIVEN" -eq 0 ]; then
    echo "PLAN $STEP_N $name limit=$limit given=0 start=$at end=$at SKIPPED: no time" | tee -a "$PLAN"
    TOOK=0 RC=125
    return
  fi
  local until=$(( at + GIVEN + GRACE_S ))
  echo "PLAN $STEP_N $name limit=$limit given=$GIVEN start=$at end=$until" | tee -a "$PLAN"
  echo "== STEP $name (given $GIVEN s of its $limit s; $at s into the $DEADLINE_S s deadline)"
  if [ "$DRY" = 1 ]; then
    TOOK=$(( GIVEN + GRACE_S ))
    [ -n "$DRY_TAKES" ] && [ "$DRY_TAKES" -lt "$GIVEN" ] && TOOK=$DRY_TAKES
    SIM_S=$(( SIM_S + TOOK ))
    echo "dry run, not run: $*" > "$LOGS/$name.log"
    RC=0
    return
  fi
  local t0
  t0=$(date +%s)
  timeout --kill-after="$GRACE_S" "$GIVEN" "$@" > "$LOGS/$name.log" 2>&1 < /dev/null
  RC=$?
  TOOK=$(( $(date +%s) - t0 ))
  [ "$RC" -eq 137 ] && RC=124  # still running after the grace: killed
}

last_line() {  # the last non-empty line of a log, for the summary
  grep -v '^[[:space:]]*$' "$1" 2> /dev/null | tail -1 | sed 's/^=* *//; s/ *=*$//' | cut -c1-200
}

# The usual reading of RC for step NAME; OK_TEXT replaces "ok" when given.
verdict() {  # verdict NAME [OK_TEXT]
  local name=$1
  case $RC in
    0) result "$name" "${2:-ok} ($TOOK s)";;
    124) result "$name" "TIMED OUT after $GIVEN s: $(last_line "$LOGS/$name.log") (logs/$name.log)" failed;;
    125) result "$name" "SKIPPED: no time" skipped;;
    126) result "$name" "SKIPPED: GPU_CHECK_SKIP";;
    *) result "$name" "FAILED (rc $RC, $TOOK s): $(last_line "$LOGS/$name.log") (logs/$name.log)" failed;;
  esac
}

plan_only() {  # plan_only NAME WHY: the PLAN line of a step not started, for a reason other than time
  STEP_N=$((STEP_N + 1))
  echo "PLAN $STEP_N $1 limit=0 given=0 start=$(elapsed) end=$(elapsed) SKIPPED: $2" | tee -a "$PLAN"
}

needs_build() {  # needs_build NAME: true when the build succeeded, else records the skip
  [ "$BUILD_OK" = 1 ] && return 0
  plan_only "$1" "$NO_BUILD"
  result "$1" "SKIPPED: $NO_BUILD"
  return 1
}

show() {  # show LOG [N]: the end of a log in this script's output (the tool returns its last 12 kB)
  [ "$DRY" = 1 ] && return
  tail -"${2:-15}" "$1" 2> /dev/null | sed 's/^/    /'
}

judge_targets() {  # the PASS/MISS lines, into $TARGETS_FILE and $OUT/bench.json
  "$PY" scripts/gpu/summary.py --gpu-bench "$WORK/gpu_bench.json" --hdr-bench "$WORK/hdr_bench.json" \
    --note "gpu_bench=${GPU_BENCH_NOTE:-not run}" --note "hdr_bench=${HDR_BENCH_NOTE:-not run}" \
    --json "$OUT/bench.json" > "$TARGETS_FILE" 2> "$LOGS/summary.log" \
    || echo "MISS every target: scripts/gpu/summary.py failed (logs/summary.log)" > "$TARGETS_FILE"
}

echo "gpu_check: deadline $DEADLINE_S s, reserve $RESERVE_S s; logs in $WORK/logs, outputs in $OUT" \
  "$([ "$DRY" = 1 ] && echo '(DRY RUN)')"
rm -f "$OUT/SUMMARY.txt" "$OUT/bench.json" "$OUT/bench.md" "$OUT/logs.tar.gz"
checkpoint

# ---- device
step device 20 5 -- bash -c "nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm \
  --format=csv,noheader; \"$PY\" -c \"import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
  'devices', torch.cuda.device_count(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')\""
show "$LOGS/device.log" 4
verdict device "$( [ "$DRY" = 1 ] && echo planned \
  || echo "$(grep -m1 'NVIDIA' "$LOGS/device.log" | cut -c1-120); $(grep -m1 '^torch' "$LOGS/device.log")")"

# ---- build
step build 300 60 -- "$PY" setup.py build_ext --inplace
# Left out by GPU_CHECK_SKIP: the extension is taken to be there already (smoke says if not).
if [ "$RC" -eq 125 ]; then BUILD_OK=0 NO_BUILD="no build (no time for it)"
elif [ "$RC" -ne 0 ] && [ "$RC" -ne 126 ]; then BUILD_OK=0; show "$LOGS/build.log" 40
fi
verdict build "$( [ "$DRY" = 1 ] && echo planned \
  || echo "ok (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST, MAX_JOBS=$MAX_JOBS)")"

# ---- smoke
if needs_build smoke; then
  step smoke 45 10 -- "$PY" scripts/gpu/smoke.py
  show "$LOGS/smoke.log" 12
  verdict smoke "$( [ "$DRY" = 1 ] && echo planned \
    || echo "ok: $(grep -c ': ok (' "$LOGS/smoke.log") checks agree with the CPU")"
fi

# ---- benchmarks (the JSON under $WORK; summary.py folds both into $OUT/bench.json)
rm -f "$WORK/gpu_bench.json" "$WORK/hdr_bench.json"
if needs_build gpu_bench; then
  step gpu_bench 90 20 -- "$PY" benchmarks/gpu_bench.py --quick --json "$WORK/gpu_bench.json"
  show "$LOGS/gpu_bench.log" 10
  verdict gpu_bench "$( [ "$DRY" = 1 ] && echo planned || echo ok)"
  GPU_BENCH_NOTE="${RESULTS[-1]#gpu_bench: }"
else GPU_BENCH_NOTE="SKIPPED: $NO_BUILD"
fi
if needs_build hdr_bench; then
  step hdr_bench 60 15 -- "$PY" benchmarks/hdr_bench.py --device cuda --quick --json "$WORK/hdr_bench.json"
  show "$LOGS/hdr_bench.log" 10
  verdict hdr_bench "$( [ "$DRY" = 1 ] && echo planned || echo ok)"
  HDR_BENCH_NOTE="${RESULTS[-1]#hdr_bench: }"
else HDR_BENCH_NOTE="SKIPPED: $NO_BUILD"
fi
{ echo "# benchmarks/gpu_bench.py --quick"; echo; cat "$LOGS/gpu_bench.log" 2> /dev/null; echo
  echo "# benchmarks/hdr_bench.py --device cuda --quick"; echo; cat "$LOGS/hdr_bench.log" 2> /dev/null
} > "$OUT/bench.md"
judge_targets
cat "$TARGETS_FILE"
checkpoint

# ---- CUDA tests
PYTEST=("$PY" -m pytest tests/test_cuda.py tests/test_cuda_graphs.py -q -rfEs -o "cache_dir=$WORK/pytest_cache")
PARALLEL=()
if [ "$DRY" != 1 ] && [ "$BUILD_OK" = 1 ]; then
  if [ "$WORKERS" -gt 0 ] && "$PY" -c "import xdist" 2> /dev/null; then PARALLEL=(-n "$WORKERS"); fi
  # One hung test then fails alone instead of taking the whole step's time.
  if "$PY" -c "import pytest_timeout" 2> /dev/null; then PYTEST+=(--timeout 150); fi
fi
tests_summary() {  # pytest's last line ("40 passed, 3 skipped in 61.20s")
  last_line "$LOGS/$1.log"
}
if needs_build tests; then
  step tests 200 30 -- "${PYTEST[@]}" "${PARALLEL[@]}"
  show "$LOGS/tests.log" 20
  TESTS_RC=$RC
  verdict tests "$( [ "$DRY" = 1 ] && echo planned || echo "ok: $(tests_summary tests)")"
  # Only what failed, again, one process, launches synchronous: the error names its launch. (--lf
  # reads pytest's record of the failures, written when the first run ended; after a timeout there
  # is none, and nothing is rerun.)
  if [ "$TESTS_RC" -eq 125 ] || [ "$TESTS_RC" -eq 126 ]; then
    plan_only tests_blocking "not needed (the tests were skipped)"
    result tests_blocking "not needed (the tests were skipped)"
  elif [ "$DRY" = 1 ] || [ "$TESTS_RC" -eq 1 ]; then
    step tests_blocking 90 15 -- env CUDA_LAUNCH_BLOCKING=1 "${PYTEST[@]}" --lf --lfnf none
    show "$LOGS/tests_blocking.log" 30
    verdict tests_blocking "$( [ "$DRY" = 1 ] && echo "planned (only if tests failed)" \
      || echo "the failures passed with CUDA_LAUNCH_BLOCKING=1: $(tests_summary tests_blocking)")"
  elif [ "$TESTS_RC" -eq 0 ]; then
    plan_only tests_blocking "not needed (no test failed)"
    result tests_blocking "not needed (no test failed)"
  else
    plan_only tests_blocking "not run (the tests did not finish: no record of which failed)"
    result tests_blocking "not run (the tests did not finish: no record of which failed)"
  fi
else
  needs_build tests_blocking
fi

# ---- the backward with NaN-filled scratch, in many bands
if needs_build nan_scratch; then
  step nan_scratch 90 20 -- env FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1 FLIP_LOSS_CUDA_BACKWARD_SCRATCH=200000 \
    "${PYTEST[@]}" "${PARALLEL[@]}" -k "backward or matches_cpu"
  show "$LOGS/nan_scratch.log" 15
  verdict nan_scratch "$( [ "$DRY" = 1 ] && echo planned || echo "ok: $(tests_summary nan_scratch)")"
fi

# ---- compute-sanitizer
SANITIZE=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1)
sanitize() {  # sanitize NAME TOOL LIMIT [ENV=VALUE...]
  local name=$1 tool=$2 limit=$3
  shift 3
  step "$name" "$limit" 40 -- "${SANITIZE[@]}" "$@" compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "$PY" scripts/gpu/sanitize_case.py
  local log="$LOGS/$name.log" errors sections
  if [ "$DRY" = 1 ] || [ "$RC" -eq 125 ] || [ "$RC" -eq 126 ]; then verdict "$name" planned; return; fi
  grep -E "^sanitize_case:" "$log" | sed 's/^/    /'
  errors=$(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$log" | tail -1)
  sections=$(grep -c '^sanitize_case: .*: done' "$log")
  if [ "$RC" -eq 0 ] && grep -q "^sanitize_case: done" "$log"; then
    result "$name" "clean, $sections sections ($TOOK s; ${errors:-no ERROR SUMMARY line})"
  elif [ "$RC" -eq 124 ]; then
    # Cut by its time (often the deadline's share, not its own limit): no verdict, unless it had
    # already reported something.
    local found
    found=$(grep -cE '^========= (Invalid|Race|Barrier|Uninitialized|Program hit)' "$log")
    result "$name" "TIMED OUT after $GIVEN s with $sections sections done, $found findings so far \
(logs/$name.log)" "$([ "$found" -gt 0 ] && echo failed || echo skipped)"
  else
    show "$log" 8
    result "$name" "FINDINGS or failure (rc $RC): ${errors:-no ERROR SUMMARY line} (logs/$name.log)" failed
  fi
}

PROBE_OK=0
if needs_build sanitizer_probe; then
  step sanitizer_probe 45 10 -- bash -c "compute-sanitizer --version && ${SANITIZE[*]} compute-sanitizer \
    --tool memcheck --error-exitcode 9 \"$PY\" -c \"import torch; x = torch.arange(64., device='cuda'); \
print('probe:', (x * 2).sum().item())\""
  show "$LOGS/sanitizer_probe.log" 6
  if [ "$DRY" = 1 ] || [ "$RC" -eq 126 ]; then
    verdict sanitizer_probe planned
    PROBE_OK=1
  elif [ "$RC" -eq 0 ] && grep -q '^probe: ' "$LOGS/sanitizer_probe.log"; then
    verdict sanitizer_probe "ok: $(grep -m1 -io 'version [0-9.]*' "$LOGS/sanitizer_probe.log" || echo runs)"
    PROBE_OK=1
  else
    PROBE_OK=0
    if ! command -v compute-sanitizer > /dev/null; then why="compute-sanitizer is not installed"
    elif grep -qi "not supported" "$LOGS/sanitizer_probe.log"; then why="compute-sanitizer does not support this device"
    elif [ "$RC" -eq 124 ]; then why="the probe timed out after $GIVEN s"
    elif [ "$RC" -eq 125 ]; then why="no time for the probe"
    else why="the probe failed (rc $RC): $(last_line "$LOGS/sanitizer_probe.log")"
    fi
    # One line for all five, and not a failure of the kernels: no verdict either way.
    result sanitizers "all SKIPPED: $why (logs/sanitizer_probe.log)" skipped
  fi
fi
SANITIZERS=(memcheck racecheck synccheck initcheck memcheck_rows)
if [ "$BUILD_OK" = 1 ] && [ "$PROBE_OK" = 1 ]; then
  sanitize memcheck memcheck 120
  sanitize racecheck racecheck 120
  sanitize synccheck synccheck 90
  sanitize initcheck initcheck 90 FLIP_LOSS_CUDA_BACKWARD_SCRATCH=200000
  sanitize memcheck_rows memcheck 90 FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1
else
  for name in "${SANITIZERS[@]}"; do
    plan_only "$name" "$([ "$BUILD_OK" = 1 ] && echo "no sanitizer (see sanitizers)" || echo "$NO_BUILD")"
  done
fi

# ---- summary
judge_targets
checkpoint final
echo
cat "$OUT/SUMMARY.txt"
[ "$FAILED" = 1 ] && exit 1
[ "$SKIPPED" = 1 ] && exit 2
exit 0
