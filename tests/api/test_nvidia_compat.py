"""NVIDIA's PyTorch loss API (flip_loss/nvidia.py): NVIDIA's own numbers reproduced, code written
against NVIDIA's flip_loss.py running unchanged, gradients, autocast and torch.compile, and each
documented deviation behaving as documented."""

import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import flip_loss
from flip_loss import nvidia
from flip_loss import oracle
from flip_loss.constants import TONE_MAPPERS

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia_loss"
CASES = json.loads((DATA / "cases.json").read_text())["cases"]
LDR_CASES = [c for c in CASES if c["kind"] == "ldr"]
HDR_CASES = [c for c in CASES if c["kind"] == "hdr"]


@pytest.fixture(scope="module")
def inputs():
    with np.load(DATA / "inputs.npz") as z:
        return {k: torch.from_numpy(z[k]) for k in z.files}


def case_id(c):
    if c["kind"] == "ldr":
        return f"{c['test']}-ppd{c['pixels_per_degree']:.0f}"
    return f"hdr-{c['tone_mapper']}-{'given' if 'start_exposure' in c else 'auto'}"


def hdr_images(seed=0, n=2, h=20, w=24, low=-3.0, high=5.0):
    """Linear HDR images with an exposure ramp across the width (several automatic exposures)."""
    g = torch.Generator().manual_seed(seed)
    ramp = torch.exp2(torch.linspace(low, high, w)).view(1, 1, 1, w)
    ref = torch.rand(n, 3, h, w, generator=g) * ramp
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g)).clamp(min=0)
    return test, ref


# --- NVIDIA's numbers ---------------------------------------------------------------------------


def test_the_data_covers_nineteen_cases():
    assert len(LDR_CASES) == 13 and len(HDR_CASES) == 6


@pytest.mark.parametrize("case", LDR_CASES, ids=case_id)
def test_ldr_loss_gives_nvidias_value(case, inputs):
    t, r = inputs[case["test"]], inputs[case["reference"]]
    loss = flip_loss.LDRFLIPLoss()(t, r, case["pixels_per_degree"])
    assert loss.shape == () and loss.dtype == torch.float32
    assert abs(loss.item() - case["nvidia_mean"]) <= 1e-6


@pytest.mark.parametrize("case", LDR_CASES, ids=case_id)
def test_compute_ldrflip_on_ycxcz_gives_nvidias_value(case, inputs):
    t, r = inputs[case["test"]], inputs[case["reference"]]
    ppd = case["pixels_per_degree"]
    error = flip_loss.compute_ldrflip(
        flip_loss.color_space_transform(t, "srgb2ycxcz"), flip_loss.color_space_transform(r, "srgb2ycxcz"), ppd
    )
    assert error.shape == (t.shape[0], 1) + t.shape[2:]
    assert abs(error.mean().item() - case["nvidia_mean"]) <= 1e-6


@pytest.mark.parametrize("case", HDR_CASES, ids=case_id)
def test_hdr_loss_gives_nvidias_value(case, inputs):
    t, r = inputs[case["test"]], inputs[case["reference"]]
    n = t.shape[0]
    kwargs = {}
    if "start_exposure" in case:  # per-image exposures, N x 1 x 1 x 1, as NVIDIA's loss takes them
        kwargs = dict(
            start_exposure=torch.full((n, 1, 1, 1), case["start_exposure"]),
            stop_exposure=torch.full((n, 1, 1, 1), case["stop_exposure"]),
        )
    loss = flip_loss.HDRFLIPLoss()(t, r, nvidia.NVIDIA_DEFAULT_PPD, case["tone_mapper"], **kwargs)
    assert loss.shape == () and loss.dtype == torch.float32
    assert abs(loss.item() - case["nvidia_mean"]) <= 1e-6


@pytest.mark.parametrize("case", [c for c in HDR_CASES if "nvidia_start_exposure" in c], ids=case_id)
def test_automatic_exposures_are_nvidias(case, inputs):
    r = inputs[case["reference"]]
    start, stop = flip_loss.compute_start_stop_exposures(r, case["tone_mapper"], 0.85, 0.85)
    assert start.shape == stop.shape == (r.shape[0], 1, 1, 1)
    want_start = torch.tensor(case["nvidia_start_exposure"])
    want_stop = torch.tensor(case["nvidia_stop_exposure"])
    # Within 3e-7 stops (one to five float32 ulps, Hable's anchor), bit for bit for ACES and Reinhard.
    assert (start.flatten() - want_start).abs().max().item() <= 3e-7
    assert (stop.flatten() - want_stop).abs().max().item() <= 3e-7
    if case["tone_mapper"] != "hable":
        assert torch.equal(start.flatten(), want_start) and torch.equal(stop.flatten(), want_stop)


