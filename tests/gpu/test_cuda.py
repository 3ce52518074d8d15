"""CUDA kernels against the CPU kernels, gradcheck/opcheck on CUDA, torch.compile with CUDA graphs,
device checks. Every test here skips cleanly on machines without a GPU."""

import pytest
import torch
from torch.autograd import gradcheck

import flip_loss
from flip_loss import gpu_agreement, oracle
from flip_loss.constants import TONE_MAPPERS
from hdr_cases import exposure_strips

pytestmark = pytest.mark.cuda

needs_kernels = pytest.mark.skipif(
    not torch._C._dispatch_has_kernel_for_dispatch_key("flip::ldr_flip", "CUDA"), reason="built without CUDA kernels"
)


@needs_kernels
def test_the_kernels_run_on_this_gpu():
    """Where they cannot, every op here would take the portable path and agree with the CPU all the
    same: said here instead."""
    from flip_loss import _ops

    notice = _ops.fallback_notice("ldr_flip", "cuda", torch.cuda.current_device())
    assert notice is None, notice[1]


def inputs(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=g, dtype=dtype)
    b = (a + 0.1 * torch.randn(shape, generator=g, dtype=dtype)).clamp(0, 1)
    return a, b


def grads(fn, *xs, weight_seed=1):
    xs = [x.detach().clone().requires_grad_() for x in xs]
    out = fn(*xs)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(weight_seed), dtype=out.dtype).to(out.device)
    (out * w).sum().backward()
    return out.detach(), [x.grad for x in xs]


def grad_tol(dtype):
    """The promised agreement of gradients with the CPU's, relative to their scale (README, GPU and
    CPU agreement), defined and derived once in flip_loss/gpu_agreement.py: float32 sums differ in
    order and rounding (the GPU's filter taps are fused multiply-adds) between the devices, and on
    HDR inputs either side's float32 gradient is up to ~2e-4 of the scale from the float64 one."""
    return gpu_agreement.tolerance(dtype, gradient=True)


def assert_close_to_cpu(cuda_vals, cpu_vals, dtype, map_tol=None):
    for c, h in zip(cuda_vals, cpu_vals):
        c = c.cpu()
        scale = max(h.abs().max().item(), 1.0)
        tol = map_tol if map_tol is not None else gpu_agreement.tolerance(dtype)
        assert (c - h).abs().max().item() <= tol * scale, (c - h).abs().max().item()


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(2, 3, 37, 53), (1, 3, 5, 7), (1, 3, 1, 1), (3, 3, 64, 300)], ids=str)
@pytest.mark.parametrize("space", ["srgb", "linear"])
def test_ldr_flip_cuda_matches_cpu(ops, dtype, shape, space):
    a, b = inputs(shape, dtype)
    fn = lambda x, y: ops.ldr_flip(x, y, 67.0, space, 1e-15)  # noqa: E731
    oc, gc = grads(fn, a.cuda(), b.cuda())
    oh, gh = grads(fn, a, b)
    assert_close_to_cpu([oc], [oh], dtype)
    # Gradients: relative to their scale (float32 sums differ in order between the two devices).
    assert_close_to_cpu(gc, gh, dtype, map_tol=grad_tol(dtype))


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_identical_images_give_exactly_zero_on_cuda(ops, dtype):
    # The GPU promise beside the tolerance to the CPU (README, GPU and CPU agreement): both images go
    # through the same instructions, and nvcc fuses no multiply-add but the filter taps', each from
    # one image's samples (-fmad=false, docs/algorithm.md §9.2), so no rounding leaves a residue
    # between them (eps = 0: a positive eps leaves a small floor by design, on every device).
    a, _ = inputs((2, 3, 37, 53), dtype)
    a = a.cuda()
    out = ops.ldr_flip(a, a.clone(), 67.0, "srgb", 0.0)
    assert out.abs().max().item() == 0.0
    ex = torch.tensor([[-1.0, 1.0], [0.0, 2.0]], dtype=dtype, device="cuda")
    hdr = ops.hdr_flip(4 * a, 4 * a, ex, torch.tensor([2, 2], device="cuda"), 67.0, "aces", 0.0)
    assert hdr[0].abs().max().item() == 0.0


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_swapping_the_images_gives_the_same_bits_on_cuda(ops, dtype):
    # The other promise the device's floating-point contract keeps (docs/algorithm.md §9.2, checked
    # without a GPU on the emulator): the same map, and the gradients swapped, bit for bit; HDR-FLIP
    # too for given exposures (its map, exposure map and winning index).
    a, b = (x.cuda() for x in inputs((2, 3, 37, 53), dtype))
    g = torch.rand(2, 1, 37, 53, generator=torch.Generator().manual_seed(3), dtype=dtype).cuda()
    assert torch.equal(ops.ldr_flip(a, b, 67.0, "srgb", 1e-15), ops.ldr_flip(b, a, 67.0, "srgb", 1e-15))
    ga, gb = ops.ldr_flip_backward(g, a, b, 67.0, "srgb", 1e-15, [True, True])
    gb_swapped, ga_swapped = ops.ldr_flip_backward(g, b, a, 67.0, "srgb", 1e-15, [True, True])
    assert torch.equal(ga, ga_swapped) and torch.equal(gb, gb_swapped)
    ex = torch.tensor([[-1.0, 0.5, 1.0], [0.0, 2.0, 2.0]], dtype=dtype, device="cuda")
    counts = torch.tensor([3, 2], device="cuda")
    for x, y in zip(
        ops.hdr_flip(4 * a, 4 * b, ex, counts, 67.0, "aces", 1e-15),
        ops.hdr_flip(4 * b, 4 * a, ex, counts, 67.0, "aces", 1e-15),
    ):
        assert torch.equal(x, y)


