"""The CUDA kernels against the CPU kernels on real images (flip_loss/data's example pair, the crops of
tests/data, HDR images lifted from them): LDR and HDR, maps and both gradients, float32 and float64,
one formulation per process. scripts/gpu/gpu_check.sh runs it after the build.

    python scripts/gpu/smoke.py                # fused forward, tiled backward, kept sensitivities, autograd
    python scripts/gpu/smoke.py --rows         # the row passes (FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1)
    python scripts/gpu/smoke.py --device cpu   # this script itself, without a GPU (CI)

Each check prints one line as it finishes (a stopped run keeps what it did):

    CHECK <promise> PASS|FAIL <formulation> <what>: <measured> (<bound>)

with <promise> one of maps, gradients, hdr_index, zero, symmetry (the README's "GPU and CPU
agreement"; bounds from flip_loss/gpu_agreement.py). Every check ends in a synchronisation, so an
asynchronous CUDA error is reported by the check that caused it; the CUDA context is then lost and
the script stops (the sanitizers name the kernel). Exit status 0 when every check passed."""

import argparse
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, ROOT)

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--rows", action="store_true", help="force the row passes (sets FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1)")
p.add_argument("--device", default="cuda", help="the device checked against the CPU (default cuda)")
args = p.parse_args()
if args.rows:
    # Read by the extension once, at its first CUDA call: set before any.
    os.environ["FLIP_LOSS_CUDA_FORCE_ROW_PASSES"] = "1"

import torch  # noqa: E402

import flip_loss  # noqa: E402
from flip_loss.imageio import load_image  # noqa: E402
from flip_loss import hdr as hdr_api  # noqa: E402
from flip_loss.gpu_agreement import HDR_INDEX_MISMATCH, relative_difference, tolerance  # noqa: E402

DEV = args.device
ON_CUDA = DEV.startswith("cuda")
if not flip_loss.HAS_EXTENSION:
    sys.exit(f"smoke: flip_loss._C did not load: {flip_loss._ops.IMPORT_ERROR}")
if ON_CUDA:
    if flip_loss._ops.CUDA_IMPORT_ERROR is not None:
        sys.exit(f"smoke: {flip_loss._ops.CUDA_IMPORT_ERROR}")
    if not torch._C._dispatch_has_kernel_for_dispatch_key("flip::ldr_flip", "CUDA"):
        sys.exit("smoke: no CUDA kernels: flip_loss._C_cuda is not built (built without FLIP_LOSS_CUDA=1?)")
    if not torch.cuda.is_available():
        sys.exit("smoke: torch sees no CUDA device")
    # Else every op below would take the portable path and agree with the CPU all the same.
    notice = flip_loss._ops.fallback_notice("ldr_flip", "cuda", torch.cuda.current_device())
    if notice is not None:
        sys.exit(f"smoke: {notice[1]}")
    where = f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
else:
    where = f"{DEV} against the CPU (a check of this script, not of the CUDA kernels)"
print(f"smoke: {where}, torch {torch.__version__}, flip_loss {flip_loss.__version__}", flush=True)

ops = torch.ops.flip
ROWS = args.rows
FWD, BWD, KEPT = ("rows", "rows", "kept-rows") if ROWS else ("fused", "tiled", "kept")
PPD = flip_loss.DEFAULT_PPD
failures = []


class ContextLost(Exception):
    pass


def context_alive():
    """Whether CUDA still works after an error: a refused launch ("flip: launching <kernel> ...
    failed") leaves the context usable, an execution error (an illegal address) does not, and then
    every later call fails too."""
    try:
        return torch.ones(4, device=DEV).sum().item() == 4.0
    except Exception:  # noqa: BLE001
        return False


def sync():
    if ON_CUDA:
        torch.cuda.synchronize()


def line(promise, ok, formulation, what, measured):
    print(f"CHECK {promise} {'PASS' if ok else 'FAIL'} {formulation} {what}: {measured}", flush=True)
    if not ok:
        failures.append(f"{promise} {formulation} {what}")


def run(promise, formulation, what, fn):
    """Runs one check; an exception is its failure. A CUDA error leaves the context unusable."""
    try:
        fn()
        sync()
    except Exception as e:  # noqa: BLE001 - every failure is reported, with its words
        msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        line(promise, False, formulation, what, f"raised {msg}")
        if ON_CUDA and not context_alive():
            raise ContextLost(msg) from e


def close(promise, formulation, what, got, want, dtype, gradient):
    err = relative_difference(got, want)
    bound = tolerance(dtype, gradient)
    line(promise, err <= bound, formulation, what, f"{err:.2e} of scale (bound {bound:.0e})")