def test_the_data_has_an_even_pixel_count_so_the_median_rule_matters(inputs):
    r = inputs["hdr_reference"]
    lower = flip_loss.exposure_range(r, median="lower")[1]
    upper = flip_loss.exposure_range(r, median="upper")[1]
    assert (r.shape[2] * r.shape[3]) % 2 == 0
    assert not torch.equal(lower, upper)


# --- a script written against NVIDIA's API runs unchanged ---------------------------------------

NVIDIA_STYLE_SCRIPT = """
import numpy as np
import torch
import flip_loss
from flip_loss import HDRFLIPLoss, LDRFLIPLoss, color_space_transform, compute_ldrflip, \\
    compute_start_stop_exposures, tone_map

ppd = (0.7 * 3840 / 0.7) * np.pi / 180
ldr = LDRFLIPLoss()
hdr = HDRFLIPLoss()
ldr_value = ldr(test_ldr, reference_ldr, ppd)
ldr_value.backward()

start, stop = compute_start_stop_exposures(reference_hdr, "aces", 0.85, 0.85)
hdr_value = hdr(test_hdr, reference_hdr, ppd, "aces", start, stop)
hdr_value.backward()

# HDR-FLIP by hand, from the module functions, as NVIDIA's users write it
counts = torch.clamp(torch.ceil(stop - start), min=2.0)
step = (stop - start) / (counts - 1)
errors = []
for i in range(int(counts.max())):
    exposure = start + i * step
    t = color_space_transform(tone_map(test_hdr.detach(), "aces", exposure), "linrgb2ycxcz")
    r = color_space_transform(tone_map(reference_hdr, "aces", exposure), "linrgb2ycxcz")
    errors.append(compute_ldrflip(t, r, ppd))
by_hand = torch.amax(torch.stack(errors), dim=0).mean()
module_level = flip_loss.LDRFLIPLoss()(test_ldr.detach(), reference_ldr)
"""


def test_a_script_written_for_nvidias_loss_runs_unchanged():
    g = torch.Generator().manual_seed(1)
    ref_ldr = torch.rand(2, 3, 24, 32, generator=g)
    test_hdr, ref_hdr = hdr_images(seed=1, n=1)  # one image: NVIDIA's exposure count is then its own
    names = dict(
        test_ldr=(ref_ldr + 0.05 * torch.randn(ref_ldr.shape, generator=g)).clamp(0, 1).requires_grad_(),
        reference_ldr=ref_ldr,
        test_hdr=test_hdr.requires_grad_(),
        reference_hdr=ref_hdr,
    )
    exec(compile(NVIDIA_STYLE_SCRIPT, "nvidia_style_script", "exec"), names)
    for key in ("ldr_value", "hdr_value", "by_hand", "module_level"):
        assert names[key].shape == () and 0 < names[key].item() < 1
    assert names["module_level"].item() == names["ldr_value"].item()  # NVIDIA's default ppd
    assert names["test_ldr"].grad.abs().sum() > 0 and names["test_hdr"].grad.abs().sum() > 0
    # the hand-written HDR-FLIP from the module functions is the loss
    assert abs(names["by_hand"].item() - names["hdr_value"].item()) <= 1e-6


def test_ldr_loss_is_ldr_flips_mean_at_nvidias_default_ppd():
    g = torch.Generator().manual_seed(2)
    a, b = torch.rand(2, 3, 20, 16, generator=g), torch.rand(2, 3, 20, 16, generator=g)
    assert nvidia.NVIDIA_DEFAULT_PPD == (0.7 * 3840 / 0.7) * np.pi / 180
    assert torch.equal(flip_loss.LDRFLIPLoss()(a, b), flip_loss.ldr_flip(a, b, nvidia.NVIDIA_DEFAULT_PPD).mean())
    # a 0-dim or one-element tensor ppd is the same number
    assert torch.equal(
        flip_loss.LDRFLIPLoss()(a, b, torch.tensor(30.0)), flip_loss.LDRFLIPLoss()(a, b, torch.tensor([30.0]))
    )
    assert torch.equal(flip_loss.LDRFLIPLoss()(a, b, torch.tensor(30.0)), flip_loss.ldr_flip(a, b, 30.0).mean())


