"""benchmarks/sass_report.py and sass_analysis.py: the disassembly's control flow and loops, the
counting of issued warp-instructions from trip counts, the unrolled-cascade rule, the occupancy
rules for H100/H200, and the check that a kernel's loops match the trip-count table. A synthetic
disassembly needs no tool; a compiled kernel with a known loop nest needs nvcc and nvdisasm
(pip install -r benchmarks/requirements-sass.txt) and skips without them."""

import collections
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import sass_analysis as sa  # noqa: E402
import sass_report as sr  # noqa: E402

# Two nested loops: the inner one (line 3) a single block of 4 instructions with one FFMA, the
# outer one (line 2) with an if/else of 3 and 1 instructions; an exit taken by some lanes only; an
# unreachable self-loop after the end, as nvdisasm prints after every function.
SYNTHETIC = """\
.text.synthetic:
\t//## File "{src}", line 1
        /*0000*/                   MOV R0, RZ ;
        /*0010*/                   MOV R5, RZ ;
.L_x_1:
\t//## File "{src}", line 2
        /*0020*/                   MOV R1, RZ ;
.L_x_0:
\t//## File "{src}", line 3
        /*0030*/                   FFMA R2, R3, R4, R2 ;
        /*0040*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0050*/                   ISETP.NE.AND P0, PT, R1, R6, PT ;
        /*0060*/               @P0 BRA `(.L_x_0) ;
\t//## File "{src}", line 4
        /*0070*/                   ISETP.GT.AND P1, PT, R2, RZ, PT ;
        /*0080*/              @!P1 BRA `(.L_x_2) ;
        /*0090*/                   FMUL R2, R2, 0.5 ;
        /*00a0*/                   FMUL R2, R2, 0.5 ;
        /*00b0*/                   BRA `(.L_x_3) ;
.L_x_2:
        /*00c0*/                   FADD R2, R2, 1 ;
.L_x_3:
\t//## File "{src}", line 2
        /*00d0*/                   IADD3 R0, R0, 0x1, RZ ;
        /*00e0*/                   ISETP.NE.AND P2, PT, R0, R7, PT ;
        /*00f0*/               @P2 BRA `(.L_x_1) ;
\t//## File "{src}", line 5
        /*0100*/               @P3 EXIT ;
        /*0110*/                   STG.E desc[UR4][R8.64], R2 ;
        /*0120*/                   EXIT ;
.L_x_4:
        /*0130*/                   BRA `(.L_x_4);
"""
SYNTHETIC_SOURCE = [
    "void synthetic() {",
    "  for (int r = 0; r < rows; ++r) {",
    "    for (int k = 0; k < n; ++k) acc += a * x[k];",
    "    acc = acc > 0 ? acc * 0.25f : acc + 1;",
    "  }",
]


def synthetic_cfg(tmp_path):
    src = tmp_path / "synthetic.cu"
    src.write_text("\n".join(SYNTHETIC_SOURCE) + "\n")
    fn = sa.parse_nvdisasm(SYNTHETIC.format(src=src))["synthetic"]
    return sa.Cfg(fn)


def test_loops_of_the_synthetic_disassembly(tmp_path):
    cfg = synthetic_cfg(tmp_path)
    assert cfg.problems == []
    assert len(cfg.fn.instructions) == 20
    # The self-loop after the last EXIT is not reachable, so it is not a loop of the kernel.
    assert len(cfg.loops) == 1
    outer = cfg.loops[0]
    assert len(outer.children) == 1 and outer.children[0].children == []
    inner = outer.children[0]
    assert inner.parent is outer and inner.blocks < outer.blocks
    assert cfg.latch_location(inner)[1] == 3 and cfg.latch_location(outer)[1] == 2
    assert cfg.size(inner.blocks) == 4 and cfg.fma_count(inner.blocks) == 1
    assert cfg.address(inner.header) == 0x30 and cfg.address(outer.header) == 0x20
    # The predicated EXIT falls through to the store.
    store = cfg.block_of[18]
    assert store in cfg.reachable


def test_heaviest_path_multiplies_trip_counts(tmp_path):
    cfg = synthetic_cfg(tmp_path)
    outer = cfg.loops[0]
    inner = outer.children[0]

    def cost(t_outer, t_inner):
        trips = {outer.header: t_outer, inner.header: t_inner}

        def loop_cost(lp):
            return trips[lp.header] * sa.heaviest_path(cfg, lp, size, loop_cost)

        return sa.heaviest_path(cfg, None, size, loop_cost)

    def size(b):
        return cfg.size([b])

    # Entry 2 + outer x (header 1 + inner x 4 + test 2 + the heavier branch 3 + latch 3) + exit 1 + 2.
    for t_outer, t_inner in ((1, 1), (3, 5), (7, 0), (0, 9)):
        assert cost(t_outer, t_inner) == 5 + t_outer * (9 + 4 * t_inner)


