"""The GPU generations a build carries code for (flip_loss/cuda_arches.py): the default list torch's
extension builder turns into SASS for sm_75, sm_80, sm_86, sm_90, sm_100 and sm_120 and PTX of
compute_120; a list the user sets, with PTX added; which of that code each generation's GPUs run;
and the built flip_loss._C_cuda itself, read with cuobjdump, holding every target its build was
asked for. No GPU needed."""

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from flip_loss import cuda_arches

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from sass_report import find_tool  # noqa: E402


def gencode(arch_list, monkeypatch):
    """The -gencode flags torch's extension builder gives nvcc for TORCH_CUDA_ARCH_LIST=arch_list."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", arch_list)
    return set(cpp_extension._get_cuda_arch_flags())


def test_the_default_build_has_sass_for_every_generation_and_ptx_of_the_newest(monkeypatch):
    sass = {"75", "80", "86", "90", "100", "120"}
    want = {f"-gencode=arch=compute_{a},code=sm_{a}" for a in sass} | {"-gencode=arch=compute_120,code=compute_120"}
    assert gencode(cuda_arches.build_arch_list(None), monkeypatch) == want
    assert cuda_arches.build_arch_list("") == cuda_arches.build_arch_list("  ") == cuda_arches.default_arch_list()


@pytest.mark.parametrize(
    "asked, built, ptx",
    [
        ("9.0", "9.0+PTX", "90"),
        ("8.6 9.0", "8.6;9.0+PTX", "90"),
        ("12.0;7.5", "12.0+PTX;7.5", "120"),
        ("8.6+PTX", "8.6+PTX", "86"),  # PTX asked for already
        ("9.0a", "9.0a", None),  # arch-specific code: no PTX that another GPU could run
        ("9.0a;8.0", "9.0a;8.0+PTX", "80"),
        ("Ampere", "Ampere", "86"),  # torch expands the names, with PTX
    ],
)
def test_a_list_the_user_sets_is_kept_with_ptx_of_its_newest_entry(asked, built, ptx, monkeypatch):
    assert cuda_arches.build_arch_list(asked) == built
    ptx_flags = {f for f in gencode(built, monkeypatch) if re.search(r"code=compute_", f)}
    assert ptx_flags == ({f"-gencode=arch=compute_{ptx},code=compute_{ptx}"} if ptx else set())
    # "native": torch builds for the GPUs it sees, the newest with PTX.
    assert cuda_arches.build_arch_list("native") == "native"


@pytest.mark.parametrize(
    "device, code",
    [
        ((7, 5), "sm_75"),  # T4, RTX 20
        ((8, 0), "sm_80"),  # A100
        ((8, 6), "sm_86"),  # RTX 30
        ((8, 9), "sm_86"),  # RTX 40, L4, L40
        ((9, 0), "sm_90"),  # H100, H200
        ((10, 0), "sm_100"),  # B200
        ((10, 3), "sm_100"),
        ((12, 0), "sm_120"),  # RTX 50, RTX PRO Blackwell
        ((12, 1), "sm_120"),  # DGX Spark
        ((13, 0), "compute_120"),  # a later GPU: the driver compiles the PTX
        ((7, 0), None),  # Volta: CUDA 13 targets nothing before Turing
        ((11, 0), None),  # Jetson Thor: its own major, older than the PTX
    ],
)
def test_which_code_each_generation_runs(device, code):
    assert cuda_arches.runs_on(device) == code
    if code is not None and code.startswith("sm_"):
        assert cuda_arches.SHARED_MEMORY_PER_BLOCK[f"{device[0]}.{device[1]}"] >= 64 * 1024


def asked_targets():
    """(SASS, PTX) capabilities the build of this checkout was asked for (TORCH_CUDA_ARCH_LIST as
    setup.py resolves it), or None where the list is torch's to expand (names, "native") or names
    arch-specific targets ("9.0a")."""
    built = cuda_arches.build_arch_list(os.environ.get("TORCH_CUDA_ARCH_LIST"))
    entries = [e for e in re.split(r"[;\s]+", built) if e]
    if not all(re.fullmatch(r"\d+\.\d+(\+PTX)?", e) for e in entries):
        return None
    sass = {e.split("+")[0].replace(".", "") for e in entries}
    ptx = {e.split("+")[0].replace(".", "") for e in entries if e.endswith("+PTX")}
    return sass, ptx


def test_the_built_cuda_module_holds_every_promised_target():
    """cuobjdump lists the cubins (ELF) and PTX in the module's fat binary; each target the build was
    asked for must be there, or a GPU of that generation gets no kernel image."""
    modules = glob.glob(str(ROOT / "flip_loss" / "_C_cuda*.so"))
    if not modules:
        pytest.skip("flip_loss._C_cuda is not built here (FLIP_LOSS_CUDA=0, or no nvcc)")
    targets = asked_targets()
    if targets is None:
        pytest.skip(f"TORCH_CUDA_ARCH_LIST={os.environ['TORCH_CUDA_ARCH_LIST']} is not a list of numbers")
    cuobjdump = find_tool("cuobjdump")
    if cuobjdump is None:
        pytest.skip("no cuobjdump (pip install -r benchmarks/requirements-sass.txt)")
    (module,) = modules
    listing = subprocess.run(
        [cuobjdump, "--list-elf", "--list-ptx", module], capture_output=True, text=True, check=True
    ).stdout
    elf = set(re.findall(r"^ELF file\s+\d+: \S+\.sm_(\w+)\.cubin$", listing, re.M))
    ptx = set(re.findall(r"^PTX file\s+\d+: \S+\.sm_(\w+)\.ptx$", listing, re.M))
    sass, want_ptx = targets
    assert elf >= sass, f"{module} lacks SASS for sm_{', sm_'.join(sorted(sass - elf))}:\n{listing}"
    assert ptx >= want_ptx, f"{module} lacks PTX of compute_{', compute_'.join(sorted(want_ptx - ptx))}:\n{listing}"


def test_the_built_cuda_module_names_the_targets_it_was_compiled_for():
    """flip_loss._C_cuda.architectures(), what the run-time check names when a GPU cannot run the
    build: every target asked for (nvcc's __CUDA_ARCH_LIST__, one virtual architecture each)."""
    from flip_loss import _ops

    if _ops._C_cuda is None:
        pytest.skip("flip_loss._C_cuda is not built or not loaded here")
    targets = asked_targets()
    if targets is None:
        pytest.skip(f"TORCH_CUDA_ARCH_LIST={os.environ['TORCH_CUDA_ARCH_LIST']} is not a list of numbers")
    listed = {int(a) for a in _ops._C_cuda.architectures().split(",")}
    assert listed == {int(a) * 10 for a in targets[0]}, _ops._C_cuda.architectures()
