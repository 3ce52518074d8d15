"""Builds flip_loss._C, the operator library behind torch.ops.flip.*.

Switches (environment variables):
  FLIP_LOSS_CUDA=0|1   build the CUDA kernels (default: 1 when nvcc and a CUDA build of torch exist)
  TORCH_CUDA_ARCH_LIST GPU targets (default "8.0;8.6;9.0")
  FLIP_LOSS_NATIVE=0|1 tune the CPU kernels for this machine's CPU (-march=native, default 1);
                       set 0 when building a binary for other machines
  MAX_JOBS=N           parallel compile jobs (ninja)
"""
import glob
import os

from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def want_cuda():
    import torch

    flag = os.environ.get("FLIP_LOSS_CUDA")
    if flag is not None:
        return flag not in ("0", "", "false", "off", "no")
    return CUDA_HOME is not None and torch.version.cuda is not None


cpp_sources = sources("csrc/flip/cpu/*.cpp") + [
    "csrc/ops/schema.cpp", "csrc/ops/cpu.cpp", "csrc/ops/autograd.cpp", "csrc/ops/meta.cpp",
    "csrc/ops/autocast.cpp", "csrc/ops/emulation.cpp", "csrc/ops/python_module.cpp",
]
cuda_sources = ["csrc/ops/cuda.cpp"] + sources("csrc/flip/cuda/*.cu")
# -fopenmp: at::parallel_for is inline and runs serially unless the extension itself is built with
# OpenMP (PyTorch's CPU backend is OpenMP).
# -ffp-contract=off: vector and scalar loop paths must round alike, so that identical images give
# exactly zero error and the map is symmetric in its arguments.
cxx_flags = ["-O3", "-fno-math-errno", "-fvisibility=hidden", "-fopenmp", "-ffp-contract=off"]
if os.environ.get("FLIP_LOSS_NATIVE", "1") not in ("0", "false", "off", "no"):
    cxx_flags.append("-march=native")
link_flags = ["-fopenmp"]

if want_cuda():
    # Without a GPU to detect, build for the common data-centre and desktop targets (A100/RTX 30xx,
    # H100/H200); set TORCH_CUDA_ARCH_LIST=9.0 on an H200 for a quicker build.
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;8.6;9.0")
    ext = CUDAExtension(
        "flip_loss._C", cpp_sources + cuda_sources,
        extra_compile_args={"cxx": cxx_flags + ["-DFLIP_WITH_CUDA"],
                            "nvcc": ["-O3", "-lineinfo", "-DFLIP_WITH_CUDA"]},
        extra_link_args=link_flags)
else:
    ext = CppExtension("flip_loss._C", cpp_sources, extra_compile_args={"cxx": cxx_flags},
                       extra_link_args=link_flags)

setup(
    name="flip-loss",
    version="0.1.0",
    description="Fast, differentiable FLIP (LDR/HDR) image-difference loss for PyTorch, in C++ and CUDA",
    packages=find_packages(include=["flip_loss", "flip_loss.*"]),
    package_data={"flip_loss": ["data/*.png", "data/*.md"],
                  "flip_loss.psychophysics": ["data/*"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    entry_points={"console_scripts": ["flip-loss=flip_loss.cli:main"]},
    python_requires=">=3.10",
    install_requires=["torch", "numpy", "pillow", "matplotlib", "tqdm", "openexr"],
)
