"""The registered ops beyond the checks every op goes through (test_op_tester.py: gradcheck, opcheck,
the oracle, autocast, meta): the gradient at every kink, output masks, singular points, dtypes,
layouts, batches and bad input."""

import pytest
import torch

from flip_loss import oracle
from flip_loss.constants import TONE_MAPPERS


def pair(shape, seed=0, dtype=torch.float64, lo=0.1, hi=0.9):
    g = torch.Generator().manual_seed(seed)
    a = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=dtype)
    b = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=dtype)
    return a, b


def grads(fn, *inputs, weight_seed=1):
    xs = [x.detach().clone().requires_grad_() for x in inputs]
    out = fn(*xs)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(weight_seed), dtype=out.dtype)
    (out * w).sum().backward()
    return out.detach(), [x.grad for x in xs]


# ---- output masks ----


@pytest.mark.parametrize("op", ["ldr_flip_backward", "hunt_hyab_backward", "feature_difference_backward"])
def test_output_mask_skips_unneeded_gradient(ops, op):
    a, b = pair((1, 3 if op != "feature_difference_backward" else 1, 6, 7))
    g = torch.ones(1, 1, 6, 7, dtype=torch.float64)
    args = {
        "ldr_flip_backward": (67.0, "srgb", 1e-15),
        "hunt_hyab_backward": (1e-15,),
        "feature_difference_backward": (67.0, 1e-15),
    }[op]
    full = getattr(ops, op)(g, a, b, *args, [True, True])
    only_test = getattr(ops, op)(g, a, b, *args, [True, False])
    assert only_test[1].numel() == 0
    torch.testing.assert_close(only_test[0], full[0], rtol=0, atol=0)


# ---- the kinks: the kernels, the oracle and the documented rule agree ----


def saturated(shape, seed):
    """Values of which about a third are exactly 0 and a third exactly 1: pixels on the bounds of
    the input clamp, where the gradient's rule (docs/algorithm.md §7.4) decides."""
    x = torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.where(x < 0.33, torch.zeros_like(x), torch.where(x > 0.67, torch.ones_like(x), x))


@pytest.mark.parametrize("space", ["srgb", "linear"])
@pytest.mark.parametrize("eps", [0.0, 1e-15])
def test_gradients_at_saturated_pixels_follow_one_rule(ops, space, eps):
    # The oracle writes the kink rules out itself, so this holds whatever torch's own clamp does
    # at its bounds (which changed between releases).
    test, ref = saturated((2, 3, 20, 24), 0), saturated((2, 3, 20, 24), 1)
    o1, g1 = grads(lambda x, y: ops.ldr_flip(x, y, 30.0, space, eps), test, ref)
    o2, g2 = grads(lambda x, y: oracle.ldr_flip(x, y, 30.0, space, eps), test, ref)
    torch.testing.assert_close(o1, o2, rtol=0, atol=1e-12)
    for a, b in zip(g1, g2):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    # A pixel on a bound receives a gradient (the bound passes it), one outside none.
    x = test.clone()
    x[0, :, 5, 5] = torch.tensor([0.0, 1.0, -0.25])
    _, (gx, _) = grads(lambda a, b: ops.ldr_flip(a, b, 30.0, space, eps), x, ref)
    assert gx[0, 2, 5, 5] == 0 and (gx[0, :2].abs().sum() > 0)


def test_identical_images_with_eps_zero_have_the_kernels_zero_gradient(ops):
    img = saturated((1, 3, 12, 12), 2)
    o1, g1 = grads(lambda x, y: ops.ldr_flip(x, y, 67.0, "srgb", 0.0), img, img)
    o2, g2 = grads(lambda x, y: oracle.ldr_flip(x, y, 67.0, "srgb", 0.0), img, img)
    assert (o1 == 0).all() and (o2 == 0).all()
    for a, b in zip(g1, g2):
        assert torch.equal(a, b) and (a == 0).all()