# --- gradients, autocast, torch.compile ---------------------------------------------------------


def test_ldr_gradients_reach_both_inputs_and_pass_gradcheck():
    g = torch.Generator().manual_seed(3)
    a = torch.rand(1, 3, 7, 6, dtype=torch.float64, generator=g).requires_grad_()
    b = torch.rand(1, 3, 7, 6, dtype=torch.float64, generator=g).requires_grad_()
    loss = flip_loss.LDRFLIPLoss()
    assert torch.autograd.gradcheck(lambda x, y: loss(x, y, 20.0), (a, b))
    # the same gradients as the pure-PyTorch oracle's
    loss(a, b, 20.0).backward()
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    oracle.ldr_flip(a2, b2, 20.0).mean().backward()
    torch.testing.assert_close(a.grad, a2.grad, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(b.grad, b2.grad, rtol=1e-9, atol=1e-12)


def test_hdr_gradients_reach_both_inputs_and_pass_gradcheck():
    t, r = hdr_images(seed=4, n=1, h=6, w=7)
    t, r = t.double().requires_grad_(), r.double().requires_grad_()
    loss = flip_loss.HDRFLIPLoss()
    start, stop = torch.tensor([[[[-1.0]]]]), torch.tensor([[[[2.0]]]])
    assert torch.autograd.gradcheck(lambda x, y: loss(x, y, 20.0, "hable", start, stop), (t, r))
    loss(t, r, 20.0).backward()  # automatic exposures: constants, the images still get gradients
    assert t.grad.abs().sum() > 0 and r.grad.abs().sum() > 0


def test_compute_ldrflip_gradients_pass_gradcheck():
    g = torch.Generator().manual_seed(5)
    a = torch.rand(1, 3, 6, 7, dtype=torch.float64, generator=g).requires_grad_()
    b = torch.rand(1, 3, 6, 7, dtype=torch.float64, generator=g).requires_grad_()
    cst = flip_loss.color_space_transform
    assert torch.autograd.gradcheck(
        lambda x, y: flip_loss.compute_ldrflip(cst(x, "srgb2ycxcz"), cst(y, "srgb2ycxcz"), 20.0), (a, b)
    )


def test_autocast_computes_in_float32():
    g = torch.Generator().manual_seed(6)
    a, b = torch.rand(2, 3, 16, 12, generator=g), torch.rand(2, 3, 16, 12, generator=g)
    t, r = hdr_images(seed=6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ldr = flip_loss.LDRFLIPLoss()(a.bfloat16(), b.bfloat16(), 30.0)
        hdr = flip_loss.HDRFLIPLoss()(t.bfloat16(), r.bfloat16(), 30.0)
        stages = flip_loss.compute_ldrflip(
            flip_loss.color_space_transform(a, "srgb2ycxcz").bfloat16(),
            flip_loss.color_space_transform(b, "srgb2ycxcz").bfloat16(),
            30.0,
        )
    assert ldr.dtype == hdr.dtype == stages.dtype == torch.float32
    # the float32 values of the bfloat16 inputs
    assert ldr.item() == flip_loss.LDRFLIPLoss()(a.bfloat16().float(), b.bfloat16().float(), 30.0).item()
    assert hdr.item() == flip_loss.HDRFLIPLoss()(t.bfloat16().float(), r.bfloat16().float(), 30.0).item()
    # without autocast a half-precision loss keeps its dtype (computed in float32)
    half = flip_loss.LDRFLIPLoss()(a.half(), b.half(), 30.0)
    assert half.dtype == torch.float16
    assert abs(half.item() - flip_loss.LDRFLIPLoss()(a.half().float(), b.half().float(), 30.0).item()) < 1e-3


def test_torch_compile_matches_eager():
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(7)
    a, b = torch.rand(2, 3, 16, 12, generator=g), torch.rand(2, 3, 16, 12, generator=g)
    ldr = flip_loss.LDRFLIPLoss()
    compiled = torch.compile(ldr, fullgraph=True, backend="aot_eager")
    x1, x2 = a.clone().requires_grad_(), a.clone().requires_grad_()
    eager = ldr(x1, b, 30.0)
    eager.backward()
    out = compiled(x2, b, 30.0)
    out.backward()
    assert torch.equal(out, eager) and torch.equal(x2.grad, x1.grad)

    t, r = hdr_images(seed=7)
    hdr = flip_loss.HDRFLIPLoss()
    compiled_hdr = torch.compile(hdr, backend="aot_eager")  # the exposure count is read back: a graph break
    y1, y2 = t.clone().requires_grad_(), t.clone().requires_grad_()
    eager = hdr(y1, r, 30.0)
    eager.backward()
    out = compiled_hdr(y2, r, 30.0)
    out.backward()
    assert torch.equal(out, eager) and torch.equal(y2.grad, y1.grad)


# --- the documented deviations ------------------------------------------------------------------


def test_an_unknown_tone_mapper_raises_instead_of_running_aces():
    t, r = hdr_images(seed=8)
    with pytest.raises(ValueError, match=re.escape(", ".join(repr(name) for name in TONE_MAPPERS))):
        flip_loss.HDRFLIPLoss()(t, r, 30.0, "filmic")
    with pytest.raises(ValueError, match="tone_mapper"):
        flip_loss.tone_map(r, "filmic", 0.0)
    with pytest.raises(ValueError, match="tone_mapper"):
        flip_loss.compute_start_stop_exposures(r, "filmic", 0.85, 0.85)
    # names are case-insensitive: "Hable" is Hable
    hable = flip_loss.HDRFLIPLoss()(t, r, 30.0, "hable")
    assert flip_loss.HDRFLIPLoss()(t, r, 30.0, "Hable").item() == hable.item()
    assert hable.item() != flip_loss.HDRFLIPLoss()(t, r, 30.0, "aces").item()


def test_a_mixed_batch_gives_every_image_its_own_exposure_count():
    narrow_t, narrow_r = hdr_images(seed=9, n=1, low=0.0, high=1.0)
    wide_t, wide_r = hdr_images(seed=10, n=1, low=-4.0, high=8.0)
    t, r = torch.cat([narrow_t, wide_t]), torch.cat([narrow_r, wide_r])
    start, stop = flip_loss.compute_start_stop_exposures(r, "aces", 0.85, 0.85)
    counts = torch.clamp(torch.ceil(stop - start), min=2).flatten()
    assert counts[0] < counts[1]  # the batch is mixed
    loss = flip_loss.HDRFLIPLoss()
    with pytest.warns(UserWarning, match=r"different numbers of exposures \(2 to \d+\)"):
        batch = loss(t, r, 30.0)
    alone = (loss(narrow_t, narrow_r, 30.0) + loss(wide_t, wide_r, 30.0)) / 2
    assert abs(batch.item() - alone.item()) <= 1e-7
    # one count for the whole batch, as NVIDIA's loss runs it, gives another value: the test sees it
    step = (stop - start).flatten() / (counts - 1)
    most = int(counts.max())
    grid = start.flatten()[:, None] + torch.arange(most)[None, :] * step[:, None]
    nvidia_style = torch.ops.flip.hdr_flip(t, r, grid, torch.full((2,), most), 30.0, "aces", 1e-15)[0].mean()
    assert abs(nvidia_style.item() - batch.item()) > 1e-4


def nvidia_style_value(test, ref):
    """HDRFLIPLoss's batch as NVIDIA's loss runs it: every image to the batch's largest count, on its
    own exposure grid (past its stop exposure), from the op itself."""
    start, stop = flip_loss.compute_start_stop_exposures(ref, "aces", 0.85, 0.85)
    counts = torch.clamp(torch.ceil(stop - start), min=2).flatten()
    step = (stop - start).flatten() / (counts - 1)
    most = int(counts.max())
    grid = start.flatten()[:, None] + torch.arange(most)[None, :] * step[:, None]
    n = ref.shape[0]
    value = torch.ops.flip.hdr_flip(test, ref, grid, torch.full((n,), most), nvidia.NVIDIA_DEFAULT_PPD, "aces", 1e-15)
    return value[0].mean().item(), int(counts.min()) != most


def test_the_mixed_count_warning_comes_only_where_nvidias_value_differs():
    """Batches of images over 1 to 12 stops, with noisy copies: many need different exposure counts,
    and for many of those NVIDIA's extra exposures raise no pixel's error. The warning comes exactly
    where NVIDIA's value differs, and states it (before: for every batch with mixed counts)."""
    seen = {True: 0, False: 0}
    for seed in range(8):
        g = torch.Generator().manual_seed(seed)
        stops = torch.tensor([1.0, 3.0, 6.0, 12.0]).view(4, 1, 1, 1)
        ref = torch.exp2(torch.rand(4, 3, 16, 16, generator=g) * stops)
        test = torch.exp2(torch.rand(4, 3, 16, 16, generator=g) * stops) if seed % 2 else ref * 1.05
        theirs, mixed = nvidia_style_value(test, ref)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ours = flip_loss.HDRFLIPLoss()(test, ref).item()
        assert mixed, "each batch needs different counts"
        differs = theirs != ours
        assert len(caught) == int(differs), (seed, theirs, ours)
        if differs:
            assert f"its value is {theirs:.6g}" in str(caught[0].message)
            assert f"the value it has alone: {ours:.6g}" in str(caught[0].message)
        seen[differs] += 1
    assert seen[True] and seen[False], seen


def bimodal_reference():
    """2 x 2 pixels: two at luminance 10, two at 0.01 (an even count: the two median rules differ)."""
    ref = torch.tensor([10.0, 10.0, 0.01, 0.01]).view(1, 1, 2, 2).expand(1, 3, 2, 2).contiguous()
    return ref


def test_median_upper_gives_the_evaluators_exposures():
    ref = bimodal_reference()
    anchor = flip_loss.hdr.exposure_anchor("aces")
    start, stop = flip_loss.compute_start_stop_exposures(ref, "aces", 0.85, 0.85, median="upper")
    assert torch.equal(start.flatten(), flip_loss.exposure_range(ref)[0])
    assert torch.equal(stop.flatten(), flip_loss.exposure_range(ref)[1])
    assert stop.item() == start.item() == pytest.approx(math.log2(anchor / 10.0), abs=1e-5)
    lower_start, lower_stop = flip_loss.compute_start_stop_exposures(ref, "aces", 0.85, 0.85)
    assert lower_start.item() == pytest.approx(start.item(), abs=1e-6)
    assert lower_stop.item() == pytest.approx(math.log2(anchor / 0.01), abs=1e-5)  # NVIDIA's: the dark pixels
    for tm in flip_loss.constants.TONE_MAPPERS:
        t, r = hdr_images(seed=11)
        want = flip_loss.hdr_flip(t, r, 30.0, tm, eps=1e-15).mean()
        assert torch.equal(flip_loss.HDRFLIPLoss(median="upper", max_value=None)(t, r, 30.0, tm), want)


def test_hdr_flip_takes_the_lower_median_too():
    ref = bimodal_reference()
    test = ref * 1.3
    start, stop = flip_loss.exposure_range(ref, median="lower")
    assert stop.item() == pytest.approx(math.log2(flip_loss.hdr.exposure_anchor("aces") / 0.01), abs=1e-5)
    # torch.median's element
    lum = (0.2126 * ref[:, 0] + 0.7152 * ref[:, 1] + 0.0722 * ref[:, 2]).flatten(1)
    assert stop.item() == torch.log2(flip_loss.hdr.exposure_anchor("aces") / lum.median(1).values).item()
    lower = flip_loss.hdr_flip(test, ref, 30.0, median="lower")
    given = flip_loss.hdr_flip(test, ref, 30.0, start_exposure=start, stop_exposure=stop)
    assert torch.equal(lower, given)
    assert not torch.equal(lower, flip_loss.hdr_flip(test, ref, 30.0))
    with pytest.raises(ValueError, match="median"):
        flip_loss.hdr_flip(test, ref, 30.0, median="middle")


def test_hdr_flip_lower_median_under_torch_compile():
    torch._dynamo.reset()
    t, r = hdr_images(seed=12)
    eager = flip_loss.hdr_flip(t, r, 30.0, median="lower")
    compiled = torch.compile(lambda x, y: flip_loss.hdr_flip(x, y, 30.0, median="lower"), backend="aot_eager")
    assert torch.equal(compiled(t, r), eager)


@pytest.mark.cuda
def test_lower_median_and_the_losses_on_cuda():
    t, r = hdr_images(seed=13)
    for median in ("lower", "upper"):
        cpu = flip_loss.exposure_range(r, median=median)
        gpu = flip_loss.exposure_range(r.cuda(), median=median)
        assert torch.equal(gpu[0].cpu(), cpu[0]) and torch.equal(gpu[1].cpu(), cpu[1])
        s_cpu = flip_loss.compute_start_stop_exposures(r, "aces", 0.85, 0.85, median=median)
        s_gpu = flip_loss.compute_start_stop_exposures(r.cuda(), "aces", 0.85, 0.85, median=median)
        assert torch.equal(s_gpu[1].cpu(), s_cpu[1])
    x = t.cuda().requires_grad_()
    hdr = flip_loss.HDRFLIPLoss()(x, r.cuda(), 30.0)
    hdr.backward()
    assert abs(hdr.item() - flip_loss.HDRFLIPLoss()(t, r, 30.0).item()) <= 1e-5 and x.grad.abs().sum() > 0
    a = torch.rand(2, 3, 16, 12)
    y = a.cuda().requires_grad_()
    ldr = flip_loss.LDRFLIPLoss()(y, a.flip(-1).cuda(), 30.0)
    ldr.backward()
    assert abs(ldr.item() - flip_loss.LDRFLIPLoss()(a, a.flip(-1), 30.0).item()) <= 1e-5 and y.grad.abs().sum() > 0


def test_hdr_inputs_are_clamped_to_65536_unless_max_value_is_none():
    t, r = hdr_images(seed=14)
    r[0, :, 0, 0] = 1e6  # a sun
    t[0, :, 1, 1] = 3e5
    x = t.clone().requires_grad_()
    clamped = flip_loss.HDRFLIPLoss()(x, r, 30.0)
    clamped.backward()
    same = flip_loss.HDRFLIPLoss(max_value=None)(t.clamp(max=65536.0), r.clamp(max=65536.0), 30.0)
    assert clamped.item() == same.item()
    assert x.grad[0, :, 1, 1].abs().sum() == 0  # no gradient above the clamp
    unclamped = flip_loss.HDRFLIPLoss(max_value=None)(t, r, 30.0)
    assert unclamped.item() != clamped.item()
    # the automatic exposures come from the clamped reference
    start = flip_loss.compute_start_stop_exposures(r.clamp(max=65536.0), "aces", 0.85, 0.85)[0]
    assert start[0].item() == pytest.approx(math.log2(nvidia._nvidia_anchor("aces", 0.85) / 65536.0), abs=1e-5)


def test_a_black_median_gives_finite_exposures():
    ref = torch.zeros(1, 3, 4, 4)
    ref[..., 0, :] = 2.0  # three quarters of the pixels black
    start, stop = flip_loss.compute_start_stop_exposures(ref, "aces", 0.85, 0.85)
    eps = torch.finfo(torch.float32).eps
    assert math.isfinite(stop.item())
    assert stop.item() == pytest.approx(math.log2(nvidia._nvidia_anchor("aces", 0.85) / eps), abs=1e-5)
    loss = flip_loss.HDRFLIPLoss()(ref * 1.1, ref, 30.0)
    assert math.isfinite(loss.item()) and 0 < loss.item() < 1


def test_bad_exposures_raise_with_a_message():
    t, r = hdr_images(seed=15)
    with pytest.raises(ValueError, match="must not exceed"):
        flip_loss.HDRFLIPLoss()(t, r, 30.0, "aces", torch.full((2, 1, 1, 1), 3.0), torch.full((2, 1, 1, 1), 1.0))
    with pytest.raises(ValueError, match="one value per image"):
        flip_loss.HDRFLIPLoss()(t, r, 30.0, "aces", torch.zeros(3, 1, 1, 1), torch.ones(3, 1, 1, 1))
    bad = r.clone()
    bad[1, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="image 1 is undefined"):
        flip_loss.HDRFLIPLoss()(t, bad, 30.0)
    with pytest.raises(ValueError, match="tmin"):  # NVIDIA's order: tmax, then tmin
        flip_loss.compute_start_stop_exposures(r, "aces", 0.85, 1.5)
    with pytest.raises(ValueError, match="t_max"):  # the earlier keyword names name themselves
        flip_loss.compute_start_stop_exposures(r, "aces", t_min=0.85, t_max=1.5)


def test_a_given_start_with_an_automatic_stop():
    t, r = hdr_images(seed=16)
    auto_start, auto_stop = flip_loss.compute_start_stop_exposures(r, "reinhard", 0.85, 0.85)
    start = torch.tensor([-1.0, -2.0]).view(2, 1, 1, 1)
    loss = flip_loss.HDRFLIPLoss()(t, r, 30.0, "reinhard", start_exposure=start)
    want = flip_loss.HDRFLIPLoss()(t, r, 30.0, "reinhard", start, auto_stop)
    assert torch.equal(loss, want)
    assert torch.equal(
        flip_loss.HDRFLIPLoss()(t, r, 30.0, "reinhard", -1.0, 2.0),
        flip_loss.hdr_flip(t, r, 30.0, "reinhard", -1.0, 2.0).mean(),
    )


# --- the module functions -----------------------------------------------------------------------


def test_colour_transforms_give_the_known_values_and_invert():
    cst = flip_loss.color_space_transform
    white = torch.ones(1, 3, 1, 1, dtype=torch.float64)
    torch.testing.assert_close(
        cst(white, "srgb2ycxcz").flatten(), torch.tensor([100.0, 0.0, 0.0], dtype=torch.float64), atol=1e-12, rtol=0
    )
    torch.testing.assert_close(
        cst(white, "linrgb2xyz").flatten(),
        torch.tensor([0.950428545, 1.0, 1.088900371], dtype=torch.float64),
        atol=1e-9,
        rtol=0,
    )
    green = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).view(1, 3, 1, 1)
    torch.testing.assert_close(
        cst(green, "linrgb2cielab").flatten(),
        torch.tensor([87.736, -86.179, 83.183], dtype=torch.float64),
        atol=1e-3,
        rtol=0,
    )
    torch.testing.assert_close(
        flip_loss.hunt_adjustment(cst(green, "linrgb2lab")).flatten(),
        torch.tensor([87.736, -75.610, 72.981], dtype=torch.float64),
        atol=1e-3,
        rtol=0,
    )
    x = torch.rand(2, 3, 5, 4, dtype=torch.float64)
    names = [
        "srgb2linrgb",
        "linrgb2srgb",
        "linrgb2xyz",
        "xyz2linrgb",
        "xyz2ycxcz",
        "ycxcz2xyz",
        "xyz2cielab",
        "cielab2xyz",
        "ycxcz2linrgb",
        "linrgb2ycxcz",
        "srgb2ycxcz",
        "srgb2xyz",
        "linrgb2cielab",
        "srgb2lab",
        "lab2srgb",
        "ycxcz2lab",
    ]
    for name in names:
        src, dst = name.split("2")
        back = cst(cst(x, name), f"{dst}2{src}")
        torch.testing.assert_close(back, x, atol=1e-12, rtol=0, msg=name)
    # the chained transforms are the steps in a row
    torch.testing.assert_close(cst(x, "srgb2ycxcz"), cst(cst(cst(x, "srgb2linrgb"), "linrgb2xyz"), "xyz2ycxcz"))
    torch.testing.assert_close(cst(x, "srgb2linrgb"), oracle.srgb_to_linear(x))
    with pytest.raises(ValueError, match="unknown colour transform"):
        cst(x, "srgb2hsv")


def test_the_stage_functions_compose_to_the_ldr_map():
    g = torch.Generator().manual_seed(17)
    ref = torch.rand(1, 3, 24, 20, generator=g, dtype=torch.float64)
    test = (ref + 0.1 * torch.randn(ref.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    ppd, cst = 30.0, flip_loss.color_space_transform
    t, r = cst(test, "srgb2ycxcz"), cst(ref, "srgb2ycxcz")
    filters = [flip_loss.generate_spatial_filter(ppd, ch, dtype=torch.float64) for ch in ("A", "RG", "BY")]
    radius = filters[0][1]
    assert radius == 5 and filters[0][0].shape == (1, 1, 11, 11)
    for kernel, _ in filters:
        assert kernel.sum().item() == pytest.approx(1.0, abs=1e-12)
    ft = flip_loss.spatial_filter(t, filters[0][0], filters[1][0], filters[2][0], radius)
    fr = flip_loss.spatial_filter(r, filters[0][0], filters[1][0], filters[2][0], radius)
    torch.testing.assert_close(ft, torch.ops.flip.csf_filter(t, ppd), atol=1e-12, rtol=0)
    lab_t, lab_r = (flip_loss.hunt_adjustment(cst(f, "linrgb2cielab")) for f in (ft, fr))
    green, blue = (
        flip_loss.hunt_adjustment(cst(torch.tensor(c, dtype=torch.float64).view(1, 3, 1, 1), "linrgb2lab"))
        for c in ([0.0, 1.0, 0.0], [0.0, 0.0, 1.0])
    )
    cmax = flip_loss.hyab(green, blue, 0.0).item() ** 0.7
    assert cmax == pytest.approx(oracle.cmax(), abs=1e-9)
    colour = flip_loss.redistribute_errors(torch.pow(flip_loss.hyab(lab_r, lab_t, 1e-15), 0.7), cmax)
    yt, yr = (t[:, 0:1] + 16) / 116, (r[:, 0:1] + 16) / 116
    norm = {
        kind: [flip_loss.feature_detection(y, ppd, kind).norm(dim=1, keepdim=True) for y in (yt, yr)]
        for kind in ("edge", "point")
    }
    assert flip_loss.feature_detection(yt, ppd, "edge").shape == (1, 2, 24, 20)
    diff = torch.maximum((norm["edge"][0] - norm["edge"][1]).abs(), (norm["point"][0] - norm["point"][1]).abs())
    feature = torch.clamp(diff / math.sqrt(2), min=1e-15) ** 0.5
    by_hand = colour ** (1 - feature)
    torch.testing.assert_close(by_hand, flip_loss.ldr_flip(test, ref, ppd), atol=1e-10, rtol=0)
    torch.testing.assert_close(
        flip_loss.compute_ldrflip(t, r, ppd), flip_loss.ldr_flip(test, ref, ppd), atol=1e-10, rtol=0
    )


def test_tone_map_is_the_kernels_tone_mapping():
    _, r = hdr_images(seed=18)
    exposure = torch.tensor([-1.5, 0.5]).view(2, 1, 1, 1)
    for tm in flip_loss.constants.TONE_MAPPERS:
        mapped = flip_loss.tone_map(r, tm, exposure)
        assert mapped.shape == r.shape and mapped.min() >= 0 and mapped.max() <= 1
        torch.testing.assert_close(mapped, oracle.hdr_to_ldr(r, torch.exp2(exposure), tm), atol=0, rtol=0)
    # a number works as one exposure for all
    torch.testing.assert_close(flip_loss.tone_map(r, "aces", 1.0), flip_loss.tone_map(r, "aces", torch.tensor(1.0)))
    # ACES maps the anchor to 0.85
    anchor = flip_loss.hdr.exposure_anchor("aces")
    assert flip_loss.tone_map(torch.full((1, 3, 1, 1), anchor), "aces", 0.0).flatten()[0].item() == pytest.approx(
        0.85, abs=1e-6
    )


def test_the_functions_are_importable_from_flip_loss_as_from_nvidias_file():
    for name in nvidia.__all__:
        if name[0].islower() or name.endswith("Loss"):
            assert getattr(flip_loss, name) is getattr(nvidia, name)
            assert name in flip_loss.__all__


# --- the name clash -----------------------------------------------------------------------------


def test_a_missing_name_says_which_flip_loss_was_imported():
    with pytest.raises(AttributeError) as info:
        flip_loss.FLIPLos  # noqa: B018
    message = str(info.value)
    assert "flip-loss package" in message and str(Path(flip_loss.__file__).parent) in message
    assert "LDRFLIPLoss" in message and info.value.name == "FLIPLos"
    assert not hasattr(flip_loss, "FLIPLos")


def test_the_readme_check_spots_a_shadowing_flip_loss_py(tmp_path):
    (tmp_path / "flip_loss.py").write_text("class LDRFLIPLoss: pass\n")
    check = "import flip_loss; print(flip_loss.__file__)"
    shadowed = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert shadowed.stdout.strip() == str(tmp_path / "flip_loss.py")
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f'python -c "{check}"' in readme