def test_report_matches_the_table_and_counts(tmp_path):
    cfg = synthetic_cfg(tmp_path)
    source = sr.Source()
    table = (
        sr.Expect(
            "rows",
            "r < rows; ++r",
            lambda c: 3,
            "three rows",
            children=(sr.Expect("taps", "k < n; ++k", lambda c: 5, "five taps"),),
        ),
    )
    total, a = sr.kernel_cost(cfg, None, table, source)
    assert a.problems == [] and total == 5 + 3 * (9 + 4 * 5)
    assert a.issued["rows/taps"] == 3 * 5 * 4
    # As an unrolled filter loop (one multiply-add per iteration) it runs its 5 iterations too.
    table = (
        sr.Expect(
            "rows",
            "r < rows; ++r",
            lambda c: 3,
            "three rows",
            children=(sr.Expect("taps", "k < n; ++k", lambda c: 5, "five taps", cascade=True),),
        ),
    )
    total, a = sr.kernel_cost(cfg, None, table, source)
    assert a.problems == [] and total == 5 + 3 * (9 + 4 * 5)


def test_report_refuses_a_table_that_no_longer_matches(tmp_path):
    cfg = synthetic_cfg(tmp_path)
    source = sr.Source()
    wrong_text = (
        sr.Expect(
            "rows", "r < rows; ++r", lambda c: 3, "", children=(sr.Expect("taps", "k < taps; ++k", lambda c: 5, ""),)
        ),
    )
    total, a = sr.kernel_cost(cfg, None, wrong_text, source)
    assert total is None and len(a.problems) == 1
    assert "k < taps; ++k" in a.problems[0] and "k < n; ++k" in a.problems[0]
    one_loop_too_many = (
        sr.Expect(
            "rows",
            "r < rows; ++r",
            lambda c: 3,
            "",
            children=(
                sr.Expect("taps", "k < n; ++k", lambda c: 5, ""),
                sr.Expect("more", "k < n; ++k", lambda c: 5, ""),
            ),
        ),
    )
    total, a = sr.kernel_cost(cfg, None, one_loop_too_many, source)
    assert total is None and a.problems
    # A table without the inner loop.
    total, a = sr.kernel_cost(cfg, None, (sr.Expect("rows", "r < rows; ++r", lambda c: 3, ""),), source)
    assert total is None and a.problems and a.problems[0].startswith("rows:")


def test_cascade_counts():
    plain = [("step", 1, 0), ("step", 1, 1), ("loop", 4, 0)]  # remainder before the loop by 4
    assert sa.cascade_counts(21, plain) == ([1, 0, 5], 0)
    assert sa.cascade_counts(19, plain) == ([1, 1, 4], 0)
    assert sa.cascade_counts(18, plain) == ([1, 1, 4], 0)
    assert sa.cascade_counts(3, plain) == ([1, 1, 0], 0)
    mirrored = [("loop", 16, 0), ("step", 8, 0), ("loop", 4, 0), ("step", 1, 0), ("step", 1, 1)]
    assert sa.cascade_counts(9, mirrored) == ([0, 1, 0, 1, 0], 0)
    assert sa.cascade_counts(10, mirrored) == ([0, 1, 0, 1, 1], 0)
    assert sa.cascade_counts(28, mirrored) == ([1, 1, 1, 0, 0], 0)
    assert sa.cascade_counts(32, mirrored) == ([2, 0, 0, 0, 0], 0)
    assert sa.cascade_counts(47, mirrored) == ([2, 1, 1, 1, 1], 0)
    assert sa.cascade_counts(19, [("loop", 4, 0)]) == ([4], 3)  # its remainder steps are missing


