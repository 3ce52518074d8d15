"""CPU speed of LDR-FLIP, side by side in one run on the same cores: flip_loss (forward,
forward+backward), flip-evaluator's C++ evaluate() (forward), the separable pure-PyTorch FLIP of
`torch_separable.py` (forward, forward+backward) and flip_loss's portable path, the pure-PyTorch
`oracle.py` that runs where the compiled kernels do not (forward+backward); and the portable
path's HDR-FLIP forward+backward peak memory with 2 and 16 exposures (one child process each).

    .venv/bin/python benchmarks/cpu_bench.py [--repeats 5] [--sizes 512x512 1920x1080 ...]
                                             [--skip-reference] [--threads N] [--eight-bit]

Sizes: 512x512, 1920x1080, 3840x2160 (batch 1) and 8x256x256 (batch 8; flip-evaluator's figure is 8
calls in a loop), cut from a 1920x1080 render of cli_bench.py's ray caster; the test image adds
Gaussian noise (sigma 0.03). float32, gradient with respect to the test image. After a warm-up the
repeats run round-robin, so that a load change hits every implementation alike; figures are
medians, and each size reports how far the separable and flip-evaluator maps are from flip_loss's.
The load average is printed before and after: on cores that other work also uses, the
implementations made of many small parallel ATen ops (separable, oracle.py) slow down most, so
record figures on an otherwise idle machine. --skip-reference skips the portable path. --eight-bit:
both images as 8-bit files hold them (the noise rounded to codes), flip_loss's forward given the
uint8 codes themselves.
"""

import argparse
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import flip_loss  # noqa: E402
from flip_loss import oracle  # noqa: E402
from flip_loss.image_checks import code_values  # noqa: E402

import torch_separable  # noqa: E402  (beside this script)

# label -> (batch, height, width)
SIZES = {
    "512x512": (1, 512, 512),
    "1920x1080": (1, 1080, 1920),
    "3840x2160": (1, 2160, 3840),
    "8x256x256": (8, 256, 256),
}


def source_image():
    """A 1920x1080 render: the ray-cast scene benchmarks/cli_bench.py makes its pairs of (seed 0),
    tone mapped and sRGB-encoded to 8 bits as its LDR pairs are."""
    import cli_bench  # beside this script

    return torch.from_numpy(cli_bench.srgb8(cli_bench.render(0, 1920, 1080))).permute(2, 0, 1).float().div(255), (
        "cli_bench.py's render (seed 0, 1920x1080)"
    )


