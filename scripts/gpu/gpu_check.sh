#!/usr/bin/env bash
# Checks flip-loss on a GPU machine from a fresh checkout and says which of its promises held. In
# order, the most decisive first: the GPUs; the build (for this machine's GPUs unless
# TORCH_CUDA_ARCH_LIST is set); the kernels against the CPU kernels on real images
# (scripts/gpu/smoke.py, then again through the row passes); compute-sanitizer's memcheck, racecheck
# and synccheck on a small case of every kernel (scripts/gpu/sanitize_case.py); the GPU benchmarks
# against the speed targets; the CUDA tests, the torch.compile ones last.
#
#   bash scripts/gpu/gpu_check.sh [--budget SECONDS] [--out DIR]   # DIR: build/gpu_check
#   bash scripts/gpu/gpu_check.sh --dry-run     # the plan and empty outputs; no GPU or torch needed
#
# PYTHON (default python3) is the interpreter with torch. --budget ends the run within SECONDS (say,
# under a CI job's timeout): a step is not started without its minimum left (SKIPPED: no time) and
# is stopped when the budget is spent; without it every step runs to its end. In DIR, rewritten
# after every step, so that a run stopped from outside leaves what it finished: SUMMARY.txt (a
# RESULT line per step; a PROMISE line per promise, CONFIRMED, BROKEN or NOT CHECKED; a PASS/MISS
# line per speed target), bench.json (the verdicts, the benchmarks' rows), bench.md, logs/<step>.log.
# Exit status 0: every step ran and passed; 1: one failed; 2: none failed, but not all ran (the
# budget, no compute-sanitizer). A missed speed target is reported, not a failure.
exec "${PYTHON:-python3}" "$(dirname "$0")/gpu_check.py" "$@"
