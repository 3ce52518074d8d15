"""Tests of the pure-PyTorch oracle (flip_loss/oracle.py): taps, constants, properties and
gradients."""

import itertools
import math

import pytest
import torch

from flip_loss import oracle

PPD_C = 67.0206451  # the evaluator's float32 default, at which docs/algorithm.md §10 prints its tables
SMALL_PPD = 10.0  # CSF radius 2, feature radius 2: keeps gradcheck cheap


def _rand(shape, lo=0.1, hi=0.9, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return lo + (hi - lo) * torch.rand(shape, generator=g, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Taps and constants (docs/algorithm.md §4.4, §4.9, §4.10; tables in §10)
# ---------------------------------------------------------------------------------------------

CSF_TABLE = {  # offset: (Y, Cx, Cz f1, Cz f2), the evaluator's float32 values (docs/algorithm.md §10.1 prints float64 ones)
    0: (0.385760248, 0.363269061, 0.115442052, 0.0816927925),
    1: (0.241703719, 0.239982337, 0.109271646, 0.0748192519),
    2: (0.0594539903, 0.069188185, 0.0926697478, 0.0574780628),
    3: (0.0057412996, 0.00870534778, 0.0704134181, 0.0370382145),
}

FEATURE_TABLE = {  # k: (g, dg for k < 0, ddg)
    0: (0.145257458, 0.0, -0.298901498),
    1: (0.135950163, 0.125649005, -0.242699876),
    2: (0.111456037, 0.206021681, -0.107849345),
    3: (0.0800405517, 0.221927285, 0.0320539996),
    5: (0.0277441088, 0.128209472, 0.133767888),
    9: (6.80273108e-4, 0.00565855019, 0.0138061726),
}


def test_csf_taps_match_spec_table():
    t = oracle.csf_taps(PPD_C)
    r = t["radius"]
    assert r == 10
    for name in ("y", "cx", "cz1", "cz2"):
        assert t[name].shape == (2 * r + 1,) and t[name].dtype == torch.float64
        assert torch.equal(t[name], t[name].flip(0))  # symmetric
    for off, expected in CSF_TABLE.items():
        for name, e in zip(("y", "cx", "cz1", "cz2"), expected):
            for i in (r + off, r - off):
                assert math.isclose(t[name][i].item(), e, rel_tol=1e-6), (name, off)
    assert math.isclose(t["y"].sum().item(), 1.0, rel_tol=1e-14)
    assert math.isclose(t["cx"].sum().item(), 1.0, rel_tol=1e-14)
    # Joint normalisation of the two blue-yellow Gaussians: the 2-D kernel sums to one.
    s1, s2 = t["cz1"].sum().item(), t["cz2"].sum().item()
    assert math.isclose(s1 * s1 + s2 * s2, 1.0, rel_tol=1e-14)
    assert math.isclose(s1 * s1, 0.7615, abs_tol=1e-4)


def test_feature_taps_match_spec_table():
    t = oracle.feature_taps(PPD_C)
    r = t["radius"]
    assert r == 9
    for name in ("g", "dg", "ddg"):
        assert t[name].shape == (2 * r + 1,)
    for k, (g, dg, ddg) in FEATURE_TABLE.items():
        for sign in (-1, 1):
            i = r + sign * k
            assert math.isclose(t["g"][i].item(), g, rel_tol=1e-6), ("g", k)
            assert math.isclose(t["ddg"][i].item(), ddg, rel_tol=1e-6), ("ddg", k)
            expected_dg = dg if sign < 0 else -dg  # positive for negative offsets
            assert math.isclose(t["dg"][i].item(), expected_dg, rel_tol=1e-6, abs_tol=1e-300), ("dg", sign * k)
    assert math.isclose(t["g"].sum().item(), 1.0, rel_tol=1e-14)
    for name in ("dg", "ddg"):
        taps = t[name]
        assert math.isclose(taps[taps > 0].sum().item(), 1.0, rel_tol=1e-14)
        assert math.isclose(taps[taps < 0].sum().item(), -1.0, rel_tol=1e-14)


@pytest.mark.parametrize("ppd,csf_r,feat_r", [(30.0, 5, 4), (120.0, 17, 15), (10.0, 2, 2)])
def test_radii(ppd, csf_r, feat_r):
    assert oracle.csf_taps(ppd)["radius"] == csf_r == math.ceil(3 * math.sqrt(0.04 / (2 * math.pi**2)) * ppd)
    assert oracle.feature_taps(ppd)["radius"] == feat_r == math.ceil(3 * 0.5 * 0.082 * ppd)


def test_taps_cast_to_dtype():
    t = oracle.csf_taps(30.0, dtype=torch.float32)
    assert t["y"].dtype == torch.float32
    f = oracle.feature_taps(30.0, dtype=torch.float16)
    assert f["ddg"].dtype == torch.float16


def test_cmax():
    assert math.isclose(oracle.cmax(), 41.2760963, rel_tol=1e-6)
    # Green vs blue through hunt_hyab sits at the top of the redistributed range.
    green = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).view(1, 3, 1, 1)
    blue = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).view(1, 3, 1, 1)
    assert math.isclose(oracle.hunt_hyab(green, blue).item(), 1.0, rel_tol=1e-12)


