#!/usr/bin/env bash
# The GPU machine's one command: build, correctness against the CPU, compute-sanitizer, speed and
# the CUDA tests on a fresh machine, inside one deadline, the most decisive facts first.
#
#   bash scripts/gpu/gpu_check.sh                         # on the GPU machine (one H200, 16 cores)
#   GPU_CHECK_DRY_RUN=1 bash scripts/gpu/gpu_check.sh     # anywhere: the plan and the outputs' skeleton
#
# Why it is built this way: the device tool runs one command of at most 600 s on a bare machine (so
# the build comes first, from scratch), returns at most 8 files from $OUT, and returns what is there
# even when the command is killed; there may be no second run.
#
# Time. One deadline, GPU_CHECK_DEADLINE_S seconds from the start (default 540, leaving the tool's
# 600 s some slack). Each step runs under `timeout` for the smaller of its own limit and the time
# left before the deadline, less GPU_CHECK_RESERVE_S (default 15) for the summary, less timeout's
# 5 s kill grace, and less the minimum (plus grace) of every decisive step still to come (build,
# smoke, smoke_rows, memcheck, racecheck, synccheck): however long the steps before them take, each
# decisive step is started with at least its minimum. A step with less than its minimum left is not
# started and reads "SKIPPED: no time". The limits add up to more than the deadline on purpose: what
# a fast step does not use goes to the steps after it, and no step can push the end past the deadline.
#
# Order, most decisive first (the last steps are the first lost). Step, own limit / minimum (s):
#   device           20 / 5    nvidia-smi, torch's view of the GPU
#   build           300 / 60   python setup.py build_ext --inplace (TORCH_CUDA_ARCH_LIST=9.0, MAX_JOBS=16)
#   smoke            60 / 20   scripts/gpu/smoke.py: the kernels against the CPU on real images (LDR and
#                              HDR, maps and gradients, float32 and float64; fused forward, tiled
#                              backward, kept sensitivities, autograd), identical images exactly 0,
#                              swapped images the same bits; bounds from flip_loss/gpu_agreement.py
#   smoke_rows       45 / 15   the same through the row passes (FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1)
#   memcheck         75 / 30   compute-sanitizer on scripts/gpu/sanitize_case.py (one small case of
#   racecheck        90 / 30   every kernel), PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that an out-of-bounds
#   synccheck        60 / 20   access is not hidden inside a larger cached block; memcheck with a
#                              200 KB tiled-backward scratch (several bands). When compute-sanitizer is
#                              missing or refuses the device (memcheck's log), the others are skipped
#   gpu_bench        90 / 20   benchmarks/gpu_bench.py --quick (LDR; oracle.py on the same GPU)
#   hdr_bench        60 / 15   benchmarks/hdr_bench.py --device cuda --quick (HDR, automatic exposures)
#   tests           150 / 30   tests/gpu/test_cuda.py, tests/gpu/test_cuda_graphs.py but the torch.compile
#                              tests, launches asynchronous as users run them (pytest-xdist and
#                              pytest-timeout, 60 s a test, where installed)
#   nan_scratch      60 / 20   their backward cases with FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1 and a
#                              200 KB tiled-backward scratch (many bands): a read of scratch no phase
#                              of its band wrote turns a gradient NaN
#   tests_compile   120 / 30   the torch.compile tests (a cold inductor cache: bounded, and last)
#   tests_blocking   60 / 15   only if tests failed and time is left: the failures again with
#                              CUDA_LAUNCH_BLOCKING=1, so an error names the launch that failed
# The decisive steps' limits with the device step fit the deadline with a build of up to 300 s and
# their minimums always do; the rest get what is left. A second run can leave out what the first
# settled: GPU_CHECK_SKIP="build smoke smoke_rows" (step names; "SKIPPED: GPU_CHECK_SKIP"). A step
# that needs the build is skipped ("SKIPPED: build failed") when the build failed or had no time.
#
# Outputs: 4 files directly under $OUT (default build/gpu_check), within the tool's 8:
#   SUMMARY.txt  one RESULT line per step; one PROMISE line per promise the run tests, CONFIRMED,
#                BROKEN or NOT CHECKED (the mapping table is PROMISES in scripts/gpu/summary.py);
#                one PASS/MISS line per speed target (the same block ends this script's output)
#   bench.json   the targets' verdicts and every row of both benchmarks
#   bench.md     both benchmarks' tables and the per-kernel profile
#   logs.tar.gz  every step's log (logs/<step>.log) and the plan
# SUMMARY.txt and logs.tar.gz are rewritten after every step, so a run killed from outside still
# leaves everything up to its last finished step. The logs themselves live in a temporary folder
# (printed first), not under $OUT, whose file count the tool limits.
#
# Dry run (GPU_CHECK_DRY_RUN=1): builds and runs nothing (no torch needed); prints one PLAN line per
# step with the seconds it would be given, assuming each step takes all of them plus the kill grace
# (a slow GPU; GPU_CHECK_DRY_RUN_TAKES=<s>: each step takes that long instead, if less), and writes
# the outputs' skeleton; GPU_CHECK_DRY_RUN_SNAPSHOTS=<folder> keeps a copy of SUMMARY.txt as written
# after each step there. tests/gpu/test_gpu_check_script.py runs it in CI.
#
# Environment: PYTHON (default python3), OUT, MAX_JOBS (16), TORCH_CUDA_ARCH_LIST (9.0),
# GPU_CHECK_DEADLINE_S, GPU_CHECK_RESERVE_S, GPU_CHECK_SKIP, GPU_CHECK_TEST_WORKERS (pytest-xdist
# workers, default 4; 0: one process), GPU_CHECK_DRY_RUN, GPU_CHECK_DRY_RUN_TAKES,
# GPU_CHECK_DRY_RUN_SNAPSHOTS.
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
SNAPSHOTS="${GPU_CHECK_DRY_RUN_SNAPSHOTS:-}"
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
RESULTS_FILE="$WORK/results.tsv"  # name, status (ok, failed, skipped), text: summary.py's promises
: > "$RESULTS_FILE"
TARGETS_FILE="$WORK/targets.txt"
CHECKPOINTS=0

