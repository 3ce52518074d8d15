#!/usr/bin/env bash
# Sets up everything flip-loss needs on a fresh Debian/Ubuntu machine with Python >= 3.10:
# system build tools (apt-get, when missing), a virtual environment in .venv with the pinned
# Python packages, and the compiled extension flip_loss._C (built in place, editable install; with
# the CUDA kernels in flip_loss._C_cuda when nvcc and a CUDA torch are there).
#
#   FLIP_LOSS_CUDA=0|1   force the CUDA kernels off/on (default: on when nvcc and CUDA torch exist)
#   MAX_JOBS=N           parallel compile jobs (default 2)
#   --with-browser       also Chromium, for the HTML report's tests (tests/cli/test_report.py)
#   --with-aarch64       also the aarch64 cross compiler and qemu-user (tests/cpu/test_aarch64.py)
#   --with-clang         also clang (tests/cpu/test_clang.py)
#   --with-oldest-torch  also .venv-oldest-torch, with the oldest supported torch: the extension is
#                        built there and .venv uses the same binary (built on PyTorch's stable ABI,
#                        one binary serves every supported release); and ccache, with which the
#                        C++ tests' builds for the two releases share the CPU core's objects
#   --with-portable-floor-torch  also .venv-portable-floor, the oldest torch flip-loss runs on at
#                        all (pure Python there; tests/packaging/test_portable_floor.py)
#   --only-portable-floor-torch  that environment alone, nothing else
# scripts/test.sh passes those its tier needs; where a tool cannot be installed, the tests that
# need it skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."

with_browser=0
with_aarch64=0
with_clang=0
with_oldest_torch=0
with_portable_floor=0
only_portable_floor=0
for arg in "$@"; do
  case "$arg" in
    --with-browser) with_browser=1 ;;
    --with-aarch64) with_aarch64=1 ;;
    --with-clang) with_clang=1 ;;
    --with-oldest-torch) with_oldest_torch=1 ;;
    --with-portable-floor-torch) with_portable_floor=1 ;;
    --only-portable-floor-torch) only_portable_floor=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (known: --with-browser, --with-aarch64, --with-clang, --with-oldest-torch, --with-portable-floor-torch, --only-portable-floor-torch)" >&2; exit 2 ;;
  esac
done

# .venv-portable-floor (requirements-portable-floor.txt), pip run only when its pins, its Python or
# its packages changed (a stamp). torch 2.1 has wheels for CPython 3.8-3.11 only, and PyPI's brings
# 2.3 GB of CUDA libraries: minutes to create, seconds once it is there. scripts/test.sh's full tier
# creates it in the background (--only-portable-floor-torch), beside the tests.
setup_portable_floor() {
  local floor_py=.venv-portable-floor/bin/python stamp_file=.venv-portable-floor/.flip_loss_requirements_stamp
  if [ ! -x "$floor_py" ]; then
    local base=""
    for candidate in python3.11 python3.10 python3; do
      if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 11))'; then
        base="$candidate"; break
      fi
    done
    if [ -z "$base" ]; then
      echo "setup.sh: the portable floor's torch (requirements-portable-floor.txt) needs CPython 3.8-3.11, and none is on the PATH" >&2
      return 1
    fi
    echo "== creating .venv-portable-floor (with $base)"
    "$base" -m venv .venv-portable-floor
  fi
  floor_stamp() {
    { sha256sum requirements-portable-floor.txt; $floor_py --version; $floor_py -m pip freeze --all; } | sha256sum | cut -d' ' -f1
  }
  if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$(floor_stamp)" ]; then
    echo "== the portable floor's torch is installed in .venv-portable-floor"
    return 0
  fi
  echo "== installing the portable floor's torch (requirements-portable-floor.txt) in .venv-portable-floor"
  local started=$SECONDS
  rm -f "$stamp_file"
  $floor_py -m pip install -q -r requirements-portable-floor.txt
  floor_stamp > "$stamp_file"
  echo "== .venv-portable-floor ready ($((SECONDS - started)) s)"
}
if [ "$only_portable_floor" = 1 ]; then
  setup_portable_floor
  exit 0
