"""RGBA inputs (flip_loss.alpha): the compositing rule against a hand computation, opaque images,
gradients through alpha, HDR-FLIP, FLIPLoss (eager, scripted, compiled), FLIPMetric, the refusals,
image loading with alpha and the command line's --alpha and --background."""

import re

import math

import numpy as np
import pytest
import torch
from PIL import Image
from torch.autograd import gradcheck

import flip_loss
from flip_loss import alpha as alpha_rule
from flip_loss import imageio
from flip_loss.cli import main
from flip_loss.constants import CHECKERBOARD_LINEAR, CHECKERBOARD_SRGB, CHECKERBOARD_TILE

from png_files import write_png16

BACKGROUNDS = ("black", "white", "checkerboard", (0.2, 0.5, 0.9))
MODES = alpha_rule.ALPHA_MODES


def rgba_pair(shape=(2, 4, 12, 10), seed=0, dtype=torch.float32, premultiplied=False, lo=0.0, hi=1.0):
    """Two random RGBA images with values in [lo, hi]; with ``premultiplied`` the colours are
    multiplied by alpha, as premultiplied images hold them (so that composites stay in [0, 1])."""
    g = torch.Generator().manual_seed(seed)
    t = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=dtype)
    r = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=dtype)
    if premultiplied:
        t[:, :3] *= t[:, 3:]
        r[:, :3] *= r[:, 3:]
    return t, r


def by_hand(image: np.ndarray, mode: str, background, linear: bool = False) -> np.ndarray:
    """The composite, in float64 NumPy, for a ... x 4 x H x W array in [0, 1] (alpha clamped)."""
    rgb, a = image[..., :3, :, :], np.clip(image[..., 3:, :, :], 0.0, 1.0)
    h, w = image.shape[-2:]
    if background == "black":
        bg = np.zeros((3, 1, 1))
    elif background == "white":
        bg = np.ones((3, 1, 1))
    elif background == "checkerboard":
        dark, light = CHECKERBOARD_LINEAR if linear else CHECKERBOARD_SRGB
        parity = (np.arange(h)[:, None] // 8 + np.arange(w)[None, :] // 8) % 2
        bg = np.where(parity == 1, light, dark)[None]
    else:
        bg = np.asarray(background, np.float64).reshape(3, 1, 1)
    colour = rgb * a if mode == "straight" else rgb
    return colour + bg * (1.0 - a)


# --- the rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("background", BACKGROUNDS, ids=str)
def test_composite_matches_the_hand_computation(mode, background):
    image = torch.tensor(
        [[[0.8, 0.3], [0.6, 0.1]], [[0.2, 0.9], [0.4, 0.7]], [[0.5, 0.5], [0.0, 1.0]], [[0.0, 0.25], [0.5, 1.0]]],
        dtype=torch.float64,
    )
    got = alpha_rule.composite(image, mode, list(background) if isinstance(background, tuple) else background, False)
    want = by_hand(image.numpy(), mode, background)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-15)
    # A few entries written out: straight over white at alpha 0.25 is 0.3 * 0.25 + 0.75.
    if mode == "straight" and background == "white":
        assert got[0, 0, 1].item() == pytest.approx(0.3 * 0.25 + 0.75)
        assert got[1, 0, 0].item() == 1.0  # alpha 0: the background
    if mode == "premultiplied" and background == "black":
        assert torch.equal(got, image[:3])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("background", BACKGROUNDS, ids=str)
def test_ldr_flip_of_rgba_is_ldr_flip_of_the_composite(mode, background):
    t, r = rgba_pair(dtype=torch.float64, premultiplied=mode == "premultiplied")
    got = flip_loss.ldr_flip(t, r, 30.0, alpha=mode, background=background)
    want = flip_loss.ldr_flip(
        torch.from_numpy(by_hand(t.numpy(), mode, background)),
        torch.from_numpy(by_hand(r.numpy(), mode, background)),
        30.0,
    )
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_alpha_and_background_share_the_data_range():
    t, r = rgba_pair(dtype=torch.float64, premultiplied=True)
    unit = flip_loss.ldr_flip(t, r, alpha="straight", background=(0.2, 0.5, 0.9))
    scaled = flip_loss.ldr_flip(t * 255, r * 255, data_range=255, alpha="straight", background=(51, 127.5, 229.5))
    torch.testing.assert_close(scaled, unit, rtol=0, atol=1e-12)
    signed = flip_loss.ldr_flip(t * 2 - 1, r * 2 - 1, data_range=(-1, 1), alpha="premultiplied", background="white")
    torch.testing.assert_close(
        signed, flip_loss.ldr_flip(t, r, alpha="premultiplied", background="white"), rtol=0, atol=1e-12
    )