@needs_kernels
def test_ldr_flip_cuda_real_image(ops, crops):
    ref = crops["blocks"].unsqueeze(0)
    test = (ref + 0.05 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    assert_close_to_cpu(
        [ops.ldr_flip(test.cuda(), ref.cuda(), 67.02, "srgb", 1e-15)],
        [ops.ldr_flip(test, ref, 67.02, "srgb", 1e-15)],
        torch.float32,
    )


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stage_ops_cuda_match_cpu(ops, dtype):
    a, b = inputs((2, 3, 19, 41), dtype)
    opp = oracle.linear_rgb_to_opponent(a)
    cases = [
        (lambda o: ops.csf_filter(o, 30.0), (opp,)),
        (lambda x, y: ops.hunt_hyab(x, y, 1e-15), (a, b)),
        (lambda x, y: ops.feature_difference(x, y, 30.0, 1e-15), (a[:, :1], b[:, :1])),
    ]
    for fn, xs in cases:
        oc, gc = grads(fn, *[x.cuda() for x in xs])
        oh, gh = grads(fn, *xs)
        assert_close_to_cpu([oc], [oh], dtype)
        assert_close_to_cpu(gc, gh, dtype, map_tol=grad_tol(dtype))


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_on_cuda(ops, dtype):
    a, b = inputs((1, 3, 16, 16))
    out = ops.ldr_flip(a.cuda().to(dtype), b.cuda().to(dtype), 67.0, "srgb", 1e-15)
    assert out.dtype == dtype
    expected = ops.ldr_flip(a.to(dtype).float(), b.to(dtype).float(), 67.0, "srgb", 1e-15)
    torch.testing.assert_close(out.cpu().float(), expected, rtol=1e-2, atol=1e-2)


@needs_kernels
@pytest.mark.parametrize("space", ["srgb", "linear"])
def test_eight_bit_codes_on_cuda_are_their_values(ops, space):
    g = torch.Generator().manual_seed(7)
    a, b = (torch.randint(0, 256, (2, 3, 40, 50), generator=g, dtype=torch.uint8) for _ in range(2))
    out = ops.ldr_flip(a.cuda(), b.cuda(), 67.0, space, 1e-15)
    assert out.dtype == torch.float32
    values = [(x.double() / 255).float().cuda() for x in (a, b)]  # k / 255 correctly rounded
    torch.testing.assert_close(out, ops.ldr_flip(*values, 67.0, space, 1e-15), rtol=0, atol=0)


@needs_kernels
def test_non_contiguous_cuda(ops):
    a, b = inputs((2, 3, 20, 30))
    ac = a.cuda().permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    torch.testing.assert_close(
        ops.ldr_flip(ac, b.cuda(), 67.0, "srgb", 1e-15),
        ops.ldr_flip(a.cuda(), b.cuda(), 67.0, "srgb", 1e-15),
        rtol=0,
        atol=0,
    )


@needs_kernels
def test_gradcheck_cuda(ops):
    a, b = inputs((1, 3, 6, 7), torch.float64)
    a = (0.1 + 0.8 * a).cuda().requires_grad_()
    b = (0.1 + 0.8 * b).cuda().requires_grad_()
    assert gradcheck(lambda x, y: ops.ldr_flip(x, y, 4.0, "srgb", 1e-15), (a, b), eps=1e-7, atol=1e-6)
    y1, y2 = a[:, :1].detach().clone().requires_grad_(), b[:, :1].detach().clone().requires_grad_()
    assert gradcheck(lambda x, y: ops.feature_difference(x, y, 4.0, 1e-15), (y1, y2), eps=1e-7, atol=1e-6)
    opp = oracle.linear_rgb_to_opponent(a.detach() * 0.8).requires_grad_()
    assert gradcheck(lambda o: ops.csf_filter(o, 4.0), (opp,), eps=1e-6, atol=1e-6)
    assert gradcheck(lambda x, y: ops.hunt_hyab(x, y, 1e-15), (a, b), eps=1e-7, atol=1e-6)


@needs_kernels
def test_opcheck_cuda(ops):
    a, b = inputs((2, 3, 6, 7))
    a, b = a.cuda().requires_grad_(), b.cuda().requires_grad_()
    torch.library.opcheck(ops.ldr_flip.default, (a, b, 30.0, "srgb", 1e-15))
    g = torch.rand(2, 1, 6, 7, device="cuda")
    torch.library.opcheck(ops.ldr_flip_backward.default, (g, a.detach(), b.detach(), 30.0, "srgb", 1e-15, [True, True]))
    torch.library.opcheck(ops.hunt_hyab.default, (a, b, 1e-15))
    torch.library.opcheck(
        ops.feature_difference.default,
        (a[:, :1].detach().requires_grad_(), b[:, :1].detach().requires_grad_(), 30.0, 1e-15),
    )


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask", [(True, True), (True, False), (False, True)], ids=str)
def test_cuda_autograd_keeps_the_sensitivities_within_its_budget(ops, dtype, mask):
    # Within kCudaKeptSensitivitiesBytes the CUDA forward keeps them (kTiledGrad for a unit gradient)
    # and the backward is kTiledTranspose on them; the same map, and the CPU's gradients.
    a, b = inputs((2, 3, 37, 53), dtype)
    w = torch.rand(2, 1, 37, 53, generator=torch.Generator().manual_seed(3), dtype=dtype)
    x, y = a.cuda().requires_grad_(mask[0]), b.cuda().requires_grad_(mask[1])
    out = ops.ldr_flip(x, y, 67.0, "srgb", 1e-15)
    assert "Sensitivities" in out.grad_fn.name()
    with torch.no_grad():  # the fused forward: the same sums, but nvcc may contract them apart
        assert_close_to_cpu([out.detach()], [ops.ldr_flip(x, y, 67.0, "srgb", 1e-15).cpu()], dtype)
    (out * w.cuda()).sum().backward()
    expected = ops.ldr_flip_backward(w, a, b, 67.0, "srgb", 1e-15, list(mask))
    for want, leaf, h in zip(mask, (x, y), expected):
        if want:
            assert_close_to_cpu([leaf.grad], [h], dtype, map_tol=grad_tol(dtype))
        else:
            assert leaf.grad is None
    _, sens_cuda = ops._ldr_flip_with_sensitivities(a.cuda(), b.cuda(), 67.0, "srgb", 1e-15, list(mask))
    _, sens_cpu = ops._ldr_flip_with_sensitivities(a, b, 67.0, "srgb", 1e-15, list(mask))
    assert_close_to_cpu([sens_cuda], [sens_cpu], dtype, map_tol=grad_tol(dtype))


@needs_kernels
def test_cuda_autograd_recomputes_past_the_sensitivities_budget(ops):
    # 3840 x 2160 float32: one image's sensitivities (232 MB) fit the 256 MiB, two images' do not.
    a, b = inputs((1, 3, 2160, 3840))
    x, y = a.cuda().requires_grad_(), b.cuda()
    assert "Sensitivities" in ops.ldr_flip(x, y, 67.0, "srgb", 1e-15).grad_fn.name()
    y.requires_grad_()
    out = ops.ldr_flip(x, y, 67.0, "srgb", 1e-15)
    assert "Sensitivities" not in out.grad_fn.name()
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()


@needs_kernels
def test_opcheck_sensitivity_ops_cuda(ops):
    a, b = inputs((2, 3, 6, 7))
    a, b = a.cuda(), b.cuda()
    torch.library.opcheck(ops._ldr_flip_with_sensitivities.default, (a, b, 30.0, "srgb", 1e-15, [True, True]))
    _, sens = ops._ldr_flip_with_sensitivities(a, b, 30.0, "srgb", 1e-15, [False, True])
    g = torch.rand(2, 1, 6, 7, device="cuda")
    torch.library.opcheck(
        ops._ldr_flip_backward_from_sensitivities.default,
        (g, sens, a, b, 30.0, "srgb", [False, True]),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )


@needs_kernels
def test_compile_reduce_overhead_cuda():
    torch._dynamo.reset()
    a, b = inputs((2, 3, 32, 48))
    a, b = a.cuda(), b.cuda()
    loss_fn = flip_loss.FLIPLoss()

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def step(x, y):
        return loss_fn(x, y)

    eager_x = a.clone().requires_grad_()
    eager = loss_fn(eager_x, b)
    eager.backward()
    for _ in range(3):  # warm-up, then CUDA-graph replays
        x = a.clone().requires_grad_()
        out = step(x, b)
        out.backward()
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad, eager_x.grad, rtol=1e-4, atol=1e-7)