# The decisive steps still to come, as "name:minimum": the time every other step is given leaves
# their minimums (and kill graces) free. A step leaves the list when it starts or is skipped.
PENDING=(build:60 smoke:20 smoke_rows:15 memcheck:30 racecheck:30 synccheck:20)
pending_drop() {  # pending_drop NAME...
  local keep=() e n
  for e in "${PENDING[@]}"; do
    for n in "$@"; do [ "${e%%:*}" = "$n" ] && continue 2; done
    keep+=("$e")
  done
  PENDING=("${keep[@]}")
}
reserved_after() {  # reserved_after NAME: the seconds the decisive steps after NAME keep
  local e sum=0
  for e in "${PENDING[@]}"; do
    [ "${e%%:*}" = "$1" ] && continue
    [[ "$SKIP" == *" ${e%%:*} "* ]] && continue
    sum=$(( sum + ${e##*:} + GRACE_S ))
  done
  echo "$sum"
}

elapsed() {
  if [ "$DRY" = 1 ]; then echo "$SIM_S"; else echo $(( $(date +%s) - START_S )); fi
}

# Writes SUMMARY.txt from the results so far (the promises they confirm or break, and the targets,
# once judged) and re-packs the logs; after every step, so that a run killed from outside still
# returns what it had.
checkpoint() {  # checkpoint [final]
  local state="partial: still running, or stopped from outside, after the steps below"
  [ "${1:-}" = final ] && state="final"
  [ "$DRY" = 1 ] && state="$state; DRY RUN: nothing was built or run"
  {
    echo "== SUMMARY ($state; $(elapsed) s of a $DEADLINE_S s deadline)"
    [ "${#RESULTS[@]}" -gt 0 ] && printf 'RESULT %s\n' "${RESULTS[@]}"
    echo "== PROMISES (what the results above confirm or break; table: PROMISES in scripts/gpu/summary.py)"
    "$PY" scripts/gpu/summary.py --promises --results "$RESULTS_FILE" --checks "$LOGS/smoke.log" \
      --checks "$LOGS/smoke_rows.log" --targets "$TARGETS_FILE" 2>&1 || echo "(scripts/gpu/summary.py failed)"
    echo "== TARGETS"
    if [ -s "$TARGETS_FILE" ]; then cat "$TARGETS_FILE"; else echo "(not judged yet)"; fi
  } > "$OUT/SUMMARY.txt.tmp" && mv "$OUT/SUMMARY.txt.tmp" "$OUT/SUMMARY.txt"
  tar -czf "$OUT/logs.tar.gz.tmp" -C "$WORK" logs 2> /dev/null && mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
  CHECKPOINTS=$((CHECKPOINTS + 1))
  if [ "$DRY" = 1 ] && [ -n "$SNAPSHOTS" ]; then
    mkdir -p "$SNAPSHOTS" && cp "$OUT/SUMMARY.txt" "$SNAPSHOTS/$(printf '%03d' "$CHECKPOINTS").txt"
  fi
}

result() {  # result NAME TEXT [failed|skipped|left-out]
  echo "RESULT $1: $2"
  RESULTS+=("$1: $2")
  local status="${3:-ok}"
  [ "$DRY" = 1 ] && [ "$status" = ok ] && status=planned  # a dry run confirms nothing
  printf '%s\t%s\t%s\n' "$1" "$status" "$2" >> "$RESULTS_FILE"
  case "${3:-}" in failed) FAILED=1;; skipped) SKIPPED=1;; esac
  checkpoint
}

# step NAME LIMIT MIN -- COMMAND...: runs COMMAND for min(LIMIT, time left) seconds, output in
# $LOGS/NAME.log. Sets GIVEN (0: not started), TOOK, and RC (124: timed out, 125: not started for
# lack of time, 126: left out by GPU_CHECK_SKIP).
step() {
  local name=$1 limit=$2 min=$3 at left reserved
  shift 4
  STEP_N=$((STEP_N + 1))
  at=$(elapsed)
  reserved=$(reserved_after "$name")
  pending_drop "$name"
  if [[ "$SKIP" == *" $name "* ]]; then
    echo "PLAN $STEP_N $name limit=$limit min=$min given=0 start=$at end=$at SKIPPED: GPU_CHECK_SKIP" | tee -a "$PLAN"
    GIVEN=0 TOOK=0 RC=126
    return
  fi
  left=$(( DEADLINE_S - at - RESERVE_S - GRACE_S - reserved ))
  GIVEN=$(( limit < left ? limit : left ))
  [ "$GIVEN" -lt "$min" ] && GIVEN=0
  if [ "$GIVEN" -eq 0 ]; then
    echo "PLAN $STEP_N $name limit=$limit min=$min given=0 start=$at end=$at SKIPPED: no time" | tee -a "$PLAN"
    TOOK=0 RC=125
    return
  fi
  local until=$(( at + GIVEN + GRACE_S ))
  echo "PLAN $STEP_N $name limit=$limit min=$min given=$GIVEN start=$at end=$until" | tee -a "$PLAN"
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
    126) result "$name" "SKIPPED: GPU_CHECK_SKIP" left-out;;  # asked for: no exit status 2
    *) result "$name" "FAILED (rc $RC, $TOOK s): $(last_line "$LOGS/$name.log") (logs/$name.log)" failed;;
  esac
}

