"""Builds the operator library behind torch.ops.flip.*: flip_loss._C (the ops' schemas and CPU
kernels; links no CUDA library, so it loads with a CPU-only torch too) and, with CUDA,
flip_loss._C_cuda (the CUDA kernels of the same ops; flip_loss imports it only with a CUDA torch).

Switches (environment variables):
  FLIP_LOSS_EXTENSION=0|1  0: install pure Python, without the compiled kernels (every device runs
                       the portable path, flip_loss/oracle.py); 1: the kernels, or an error.
                       Default: the kernels where they can be built (Linux, a C++ compiler, torch
                       >= 2.11), else pure Python, saying why in one line
  FLIP_LOSS_CUDA=0|1   build flip_loss._C_cuda, the CUDA kernels (default: 1 when nvcc and a CUDA
                       build of torch exist)
  TORCH_CUDA_ARCH_LIST GPU targets (default "7.5;8.0;8.6;9.0;10.0;12.0+PTX", flip_loss/cuda_arches.py;
                       a list without PTX gets PTX of its newest entry)
  FLIP_LOSS_NATIVE=0|1 compile everything for this machine's CPU (-march=native, default 0: a
                       portable binary whose CPU kernels pick AVX-512, AVX2 or baseline at run time)
  MAX_JOBS=N           parallel compile jobs (ninja)
  FLIP_LOSS_PREBUILT=1 install without building: the extension flip_loss/_C.*.so (and _C_cuda.*.so)
                       in this checkout was built already (scripts/setup.sh builds it in the
                       oldest-torch environment and installs the same checkout into .venv this way)
"""

import functools
import glob
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def package_module(name):
    """flip_loss/<name>.py on its own: the package cannot be imported before it is built (and its
    import would load torch). These modules import nothing of the package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_flip_{name}", os.path.join(ROOT, "flip_loss", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def environment():
    """The package's one reading of the FLIP_LOSS_* variables."""
    return package_module("environment")


def switch(name):
    """A FLIP_LOSS_* on/off variable: True, False, or None when unset (or empty); another value
    stops the build with a message naming it."""
    try:
        return environment().switch(name, None)
    except ValueError as exc:
        sys.exit(str(exc))


EXTENSION = switch("FLIP_LOSS_EXTENSION")


def torch_releases():
    """The supported torch releases."""
    return package_module("torch_releases")


def cuda_arches():
    """The GPU targets of a build."""
    return package_module("cuda_arches")


def missing_compiler():
    """The C++ compiler (CXX, else c++) or C compiler, which links (CC, else Python's), that is not
    there, as a user would name it; None when both are. One that is there but fails is not looked
    at: its build stops with its own error."""
    import shlex
    import shutil
    import sysconfig

    for variable, default in (("CXX", "c++"), ("CC", sysconfig.get_config_var("CC") or "cc")):
        command = os.environ.get(variable) or default
        try:
            program = shlex.split(command)[0]
        except (ValueError, IndexError):
            program = ""
        if not program or shutil.which(program) is None:
            return f"{variable}={command}" if variable in os.environ else program
    return None


def without_kernels():
    """Why this install is pure Python, without the compiled kernels; None to build them. With
    FLIP_LOSS_EXTENSION=1 a reason to go without stops the build instead."""
    if EXTENSION is False:
        return "FLIP_LOSS_EXTENSION=0"
    reason = torch_releases().kernels_unsupported_reason(torch.__version__)
    if reason is None and not sys.platform.startswith("linux"):
        reason = f"they are built and tested on Linux only, and this is {sys.platform}"
    if reason is None and missing_compiler() is not None:
        reason = f"no compiler: {missing_compiler()} is not found"
    if reason is not None and EXTENSION:
        sys.exit(f"flip-loss: FLIP_LOSS_EXTENSION=1, but the compiled kernels cannot be built: {reason}")
    return reason


if EXTENSION is not False:  # the kernels are compiled against the installed torch, so it needs one
    try:
        import torch
    except ImportError as exc:
        sys.exit(
            f"flip-loss: building the extension needs PyTorch, which could not be imported ({exc}).\n"
            "Install torch first (e.g. 'pip install torch'), then build against it without build "
            "isolation: 'pip install --no-build-isolation .' (see README, 'Install into your own "
            "environment'), or install without the compiled kernels: FLIP_LOSS_EXTENSION=0."
        )
    if torch_releases().unsupported_reason(torch.__version__):
        sys.exit(torch_releases().unsupported_reason(torch.__version__))