def test_mixed_devices_raise(ops):
    a, b = inputs((1, 3, 8, 8))
    with pytest.raises(ValueError, match="different devices"):
        ops.ldr_flip(a.cuda(), b, 67.0, "srgb", 1e-15)
    with pytest.raises(ValueError, match="different devices"):
        flip_loss.ldr_flip(a.cuda(), b)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device(ops):
    a, b = inputs((1, 3, 8, 8))
    out = ops.ldr_flip(a.to("cuda:1"), b.to("cuda:1"), 67.0, "srgb", 1e-15)
    assert out.device == torch.device("cuda:1")
    torch.testing.assert_close(out.cpu(), ops.ldr_flip(a, b, 67.0, "srgb", 1e-15), rtol=1e-5, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("tm", TONE_MAPPERS)
def test_hdr_flip_cuda_matches_cpu(ops, dtype, tm):
    g = torch.Generator().manual_seed(3)
    ref = torch.exp2(6 * torch.rand(2, 3, 21, 150, generator=g, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g, dtype=dtype)).clamp(min=0.1)
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=torch.float64)
    counts = torch.tensor([3, 2])

    oc, emc, ixc = ops.hdr_flip(test.cuda(), ref.cuda(), ex.cuda(), counts.cuda(), 30.0, tm, 1e-15)
    oh, emh, ixh = ops.hdr_flip(test, ref, ex, counts, 30.0, tm, 1e-15)
    assert_close_to_cpu([oc], [oh], dtype)
    assert (ixc.cpu() != ixh).float().mean() < gpu_agreement.HDR_INDEX_MISMATCH  # near-ties may flip in float32
    # Gradients through the same winning exposures: both backwards get the CPU's index, so a
    # near-tie that flipped above cannot make one pixel's gradient come from another exposure.
    w = torch.randn(oh.shape, generator=torch.Generator().manual_seed(5), dtype=dtype)
    gc = ops.hdr_flip_backward(
        w.cuda(), test.cuda(), ref.cuda(), ex.cuda(), counts.cuda(), ixh.cuda(), 30.0, tm, 1e-15, [True, True]
    )
    gh = ops.hdr_flip_backward(w, test, ref, ex, counts, ixh, 30.0, tm, 1e-15, [True, True])
    assert_close_to_cpu(gc, gh, dtype, map_tol=grad_tol(dtype))