# ---------------------------------------------------------------------------------------------
# Colour transforms
# ---------------------------------------------------------------------------------------------


def test_srgb_round_trip_and_branches():
    x = torch.linspace(0, 1, 1001, dtype=torch.float64)
    lin = oracle.srgb_to_linear(x)
    torch.testing.assert_close(oracle.linear_to_srgb(lin), x, rtol=0, atol=1e-12)
    assert math.isclose(
        oracle.srgb_to_linear(torch.tensor(0.5, dtype=torch.float64)).item(),
        ((0.5 + 0.055) / 1.055) ** 2.4,
        rel_tol=1e-15,
    )
    assert math.isclose(
        oracle.srgb_to_linear(torch.tensor(0.02, dtype=torch.float64)).item(), 0.02 / 12.92, rel_tol=1e-15
    )
    # Out-of-range values: the unselected branch must not poison the gradient.
    z = torch.tensor([-0.5, 0.0, 0.02, 0.5, 1.0], dtype=torch.float64, requires_grad=True)
    oracle.srgb_to_linear(z).sum().backward()
    assert torch.isfinite(z.grad).all()
    z2 = torch.tensor([-0.5, 0.0, 0.001, 0.5], dtype=torch.float64, requires_grad=True)
    oracle.linear_to_srgb(z2).sum().backward()
    assert torch.isfinite(z2.grad).all()