def test_occupancy_on_h200():
    # 256 threads, 48 registers, 88.75 KB of shared memory (the fused forward at ppd 67): 89.75 KB
    # with the reserved 1 KB, two fit in 228 KB; registers would allow 5 (1536 per warp, 10 warps per
    # quarter of the register file), warps 8.
    o = sa.occupancy(256, 48, 90880)
    assert o["smem_per_block_allocated"] == 91904
    assert o["limits"]["registers"] == 5 and o["limits"]["warps"] == 8 and o["limits"]["shared memory"] == 2
    assert (o["blocks_per_sm"], o["warps_per_sm"], o["occupancy"], o["limited_by"]) == (2, 16, 0.25, "shared memory")
    # 255 registers round up to 8192 per warp: 2 warps per quarter, 8 per SM, two blocks of 4 warps.
    o = sa.occupancy(128, 255, 0)
    assert (o["blocks_per_sm"], o["occupancy"], o["limited_by"]) == (2, 0.125, "registers")
    # 101 registers: 3328 per warp, 4 per quarter, 16 warps: two blocks of 8 warps.
    o = sa.occupancy(256, 101, 0)
    assert (o["blocks_per_sm"], o["occupancy"]) == (2, 0.25)
    # 1024 threads of 64 registers: 2048 per warp, 8 warps per quarter, 32 per SM: one block of 32
    # warps (the warp slots would take two).
    o = sa.occupancy(1024, 64, 0)
    assert (o["blocks_per_sm"], o["occupancy"], o["limited_by"]) == (1, 0.5, "registers")
    assert o["limits"]["warps"] == 2
    # 30 registers, 128 threads: 16 blocks fill all 64 warp slots, as many as the registers allow
    # (1024 per warp, 16 warps per quarter).
    o = sa.occupancy(128, 30, 0)
    assert (o["blocks_per_sm"], o["occupancy"], o["limited_by"]) == (16, 1.0, "warps, registers")
    # One-warp blocks stop at 32 blocks per SM.
    o = sa.occupancy(32, 16, 0)
    assert (o["blocks_per_sm"], o["occupancy"], o["limited_by"]) == (32, 0.5, "blocks")
    # More than the 227 KB a block may opt in to does not launch.
    assert sa.occupancy(256, 32, 227 * 1024 + 1)["blocks_per_sm"] == 0
    assert sa.occupancy(256, 32, 227 * 1024)["blocks_per_sm"] == 1


def test_occupancy_on_the_other_generations():
    t4, a100, rtx30, rtx40, b200, rtx50 = (sa.GENERATIONS[c] for c in ("7.5", "8.0", "8.6", "8.9", "10.0", "12.0"))
    # The fused forward at ppd 67 in float32 (256 threads, 95,040 B): sm_75's 64 KB per block refuse
    # it; the 99 KB generations fit one block (96,128 B with the reserved 1 KB, of 100 KB per SM),
    # the A100 one (of 164 KB) and the B200 two, as an H100.
    for limits, blocks in ((t4, 0), (a100, 1), (rtx30, 1), (rtx40, 1), (b200, 2), (rtx50, 1)):
        assert sa.occupancy(256, 64, 95_040, limits)["blocks_per_sm"] == blocks, limits.name
    # sm_75: 1024 threads per SM, so four 256-thread blocks at most, which 64 registers allow
    # (2048 per warp, 8 warps per quarter); shared memory in 256-byte units, no reserved share.
    o = sa.occupancy(256, 64, 10_000, t4)
    assert (o["blocks_per_sm"], o["occupancy"], o["limited_by"]) == (4, 1.0, "warps, registers")
    assert o["smem_per_block_allocated"] == 10_240
    # A kernel without shared memory has none reserved there either: no limit from it.
    o = sa.occupancy(128, 32, 0, t4)
    assert (o["smem_per_block_allocated"], o["limits"]["shared memory"], o["blocks_per_sm"]) == (0, 16, 8)
    # sm_86: 1536 threads (48 warps) and 16 blocks per SM, one barrier per block slot (a block with
    # a barrier: 16 too); sm_89 and sm_120: 24 blocks.
    o = sa.occupancy(32, 16, 0, rtx30)
    assert (o["blocks_per_sm"], o["occupancy"], o["limited_by"]) == (16, 16 / 48, "blocks, barriers")
    assert sa.occupancy(32, 16, 0, rtx40)["blocks_per_sm"] == sa.occupancy(32, 16, 0, rtx50)["blocks_per_sm"] == 24
    # Each generation's shared memory per block is flip_loss/cuda_arches.py's.
    from flip_loss import cuda_arches

    for capability, limits in sa.GENERATIONS.items():
        assert limits.smem_per_block_optin == cuda_arches.SHARED_MEMORY_PER_BLOCK[capability]
        assert limits.smem_per_block_optin + limits.smem_reserved_per_block <= limits.smem_per_sm


def test_warp_iterations_and_issue_rate():
    # 1872 = (16 + 20) x (32 + 20) pixels over 256 threads: warps 0-2 take 8 turns, 3-7 take 7.
    assert sa.warp_iterations(1872, 256, 256) == (3 * 8 + 5 * 7) / 8
    assert sa.warp_iterations(512, 256, 256) == 2.0
    assert sa.warp_iterations(100, 256, 256) == 4 / 8
    assert sa.issue_rate(132, 4, 1.98e9) == pytest.approx(1.04544e12)


# ---- the pipes ----------------------------------------------------------------------------------

