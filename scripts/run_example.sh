#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job: the command-line evaluator on the bundled
# example pair, writing the magma error map to out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
.venv/bin/flip-loss --example --directory out "$@"