def reference_batch(img, n, h, w):
    """n x 3 x h x w crops of ``img``, tiled up when it is smaller (3840x2160 from 1080p). Batch
    images are different crops, row by row."""
    _, ih, iw = img.shape
    per_row = max(1, iw // w)
    rows = -(-n // per_row)
    img = img.repeat(1, -(-rows * h // ih), -(-min(n, per_row) * w // iw))
    crops = [
        img[:, (i // per_row) * h : (i // per_row + 1) * h, (i % per_row) * w : (i % per_row + 1) * w] for i in range(n)
    ]
    return torch.stack(crops).contiguous()


def pairs(ref, n=2):
    """``n`` (test, reference) pairs: the reference plus Gaussian noise, clamped to [0, 1]."""
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        test = (ref + 0.03 * torch.randn(ref.shape, generator=g)).clamp(0, 1)
        out.append((test.contiguous(), ref))
    return out


def to_numpy(pair):
    """N x 3 x H x W tensors -> lists of H x W x 3 float32 arrays (flip-evaluator's layout)."""
    return tuple([img.permute(1, 2, 0).numpy().copy() for img in x] for x in pair)


def timed_round_robin(cases, repeats):
    """``cases``: name -> (fn, inputs, rounds). One warm-up call each, then round-robin; returns
    name -> median seconds."""
    times = {name: [] for name in cases}
    for fn, inputs, _ in cases.values():
        fn(*inputs[0])
    for i in range(repeats):
        for name, (fn, inputs, rounds) in cases.items():
            if i < rounds:
                args = inputs[i % len(inputs)]
                t0 = time.perf_counter()
                fn(*args)
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


# One child per exposure count: its peak resident memory (the kernel's high-water mark) before and
# after one HDR-FLIP forward+backward of the portable path, given exposures from -4 to +4 stops.
HDR_MEMORY_CHILD = """
import resource, sys, torch
sys.path.insert(0, {root!r})
from flip_loss import oracle
torch.set_num_threads({threads})
ref = torch.load({path!r})
g = torch.Generator().manual_seed(0)
test = (ref * (1 + 0.1 * torch.randn(ref.shape, generator=g))).clamp(min=0).requires_grad_()
grid = torch.linspace(-4.0, 4.0, {count}).view(1, {count})
# A small call first: the libraries and thread pools it loads are no part of the image's memory.
small = test[..., :16, :16].detach().requires_grad_()
oracle.hdr_flip(small, ref[..., :16, :16], {ppd}, "aces", grid, torch.tensor([{count}]))[0].mean().backward()
def status_kib(field):
    with open("/proc/self/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith(field + ":")))
try:  # Linux: the peak reset to what is resident now, so that an earlier peak (the import) hides nothing
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status_kib("VmRSS")
    peak = lambda: status_kib("VmHWM")
except OSError:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
oracle.hdr_flip(test, ref, {ppd}, "aces", grid, torch.tensor([{count}]))[0].mean().backward()
print(peak() - before)
"""


def hdr_peak_memory(img, counts, ppd):
    """MiB the portable path's HDR-FLIP forward+backward adds to a process's peak, per exposure
    count, on the 1080p image linearised and ramped from 2^-3 to 2^7 across its width."""
    import tempfile

    lin = oracle.srgb_to_linear(img.double())
    ref = (lin * torch.exp2(torch.linspace(-3, 7, lin.shape[-1], dtype=torch.float64))).float()[None]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ref.pt")
        torch.save(ref.contiguous(), path)
        for count in counts:
            code = HDR_MEMORY_CHILD.format(
                root=os.path.join(HERE, ".."), threads=torch.get_num_threads(), path=path, count=count, ppd=ppd
            )
            run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            out[count] = int(run.stdout.split()[-1]) * (1024 if sys.platform != "darwin" else 1) / 2**20
    return out


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
        cpu += f", {kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{cpu}, {os.cpu_count()} logical cores"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--sizes",
        nargs="+",
        choices=list(SIZES),
        default=list(SIZES),
        metavar="SIZE",
        help=f"a subset of {', '.join(SIZES)} (default: all)",
    )
    p.add_argument("--skip-reference", action="store_true", help="skip the portable path (oracle.py)")
    p.add_argument("--threads", type=int, help="threads for torch and flip-evaluator (default: torch's default)")
    p.add_argument(
        "--eight-bit",
        action="store_true",
        help="both images as 8-bit files hold them (the noisy test rounded to codes k): flip_loss's forward "
        "takes the uint8 codes, everything else (and flip_loss's forward+backward, whose test needs a "
        "gradient) their values k / 255",
    )
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
        # flip-evaluator's wheel carries its own OpenMP runtime, which reads this when it loads.
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import flip_evaluator

    load_before = os.getloadavg()[0]

    img, source = source_image()
    ppd = flip_loss.DEFAULT_PPD

    def forward(ldr_flip):
        def run(t, r):
            with torch.no_grad():
                return ldr_flip(t, r, ppd)

        return run

    def forward_backward(ldr_flip):  # the loss's gradient w.r.t. the test image
        def run(t, r):
            x = t.clone().requires_grad_()
            ldr_flip(x, r, ppd).mean().backward()

        return run

    ours_fwd, ours_fwd_bwd = forward(flip_loss.ldr_flip), forward_backward(flip_loss.ldr_flip)
    separable_fwd, separable_fwd_bwd = forward(torch_separable.ldr_flip), forward_backward(torch_separable.ldr_flip)
    portable_fwd_bwd = forward_backward(oracle.ldr_flip)

    def evaluator_fwd(ts, rs):
        return [
            flip_evaluator.evaluate(
                r, t, "LDR", inputsRGB=True, applyMagma=False, computeMeanError=False, parameters={"ppd": ppd}
            )[0]
            for t, r in zip(ts, rs)
        ]

    rows = []
    for label in args.sizes:
        n, h, w = SIZES[label]
        data = pairs(reference_batch(img, n, h, w))
        ours_fwd_data = data
        if args.eight_bit:
            ours_fwd_data = [tuple((x * 255).round().to(torch.uint8) for x in pair) for pair in data]
            data = [tuple(code_values(x) for x in pair) for pair in ours_fwd_data]
        np_data = [to_numpy(pair) for pair in data]
        cases = {
            "ours_fwd": (ours_fwd, ours_fwd_data, args.repeats),
            "ours_fb": (ours_fwd_bwd, data, args.repeats),
            "eval_fwd": (evaluator_fwd, np_data, args.repeats),
            "sep_fwd": (separable_fwd, data, args.repeats),
            "sep_fb": (separable_fwd_bwd, data, args.repeats),
        }
        if not args.skip_reference:
            cases["portable_fb"] = (portable_fwd_bwd, data, args.repeats)
        t = timed_round_robin(cases, args.repeats)
        # The same map from each, so that the times compare like with like.
        ours = ours_fwd(*data[0])
        agree = {
            "separable": (separable_fwd(*data[0]) - ours).abs().max().item(),
            "flip-evaluator": max(
                float(abs(e[..., 0] - o[0].numpy()).max()) for e, o in zip(evaluator_fwd(*np_data[0]), ours)
            ),
        }
        rows.append((label, n * h * w / 1e6, t, agree))
        print(
            f"{label}: "
            + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in t.items())
            + "; max |map - flip_loss's|: "
            + ", ".join(f"{k} {v:.2g}" for k, v in agree.items()),
            file=sys.stderr,
        )

    hdr_memory = None if args.skip_reference else hdr_peak_memory(img, (2, 16), ppd)
    load_after = os.getloadavg()[0]
    evaluator = importlib.metadata.version("flip-evaluator")
    evaluator_threads = os.environ.get("OMP_NUM_THREADS", "default")
    print(
        f"\nMachine: {machine()}, load average {load_before:.1f} before, {load_after:.1f} after; "
        f"torch {torch.__version__} (intra-op threads: {torch.get_num_threads()}); flip-evaluator {evaluator} "
        f"(its own OpenMP runtime, threads: {evaluator_threads}) on the same cores; flip_loss CPU kernels: "
        f"{flip_loss._C.cpu_capability()}. Image: {source}, test = reference + N(0, 0.03) noise; "
        f"ppd {ppd:.2f}; {'8-bit codes (flip_loss fwd: uint8)' if args.eight_bit else 'float32'}; "
        f"median of {args.repeats} after a warm-up.\n"
    )
    print(
        "| size | flip_loss fwd | flip_loss fwd+bwd | fwd+bwd / fwd | flip_loss fwd+bwd throughput | "
        "flip-evaluator fwd | speed-up vs evaluator (fwd) | separable fwd | separable fwd+bwd | "
        "speed-up vs separable (fwd+bwd) | portable fwd+bwd | portable / flip_loss (fwd+bwd) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, mpix, t, _ in rows:
        portable_cells = (
            f"{t['portable_fb'] * 1e3:.0f} ms | {t['portable_fb'] / t['ours_fb']:.1f}x"
            if "portable_fb" in t
            else "- | -"
        )
        print(
            f"| {label} | {t['ours_fwd'] * 1e3:.1f} ms | {t['ours_fb'] * 1e3:.1f} ms | "
            f"{t['ours_fb'] / t['ours_fwd']:.2f} | {mpix / t['ours_fb']:.1f} Mpixel/s | "
            f"{t['eval_fwd'] * 1e3:.1f} ms | {t['eval_fwd'] / t['ours_fwd']:.1f}x | "
            f"{t['sep_fwd'] * 1e3:.1f} ms | {t['sep_fb'] * 1e3:.1f} ms | {t['sep_fb'] / t['ours_fb']:.1f}x | "
            f"{portable_cells} |"
        )

    worst = {k: max(agree[k] for *_, agree in rows) for k in rows[0][3]}
    print(
        "\nLargest difference from flip_loss's map over these sizes: "
        + ", ".join(f"{k} {v:.2g}" for k, v in worst.items())
        + "."
    )
    if hdr_memory is not None:
        print(
            "\nPortable path (oracle.py), HDR-FLIP forward+backward, 1920x1080, peak memory added: "
            + ", ".join(f"{n} exposures {mib:.0f} MiB" for n, mib in hdr_memory.items())
            + (f" ({hdr_memory[16] / hdr_memory[2]:.2f}x from 2 to 16)." if hdr_memory[2] > 0 else ".")
        )


if __name__ == "__main__":
    main()