plan_only() {  # plan_only NAME WHY: the PLAN line of a step not started, for a reason other than time
  STEP_N=$((STEP_N + 1))
  pending_drop "$1"
  echo "PLAN $STEP_N $1 limit=0 min=0 given=0 start=$(elapsed) end=$(elapsed) SKIPPED: $2" | tee -a "$PLAN"
}

needs_build() {  # needs_build NAME: true when the build succeeded, else records the skip
  [ "$BUILD_OK" = 1 ] && return 0
  plan_only "$1" "$NO_BUILD"
  result "$1" "SKIPPED: $NO_BUILD" skipped
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
judge_targets  # every target "not measured" until the benchmarks ran, so bench.json exists from the start
checkpoint

# ---- (0) device
step device 20 5 -- bash -c "nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm \
  --format=csv,noheader; \"$PY\" -c \"import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, \
  'devices', torch.cuda.device_count(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')\""
show "$LOGS/device.log" 4
verdict device "$( [ "$DRY" = 1 ] && echo planned \
  || echo "$(grep -m1 'NVIDIA' "$LOGS/device.log" | cut -c1-120); $(grep -m1 '^torch' "$LOGS/device.log")")"

# ---- (1) build
step build 300 60 -- "$PY" setup.py build_ext --inplace
# Left out by GPU_CHECK_SKIP: the extension is taken to be there already (smoke says if not).
if [ "$RC" -eq 125 ]; then BUILD_OK=0 NO_BUILD="no build (no time for it)"
elif [ "$RC" -ne 0 ] && [ "$RC" -ne 126 ]; then BUILD_OK=0; show "$LOGS/build.log" 40
fi
[ "$BUILD_OK" = 1 ] || pending_drop smoke smoke_rows memcheck racecheck synccheck
verdict build "$( [ "$DRY" = 1 ] && echo planned \
  || echo "ok (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST, MAX_JOBS=$MAX_JOBS)")"

# ---- (2) correctness against the CPU: one process per formulation (the row passes are chosen once
# per process), so an execution error that loses the CUDA context in one leaves the other to run.
smoke_verdict() {  # smoke_verdict NAME
  local log="$LOGS/$1.log" pass fail
  pass=$(grep -c '^CHECK [a-z_]* PASS ' "$log" 2> /dev/null)
  fail=$(grep -c '^CHECK [a-z_]* FAIL ' "$log" 2> /dev/null)
  if [ "$DRY" = 1 ]; then verdict "$1" planned
  elif [ "$RC" -eq 0 ]; then verdict "$1" "ok: $pass checks agree with the CPU"
  elif [ "$RC" -eq 124 ]; then
    result "$1" "TIMED OUT after $GIVEN s with $pass checks passed, $fail failed (logs/$1.log)" \
      "$([ "$fail" -gt 0 ] && echo failed || echo skipped)"
  else verdict "$1"
  fi
}
if needs_build smoke; then
  step smoke 60 20 -- "$PY" scripts/gpu/smoke.py
  show "$LOGS/smoke.log" 8
  grep '^CHECK [a-z_]* FAIL' "$LOGS/smoke.log" 2> /dev/null | head -20 | sed 's/^/    /'
  smoke_verdict smoke
fi
if needs_build smoke_rows; then
  step smoke_rows 45 15 -- env FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1 "$PY" scripts/gpu/smoke.py --rows
  show "$LOGS/smoke_rows.log" 4
  grep '^CHECK [a-z_]* FAIL' "$LOGS/smoke_rows.log" 2> /dev/null | head -20 | sed 's/^/    /'
  smoke_verdict smoke_rows
fi

# ---- (3) compute-sanitizer, one small case of every kernel
SANITIZE=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1)
SANITIZERS=(memcheck racecheck synccheck)
NO_SANITIZER=""
sanitize() {  # sanitize NAME LIMIT MIN [ENV=VALUE...]
  local name=$1 limit=$2 min=$3
  shift 3
  step "$name" "$limit" "$min" -- "${SANITIZE[@]}" "$@" compute-sanitizer --tool "$name" --error-exitcode 9 \
    "$PY" scripts/gpu/sanitize_case.py
  local log="$LOGS/$name.log" errors sections
  if [ "$DRY" = 1 ] || [ "$RC" -eq 125 ] || [ "$RC" -eq 126 ]; then verdict "$name" planned; return; fi
  grep -E "^sanitize_case:" "$log" | sed 's/^/    /'
  errors=$(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$log" | tail -1)
  sections=$(grep -c '^sanitize_case: .*: done' "$log")
  if grep -qiE 'device not supported|not supported on this|error 999|CUDA_ERROR_UNKNOWN' "$log" \
    && ! grep -q '^sanitize_case: done' "$log"; then
    # The tool, not the kernels: no verdict, and the other sanitizers would fail the same way.
    NO_SANITIZER="compute-sanitizer does not work on this machine ($name: $(grep -m1 -iE 'not supported|error 999|CUDA_ERROR_UNKNOWN' "$log" | cut -c1-120))"
    result "$name" "SKIPPED: $NO_SANITIZER (logs/$name.log)" skipped
  elif [ "$RC" -eq 0 ] && grep -q "^sanitize_case: done" "$log"; then
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
    # Whose kernels the findings name: flip's, or PyTorch's own (a finding there is not flip's).
    local ours
    ours=$(grep -cE '^=========[[:space:]]+at .*flip::' "$log")
    result "$name" "FINDINGS or failure (rc $RC): ${errors:-no ERROR SUMMARY line}, $ours stack lines in \
flip:: (logs/$name.log)" failed
  fi
}
if [ "$BUILD_OK" = 1 ] && [ "$DRY" != 1 ] && ! command -v compute-sanitizer > /dev/null; then
  NO_SANITIZER="compute-sanitizer is not installed"
fi
for name in "${SANITIZERS[@]}"; do
  if [ "$BUILD_OK" != 1 ]; then needs_build "$name"
  elif [ -n "$NO_SANITIZER" ]; then
    plan_only "$name" "$NO_SANITIZER"
    result "$name" "SKIPPED: $NO_SANITIZER" skipped
  else
    case $name in
      memcheck) sanitize memcheck 75 30 FLIP_LOSS_CUDA_BACKWARD_SCRATCH=200000;;
      racecheck) sanitize racecheck 90 30;;
      synccheck) sanitize synccheck 60 20;;
    esac
  fi