WITHOUT_KERNELS = without_kernels()
if WITHOUT_KERNELS is not None:
    print(
        f"flip-loss: installing without the compiled kernels ({WITHOUT_KERNELS}); every device will use "
        "the portable pure-PyTorch path (flip_loss.oracle). docs/install.md says what the kernels need.",
        file=sys.stderr,
    )
else:
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension


def sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def want_cuda():
    if WITHOUT_KERNELS is not None:
        return False
    flag = switch("FLIP_LOSS_CUDA")
    if flag is not None:
        return flag
    return CUDA_HOME is not None and torch.version.cuda is not None


# The extension is written against PyTorch's stable C++ ABI (torch/csrc/stable, torch/headeronly)
# and Python's limited API, so that one binary runs with every torch release from MIN_TORCH on and
# every CPython from 3.10 on. Two modules, so that one wheel serves CPU-only and CUDA builds of
# torch alike: _C holds the schemas and the CPU kernels and links only libc10 and libtorch_cpu
# (present in every torch); _C_cuda registers the CUDA kernels of the same ops and alone links
# libtorch_cuda and the CUDA runtime, which a CPU-only torch lacks. The ops' Autograd, Autocast
# and fake (Meta) kernels are registered from Python (flip_loss/op_registration.py): the stable
# ABI has no C++ counterpart for them. The
# LibTorch CMake package (CMakeLists.txt) compiles the same schema and kernels and keeps C++
# Autograd and Autocast kernels (csrc/ops/autograd.cpp, autocast.cpp).
cpp_sources = sources("csrc/flip/cpu/*.cpp") + [
    "csrc/ops/schema.cpp",
    "csrc/ops/cpu.cpp",
    "csrc/ops/python_module.cpp",
]
cuda_sources = ["csrc/ops/cuda.cpp", "csrc/ops/cuda_module.cpp"] + sources("csrc/flip/cuda/*.cu")
# -ffp-contract=off: vector and scalar loop paths must round alike, so that identical images give
# exactly zero error and the map is symmetric in its arguments.
# -fno-trapping-math (FP exception flags are never read here; no value changes) and, for GCC,
# -fno-tree-pre: what GCC needs to vectorise the per-pixel loops of the CPU kernels
# (csrc/flip/cpu/pipeline.h, docs/algorithm.md §7.13). Clang has no such switch (and rejects it).
# Also for GCC, -fschedule-insns -fsched-pressure: GCC's instruction scheduling before register
# allocation, off by default on x86. A vectorised per-pixel loop is one long block whose chains
# (two images, transcendentals) are independent; interleaving them hides their latency, which the
# out-of-order core alone cannot across such a block (benchmarks/RESULTS.md has the timings).
# Scheduling reorders independent instructions only, so every value keeps its bits.
# TORCH_TARGET_VERSION: the oldest torch the binary must load into (flip_loss/torch_releases.py's
# MIN_TORCH); the stable headers then use nothing newer.
cxx_flags = [
    "-O3",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fvisibility=hidden",
    "-ffp-contract=off",
    f"-DTORCH_TARGET_VERSION={torch_releases().target_version_macro()}",
]


def compiler_is_gcc():
    """Whether the C++ compiler torch will build with (CXX, else c++) is GCC."""
    import subprocess

    try:
        out = subprocess.run(
            [os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True, timeout=60
        ).stdout.lower()
    except (OSError, subprocess.SubprocessError):
        return False
    return "clang" not in out and ("gcc" in out or "g++" in out or "free software foundation" in out)


if compiler_is_gcc():
    cxx_flags += ["-fno-tree-pre", "-fschedule-insns", "-fsched-pressure"]
# On glibc Linux the binary asks for no glibc symbol newer than 2.28, so that a release wheel can be
# tagged manylinux_2_28 whatever glibc builds it (csrc/compat says which symbols and how; the
# nvcc-compiled code references none of them). csrc/compat comes first on the include path for
# its <sys/single_threaded.h>.
include_dirs = []
if sys.platform.startswith("linux"):
    include_dirs.append(os.path.join(ROOT, "csrc", "compat"))
    cxx_flags += ["-include", os.path.join(ROOT, "csrc", "compat", "glibc_2_28.h")]
# The CPU kernels are compiled for every x86-64 instruction-set level and picked at run time
# (csrc/flip/cpu/isa.h), so the default binary runs on any CPU at full speed. -march=native only
# on request: such a binary may crash with an illegal instruction on another machine.
if switch("FLIP_LOSS_NATIVE"):
    cxx_flags.append("-march=native")
link_flags = []

ext_modules = []
if WITHOUT_KERNELS is None:
    ext_modules.append(
        CppExtension(
            "flip_loss._C",
            cpp_sources,
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags},
            extra_link_args=link_flags,
            py_limited_api=True,
        )
    )
