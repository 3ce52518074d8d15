"""A static estimate of the CUDA kernels' speed on an H100/H200, made without a GPU: the SASS that
nvcc generates for sm_90, per kernel its registers, spills, shared memory and theoretical
occupancy, and the warp-instructions its loops issue (instructions per iteration from the SASS,
times trip counts from a table below) for LDR-FLIP and HDR-FLIP at 1920x1080, ppd 67.02, float32,
with the issue-bound time that implies and each launch's bound by every pipe and by memory.

    pip install -r benchmarks/requirements-sass.txt        # nvdisasm and cuobjdump
    python benchmarks/sass_report.py [--json out.json] [--size 1920x1080] [--exposures 9]

The other generations (sass_analysis.GENERATIONS) get the formulation their shared memory picks
and each kernel's occupancy, no time. An estimate, never a measurement: lower bounds that ignore
latency, bank conflicts and dual-issue limits (``estimate``); benchmarks/blur_model_check.py checks
the same rules on blurs whose limits first principles know. If a kernel's loops no longer match the
trip-count table (TRIP_TABLE) the report says so on stderr, prints no estimate for that kernel (nor
the totals that need it) and exits with status 3: the table must then be brought up to date.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_analysis as sa  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS_CU = os.path.join(ROOT, "csrc", "flip", "cuda", "kernels.cu")
FACTS_CPP = os.path.join(ROOT, "benchmarks", "sass_launch_facts.cpp")

# The GPU the time is estimated for: H200 SXM (H100 SXM: the same SM count and limits).
GPU_NAME = "H200 SXM"
GPU_SMS = 132
GPU_SCHEDULERS_PER_SM = 4  # each issues one warp-instruction per clock
GPU_CLOCK_HZ = 1.98e9  # boost clock
# HBM3e bandwidth of an H200 SXM (NVIDIA's H200 datasheet: 4.8 TB/s; an H100 SXM's HBM3: 3.35 TB/s).
GPU_HBM_BYTES_PER_S = 4.8e12

# The speed targets (float32, batch 1, 1920x1080; scripts/gpu/summary.py judges the measured ones).
TARGETS_MS = {"forward": 0.25, "forward+backward": 0.5, "hdr forward+backward": 10.0}
TARGET_SIZE = (1920, 1080)


# ---- tools ----------------------------------------------------------------------------------


def find_tool(name, tools_dir=None):
    """A CUDA binary: --tools-dir, PATH, CUDA_HOME/bin, then the bin folders of the PyPI wheels
    (nvidia/cu*/bin inside any `nvidia` package folder on sys.path)."""
    if tools_dir:
        p = os.path.join(tools_dir, name)
        return p if os.access(p, os.X_OK) else None
    p = shutil.which(name)
    if p:
        return p
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    p = os.path.join(cuda_home, "bin", name)
    if os.access(p, os.X_OK):
        return p
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for base in spec.submodule_search_locations if spec and spec.submodule_search_locations else []:
        for sub in sorted(os.listdir(base)):
            p = os.path.join(base, sub, "bin", name)
            if os.access(p, os.X_OK):
                return p
    return None


def tool_version(path):
    out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "?"


# ---- compiling ------------------------------------------------------------------------------


def setup_nvcc_flags():
    """The "nvcc" list of extra_compile_args in setup.py, read without running it."""
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "nvcc":
                    return ast.literal_eval(v)
    raise RuntimeError('setup.py has no "nvcc" compile flags to copy')


def torch_nvcc_flags():
    """The flags torch's CUDAExtension adds (its common defines), if torch is importable: kernels.cu
    includes no torch header, so without torch only these macros are missing."""
    try:
        from torch.utils import cpp_extension
    except ImportError:
        return [], "torch not importable: its common nvcc defines left out"
    return list(cpp_extension.COMMON_NVCC_FLAGS) + [
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-DTORCH_EXTENSION_NAME=_C",
    ], None


# Compiled cubins and their ptxas logs, by a hash of the compile (below): the report and the tests
# (tests/gpu/test_sass_report.py) that compile the same kernels with the same flags share one compile.
CACHE_DIR = os.path.join(ROOT, "build", "sass")


def _compile_key(nvcc, cmd):
    """A hash of everything the cubin depends on: nvcc's version, the command line (without the
    tool's path and the output file) and every source file under csrc/flip and csrc/include."""
    import hashlib

    h = hashlib.sha256()
    h.update(subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.encode())
    h.update("\0".join(cmd).encode())
    for sub in ("flip", "include"):
        base = os.path.join(ROOT, "csrc", sub)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, ROOT).encode() + b"\0")
                with open(path, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()[:32]


def compile_kernels(nvcc, workdir, notes, flags=None, cache_dir=CACHE_DIR, arch="9.0"):
    """kernels.cu for one GPU generation (sm_90 unless `arch` says otherwise) into a cubin, with
    setup.py's nvcc flags (or `flags` in their place) and torch's common ones: (cubin path, ptxas -v
    log, command line). With cache_dir (None: none) an identical compile made before is reused from
    there."""
    flags = list(setup_nvcc_flags() if flags is None else flags)
    extra, note = torch_nvcc_flags()
    if note:
        notes.append(note)
    if "-lineinfo" not in flags:
        flags.append("-lineinfo")  # source lines for the loop table; the generated code is the same
        notes.append("added -lineinfo (setup.py does not pass it)")
    args = [
        "-cubin",
        "-gencode=arch=compute_{0},code=sm_{0}".format(arch.replace(".", "")),
        "-std=c++17",
        *extra,
        *flags,
        "-Xptxas",
        "-v",
        KERNELS_CU,
    ]
    line = " ".join(args + ["-o", "kernels.cubin"])
    cached = None
    if cache_dir is not None:
        cached = os.path.join(cache_dir, _compile_key(nvcc, args))
        if os.path.exists(cached + ".cubin") and os.path.exists(cached + ".log"):
            with open(cached + ".log") as fh:
                return cached + ".cubin", fh.read(), line
    cubin = os.path.join(workdir, "kernels.cubin")
    res = subprocess.run([nvcc, *args, "-o", cubin], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("nvcc failed:\n" + res.stderr[-4000:])
    if cached is None:
        return cubin, res.stderr, line
    os.makedirs(cache_dir, exist_ok=True)
    # Written under temporary names and renamed, log last: a reader sees both files or neither.
    tmp = f"{cached}.{os.getpid()}"
    shutil.copyfile(cubin, tmp + ".cubin")
    with open(tmp + ".log", "w") as fh:
        fh.write(res.stderr)
    os.replace(tmp + ".cubin", cached + ".cubin")
    os.replace(tmp + ".log", cached + ".log")
    return cached + ".cubin", res.stderr, line


def launch_facts(workdir, ppd, width, height, batch, wanted, elem):
    cxx = os.environ.get("CXX", "c++")
    exe = os.path.join(workdir, "sass_launch_facts")
    res = subprocess.run(
        [cxx, "-std=c++17", "-O1", "-I" + os.path.join(ROOT, "csrc"), FACTS_CPP, "-o", exe],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise RuntimeError("compiling sass_launch_facts.cpp failed:\n" + res.stderr[-4000:])
    out = subprocess.run(
        [exe, repr(ppd), str(width), str(height), str(batch), str(wanted), str(elem)]
        + sorted({str(g.smem_per_block_optin) for g in sa.GENERATIONS.values()}),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


# ---- resources ------------------------------------------------------------------------------

# <length><name><T, Rad>, within flip::cuda::(anonymous); Rad is AnyRadius or FixedRadii<Rc, Rf>.
_KERNEL_NAME = re.compile(r"\d+([a-z_]+_kernel)I([fd])NS0_(?:9AnyRadiusE|10FixedRadiiILi(\d+)ELi(\d+)EEE)E")


def kernel_key(mangled):
    """(kernel, dtype) of a mangled kernel name, e.g. ("fused_forward_kernel", "float32"); a kernel
    compiled for fixed radii is named with them, e.g. ("fused_forward_kernel<10,9>", "float32")."""
    m = _KERNEL_NAME.search(mangled)
    if not m:
        return None
    name = m.group(1) if m.group(3) is None else f"{m.group(1)}<{m.group(3)},{m.group(4)}>"
    return name, "float32" if m.group(2) == "f" else "float64"


def base_name(kernel):
    """The kernel's name without its radii: the key of LAUNCH and TRIP_TABLE."""
    return kernel.split("<")[0]


def parse_ptxas(log):
    """Per mangled kernel: registers, stack, spill stores/loads, static shared memory, barriers."""
    out = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            current = out.setdefault(
                m.group(1),
                {"registers": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0, "static_smem": 0, "barriers": 0},
            )
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current["stack"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["registers"] = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            s = re.search(r"(\d+) bytes smem", line)
            current["barriers"] = int(b.group(1)) if b else 0
            current["static_smem"] = int(s.group(1)) if s else 0
    return out


def parse_res_usage(text):
    """cuobjdump -res-usage: per mangled kernel REG, STACK, SHARED (which on sm_90 includes the
    driver's reserved 1 KB for kernels with shared memory), LOCAL."""
    out = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        if name and "REG:" in line:
            out[name] = {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)}
            name = None
    return out


# ---- launch configuration -------------------------------------------------------------------

# Threads per block and dynamic shared memory (a key of the facts' smem_elems, times the element
# size) of each kernel, as the launchers in csrc/flip/cuda/kernels.cu use them: the tiled kernels
# run kFusedThreads, the row passes and per-pixel kernels kBlock. horizontal_transpose_kernel's
# shared memory is the LDR/HDR-FLIP one (all 7 planes).
LAUNCH = {
    "fused_forward_kernel": ("fused_threads", "fused"),
    "tiled_grad_kernel": ("fused_threads", "fused"),
    "tiled_transpose_kernel": ("fused_threads", "tiled_transpose"),
    "horizontal_pass_kernel": ("block", "horizontal_pass"),
    "horizontal_transpose_kernel": ("block", "horizontal_transpose"),
}


def launch_config(kernel, facts, elem):
    threads_key, smem_key = LAUNCH.get(base_name(kernel), ("block", None))
    return facts[threads_key], (facts["smem_elems"][smem_key] * elem if smem_key else 0)


# ---- the trip-count table -------------------------------------------------------------------


@dataclasses.dataclass
class Ctx:
    """What trip counts depend on, for one launch of one kernel."""

    facts: dict
    width: int
    height: int
    hdr: bool  # HDR-FLIP (one exposure per launch)
    computes: bool  # HDR-FLIP: this exposure won pixels in the tile (False: the skip path)
    band: Optional[dict] = None
    kept: bool = False  # the launches of an autograd that keeps the sensitivities

    @property
    def threads(self):
        return self.facts["fused_threads"]

    @property
    def rows(self):  # tile rows plus halo
        return self.facts["tile_h"] + 2 * self.facts["R"]

    @property
    def cols(self):
        return self.facts["tile_w"] + 2 * self.facts["R"]

    @property
    def tile(self):
        return self.facts["tile_h"] * self.facts["tile_w"]

    def per_warp(self, total):
        """Average iterations per warp of ``for (i = tid; i < total; i += nthreads)``."""
        return sa.warp_iterations(total, self.threads, self.threads)

    @property
    def walk_rows(self):
        """The tile rows the fused forward (whole image) or kTiledGrad (the band's gradient-plane rows)
        walks down, kWalkTiles to a walk."""
        th = self.facts["tile_h"]
        return -(-self.height // th) if self.band is None else self.band["grad_tiles_y"]

    @property
    def walks(self):
        return -(-self.walk_rows // self.facts["walk_tiles"])

    @property
    def fresh(self):
        """The share of tiles that compute all their horizontal-output rows: the first of each walk."""
        return self.walks / self.walk_rows

    def new_rows(self):
        """Horizontal-output rows per image a tile computes, on average: all (16+2R) on the first of a
        walk, the 16 below the kept 2R on the others."""
        f = self.fresh
        return f * self.rows + (1 - f) * self.facts["tile_h"]

    def loaded(self, width):
        """Average warp-iterations of a loop over the tile's new rows x `width` (fused_load's columns
        with the halo, fused_horizontal's without)."""
        f = self.fresh
        return f * self.per_warp(self.rows * width) + (1 - f) * self.per_warp(self.facts["tile_h"] * width)

    @property
    def keep_chunks(self):
        return -(-2 * self.facts["R"] // self.facts["tile_h"])

    def keep_per_chunk(self):
        """Average warp-iterations of fused_keep_rows per chunk: 2 images x 7 planes x the chunk's rows
        x 32 columns, the 2R rows in chunks of at most 16."""
        th, keep = self.facts["tile_h"], 2 * self.facts["R"]
        sizes = [min(th, keep - c) for c in range(0, keep, th)]
        return sum(self.per_warp(14 * r * self.facts["tile_w"]) for r in sizes) / len(sizes)

    def radius(self, filt):
        return self.facts["r_csf"] if filt in CSF_FILTERS else self.facts["r_feat"]


@dataclasses.dataclass
class Expect:
    """One source loop: the text its closing line contains, its trip count per entry and per warp,
    the probability that an iteration of the enclosing code enters it, and the loops inside it in
    the order the compiler laid them out (by address). cascade: a filter loop, which the compiler
    unrolls into several pieces that share its trip count (sass_analysis.cascade_counts)."""

    name: str
    text: str
    trips: Callable[[Ctx], float]
    why: str
    children: tuple = ()
    entry: Callable[[Ctx], float] = lambda c: 1.0
    cascade: bool = False


# The filters of TapsView (filter_sums.h) with the CSF radius; g, dg and ddg have the feature
# radius.
CSF_FILTERS = ("y", "cx", "cz1", "cz2")
# The loops of correlate (filter_sums.h), by form, and of transposed_sum's border folds.
PLAIN, ODD, CENTRED = "k <= f.r; ++k", "acc = FLIP_FMADD(T, f.w[f.r - i]", "acc = FLIP_FMADD(T, f.w[f.r + i]"
FOLD_FIRST, FOLD_LAST = "acc = FLIP_FMADD(T, f.left[i]", "acc = FLIP_FMADD(T, f.right[d]"


# Each filter's form in correlate and transposed_sum (filter_sums.h): the Gaussians plain, the first
# derivative odd, the second centred.
FORMS = {"y": "plain", "cx": "plain", "cz1": "plain", "cz2": "plain", "g": "plain", "dg": "odd", "ddg": "centred"}


def taps(filt):
    form = FORMS[filt]
    text = {"plain": PLAIN, "odd": ODD, "centred": CENTRED}[form]
    if form == "plain":
        return Expect(
            f"{filt} ({form})",
            text,
            lambda c: 2 * c.radius(filt) + 1,
            f"2r+1 taps, r = the {'CSF' if filt in CSF_FILTERS else 'feature'} radius",
            cascade=True,
        )
    return Expect(
        f"{filt} ({form})", text, lambda c: c.radius(filt), "r taps (pairs of mirrored samples)", cascade=True
    )


ONE = lambda c: 1.0  # noqa: E731
ONE_ROW = lambda c: 1  # noqa: E731
# The rows of a column a thread of the register-blocked vertical filters takes (kVerticalRows).
VERTICAL_ROWS = lambda c: c.facts["vertical_rows"]  # noqa: E731


def fold_fraction(ctx, axis, which, rows=1):
    """The fraction of the transposed filters' warp-iterations in which some lane is on the first
    (which=0) or last (1) row (axis "y": tiled_vertical_transpose) or column (axis "x":
    tiled_horizontal_transpose) of the image: transposed_sum's border folds run only there, for the
    whole warp. rows: the rows of a column each lane of tiled_vertical_transpose filters
    (transposed_sums); the first fold runs for a lane whose first row is the image's first, the last
    for one whose rows include its last."""
    f = ctx.facts
    b = ctx.band
    th, tw, cols = f["tile_h"], f["tile_w"], ctx.cols
    tiles_y = -(-(b["y1"] - b["y0"]) // th)
    tiles_x = -(-ctx.width // tw)
    hit = total = 0
    if axis == "y":
        n = th // rows * cols
        for ty in range(tiles_y):
            y0 = b["y0"] + ty * th
            for start in range(0, n, 32):  # one warp-iteration: 32 consecutive i
                ys = [y0 + i // cols * rows for i in range(start, min(start + 32, n))]
                ys = [y for y in ys if y < b["y1"]]
                if ys:
                    total += 1
                    if which == 0:
                        hit += 0 in ys
                    else:
                        hit += any(0 <= ctx.height - 1 - y < rows for y in ys)
        return hit / total if total else 0.0
    n = th * tw
    edge = 0 if which == 0 else ctx.width - 1
    for tx in range(tiles_x):
        x0 = tx * tw
        for start in range(0, n, 32):
            xs = [x0 + i % tw for i in range(start, min(start + 32, n)) if x0 + i % tw < ctx.width]
            if xs:
                total += 1
                hit += edge in xs
    return hit / total if total else 0.0


def transposed(filt, axis, rows=ONE_ROW):
    """A transposed filter (transposed_sum): its correlation, then the folds of the clamped border
    samples, each r taps (min(r, the line's length)), entered only by warps on the image's border.
    rows: ctx -> the rows of a column a lane filters (fold_fraction)."""
    size = "height" if axis == "y" else "width"
    return (
        taps(filt),
        Expect(
            f"{filt} first-{axis} fold",
            FOLD_FIRST,
            lambda c: min(c.radius(filt), getattr(c, size)),
            "min(r, line length) taps",
            entry=lambda c: fold_fraction(c, axis, 0, rows(c)),
            cascade=True,
        ),
        Expect(
            f"{filt} last-{axis} fold",
            FOLD_LAST,
            lambda c: min(c.radius(filt), getattr(c, size)),
            "min(r, line length) taps",
            entry=lambda c: fold_fraction(c, axis, 1, rows(c)),
            cascade=True,
        ),
    )


def _fused_phases():
    """One tile of a walk (tile_forward_block, kernel_bodies.h): the kept rows moved up (all but the
    first tile of a walk), fused_load and fused_horizontal of each image's new rows, then
    fused_vertical of both images in one loop: the fused forward's and the tiled backward's
    kTiledGrad."""
    return (
        Expect(
            "kept rows",
            "c < 2 * R; c += kTileH",
            lambda c: c.keep_chunks,
            "2R rows in chunks of at most 16",
            entry=lambda c: (1 - c.fresh) if c.computes else 0.0,
            children=(
                Expect(
                    "fused_keep_rows",
                    "i < n; i += nthreads",
                    lambda c: c.keep_per_chunk(),
                    "2 images x 7 planes x the chunk's rows x 32 columns",
                ),
            ),
        ),
        Expect(
            "images",
            "im < 2; ++im",
            lambda c: 2.0 if c.computes else 0.0,
            "test, then reference",
            children=(
                Expect(
                    "fused_load",
                    "i < n; i += nthreads, at.next()",
                    lambda c: c.loaded(c.cols),
                    "the new rows of the tile and its halo: (16+2R) or 16 rows x (32+2R) pixels",
                ),
                Expect(
                    "fused_horizontal",
                    "i < n; i += nthreads",
                    lambda c: c.loaded(c.facts["tile_w"]),
                    "(16+2R) or 16 new rows x 32 columns",
                    children=tuple(taps(f) for f in ("y", "cx", "cz1", "cz2", "g", "dg", "ddg")),
                ),
            ),
        ),
        Expect(
            "fused_vertical",
            "i < 2 * columns; i += nthreads",
            lambda c: c.per_warp(2 * c.tile) if c.computes else 0.0,
            "both images' 16 x 32 pixels, a row each (radii read at run time)",
            children=tuple(taps(f) for f in ("y", "cx", "cz1", "cz2", "g", "dg", "ddg", "g")),
        ),
    )


def _vertical_t_folds(rows):
    """tiled_vertical_transpose's transposed filters (vertical_transpose_values' order), each lane
    filtering rows(ctx) rows."""
    return sum((transposed(f, "y", rows) for f in ("y", "cx", "cz1", "cz2", "g", "g", "dg", "ddg")), ())


def _walks(what, children):
    """A kernel's walks (one per block: grid.y = walks) and the tiles of each."""
    return Expect(
        "walks",
        "w < walks(tiles_y); w += b.grid_y()",
        ONE,
        f"grid.y = {what}: one walk per block",
        children=(
            Expect(
                "tiles",
                "ty < last; ++ty",
                lambda c: c.walk_rows / c.walks,
                "kWalkTiles tiles per walk (the last walk of a column may have fewer)",
                children=children,
            ),
        ),
    )


# Per kernel, its loops as a tree (sibling order = the order of the code in the SASS). The grid
# loops of the kernels run once per block: the launchers give grid.y the tile rows and grid.z the
# batch items (or the band's item-images), both below the 65535 limit at these sizes.
TRIP_TABLE = {
    "fused_forward_kernel": (
        Expect(
            "items",
            "n < g.n; n += b.grid_z()",
            ONE,
            "grid.z = batch: one item per block",
            children=(
                _walks(
                    "the walks of the tile rows",
                    _fused_phases()
                    + (
                        Expect(
                            "fused_tail",
                            "i < kTileH * kTileW; i += nthreads",
                            lambda c: c.per_warp(c.tile),
                            "16 x 32 pixels",
                        ),
                    ),
                ),
            ),
        ),
    ),
    "tiled_grad_kernel": (
        Expect(
            "items",
            "n < band.n1; n += b.grid_z()",
            ONE,
            "grid.z = the band's items",
            children=(
                _walks(
                    "the walks of the band's tile rows",
                    (
                        Expect(
                            "tile_won",
                            "j < rows * cols; j += nthreads",
                            lambda c: c.per_warp(c.tile),
                            "HDR only: the tile's 16 x 32 pixels (no halo)",
                            entry=lambda c: 1.0 if c.hdr else 0.0,
                        ),
                        *_fused_phases(),
                        Expect(
                            "tiled_tail_vjp",
                            "i < kTileH * kTileW; i += nthreads",
                            lambda c: c.per_warp(c.tile) if c.computes else 0.0,
                            "16 x 32 pixels",
                        ),
                        Expect(
                            "tiled_zero_planes",
                            "i < kTileH * kTileW; i += nthreads",
                            lambda c: c.per_warp(c.tile),
                            "HDR, a tile the exposure won nowhere: 16 x 32 pixels",
                            entry=lambda c: 0.0 if c.computes else 1.0,
                        ),
                    ),
                ),
            ),
        ),
    ),
    "tiled_transpose_kernel": (
        Expect(
            "item-images",
            "(band.n1 - band.n0) * images; z += b.grid_z()",
            ONE,
            "grid.z = the band's items x wanted images",
            children=(
                Expect(
                    "tile rows",
                    "ty < tiles_y; ty += b.grid_y()",
                    ONE,
                    "grid.y = the band's tile rows",
                    children=(
                        Expect(
                            "tile_won",
                            "j < rows * cols; j += nthreads",
                            lambda c: c.per_warp(c.rows * c.cols),
                            "HDR only: the tile and its R halo",
                            entry=lambda c: 1.0 if c.hdr else 0.0,
                        ),
                        Expect(
                            "tiled_transpose_load",
                            "i < rc; i += nthreads",
                            lambda c: c.per_warp(c.rows * c.cols) if c.computes else 0.0,
                            "the gradient planes' tile and halo: (16+2R)(32+2R) pixels",
                        ),
                        Expect(
                            "tiled_vertical_transpose",
                            "i < tasks; i += nthreads",
                            lambda c: c.per_warp(c.facts["tile_h"] * c.cols) if c.computes else 0.0,
                            "16 rows x (32+2R) columns, a row each (radii read at run time)",
                            children=_vertical_t_folds(ONE_ROW),
                        ),
                        Expect(
                            "tiled_horizontal_transpose",
                            "i < kTileH * kTileW; i += nthreads",
                            lambda c: c.per_warp(c.tile) if c.computes else 0.0,
                            "16 x 32 pixels",
                            children=sum((transposed(f, "x") for f in ("y", "cx", "cz1", "cz2", "dg", "ddg", "g")), ()),
                        ),
                    ),
                ),
            ),
        ),
    ),
}


def table_for(kernel):
    """TRIP_TABLE's loops of a kernel as compiled: one compiled for fixed radii has its filters'
    tap loops unrolled (filter_sums.h, correlate), so their multiply-adds are straight-line code of the
    loop around them, run once per iteration of it; transposed_sum's border folds stay loops."""

    if kernel == base_name(kernel):
        return TRIP_TABLE[kernel]
    halo = max(int(r) for r in kernel.split("<")[1].rstrip(">").split(","))

    def fixed(expects):
        out = []
        for e in expects:
            if e.cascade and e.text in (PLAIN, ODD, CENTRED):
                continue
            if e.name == "kept rows":  # the loop over the chunks of 2R rows unrolls too
                out += unrolled_keep_rows(e, halo)
                continue
            if e.name == "fused_horizontal":  # register-blocked: kHorizontalColumns columns a thread
                e = dataclasses.replace(
                    e,
                    trips=lambda c: c.loaded(c.facts["tile_w"] // c.facts["horizontal_columns"]),
                    why="(16+2R) or 16 new rows x 32 columns, kHorizontalColumns columns each",
                )
            if e.name == "fused_vertical":  # register-blocked: kVerticalRows rows a thread
                e = dataclasses.replace(
                    e,
                    trips=lambda c: c.per_warp(2 * c.tile // VERTICAL_ROWS(c)) if c.computes else 0.0,
                    why="both images' 16 x 32 pixels, kVerticalRows rows of a column each",
                )
            if e.name == "tiled_vertical_transpose":  # register-blocked, as fused_vertical
                e = dataclasses.replace(
                    e,
                    trips=lambda c: c.per_warp(c.facts["tile_h"] // VERTICAL_ROWS(c) * c.cols) if c.computes else 0.0,
                    why="16 rows x (32+2R) columns, kVerticalRows rows of a column each",
                    children=_vertical_t_folds(VERTICAL_ROWS),
                )
            out.append(dataclasses.replace(e, children=fixed(e.children)))
        return tuple(out)

    return fixed(TRIP_TABLE[base_name(kernel)])


def unrolled_keep_rows(kept, halo, tile_h=16):
    """tile_forward_block's loop over the chunks of the 2R kept rows (kTileH = 16 rows each, the
    last one the rest) for a fixed halo R: one fused_keep_rows loop per chunk, each entered as the
    loop was."""
    (body,) = kept.children
    return [
        dataclasses.replace(
            body,
            name=f"fused_keep_rows, rows {c}-{c + rows - 1}",
            trips=lambda ctx, rows=rows: ctx.per_warp(14 * rows * ctx.facts["tile_w"]),
            why=f"2 images x 7 planes x {rows} rows x 32 columns",
            entry=kept.entry,
        )
        for c in range(0, 2 * halo, tile_h)
        for rows in [min(tile_h, 2 * halo - c)]
    ]


# ---- matching the table to the SASS ---------------------------------------------------------


class Source:
    """Source lines by file, for the text of a loop's closing line."""

    def __init__(self):
        self.files = {}

    def line(self, path, number):
        if path not in self.files:
            try:
                self.files[path] = open(path).read().splitlines()
            except OSError:
                self.files[path] = []
        lines = self.files[path]
        return " ".join(lines[number - 1].split()) if 0 < number <= len(lines) else ""


@dataclasses.dataclass
class Group:
    """One source loop as the SASS has it: one loop, or the pieces of an unrolled cascade."""

    loops: list
    location: tuple
    text: str


def group_loops(cfg, loops, source):
    """Sibling loops in code order, those of one unrolled filter loop taken together: consecutive
    loops closed by the same source line with fewer multiply-adds each (16, then 4)."""
    groups = []
    for lp in loops:
        loc = cfg.latch_location(lp)
        fmas = cfg.fma_count(lp.blocks)
        last = groups[-1] if groups else None
        if (
            last is not None
            and last.location == loc
            and not lp.children
            and not last.loops[-1].children
            and 0 < fmas < cfg.fma_count(last.loops[-1].blocks)
        ):
            last.loops.append(lp)
        else:
            groups.append(Group([lp], loc, source.line(*loc)))
    return groups


@dataclasses.dataclass
class Assignment:
    """The table's counts for one kernel, ready for sa.heaviest_path, and what did not match."""

    counts: dict = dataclasses.field(default_factory=dict)  # loop header block -> LoopCount
    block_weight: dict = dataclasses.field(default_factory=dict)  # block -> multiplier (cascade steps)
    problems: list = dataclasses.field(default_factory=list)
    rows: list = dataclasses.field(default_factory=list)  # (path, expect, group, trips, entry)
    steps: dict = dataclasses.field(default_factory=dict)  # path -> a filter loop's straight-line blocks
    issued: dict = dataclasses.field(default_factory=dict)  # path -> warp-instructions per warp, inclusive
    pipes: dict = dataclasses.field(default_factory=dict)  # path -> sa.Counts per warp, inclusive
    total: Optional[sa.Counts] = None  # per warp of a block, the whole kernel
    phases: list = dataclasses.field(default_factory=list)  # (path, sa.Counts): see phase_clocks


def cascade_steps(cfg, groups, cascades, own_blocks):
    """The straight-line pieces of the unrolled filter loops among `groups` (those whose index is in
    `cascades`): each block of the enclosing code with multiply-adds of a filter loop's source line
    goes to the filter loop of that line whose first loop shares the most dominators with it (ties:
    the earlier loop). A remainder step before its loops is dominated by the code that sets them
    up, which comes after the previous filter loop; a tail after its loops is not dominated by
    anything of the next one. Returns group index -> [(address, steps, optional, block)], optional
    = the predicated multiply-adds."""
    steps = {k: [] for k in cascades}
    heads = {k: cfg.dominators[groups[k].loops[0].header] for k in cascades}
    for b in sorted(own_blocks):
        by_line = {}
        for x in cfg.instructions([b]):
            if x.base in sa.FMA_OPCODES:
                n = by_line.setdefault((x.file, x.line), [0, 0])
                n[1 if x.predicate and x.predicate != "@PT" else 0] += 1
        for loc, (plain, predicated) in by_line.items():
            near = [k for k in cascades if groups[k].location == loc]
            if near:
                k = max(near, key=lambda j: (len(cfg.dominators[b] & heads[j]), -j))
                steps[k].append((cfg.address(b), plain, predicated, b))
    return steps


def assign(cfg, ctx, expects, loops, own_blocks, source, out, path=""):
    groups = group_loops(cfg, loops, source)
    found = [g.text for g in groups]
    if len(groups) != len(expects) or any(e.text not in g.text for e, g in zip(expects, groups)):
        out.problems.append(f"{path or 'kernel body'}: expected loops {[e.text for e in expects]}, found {found}")
        return
    cascades = [k for k, e in enumerate(expects) if e.cascade]
    straight = cascade_steps(cfg, groups, cascades, own_blocks)
    for k, (e, g) in enumerate(zip(expects, groups)):
        where = f"{path}/{e.name}" if path else e.name
        trips, entry = e.trips(ctx), e.entry(ctx)
        out.rows.append((where, e, g, trips, entry))
        if not e.cascade:
            if len(g.loops) != 1:
                out.problems.append(f"{where}: one loop expected, found {len(g.loops)} pieces")
                continue
            out.counts[g.loops[0].header] = sa.LoopCount(trips, entry)
            lp = g.loops[0]
            assign(cfg, ctx, e.children, lp.children, lp.own, source, out, where)
            continue
        if e.children or any(lp.children for lp in g.loops):
            out.problems.append(f"{where}: a filter loop with loops inside")
            continue
        pieces = sorted(
            [(cfg.address(lp.header), "loop", cfg.fma_count(lp.blocks), 0, lp) for lp in g.loops]
            + [(a, "step", n, opt, b) for a, n, opt, b in straight[k]],
            key=lambda p: p[0],
        )
        shape = [(kind, n, opt) for _, kind, n, opt, _ in pieces]
        runs, left = sa.cascade_counts(int(round(trips)), shape)
        if left:
            out.problems.append(f"{where}: its pieces {shape} leave {left} of {trips} iterations undone")
        out.steps[where] = [obj for _, kind, _, _, obj in pieces if kind == "step"]
        for (_, kind, _, _, obj), n in zip(pieces, runs):
            if kind == "loop":
                out.counts[obj.header] = sa.LoopCount(n, entry)
            else:
                out.block_weight[obj] = n * entry


def kernel_cost(cfg, ctx, table, source):
    """Issued warp-instructions per warp of one block of the kernel, with the table's assignment
    (whose `total` holds the per-pipe costs of the same path, sass_analysis.Counts)."""
    out = Assignment()
    if cfg.problems:
        out.problems.extend(cfg.problems)
        return None, out
    root_own = set(cfg.reachable) - set().union(*(lp.blocks for lp in cfg.loops))
    assign(cfg, ctx, table, cfg.loops, root_own, source, out)
    if out.problems:
        return None, out
    memo = {}
    counted = {}

    def weight(b):
        if cfg.calls_slow_path(b):
            return sa.Counts()
        if b not in counted:
            counted[b] = sa.block_counts(cfg.instructions([b]))
        return counted[b] * out.block_weight.get(b, 1.0)

    def loop_cost(lp):
        count = out.counts.get(lp.header)
        if count is None:  # a loop the table does not know: cannot happen once assign() matched
            raise KeyError(f"loop at {cfg.address(lp.header):#x} has no trip count")
        if count.trips == 0 or count.entry == 0:
            return sa.Counts()
        if lp.header not in memo:
            memo[lp.header] = sa.heaviest_path(cfg, lp, weight, loop_cost)
        return count.entry * count.trips * memo[lp.header]

    try:
        out.total = sa.heaviest_path(cfg, None, weight, loop_cost)
    except ValueError as exc:
        out.problems.append(str(exc))
        return None, out

    def enclosing(lp):  # iterations per warp of the code around loop lp
        m, p = 1.0, lp.parent
        while p is not None:
            m *= out.counts[p.header].entry * out.counts[p.header].trips
            p = p.parent
        return m

    for where, _, g, _, _ in out.rows:  # what each source loop issues, inner loops included
        around = enclosing(g.loops[0])
        out.pipes[where] = sum((enclosing(lp) * loop_cost(lp) for lp in g.loops), sa.Counts()) + around * sum(
            (weight(b) for b in out.steps.get(where, [])), sa.Counts()
        )
        out.issued[where] = out.pipes[where]["instructions"]
    # The phases: the innermost loops of the table (their only inner loops a filter's taps, which
    # are part of the phase, not phases of their own), which barriers separate in the tiled
    # kernels; what is left of the kernel is one more.
    rest = out.total
    for where, e, _, _, _ in out.rows:
        if not e.cascade and all(c.cascade for c in e.children):
            out.phases.append((where, out.pipes[where]))
            rest = rest + out.pipes[where] * -1.0
    out.phases.append(("the rest", sa.Counts({k: max(v, 0.0) for k, v in rest.items()})))
    return out.total["instructions"], out


def phase_clocks(phases):
    """SM-clocks per warp if the phases ran one after another, each at its own busiest pipe: the sum
    of the phases' maxima, never less than the maximum of their sums (what a whole kernel whose
    phases overlap perfectly needs). Between the two lies the truth for blocks whose phases end at
    barriers while another block on the SM may be in a different phase."""
    return sum(max(c[p] for p in sa.PIPES) for _, c in phases)


# ---- the report -----------------------------------------------------------------------------


def analyse(args):
    """Compiles csrc/flip/cuda/kernels.cu as setup.py does (its nvcc flags, torch's common ones) for
    sm_90 into a cubin (kept in build/sass, keyed by nvcc's version, the flags and the sources, for
    an identical compile to reuse; --no-cache compiles afresh), the other generations' SASS (the
    built module's, or compiled likewise), and benchmarks/sass_launch_facts.cpp for the host (radii,
    tiles, shared memory, the backward's bands, straight from the kernels' headers). Tools: nvcc
    (and ptxas) from CUDA_HOME or PATH; nvdisasm and cuobjdump from --tools-dir, PATH,
    CUDA_HOME/bin or the PyPI wheels on sys.path (nvidia-cuda-nvdisasm, nvidia-cuda-cuobjdump)."""
    notes = []
    nvcc = find_tool("nvcc", None)
    nvdisasm = find_tool("nvdisasm", args.tools_dir)
    cuobjdump = find_tool("cuobjdump", args.tools_dir)
    missing = [n for n, p in (("nvcc", nvcc), ("nvdisasm", nvdisasm), ("cuobjdump", cuobjdump)) if not p]
    if missing:
        sys.exit(
            f"sass_report: {', '.join(missing)} not found (pip install -r benchmarks/requirements-sass.txt "
            "for nvdisasm and cuobjdump; nvcc comes with the CUDA toolkit)"
        )
    width, height = (int(v) for v in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory(prefix="flip_sass_") as work:
        cache = None if args.no_cache else CACHE_DIR
        cubin, ptxas_log, compile_line = compile_kernels(nvcc, work, notes, cache_dir=cache)
        disasm = subprocess.run([nvdisasm, "-c", "-g", cubin], capture_output=True, text=True, check=True).stdout
        res = subprocess.run([cuobjdump, "-res-usage", cubin], capture_output=True, text=True, check=True).stdout
        facts = launch_facts(work, args.ppd, width, height, 1, args.wanted, 4)
        ptxas = parse_ptxas(ptxas_log)
        sm90 = {kernel_key(m): p["registers"] for m, p in ptxas.items() if kernel_key(m) is not None}
        arches = sorted({sass_of(c) for c in args.generations}, key=capability)
        sass = generation_resources(arches, args, nvcc, cuobjdump, work, notes, cache, sm90)
    usage = parse_res_usage(res)
    functions = sa.parse_nvdisasm(disasm)
    source = Source()

    kernels = {}
    for mangled, f in functions.items():
        key = kernel_key(mangled)
        if key is None or mangled not in ptxas:
            continue
        name, dtype = key
        elem = 4 if dtype == "float32" else 8
        p = ptxas[mangled]
        u = usage.get(mangled, {})
        if u and u.get("REG") != p["registers"]:
            notes.append(f"{name} ({dtype}): ptxas says {p['registers']} registers, cuobjdump {u.get('REG')}")
        threads, dyn = launch_config(name, facts, elem)
        occ = sa.occupancy(threads, p["registers"], p["static_smem"] + dyn, barriers=p["barriers"])
        kernels[(name, dtype)] = {
            "kernel": name,
            "dtype": dtype,
            "instructions": len(f.instructions),
            "threads": threads,
            "dynamic_smem": dyn,
            **p,
            "occupancy": occ,
            "_function": f,
        }
    for resources in sass.values():  # barriers and static shared memory: the source's, the same on every target
        for key, r in resources["kernels"].items():
            same = next((p for m, p in ptxas.items() if kernel_key(m) == key), None)
            r.update(barriers=same["barriers"] if same else 1, static_smem=same["static_smem"] if same else 0)
    facts["generations"] = sass
    return (
        facts,
        kernels,
        notes,
        compile_line,
        {"nvcc": tool_version(nvcc), "nvdisasm": tool_version(nvdisasm), "cuobjdump": tool_version(cuobjdump)},
        source,
        (width, height),
    )


# ---- the other GPU generations ---------------------------------------------------------------


def capability(arch):
    return sa.cuda_arches().capability(arch)


def sass_of(arch):
    """The build's SASS target a GPU of compute capability `arch` runs ("8.9" -> "8.6")."""
    code = sa.cuda_arches().runs_on(capability(arch))
    if code is None or not code.startswith("sm_"):
        raise ValueError(f"no SASS of the build runs on compute capability {arch}")
    return f"{code[3:-1]}.{code[-1]}"


def built_module():
    found = sorted(glob.glob(os.path.join(ROOT, "flip_loss", "_C_cuda*.so")))
    return found[0] if found else None


def module_resources(module, cuobjdump):
    """{"sm_80": {(kernel, dtype): {"registers", "stack"}}, ...} of every cubin of a built module
    (cuobjdump -res-usage)."""
    text = subprocess.run([cuobjdump, "-res-usage", module], capture_output=True, text=True).stdout
    out = {}
    for section in text.split("Fatbin elf code:")[1:]:
        arch = re.search(r"^arch = (sm_\d+)$", section, re.M)
        if arch:
            out[arch.group(1)] = {
                kernel_key(m): {"registers": u["REG"], "stack": u["STACK"]}
                for m, u in parse_res_usage(section).items()
                if kernel_key(m) is not None
            }
    return out


def generation_resources(arches, args, nvcc, cuobjdump, work, notes, cache, sm90_registers):
    """Registers and stack per (kernel, dtype) of each SASS target in `arches`: {arch: {"source",
    "kernels"}}. From the built module (this checkout's flip_loss._C_cuda, or --module) when its
    sm_90 cubin has the registers of the sm_90 compile above, kernel for kernel (so it was built
    from these sources with these flags); else each target compiled as setup.py compiles it."""
    module = args.module if args.module is not None else built_module()
    built = module_resources(module, cuobjdump) if module else {}
    same = built.get("sm_90") is not None and {k: r["registers"] for k, r in built["sm_90"].items()} == sm90_registers
    if module and not same:
        notes.append(
            f"{os.path.relpath(module, ROOT)} is not a build of these sources (its sm_90 registers differ, or it "
            "has no sm_90): the other generations compiled"
        )
    out = {}
    for arch in arches:
        sm = "sm_" + arch.replace(".", "")
        if same and sm in built:
            out[arch] = {"source": f"{os.path.relpath(module, ROOT)} ({sm})", "kernels": built[sm]}
            continue
        _, log, _ = compile_kernels(nvcc, work, notes, cache_dir=cache, arch=arch)
        kernels = {
            kernel_key(m): {"registers": p["registers"], "stack": p["stack"]} for m, p in parse_ptxas(log).items()
        }
        out[arch] = {"source": f"nvcc -gencode=arch=compute_{sm[3:]},code={sm}", "kernels": kernels}
    return out


# The kernels LDR-FLIP launches, per formulation (csrc/flip/cuda/op_launches.h): a forward; a loss's
# forward+backward as autograd runs it when it keeps the sensitivities.
PLAN_KERNELS = {
    ("forward", True): ("fused_forward_kernel",),
    ("forward", False): ("horizontal_pass_kernel", "vertical_ldr_kernel"),
    ("forward+backward", True): ("tiled_grad_kernel", "tiled_transpose_kernel"),
    ("forward+backward", False): (
        "horizontal_pass_kernel",
        "vertical_ldr_keep_kernel",
        "ldr_kept_grad_kernel",
        "vertical_transpose_kernel",
        "horizontal_transpose_kernel",
    ),
}


def row_launch_bytes(kernel, facts, width, height, wanted_images, elem=4):
    """Bytes a row-pass launch of LDR-FLIP reads and writes at least (csrc/flip/cuda/row_passes.h):
    the horizontal pass writes each image's 7 filtered planes, the vertical pass reads them; the
    backward's planes likewise, per image whose gradient is wanted. (read, written)."""
    hw, planes, responses, k = width * height, facts["planes"], facts["grad_planes"], wanted_images
    table = {
        "horizontal_pass_kernel": (2 * 3, 2 * planes),
        "vertical_ldr_kernel": (2 * planes, 1),
        "vertical_ldr_keep_kernel": (2 * planes, 1 + k * responses),  # the map and the kept sensitivities
        "ldr_kept_grad_kernel": (k * responses + 1, k * responses),  # times the incoming gradient
        "vertical_transpose_kernel": (k * responses, k * planes),
        "horizontal_transpose_kernel": (k * planes + k * 3, k * 3),  # the input image for the chain to it
    }
    read, written = table[kernel]
    return read * hw * elem, written * hw * elem


def generations(facts, size, which):
    """Per GPU generation (sa.GENERATIONS): the formulation LDR-FLIP runs in float32 at this ppd (the
    launchers' choice from the shared memory per block, launch_params.h), the occupancy of each kernel it
    launches with the registers of the SASS that generation runs, and the compulsory global-memory
    bytes of a forward and of a loss's forward+backward (autograd keeping the sensitivities)."""
    width, height = size
    wanted = facts["kept_band"]["images"]
    out = []
    for arch in which:
        limits = sa.GENERATIONS[arch]
        target = sass_of(arch)
        resources = facts["generations"].get(target)
        if resources is None:
            continue
        fused, tiled, rows_fit = facts["plans"][str(limits.smem_per_block_optin)]["float32"]
        row = {
            "capability": arch,
            "name": limits.name,
            "sass": "sm_" + target.replace(".", ""),
            "registers_from": resources["source"],
            "forward": "fused" if fused else "row passes",
            "backward": "tiled" if tiled else "row passes",
            "row_passes_fit": bool(rows_fit),
            "kernels": [],
            "bytes": {},
        }
        for scenario, tiles in (("forward", bool(fused)), ("forward+backward", bool(tiled))):
            total = 0
            for name in PLAN_KERNELS[scenario, tiles]:
                fixed = f"{name}<{facts['r_csf']},{facts['r_feat']}>"
                name = fixed if (fixed, "float32") in resources["kernels"] else name
                r = resources["kernels"].get((name, "float32"))
                if r is None:
                    continue
                threads, dyn = launch_config(name, facts, 4)
                occ = sa.occupancy(threads, r["registers"], r["static_smem"] + dyn, limits, barriers=r["barriers"])
                row["kernels"].append(
                    {"kernel": name, "scenario": scenario, "threads": threads, "smem": r["static_smem"] + dyn}
                    | {"registers": r["registers"], "stack": r["stack"], "occupancy": occ}
                )
                if not tiles:
                    total += sum(row_launch_bytes(base_name(name), facts, width, height, wanted))
                elif scenario == "forward":
                    total += sum(launch_bytes(name, Ctx(facts, width, height, False, True)))
                else:
                    total += sum(launch_bytes(name, Ctx(facts, width, height, False, True, facts["kept_band"], True)))
            row["bytes"][scenario] = total
        out.append(row)
    return out


def launch_bytes(kernel, ctx, elem=4):
    """Bytes one launch reads from and writes to global memory at least (each input, output and
    scratch element once; the halos' re-reads of neighbouring tiles are left to the 50 MB L2), from
    the launch geometry and what csrc/flip/cuda/kernel_bodies.h reads and writes: (read, written)."""
    f, w, h = ctx.facts, ctx.width, ctx.height
    hw, planes = w * h, f["grad_planes"]
    index = 4  # HDR-FLIP's winning index: int32
    name = base_name(kernel)
    if name == "fused_forward_kernel":
        read = 2 * 3 * hw * elem  # both images, 3 channels
        written = hw * elem  # the map
        if ctx.hdr:  # the running maximum: map, exposure map and index, read and written
            read += hw * (2 * elem + index)
            written += hw * (elem + index)
        return read, written
    b = ctx.band
    items = b["n1"] - b["n0"]
    grows = b["g1"] - b["g0"]  # gradient-plane rows
    orows = b["y1"] - b["y0"]  # output rows
    kept = ctx.kept
    if name == "tiled_grad_kernel":
        inrows = min(b["g1"] + f["R"], h) - max(b["g0"] - f["R"], 0)
        read = items * 2 * 3 * inrows * w * elem if ctx.computes else 0
        written = items * b["images"] * planes * grows * w * elem  # the planes (zero when skipped)
        if kept:
            written += items * grows * w * elem  # the map
        else:
            read += items * grows * w * elem  # the incoming gradient
        if ctx.hdr:
            read += items * grows * w * index
        return read, written
    if name == "tiled_transpose_kernel":
        per_image = items * b["images"]
        read = per_image * ((planes * grows + 3 * orows) * w * elem if ctx.computes else 0)
        if kept:
            read += per_image * grows * w * elem  # the incoming gradient, times the kept planes
        written = per_image * 3 * orows * w * elem if ctx.computes else 0
        if ctx.hdr:  # accumulated over the exposures: read too; the index decides the skip
            read += written + per_image * grows * w * index
        return read, written
    raise KeyError(f"no byte count for {kernel}")


def launch_bounds(k, blocks, per_warp, nbytes, phased=None):
    """Each pipe's time for a launch (seconds; blocks spread evenly over the SMs, partial waves as
    fractions), the launch's compute time in whole waves of its busiest pipe, its memory time, and
    the larger: the estimate of the launch, with the pipe (or "memory") that sets it. phased:
    SM-clocks per warp with the phases serialised (phase_clocks): the same in whole waves, as
    "phased_s", a higher estimate."""
    warps = -(-k["threads"] // 32)
    bps = k["occupancy"]["blocks_per_sm"]
    block = per_warp * warps  # SM-clocks of one block, per pipe
    pipes = {p: blocks * block[p] / GPU_SMS / GPU_CLOCK_HZ for p in sa.PIPES}
    busiest = max(sa.PIPES, key=lambda p: block[p])
    waves, whole_waves = sa.waves(blocks, GPU_SMS, bps)
    compute = sa.launch_clocks(blocks, GPU_SMS, bps, block[busiest]) / GPU_CLOCK_HZ
    whole = sa.launch_clocks(blocks, GPU_SMS, bps, block[busiest], whole_waves=True) / GPU_CLOCK_HZ
    memory = sum(nbytes) / GPU_HBM_BYTES_PER_S
    return {
        "pipes_s": pipes,
        "busiest_pipe": busiest,
        "waves": waves,
        "whole_waves": whole_waves,
        "compute_s": compute,
        "bytes_read": nbytes[0],
        "bytes_written": nbytes[1],
        "memory_s": memory,
        "bound_s": max(compute, memory),
        "whole_waves_s": max(whole, memory),
        "limited_by": busiest if compute >= memory else "memory",
        "phased_s": max(
            memory,
            sa.launch_clocks(blocks, GPU_SMS, bps, max(block[busiest], (phased or 0.0) * warps)) / GPU_CLOCK_HZ,
        ),
    }


def estimate(facts, kernels, source, size, exposures):
    """Warp-instructions of the launches of each scenario (float32, batch 1), and each launch's
    bound by every pipe, by its whole waves and by memory (launch_bounds).

    The issue-bound time: issued warp-instructions (sass_analysis.py states the counting rules)
    divided by the GPU's issue rate, 132 SMs x 4 schedulers x 1 warp-instruction per clock x 1.98
    GHz on an H200, the time if every scheduler were busy every clock. The stricter bound: the same
    path's cost on every pipe that can limit a kernel (issue slots, the FMA and ALU pipes, float64,
    the special-function/conversion unit, the shared-memory and L1 data paths: sass_analysis.PIPES
    states their rates and where they come from), the busiest pipe on the busiest SM (the partial
    last wave too; and with every partial wave charged as a full one), against the kernel's
    compulsory global-memory bytes at the HBM's 4.8 TB/s; the larger is the launch's bound. "phased"
    runs the phases of a tiled kernel (its innermost loops, between barriers) one after another,
    each at its own busiest pipe. The occupancy column says how many warps there are to hide
    latency with."""
    width, height = size
    tiles_x = -(-width // facts["tile_w"])
    tiles_y = -(-height // facts["tile_h"])
    cfgs = {}
    problems = {}
    rows = {}

    def walks(tile_rows):  # the fused forward and kTiledGrad: one block per walk (fused_forward.h)
        return -(-tile_rows // facts["walk_tiles"])

    def launch(kernel, ctx, blocks):
        # The launch sequences (csrc/flip/cuda/op_launches.h) run the kernel compiled for the taps'
        # radii where there is one.
        fixed = f"{kernel}<{facts['r_csf']},{facts['r_feat']}>"
        if (fixed, "float32") in kernels:
            kernel = fixed
        k = kernels.get((kernel, "float32"))
        if k is None:
            problems.setdefault(kernel, ["kernel not found in the cubin"])
            return None
        cfg = cfgs.setdefault(kernel, sa.Cfg(k["_function"]))
        per_warp, a = kernel_cost(cfg, ctx, table_for(kernel), source)
        if a.problems:
            problems.setdefault(kernel, a.problems)
            return None
        rows.setdefault((kernel, ctx.hdr, ctx.computes), [(*r, a.issued[r[0]], a.pipes[r[0]]) for r in a.rows])
        warps = -(-k["threads"] // 32)
        return {
            "kernel": kernel,
            "blocks": blocks,
            "warp_instructions_per_warp": per_warp,
            "warp_instructions": blocks * warps * per_warp,
            "per_warp": a.total,
            "bounds": launch_bounds(k, blocks, a.total, launch_bytes(kernel, ctx), phase_clocks(a.phases)),
        }

    fused = {
        hdr: launch("fused_forward_kernel", Ctx(facts, width, height, hdr, True), tiles_x * walks(tiles_y))
        for hdr in (False, True)
    }
    backward = {}
    for hdr, computes in ((False, True), (True, True), (True, False)):
        launches = []
        for b in facts["bands"]:
            ctx = Ctx(facts, width, height, hdr, computes, b)
            k1 = launch("tiled_grad_kernel", ctx, tiles_x * walks(b["grad_tiles_y"]) * (b["n1"] - b["n0"]))
            k2 = launch(
                "tiled_transpose_kernel",
                ctx,
                tiles_x * -(-(b["y1"] - b["y0"]) // facts["tile_h"]) * (b["n1"] - b["n0"]) * b["images"],
            )
            launches += [k1, k2]
        backward[(hdr, computes)] = launches
    # ldr_flip's autograd keeping the sensitivities: kTiledGrad (the forward) and kTiledTranspose (the
    # backward) over the whole batch as one band.
    kb = facts["kept_band"]
    kctx = Ctx(facts, width, height, False, True, kb, True)
    kept = [
        launch("tiled_grad_kernel", kctx, tiles_x * walks(kb["grad_tiles_y"]) * (kb["n1"] - kb["n0"])),
        launch(
            "tiled_transpose_kernel",
            kctx,
            tiles_x * -(-(kb["y1"] - kb["y0"]) // facts["tile_h"]) * (kb["n1"] - kb["n0"]) * kb["images"],
        ),
    ]

    def total(launches, what="warp_instructions"):
        if any(x is None for x in launches):
            return None
        return sum(x[what] if what == "warp_instructions" else x["bounds"][what] for x in launches)

    rate = sa.issue_rate(GPU_SMS, GPU_SCHEDULERS_PER_SM, GPU_CLOCK_HZ)
    pixels = width * height
    fwd = total([fused[False]])
    bwd = total(backward[(False, True)])
    hdr_fwd = total([fused[True]])
    hdr_bwd_full = total(backward[(True, True)])
    hdr_bwd_skip = total(backward[(True, False)])

    def scen(name, instructions, target, launches, assumption, groups=None):
        limit = None if groups is None else bound(*groups)
        phased = None if groups is None else bound(*groups, what="phased_s")
        waved = None if groups is None else bound(*groups, what="whole_waves_s")
        if (width, height) != TARGET_SIZE:
            target = None
        return {
            "scenario": name,
            "launches": launches,
            "warp_instructions": instructions,
            "per_pixel": None if instructions is None else instructions / pixels,
            "issue_bound_ms": None if instructions is None else instructions / rate * 1e3,
            "pipe_bound_ms": None if limit is None else limit * 1e3,
            "phased_bound_ms": None if phased is None else phased * 1e3,
            "whole_waves_bound_ms": None if waved is None else waved * 1e3,
            "target_ms": target,
            "assumption": assumption,
        }

    def launched(*groups):  # (launches, times run) of a scenario
        return groups

    def bound(*groups, what="bound_s"):  # the launches' bounds summed: (launches, times run)
        parts = [total(launches, what) for launches, _ in groups]
        return None if None in parts else sum(p * times for p, (_, times) in zip(parts, groups))

    e = exposures
    whose = "the test image" if facts["bands"][0]["images"] == 1 else "both images"
    recomputing = scen(
        "forward+backward" if not facts["keeps_sensitivities"] else "forward+backward, recomputing",
        None if fwd is None or bwd is None else fwd + bwd,
        TARGETS_MS["forward+backward"] if not facts["keeps_sensitivities"] else None,
        1 + len(backward[(False, True)]),
        f"the fused forward, then the tiled backward: {len(facts['bands'])} bands x (kTiledGrad + kTiledTranspose), "
        f"gradient of {whose}"
        + (
            ""
            if facts["keeps_sensitivities"]
            else f" (its {facts['kept_bytes'] / 2**20:.1f} MiB of sensitivities are past what CUDA keeps)"
        ),
        launched(([fused[False]], 1), (backward[(False, True)], 1)),
    )
    scenarios = [
        scen(
            "forward",
            fwd,
            TARGETS_MS["forward"],
            1,
            "ldr_flip: the fused forward, one launch",
            launched(([fused[False]], 1)),
        )
    ]
    if facts["keeps_sensitivities"]:
        scenarios.append(
            scen(
                "forward+backward",
                total(kept),
                TARGETS_MS["forward+backward"],
                2,
                f"autograd keeping the sensitivities of {whose} ({facts['kept_bytes'] / 2**20:.1f} MiB): kTiledGrad "
                "over the whole image as the forward, kTiledTranspose as the backward",
                launched((kept, 1)),
            )
        )
    scenarios += [
        recomputing,
        scen(
            f"hdr forward+backward, {e} exposures, every tile computed",
            None if None in (hdr_fwd, hdr_bwd_full) else e * (hdr_fwd + hdr_bwd_full),
            TARGETS_MS["hdr forward+backward"],
            e * (1 + len(backward[(True, True)])),
            "upper bound: no tile skips an exposure in the backward",
            launched(([fused[True]], e), (backward[(True, True)], e)),
        ),
        scen(
            f"hdr forward+backward, {e} exposures, each tile won by one",
            None
            if None in (hdr_fwd, hdr_bwd_full, hdr_bwd_skip)
            else e * hdr_fwd + hdr_bwd_full + (e - 1) * hdr_bwd_skip,
            TARGETS_MS["hdr forward+backward"],
            e * (1 + len(backward[(True, True)])),
            "lower bound: the backward computes each tile for one exposure and skips it for the others",
            launched(([fused[True]], e), (backward[(True, True)], 1), (backward[(True, False)], e - 1)),
        ),
    ]
    per_kernel = {}
    for x in [fused[False], *(kept if facts["keeps_sensitivities"] else backward[(False, True)])]:
        if x is not None:
            d = per_kernel.setdefault(
                x["kernel"],
                {
                    "blocks": 0,
                    "warp_instructions": 0.0,
                    "per_warp": x["warp_instructions_per_warp"],
                    "pipes_per_warp": dict(x["per_warp"]),
                    "launches": [],
                },
            )
            d["blocks"] += x["blocks"]
            d["warp_instructions"] += x["warp_instructions"]
            d["launches"].append(x["bounds"])
    return {
        "scenarios": scenarios,
        "per_kernel": per_kernel,
        "problems": problems,
        "rows": rows,
        "issue_rate": rate,
        "pixels": pixels,
    }


def fmt_bytes(n):
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{n} B"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the report as JSON to this file ('-': stdout, no table)")
    p.add_argument("--size", default="1920x1080", help="WxH of the image (default 1920x1080)")
    p.add_argument("--ppd", type=float, default=None, help="pixels per degree (default: flip_loss's, 67.02)")
    p.add_argument(
        "--exposures",
        type=int,
        default=9,
        help="HDR-FLIP exposures (default 9: what the automatic exposures give for "
        "benchmarks/hdr_bench.py's 1080p image)",
    )
    p.add_argument(
        "--wanted",
        type=int,
        choices=(1, 3),
        default=1,
        help="gradients of the backward: 1 the test image's (a loss; default), 3 both",
    )
    p.add_argument("--tools-dir", help="folder holding nvdisasm and cuobjdump")
    p.add_argument(
        "--generations",
        default=",".join(sa.GENERATIONS),
        help="compute capabilities to report the formulation and occupancy of (default: "
        + ",".join(sa.GENERATIONS)
        + "; their SASS from the built flip_loss._C_cuda when it is these sources' build, else compiled)",
    )
    p.add_argument(
        "--module",
        help="the built flip_loss._C_cuda to read the generations' SASS from (default: this checkout's), used "
        "when its sm_90 registers are the sm_90 compile's",
    )
    p.add_argument("--loops", action="store_true", help="also print the trip-count table as matched")
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="compile afresh (default: reuse build/sass's cubin of the same nvcc, flags and sources)",
    )
    args = p.parse_args(argv)
    args.generations = [a for a in args.generations.split(",") if a]
    unknown = [a for a in args.generations if a not in sa.GENERATIONS]
    if unknown:
        p.error(f"--generations: no limits known for {', '.join(unknown)} (known: {', '.join(sa.GENERATIONS)})")
    if args.ppd is None:
        args.ppd = default_ppd()
    facts, kernels, notes, compile_line, versions, source, size = analyse(args)
    est = estimate(facts, kernels, source, size, args.exposures)
    gens = generations(facts, size, args.generations)
    facts = {k: v for k, v in facts.items() if k != "generations"}  # their resources are in gens
    report = {
        "estimate": True,
        "what": "static estimate from SASS, no GPU: issued warp-instructions / issue rate (issue_bound_ms), and "
        "the larger of the busiest pipe in whole waves and the bytes over HBM bandwidth (pipe_bound_ms); "
        "ignores latency and bank conflicts",
        "gpu": {
            "name": GPU_NAME,
            "sms": GPU_SMS,
            "schedulers_per_sm": GPU_SCHEDULERS_PER_SM,
            "clock_hz": GPU_CLOCK_HZ,
            "issue_rate_per_s": est["issue_rate"],
            "hbm_bytes_per_s": GPU_HBM_BYTES_PER_S,
            "pipe_clocks": sa.CLOCKS,
            "limits": dataclasses.asdict(sa.H200),
        },
        "tools": versions,
        "compile": compile_line,
        "notes": notes,
        "size": f"{size[0]}x{size[1]}",
        "ppd": args.ppd,
        "exposures": args.exposures,
        "facts": facts,
        "kernels": [{k: v for k, v in d.items() if not k.startswith("_")} for d in kernels.values()],
        "per_kernel": est["per_kernel"],
        "scenarios": est["scenarios"],
        "generations": gens,
        "table_problems": est["problems"],
        "loops": {
            f"{k[0]}{' hdr' if k[1] else ''}{'' if k[2] else ' skip'}": [
                {
                    "loop": w,
                    "source": g.text,
                    "sass_loops": len(g.loops),
                    "trips": t,
                    "entry": en,
                    "why": e.why,
                    "issued_per_warp": i,
                    "pipes_per_warp": dict(pc),
                }
                for w, e, g, t, en, i, pc in r
            ]
            for k, r in est["rows"].items()
        },
    }
    for kernel, probs in est["problems"].items():
        print(
            f"sass_report: WARNING: {kernel}: its loops no longer match TRIP_TABLE; no estimate for it:",
            file=sys.stderr,
        )
        for line in probs:
            print(f"  {line}", file=sys.stderr)
    if args.json:
        text = json.dumps(report, indent=1, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as fh:
                fh.write(text + "\n")
    if args.json != "-":
        print_report(report, est, kernels, args)
    return 3 if est["problems"] else 0


def default_ppd():
    """flip_loss's default pixels per degree, from flip_loss/constants.py loaded on its own (the
    package's import would load torch and the extension)."""
    path = os.path.join(ROOT, "flip_loss", "constants.py")
    spec = importlib.util.spec_from_file_location("flip_loss_constants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DEFAULT_PPD


def print_report(report, est, kernels, args):
    f = report["facts"]
    print(
        f"SASS report: a static ESTIMATE (no GPU): sm_90 SASS of csrc/flip/cuda/kernels.cu, nvcc "
        f"{report['tools']['nvcc']}, nvdisasm {report['tools']['nvdisasm']}"
    )
    print(
        f"{report['size']}, ppd {report['ppd']:.2f}: CSF radius {f['r_csf']}, feature radius {f['r_feat']}, "
        f"R {f['R']}; tiles {f['tile_w']}x{f['tile_h']}, {f['fused_threads']} threads; "
        f"backward: {len(f['bands'])} bands"
    )
    for n in report["notes"]:
        print(f"note: {n}")
    print()
    print(
        "Per kernel, float32 (occupancy on an H100/H200 SM: 64K registers, 2048 threads, 32 blocks, "
        "228 KB shared memory):"
    )
    head = (
        f"{'kernel':30} {'threads':>7} {'regs':>4} {'spill st/ld':>11} {'stack':>5} {'smem/block':>10} "
        f"{'blocks/SM':>9} {'occupancy':>9}   {'limited by'}"
    )
    print(head)
    for (name, dtype), k in sorted(kernels.items()):
        if dtype != "float32":
            continue
        o = k["occupancy"]
        print(
            f"{name:30} {k['threads']:>7} {k['registers']:>4} {k['spill_stores']:>5}/{k['spill_loads']:<5} "
            f"{k['stack']:>5} {fmt_bytes(k['static_smem'] + k['dynamic_smem']):>10} {o['blocks_per_sm']:>9} "
            f"{o['occupancy'] * 100:>8.1f}%   {o['limited_by']}"
        )
    f64 = [k for (n, d), k in kernels.items() if d == "float64" and (k["spill_stores"] or k["spill_loads"])]
    if f64:
        print(
            "float64 kernels with spills: "
            + ", ".join(f"{k['kernel']} ({k['spill_stores']}/{k['spill_loads']} B)" for k in f64)
        )
    print()
    print(
        "Issued warp-instructions (estimate), float32, batch 1, LDR-FLIP forward+backward; waves: blocks / "
        f"(blocks per SM x {GPU_SMS} SMs):"
    )
    print(f"{'kernel':30} {'blocks':>7} {'waves':>6} {'per warp':>10} {'total':>12} {'per px':>8}")
    for name, d in est["per_kernel"].items():
        waves = d["blocks"] / (kernels[(name, "float32")]["occupancy"]["blocks_per_sm"] * GPU_SMS)
        print(
            f"{name:30} {d['blocks']:>7} {waves:>6.1f} {d['per_warp']:>10.0f} {d['warp_instructions']:>12.4g} "
            f"{d['warp_instructions'] / est['pixels']:>8.1f}"
        )
    for name in est["problems"]:
        print(f"{name:30} {'-':>7} {'-':>10} {'no estimate: loops differ from TRIP_TABLE':>12}")
    print()
    rate = report["gpu"]["issue_rate_per_s"]
    print(
        f"Issue-bound time on an {GPU_NAME} ({GPU_SMS} SMs x {GPU_SCHEDULERS_PER_SM} x {GPU_CLOCK_HZ / 1e9:.2f} GHz "
        f"= {rate:.3g} warp-instructions/s; memory and latency ignored):"
    )
    print(f"{'scenario':58} {'launches':>8} {'warp-instr':>11} {'per px':>8} {'time':>9} {'target':>8}")
    for s in report["scenarios"]:
        target = f"{s['target_ms']:>5} ms" if s["target_ms"] is not None else f"{'-':>8}"
        if s["warp_instructions"] is None:
            print(f"{s['scenario']:58} {s['launches']:>8} {'-':>11} {'-':>8} {'-':>9} {target}")
            continue
        print(
            f"{s['scenario']:58} {s['launches']:>8} {s['warp_instructions']:>11.4g} {s['per_pixel']:>8.1f} "
            f"{s['issue_bound_ms']:>6.3f} ms {target}"
        )
    for s in report["scenarios"]:
        print(f"  {s['scenario']}: {s['assumption']}")
    print_bounds(report, est)
    print_generations(report)
    if args.loops:
        print()
        print("The trip-count table as matched to the SASS: trips per entry and warp, the probability of")
        print("entering, SASS loops of the source loop, warp-instructions per warp it issues (inner loops included):")
        for key, rows in report["loops"].items():
            print(f"  {key}:")
            for r in rows:
                pc = r["pipes_per_warp"]
                print(
                    f"    {r['loop']:52} {r['trips']:7.3f} {r['entry']:7.4f} {r['sass_loops']:2} "
                    f"{r['issued_per_warp']:9.1f}  ({r['why']})"
                )
                if r["issued_per_warp"]:
                    print(
                        f"    {'':52} shared loads {pc.get('lds', 0):.0f} "
                        f"({100 * pc.get('lds', 0) / r['issued_per_warp']:.0f}%), stores {pc.get('sts', 0):.0f}, "
                        f"wavefronts {pc.get('wavefronts', 0):.0f}; float64 {pc.get('dp', 0):.0f}; "
                        f"MUFU {pc.get('mufu', 0):.0f}; busiest pipe "
                        f"{max(sa.PIPES, key=lambda p: pc.get(p, 0))}"
                    )


def print_bounds(report, est):
    """Each kernel's time by every pipe, by waves and by memory: the stricter estimate."""
    print()
    print(
        f"Bounds per pipe (an ESTIMATE), float32, batch 1, LDR-FLIP forward+backward, ms. Each pipe's time with the "
        f"blocks spread evenly over the {GPU_SMS} SMs (SM-clocks per warp-instruction: issue 1/4, fma 1/4, "
        "IMAD 1/2, alu 1/2, fp64 1/2, xu 2; shared and l1: one per 128-byte wavefront, no bank conflicts); "
        "compute: the busiest pipe on the busiest SM (ceil(blocks / SMs) blocks); waves: whole waves, "
        "each a full one; memory: compulsory bytes (MB) at "
        f"{GPU_HBM_BYTES_PER_S / 1e12:.1f} TB/s; bound: the larger of compute and memory; phased: the "
        "phases one after another, each at its own busiest pipe:"
    )
    print(
        f"{'kernel':30} "
        + " ".join(f"{p:>6}" for p in sa.PIPES)
        + f" {'waves':>9} {'compute':>7} {'MB':>6} {'memory':>6} {'bound':>6} {'waves':>6} {'phased':>6}  limited by"
    )
    for name, d in est["per_kernel"].items():
        ls = d["launches"]

        def tot(key, ls=ls):
            return sum(x[key] for x in ls) * 1e3

        pipes = {p: sum(x["pipes_s"][p] for x in ls) * 1e3 for p in sa.PIPES}
        waves = "+".join(f"{x['waves']:.1f}" for x in ls) + "->" + str(sum(x["whole_waves"] for x in ls))
        print(
            f"{name:30} " + " ".join(f"{pipes[p]:6.3f}" for p in sa.PIPES) + f" {waves:>9} {tot('compute_s'):7.3f} "
            f"{sum(x['bytes_read'] + x['bytes_written'] for x in ls) / 1e6:6.1f} {tot('memory_s'):6.3f} "
            f"{tot('bound_s'):6.3f} {tot('whole_waves_s'):6.3f} {tot('phased_s'):6.3f}  "
            + ", ".join(sorted({x["limited_by"] for x in ls}))
        )
    print()
    print(f"Pipe-bound time on an {GPU_NAME} (an ESTIMATE; the issue-bound time above for comparison):")
    cols = ("issue_bound_ms", "pipe_bound_ms", "whole_waves_bound_ms", "phased_bound_ms")
    print(f"{'scenario':58} {'issue':>9} {'bound':>9} {'waves':>9} {'phased':>9} {'target':>8}")
    for s in report["scenarios"]:
        target = f"{s['target_ms']:>5} ms" if s["target_ms"] is not None else f"{'-':>8}"
        if s["pipe_bound_ms"] is None:
            print(f"{s['scenario']:58} " + " ".join(f"{'-':>9}" for _ in cols) + f" {target}")
            continue
        verdict = ""
        if s["target_ms"] is not None:
            verdict = "  " + "/".join("met" if s[k] <= s["target_ms"] else "MISSED" for k in cols[1:])
        print(f"{s['scenario']:58} " + " ".join(f"{s[k]:>6.3f} ms" for k in cols) + f" {target}{verdict}")
    print(
        "  bound: each kernel at its busiest pipe (its phases overlapping perfectly) on its busiest SM, or its "
        "memory time if longer;\n  waves: the same with every partial wave costing a full one; phased: the "
        "phases (the table's innermost loops, between barriers) one after another, each at its own busiest "
        "pipe;\n  verdicts: bound/waves/phased"
    )


def print_generations(report):
    """The formulation and occupancy on each GPU generation (an ESTIMATE, as everything here)."""
    print()
    print(
        f"Other GPU generations (an ESTIMATE): the formulation LDR-FLIP runs in float32 at ppd {report['ppd']:.2f} "
        "(the launchers' choice from the shared memory per block), each kernel's occupancy on that SM with the "
        f"registers of the SASS it runs, and the compulsory global-memory bytes at {report['size']}, batch 1. "
        f"Time is estimated for sm_90 only (above, the reference); the others have no pipe model."
    )
    print(
        f"{'generation':38} {'SASS':6} {'forward':10} {'backward':10} {'fwd MB':>7} {'loss MB':>8}  "
        f"kernels: registers, shared memory per block, blocks/SM, occupancy (limited by)"
    )
    for g in report["generations"]:
        b = g["bytes"]
        first = True
        for k in g["kernels"]:
            o = k["occupancy"]
            lead = (
                f"{g['name']:38} {g['sass']:6} {g['forward']:10} {g['backward']:10} "
                f"{b.get('forward', 0) / 1e6:7.1f} {b.get('forward+backward', 0) / 1e6:8.1f}"
                if first
                else " " * 83
            )
            print(
                f"{lead}  {k['kernel']:28} {k['registers']:>3} regs {fmt_bytes(k['smem']):>8} "
                f"{o['blocks_per_sm']:>2}/SM {o['occupancy'] * 100:5.1f}% ({o['limited_by']})"
            )
            first = False
        if not g["row_passes_fit"]:
            print(f"{'':83}  refused: the row passes' shared memory exceeds the block's at this ppd")
    sources = sorted({g["registers_from"] for g in report["generations"]}, key=lambda x: (len(x), x))
    print(f"  registers from: {'; '.join(sources)}")
    print("  loss: forward+backward of a loss, autograd keeping the test image's sensitivities (CUDA's default path)")


if __name__ == "__main__":
    sys.exit(main())
