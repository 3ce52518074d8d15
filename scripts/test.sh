#!/usr/bin/env bash
# Sets up (scripts/setup.sh, with Chromium for the browser tests of the HTML report and a second
# environment with the oldest supported torch) and runs every test: Python (pytest) and C++ (built
# with CMake and run from pytest, tests/test_cpp.py), once with the newest supported torch (.venv,
# the development pin) and once with the oldest (.venv-oldest-torch), both with the one extension
# binary, built against the oldest. CUDA tests skip cleanly without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with-browser --with-oldest-torch
echo "== running tests with torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
.venv/bin/python -m pytest tests -q -p no:cacheprovider "$@"
echo "== running tests with torch $(.venv-oldest-torch/bin/python -c 'import torch; print(torch.__version__)')"
# Its own build directories for what the tests compile against torch (the C++ programs).
FLIP_LOSS_CPP_BUILD_DIR=build/cpp-oldest-torch .venv-oldest-torch/bin/python -m pytest tests -q -p no:cacheprovider "$@"