@needs_kernels
def test_hdr_api_on_cuda_with_automatic_exposures():
    g = torch.Generator().manual_seed(4)
    ref = torch.exp2(8 * torch.rand(3, 3, 32, 40, generator=g) - 4)
    test = (ref * 1.1).clamp(min=0)
    out = flip_loss.hdr_flip(test.cuda(), ref.cuda(), 67.0)
    torch.testing.assert_close(out.cpu(), flip_loss.hdr_flip(test, ref, 67.0), rtol=1e-4, atol=1e-5)


@needs_kernels
def test_hdr_compile_reduce_overhead_given_exposures():
    torch._dynamo.reset()
    ref = torch.exp2(4 * torch.rand(1, 3, 24, 24) - 2).cuda()
    test = (ref * 0.9).clamp(min=0)
    loss_fn = flip_loss.FLIPLoss(hdr=True, start_exposure=-2.0, stop_exposure=2.0, num_exposures=4)

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def step(x, y):
        return loss_fn(x, y)

    for _ in range(3):
        x = test.clone().requires_grad_()
        out = step(x, ref)
        out.backward()
    xe = test.clone().requires_grad_()
    eager = loss_fn(xe, ref)
    eager.backward()
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad, xe.grad, rtol=1e-4, atol=1e-7)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask", [[True, False], [False, True]], ids=["test only", "reference only"])
def test_backward_of_one_image_matches_cpu(ops, dtype, mask):
    # The tiled backward does no work for the image whose gradient is not asked: the other one's
    # gradient still matches the CPU kernels, LDR and HDR (with the CPU's winning index).
    a, b = inputs((2, 3, 37, 53), dtype)
    w = torch.rand(2, 1, 37, 53, generator=torch.Generator().manual_seed(2), dtype=dtype)
    tol = grad_tol(dtype)
    args = (67.0, "srgb", 1e-15)
    gc = ops.ldr_flip_backward(w.cuda(), a.cuda(), b.cuda(), *args, mask)
    gh = ops.ldr_flip_backward(w, a, b, *args, [True, True])
    for want, c, h in zip(mask, gc, gh):
        assert c.numel() == (h.numel() if want else 0)
        if want:
            assert_close_to_cpu([c], [h], dtype, map_tol=tol)
    ex = torch.tensor([[-2.0, 0.0, 1.5], [0.0, 1.0, 1.0]], dtype=dtype)
    counts = torch.tensor([3, 2])
    ha, hb = 4 * a, 4 * b
    index = ops.hdr_flip(ha, hb, ex, counts, 30.0, "aces", 1e-15)[2]
    gc = ops.hdr_flip_backward(
        w.cuda(), ha.cuda(), hb.cuda(), ex.cuda(), counts.cuda(), index.cuda(), 30.0, "aces", 1e-15, mask
    )
    gh = ops.hdr_flip_backward(w, ha, hb, ex, counts, index, 30.0, "aces", 1e-15, [True, True])
    for want, c, h in zip(mask, gc, gh):
        assert c.numel() == (h.numel() if want else 0)
        if want:
            assert_close_to_cpu([c], [h], dtype, map_tol=tol)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_ppd_backward_matches_cpu(ops, dtype):
    # ppd 150 (radius 21): float32 still takes the fused forward and the tiled backward, float64's
    # shared memory does not fit (over 227 KB per block), so it takes the row passes.
    a, b = inputs((1, 3, 45, 70), dtype)
    fn = lambda x, y: ops.ldr_flip(x, y, 150.0, "linear", 1e-15)  # noqa: E731
    oc, gc = grads(fn, a.cuda(), b.cuda())
    oh, gh = grads(fn, a, b)
    assert_close_to_cpu([oc], [oh], dtype)
    assert_close_to_cpu(gc, gh, dtype, map_tol=grad_tol(dtype))