@pytest.mark.parametrize("tone_mapper", TONE_MAPPERS)
def test_hdr_gradients_at_black_and_saturated_pixels_follow_one_rule(ops, tone_mapper):
    g = torch.Generator().manual_seed(3)
    ref = torch.exp2(8 * torch.rand(1, 3, 16, 16, generator=g, dtype=torch.float64) - 4)
    ref[..., :4, :] = 0.0  # on the negative-value clamp's bound
    test = ref * 1.3
    test[..., 4:6, :] = -0.5  # below it
    exposures = torch.tensor([[-3.0, 0.0, 3.0, 9.0]], dtype=torch.float64)  # 9 stops saturates the curves
    counts = torch.tensor([4])
    o1, g1 = grads(lambda x, y: ops.hdr_flip(x, y, exposures, counts, 67.0, tone_mapper, 1e-15)[0], test, ref)
    o2, g2 = grads(lambda x, y: oracle.hdr_flip(x, y, 67.0, tone_mapper, exposures, counts, 1e-15)[0], test, ref)
    torch.testing.assert_close(o1, o2, rtol=0, atol=1e-12)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def weighted_sum_along(fn, x, index, weight, side, h=1e-4):
    """The one-sided derivative of (fn(x) * weight).sum() in x[index], from the ``side`` (+1: right,
    -1: left) of x, by the second-order one-sided difference (f(0), f(h), f(2h))."""

    def at(step):
        y = x.clone()
        y[index] += side * step
        return float((fn(y) * weight).sum())

    return side * (-3.0 * at(0.0) + 4.0 * at(h) - at(2.0 * h)) / (2.0 * h)


@pytest.mark.parametrize(
    "space,value,side",
    [
        ("srgb", 0.0, +1),  # input clamp at 0: the derivative from inside
        ("srgb", 1.0, -1),  # input clamp at 1
        ("srgb", 0.04045, -1),  # the sRGB knee: the linear segment's slope
        ("linear", 0.0, +1),
        ("linear", 1.0, -1),
    ],
)
def test_the_gradient_at_an_input_kink_is_the_documented_one_sided_derivative(ops, space, value, side):
    # docs/algorithm.md §7.4: a value on a clamp's bound passes the gradient (the derivative from
    # inside the interval), the sRGB knee takes its linear segment's. Kernels and oracle both, on
    # every torch release; the other side's derivative differs, so a flipped rule fails.
    g = torch.Generator().manual_seed(5)
    ref = 0.1 + 0.8 * torch.rand(1, 3, 10, 11, generator=g, dtype=torch.float64)
    test = 0.1 + 0.8 * torch.rand(1, 3, 10, 11, generator=g, dtype=torch.float64)
    weight = torch.rand(1, 1, 10, 11, generator=g, dtype=torch.float64)
    index = (0, 1, 4, 5)
    test[index] = value

    def kernel(x):
        return ops.ldr_flip(x, ref, 30.0, space, 1e-15)

    def pure(x):
        return oracle.ldr_flip(x, ref, 30.0, space, 1e-15)

    x, y = test.clone().requires_grad_(), test.clone().requires_grad_()
    (kernel(x) * weight).sum().backward()
    (pure(y) * weight).sum().backward()
    g_kernel, g_oracle = x.grad[index].item(), y.grad[index].item()
    assert g_kernel == pytest.approx(g_oracle, rel=1e-9)
    assert g_kernel == pytest.approx(weighted_sum_along(kernel, test, index, weight, side), rel=1e-4)
    other_side = weighted_sum_along(kernel, test, index, weight, -side)
    assert abs(other_side - g_kernel) > 1e-2 * abs(g_kernel)