done

# ---- (4) speed (the JSON under $WORK; summary.py folds both into $OUT/bench.json)
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

# ---- (5) the CUDA tests, the torch.compile ones last (a cold inductor cache takes minutes)
pytest_cmd() {  # pytest_cmd CACHE_NAME: the pytest command line, its cache (--lf's record) apart
  PYTEST=("$PY" -m pytest tests/gpu/test_cuda.py tests/gpu/test_cuda_graphs.py -q -rfEs -o "cache_dir=$WORK/pytest_cache_$1")
}
PARALLEL=()
TIMEOUT=()
if [ "$DRY" != 1 ] && [ "$BUILD_OK" = 1 ]; then
  if [ "$WORKERS" -gt 0 ] && "$PY" -c "import xdist" 2> /dev/null; then PARALLEL=(-n "$WORKERS"); fi
  # One hung test then fails alone instead of taking the whole step's time.
  if "$PY" -c "import pytest_timeout" 2> /dev/null; then TIMEOUT=(--timeout 60); fi
fi
export TORCHINDUCTOR_CACHE_DIR="$WORK/inductor_cache"
tests_summary() {  # pytest's last line ("40 passed, 3 skipped in 61.20s")
  last_line "$LOGS/$1.log"
}
TESTS_RC=125
if needs_build tests; then
  pytest_cmd tests
  step tests 150 30 -- "${PYTEST[@]}" "${PARALLEL[@]}" "${TIMEOUT[@]}" -k "not compile"
  TESTS_RC=$RC
  show "$LOGS/tests.log" 20
  verdict tests "$( [ "$DRY" = 1 ] && echo planned || echo "ok: $(tests_summary tests)")"