PIPE_SNIPPET = """\
.text.pipes:
        /*0000*/                   LDS R0, [R1] ;
        /*0010*/                   LDS.U8 R2, [R1+0x4] ;
        /*0020*/                   LDS.64 R2, [R1+0x8] ;
        /*0030*/                   LDS.128 R4, [R1+0x10] ;
        /*0040*/                   STS.128 [R1+0x20], R4 ;
        /*0050*/                   LDSM.16.M88.4 R8, [R1+0x40] ;
        /*0060*/                   LDG.E.128 R12, desc[UR4][R16.64] ;
        /*0070*/                   STG.E desc[UR4][R16.64], R0 ;
        /*0080*/                   DFMA R18, R18, R20, R22 ;
        /*0090*/                   DADD R18, R18, R20 ;
        /*00a0*/               @P0 DMUL R18, R18, R20 ;
        /*00b0*/                   MUFU.RCP R0, R0 ;
        /*00c0*/                   F2F.F64.F32 R18, R0 ;
        /*00d0*/                   FFMA R0, R0, R2, R3 ;
        /*00e0*/                   IMAD.MOV.U32 R3, RZ, RZ, R0 ;
        /*00f0*/                   IADD3 R1, R1, 0x4, RZ ;
        /*0100*/                   MOV R5, R0 ;
        /*0110*/                   EXIT ;
"""


def pipe_instructions():
    return sa.parse_nvdisasm(PIPE_SNIPPET)["pipes"].instructions


def test_shared_memory_wavefronts_by_width():
    # 128 bytes per clock per SM: a warp's 32-bit (or narrower) access is one wavefront, 64-bit two,
    # 128-bit four; ldmatrix .x4 four.
    ins = pipe_instructions()
    assert [sa.wavefronts(x) for x in ins[:8]] == [1, 1, 2, 4, 4, 4, 4, 1]
    assert all(sa.wavefronts(x) == 0 for x in ins[8:])
    c = sa.block_counts(ins[:8])
    assert c["shared"] == 1 + 1 + 2 + 4 + 4 + 4 and c["wavefronts"] == 16
    assert c["lds"] == 5 and c["sts"] == 1
    # The global load and store use the same data path: l1 counts them too, shared does not.
    assert c["l1"] == 16 + 4 + 1
    assert c["instructions"] == 8 and c["issue"] == 8 / 4


def test_float64_special_function_and_arithmetic_pipes():
    ins = pipe_instructions()
    c = sa.block_counts(ins)
    assert c["instructions"] == len(ins) == 18 and c["issue"] == 18 * 0.25
    # DFMA, DADD and a predicated DMUL (a warp issues it all the same): 64 float64 results per
    # clock per SM, half the float32 rate: half a clock each.
    assert c["dp"] == 3 and c["fp64"] == 3 * 0.5
    # MUFU and the conversion: 16 results per clock per SM, 2 clocks a warp-instruction.
    assert c["mufu"] == 1 and c["xu"] == 2 * 2.0
    # FFMA a quarter clock, IMAD (the compiler's move) half; IADD3 half on the ALU; MOV no pipe.
    assert c["fma"] == 0.25 + 0.5 and c["alu"] == 0.5
    only_mov = sa.pipe_counts(ins[16])
    assert ins[16].base == "MOV" and {k for k, v in only_mov.items() if v} == {"instructions", "issue"}
    # Counts add and scale as vectors, missing keys zero.
    assert (c * 2)["fp64"] == 3.0 and (c + sa.Counts(fp64=1.0))["fp64"] == 2.5 and c["nothing"] == 0.0
    assert 0.0 + c == c and sum([c, c], sa.Counts())["xu"] == 8.0


def test_pipe_counts_follow_the_issue_heaviest_path(tmp_path):
    cfg = synthetic_cfg(tmp_path)
    table = (
        sr.Expect(
            "rows",
            "r < rows; ++r",
            lambda c: 3,
            "three rows",
            children=(sr.Expect("taps", "k < n; ++k", lambda c: 5, "five taps"),),
        ),
    )
    total, a = sr.kernel_cost(cfg, None, table, sr.Source())
    assert a.total["instructions"] == total == 5 + 3 * (9 + 4 * 5)
    # The inner loop's FFMA 15 times, the heavier branch's two FMUL 3 times (not the FADD).
    assert a.total["fma"] == (15 + 6) * 0.25
    # IADD3 + ISETP per inner iteration, the branch's ISETP and the latch's IADD3 + ISETP per row.
    assert a.total["alu"] == (15 * 2 + 3 * 3) * 0.5
    assert a.total["l1"] == 1  # the final STG
    assert a.pipes["rows/taps"]["instructions"] == 3 * 5 * 4 and a.pipes["rows/taps"]["fma"] == 15 * 0.25
    # The phases: the innermost loop, and the rest; they add up to the whole.
    names = [w for w, _ in a.phases]
    assert names == ["rows/taps", "the rest"]
    assert sum((c for _, c in a.phases), sa.Counts())["instructions"] == total
    assert sr.phase_clocks(a.phases) == max(3 * 5 * 4 * 0.25, 15 * 0.25) + max(
        (total - 60) * 0.25, 6 * 0.25, 9 * 0.5, 1.0
    )
    # A filter's taps (an unrolled cascade) are part of the loop around them: that loop is the phase,
    # the taps are not counted again as one of their own.
    table = (
        sr.Expect(
            "rows",
            "r < rows; ++r",
            lambda c: 3,
            "three rows",
            children=(sr.Expect("taps", "k < n; ++k", lambda c: 5, "five taps", cascade=True),),
        ),
    )
    total, a = sr.kernel_cost(cfg, None, table, sr.Source())
    assert [w for w, _ in a.phases] == ["rows", "the rest"]
    assert sum((c for _, c in a.phases), sa.Counts())["instructions"] == total