def random_vertices(shape, seed, high):
    """HDR images whose channels are each 0 or ``high``, no pixel white: tone mapped, every pixel is
    a corner of the RGB cube (other than white) at every exposure of a range that saturates ``high``."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(shape, generator=g) < 0.5).double()
    white = x.sum(-3, keepdim=True) == 3
    x[:, :1] = torch.where(white, torch.zeros_like(x[:, :1]), x[:, :1])
    return high * x


@pytest.mark.parametrize("tone_mapper", TONE_MAPPERS)
def test_hdr_exposures_that_tie_give_the_earliest_its_gradient(ops, tone_mapper):
    # Corners of the RGB cube tone-map to the same LDR pair at every exposure, so all exposures tie
    # at every pixel. By the rules (docs/algorithm.md §7.4), the earliest exposure c0 wins, a channel
    # at 0 passes (the negative-value clamp and the tone map clamp at 0 both pass their bound) with
    # the chain factor T'(0) * 2^c0, a saturated channel passes nothing: the HDR gradient is the LDR
    # gradient of that pair times this factor, by hand.
    test, ref = random_vertices((1, 3, 8, 9), 0, 1e6), random_vertices((1, 3, 8, 9), 1, 1e6)
    exposures = torch.tensor([[-2.0, 0.0, 2.0]], dtype=torch.float64)
    counts = torch.tensor([3])
    weight = torch.rand(1, 1, 8, 9, generator=torch.Generator().manual_seed(2), dtype=torch.float64)

    def hdr(fn):
        xs = [test.clone().requires_grad_(), ref.clone().requires_grad_()]
        out = fn(*xs)
        (out[0] * weight).sum().backward()
        return out, [x.grad for x in xs]

    (o1, _, index), g1 = hdr(lambda x, y: ops.hdr_flip(x, y, exposures, counts, 67.0, tone_mapper, 1e-15))
    (o2, _, index2), g2 = hdr(lambda x, y: oracle.hdr_flip(x, y, 67.0, tone_mapper, exposures, counts, 1e-15))
    assert (index == 0).all() and (index2 == 0).all()
    ldr = [(x > 0).double().requires_grad_() for x in (test, ref)]
    (ops.ldr_flip(ldr[0], ldr[1], 67.0, "linear", 1e-15) * weight).sum().backward()
    scale = 2.0 ** exposures[0, 0].item()
    for x, g_kernel, g_oracle, g_ldr in zip((test, ref), g1, g2, (ldr[0].grad, ldr[1].grad)):
        # the LDR gradient through the curve at c0, for any curve of the registry: its slope at 0
        _, through_curve = torch.func.vjp(lambda v: oracle.hdr_to_ldr(v, scale, tone_mapper), x)
        by_hand = through_curve(g_ldr)[0] * (x == 0)
        if tone_mapper == "reinhard":  # x / (1 + luminance): the slope at 0 is 1 / (1 + luminance)
            w = torch.tensor([0.2126, 0.7152, 0.0722], dtype=torch.float32).double().view(1, 3, 1, 1)
            slope = 1.0 / (1.0 + (w * x * scale).sum(1, keepdim=True))
        elif tone_mapper in ("aces", "hable"):  # their rational rows: k1 / k5
            k = oracle.tone_coefficients(tone_mapper)
            slope = k[1] / k[5]
        if tone_mapper in ("reinhard", "aces", "hable"):
            torch.testing.assert_close(by_hand, g_ldr * slope * scale * (x == 0), rtol=1e-12, atol=0)
        assert (by_hand != 0).any()
        torch.testing.assert_close(g_kernel, by_hand, rtol=1e-9, atol=1e-15)
        torch.testing.assert_close(g_oracle, by_hand, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_with_eps_zero_flat_images_have_no_feature_gradient(ops, dtype):
    # On flat images the edge and point responses are exactly 0: the feature difference sits on
    # every kink at once (|0|, the norms at the origin, the tie, sqrt(max(0, 0))), each of which
    # passes nothing. The map is then the colour term, and so is its gradient, by hand from the
    # single-stage ops.
    a = torch.tensor([0.3, 0.5, 0.7], dtype=dtype).view(1, 3, 1, 1).expand(1, 3, 9, 9).contiguous()
    b = torch.tensor([0.6, 0.4, 0.2], dtype=dtype).view(1, 3, 1, 1).expand(1, 3, 9, 9).contiguous()

    def colour_term(x):
        def filtered(v):
            return ops.csf_filter(oracle.linear_rgb_to_opponent(oracle.srgb_to_linear(v)), 30.0)

        return ops.hunt_hyab(filtered(x), filtered(b), 0.0)

    tol = dict(rtol=1e-9, atol=0) if dtype == torch.float64 else dict(rtol=2e-5, atol=1e-6)
    _, (by_hand,) = grads(colour_term, a)
    for fn in (ops.ldr_flip, oracle.ldr_flip):
        _, (g,) = grads(lambda x, f=fn: f(x, b, 30.0, "srgb", 0.0), a)
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, by_hand, **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_grey_images_get_no_chroma_gradient(ops, dtype):
    # Grey pixels' chroma differences are rounding noise, below the floor of docs/algorithm.md
    # §7.11, where the chroma term passes nothing: every gradient then comes through the lightness
    # and the achromatic channel, and points along the luminance row of the RGB -> XYZ matrix.
    g = torch.Generator().manual_seed(8)
    level = torch.rand(1, 1, 10, 11, generator=g, dtype=torch.float64)
    test = (level + 0.1 * torch.rand(1, 1, 10, 11, generator=g, dtype=torch.float64)).clamp(0, 1)
    test, ref = (v.expand(1, 3, 10, 11).to(dtype).contiguous() for v in (test, level))
    luminance = torch.tensor(oracle.RGB_TO_XYZ[1], dtype=torch.float64).view(1, 3, 1, 1)
    luminance = luminance / luminance.norm()
    for fn in (ops.ldr_flip, oracle.ldr_flip):
        _, (grad,) = grads(lambda x, f=fn: f(x, ref, 30.0, "srgb", 1e-15), test)
        grad = grad.double()
        across = grad - (grad * luminance).sum(1, keepdim=True) * luminance
        assert across.norm() < (1e-12 if dtype == torch.float64 else 1e-6) * grad.norm()


@pytest.mark.parametrize("kind", ["identical", "flat", "black-white", "out-of-range"])
def test_gradients_finite_at_singular_points(ops, kind):
    a, b = pair((1, 3, 12, 10))
    if kind == "identical":
        b = a.clone()
    elif kind == "flat":
        a, b = torch.full_like(a, 0.5), torch.full_like(a, 0.5)
    elif kind == "black-white":
        a, b = torch.zeros_like(a), torch.ones_like(a)
    else:
        a, b = a * 4 - 2, b * 4 - 2
    for dtype in (torch.float32, torch.float64):
        out, (ga, gb) = grads(lambda x, y: ops.ldr_flip(x, y, 67.0, "srgb", 1e-15), a.to(dtype), b.to(dtype))
        assert torch.isfinite(out).all() and torch.isfinite(ga).all() and torch.isfinite(gb).all()
        assert (out >= 0).all() and (out <= 1).all()


def test_identical_images_give_near_zero_error(ops, crops):
    img = crops["rug"].unsqueeze(0)
    out = ops.ldr_flip(img, img, 67.0, "srgb", 1e-15)
    assert out.max() < 1e-5
    assert ops.ldr_flip(img, img, 67.0, "srgb", 0.0).max() == 0


def test_symmetric_in_its_arguments(ops, crops):
    a = crops["toys"].unsqueeze(0)
    b = torch.flip(a, dims=[-1])
    torch.testing.assert_close(
        ops.ldr_flip(a, b, 67.0, "srgb", 1e-15), ops.ldr_flip(b, a, 67.0, "srgb", 1e-15), rtol=0, atol=1e-6
    )


# ---- dtypes, layouts, batches ----


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_computed_in_float32(ops, crops, dtype):
    a = crops["toys"].unsqueeze(0)
    b = a.flip(-2)
    out = ops.ldr_flip(a.to(dtype), b.to(dtype), 67.0, "srgb", 1e-15)
    assert out.dtype == dtype
    expected = ops.ldr_flip(a.to(dtype).float(), b.to(dtype).float(), 67.0, "srgb", 1e-15)
    torch.testing.assert_close(out, expected.to(dtype))
    _, (ga, gb) = grads(lambda x, y: ops.ldr_flip(x, y, 67.0, "srgb", 1e-15), a.to(dtype), b.to(dtype))
    assert ga.dtype == dtype and gb.dtype == dtype and torch.isfinite(ga.float()).all()


def test_non_contiguous_and_unbatched_inputs(ops, crops):
    a = crops["blocks"].unsqueeze(0)
    b = a.flip(-1)
    expected = ops.ldr_flip(a, b, 67.0, "srgb", 1e-15)
    a_nhwc = a.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # channels-last strides
    torch.testing.assert_close(ops.ldr_flip(a_nhwc, b, 67.0, "srgb", 1e-15), expected, rtol=0, atol=0)
    chw = ops.ldr_flip(a[0], b[0], 67.0, "srgb", 1e-15)
    assert chw.shape == (1,) + a.shape[-2:]
    torch.testing.assert_close(chw, expected[0], rtol=0, atol=0)
    wide = torch.cat([a, b], dim=-1)[..., ::2]  # strided view
    torch.testing.assert_close(
        ops.ldr_flip(wide, wide.flip(-1), 67.0, "srgb", 1e-15),
        ops.ldr_flip(wide.contiguous(), wide.flip(-1).contiguous(), 67.0, "srgb", 1e-15),
    )


def test_batch_equals_per_image(ops, crops):
    a = torch.stack([crops["toys"], crops["toys"].flip(-1), crops["toys"].flip(-2)])
    b = a.roll(1, dims=0)
    batch = ops.ldr_flip(a, b, 40.0, "linear", 1e-15)
    for i in range(3):
        torch.testing.assert_close(
            batch[i : i + 1], ops.ldr_flip(a[i : i + 1], b[i : i + 1], 40.0, "linear", 1e-15), rtol=0, atol=0
        )


@pytest.mark.parametrize("hw", [(1, 1), (2, 3), (5, 7), (40, 1), (1, 33)])
def test_images_smaller_than_the_filters(ops, hw):
    a, b = pair((2, 3) + hw, seed=5)
    o1, g1 = grads(lambda x, y: ops.ldr_flip(x, y, 67.0, "srgb", 1e-15), a, b)
    o2, g2 = grads(lambda x, y: oracle.ldr_flip(x, y, 67.0, "srgb", 1e-15), a, b)
    torch.testing.assert_close(o1, o2, rtol=0, atol=1e-12)
    for x, y in zip(g1, g2):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-12)


def test_empty_batch_rejected(ops):
    # An empty batch has no map to reduce; every op says so (tests/ops/test_op_checks.py, all ops).
    a = torch.rand(0, 3, 8, 8)
    with pytest.raises(ValueError, match="empty batch"):
        ops.ldr_flip(a, a, 67.0, "srgb", 1e-15)


# ---- bad input ----

# Bad arguments raise what the Python API raises (TypeError for a dtype, ValueError otherwise);
# NaN/Inf image data, found by the kernels, raises RuntimeError.
BAD_INPUT_ERRORS = {
    "channels": ValueError,
    "shape": ValueError,
    "dtype": TypeError,
    "int": TypeError,
    "ppd": ValueError,
    "ppd-nan": ValueError,
    "ppd-large": ValueError,
    "space": ValueError,
    "eps": ValueError,
    "eps-large": ValueError,
    "nan": RuntimeError,
    "inf": RuntimeError,
    "dims": ValueError,
    "empty-hw": ValueError,
}


@pytest.mark.parametrize("case", list(BAD_INPUT_ERRORS))
def test_bad_input_raises(ops, case):
    a, b = pair((1, 3, 8, 8), dtype=torch.float32)
    args = [a, b, 67.0, "srgb", 1e-15]
    if case == "channels":
        args[0], args[1] = a[:, :2], b[:, :2]
    elif case == "shape":
        args[1] = b[..., :7]
    elif case == "dtype":
        args[1] = b.double()
    elif case == "int":
        args[0], args[1] = (a * 255).to(torch.int16), (b * 255).to(torch.int16)  # uint8: 8-bit codes
    elif case == "ppd":
        args[2] = 0.0
    elif case == "ppd-nan":
        args[2] = float("nan")
    elif case == "ppd-large":
        args[2] = 2e4
    elif case == "space":
        args[3] = "rgb"
    elif case == "eps":
        args[4] = -1.0
    elif case == "eps-large":
        args[4] = 1e-5
    elif case == "nan":
        args[0] = a.clone()
        args[0][0, 1, 2, 3] = float("nan")
    elif case == "inf":
        args[1] = b.clone()
        args[1][0, 0, 0, 0] = float("inf")
    elif case == "dims":
        args[0], args[1] = a[0, 0], b[0, 0]
    elif case == "empty-hw":
        args[0], args[1] = a[..., :0], b[..., :0]
    with pytest.raises(BAD_INPUT_ERRORS[case], match="flip"):
        ops.ldr_flip(*args)


def test_stage_ops_reject_bad_input(ops):
    a, b = pair((1, 3, 8, 8), dtype=torch.float32)
    with pytest.raises(ValueError, match="1 channel"):
        ops.feature_difference(a, b, 67.0, 1e-15)
    with pytest.raises(ValueError, match="pixels_per_degree"):
        ops.csf_filter(a, -1.0)
    with pytest.raises(ValueError, match="grad must have shape"):
        ops.ldr_flip_backward(torch.ones(1, 3, 8, 8), a, b, 67.0, "srgb", 1e-15, [True, True])
