#!/usr/bin/env bash
# Sets up (scripts/setup.sh, with Chromium for the browser tests of the HTML report and a second
# environment with the oldest supported torch) and runs the tests: Python (pytest) and C++ (built
# with CMake and run from pytest, tests/packaging/test_cpp.py). CUDA tests skip cleanly without a GPU.
#
#   bash scripts/test.sh [--tier full|fast|release] [pytest arguments...]
#
#   full     (default; .ci/run) every test with the newest supported torch (.venv, the development
#            pin; in three runs) and, at the same time, the torch_release tier with the oldest
#            (.venv-oldest-torch): what can differ between releases (tests/helpers/tiers.py). They
#            use the one extension binary, built against the oldest. Beside them,
#            tests/packaging/test_portable_floor.py with the oldest torch the package runs on at all
#            (.venv-portable-floor, set up beside the main set-up: pure Python, the portable path).
#   fast     every test not marked slow, with the newest torch only (the edit-test loop)
#   release  the torch_release tier with both torches
#
# What the tests compile against torch goes to one build tree per release (tests/helpers/build_dirs.py).
# Every run of the tier runs; the exit status is non-zero when any failed. Each step prints the time
# since the start, each run its slowest tests, and the end a table of the runs and their times.
set -euo pipefail
cd "$(dirname "$0")/.."
since_start() { echo "$((SECONDS / 60)) min $((SECONDS % 60)) s since the start"; }

tier=full
if [ "${1:-}" = "--tier" ]; then
  tier="${2:-}"
  shift 2 || { echo "test.sh: --tier needs a value: full, fast or release" >&2; exit 2; }
elif [[ "${1:-}" == --tier=* ]]; then
  tier="${1#--tier=}"
  shift
fi
# A run: "environment:marks[:test paths]" (paths default: tests).
case "$tier" in
  # The full tier's every test with the newest torch in three runs side by side (the folders that
  # build and install, and the rest in two), so that both cores work while a run links or waits
  # and no run is left alone at the end.
  full) runs=(".venv::tests --ignore=tests/packaging --ignore=tests/cpu --ignore=tests/api --ignore=tests/gpu"
              ".venv::tests/api tests/gpu"
              ".venv::tests/packaging tests/cpu" ".venv-oldest-torch:torch_release"
              ".venv-portable-floor::tests/packaging/test_portable_floor.py") ;;
  fast) runs=(".venv:not slow") ;;
  release) runs=(".venv:torch_release" ".venv-oldest-torch:torch_release") ;;
  *) echo "test.sh: unknown tier '$tier' (known: full, fast, release)" >&2; exit 2 ;;
esac
setup_args=(--with-browser)
[ "$tier" != fast ] && setup_args+=(--with-oldest-torch)
[ "$tier" = full ] && setup_args+=(--with-aarch64 --with-clang)

logs="$(mktemp -d)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$logs"' EXIT
if [ "$tier" = full ]; then
  # The portable floor's environment downloads (2.3 GB; minutes on a fresh machine, seconds once
  # there) beside the set-up; bounded, so that a stalled download cannot hold the tier.
  { timeout 900 bash scripts/setup.sh --only-portable-floor-torch > "$logs/floor-setup.log" 2>&1; echo $? > "$logs/floor-setup.rc"; } &
  pids+=("$!")
fi
bash scripts/setup.sh "${setup_args[@]}"
echo "== set up ($(since_start))"
summary=("set-up: ${SECONDS} s")

# One pytest run: the environment, the marks selecting its tests, and where its status and time
# go (a file, so that a run in the background can report them).
run_tests() {
  local env="$1" marks="$2" report="$3" paths="${4:-tests}" select=() started=$SECONDS release result=passed
  [ -n "$marks" ] && select=(-m "$marks")
  if [ "$env" = .venv-portable-floor ]; then
    while [ ! -f "$logs/floor-setup.rc" ]; do sleep 2; done
    cat "$logs/floor-setup.log"
    # Once more if it failed: the main set-up may have installed what it lacked (python3-venv).
    if [ "$(cat "$logs/floor-setup.rc")" != 0 ] && ! timeout 900 bash scripts/setup.sh --only-portable-floor-torch; then
      echo "$env: set-up FAILED after $((SECONDS - started)) s" > "$report"
      return
    fi
    export FLIP_LOSS_KERNELS_PYTHON="${FLIP_LOSS_KERNELS_PYTHON:-.venv/bin/python}"  # the kernels' values to compare with
  fi
  release="$("$env/bin/python" -c 'import torch; print(torch.__version__)')"
  echo "== running tests with torch $release ($env)${marks:+, tests marked: $marks}"
  # shellcheck disable=SC2086  # paths: one or more, separated by spaces
  "$env/bin/python" -m pytest $paths -q -p no:cacheprovider --durations=15 "${select[@]}" "${pytest_args[@]}" \
    || result=FAILED
  echo "torch $release, ${marks:-every test}${4:+ of $paths}: $((SECONDS - started)) s, $result" > "$report"
  echo "== done with $env ($(since_start))"
}

# The first run has the terminal; the others run at the same time, each into its own log, printed
# when the first is done. The 2-core machine is otherwise half idle while a single pytest process
# runs Python, starts subprocesses or links, so the tier takes little longer than its largest run.
pytest_args=("$@")
# Runs side by side share the two cores: a parallel region whose second thread waits for a core
# costs a scheduler slice (tens of ms) on every torch op, far more than the op on a test's small
# images. One thread each (the tests of thread counts set their own); a caller's setting stays.
if [ "${#runs[@]}" -gt 1 ]; then export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; fi
run_fields() {  # the run's environment, marks and paths, one per line
  local run="$1"
  echo "${run%%:*}"
  run="${run#*:}"
  echo "${run%%:*}"
  [[ "$run" == *:* ]] && echo "${run#*:}" || echo ""
}
for i in "${!runs[@]}"; do
  [ "$i" = 0 ] && continue
  mapfile -t fields < <(run_fields "${runs[$i]}")
  run_tests "${fields[0]}" "${fields[1]}" "$logs/$i.status" "${fields[2]}" > "$logs/$i.log" 2>&1 &
  pids+=("$!")
  echo "== started the run with ${runs[$i]%%:*} in the background (its output follows the first run's)"
done
mapfile -t fields < <(run_fields "${runs[0]}")
run_tests "${fields[0]}" "${fields[1]}" "$logs/0.status" "${fields[2]}"
for pid in "${pids[@]}"; do wait "$pid" || true; done
for i in "${!runs[@]}"; do
  [ "$i" = 0 ] && continue
  echo "== output of the run with ${runs[$i]%%:*}"
  cat "$logs/$i.log"
done
status=0
echo "== tier $tier: the runs and their times"
printf '   %s\n' "${summary[@]}"
for i in "${!runs[@]}"; do
  line="$(cat "$logs/$i.status" 2>/dev/null || echo "${runs[$i]%%:*}: no result (the run did not finish)")"
  [[ "$line" == *", passed" ]] || status=1
  echo "   $line"
done
echo "   in all: $((SECONDS / 60)) min $((SECONDS % 60)) s"
exit "$status"