def exactly_zero(formulation, what, got):
    largest = got.detach().abs().max().item()
    line("zero", largest == 0.0, formulation, what, f"largest value {largest:.3g} (bound: exactly 0)")


def same_bits(formulation, what, pairs):
    bad = [i for i, (x, y) in enumerate(pairs) if not torch.equal(x, y)]
    line("symmetry", not bad, formulation, what, "same bits" if not bad else f"outputs {bad} differ")


def dev(*xs):
    return [x.to(DEV) for x in xs]


# ---- the images
def image(path):
    return load_image(os.path.join(ROOT, path)).unsqueeze(0)


def noisy(x, seed, amount=0.05):
    g = torch.Generator().manual_seed(seed)
    return (x + amount * torch.randn(x.shape, generator=g)).clamp(0, 1)


def srgb_decode(x):
    return torch.where(x <= 0.04045, x / 12.92, ((x.clamp(min=0.04045) + 0.055) / 1.055) ** 2.4)


def lifted(x, lo, hi):
    """An sRGB image linearised and scaled by an exposure ramp from 2^lo to 2^hi across its width
    (as tests/helpers/hdr_cases.py lifts the crops into HDR)."""
    ramp = torch.exp2(torch.linspace(lo, hi, x.shape[-1], dtype=torch.float64))
    return (srgb_decode(x.double()) * ramp).float()


example = (image("flip_loss/data/example_test.png"), image("flip_loss/data/example_reference.png"))
blocks = image("tests/data/blocks.png")
rug, toys = image("tests/data/rug.png"), image("tests/data/toys.png")
crops = torch.cat([rug[..., :64, :64], toys])
LDR = [
    ("example 1x3x192x256", example),
    ("blocks+noise 1x3x120x160", (noisy(blocks, 0), blocks)),
    ("rug,toys+noise 2x3x64x64", (noisy(crops, 1), crops)),
]
hdr_blocks = lifted(blocks, -2, 6)
g = torch.Generator().manual_seed(2)
hdr_crops = lifted(crops, -4, 3)
HDR = [
    (
        "blocks lifted+noise aces 1x3x120x160",
        "aces",
        (hdr_blocks * (1 + 0.1 * torch.randn(hdr_blocks.shape, generator=g)).clamp(min=0), hdr_blocks),
    ),
    (
        "rug,toys lifted blurred hable 2x3x64x64",
        "hable",
        ((hdr_crops + hdr_crops.roll(1, -1) + hdr_crops.roll(1, -2)) / 3, hdr_crops),
    ),
]


def weight(like, seed):
    shape = (like.shape[0], 1, *like.shape[2:])
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=like.dtype)


# ---- the checks
def ldr_checks(name, test, ref, dtype, first):
    t, r = test.to(dtype), ref.to(dtype)
    td, rd = dev(t, r)
    w = weight(t, 3)
    (wd,) = dev(w)
    what = f"ldr {name} {str(dtype)[6:]}"

    def forward():
        close(
            "maps",
            FWD,
            what,
            ops.ldr_flip(td, rd, PPD, "srgb", 1e-15),
            ops.ldr_flip(t, r, PPD, "srgb", 1e-15),
            dtype,
            False,
        )

    def backward(mask):
        def fn():
            got = ops.ldr_flip_backward(wd, td, rd, PPD, "srgb", 1e-15, mask)
            want = ops.ldr_flip_backward(w, t, r, PPD, "srgb", 1e-15, mask)
            for i in (0, 1):
                if mask[i]:
                    close(
                        "gradients",
                        BWD,
                        f"{what} d{'test' if i == 0 else 'ref'} mask {mask}",
                        got[i],
                        want[i],
                        dtype,
                        True,
                    )

        return fn

    def kept():
        mask = [True, False]
        m_d, s_d = ops._ldr_flip_with_sensitivities(td, rd, PPD, "srgb", 1e-15, mask)
        m_h, s_h = ops._ldr_flip_with_sensitivities(t, r, PPD, "srgb", 1e-15, mask)
        close("maps", KEPT, what, m_d, m_h, dtype, False)
        close("gradients", KEPT, f"{what} sensitivities", s_d, s_h, dtype, True)
        got = ops._ldr_flip_backward_from_sensitivities(wd, s_d, td, rd, PPD, "srgb", mask)[0]
        want = ops._ldr_flip_backward_from_sensitivities(w, s_h, t, r, PPD, "srgb", mask)[0]
        close("gradients", KEPT, f"{what} dtest from sensitivities", got, want, dtype, True)

    def autograd():
        x = td.clone().requires_grad_()
        (flip_loss.ldr_flip(x, rd, PPD) * wd).sum().backward()
        want = ops.ldr_flip_backward(w, t, r, PPD, "srgb", 1e-15, [True, False])[0]
        close("gradients", f"autograd-{KEPT}", f"{what} dtest", x.grad, want, dtype, True)

    def zero():
        exactly_zero(FWD, f"{what} ldr_flip(x, x), eps=0", ops.ldr_flip(td, td.clone(), PPD, "srgb", 0.0))
        m, _ = ops._ldr_flip_with_sensitivities(td, td.clone(), PPD, "srgb", 0.0, [True, False])
        exactly_zero(KEPT, f"{what} map of (x, x), eps=0", m)

    def symmetry():
        same_bits(
            FWD,
            f"{what} map(test, ref) == map(ref, test)",
            [(ops.ldr_flip(td, rd, PPD, "srgb", 1e-15), ops.ldr_flip(rd, td, PPD, "srgb", 1e-15))],
        )
        a = ops.ldr_flip_backward(wd, td, rd, PPD, "srgb", 1e-15, [True, True])
        b = ops.ldr_flip_backward(wd, rd, td, PPD, "srgb", 1e-15, [True, True])
        same_bits(BWD, f"{what} gradients swapped", [(a[0], b[1]), (a[1], b[0])])

    run("maps", FWD, what, forward)
    run("gradients", BWD, what, backward([True, True]))
    if first:
        run("gradients", BWD, what, backward([False, True]))
    run("gradients", KEPT, what, kept)
    if first:
        run("gradients", f"autograd-{KEPT}", what, autograd)
    run("zero", FWD, what, zero)
    run("symmetry", FWD, what, symmetry)