def test_waves_and_launch_clocks():
    # The fused forward at 1080p: 1020 blocks, 2 per SM: 3.9 waves, 4 whole ones; the busiest SM runs
    # ceil(1020 / 132) = 8 blocks, the same 4 waves of 2.
    assert sa.waves(1020, 132, 2) == (1020 / 264, 4)
    assert sa.launch_clocks(1020, 132, 2, 100.0) == 800.0
    assert sa.launch_clocks(1020, 132, 2, 100.0, whole_waves=True) == 800.0
    # Kernel 2: 4080 blocks, 3 per SM: 10.3 waves; the busiest SM runs 31 blocks, 11 whole waves
    # would charge 33.
    assert sa.waves(4080, 132, 3)[1] == 11
    assert sa.launch_clocks(4080, 132, 3, 10.0) == 310.0
    assert sa.launch_clocks(4080, 132, 3, 10.0, whole_waves=True) == 330.0
    # Less than a wave: 255 blocks of which the busiest SM runs 2, a whole wave would be 5.
    assert sa.launch_clocks(255, 132, 5, 1.0) == 2.0 and sa.launch_clocks(255, 132, 5, 1.0, True) == 5.0
    # Exactly full waves: no tail.
    assert sa.launch_clocks(264, 132, 2, 1.0) == sa.launch_clocks(264, 132, 2, 1.0, True) == 2.0


def test_launch_bounds_take_the_busiest_pipe_or_memory():
    k = {"threads": 256, "occupancy": {"blocks_per_sm": 2}}
    per_warp = sa.Counts(instructions=400.0, issue=100.0, shared=150.0, fp64=20.0)
    b = sr.launch_bounds(k, 1020, per_warp, (0, 0))
    # 8 warps per block; the busiest SM runs 8 blocks; shared is the busiest pipe.
    assert b["busiest_pipe"] == "shared" and b["limited_by"] == "shared"
    assert b["compute_s"] == pytest.approx(8 * 8 * 150.0 / sr.GPU_CLOCK_HZ)
    assert b["pipes_s"]["issue"] == pytest.approx(1020 * 8 * 100.0 / sr.GPU_SMS / sr.GPU_CLOCK_HZ)
    assert b["bound_s"] == b["compute_s"] and b["whole_waves"] == 4
    # Enough bytes and memory limits: bytes over the bandwidth.
    big = (10**9, 2 * 10**8)
    b = sr.launch_bounds(k, 1020, per_warp, big)
    assert b["limited_by"] == "memory" and b["bound_s"] == pytest.approx(1.2e9 / sr.GPU_HBM_BYTES_PER_S)
    # Serialised phases never undercut the overlapped bound.
    b = sr.launch_bounds(k, 1020, per_warp, (0, 0), phased=200.0)
    assert b["phased_s"] == pytest.approx(8 * 8 * 200.0 / sr.GPU_CLOCK_HZ)
    assert sr.launch_bounds(k, 1020, per_warp, (0, 0), phased=1.0)["phased_s"] == b["compute_s"]