fi
if needs_build nan_scratch; then
  pytest_cmd nan_scratch
  step nan_scratch 60 20 -- env FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1 FLIP_LOSS_CUDA_BACKWARD_SCRATCH=200000 \
    "${PYTEST[@]}" "${PARALLEL[@]}" "${TIMEOUT[@]}" -k "(backward or matches_cpu) and not compile"
  show "$LOGS/nan_scratch.log" 15
  verdict nan_scratch "$( [ "$DRY" = 1 ] && echo planned || echo "ok: $(tests_summary nan_scratch)")"
fi
if needs_build tests_compile; then
  pytest_cmd tests_compile
  step tests_compile 120 30 -- "${PYTEST[@]}" "${PARALLEL[@]}" -k compile
  show "$LOGS/tests_compile.log" 15
  verdict tests_compile "$( [ "$DRY" = 1 ] && echo planned || echo "ok: $(tests_summary tests_compile)")"
fi
# Only what failed in the tests step, again, one process, launches synchronous: the error names its
# launch. Last, and only with time left: nothing after it needs the time. (--lf reads pytest's record
# of the failures, written when the tests ended; after a timeout there is none.)
if [ "$BUILD_OK" != 1 ]; then needs_build tests_blocking
elif [ "$DRY" = 1 ] || [ "$TESTS_RC" -eq 1 ]; then
  pytest_cmd tests
  step tests_blocking 60 15 -- env CUDA_LAUNCH_BLOCKING=1 "${PYTEST[@]}" "${TIMEOUT[@]}" -k "not compile" --lf --lfnf none
  show "$LOGS/tests_blocking.log" 30
  if [ "$RC" -eq 125 ]; then result tests_blocking "SKIPPED: no time (the failures of tests were not rerun)"
  else verdict tests_blocking "$( [ "$DRY" = 1 ] && echo "planned (only if tests failed)" \
      || echo "the failures passed with CUDA_LAUNCH_BLOCKING=1: $(tests_summary tests_blocking)")"
  fi
elif [ "$TESTS_RC" -eq 0 ]; then
  plan_only tests_blocking "not needed (no test failed)"
  result tests_blocking "not needed (no test failed)"
else
  plan_only tests_blocking "not run (the tests did not run or finish: no record of which failed)"
  result tests_blocking "not run (the tests did not run or finish: no record of which failed)"
fi

# ---- summary
judge_targets
checkpoint final
echo
cat "$OUT/SUMMARY.txt"
[ "$FAILED" = 1 ] && exit 1
[ "$SKIPPED" = 1 ] && exit 2
exit 0
