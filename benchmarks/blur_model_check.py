"""A check of sass_report's pipe model (an ESTIMATE, no GPU) against kernels whose limits first
principles know: benchmarks/blur_check.cu, a 1920x1080 float32 separable blur of radius 10, compiled
for sm_90 and costed by the same rules as the FLIP kernels (sass_analysis.pipe_counts,
sass_report.launch_bounds). A memory-bound kernel should come out at its bytes over the HBM's
bandwidth; the textbook shared-memory blur, whose 21 shared loads per output move more bytes
through the SM's shared-memory path (128 B per clock per SM: 33.4 TB/s on 132 SMs at 1.98 GHz) than
its 8 bytes of global traffic per output need from HBM (4.8 TB/s), should come out shared-bound.

    python benchmarks/blur_model_check.py [--json out.json]

Needs nvcc and nvdisasm (pip install -r benchmarks/requirements-sass.txt), as sass_report.py does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_analysis as sa  # noqa: E402
import sass_report as sr  # noqa: E402

BLUR_CU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "blur_check.cu")
W, H, ELEM = 1920, 1080, 4
IMAGE = W * H * ELEM

# Each kernel's launch (as blur_check.cu's constants make it): threads, blocks, bytes read and
# written at least (the image once each way; the halos' re-reads are L2 hits), and what first
# principles expect: "memory" (the bound is the bytes over the bandwidth) or "on-chip" (the
# shared-memory path alone takes longer than the bytes, so some pipe of the SM limits).
LAUNCHES = {
    "blur_h_smem": (256, -(-W // 256) * H, (IMAGE, IMAGE), "on-chip"),
    "blur_v_smem": (256, (W // 32) * -(-H // 8), (IMAGE, IMAGE), "on-chip"),
    "blur_v_regs": (128, (W // 128) * -(-H // 64), (IMAGE, IMAGE), "memory"),
}


def as_expected(r):
    """Whether the model's verdict on a kernel is what first principles expect of it."""
    b = r["bounds"]
    if r["expected_limit"] == "memory":
        return b["limited_by"] == "memory" and b["bound_s"] == b["memory_s"]
    return b["limited_by"] != "memory" and b["pipes_s"]["shared"] > b["memory_s"]


def compile_blur(nvcc, workdir):
    cubin = os.path.join(workdir, "blur_check.cubin")
    cmd = [nvcc, "-cubin", "-O3", "-lineinfo", "-gencode=arch=compute_90,code=sm_90", "-Xptxas", "-v", BLUR_CU]
    res = subprocess.run([*cmd, "-o", cubin], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("nvcc failed:\n" + res.stderr[-4000:])
    return cubin, res.stderr


def model(nvcc, nvdisasm):
    """Per kernel of blur_check.cu: its resources, per-warp pipe counts and launch_bounds."""
    with tempfile.TemporaryDirectory(prefix="flip_blur_") as work:
        cubin, log = compile_blur(nvcc, work)
        text = subprocess.run([nvdisasm, "-c", "-g", cubin], capture_output=True, text=True, check=True).stdout
    ptxas = sr.parse_ptxas(log)
    functions = sa.parse_nvdisasm(text)
    source = sr.Source()
    out = {}
    for name, (threads, blocks, nbytes, expected) in LAUNCHES.items():
        p = ptxas[name]
        cfg = sa.Cfg(functions[name])
        if cfg.problems or cfg.loops:
            raise RuntimeError(f"{name}: expected straight-line code, found {len(cfg.loops)} loops {cfg.problems}")
        issued, a = sr.kernel_cost(cfg, None, (), source)
        occ = sa.occupancy(threads, p["registers"], p["static_smem"], barriers=p["barriers"])
        k = {"threads": threads, "occupancy": occ}
        out[name] = {
            "registers": p["registers"],
            "static_smem": p["static_smem"],
            "blocks_per_sm": occ["blocks_per_sm"],
            "blocks": blocks,
            "per_warp": dict(a.total),
            "expected_limit": expected,
            "bounds": sr.launch_bounds(k, blocks, a.total, nbytes),
        }
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the results as JSON to this file")
    ap.add_argument("--tools-dir", help="folder holding nvdisasm")
    args = ap.parse_args(argv)
    nvcc, nvdisasm = sr.find_tool("nvcc"), sr.find_tool("nvdisasm", args.tools_dir)
    if not (nvcc and nvdisasm):
        sys.exit("blur_model_check: nvcc and nvdisasm are needed (pip install -r benchmarks/requirements-sass.txt)")
    res = model(nvcc, nvdisasm)
    print(
        f"Blur check (an ESTIMATE, no GPU): benchmarks/blur_check.cu, {W}x{H} float32, radius 10, sm_90, nvcc "
        f"{sr.tool_version(nvcc)}; {sr.GPU_NAME}: {sr.GPU_SMS} SMs at {sr.GPU_CLOCK_HZ / 1e9:.2f} GHz, "
        f"{sr.GPU_HBM_BYTES_PER_S / 1e12:.1f} TB/s"
    )
    print(
        f"{'kernel':12} {'regs':>4} {'blk/SM':>6} {'blocks':>6} {'instr/w':>7} {'LDS/w':>5} {'wavef/w':>7} "
        + " ".join(f"{p:>6}" for p in sa.PIPES)
        + f" {'memory':>6} {'bound':>6}  {'limited by':10} expected"
    )
    for name, r in res.items():
        b, pw = r["bounds"], r["per_warp"]
        print(
            f"{name:12} {r['registers']:>4} {r['blocks_per_sm']:>6} {r['blocks']:>6} {pw['instructions']:>7.0f} "
            f"{pw.get('lds', 0):>5.0f} {pw.get('wavefronts', 0) + 0:>7.0f} "
            + " ".join(f"{b['pipes_s'][p] * 1e6:6.2f}" for p in sa.PIPES)
            + f" {b['memory_s'] * 1e6:6.2f} {b['bound_s'] * 1e6:6.2f}  {b['limited_by']:10} {r['expected_limit']}"
        )
    print("(times in microseconds; per warp: /w)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0 if all(as_expected(r) for r in res.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