def test_launch_bytes_from_the_geometry():
    w, h, e = 1920, 1080, 4
    hw = w * h
    kept_band = {"n0": 0, "n1": 1, "y0": 0, "y1": h, "g0": 0, "g1": h, "images": 1, "grad_tiles_y": 68}
    facts = {"grad_planes": 7, "R": 10, "kept_band": kept_band}
    ctx = sr.Ctx(facts, w, h, False, True)
    # The forward: both images' 3 channels read, the map written.
    assert sr.launch_bytes("fused_forward_kernel<10,9>", ctx) == (6 * hw * e, hw * e)
    kept = sr.Ctx(facts, w, h, False, True, kept_band, True)
    # Kernel 1 keeping the sensitivities: the images read; 7 planes of the test image and the map
    # written. Kernel 2: the planes, the incoming gradient and the test image read, its gradient
    # written.
    assert sr.launch_bytes("tiled_grad_kernel<10,9>", kept) == (6 * hw * e, 8 * hw * e)
    assert sr.launch_bytes("tiled_transpose_kernel<10,9>", kept) == ((7 + 1 + 3) * hw * e, 3 * hw * e)
    # A band of the recomputing backward: rows 0-543 with gradient rows 0-553 and input rows 0-563.
    band = {"n0": 0, "n1": 1, "y0": 0, "y1": 544, "g0": 0, "g1": 554, "images": 1, "grad_tiles_y": 35}
    b1 = sr.Ctx(facts, w, h, False, True, band)
    assert sr.launch_bytes("tiled_grad_kernel", b1) == ((6 * 564 + 554) * w * e, 7 * 554 * w * e)
    assert sr.launch_bytes("tiled_transpose_kernel", b1) == ((7 * 554 + 3 * 544) * w * e, 3 * 544 * w * e)


# ---- with the tools -----------------------------------------------------------------------------

NVCC = sr.find_tool("nvcc")
NVDISASM = sr.find_tool("nvdisasm")
CUOBJDUMP = sr.find_tool("cuobjdump")
needs_tools = pytest.mark.skipif(
    not (NVCC and NVDISASM and CUOBJDUMP),
    reason="needs nvcc, nvdisasm and cuobjdump (pip install -r benchmarks/requirements-sass.txt)",
)

TINY_CU = """\
__global__ void __launch_bounds__(128) row_sums_kernel(const float* x, float* y, int rows, int n, float a) {
  __shared__ float buf[256];
  buf[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  float acc = 0.f;
#pragma unroll 1
  for (int r = 0; r < rows; ++r) {
    int k = 0;  // at least one iteration: no guard for the compiler to version the outer loop on
#pragma unroll 1
    do acc = fmaf(a, buf[(threadIdx.x + k + r) & 255], acc); while (++k < n);
    y[r] = acc;
  }
  y[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
"""