def test_linear_input_composites_linear_values_and_linear_checkerboard_greys():
    t, r = rgba_pair(dtype=torch.float64)
    got = flip_loss.ldr_flip(t, r, input_space="linear", alpha="straight", background="checkerboard")
    want = flip_loss.ldr_flip(
        torch.from_numpy(by_hand(t.numpy(), "straight", "checkerboard", linear=True)),
        torch.from_numpy(by_hand(r.numpy(), "straight", "checkerboard", linear=True)),
        input_space="linear",
    )
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_the_checkerboard():
    board = alpha_rule.checkerboard(20, 19)
    assert board.shape == (1, 20, 19) and CHECKERBOARD_TILE == 8
    dark, light = CHECKERBOARD_SRGB
    assert (dark, light) == (102 / 255, 153 / 255)
    assert board[0, 0, 0] == pytest.approx(dark) and board[0, 7, 7] == pytest.approx(dark)
    assert board[0, 0, 8] == pytest.approx(light) and board[0, 8, 0] == pytest.approx(light)
    assert board[0, 8, 8] == pytest.approx(dark) and board[0, 16, 18] == pytest.approx(dark)
    linear = alpha_rule.checkerboard(9, 9, linear=True, dtype=torch.float64)
    assert linear[0, 0, 0].item() == pytest.approx(((0.4 + 0.055) / 1.055) ** 2.4)
    assert linear[0, 8, 0].item() == pytest.approx(CHECKERBOARD_LINEAR[1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("background", BACKGROUNDS, ids=str)
def test_opaque_alpha_gives_exactly_the_rgb_result(mode, background):
    t, r = rgba_pair()
    t[:, 3], r[:, 3] = 1.0, 1.0
    rgb = flip_loss.ldr_flip(t[:, :3], r[:, :3])
    assert torch.equal(flip_loss.ldr_flip(t, r, alpha=mode, background=background), rgb)
    # An RGB image beside an RGBA one is opaque.
    assert torch.equal(flip_loss.ldr_flip(t, r[:, :3], alpha=mode, background=background), rgb)
    assert torch.equal(flip_loss.ldr_flip(t[:, :3], r[:, :3], alpha=mode, background=background), rgb)
    hdr = flip_loss.hdr_flip(t[:, :3] * 4, r[:, :3] * 4)
    t4, r4 = torch.cat([t[:, :3] * 4, t[:, 3:]], 1), torch.cat([r[:, :3] * 4, r[:, 3:]], 1)
    assert torch.equal(flip_loss.hdr_flip(t4, r4, alpha=mode, background=background), hdr)


def test_alpha_outside_the_unit_range_is_clamped(fresh_warning):
    t, r = rgba_pair(dtype=torch.float64)
    t[:, 3, :4], t[:, 3, 4:8] = -0.1, 1.1
    clamped = t.clone()
    clamped[:, 3].clamp_(0, 1)
    torch.testing.assert_close(
        flip_loss.ldr_flip(t, r, alpha="straight", background="white"),
        flip_loss.ldr_flip(clamped, r, alpha="straight", background="white"),
        rtol=0,
        atol=0,
    )
    # Far outside, alpha (which shares the colour's data range) triggers the out-of-range warning.
    t[:, 3, 0, 0] = 200.0
    with pytest.warns(UserWarning, match="far outside"):
        flip_loss.ldr_flip(t, r, alpha="straight")


# --- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,background",
    [
        ("straight", "black"),
        ("straight", "checkerboard"),
        ("premultiplied", "white"),
        ("premultiplied", (0.2, 0.5, 0.9)),
    ],
)
def test_gradcheck_reaches_colour_and_alpha_of_both_images(mode, background):
    t, r = rgba_pair((1, 4, 5, 6), seed=3, dtype=torch.float64, premultiplied=mode == "premultiplied", lo=0.1, hi=0.9)
    t.requires_grad_(), r.requires_grad_()

    def f(x, y):
        return flip_loss.ldr_flip(x, y, 4.0, alpha=mode, background=background)

    assert gradcheck(f, (t, r), eps=1e-7, atol=1e-6)
    f(t, r).sum().backward()
    assert t.grad[:, 3].abs().sum() > 0 and r.grad[:, 3].abs().sum() > 0
    assert t.grad[:, :3].abs().sum() > 0 and r.grad[:, :3].abs().sum() > 0


def test_hdr_gradients_reach_alpha():
    g = torch.Generator().manual_seed(4)
    t = torch.cat(
        [
            4 * torch.rand(1, 3, 5, 6, generator=g, dtype=torch.float64),
            0.1 + 0.8 * torch.rand(1, 1, 5, 6, generator=g, dtype=torch.float64),
        ],
        1,
    ).requires_grad_()
    r = torch.cat(
        [
            4 * torch.rand(1, 3, 5, 6, generator=g, dtype=torch.float64),
            0.1 + 0.8 * torch.rand(1, 1, 5, 6, generator=g, dtype=torch.float64),
        ],
        1,
    ).requires_grad_()

    def f(x, y):
        return flip_loss.hdr_flip(
            x, y, 4.0, start_exposure=-1.0, stop_exposure=1.0, num_exposures=3, alpha="straight", background="white"
        )

    assert gradcheck(f, (t, r), eps=1e-7, atol=1e-6)


def test_alpha_on_its_bounds_passes_the_gradient_and_beyond_them_none():
    # The alpha clamp's rule is FLIP's own (docs/algorithm.md §7.4), on every torch release: alpha
    # exactly 0 or 1 (opaque) passes the gradient, alpha outside [0, 1] none. Over black, straight
    # alpha gives rgb * a, so d/da = sum over channels of rgb * (the gradient of the composite).
    t, r = rgba_pair((1, 4, 9, 10), seed=6, dtype=torch.float64, lo=0.1, hi=0.9)
    t[0, 3, 2, 3], t[0, 3, 4, 5], t[0, 3, 6, 7], t[0, 3, 7, 2] = 1.0, 0.0, 1.2, -0.2
    x = t.clone().requires_grad_()
    w = torch.rand(1, 1, 9, 10, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    (flip_loss.ldr_flip(x, r, 30.0, alpha="straight", background="black") * w).sum().backward()
    rgb = t[:, :3] * t[:, 3:].clamp(0, 1)
    composite = rgb.clone().requires_grad_()
    (flip_loss.ldr_flip(composite, r, 30.0, alpha="straight", background="black") * w).sum().backward()
    by_the_rule = (t[:, :3] * composite.grad).sum(1) * ((t[:, 3] >= 0) & (t[:, 3] <= 1))
    torch.testing.assert_close(x.grad[:, 3], by_the_rule, rtol=1e-12, atol=1e-15)
    assert x.grad[0, 3, 2, 3] != 0 and x.grad[0, 3, 4, 5] != 0
    assert x.grad[0, 3, 6, 7] == 0 and x.grad[0, 3, 7, 2] == 0


# --- HDR-FLIP, FLIPLoss, FLIPMetric --------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("background", BACKGROUNDS, ids=str)
def test_hdr_flip_composites_linear_values_before_the_exposures(mode, background):
    t, r = rgba_pair(dtype=torch.float64, seed=5, premultiplied=mode == "premultiplied")
    t[:, :3] *= 8
    r[:, :3] *= 8
    got, emap = flip_loss.hdr_flip(t, r, alpha=mode, background=background, return_exposure_map=True)
    ct = torch.from_numpy(by_hand(t.numpy(), mode, background, linear=True))
    cr = torch.from_numpy(by_hand(r.numpy(), mode, background, linear=True))
    want, want_emap = flip_loss.hdr_flip(ct, cr, return_exposure_map=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    torch.testing.assert_close(emap, want_emap, rtol=0, atol=0)
    # The automatic exposures are those of the composited reference.
    loss = flip_loss.FLIPLoss(hdr=True, reduction="none", alpha=mode, background=background)
    torch.testing.assert_close(loss(t, r), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.jit.script(loss)(t, r), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("background", BACKGROUNDS, ids=str)
def test_fliploss_eager_scripted_and_compiled_agree_with_ldr_flip(background):
    t, r = rgba_pair()
    want = flip_loss.ldr_flip(t, r, alpha="straight", background=background).mean()
    loss = flip_loss.FLIPLoss(alpha="straight", background=background)
    assert torch.equal(loss(t, r), want)
    assert torch.equal(torch.jit.script(loss)(t, r), want)
    assert "alpha='straight'" in repr(loss)


def test_torch_compile_fullgraph_of_ldr_flip_and_fliploss_with_alpha():
    torch._dynamo.reset()
    t, r = rgba_pair(premultiplied=True)
    loss = flip_loss.FLIPLoss(alpha="premultiplied", background="checkerboard")

    def step(x, y):
        return flip_loss.ldr_flip(x, y, 40.0, alpha="straight", background="white").mean() + loss(x, y)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    x1, y1 = t.clone().requires_grad_(), r.clone().requires_grad_()
    x2, y2 = t.clone().requires_grad_(), r.clone().requires_grad_()
    eager = step(x1, y1)
    eager.backward()
    out = compiled(x2, y2)
    out.backward()
    assert torch.equal(out, eager)
    assert torch.equal(x2.grad, x1.grad) and torch.equal(y2.grad, y1.grad)
    assert x2.grad[:, 3].abs().sum() > 0


def test_meta_and_fake_tensors_with_alpha():
    from torch._subclasses.fake_tensor import FakeTensorMode

    m = torch.empty(2, 4, 16, 16, device="meta")
    for out in (
        flip_loss.ldr_flip(m, m, alpha="straight", background="checkerboard"),
        flip_loss.ldr_flip(m, m[:, :3], alpha="premultiplied", background=(0.1, 0.2, 0.3)),
        flip_loss.hdr_flip(m, m, alpha="straight", background="white"),
        flip_loss.FLIPLoss(alpha="straight", reduction="none")(m, m),
    ):
        assert out.device.type == "meta" and tuple(out.shape) == (2, 1, 16, 16)
    t, r = rgba_pair((2, 4, 16, 16))
    with FakeTensorMode() as mode:
        ft, fr = mode.from_tensor(t), mode.from_tensor(r)
        assert flip_loss.ldr_flip(ft, fr, alpha="straight", background="checkerboard").shape == (2, 1, 16, 16)
        assert flip_loss.hdr_flip(ft, fr, alpha="premultiplied").shape == (2, 1, 16, 16)


def test_vmap_with_alpha_gives_the_per_example_results():
    t, r = rgba_pair((3, 4, 12, 10), seed=8)
    got = torch.func.vmap(lambda x, y: flip_loss.ldr_flip(x, y, alpha="straight", background="checkerboard"))(t, r)
    want = torch.stack([flip_loss.ldr_flip(t[i], r[i], alpha="straight", background="checkerboard") for i in range(3)])
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_flip_metric_composites_as_ldr_flip_does():
    t, r = rgba_pair(seed=6)
    metric = flip_loss.FLIPMetric(alpha="straight", background="white")
    means = metric.update(t, r)
    want = flip_loss.ldr_flip(t, r, alpha="straight", background="white", eps=0.0)
    torch.testing.assert_close(means, want.double().flatten(1).mean(1), rtol=1e-12, atol=0)
    assert metric.compute().pooled.mean == pytest.approx(float(want.double().mean()), rel=1e-12)
    assert "alpha='straight', background='white'" in repr(metric)
    with pytest.raises(ValueError, match="alpha='straight'.*alpha='premultiplied'"):
        flip_loss.FLIPMetric().update(t, r)


def test_torchmetrics_metric_composites_as_flip_metric_does():
    pytest.importorskip("torchmetrics")
    from flip_loss.torchmetrics import FLIPTorchMetric

    t, r = rgba_pair(seed=7, premultiplied=True)
    ours = FLIPTorchMetric(alpha="premultiplied", background="checkerboard")
    ours.update(t, r)
    plain = flip_loss.FLIPMetric(alpha="premultiplied", background="checkerboard")
    plain.update(t, r)
    assert ours.compute().pooled == plain.compute().pooled


# --- refusals --------------------------------------------------------------------------------------


def test_four_channels_need_an_alpha_rule_everywhere():
    t, r = rgba_pair()
    rule = r"4 channels \(RGBA.*alpha='straight'.*alpha='premultiplied'"
    for call in (
        lambda: flip_loss.ldr_flip(t, r),
        lambda: flip_loss.hdr_flip(t, r),
        lambda: flip_loss.FLIPLoss()(t, r),
        lambda: flip_loss.FLIPLoss(hdr=True)(t, r),
        lambda: flip_loss.ldr_flip(t[:, :3], r),
    ):
        with pytest.raises(ValueError, match=rule):
            call()
    with pytest.raises(torch.jit.Error, match=rule):
        torch.jit.script(flip_loss.FLIPLoss())(t, r)


@pytest.mark.parametrize(
    "kwargs,exc,message",
    [
        (dict(alpha="pre"), ValueError, r"alpha must be one of \('straight', 'premultiplied'\)"),
        (dict(alpha=True), TypeError, "alpha must be a string"),
        (dict(alpha="straight", background="grey"), ValueError, "background must be one of"),
        (dict(alpha="straight", background=(0.1, 0.2)), ValueError, "got 2 values"),
        (dict(alpha="straight", background=0.5), TypeError, r"\(r, g, b\) triple"),
        (dict(alpha="straight", background=(0.1, float("nan"), 0.2)), ValueError, "finite"),
        (dict(alpha="straight", background=(0.1, 1.5, 0.2)), ValueError, r"data range \[0.0, 1.0\]"),
        (dict(background="white"), ValueError, "background only applies to images with an alpha channel"),
    ],
)
def test_bad_alpha_options_are_refused(kwargs, exc, message):
    t, r = rgba_pair()
    with pytest.raises(exc, match=message):
        flip_loss.ldr_flip(t, r, **kwargs)
    with pytest.raises(exc, match=message):
        flip_loss.FLIPLoss(**kwargs)
    with pytest.raises(exc, match=message):
        flip_loss.FLIPMetric(**kwargs)


def test_hdr_backgrounds_are_non_negative_linear_values():
    t, r = rgba_pair()
    assert flip_loss.hdr_flip(t, r, alpha="straight", background=(2.0, 3.0, 0.0)).shape == (2, 1, 12, 10)
    with pytest.raises(ValueError, match="non-negative linear"):
        flip_loss.hdr_flip(t, r, alpha="straight", background=(-0.1, 0.0, 0.0))
    with pytest.raises(ValueError, match="non-negative linear"):
        flip_loss.FLIPLoss(hdr=True, alpha="straight", background=(-0.1, 0.0, 0.0))


def test_other_layouts_stay_refused():
    t, r = rgba_pair()
    with pytest.raises(ValueError, match="C = 3 \\(RGB\\) or 4 \\(RGBA\\)"):
        flip_loss.ldr_flip(torch.rand(1, 5, 8, 8), torch.rand(1, 5, 8, 8), alpha="straight")
    with pytest.raises(ValueError, match="shapes differ"):
        flip_loss.ldr_flip(t, r[..., :8], alpha="straight")
    with pytest.raises(ValueError, match="shapes differ"):
        flip_loss.ldr_flip(t[0], r, alpha="straight")


def test_a_scripted_loss_checks_its_alpha_attributes_when_it_runs():
    t, r = rgba_pair()
    scripted = torch.jit.script(flip_loss.FLIPLoss(alpha="straight"))
    scripted.alpha = "sideways"
    with pytest.raises(torch.jit.Error, match="alpha must be None, 'straight' or 'premultiplied'"):
        scripted(t, r)
    scripted = torch.jit.script(flip_loss.FLIPLoss(alpha="straight"))
    scripted.background = [0.5, 2.0, 0.5]
    with pytest.raises(torch.jit.Error, match="data range"):
        scripted(t, r)


# --- image files -----------------------------------------------------------------------------------


def test_load_image_keeps_alpha_on_request(tmp_path):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (5, 7, 3)).astype(np.uint8)
    a = rng.integers(0, 256, (5, 7)).astype(np.uint8)
    Image.fromarray(np.dstack([rgb, a])).save(tmp_path / "rgba.png")
    Image.fromarray(np.dstack([rgb[..., 0], a]), "LA").save(tmp_path / "la.png")
    Image.fromarray(rgb).quantize(4).save(tmp_path / "p.png", transparency=0)
    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    for name, grey in (("rgba.png", False), ("la.png", True)):
        t = imageio.load_image(tmp_path / name, keep_alpha=True)
        assert t.shape == (4, 5, 7)
        np.testing.assert_array_equal(np.round(t[3].numpy() * 255), a)
        want = np.repeat(rgb[..., :1], 3, 2) if grey else rgb
        np.testing.assert_array_equal(np.round(t[:3].numpy().transpose(1, 2, 0) * 255), want)
        assert torch.equal(t[:3], imageio.load_image(tmp_path / name))
    palette = imageio.load_image(tmp_path / "p.png", keep_alpha=True)
    assert palette.shape == (4, 5, 7) and set(palette[3].unique().tolist()) <= {0.0, 1.0}
    assert imageio.load_image(tmp_path / "rgb.png", keep_alpha=True).shape == (3, 5, 7)
    assert imageio.alpha_convention(tmp_path / "x.png") == "straight"
    assert imageio.alpha_convention(tmp_path / "x.EXR") == "premultiplied"


@pytest.mark.parametrize("colour_type,channels", [(4, 2), (6, 4)])
def test_load_16_bit_png_alpha(tmp_path, colour_type, channels):
    s = np.random.default_rng(colour_type).integers(0, 65536, (6, 9, channels)).astype(np.uint16)
    write_png16(tmp_path / "x16.png", s, colour_type, 1)
    t = imageio.load_image(tmp_path / "x16.png", keep_alpha=True)
    assert t.shape == (4, 6, 9)
    colour = s[..., :3] if channels == 4 else np.repeat(s[..., :1], 3, axis=2)
    want = np.concatenate([colour, s[..., -1:]], axis=2)
    np.testing.assert_array_equal(np.round(t.numpy().transpose(1, 2, 0) * 65535).astype(int), want)


@pytest.mark.parametrize("colour_type,channels", [(0, 1), (2, 3)])
def test_a_16_bit_png_with_a_transparent_colour_is_composited_like_the_8_bit_forms(tmp_path, colour_type, channels):
    """A tRNS chunk in a 16-bit grey or RGB PNG names one colour in 16-bit samples: exactly the
    pixels of that colour are transparent (alpha 0), every other one opaque, also one whose high
    bytes alone match the key; the colours are the file's 16-bit values either way."""
    s = np.random.default_rng(colour_type).integers(0, 65536, (6, 9, channels)).astype(np.uint16)
    key = s[1, 2].copy()
    s[4, 5] = key
    s[0, 0] = key ^ 1  # differs from the key in the low byte only
    write_png16(tmp_path / "key16.png", s, colour_type, 1, transparent=key if channels == 3 else key[0])
    t = imageio.load_image(tmp_path / "key16.png", keep_alpha=True)
    assert t.shape == (4, 6, 9)
    colour = s if channels == 3 else np.repeat(s, 3, axis=2)
    np.testing.assert_array_equal(np.round(t[:3].numpy().transpose(1, 2, 0) * 65535).astype(int), colour)
    transparent = np.all(s == key, axis=2)
    assert transparent.sum() == 2 and not transparent[0, 0]
    np.testing.assert_array_equal(t[3].numpy(), np.where(transparent, 0.0, 1.0).astype(np.float32))
    assert torch.equal(imageio.load_image(tmp_path / "key16.png"), t[:3])


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("mode", ["straight", "premultiplied"])
def test_a_non_finite_alpha_is_refused_on_every_path(bad, mode):
    """+Inf would read as opaque and -Inf as transparent after the clamp, and a NaN would vanish
    where the rule does not multiply by alpha: a non-finite alpha is refused like a non-finite
    colour, by ldr_flip, hdr_flip and FLIPLoss eager, scripted and compiled."""
    t, r = rgba_pair((1, 4, 12, 12))
    t[0, 3, 5, 6] = bad
    with pytest.raises(RuntimeError, match="NaN or infinite"):
        flip_loss.ldr_flip(t, r, alpha=mode)
    with pytest.raises(RuntimeError, match="NaN or infinite"):
        flip_loss.hdr_flip(4 * t, 4 * r, alpha=mode)
    loss = flip_loss.FLIPLoss(alpha=mode)
    for module in (loss, torch.jit.script(flip_loss.FLIPLoss(alpha=mode))):
        with pytest.raises(RuntimeError, match="NaN or infinite"):
            module(t, r)
    # A finite alpha outside [0, 1] is clamped, as before (gradient 0 beyond).
    t[0, 3, 5, 6] = 7.0
    assert torch.isfinite(flip_loss.ldr_flip(t, r, alpha=mode)).all()


def test_load_exr_keeps_alpha_on_request(tmp_path):
    pytest.importorskip("OpenEXR")
    a = np.random.default_rng(1).random((4, 5, 6)).astype(np.float32)
    imageio.save_exr(tmp_path / "rgba.exr", a)
    assert torch.equal(imageio.load_exr(tmp_path / "rgba.exr", keep_alpha=True), torch.from_numpy(a))
    assert imageio.load_exr(tmp_path / "rgba.exr").shape == (3, 5, 6)
    import OpenEXR

    grey = {"Y": a[0], "A": a[3]}
    OpenEXR.File({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}, grey).write(
        str(tmp_path / "ya.exr")
    )
    t = imageio.load_image(tmp_path / "ya.exr", keep_alpha=True)
    assert torch.equal(t, torch.from_numpy(np.stack([a[0], a[0], a[0], a[3]])))
    nan_alpha = a.copy()
    nan_alpha[3, 0, 0] = np.nan
    imageio.save_exr(tmp_path / "nan.exr", nan_alpha)
    assert torch.isfinite(imageio.load_exr(tmp_path / "nan.exr")).all()  # alpha not read
    with pytest.raises(ValueError, match=r"1 non-finite value\(s\).*colour and alpha channels"):
        imageio.load_exr(tmp_path / "nan.exr", keep_alpha=True)


# --- the command line ------------------------------------------------------------------------------

NOTE = re.compile(
    r"^flip-loss: note: an input image has an alpha channel: it is composited over (.+?) as "
    r"(straight|premultiplied) alpha",
    re.M,
)


def printed_means(stdout):
    return re.findall(r"^     Mean: (\d+\.\d{6})$", stdout, flags=re.M)


def expected_mean(test, reference, **kwargs):
    with torch.no_grad():
        return f"{flip_loss.pool(flip_loss.ldr_flip(test, reference, eps=0.0, **kwargs)[0]).mean:.6f}"


@pytest.fixture(scope="module")
def png_files(tmp_path_factory):
    """An RGB reference, RGBA and grey+alpha test images (the same colours), as PNG files."""
    d = tmp_path_factory.mktemp("alpha_png")
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, (24, 20, 3)).astype(np.uint8)
    a = rng.integers(0, 256, (24, 20)).astype(np.uint8)
    Image.fromarray(rgb).save(d / "ref.png")
    Image.fromarray(np.dstack([rgb, a])).save(d / "rgba.png")
    Image.fromarray(np.dstack([rgb[..., 1], a]), "LA").save(d / "grey_alpha.png")
    return d


@pytest.mark.parametrize(
    "given",
    [
        [],
        ["--alpha", "straight"],
        ["--alpha", "premultiplied"],
        ["--background", "white"],
        ["--alpha", "premultiplied", "--background", "checkerboard"],
        ["--alpha", "ignore"],
    ],
    ids=lambda g: " ".join(g) or "default",
)
def test_cli_composites_rgba_png_files(png_files, capsys, given):
    ref, tests = png_files / "ref.png", [png_files / "rgba.png", png_files / "grey_alpha.png"]
    assert main(["-r", str(ref), "-t", *map(str, tests), "-v", "1", "-nerm", *given]) == 0
    out, err = capsys.readouterr()
    reference = imageio.load_image(ref)
    mode = given[given.index("--alpha") + 1] if "--alpha" in given else "straight"
    background = given[given.index("--background") + 1] if "--background" in given else "black"
    if mode == "ignore":
        want = [expected_mean(imageio.load_image(t), reference) for t in tests]
    else:
        # FLIP clamps a composite above 1 (premultiplied colour above alpha); the command line clamps
        # it itself, with a warning of its own.
        want = [
            expected_mean(
                alpha_rule.composite(imageio.load_image(t, keep_alpha=True), mode, background, False).clamp(max=1.0),
                reference,
            )
            for t in tests
        ]
    clamped = re.findall(r"^flip-loss: warning: the premultiplied composite of <(.+)> exceeds 1", err, flags=re.M)
    assert clamped == ([str(t) for t in tests] if mode == "premultiplied" and background != "black" else [])
    assert printed_means(out) == want
    notes = NOTE.findall(err)
    if "--alpha" in given:
        assert notes == []  # the user said what alpha means
    else:  # the format's convention, said once per run
        over = "the checkerboard" if background == "checkerboard" else background
        assert notes == [(over, "straight")]


def test_cli_composites_exr_files_as_premultiplied(tmp_path, capsys):
    pytest.importorskip("OpenEXR")
    rng = np.random.default_rng(3)
    colour = (rng.random((3, 24, 20)) * 4).astype(np.float32)
    a = rng.random((1, 24, 20)).astype(np.float32)
    imageio.save_exr(tmp_path / "ref.exr", colour)
    imageio.save_exr(tmp_path / "test.exr", np.concatenate([colour * a, a]))
    base = [
        "-r",
        str(tmp_path / "ref.exr"),
        "-t",
        str(tmp_path / "test.exr"),
        "-v",
        "1",
        "-nerm",
        "-nexm",
        "-cstart",
        "-2",
        "-cstop",
        "2",
        "-n",
        "5",
    ]
    test4, reference = imageio.load_exr(tmp_path / "test.exr", keep_alpha=True), imageio.load_exr(tmp_path / "ref.exr")

    def hdr_mean(test, **kwargs):
        with torch.no_grad():
            error = flip_loss.hdr_flip(
                test, reference, start_exposure=-2.0, stop_exposure=2.0, num_exposures=5, eps=0.0, **kwargs
            )
        return f"{flip_loss.pool(error[0]).mean:.6f}"

    for given, want, noted in (
        ([], hdr_mean(test4, alpha="premultiplied"), True),
        (["--background", "checkerboard"], hdr_mean(test4, alpha="premultiplied", background="checkerboard"), True),
        (
            ["--alpha", "straight", "--background", "white"],
            hdr_mean(test4, alpha="straight", background="white"),
            False,
        ),
        (["--alpha", "ignore"], hdr_mean(test4[:3]), False),
    ):
        assert main(base + given) == 0
        out, err = capsys.readouterr()
        assert printed_means(out) == [want], given
        assert bool(NOTE.search(err)) == noted
        if noted:
            assert NOTE.search(err).group(2) == "premultiplied"


def test_cli_refuses_a_background_for_an_ignored_alpha(png_files, capsys):
    args = ["-r", str(png_files / "ref.png"), "-t", str(png_files / "rgba.png"), "-nerm"]
    assert main(args + ["--alpha", "ignore", "--background", "white"]) == 2
    assert "--background white and --alpha ignore contradict each other" in capsys.readouterr().err
    assert main(args + ["--background", "grey"]) == 2
    assert "invalid choice: 'grey'" in capsys.readouterr().err
