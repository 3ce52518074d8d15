"""The registered ops: gradients (gradcheck, against the reference), opcheck, dtypes, layouts."""

import pytest
import torch
from torch.autograd import gradcheck

from flip_loss import oracle
from flip_loss.constants import TONE_MAPPERS

PPD_SMALL = 4.0  # small radii (CSF 1, features 2) keep gradcheck quick


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


# ---- gradcheck (float64, both inputs) ----


@pytest.mark.parametrize("space", ["srgb", "linear"])
def test_gradcheck_ldr_flip(ops, space):
    a, b = pair((2, 3, 5, 6))
    a.requires_grad_(), b.requires_grad_()
    assert gradcheck(lambda x, y: ops.ldr_flip(x, y, PPD_SMALL, space, 1e-15), (a, b), eps=1e-7, atol=1e-6)


def test_gradcheck_ldr_flip_larger_radius(ops):
    a, b = pair((1, 3, 9, 7), seed=3)
    a.requires_grad_(), b.requires_grad_()
    assert gradcheck(lambda x, y: ops.ldr_flip(x, y, 12.0, "srgb", 1e-15), (a, b), eps=1e-7, atol=1e-6)


def test_gradcheck_csf_filter(ops):
    a, _ = pair((2, 3, 6, 5))
    opp = oracle.linear_rgb_to_opponent(a * 0.8).requires_grad_()
    assert gradcheck(lambda o: ops.csf_filter(o, PPD_SMALL), (opp,), eps=1e-6, atol=1e-6)


def test_gradcheck_hunt_hyab(ops):
    a, b = pair((2, 3, 4, 5))
    a.requires_grad_(), b.requires_grad_()
    assert gradcheck(lambda x, y: ops.hunt_hyab(x, y, 1e-15), (a, b), eps=1e-7, atol=1e-6)


def test_gradcheck_feature_difference(ops):
    a, b = pair((2, 1, 7, 6))
    a.requires_grad_(), b.requires_grad_()
    assert gradcheck(lambda x, y: ops.feature_difference(x, y, PPD_SMALL, 1e-15), (a, b), eps=1e-7, atol=1e-6)


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


# ---- agreement with autograd through the pure-PyTorch oracle, on real images ----


@pytest.mark.parametrize("ppd", [30.0, 67.0206451])
def test_ldr_flip_matches_the_oracle_on_real_images(ops, crops, ppd):
    ref = crops["blocks"].unsqueeze(0).double()
    test = (ref + 0.05 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)).clamp(
        0, 1
    )
    o1, g1 = grads(lambda x, y: ops.ldr_flip(x, y, ppd, "srgb", 1e-15), test, ref)
    o2, g2 = grads(lambda x, y: oracle.ldr_flip(x, y, ppd, "srgb", 1e-15), test, ref)
    torch.testing.assert_close(o1, o2, rtol=0, atol=1e-12)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


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


def test_stage_ops_match_the_oracle(ops, crops):
    img = crops["toys"].unsqueeze(0).double()
    other = torch.roll(img, 1, dims=-1)
    lin_a, lin_b = oracle.srgb_to_linear(img), oracle.srgb_to_linear(other)
    opp = oracle.linear_rgb_to_opponent(lin_a)
    cases = [
        (lambda o: ops.csf_filter(o, 67.0), lambda o: oracle.csf_filter(o, 67.0), (opp,)),
        (lambda x, y: ops.hunt_hyab(x, y, 1e-15), lambda x, y: oracle.hunt_hyab(x, y, 1e-15), (lin_a, lin_b)),
        (
            lambda x, y: ops.feature_difference(x, y, 67.0, 1e-15),
            lambda x, y: oracle.feature_difference(x, y, 67.0, 1e-15),
            (lin_a[:, 1:2], lin_b[:, 1:2]),
        ),
    ]
    for f_op, f_ref, inputs in cases:
        o1, g1 = grads(f_op, *inputs)
        o2, g2 = grads(f_ref, *inputs)
        torch.testing.assert_close(o1, o2, rtol=0, atol=1e-12)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


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
    # An empty batch has no map to reduce; every op says so (tests/test_op_checks.py, all ops).
    a = torch.rand(0, 3, 8, 8)
    with pytest.raises(ValueError, match="empty batch"):
        ops.ldr_flip(a, a, 67.0, "srgb", 1e-15)


# ---- opcheck ----


def _opcheck_cases():
    a, b = pair((2, 3, 6, 7), dtype=torch.float32)
    y1, y2 = pair((2, 1, 6, 7), seed=4, dtype=torch.float32)
    g1 = torch.rand(2, 1, 6, 7)
    g3 = torch.rand(2, 3, 6, 7)
    opp = oracle.linear_rgb_to_opponent(a)
    return [
        ("ldr_flip", (a, b, 30.0, "srgb", 1e-15)),
        ("ldr_flip", (a[0], b[0], 30.0, "linear", 1e-15)),
        ("ldr_flip_backward", (g1, a, b, 30.0, "srgb", 1e-15, [True, True])),
        ("ldr_flip_backward", (g1, a, b, 30.0, "srgb", 1e-15, [True, False])),
        ("csf_filter", (opp, 30.0)),
        ("csf_filter_backward", (g3, opp, 30.0)),
        ("hunt_hyab", (a, b, 1e-15)),
        ("hunt_hyab_backward", (g1, a, b, 1e-15, [True, True])),
        ("feature_difference", (y1, y2, 30.0, 1e-15)),
        ("feature_difference_backward", (g1, y1, y2, 30.0, 1e-15, [False, True])),
    ]


@pytest.mark.parametrize("name,args", _opcheck_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_opcheck(ops, name, args):
    differentiable = not name.endswith("_backward")
    if differentiable:
        n = 1 if name == "csf_filter" else 2
        args = tuple(a.clone().requires_grad_() if i < n else a for i, a in enumerate(args))
    torch.library.opcheck(getattr(ops, name).default, args)


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
        args[0], args[1] = (a * 255).to(torch.uint8), (b * 255).to(torch.uint8)
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