fi

need_apt=()
command -v g++ >/dev/null || need_apt+=(g++)
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
python3 -c "import venv, ensurepip" 2>/dev/null || need_apt+=(python3-venv)
# stb_image / stb_image_write (header-only PNG I/O of the C++ examples, examples/cpp)
[ -f /usr/include/stb/stb_image.h ] || need_apt+=(libstb-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
# The tools only some tests need, each on its own (where one cannot be installed, e.g. Ubuntu's
# snap-only chromium, the tests that need it skip, saying why, instead of the set-up failing), in
# the background: apt downloads while pip does. Their output is printed before the build.
optional_apt=()
if [ "$with_browser" = 1 ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  optional_apt+=("chromium:the browser tests of tests/cli/test_report.py")
fi
if [ "$with_aarch64" = 1 ] && { ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64 >/dev/null; }; then
  optional_apt+=("g++-aarch64-linux-gnu qemu-user:tests/cpu/test_aarch64.py")
fi
if [ "$with_oldest_torch" = 1 ] && ! command -v ccache >/dev/null; then
  optional_apt+=("ccache:the C++ tests' build for a second torch release reusing the first's CPU core")
fi
if [ "$with_clang" = 1 ] && ! command -v clang++ >/dev/null; then
  optional_apt+=("clang:tests/cpu/test_clang.py")
fi
install_optional_tools() {
  local SUDO="" item
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq || true
  for item in "$@"; do
    echo "== installing ${item%%:*} (${item#*:})"
    local lean=(--no-install-recommends)
    [ "${item%%:*}" = chromium ] && lean=()  # its recommended fonts and libraries are what it draws with
    # shellcheck disable=SC2086  # the packages of one item, separated by spaces
    if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${lean[@]}" ${item%%:*}; then
      echo "setup.sh: warning: could not install ${item%%:*}; ${item#*:} will skip" >&2
    fi
  done
}
tools_log="$(mktemp)"
tools_pid=""
if [ ${#optional_apt[@]} -gt 0 ]; then
  install_optional_tools "${optional_apt[@]}" > "$tools_log" 2>&1 &
  tools_pid=$!
fi
wait_for_tools() {
  if [ -n "$tools_pid" ]; then
    wait "$tools_pid" || true
    tools_pid=""
    cat "$tools_log"
  fi
  rm -f "$tools_log"
}
trap wait_for_tools EXIT

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
PY=.venv/bin/python
# pip runs only when the pinned lists, the Python or the installed packages differ from what the
# last set-up left (a stamp in .venv, written at the end): a second run needs no package index and
# upgrades nothing. The editable flip-loss itself is left out (its line names the git commit).
requirements_stamp() {
  {
    sha256sum requirements.txt requirements-test.txt requirements-release.txt benchmarks/requirements-sass.txt
    $PY --version
    $PY -m pip freeze --all --exclude-editable
  } | sha256sum | cut -d' ' -f1
}
REQUIREMENTS_STAMP_FILE=.venv/.flip_loss_requirements_stamp
venv_pid=""
if [ -f "$REQUIREMENTS_STAMP_FILE" ] && [ "$(cat "$REQUIREMENTS_STAMP_FILE")" = "$(requirements_stamp)" ]; then
  echo "== pinned Python packages are installed (requirements-test.txt unchanged)"
else
  echo "== installing pinned Python packages (requirements-test.txt)"
  rm -f "$REQUIREMENTS_STAMP_FILE"
  install_venv_packages() { $PY -m pip install -q --upgrade pip && $PY -m pip install -q -r requirements-test.txt; }
  if [ "$with_oldest_torch" = 1 ]; then
    # Beside the oldest torch's environment, which the build waits for: two installs unpack on two
    # cores while both download.
    install_venv_packages &
    venv_pid=$!
  else
    install_venv_packages
  fi
fi
wait_for_venv() {
  if [ -n "$venv_pid" ]; then
    local pid=$venv_pid
    venv_pid=""
    wait "$pid" || { echo "setup.sh: installing requirements-test.txt in .venv failed" >&2; exit 1; }
  fi
}

# What the installed torch and flip_loss say, from one Python process (each import of torch takes
# seconds): line 1 torch's version and CUDA (part of the stamp below), line 2 "ok" when
# flip_loss._C loads, line 3 the summary printed at the end (or why the extension is missing).
installed_state() {
  "$1" - <<'PYEOF'
import torch
print(torch.__version__, torch.version.cuda)
try:
    import flip_loss
except Exception as exc:  # an extension built for another torch, or a broken install
    print("missing")
    print(f"flip_loss does not import: {exc}")
    raise SystemExit(0)
print("ok" if flip_loss.HAS_EXTENSION else "missing")
if not flip_loss.HAS_EXTENSION:
    print(flip_loss._ops.IMPORT_ERROR)
    raise SystemExit(0)
if "cuda" in flip_loss._ops.KERNEL_DEVICES["ldr_flip"]:
    kernels = "compiled, " + ("a GPU is available" if torch.cuda.is_available() else "no GPU on this machine")
elif flip_loss._ops.CUDA_IMPORT_ERROR is not None:
    kernels = f"not loaded: {flip_loss._ops.CUDA_IMPORT_ERROR}"
else:
    kernels = "not compiled (CPU kernels only)"
print("flip_loss", flip_loss.__version__, "| torch", torch.__version__, "| CUDA kernels:", kernels)
PYEOF
}

if [ "$with_portable_floor" = 1 ]; then setup_portable_floor; fi

# The build's Python: the oldest-torch environment's when there is one.
BUILD_PY=$PY
if [ "$with_oldest_torch" = 1 ]; then
  if [ ! -x .venv-oldest-torch/bin/python ]; then
    echo "== creating .venv-oldest-torch"
    python3 -m venv .venv-oldest-torch
  fi
  OLD_PY=.venv-oldest-torch/bin/python
  OLD_STAMP_FILE=.venv-oldest-torch/.flip_loss_requirements_stamp
  old_requirements_stamp() {
    { sha256sum requirements-oldest-torch.txt; PY=$OLD_PY requirements_stamp; } | sha256sum | cut -d' ' -f1
  }
fi
if [ "$with_oldest_torch" = 1 ] && [ -f "$OLD_STAMP_FILE" ] && [ "$(cat "$OLD_STAMP_FILE")" = "$(old_requirements_stamp)" ]; then
  echo "== the oldest supported torch and the test packages are installed in .venv-oldest-torch"
  BUILD_PY=$OLD_PY
elif [ "$with_oldest_torch" = 1 ]; then
  echo "== installing the oldest supported torch (requirements-oldest-torch.txt) and the test packages there"
  rm -f "$OLD_STAMP_FILE"
  $OLD_PY -m pip install -q --upgrade pip
  $OLD_PY -m pip install -q -r requirements-oldest-torch.txt
  # requirements-test.txt and what it includes, without their torch pin (the constraint holds torch
  # where it is for packages that depend on it).
  $OLD_PY - requirements-test.txt > .venv-oldest-torch/requirements-without-torch.txt <<'PYEOF'
import os, re, sys
def lines(path):
    for line in open(path):
        line = line.strip()
        if line.startswith("-r "):
            yield from lines(os.path.join(os.path.dirname(path), line[3:].strip()))
        elif line and not line.startswith("#") and re.split(r"[<>=!~ ;\[]", line)[0].lower() != "torch":
            yield line
print("\n".join(lines(sys.argv[1])))
PYEOF
  $OLD_PY -m pip install -q -r .venv-oldest-torch/requirements-without-torch.txt -c requirements-oldest-torch.txt
  BUILD_PY=$OLD_PY
elif [ -x .venv-oldest-torch/bin/python ]; then
  # Set up by an earlier run with the option: the extension stays built against the oldest torch
  # (building it against .venv's would only make the next test run rebuild it).
  BUILD_PY=.venv-oldest-torch/bin/python
fi

# The extension is rebuilt only when something it is built from changed: its sources, the build
# files, the installed torch, the compiler or a build switch. The stamp is a hash of all of them,
# kept in .venv; a missing or unloadable extension is rebuilt whatever the stamp says.
build_stamp() {
  {
    find csrc -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.inc' \) \
      -print0 | sort -z | xargs -0 sha256sum
    sha256sum setup.py pyproject.toml flip_loss/tone_mappers.inc  # the tone mappers' rows, which csrc includes
    echo "$1"
    "${CXX:-c++}" --version 2>/dev/null | head -n 1
    command -v nvcc >/dev/null && nvcc --version | tail -n 1
    echo "FLIP_LOSS_CUDA=${FLIP_LOSS_CUDA:-} FLIP_LOSS_NATIVE=${FLIP_LOSS_NATIVE:-} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-}"
  } | sha256sum | cut -d' ' -f1
}
STAMP_FILE=.venv/.flip_loss_build_stamp
wait_for_venv
state="$(installed_state "$PY")"
build_state="$state"
if [ "$BUILD_PY" != "$PY" ]; then build_state="$(installed_state "$BUILD_PY")"; fi
stamp="$(build_stamp "$(sed -n 1p <<<"$build_state")")"
if [ -f "$STAMP_FILE" ] && [ "$(cat "$STAMP_FILE")" = "$stamp" ] && [ "$(sed -n 2p <<<"$state")" = ok ] \
   && [ "$(sed -n 2p <<<"$build_state")" = ok ]; then
  echo "== flip_loss._C is up to date (nothing it is built from changed)"
else
  echo "== building flip_loss._C (against torch $(sed -n 1p <<<"$build_state" | cut -d' ' -f1))"
  export MAX_JOBS="${MAX_JOBS:-2}"
  rm -f "$STAMP_FILE"
  # A per-Python binary from an older build would be imported before the abi3 one (Python tries
  # the .cpython-3XX suffix first); a CUDA module from an earlier build must not outlive a build
  # without one.
  rm -f flip_loss/_C.cpython-*.so flip_loss/_C_cuda.*so
  $BUILD_PY -m pip install -q --no-build-isolation --no-deps -e .
  if [ "$BUILD_PY" != "$PY" ]; then
    # The same checkout, installed in .venv too, with the binary just built (no second build).
    FLIP_LOSS_PREBUILT=1 $PY -m pip install -q --no-build-isolation --no-deps -e .
  fi
  echo "$stamp" > "$STAMP_FILE"
  state="$(installed_state "$PY")"
  build_state="$state"
  if [ "$BUILD_PY" != "$PY" ]; then build_state="$(installed_state "$BUILD_PY")"; fi
fi
requirements_stamp > "$REQUIREMENTS_STAMP_FILE"
if [ "$(sed -n 2p <<<"$state")" != ok ]; then
  echo "setup.sh: flip_loss._C does not load after the build: $(sed -n '3,$p' <<<"$state")" >&2
  exit 1
fi
sed -n 3p <<<"$state"
if [ "$BUILD_PY" != "$PY" ]; then
  if [ "$with_oldest_torch" = 1 ]; then old_requirements_stamp > "$OLD_STAMP_FILE"; fi
  if [ "$(sed -n 2p <<<"$build_state")" != ok ]; then
    echo "setup.sh: flip_loss._C does not load in .venv-oldest-torch: $(sed -n '3,$p' <<<"$build_state")" >&2
    exit 1
  fi
  echo "$(sed -n 3p <<<"$build_state") (.venv-oldest-torch, the oldest supported torch)"
fi
wait_for_tools