if want_cuda():
    # Every generation from Turing to Blackwell and PTX for later GPUs, whatever GPU the build machine
    # has (torch would build for that one alone); a list the user sets, with PTX of its newest entry.
    # TORCH_CUDA_ARCH_LIST=9.0 on an H200 builds quicker.
    os.environ["TORCH_CUDA_ARCH_LIST"] = cuda_arches().build_arch_list(os.environ.get("TORCH_CUDA_ARCH_LIST"))
    # -fmad=false: nvcc fuses no a * b + c of its own accord, so device code rounds every product
    # and sum as written, as the CPU kernels do (-ffp-contract=off above). nvcc's default would
    # fuse an operation of one image and not of the other (in HyAB's differences, for one), so
    # identical images would not give exactly 0 nor swapped ones the same map. The filter taps
    # are fused multiply-adds on purpose (FLIP_FMADD, csrc/flip/cuda/filter_sums.h); §9.2 of
    # docs/algorithm.md. --threads=0: the targets compiled side by side, one per core (about 0.3 GB
    # each); the same code.
    ext_modules.append(
        CUDAExtension(
            "flip_loss._C_cuda",
            cuda_sources,
            include_dirs=include_dirs,
            extra_compile_args={
                "cxx": cxx_flags + ["-DFLIP_WITH_CUDA", "-DUSE_CUDA"],
                "nvcc": ["-O3", "-lineinfo", "-fmad=false", "--threads=0", "-DFLIP_WITH_CUDA"],
            },
            extra_link_args=link_flags,
            py_limited_api=True,
        )
    )


class BuildExt(BuildExtension.with_options(use_ninja=True) if WITHOUT_KERNELS is None else object):
    """torch's build_ext; a build without CUDA also removes a _C_cuda left by an earlier CUDA build,
    in place and in the build directory a wheel is packed from, which would otherwise register stale
    CUDA kernels for the new schemas (or ship them in a CPU-only wheel)."""

    def run(self):
        if not want_cuda():
            folders = [os.path.join(self.build_lib, "flip_loss")]
            if self.inplace:
                folders.append(os.path.join(ROOT, "flip_loss"))
            for folder in folders:
                for stale in glob.glob(os.path.join(folder, "_C_cuda*.so")):
                    print(f"flip-loss: removing {stale} (this build has no CUDA kernels)")
                    os.remove(stale)
        super().run()


class BuildPy(build_py):
    """setuptools' build_py; an install without the compiled kernels also records why (read by
    flip_loss._ops, for its warning and flip_loss.info()) and drops a binary an earlier build left
    in the build directory, which the wheel would otherwise carry."""

    def run(self):
        super().run()
        if WITHOUT_KERNELS is None:
            return
        import json

        package = os.path.join(self.build_lib, "flip_loss")
        for stale in glob.glob(os.path.join(package, "_C*.so")) + glob.glob(os.path.join(package, "_C*.pyd")):
            os.remove(stale)
        with open(os.path.join(package, "_install.json"), "w", encoding="utf-8") as record:
            json.dump({"why": WITHOUT_KERNELS}, record)


def torch_requirement():
    """The binary uses only PyTorch's stable ABI, so it runs with every supported release
    (flip_loss/torch_releases.py), not only the one it was compiled against; without it, every
    release the portable path runs on."""
    return torch_releases().requirement(kernels=WITHOUT_KERNELS is None)


def prebuilt():
    if not switch("FLIP_LOSS_PREBUILT"):
        return False
    if not glob.glob(os.path.join(ROOT, "flip_loss", "_C.*so")):
        sys.exit("flip-loss: FLIP_LOSS_PREBUILT=1, but flip_loss/_C.*.so is not built in this checkout")
    return True


# Metadata lives in pyproject.toml; the version in flip_loss/__init__.py.
setup(
    ext_modules=[] if prebuilt() else ext_modules,
    cmdclass={"build_py": BuildPy} if WITHOUT_KERNELS else {"build_ext": BuildExt, "build_py": BuildPy},
    install_requires=[torch_requirement(), "numpy", "pillow"],
    # abi3: one wheel for every CPython from 3.10 on (the extension uses the limited API only).
    options={} if WITHOUT_KERNELS else {"bdist_wheel": {"py_limited_api": "cp310"}},
)