def test_opponent_round_trip_and_white():
    rgb = _rand((2, 3, 4, 5), 0.0, 1.0)
    opp = oracle.linear_rgb_to_opponent(rgb)
    torch.testing.assert_close(oracle.opponent_to_linear_rgb(opp), rgb, rtol=0, atol=1e-13)
    white = oracle.linear_rgb_to_opponent(torch.ones(1, 3, 1, 1, dtype=torch.float64))
    torch.testing.assert_close(
        white.flatten(), torch.tensor([100.0, 0.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-12
    )
    # No clamp in the inverse: out-of-gamut colours survive.
    out = oracle.opponent_to_linear_rgb(torch.tensor([50.0, 200.0, -150.0], dtype=torch.float64).view(1, 3, 1, 1))
    assert out.min() < 0 or out.max() > 1


# ---------------------------------------------------------------------------------------------
# Filtering: separable + clamp-to-edge equals the 2-D definition, for any image size
# ---------------------------------------------------------------------------------------------


def _csf_filter_2d(opp, ppd):
    """Direct 2-D correlation with the outer-product kernels, clamped sample indices."""
    t = oracle.csf_taps(ppd)
    r = t["radius"]
    kernels = [
        torch.outer(t["y"], t["y"]),
        torch.outer(t["cx"], t["cx"]),
        torch.outer(t["cz1"], t["cz1"]) + torch.outer(t["cz2"], t["cz2"]),
    ]
    n, _, h, w = opp.shape
    out = torch.zeros_like(opp)
    for c, ker in enumerate(kernels):
        for i, j in itertools.product(range(h), range(w)):
            rows = torch.arange(i - r, i + r + 1).clamp(0, h - 1)
            cols = torch.arange(j - r, j + r + 1).clamp(0, w - 1)
            patch = opp[:, c][:, rows][:, :, cols]
            out[:, c, i, j] = (patch * ker).sum(dim=(-2, -1))
    return oracle.opponent_to_linear_rgb(out).clamp(0, 1)


@pytest.mark.parametrize("h,w,ppd", [(5, 7, PPD_C), (1, 1, PPD_C), (2, 3, 30.0), (9, 6, SMALL_PPD), (23, 4, 30.0)])
def test_csf_filter_matches_2d_definition(h, w, ppd):
    rgb = _rand((2, 3, h, w), 0.0, 1.0, seed=h * 100 + w)
    opp = oracle.linear_rgb_to_opponent(rgb)
    torch.testing.assert_close(oracle.csf_filter(opp, ppd), _csf_filter_2d(opp, ppd), rtol=0, atol=1e-12)


def test_csf_filter_preserves_flat_images():
    rgb = torch.tensor([0.2, 0.5, 0.7], dtype=torch.float64).view(1, 3, 1, 1).expand(1, 3, 6, 9)
    out = oracle.csf_filter(oracle.linear_rgb_to_opponent(rgb), PPD_C)
    torch.testing.assert_close(out, rgb, rtol=0, atol=1e-12)


def test_feature_difference_detects_edges_only_where_they_differ():
    y = torch.full((1, 1, 12, 12), 0.5, dtype=torch.float64)
    edge = y.clone()
    edge[..., 6:] = 0.9
    d = oracle.feature_difference(edge, y, SMALL_PPD)
    assert d.shape == (1, 1, 12, 12)
    assert d[..., 5:7].min() > 0.1  # at the step
    assert d[..., :2].max() < 1e-6  # far from it
    assert oracle.feature_difference(y, y, SMALL_PPD).max() <= 1e-7


# ---------------------------------------------------------------------------------------------
# ldr_flip properties
# ---------------------------------------------------------------------------------------------


def test_ldr_flip_symmetry():
    a = _rand((2, 3, 11, 13), 0.0, 1.0, seed=1)
    b = _rand((2, 3, 11, 13), 0.0, 1.0, seed=2)
    torch.testing.assert_close(oracle.ldr_flip(a, b, 30.0), oracle.ldr_flip(b, a, 30.0), rtol=0, atol=1e-15)


@pytest.mark.parametrize("space", ["srgb", "linear"])
@pytest.mark.parametrize("shape", [(1, 3, 61, 23), (2, 3, 40, 17)])
def test_ldr_flip_in_strips_is_ldr_flip_in_one_piece(monkeypatch, shape, space):
    # Large CPU images are evaluated in horizontal strips with their filters' halos: the map and
    # both gradients are those of the whole image, up to rounding, non-finite values included.
    g = torch.Generator().manual_seed(5)
    ref = torch.rand(shape, generator=g, dtype=torch.float64)
    test = ref + 0.05 * torch.randn(shape, generator=g, dtype=torch.float64)
    ref[0, :, :5, :5] = 1.0  # saturated, on the first strip's edge
    test[0, 0, 3, 4] = math.inf
    test[-1, 1, -2, 7] = math.nan  # in the last strip
    results = []
    for strip_pixels in (1 << 40, 200):
        monkeypatch.setattr(oracle, "STRIP_PIXELS", strip_pixels)
        x, y = test.clone().requires_grad_(), ref.clone().requires_grad_()
        m = oracle.ldr_flip(x, y, SMALL_PPD * 3, space)
        m.nan_to_num(0.0).square().sum().backward()
        results.append((m.detach(), x.grad, y.grad))
    halo, rows = oracle._strip_rows(test, SMALL_PPD * 3)
    assert len(rows) >= 2 and sum(rows) == shape[2] and min(rows) >= 2 * halo
    for whole, strips in zip(*results):
        assert torch.equal(whole.isnan(), strips.isnan()) and torch.equal(whole.isinf(), strips.isinf())
        finite = whole.isfinite()
        assert whole[finite].abs().max() > 0
        torch.testing.assert_close(strips[finite], whole[finite], rtol=0, atol=1e-13)


def test_ldr_flip_shapes_and_dtypes():
    a = _rand((3, 8, 9), 0.0, 1.0, seed=3, dtype=torch.float32)
    b = _rand((3, 8, 9), 0.0, 1.0, seed=4, dtype=torch.float32)
    m32 = oracle.ldr_flip(a, b)
    assert m32.shape == (1, 8, 9) and m32.dtype == torch.float32
    assert m32.min() >= 0 and m32.max() <= 1
    batched = oracle.ldr_flip(torch.stack([a, b]), torch.stack([b, a]))
    assert batched.shape == (2, 1, 8, 9)
    torch.testing.assert_close(batched[0], m32)
    m64 = oracle.ldr_flip(a.double(), b.double())
    assert m64.dtype == torch.float64
    torch.testing.assert_close(m32.double(), m64, rtol=0, atol=1e-5)
    for dt in (torch.float16, torch.bfloat16):
        m = oracle.ldr_flip(a.to(dt), b.to(dt))
        assert m.dtype == dt and m.shape == (1, 8, 9)
        ref = oracle.ldr_flip(a.to(dt).float(), b.to(dt).float())
        torch.testing.assert_close(m.float(), ref, rtol=0, atol=1e-2)


def test_ldr_flip_linear_input_space():
    a = _rand((1, 3, 7, 8), 0.0, 1.0, seed=5)
    b = _rand((1, 3, 7, 8), 0.0, 1.0, seed=6)
    srgb = oracle.ldr_flip(a, b, 30.0, "srgb")
    lin = oracle.ldr_flip(oracle.srgb_to_linear(a), oracle.srgb_to_linear(b), 30.0, "linear")
    torch.testing.assert_close(lin, srgb, rtol=0, atol=1e-12)
    with pytest.raises(ValueError):
        oracle.ldr_flip(a, b, 30.0, "xyz")


def test_identical_images_map_and_gradients():
    a = _rand((1, 3, 9, 10), 0.0, 1.0, seed=7).requires_grad_(True)
    b = a.detach().clone().requires_grad_(True)
    m = oracle.ldr_flip(a, b)
    assert m.max().item() <= 1e-5
    m.sum().backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()


@pytest.mark.parametrize(
    "t_rgb,r_rgb",
    [
        ((0.4, 0.5, 0.6), (0.41, 0.5, 0.59)),
        ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
        ((0.3, 0.3, 0.3), (0.3, 0.3, 0.3)),
        ((0.0, 1.0, 0.0), (0.0, 0.0, 1.0)),
    ],
)
@pytest.mark.parametrize("h,w", [(6, 7), (1, 1)])
def test_flat_images_have_finite_gradients(t_rgb, r_rgb, h, w):
    t = torch.tensor(t_rgb, dtype=torch.float64).view(1, 3, 1, 1).repeat(1, 1, h, w).requires_grad_(True)
    r = torch.tensor(r_rgb, dtype=torch.float64).view(1, 3, 1, 1).repeat(1, 1, h, w).requires_grad_(True)
    m = oracle.ldr_flip(t, r)
    assert torch.isfinite(m).all()
    m.sum().backward()
    assert torch.isfinite(t.grad).all() and torch.isfinite(r.grad).all()


def test_finite_gradients_for_extreme_inputs_and_zero_outside_clamp():
    g = torch.Generator().manual_seed(8)
    t = (torch.randn((1, 3, 8, 8), generator=g, dtype=torch.float64) * 3).requires_grad_(True)
    r = torch.rand((1, 3, 8, 8), generator=g, dtype=torch.float64).requires_grad_(True)
    m = oracle.ldr_flip(t, r, 30.0)
    assert torch.isfinite(m).all() and m.min() >= 0 and m.max() <= 1
    m.sum().backward()
    assert torch.isfinite(t.grad).all() and torch.isfinite(r.grad).all()
    outside = (t.detach() < 0) | (t.detach() > 1)
    assert outside.any()
    assert (t.grad[outside] == 0).all()
    assert t.grad[~outside].abs().sum() > 0


def test_eps_zero_values():
    a = _rand((1, 3, 6, 7), 0.0, 1.0, seed=9)
    b = _rand((1, 3, 6, 7), 0.0, 1.0, seed=10)
    torch.testing.assert_close(oracle.ldr_flip(a, b, eps=0.0), oracle.ldr_flip(a, b), rtol=0, atol=1e-6)
    assert oracle.ldr_flip(a, a, eps=0.0).max() == 0


# ---------------------------------------------------------------------------------------------
# gradcheck (float64, small images, inputs away from the clamps)
# ---------------------------------------------------------------------------------------------


def test_gradcheck_srgb_transfer():
    x = torch.tensor([0.001, 0.03, 0.05, 0.3, 0.8], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(oracle.srgb_to_linear, (x,))
    assert torch.autograd.gradcheck(oracle.linear_to_srgb, (x,))


def test_gradcheck_csf_filter():
    opp = oracle.linear_rgb_to_opponent(_rand((1, 3, 6, 7), seed=11)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda o: oracle.csf_filter(o, SMALL_PPD), (opp,))


def test_gradcheck_hunt_hyab():
    t = _rand((2, 3, 3, 4), seed=12).requires_grad_(True)
    r = _rand((2, 3, 3, 4), seed=13).requires_grad_(True)
    assert torch.autograd.gradcheck(oracle.hunt_hyab, (t, r))
    # Dark colours exercise the linear branch of the Lab f(t).
    t2 = _rand((1, 3, 2, 3), 0.001, 0.008, seed=14).requires_grad_(True)
    r2 = _rand((1, 3, 2, 3), 0.1, 0.9, seed=15).requires_grad_(True)
    assert torch.autograd.gradcheck(oracle.hunt_hyab, (t2, r2))


def test_gradcheck_feature_difference():
    t = _rand((1, 1, 6, 7), seed=16).requires_grad_(True)
    r = _rand((1, 1, 6, 7), seed=17).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: oracle.feature_difference(a, b, SMALL_PPD), (t, r))


@pytest.mark.parametrize("space", ["srgb", "linear"])
def test_gradcheck_ldr_flip(space):
    t = _rand((1, 3, 6, 7), seed=18).requires_grad_(True)
    r = _rand((1, 3, 6, 7), seed=19).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: oracle.ldr_flip(a, b, SMALL_PPD, space), (t, r))


# ---- the gradient at every kink: the oracle's own rule, not torch's (docs/algorithm.md §7.4) ----


def _grad(fn, values):
    x = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    fn(x).sum().backward()
    return x.grad.tolist()


def test_clamps_pass_the_gradient_on_their_closed_interval():
    assert _grad(lambda x: oracle.clamp(x, 0.0, 1.0), [-0.5, 0.0, 0.5, 1.0, 1.5]) == [0.0, 1.0, 1.0, 1.0, 0.0]
    assert _grad(lambda x: oracle.clamp(x, low=0.0), [-1e-300, 0.0, 2.0]) == [0.0, 1.0, 1.0]
    assert _grad(lambda x: oracle.clamp(x, high=1.0), [1.0, 1.0 + 1e-15]) == [1.0, 0.0]


def test_absolute_values_and_powers_have_a_zero_gradient_at_zero():
    assert _grad(oracle._abs, [-2.0, 0.0, 3.0]) == [-1.0, 0.0, 1.0]
    g = _grad(lambda x: oracle._power(x, 0.5), [0.0, 0.25])
    assert g == [0.0, 1.0]
    # the floor passes at its bound and not below it
    assert _grad(lambda x: oracle._power(x, 0.5, floor=0.25), [0.25, 0.1]) == [1.0, 0.0]


def test_the_combination_passes_nothing_where_the_colour_term_is_zero():
    c = torch.tensor([0.0, 0.5], dtype=torch.float64, requires_grad=True)
    f = torch.tensor([0.3, 0.3], dtype=torch.float64, requires_grad=True)
    out = oracle.combine(c, f)
    out.sum().backward()
    assert out.tolist() == [0.0, 0.5**0.7]
    assert c.grad[0] == 0 and f.grad[0] == 0
    assert math.isclose(c.grad[1], 0.7 * 0.5**-0.3) and math.isclose(f.grad[1], -(0.5**0.7) * math.log(0.5))


def test_the_floored_square_roots_pass_at_their_bound_and_nothing_below_it():
    # sqrt(max(d^2, eps)): d^2 = eps passes sign(d); below eps, and at d = 0 with eps = 0, nothing.
    assert _grad(lambda d: oracle.floored_abs(d, 0.25), [-0.5, 0.5, 0.25, 0.0]) == [-1.0, 1.0, 0.0, 0.0]
    assert _grad(lambda d: oracle.floored_abs(d, 0.0), [0.0, -3.0]) == [0.0, -1.0]


def test_norms_pass_nothing_at_the_origin_and_the_chroma_norm_nothing_below_its_floor():
    u = torch.tensor([0.0, 3.0, 1e-13], dtype=torch.float64, requires_grad=True)
    v = torch.tensor([0.0, 4.0, 0.0], dtype=torch.float64, requires_grad=True)
    oracle.chroma_norm(u, v).sum().backward()
    assert u.grad.tolist() == pytest.approx([0.0, 0.6, 0.0]) and v.grad.tolist() == pytest.approx([0.0, 0.8, 0.0])
    assert u.grad[2] == 0 and u.grad[0] == 0 and v.grad[0] == 0
    u.grad, v.grad = None, None
    oracle._safe_norm(u, v).sum().backward()
    assert u.grad.tolist() == pytest.approx([0.0, 0.6, 1.0]) and u.grad[0] == 0 and v.grad[0] == 0


def test_the_portable_path_has_batching_rules_for_vmap():
    """torch.vmap over the portable path runs batched (no op falls back to a loop over the batch,
    which warns) and gives each example's map and gradient."""
    import warnings

    torch.manual_seed(3)
    t = torch.rand(3, 1, 3, 12, 14, dtype=torch.float64, requires_grad=True)
    r = torch.rand(3, 1, 3, 12, 14, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        batched = torch.vmap(lambda a, b: oracle.ldr_flip(a, b, 10.0))(t, r)
        (grad,) = torch.autograd.grad(batched.sum(), t)
    for i in range(3):
        ti = t[i].detach().requires_grad_()
        one = oracle.ldr_flip(ti, r[i], 10.0)
        torch.testing.assert_close(batched[i], one, rtol=0, atol=1e-15)
        torch.testing.assert_close(grad[i], torch.autograd.grad(one.sum(), ti)[0], rtol=1e-12, atol=1e-14)