@needs_tools
def test_a_compiled_loop_nest(tmp_path):
    cu = tmp_path / "tiny.cu"
    cu.write_text(TINY_CU)
    cubin = tmp_path / "tiny.cubin"
    res = subprocess.run(
        [
            NVCC,
            "-cubin",
            "-O3",
            "-lineinfo",
            "-gencode=arch=compute_90,code=sm_90",
            "-Xptxas",
            "-v",
            str(cu),
            "-o",
            str(cubin),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    ptxas = sr.parse_ptxas(res.stderr)
    (name,) = ptxas
    assert sr.kernel_key(name) is None  # not a template instance of flip::cuda
    p = ptxas[name]
    assert p["static_smem"] == 1024 and p["barriers"] == 1 and p["spill_stores"] == 0 and p["registers"] > 0
    usage = sr.parse_res_usage(
        subprocess.run([CUOBJDUMP, "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    )
    # cuobjdump counts the driver's reserved 1 KB in SHARED; ptxas's registers agree with it.
    assert usage[name]["SHARED"] == 1024 + 1024 and usage[name]["REG"] == p["registers"]
    text = subprocess.run([NVDISASM, "-c", "-g", str(cubin)], capture_output=True, text=True, check=True).stdout
    cfg = sa.Cfg(sa.parse_nvdisasm(text)[name])
    assert cfg.problems == []
    assert len(cfg.loops) == 1 and len(cfg.loops[0].children) == 1
    outer, inner = cfg.loops[0], cfg.loops[0].children[0]
    source = sr.Source()
    assert "r < rows; ++r" in source.line(*cfg.latch_location(outer))
    assert "while (++k < n);" in source.line(*cfg.latch_location(inner))
    assert cfg.fma_count(inner.blocks) == 1

    def cost(rows, n):
        table = (
            sr.Expect(
                "rows",
                "r < rows; ++r",
                lambda c: rows,
                "",
                children=(sr.Expect("taps", "while (++k < n);", lambda c: n, ""),),
            ),
        )
        total, a = sr.kernel_cost(cfg, None, table, source)
        assert a.problems == []
        return total

    # Each inner iteration costs its body, each outer one the same amount more than the one before.
    body = sa.heaviest_path(cfg, inner, lambda b: cfg.size([b]), lambda lp: 0.0)
    assert body == cfg.size(inner.blocks)
    assert cost(3, 6) - cost(3, 5) == 3 * body
    assert cost(2, 5) - cost(1, 5) == cost(3, 5) - cost(2, 5) > 5 * body
    # A table that expects another inner loop is refused.
    wrong = (
        sr.Expect(
            "rows", "r < rows; ++r", lambda c: 1, "", children=(sr.Expect("taps", "k < n; ++k", lambda c: 1, ""),)
        ),
    )
    assert sr.kernel_cost(cfg, None, wrong, source)[0] is None


@needs_tools
def test_the_model_on_blurs_whose_limits_are_known():
    """benchmarks/blur_check.cu (a few seconds' compile): the register-window vertical blur comes out
    memory-bound, at its bytes over the HBM's bandwidth; the textbook shared-memory blurs (21 shared
    loads per output) come out limited on the SM, their shared-memory path alone slower than their
    bytes."""
    import blur_model_check as bm

    res = bm.model(NVCC, NVDISASM)
    assert set(res) == set(bm.LAUNCHES)
    for name, r in res.items():
        assert bm.as_expected(r), (name, r["bounds"])
    regs = res["blur_v_regs"]
    assert regs["bounds"]["bound_s"] == pytest.approx(2 * 1920 * 1080 * 4 / sr.GPU_HBM_BYTES_PER_S)
    assert regs["per_warp"].get("lds", 0) == 0 and regs["static_smem"] == 0
    for name in ("blur_h_smem", "blur_v_smem"):
        pw = res[name]["per_warp"]
        # 21 taps, each an LDS of 4 bytes per lane: one wavefront each, plus the tile's stores.
        assert pw["lds"] == 21 and pw["wavefronts"] >= 22 and pw["fma"] >= 21 * 0.25


@pytest.mark.slow
@needs_tools
def test_the_report_matches_the_current_kernels(tmp_path):
    """The whole report on csrc/flip/cuda/kernels.cu (a full sm_90 compile, about a minute): every
    kernel's loops match TRIP_TABLE (exit status 0), and each scenario has a figure."""
    out = tmp_path / "sass.json"
    res = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "sass_report.py"), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["estimate"] is True and report["table_problems"] == {}
    assert {k["kernel"] for k in report["kernels"]} >= set(sr.TRIP_TABLE)
    for s in report["scenarios"]:
        assert s["warp_instructions"] > 0 and s["issue_bound_ms"] > 0
        # The pipe bounds: never below the issue bound (the issue pipe is one of them), the whole
        # waves and the serialised phases never below the bound.
        assert s["pipe_bound_ms"] >= s["issue_bound_ms"] * (1 - 1e-9)
        assert s["whole_waves_bound_ms"] >= s["pipe_bound_ms"] * (1 - 1e-9)
        assert s["phased_bound_ms"] >= s["pipe_bound_ms"] * (1 - 1e-9)
    for d in report["per_kernel"].values():
        assert d["launches"] and all(x["limited_by"] in (*sa.PIPES, "memory") for x in d["launches"])
        assert d["pipes_per_warp"]["instructions"] == pytest.approx(d["per_warp"])
    by_name = {s["scenario"]: s["warp_instructions"] for s in report["scenarios"]}
    # At 1080p autograd keeps the test image's sensitivities: its forward+backward is kTiledGrad (the
    # fused forward plus the adjoint) and kTiledTranspose over the whole image; the recomputing one adds
    # the fused forward and runs both kernels in bands, which overlap.
    fwd, kept, recomputing = (by_name[k] for k in ("forward", "forward+backward", "forward+backward, recomputing"))
    assert fwd < kept and recomputing > kept + fwd
    # Every generation: the formulation its shared memory allows at ppd 67 (float32: the tiles but
    # on sm_75), each of its kernels launchable there, and sm_90's occupancy the table's above.
    gens = {g["capability"]: g for g in report["generations"]}
    assert set(gens) == set(sa.GENERATIONS)
    for capability, g in gens.items():
        tiles = capability != "7.5"
        assert (g["forward"], g["backward"]) == (("fused", "tiled") if tiles else ("row passes", "row passes"))
        assert g["row_passes_fit"] and len(g["kernels"]) == (3 if tiles else 7), g["kernels"]
        assert all(k["occupancy"]["blocks_per_sm"] >= 1 for k in g["kernels"]), capability
    table = {k["kernel"]: k["occupancy"] for k in report["kernels"] if k["dtype"] == "float32"}
    assert all(k["occupancy"] == table[k["kernel"]] for k in gens["9.0"]["kernels"])
    # The row passes move their 14 planes through global memory: the forward reads and writes several
    # times the tiles' bytes (the images and the map), a loss (whose tiles write and read the kept
    # sensitivities too) more than twice.
    assert gens["7.5"]["bytes"]["forward"] > 4 * gens["9.0"]["bytes"]["forward"]
    assert gens["7.5"]["bytes"]["forward+backward"] > 2 * gens["9.0"]["bytes"]["forward+backward"]


# ---- the device's floating-point contract (docs/algorithm.md §9.2) ----

ARITHMETIC = ("FFMA", "FMUL", "FADD", "DFMA", "DMUL", "DADD")
# The per-pixel maths, where a product fused into one image's difference and not into the other's
# costs the exact zero of identical images and the symmetry of the map.
PER_PIXEL = ("color.h", "pixel.h", "hdr_pixel.h", "fastmath.h")
# A division, or a call of a maths function: nvcc's IEEE division and square root and CUDA's maths
# functions are made of fused multiply-adds of their own, which the line table puts on that line.
LIBRARY = re.compile(r"[^/]/[^/]|\b(sqrt|cbrt|pow|log|exp2)\(")


def arithmetic(disassembly, source):
    """Per kernel (sass_report.kernel_key): the count of each opcode of ARITHMETIC, "asked": the
    multiply-adds on a line of FLIP_FMADD (what the source asks for), and "unexplained": the lines
    of the per-pixel maths holding multiply-adds that no division or maths function explains."""
    out = {}
    for mangled, fn in sa.parse_nvdisasm(disassembly).items():
        key = sr.kernel_key(mangled)
        if key is None:
            continue
        counts = collections.Counter()
        unexplained = set()
        for x in fn.instructions:
            if x.base not in ARITHMETIC:
                continue
            counts[x.base] += 1
            if x.base not in sa.FMA_OPCODES or not x.file:
                continue
            code = source.line(x.file, x.line).split("//")[0]
            if "FLIP_FMADD(" in code:
                counts["asked"] += 1
            elif os.path.basename(x.file) in PER_PIXEL and not LIBRARY.search(code):
                unexplained.add(f"{os.path.basename(x.file)}:{x.line}: {code}")
        out[key] = (counts, unexplained)
    return out


@pytest.mark.slow
@needs_tools
def test_nvcc_fuses_only_the_multiply_adds_the_source_asks_for(tmp_path):
    """kernels.cu compiled for sm_90 with setup.py's nvcc flags (the report's compile, shared through
    build/sass) and with the same flags but nvcc's default contraction: the shipped build fuses only
    the filter taps' multiply-adds (FLIP_FMADD) and those inside divisions, square roots and maths
    functions; everything else nvcc would fuse by default it leaves as the separate roundings the
    source writes, which is what keeps identical images at exactly 0 and the map symmetric. (The
    two builds cannot have equal counts: the default's whole difference is the fusing.)"""
    flags = sr.setup_nvcc_flags()
    assert "-fmad=false" in flags and not any("fast_math" in f for f in flags)
    source = sr.Source()
    shipped, default = (
        arithmetic(
            subprocess.run(
                [NVDISASM, "-c", "-g", sr.compile_kernels(NVCC, str(tmp_path), [], flags=f)[0]],
                capture_output=True,
                text=True,
                check=True,
            ).stdout,
            source,
        )
        for f in (flags, [f for f in flags if f != "-fmad=false"])
    )
    assert shipped.keys() == default.keys() and ("fused_forward_kernel<10,9>", "float32") in shipped
    fused = {}
    for kernel, (a, unexplained) in shipped.items():
        b = default[kernel][0]
        # The fused multiply-adds the source asks for are in both builds, as many.
        assert a["asked"] == b["asked"], kernel
        # The default only fuses: more multiply-adds, fewer multiplies and adds, in float and
        # double alike (mostly one each per multiply-add; a product that feeds two sums can go
        # into both).
        for p in "FD":
            n = b[p + "FMA"] - a[p + "FMA"]
            assert n >= 0 and a[p + "MUL"] >= b[p + "MUL"] and a[p + "ADD"] >= b[p + "ADD"], (kernel, p, a, b)
            fused[kernel] = fused.get(kernel, 0) + n
        # Every other multiply-add of the per-pixel maths in the shipped build is a division's, a
        # square root's or a maths function's.
        assert unexplained == set(), (kernel, sorted(unexplained))
    # The default would fuse in every kernel but those whose only products are the taps' (vt) or
    # feed no sum (the kept sensitivities times the gradient)...
    assert {k for k, n in fused.items() if n == 0} == {
        ("vertical_transpose_kernel", "float32"),
        ("vertical_transpose_kernel", "float64"),
        ("ldr_kept_grad_kernel", "float32"),
        ("ldr_kept_grad_kernel", "float64"),
    }
    # ... and the line check sees it: in the per-pixel maths, HyAB's differences among them (the
    # products of one image fused into the difference with the other's rounded ones).
    lines = set().union(*(u for _, u in default.values()))
    assert any("s.da = hr[1] - ht[1];" in line for line in lines), sorted(lines)
