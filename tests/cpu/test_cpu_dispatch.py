"""Runtime CPU dispatch (csrc/flip/cpu/isa.h): one portable binary whose kernels run at the best
instruction-set level of the CPU, with bit-identical results at every level, and no wide-vector
instruction outside the level-specific code (which would crash older CPUs)."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from flip_loss import _C

LEVELS = ("baseline", "avx2", "avx512")

# Runs every CPU kernel on fixed inputs at the level named by FLIP_LOSS_CPU_CAPABILITY and saves
# the outputs and the level actually used.
_PROGRAM = r"""
import sys, torch, flip_loss
from flip_loss import _C
ops = torch.ops.flip
out = {"level": _C.cpu_capability()}
g = torch.Generator().manual_seed(7)
for dt in (torch.float32, torch.float64):
    t = torch.rand(2, 3, 37, 53, generator=g).to(dt).requires_grad_()
    r = torch.rand(2, 3, 37, 53, generator=g).to(dt).requires_grad_()
    m = ops.ldr_flip(t, r, 40.0, "srgb", 1e-15)
    gt, gr = torch.autograd.grad((m * torch.linspace(0, 1, m.numel(), dtype=dt).view_as(m)).sum(), (t, r))
    out[f"ldr_{dt}"], out[f"ldr_gt_{dt}"], out[f"ldr_gr_{dt}"] = m, gt, gr
    ht, hr = t.detach() * 4, r.detach() * 4
    ex = torch.tensor([[-2.0, -0.5, 1.0], [-1.0, 0.0, 1.5]], dtype=dt)
    counts = torch.tensor([3, 2])
    hm, emap, idx = ops.hdr_flip(ht, hr, ex, counts, 40.0, "aces", 1e-15)
    out[f"hdr_{dt}"], out[f"hdr_emap_{dt}"], out[f"hdr_idx_{dt}"] = hm, emap, idx
    out[f"hdr_grad_{dt}"] = ops.hdr_flip_backward(torch.ones_like(hm), ht, hr, ex, counts, idx, 40.0, "aces",
                                                  1e-15, [True, True])
    out[f"csf_{dt}"] = ops.csf_filter(t.detach() - 0.5, 40.0)
    out[f"hyab_{dt}"] = ops.hunt_hyab(t.detach(), r.detach(), 1e-15)
    out[f"feat_{dt}"] = ops.feature_difference(t.detach()[:, :1], r.detach()[:, :1], 40.0, 1e-15)
