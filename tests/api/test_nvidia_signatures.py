"""flip_loss/nvidia.py against NVIDIA's flip_loss.py (NVlabs/flip, src/pytorch) function by
function: the parameter names, order and defaults of NVIDIA's signatures (written out below as
facts, so that a reordering here fails), the attributes of its loss objects, each function called
the way NVIDIA's code and its users call it (positionally and by keyword), the values where
NVIDIA's semantics are kept (against formulas written from docs/algorithm.md, and NVIDIA's own
loss values in tests/data/nvidia_loss) and, where flip-loss deliberately differs, an error or a
warning rather than another number. docs/nvidia.md is the table; every row names its test here."""

import inspect
import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import flip_loss
from flip_loss import nvidia
from flip_loss.constants import DEFAULT_EPS, PC, PT, QC, QF, TONE_MAPPERS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "nvidia_loss"
NVIDIA_PPD = (0.7 * 3840 / 0.7) * np.pi / 180
EMPTY = inspect.Parameter.empty

# NVIDIA's signatures: (parameter names in order, their defaults). Facts read from NVIDIA's file;
# parameters without a default there are required of every caller.
NVIDIA_SIGNATURES = {
    "LDRFLIPLoss.__init__": ([], {}),
    "LDRFLIPLoss.forward": (["test", "reference", "pixels_per_degree"], {"pixels_per_degree": NVIDIA_PPD}),
    "HDRFLIPLoss.__init__": ([], {}),
    "HDRFLIPLoss.forward": (
        ["test", "reference", "pixels_per_degree", "tone_mapper", "start_exposure", "stop_exposure"],
        {"pixels_per_degree": NVIDIA_PPD, "tone_mapper": "aces", "start_exposure": None, "stop_exposure": None},
    ),
    "compute_ldrflip": (["test", "reference", "pixels_per_degree", "qc", "qf", "pc", "pt", "eps"], {}),
    "tone_map": (["img", "tone_mapper", "exposure"], {}),
    "compute_start_stop_exposures": (["reference", "tone_mapper", "tmax", "tmin"], {}),
    "generate_spatial_filter": (["pixels_per_degree", "channel"], {}),
    "spatial_filter": (["img", "s_a", "s_rg", "s_by", "radius"], {}),
    "hunt_adjustment": (["img"], {}),
    "hyab": (["reference", "test", "eps"], {}),
    "redistribute_errors": (["power_deltaE_hyab", "cmax", "pc", "pt"], {}),
    "feature_detection": (["img_y", "pixels_per_degree", "feature_type"], {}),
    "color_space_transform": (["input_color", "fromSpace2toSpace"], {}),
}

# The attributes NVIDIA's loss objects set in __init__, with their values.
NVIDIA_LDR_ATTRIBUTES = {"qc": 0.7, "qf": 0.5, "pc": 0.4, "pt": 0.95, "eps": 1e-15}
NVIDIA_HDR_ATTRIBUTES = dict(NVIDIA_LDR_ATTRIBUTES, tmax=0.85, tmin=0.85)

# The transforms NVIDIA's color_space_transform knows.
NVIDIA_TRANSFORMS = [
    "srgb2linrgb",
    "linrgb2srgb",
    "linrgb2xyz",
    "xyz2linrgb",
    "xyz2ycxcz",
    "ycxcz2xyz",
    "xyz2lab",
    "lab2xyz",
    "srgb2xyz",
    "srgb2ycxcz",
    "linrgb2ycxcz",
    "srgb2lab",
    "linrgb2lab",
    "ycxcz2linrgb",
    "lab2srgb",
    "ycxcz2lab",
]


def _function(qualified: str):
    owner, _, method = qualified.partition(".")
    target = getattr(flip_loss, owner)
    return getattr(target, method) if method else target


def _parameters(qualified: str):
    params = list(inspect.signature(_function(qualified)).parameters.values())
    return params[1:] if "." in qualified else params  # without self


