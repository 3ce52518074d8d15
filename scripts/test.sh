#!/usr/bin/env bash
# Sets up (scripts/setup.sh, with Chromium for the browser tests of the HTML report and a second
# environment with the oldest supported torch) and runs every test: Python (pytest) and C++ (built
# with CMake and run from pytest, tests/test_cpp.py), once with the newest supported torch (.venv,
# the development pin) and once with the oldest (.venv-oldest-torch), both with the one extension
# binary, built against the oldest. What the tests compile against torch goes to one build tree per
# release (tests/build_dirs.py). CUDA tests skip cleanly without a GPU. Both runs always run; the
# exit status is non-zero when either failed. Each step prints the time since the start, and each
# run its slowest tests, so that a log shows where the time went.
set -euo pipefail
cd "$(dirname "$0")/.."
since_start() { echo "$((SECONDS / 60)) min $((SECONDS % 60)) s since the start"; }

bash scripts/setup.sh --with-browser --with-oldest-torch
echo "== set up ($(since_start))"
status=0
for env in .venv .venv-oldest-torch; do
  echo "== running tests with torch $("$env/bin/python" -c 'import torch; print(torch.__version__)') ($env)"
  "$env/bin/python" -m pytest tests -q -p no:cacheprovider --durations=15 "$@" || status=1
  echo "== done with $env ($(since_start))"
done
exit "$status"
