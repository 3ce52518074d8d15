#!/usr/bin/env bash
# Sets up (scripts/setup.sh, with Chromium for the browser tests of the HTML report) and runs every
# test: Python (pytest) and C++ (built with CMake and run from pytest, tests/test_cpp.py). CUDA tests
# skip cleanly without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-browser
echo "== running tests"
.venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"
