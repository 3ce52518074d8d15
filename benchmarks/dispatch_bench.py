"""CPU kernels at each instruction-set level of the portable build (and, optionally, another build
such as a -march=native one), side by side in one run on the same core.

Each level runs in its own process (FLIP_LOSS_CPU_CAPABILITY is read once per process) with one
intra-op thread, and is timed in CPU time (best of --repeats after a warm-up), which is steadier
than wall time on a shared machine.

    python benchmarks/dispatch_bench.py [--size 512] [--repeats 8] [--other-build DIR]

--other-build DIR: a directory holding another installed flip_loss (e.g. `pip install --target DIR`
of a FLIP_LOSS_NATIVE=1 build), timed the same way.
"""

import argparse
import os
import subprocess
import sys

_CHILD = r"""
import resource, sys, torch
torch.set_num_threads(1)
import flip_loss
from flip_loss import _C
size, repeats = int(sys.argv[1]), int(sys.argv[2])
level = _C.cpu_capability() if hasattr(_C, "cpu_capability") else "other build"
g = torch.Generator().manual_seed(0)
t, r = torch.rand(1, 3, size, size, generator=g), torch.rand(1, 3, size, size, generator=g)

def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime

def best(fn):
    fn()
    times = []
    for _ in range(repeats):
        c = cpu_seconds(); fn(); times.append(cpu_seconds() - c)
    return min(times) * 1e3

def forward():
    torch.ops.flip.ldr_flip(t, r, 67.02064327658225, "srgb", 1e-15)

def forward_backward():
    tt = t.clone().requires_grad_()
    torch.ops.flip.ldr_flip(tt, r, 67.02064327658225, "srgb", 1e-15).sum().backward()

print(f"{level}\t{best(forward):.1f}\t{best(forward_backward):.1f}")
"""


def run(env_extra, size, repeats):
    env = dict(os.environ, **env_extra)
    out = (
        subprocess.run(
            [sys.executable, "-c", _CHILD, str(size), str(repeats)], env=env, check=True, capture_output=True, text=True
        )
        .stdout.strip()
        .split("\t")
    )
    return out[0], float(out[1]), float(out[2])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--other-build", metavar="DIR")
    args = p.parse_args()
    rows = []
    for level in ("baseline", "avx2", "avx512"):
        got = run({"FLIP_LOSS_CPU_CAPABILITY": level}, args.size, args.repeats)
        if got[0] == level:  # levels above what the CPU supports fall back; skip the repeats
            rows.append(got)
    if args.other_build:
        path = os.path.abspath(args.other_build)
        rows.append(run({"PYTHONPATH": path + os.pathsep + os.environ.get("PYTHONPATH", "")}, args.size, args.repeats))
    print(f"{args.size}x{args.size}, float32, 1 thread, CPU time, best of {args.repeats}")
    print("| build / level | forward | forward+backward |")
    print("| --- | --- | --- |")
    for level, fwd, fb in rows:
        print(f"| {level} | {fwd:.1f} ms | {fb:.1f} ms |")


if __name__ == "__main__":
    main()
