"""The NVIDIA GPU generations flip_loss._C_cuda is built for, stated once: setup.py's default
TORCH_CUDA_ARCH_LIST (setup.py loads this file on its own, before the package can be imported),
the CMake package's and the README's copies (tests/tooling/test_one_source.py), the check of a
built module's targets (tests/gpu/test_cuda_targets.py), the emulator's per-generation runs and
the SASS report. It imports nothing but the standard library.

A cubin built for sm_XY runs on compute capability X.Z for every Z >= Y and never on another
major; the driver compiles PTX for any later GPU. So one SASS target per group of GPUs that share
code: sm_75 (T4, RTX 20), sm_80 (A100), sm_86 (RTX 30; RTX 40, L4 and L40 run it), sm_90
(H100/H200), sm_100 (B200; sm_103 runs it), sm_120 (RTX 50, RTX PRO; sm_121 runs it), and PTX of
the newest for GPUs that come later. CUDA 13's nvcc targets nothing older than sm_75."""

import re

SASS_ARCHES = ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
PTX_ARCH = SASS_ARCHES[-1]

# The most shared memory a block can have (with the opt-in the kernels make), bytes, by compute
# capability (NVIDIA's CUDA programming guide): what decides the launch plan (tiled or row passes,
# csrc/flip/cuda/launch_params.h) on each generation.
SHARED_MEMORY_PER_BLOCK = {
    "7.5": 64 * 1024,
    "8.0": 163 * 1024,
    "8.6": 99 * 1024,
    "8.9": 99 * 1024,
    "9.0": 227 * 1024,
    "10.0": 227 * 1024,
    "10.3": 227 * 1024,
    "12.0": 99 * 1024,
    "12.1": 99 * 1024,
}

_PLAIN = re.compile(r"\d+\.\d+")
_ENTRY = re.compile(r"\d+\.\d+[af]?(\+PTX)?")


def capability(arch: str) -> tuple:
    """(major, minor) of "8.6", "12.0" or "9.0a"."""
    major, minor = arch.split("+")[0].split(".")
    return int(major), int(re.match(r"\d+", minor).group())


def default_arch_list() -> str:
    """The default TORCH_CUDA_ARCH_LIST: every SASS target, the newest with its PTX."""
    return ";".join(a + "+PTX" if a == PTX_ARCH else a for a in SASS_ARCHES)


def build_arch_list(requested=None) -> str:
    """TORCH_CUDA_ARCH_LIST for a build: the default when none is set; a list of numbers without PTX
    gets PTX of its newest plain entry (arch-specific ones such as 9.0a have no PTX a later GPU can
    use). A list that asks for PTX, names generations ("Ampere") or says "native" is left to torch,
    which adds PTX to those itself."""
    if requested is None or not requested.strip():
        return default_arch_list()
    entries = [e for e in re.split(r"[;\s]+", requested.strip()) if e]
    if not all(_ENTRY.fullmatch(e) for e in entries) or any(e.endswith("+PTX") for e in entries):
        return requested
    plain = [e for e in entries if _PLAIN.fullmatch(e)]
    if not plain:
        return requested
    newest = max(plain, key=capability)
    return ";".join(e + "+PTX" if e == newest else e for e in dict.fromkeys(entries))


def cmake_architectures() -> str:
    """The default as CMake's CUDA_ARCHITECTURES: "-real" is SASS only, a plain number SASS and PTX."""
    return ";".join(a.replace(".", "") + ("" if a == PTX_ARCH else "-real") for a in SASS_ARCHES)


def runs_on(device: tuple, sass=SASS_ARCHES, ptx=(PTX_ARCH,)):
    """What of a build runs on a GPU of compute capability `device` ((major, minor)): "sm_86" (the
    SASS the driver picks: the newest of the device's major not above it), "compute_120" (PTX the
    driver compiles), or None."""
    same_major = [capability(a) for a in sass if capability(a)[0] == device[0] and capability(a) <= tuple(device)]
    if same_major:
        return "sm_%d%d" % max(same_major)
    older = [capability(a) for a in ptx if capability(a) <= tuple(device)]
    return "compute_%d%d" % max(older) if older else None