@needs_kernels
@pytest.mark.parametrize("shape", [(1, 3, 4_300_000, 1), (65_600, 3, 2, 2)], ids=["tall", "many items"])
def test_grid_striding_tiles_match_cpu(ops, shape):
    # More than 65535 blocks down the grid's y (4.3 M rows: 268750 tiles of 16 rows, 67188 walks of
    # 4; one band: a single-column image's gradient planes fit the scratch) or items along its z:
    # the fused forward, both tiled backward kernels and autograd's kept pair (kTiledGrad over the
    # whole batch, kTiledTranspose on the kept sensitivities: 120 MB here) stride over them. Only the
    # test image's gradient, as a loss has.
    a, b = inputs(shape)
    w = torch.linspace(-1, 1, a[:, :1].numel()).view(a[:, :1].shape)
    x = a.clone().requires_grad_()
    out = ops.ldr_flip(x, b, 67.0, "srgb", 1e-15)
    (out * w).sum().backward()
    ac, bc = a.cuda(), b.cuda()
    xc = ac.clone().requires_grad_()
    kept = ops.ldr_flip(xc, bc, 67.0, "srgb", 1e-15)
    assert "Sensitivities" in kept.grad_fn.name()
    (kept * w.cuda()).sum().backward()
    with torch.no_grad():
        fused = ops.ldr_flip(ac, bc, 67.0, "srgb", 1e-15)
    recomputed = ops.ldr_flip_backward(w.cuda(), ac, bc, 67.0, "srgb", 1e-15, [True, False])[0]
    assert_close_to_cpu([kept.detach(), fused], [out.detach()] * 2, torch.float32)
    assert_close_to_cpu([xc.grad, recomputed], [x.grad] * 2, torch.float32, map_tol=grad_tol(torch.float32))


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hdr_backward_skipping_tiles_matches_cpu(ops, dtype):
    # Brightness rising 14 stops from left to right: each exposure wins in a vertical strip, and the
    # tiled backward skips the tiles an exposure won nowhere near (tests/gpu/test_gpu_emulation.py checks
    # that such tiles exist); the gradients through the CPU's index still match the CPU kernels.
    test, ref, ex, counts, g = exposure_strips(dtype)
    index = ops.hdr_flip(test, ref, ex, counts, 20.0, "aces", 1e-15)[2]
    w = torch.rand(2, 1, 37, 150, generator=g, dtype=dtype)
    gc = ops.hdr_flip_backward(
        w.cuda(), test.cuda(), ref.cuda(), ex.cuda(), counts.cuda(), index.cuda(), 20.0, "aces", 1e-15, [True, True]
    )
    gh = ops.hdr_flip_backward(w, test, ref, ex, counts, index, 20.0, "aces", 1e-15, [True, True])
    assert_close_to_cpu(gc, gh, dtype, map_tol=grad_tol(dtype))