def hdr_checks(name, tone, test, ref, dtype):
    t, r = test.to(dtype), ref.to(dtype)
    ex, counts, _, _ = hdr_api.exposures_for(ref, tone)  # from the reference, on the CPU, once for both
    ex = ex.to(dtype)
    td, rd, exd, cd = dev(t, r, ex, counts)
    w = weight(t, 4)
    (wd,) = dev(w)
    what = f"hdr {name} {str(dtype)[6:]} ({ex.shape[1]} exposures)"
    cpu = ops.hdr_flip(t, r, ex, counts, PPD, tone, 1e-15)

    def forward():
        got = ops.hdr_flip(td, rd, exd, cd, PPD, tone, 1e-15)
        close("maps", FWD, what, got[0], cpu[0], dtype, False)
        differ = (got[2].cpu() != cpu[2]).double().mean().item()
        line(
            "hdr_index",
            differ <= HDR_INDEX_MISMATCH,
            FWD,
            what,
            f"{differ:.2e} of the pixels pick another exposure (bound {HDR_INDEX_MISMATCH:.0e})",
        )

    def backward():
        index = cpu[2].to(DEV)  # the CPU's winners: a near-tie must not decide the comparison
        got = ops.hdr_flip_backward(wd, td, rd, exd, cd, index, PPD, tone, 1e-15, [True, True])
        want = ops.hdr_flip_backward(w, t, r, ex, counts, cpu[2], PPD, tone, 1e-15, [True, True])
        close("gradients", BWD, f"{what} dtest", got[0], want[0], dtype, True)
        close("gradients", BWD, f"{what} dref", got[1], want[1], dtype, True)

    def zero():
        exactly_zero(FWD, f"{what} hdr_flip(x, x), eps=0", ops.hdr_flip(td, td.clone(), exd, cd, PPD, tone, 0.0)[0])

    def symmetry():
        a = ops.hdr_flip(td, rd, exd, cd, PPD, tone, 1e-15)
        b = ops.hdr_flip(rd, td, exd, cd, PPD, tone, 1e-15)
        same_bits(FWD, f"{what} map, exposure map, index swapped", list(zip(a, b)))

    run("maps", FWD, what, forward)
    run("gradients", BWD, what, backward)
    run("zero", FWD, what, zero)
    run("symmetry", FWD, what, symmetry)


try:
    for dtype in (torch.float32, torch.float64):
        for i, (name, (test, ref)) in enumerate(LDR):
            ldr_checks(name, test, ref, dtype, first=i == 0)
        for name, tone, (test, ref) in HDR:
            hdr_checks(name, tone, test, ref, dtype)
except ContextLost as e:
    print(f"smoke: stopped: the CUDA context is lost after {e}", flush=True)
if failures:
    print(f"smoke: FAILED {len(failures)} checks: {'; '.join(failures[:5])}", flush=True)
    sys.exit(1)
print("smoke: ok", flush=True)