torch.save(out, sys.argv[1])
"""


def _run_at(level, path):
    env = dict(os.environ, FLIP_LOSS_CPU_CAPABILITY=level, OMP_NUM_THREADS="2")
    subprocess.run([sys.executable, "-c", _PROGRAM, str(path)], env=env, check=True, timeout=600)
    return torch.load(path)


def _rank(level):
    return LEVELS.index(level)


def test_capability_is_a_known_level():
    assert _C.cpu_capability() in LEVELS


@pytest.mark.slow
def test_every_level_computes_bit_identical_results(tmp_path):
    best = _C.cpu_capability()
    results = {level: _run_at(level, tmp_path / f"{level}.pt") for level in LEVELS}
    for level, res in results.items():
        # the variable can only lower the level, never raise it above what the CPU has
        assert res["level"] == LEVELS[min(_rank(level), _rank(best))]
    base = results["baseline"]
    for level in LEVELS[1:]:
        for key, value in results[level].items():
            if key == "level":
                continue
            pairs = zip(value, base[key]) if isinstance(value, (tuple, list)) else [(value, base[key])]
            for a, b in pairs:
                assert torch.equal(a, b), f"{key} differs between {level} and baseline"
    # the comparison means something: the outputs are not trivial
    assert base["ldr_torch.float32"].max() > 0.05 and base["ldr_gt_torch.float64"].abs().max() > 0


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
@pytest.mark.skipif(
    os.environ.get("FLIP_LOSS_NATIVE", "0") not in ("0", ""),
    reason="a -march=native build uses wide vectors everywhere on purpose",
)
def test_wide_vector_code_only_in_the_level_specific_kernels():
    """A function compiled for AVX2 or AVX-512 outside the flip_avx2/flip_avx512 namespaces (e.g. a
    standard-library template instantiated under the target pragma) could be the copy the linker
    keeps for every caller, and crash a CPU without those instructions."""
    dump = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", _C.__file__], capture_output=True, text=True, check=True
    ).stdout
    offenders, function, in_variant, wide_lines = set(), None, False, 0
    for line in dump.splitlines():
        if line.endswith(">:") and " <" in line:
            function = line.split(" <", 1)[1][:-2]
            in_variant = "flip_avx2::" in function or "flip_avx512::" in function
        elif function and ("%ymm" in line or "%zmm" in line):
            wide_lines += 1
            if not in_variant:
                offenders.add(function)
    assert not offenders, f"wide-vector instructions outside the level-specific kernels: {sorted(offenders)[:10]}"
    if sys.platform.startswith("linux") and os.uname().machine == "x86_64":
        assert wide_lines > 0  # the AVX2/AVX-512 variants are in the binary


def _functions(dump):
    """{demangled name: [instruction lines]} of an objdump -d -C listing."""
    functions, current = {}, None
    for line in dump.splitlines():
        if line.endswith(">:") and " <" in line:
            current = functions.setdefault(line.split(" <", 1)[1][:-2], [])
        elif current is not None and line.strip():
            current.append(line)
    return functions


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump (binutils) is not installed")
@pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"), reason="the x86-64 AVX2 kernels"
)
@pytest.mark.skipif(
    os.environ.get("FLIP_LOSS_NATIVE", "0") not in ("0", ""), reason="a -march=native build has no flip_avx2 namespace"
)
@pytest.mark.parametrize("level,register", [("avx2", "%ymm"), ("avx512", "%zmm"), ("baseline", "%xmm")])
def test_per_pixel_loops_are_vectorised(level, register):
    """The float per-pixel tails (docs/algorithm.md §7.13) only run fast when GCC vectorises them:
    each must hold packed double arithmetic on vector registers (the transcendentals, 4 lanes at a
    time with AVX2, 2 with the baseline's SSE2) and call no other kernel function (a call left in
    the loop keeps it scalar, as a load_pixel that was not inlined once did, and a colour constant
    `white(i)` in the baseline level another time). Checked in the disassembly of every level the
    binary has, whether or not this CPU runs it (the baseline had once regressed unseen)."""
    dump = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", "-C", _C.__file__], capture_output=True, text=True, check=True
    ).stdout
    functions = _functions(dump)
    ns = f"flip_{level}::flip::cpu::"
    wanted = [
        f"{ns}flip_row<float>(",
        f"{ns}flip_row_sensitivities<true, false, false, float>(",
        f"{ns}flip_row_sensitivities<true, true, false, float>(",
        f"{ns}flip_row_sensitivities<true, false, true, float>(",
        f"{ns}convert_row<float, float, {ns}(anonymous namespace)::LdrInput<float, true> >(",
        f"{ns}(anonymous namespace)::input_row_vjp<float, {ns}(anonymous namespace)::LdrSlope<float, true> >(",
    ]
    for key in wanted:
        bodies = [body for name, body in functions.items() if key in name]
        assert bodies, f"{key}...) is not in the library (inlined or renamed?)"
        body = [line for b in bodies for line in b]
        packed = sum(1 for line in body if ("mulpd" in line or "addpd" in line) and register in line)
        calls = [line for line in body if "call" in line and f"flip_{level}::" in line]
        assert packed >= 16, f"{key}...): {packed} packed double {register} operations; the loop is not vectorised"
        assert not calls, f"{key}...) calls kernel code in its loop: {calls[:3]}"
    # The 8-bit rows' loops (eight_bit_srgb.h): float only, a division and table reads per sample;
    # uint8 codes: table reads, or a division for linear input, then the opponent matrix.
    for key in (
        f"{ns}convert_row<float, float, {ns}EightBitSrgbInput<float> >(",
        f"{ns}convert_row<float, unsigned char, {ns}EightBitCodes<float, true> >(",
        f"{ns}convert_row<float, unsigned char, {ns}EightBitCodes<float, false> >(",
        f"{ns}(anonymous namespace)::input_row_vjp<float, {ns}EightBitSrgbSlope<float> >(",
    ):
        body = [line for name, b in functions.items() if key in name for line in b]
        assert body, f"{key}...) is not in the library (inlined or renamed?)"
        packed = sum(1 for line in body if ("mulps" in line or "divps" in line) and register in line)
        calls = [line for line in body if "call" in line and f"flip_{level}::" in line]
        assert packed >= 8, f"{key}...): {packed} packed float {register} operations; the loop is not vectorised"
        assert not calls, f"{key}...) calls kernel code in its loop: {calls[:3]}"