def ldr_pair(seed=0, n=2, h=16, w=12, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(n, 3, h, w, generator=g, dtype=dtype)
    test = ref.clone()
    test[:, :, : h // 2] = torch.rand(n, 3, h // 2, w, generator=g, dtype=dtype)  # half the image equal
    return test, ref


def hdr_pair(seed=0, n=2, h=16, w=20, low=-3.0, high=5.0):
    g = torch.Generator().manual_seed(seed)
    ramp = torch.exp2(torch.linspace(low, high, w)).view(1, 1, 1, w)
    ref = torch.rand(n, 3, h, w, generator=g) * ramp
    test = ref * (1 + 0.2 * torch.randn(ref.shape, generator=g)).clamp(min=0)
    return test, ref


def ycxcz(x):
    return flip_loss.color_space_transform(x, "srgb2ycxcz")


# --- signatures and attributes ------------------------------------------------------------------


@pytest.mark.parametrize("qualified", sorted(NVIDIA_SIGNATURES))
def test_signature_starts_with_nvidias_parameters_in_order(qualified):
    names, defaults = NVIDIA_SIGNATURES[qualified]
    params = _parameters(qualified)
    positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    # NVIDIA's parameters first, in its order, each positional or by its name ...
    assert [p.name for p in positional[: len(names)]] == names
    # ... and nothing else taken positionally: what flip-loss adds is keyword-only.
    assert len(positional) == len(names)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[len(names) :])
    for p in positional:
        if p.name in defaults:  # NVIDIA's default kept, the same value
            assert p.default == defaults[p.name] and type(p.default) is type(defaults[p.name])
        elif p.default is not EMPTY:  # a default NVIDIA does not have: FLIP's published value, or None
            published = {"qc": QC, "qf": QF, "pc": PC, "pt": PT, "eps": DEFAULT_EPS}
            assert p.default is None or p.default == published[p.name], p.name


def test_the_table_covers_nvidias_functions():
    functions = {q for q in NVIDIA_SIGNATURES if "." not in q}
    assert functions == {n for n in nvidia.__all__ if n[0].islower()}


@pytest.mark.parametrize(
    "cls, attributes", [("LDRFLIPLoss", NVIDIA_LDR_ATTRIBUTES), ("HDRFLIPLoss", NVIDIA_HDR_ATTRIBUTES)]
)
def test_loss_attributes_have_nvidias_values(cls, attributes):
    loss = getattr(flip_loss, cls)()
    for name, value in attributes.items():
        assert getattr(loss, name) == value, name
    # reading them gives FLIP's constants, as flip_loss.constants states them
    assert (loss.qc, loss.qf, loss.pc, loss.pt, loss.eps) == (QC, QF, PC, PT, DEFAULT_EPS)


@pytest.mark.parametrize("cls", ["LDRFLIPLoss", "HDRFLIPLoss"])
@pytest.mark.parametrize("name", ["qc", "qf", "pc", "pt"])
def test_published_constant_attributes_accept_their_value_and_refuse_another(cls, name):
    loss = getattr(flip_loss, cls)()
    published = getattr(loss, name)
    setattr(loss, name, published)  # what NVIDIA's __init__ does
    setattr(loss, name, torch.tensor(published))  # a float32 tensor holding it: the same constant
    assert getattr(loss, name) == published
    with pytest.raises(ValueError, match=rf"{name} must be FLIP's published value {published}.*kernels"):
        setattr(loss, name, published + 0.05)
    assert getattr(loss, name) == published  # unchanged
    with pytest.raises(TypeError, match=name):
        setattr(loss, name, "0.7")


def test_ldr_eps_attribute_is_honoured_and_checked():
    test, ref = ldr_pair(seed=1)
    loss = flip_loss.LDRFLIPLoss()
    default = loss(test, ref, 30.0)
    loss.eps = 1e-6
    assert loss.eps == 1e-6
    changed = loss(test, ref, 30.0)
    assert torch.equal(changed, flip_loss.ldr_flip(test, ref, 30.0, eps=1e-6).mean())
    assert changed.item() != default.item()
    for bad in (1e-3, -1e-15, math.nan):
        with pytest.raises(ValueError, match="eps must be"):
            loss.eps = bad
    assert loss.eps == 1e-6
    assert torch.equal(loss(test, ref, 30.0), changed)


def test_hdr_eps_attribute_is_honoured_and_checked():
    test, ref = hdr_pair(seed=2)
    loss = flip_loss.HDRFLIPLoss(median="upper", max_value=None)
    loss.eps = 1e-6
    assert torch.equal(loss(test, ref, 30.0), flip_loss.hdr_flip(test, ref, 30.0, eps=1e-6).mean())
    with pytest.raises(ValueError, match="eps must be"):
        loss.eps = 0.1
    assert loss.eps == 1e-6


@pytest.mark.parametrize("tone_mapper", TONE_MAPPERS)
@pytest.mark.parametrize("median", ["lower", "upper"])
def test_hdr_tmax_tmin_attributes_set_the_automatic_exposures(tone_mapper, median):
    test, ref = hdr_pair(seed=3)
    loss = flip_loss.HDRFLIPLoss(median=median)
    default = loss(test, ref, 30.0, tone_mapper)
    loss.tmax, loss.tmin = 0.9, 0.6
    assert (loss.tmax, loss.tmin) == (0.9, 0.6)
    start, stop = flip_loss.compute_start_stop_exposures(ref, tone_mapper, 0.9, 0.6, median=median)
    tuned = loss(test, ref, 30.0, tone_mapper)
    assert torch.equal(tuned, loss(test, ref, 30.0, tone_mapper, start, stop))
    assert tuned.item() != default.item()
    # tmax moves only the start, tmin only the stop, as NVIDIA's loss passes them
    default_start, default_stop = flip_loss.compute_start_stop_exposures(ref, tone_mapper, 0.85, 0.85, median=median)
    assert not torch.equal(start, default_start) and not torch.equal(stop, default_stop)
    loss.tmax = 0.85
    assert torch.equal(loss(test, ref, 30.0, tone_mapper), loss(test, ref, 30.0, tone_mapper, default_start, stop))


def test_hdr_tmax_tmin_attributes_are_checked():
    loss = flip_loss.HDRFLIPLoss()
    for name in ("tmax", "tmin"):
        for bad in (0.0, 1.0, 1.5, math.inf):
            with pytest.raises(ValueError, match=rf"{name} must be a tone-mapped value between 0 and 1"):
                setattr(loss, name, bad)
        assert getattr(loss, name) == 0.85
    with pytest.raises(ValueError, match="max_value"):
        loss.max_value = -1.0
    with pytest.raises(ValueError, match="median"):
        loss.median = "middle"
    assert loss.max_value == 65536.0 and loss.median == "lower"


def test_attribute_assignments_after_torch_compile():
    torch._dynamo.reset()
    test, ref = ldr_pair(seed=4)
    ldr = flip_loss.LDRFLIPLoss()
    compiled = torch.compile(ldr, fullgraph=True, backend="aot_eager")
    first = compiled(test, ref, 30.0)
    compiled.eps = 1e-6  # through the compiled wrapper: reaches the module
    assert ldr.eps == 1e-6
    assert torch.equal(compiled(test, ref, 30.0), flip_loss.LDRFLIPLoss(eps=1e-6)(test, ref, 30.0))
    assert compiled(test, ref, 30.0).item() != first.item()
    with pytest.raises(ValueError, match="qf must be FLIP's published value"):
        compiled.qf = 0.6
    with pytest.raises(ValueError, match="eps must be"):
        compiled.eps = 1.0

    t, r = hdr_pair(seed=5)
    hdr = flip_loss.HDRFLIPLoss()
    compiled_hdr = torch.compile(hdr, backend="aot_eager")
    before = compiled_hdr(t, r, 30.0)
    compiled_hdr.tmin = 0.5
    after = compiled_hdr(t, r, 30.0)
    eager = flip_loss.HDRFLIPLoss()
    eager.tmin = 0.5
    assert torch.equal(after, eager(t, r, 30.0)) and after.item() != before.item()
    with pytest.raises(ValueError, match="pt must be FLIP's published value"):
        compiled_hdr.pt = 0.9


# --- the losses, called as NVIDIA's code calls them ---------------------------------------------


def test_ldr_loss_called_as_nvidias_code_calls_it():
    test, ref = ldr_pair(seed=6)
    loss_fn = flip_loss.LDRFLIPLoss()
    want = flip_loss.ldr_flip(test, ref, NVIDIA_PPD).mean()
    assert torch.equal(loss_fn.forward(test, ref), want)  # train.py: loss_fn.forward(pred, reference)
    assert torch.equal(loss_fn(test, ref), want)  # test_pytorch.py
    assert torch.equal(loss_fn(test, ref, NVIDIA_PPD), want)
    assert torch.equal(loss_fn(test=test, reference=ref, pixels_per_degree=NVIDIA_PPD), want)
    out = loss_fn(test, ref)
    assert out.shape == () and out.dtype == torch.float32 and out.device == test.device


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_ldr_inputs_raise(value):
    test, ref = ldr_pair(seed=24)
    bad = test.clone()
    bad[1, 2, 3, 4] = value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the out-of-range warning, for the infinities
        with pytest.raises(RuntimeError, match="NaN or infinite"):
            flip_loss.LDRFLIPLoss()(bad, ref)
        with pytest.raises(RuntimeError, match="NaN or infinite"):
            flip_loss.LDRFLIPLoss()(ref, bad)


def test_hdr_loss_called_as_nvidias_code_calls_it():
    test, ref = hdr_pair(seed=7)
    loss_fn = flip_loss.HDRFLIPLoss()
    start, stop = flip_loss.compute_start_stop_exposures(ref, "aces", 0.85, 0.85)
    want = loss_fn(test, ref, NVIDIA_PPD, "aces", start, stop)
    assert torch.equal(loss_fn.forward(test, ref), want)
    assert torch.equal(loss_fn(test, ref), want)
    assert torch.equal(
        loss_fn(
            test=test,
            reference=ref,
            pixels_per_degree=NVIDIA_PPD,
            tone_mapper="aces",
            start_exposure=start,
            stop_exposure=stop,
        ),
        want,
    )
    # per-image exposures N x 1 x 1 x 1: each image's own range, as hdr_flip with those exposures
    s, e = torch.tensor([-2.0, -1.0]).view(2, 1, 1, 1), torch.tensor([1.0, 3.0]).view(2, 1, 1, 1)
    by_loss = flip_loss.HDRFLIPLoss(max_value=None)(test, ref, 30.0, "hable", s, e)
    by_map = flip_loss.hdr_flip(test, ref, 30.0, "hable", s.flatten(), e.flatten()).mean()
    assert torch.equal(by_loss, by_map)
    assert want.shape == () and want.dtype == torch.float32


def test_loss_values_are_nvidias_with_the_attributes_spelled_out():
    cases = json.loads((DATA / "cases.json").read_text())["cases"]
    with np.load(DATA / "inputs.npz") as z:
        inputs = {k: torch.from_numpy(z[k]) for k in z.files}
    ldr, hdr = flip_loss.LDRFLIPLoss(), flip_loss.HDRFLIPLoss()
    for name, value in NVIDIA_HDR_ATTRIBUTES.items():  # what NVIDIA's __init__ runs
        setattr(hdr, name, value)
        if name in NVIDIA_LDR_ATTRIBUTES:
            setattr(ldr, name, value)
    for case in cases:
        t, r = inputs[case["test"]], inputs[case["reference"]]
        if case["kind"] == "ldr":
            loss = ldr(t, r, case["pixels_per_degree"])
            # NVIDIA's LDRFLIPLoss.forward, spelled out with its module functions
            by_hand = flip_loss.compute_ldrflip(
                ycxcz(t.clamp(0, 1)), ycxcz(r.clamp(0, 1)), case["pixels_per_degree"], 0.7, 0.5, 0.4, 0.95, 1e-15
            ).mean()
            assert abs(by_hand.item() - case["nvidia_mean"]) <= 1e-6
        elif "start_exposure" in case:
            n = t.shape[0]
            loss = hdr(
                t,
                r,
                pixels_per_degree=nvidia.NVIDIA_DEFAULT_PPD,
                tone_mapper=case["tone_mapper"],
                start_exposure=torch.full((n, 1, 1, 1), case["start_exposure"]),
                stop_exposure=torch.full((n, 1, 1, 1), case["stop_exposure"]),
            )
        else:
            loss = hdr(t, r, nvidia.NVIDIA_DEFAULT_PPD, case["tone_mapper"])
        assert abs(loss.item() - case["nvidia_mean"]) <= 1e-6


def test_hdr_loss_warns_where_a_batch_needs_different_exposure_counts():
    narrow_t, narrow_r = hdr_pair(seed=22, n=1, low=0.0, high=1.0)
    wide_t, wide_r = hdr_pair(seed=23, n=1, low=-4.0, high=8.0)
    t, r = torch.cat([narrow_t, wide_t]), torch.cat([narrow_r, wide_r])
    start, stop = flip_loss.compute_start_stop_exposures(r, "aces", 0.85, 0.85)
    counts = torch.clamp(torch.ceil(stop - start), min=2).flatten().int().tolist()
    assert counts[0] != counts[1]
    message = rf"different numbers of exposures \({min(counts)} to {max(counts)}\)"
    loss = flip_loss.HDRFLIPLoss()
    with pytest.warns(UserWarning, match=message):
        mixed = loss(t, r, 30.0)
    assert mixed.item() == pytest.approx((loss(narrow_t, narrow_r, 30.0) + loss(wide_t, wide_r, 30.0)).item() / 2)
    with pytest.warns(UserWarning, match=message):  # given per-image exposures too
        loss(t, r, 30.0, "aces", start, stop)
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match=message):
        torch.compile(loss, backend="aot_eager")(t, r, 30.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(torch.cat([wide_t, wide_t]), torch.cat([wide_r, wide_r]), 30.0)  # one count: no warning


# --- HDR inputs in half precision and non-finite HDR inputs -------------------------------------


@pytest.mark.parametrize("dtype, rtol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_hdr_loss_takes_half_precision_inputs(dtype, rtol):
    test, ref = hdr_pair(seed=8)
    test[0, :, 0, 0] = 60000.0  # near float16's largest value: nothing to clamp, nothing to overflow
    for max_value in (nvidia.HDR_INPUT_MAX, 8.0, None):
        loss = flip_loss.HDRFLIPLoss(max_value=max_value)
        low = loss(test.to(dtype), ref.to(dtype), 30.0)
        assert low.dtype == dtype and low.shape == ()
        # the float32 value of the same (rounded) inputs, to the output dtype's precision
        same_inputs = loss(test.to(dtype).float(), ref.to(dtype).float(), 30.0)
        assert low.item() == pytest.approx(same_inputs.item(), rel=rtol)
        # and the float32 value of the inputs before rounding, to the rounding of the inputs
        assert low.item() == pytest.approx(loss(test, ref, 30.0).item(), rel=5 * rtol)


def test_hdr_loss_clamps_half_inputs_below_max_value():
    test, ref = hdr_pair(seed=9)
    test[0, :, 2, 2] = 100.0
    loss = flip_loss.HDRFLIPLoss(max_value=8.0)
    x = test.half().requires_grad_()
    value = loss(x, ref.half(), 30.0)
    value.backward()
    want = flip_loss.HDRFLIPLoss(max_value=None)(test.half().clamp(max=8.0), ref.half().clamp(max=8.0), 30.0)
    assert value.item() == want.item()
    assert x.grad[0, :, 2, 2].abs().sum() == 0  # no gradient above the clamp


def _outcome(fn):
    try:
        return "value", fn().item()
    except (ValueError, RuntimeError) as error:
        return type(error).__name__, str(error)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("where", ["test", "reference"])
@pytest.mark.parametrize("value", [math.inf, math.nan])
@pytest.mark.parametrize("given", [False, True])
def test_non_finite_hdr_inputs_raise_as_in_hdr_flip(dtype, where, value, given):
    test, ref = hdr_pair(seed=10)
    test, ref = test.to(dtype), ref.to(dtype)
    (test if where == "test" else ref)[1, 0, 3, 3] = value
    exposures = (-2.0, 1.0) if given else (None, None)
    by_loss = _outcome(lambda: flip_loss.HDRFLIPLoss()(test, ref, 30.0, "aces", *exposures))
    by_map = _outcome(lambda: flip_loss.hdr_flip(test, ref, 30.0, "aces", *exposures, median="lower").mean())
    assert by_loss[0] != "value", by_loss  # not clamped to a finite loss, as NVIDIA's clamp would
    assert by_loss == by_map


# --- the module functions -----------------------------------------------------------------------


def test_compute_ldrflip_takes_nvidias_arguments():
    test, ref = ldr_pair(seed=11, dtype=torch.float64)
    t, r = ycxcz(test), ycxcz(ref)
    three = flip_loss.compute_ldrflip(t, r, 30.0)
    assert three.shape == (2, 1, 16, 12) and three.dtype == torch.float64
    assert torch.equal(flip_loss.compute_ldrflip(t, r, 30.0, 0.7, 0.5, 0.4, 0.95, 1e-15), three)
    assert torch.equal(
        flip_loss.compute_ldrflip(
            test=t, reference=r, pixels_per_degree=30.0, qc=0.7, qf=0.5, pc=0.4, pt=0.95, eps=1e-15
        ),
        three,
    )
    # eps, positional or by name, is honoured: the map of ldr_flip with that eps
    by_position = flip_loss.compute_ldrflip(t, r, 30.0, 0.7, 0.5, 0.4, 0.95, 1e-6)
    torch.testing.assert_close(by_position, flip_loss.ldr_flip(test, ref, 30.0, eps=1e-6), atol=1e-10, rtol=0)
    assert torch.equal(flip_loss.compute_ldrflip(t, r, 30.0, eps=1e-6), by_position)
    assert not torch.equal(by_position, three)


@pytest.mark.parametrize("name, position", [("qc", 3), ("qf", 4), ("pc", 5), ("pt", 6)])
def test_compute_ldrflip_refuses_other_constants(name, position):
    test, ref = ldr_pair(seed=12)
    t, r = ycxcz(test), ycxcz(ref)
    args = [t, r, 30.0, 0.7, 0.5, 0.4, 0.95, 1e-15]
    args[position] += 0.05
    with pytest.raises(ValueError, match=rf"{name} must be FLIP's published value"):
        flip_loss.compute_ldrflip(*args)
    with pytest.raises(ValueError, match=rf"{name} must be FLIP's published value"):
        flip_loss.compute_ldrflip(t, r, 30.0, **{name: args[position]})
    with pytest.raises(ValueError, match="eps must be"):
        flip_loss.compute_ldrflip(t, r, 30.0, 0.7, 0.5, 0.4, 0.95, 0.01)


@pytest.mark.parametrize("tone_mapper", TONE_MAPPERS)
def test_compute_start_stop_exposures_takes_nvidias_order_and_names(tone_mapper):
    # a grey reference: each pixel's luminance is its value, so tone mapping the brightest pixel at
    # the start exposure gives tmax and the median pixel at the stop exposure gives tmin
    g = torch.Generator().manual_seed(13)
    grey = (torch.rand(2, 1, 5, 7, generator=g) * torch.tensor([4.0, 40.0]).view(2, 1, 1, 1)).expand(2, 3, 5, 7)
    ref = grey.contiguous()
    positional = flip_loss.compute_start_stop_exposures(ref, tone_mapper, 0.9, 0.6)
    calls = [
        flip_loss.compute_start_stop_exposures(ref, tone_mapper, tmax=0.9, tmin=0.6),
        flip_loss.compute_start_stop_exposures(reference=ref, tone_mapper=tone_mapper, tmin=0.6, tmax=0.9),
        flip_loss.compute_start_stop_exposures(ref, tone_mapper, t_max=0.9, t_min=0.6),  # the earlier names
        flip_loss.compute_start_stop_exposures(ref, tone_mapper, 0.9, t_min=0.6),
    ]
    for start, stop in calls:
        assert torch.equal(start, positional[0]) and torch.equal(stop, positional[1])
    start, stop = positional
    assert start.shape == stop.shape == (2, 1, 1, 1) and start.dtype == torch.float32
    lum = ref[:, 0].flatten(1)
    brightest = lum.amax(1).view(2, 1, 1, 1).expand(2, 3, 1, 1)
    median = lum.median(1).values.view(2, 1, 1, 1).expand(2, 3, 1, 1)  # NVIDIA's: the lower median
    tol = 2e-5 if tone_mapper == "hable" else 1e-6  # Hable: the kernels' six-digit coefficients
    assert flip_loss.tone_map(brightest, tone_mapper, start).flatten().tolist() == pytest.approx([0.9] * 6, abs=tol)
    assert flip_loss.tone_map(median, tone_mapper, stop).flatten().tolist() == pytest.approx([0.6] * 6, abs=tol)
    # the other order is another range: the order matters, and it is NVIDIA's
    swapped = flip_loss.compute_start_stop_exposures(ref, tone_mapper, 0.6, 0.9)
    assert not torch.equal(swapped[0], start) and not torch.equal(swapped[1], stop)


def test_compute_start_stop_exposures_refuses_a_name_with_its_alias_or_none():
    _, ref = hdr_pair(seed=14)
    with pytest.raises(TypeError, match="give tmax or its alias t_max, not both"):
        flip_loss.compute_start_stop_exposures(ref, "aces", 0.85, 0.85, t_max=0.85)
    with pytest.raises(TypeError, match="give tmin or its alias t_min, not both"):
        flip_loss.compute_start_stop_exposures(ref, "aces", tmax=0.85, tmin=0.85, t_min=0.85)
    with pytest.raises(TypeError, match="missing the argument tmin"):
        flip_loss.compute_start_stop_exposures(ref, "aces", 0.85)
    with pytest.raises(TypeError, match="missing the argument tmax"):
        flip_loss.compute_start_stop_exposures(ref, "aces")
    with pytest.raises(ValueError, match="tmax must be a tone-mapped value"):
        flip_loss.compute_start_stop_exposures(ref, "aces", 1.2, 0.85)


def _aces(x):
    """The ACES fit at 0.6 x (docs/algorithm.md §5.3), clamped."""
    y = 0.6 * x
    return np.clip(y * (2.51 * y + 0.03) / (y * (2.43 * y + 0.59) + 0.14), 0.0, 1.0)


def test_tone_map_called_as_nvidias_users_call_it():
    _, ref = hdr_pair(seed=15)
    ref64 = ref.double()
    exposure = torch.tensor([-1.5, 0.5], dtype=torch.float64).view(2, 1, 1, 1)
    mapped = flip_loss.tone_map(ref64, "aces", exposure)
    assert torch.equal(flip_loss.tone_map(img=ref64, tone_mapper="aces", exposure=exposure), mapped)
    assert mapped.shape == ref.shape and mapped.dtype == torch.float64
    exposed = ref64.numpy() * np.exp2(exposure.numpy())
    # within the rounding of the coefficients to float32 (as flip-evaluator computes them)
    np.testing.assert_allclose(mapped.numpy(), _aces(exposed), atol=2e-7, rtol=0)
    # Reinhard is luminance based: x / (1 + L)
    lum = 0.2126 * exposed[:, 0:1] + 0.7152 * exposed[:, 1:2] + 0.0722 * exposed[:, 2:3]
    np.testing.assert_allclose(
        flip_loss.tone_map(ref64, "reinhard", exposure).numpy(), np.clip(exposed / (1 + lum), 0, 1), atol=1e-7
    )
    # a number, as data.py's save_ldr_image_range passes start + i * step
    assert torch.equal(flip_loss.tone_map(ref64, "hable", 0.5), flip_loss.tone_map(ref64, "hable", torch.tensor(0.5)))


def test_tone_map_warns_about_negative_values():
    _, ref = hdr_pair(seed=16)
    neg = ref.clone()
    neg[0, 1, 2, 3] = -0.5
    with pytest.warns(UserWarning, match="negative values of img as 0"):
        mapped = flip_loss.tone_map(neg, "aces", 0.0)
    assert mapped[0, 1, 2, 3].item() == 0.0
    assert torch.equal(mapped, flip_loss.tone_map(neg.clamp(min=0), "aces", 0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        flip_loss.tone_map(neg.clamp(min=0), "aces", 0.0)  # non-negative: no warning


def _csf_kernel(ppd, channel):
    """The 2-D CSF kernel of docs/algorithm.md §4.4, normalised to sum to 1, in float64."""
    a1, b1, a2, b2 = {"A": (1, 0.0047, 0, 1e-5), "RG": (1, 0.0053, 0, 1e-5), "BY": (34.1, 0.04, 13.5, 0.025)}[channel]
    r = int(math.ceil(3 * math.sqrt(0.04 / (2 * math.pi**2)) * ppd))
    x = np.arange(-r, r + 1) / ppd
    z = x[:, None] ** 2 + x[None, :] ** 2
    k = a1 * np.sqrt(np.pi / b1) * np.exp(-(np.pi**2) * z / b1) + a2 * np.sqrt(np.pi / b2) * np.exp(
        -(np.pi**2) * z / b2
    )
    return k / k.sum(), r


@pytest.mark.parametrize("ppd", [10.0, 30.0, NVIDIA_PPD])
def test_generate_spatial_filter_gives_the_2d_csf_kernel(ppd):
    for channel in ("A", "RG", "BY"):
        want, radius = _csf_kernel(ppd, channel)
        kernel, r = flip_loss.generate_spatial_filter(ppd, channel)
        assert r == radius and isinstance(r, int)
        assert kernel.shape == (1, 1, 2 * r + 1, 2 * r + 1) and kernel.dtype == torch.float32
        np.testing.assert_allclose(kernel[0, 0].double().numpy(), want, atol=1e-7, rtol=0)
        by_name, _ = flip_loss.generate_spatial_filter(pixels_per_degree=ppd, channel=channel)
        assert torch.equal(by_name, kernel)
    with pytest.raises(ValueError, match="channel must be"):
        flip_loss.generate_spatial_filter(ppd, "Y")


def test_spatial_filter_called_as_compute_ldrflip_calls_it():
    test, _ = ldr_pair(seed=17, dtype=torch.float64)
    opp = ycxcz(test)
    ppd = 30.0
    (s_a, r_a), (s_rg, r_rg), (s_by, r_by) = (flip_loss.generate_spatial_filter(ppd, c) for c in ("A", "RG", "BY"))
    radius = max(r_a, r_rg, r_by)
    filtered = flip_loss.spatial_filter(opp.float(), s_a, s_rg, s_by, radius)
    assert filtered.shape == opp.shape and filtered.dtype == torch.float32
    assert torch.equal(
        flip_loss.spatial_filter(img=opp.float(), s_a=s_a, s_rg=s_rg, s_by=s_by, radius=radius), filtered
    )
    # the filtered linear colour of the compiled CSF op
    torch.testing.assert_close(filtered.double(), torch.ops.flip.csf_filter(opp, ppd), atol=2e-6, rtol=0)


def test_hunt_adjustment_and_hyab_called_as_nvidias_function_calls_them():
    g = torch.Generator().manual_seed(18)
    lab_r = torch.rand(2, 3, 4, 5, generator=g, dtype=torch.float64) * torch.tensor([100.0, 80.0, 80.0]).view(
        1, 3, 1, 1
    )
    lab_t = lab_r + torch.randn(lab_r.shape, generator=g, dtype=torch.float64)
    lab_t[:, 0, :2] = lab_r[:, 0, :2]  # equal lightness: the eps floor shows there
    hunt_r, hunt_t = flip_loss.hunt_adjustment(lab_r), flip_loss.hunt_adjustment(img=lab_t)
    L, a, b = lab_r[:, 0:1], lab_r[:, 1:2], lab_r[:, 2:3]
    torch.testing.assert_close(hunt_r, torch.cat((L, 0.01 * L * a, 0.01 * L * b), 1), atol=0, rtol=0)
    for eps in (1e-15, 1e-8):
        d = hunt_r - hunt_t
        want = torch.sqrt(torch.clamp(d[:, 0:1] ** 2, min=eps)) + torch.sqrt(d[:, 1:2] ** 2 + d[:, 2:3] ** 2)
        got = flip_loss.hyab(hunt_r, hunt_t, eps)
        assert got.shape == (2, 1, 4, 5)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
        assert torch.equal(flip_loss.hyab(reference=hunt_r, test=hunt_t, eps=eps), got)
    with pytest.raises(ValueError, match="eps must be"):
        flip_loss.hyab(hunt_r, hunt_t, 0.01)  # beyond 1e-6 eps changes the metric, not the gradient


def test_redistribute_errors_honours_pc_and_pt():
    cmax = nvidia.oracle.cmax()
    e = torch.linspace(0.0, cmax, 101, dtype=torch.float64).view(1, 1, 1, 101)
    for pc, pt in ((0.4, 0.95), (0.25, 0.8), (0.6, 0.5)):
        # the piecewise-linear map through (0, 0), (pc cmax, pt) and (cmax, 1)
        want = np.interp(e.flatten().numpy(), [0.0, pc * cmax, cmax], [0.0, pt, 1.0])
        got = flip_loss.redistribute_errors(e, cmax, pc, pt)
        np.testing.assert_allclose(got.flatten().numpy(), want, atol=1e-12, rtol=0)
        by_name = flip_loss.redistribute_errors(power_deltaE_hyab=e, cmax=cmax, pc=pc, pt=pt)
        assert torch.equal(by_name, got)
    assert torch.equal(flip_loss.redistribute_errors(e, cmax), flip_loss.redistribute_errors(e, cmax, 0.4, 0.95))
    for pc, pt, name in ((0.0, 0.95, "pc"), (1.0, 0.95, "pc"), (0.4, 1.5, "pt"), (0.4, math.nan, "pt")):
        with pytest.raises(ValueError, match=rf"{name} must be a number"):
            flip_loss.redistribute_errors(e, cmax, pc, pt)


def _feature_kernel(ppd, kind):
    """The 2-D edge or point kernel along x of docs/algorithm.md §4.10, each lobe normalised."""
    sd = 0.5 * 0.082 * ppd
    r = int(math.ceil(3 * sd))
    x, y = np.meshgrid(np.arange(-r, r + 1), np.arange(-r, r + 1))
    g = np.exp(-(x**2 + y**2) / (2 * sd * sd))
    k = -x * g if kind == "edge" else (x**2 / (sd * sd) - 1) * g
    return np.where(k < 0, k / -k[k < 0].sum(), k / k[k > 0].sum()), r


@pytest.mark.parametrize("ppd", [10.0, NVIDIA_PPD])
@pytest.mark.parametrize("kind", ["edge", "point"])
def test_feature_detection_gives_the_2d_responses(ppd, kind):
    g = torch.Generator().manual_seed(19)
    img_y = torch.rand(2, 1, 23, 19, generator=g, dtype=torch.float64)
    k, r = _feature_kernel(ppd, kind)
    weights = torch.from_numpy(k).view(1, 1, 2 * r + 1, 2 * r + 1)
    padded = torch.nn.functional.pad(img_y, (r, r, r, r), mode="replicate")
    want = torch.cat(
        (torch.nn.functional.conv2d(padded, weights), torch.nn.functional.conv2d(padded, weights.transpose(2, 3))), 1
    )
    got = flip_loss.feature_detection(img_y, ppd, kind)
    assert got.shape == (2, 2, 23, 19) and got.dtype == torch.float64
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    as_float = flip_loss.feature_detection(img_y=img_y.float(), pixels_per_degree=ppd, feature_type=kind)
    assert as_float.dtype == torch.float32
    torch.testing.assert_close(as_float.double(), want, atol=1e-6, rtol=0)


def test_feature_detection_refuses_an_unknown_feature_type():
    img_y = torch.rand(1, 1, 8, 8)
    with pytest.raises(ValueError, match="feature_type must be 'edge' or 'point'"):
        flip_loss.feature_detection(img_y, 30.0, "corner")  # NVIDIA's runs the point detector


@pytest.mark.parametrize("transform", NVIDIA_TRANSFORMS)
def test_color_space_transform_knows_nvidias_transforms(transform):
    g = torch.Generator().manual_seed(20)
    x = torch.rand(2, 3, 4, 5, generator=g, dtype=torch.float64)
    out = flip_loss.color_space_transform(x, transform)
    assert out.shape == x.shape and out.dtype == torch.float64
    assert torch.equal(flip_loss.color_space_transform(input_color=x, fromSpace2toSpace=transform), out)
    src, dst = transform.split("2")
    torch.testing.assert_close(flip_loss.color_space_transform(out, f"{dst}2{src}"), x, atol=1e-12, rtol=0)


def test_color_space_transform_values():
    cst = flip_loss.color_space_transform
    eye = torch.eye(3, dtype=torch.float64).view(3, 3, 1, 1)  # the three primaries, one per image
    # the columns of the published linear RGB -> XYZ matrix (docs/algorithm.md §4.3)
    columns = torch.tensor(
        [
            [10135552 / 24577794, 2613072 / 12288897, 1425312 / 73733382],
            [8788810 / 24577794, 8788810 / 12288897, 8788810 / 73733382],
            [4435075 / 24577794, 887015 / 12288897, 70074185 / 73733382],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(cst(eye, "linrgb2xyz").view(3, 3), columns, atol=1e-15, rtol=0)
    # sRGB decode: linear below 0.04045 (negative values too), the 2.4 power above
    x = torch.tensor([-0.1, 0.0, 0.03, 0.5, 1.0, 1.2], dtype=torch.float64).view(1, 1, 1, 6).expand(1, 3, 1, 6)
    want = torch.where(x > 0.04045, ((x + 0.055) / 1.055) ** 2.4, x / 12.92)
    torch.testing.assert_close(cst(x, "srgb2linrgb"), want, atol=1e-15, rtol=0)
    with pytest.raises(ValueError, match="unknown colour transform"):
        cst(x, "srgb2hsv")  # NVIDIA's calls sys.exit


@pytest.mark.parametrize("space", ["srgb", "linrgb", "xyz", "ycxcz", "cielab"])
def test_a_transform_into_the_same_space_is_a_new_tensor(space):
    """As every other transform: a new tensor (changing it leaves the caller's image alone), float
    for an integer image."""
    x = torch.rand(1, 3, 4, 5, generator=torch.Generator().manual_seed(22))
    out = flip_loss.color_space_transform(x, f"{space}2{space}")
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()
    out.mul_(2)
    assert torch.equal(x, torch.rand(1, 3, 4, 5, generator=torch.Generator().manual_seed(22)))
    codes = torch.arange(60, dtype=torch.uint8).view(3, 4, 5)
    assert flip_loss.color_space_transform(codes, f"{space}2{space}").dtype == torch.float32


@pytest.mark.cuda
def test_the_functions_on_cuda_give_the_cpu_values():
    test, ref = ldr_pair(seed=21)
    t, r = ycxcz(test), ycxcz(ref)
    cpu = flip_loss.compute_ldrflip(t, r, 30.0, 0.7, 0.5, 0.4, 0.95, 1e-15)
    gpu = flip_loss.compute_ldrflip(t.cuda(), r.cuda(), 30.0, 0.7, 0.5, 0.4, 0.95, 1e-15)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-5, rtol=0)
    th, rh = hdr_pair(seed=21)
    loss = flip_loss.HDRFLIPLoss()
    loss.tmax, loss.tmin = 0.9, 0.6
    half = loss(th.cuda().half(), rh.cuda().half(), 30.0)
    assert half.dtype == torch.float16
    assert half.item() == pytest.approx(loss(th.half().float(), rh.half().float(), 30.0).item(), rel=2e-3)


# --- docs/nvidia.md ------------------------------------------------------------------------------


def test_every_row_of_docs_nvidia_md_names_a_test_here():
    text = (ROOT / "docs" / "nvidia.md").read_text()
    table = text[text.index("## Function by function") :]  # the migration guide above has tables of its own
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) >= 20
    defined = set()
    for name in ("test_nvidia_signatures.py", "test_nvidia_compat.py"):
        defined.update(re.findall(r"^def (test_\w+)\(", (Path(__file__).parent / name).read_text(), re.M))
    for row in rows:
        named = re.findall(r"`(test_\w+)`", row.split("|")[-2])
        assert named, f"docs/nvidia.md: the row {row[:60]!r} names no test"
        missing = [n for n in named if n not in defined]
        assert not missing, f"docs/nvidia.md names tests that do not exist: {missing}"
