"""HDR-FLIP: conformance with flip-evaluator 1.7, automatic exposures, gradients, batching,
degenerate references, validation."""

import functools

import numpy as np
import pytest
import torch

import flip_loss
from flip_loss import hdr
from flip_loss import oracle
from flip_loss.constants import TONE_MAPPERS

from conformance import assert_agrees
from hdr_cases import cases, evaluator, nchw, our_args

CASES = cases()


@functools.lru_cache(maxsize=None)
def evaluated(case_id):
    c = next(c for c in CASES if c[0] == case_id)
    return evaluator(c[1], c[2], c[3], c[4])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("impl", ["extension", "oracle"])
def test_conformance_with_flip_evaluator(case, impl):
    case_id, test_hwc, ref_hwc, ppd, params = case
    theirs, used = evaluated(case_id)
    t, r = nchw(test_hwc), nchw(ref_hwc)
    kwargs = our_args(params)
    exposures, counts, start, stop = hdr.exposures_for(
        r, kwargs["tone_mapper"], kwargs["start_exposure"], kwargs["stop_exposure"], kwargs["num_exposures"]
    )
    assert abs(start.item() - used["startExposure"]) <= 1e-5
    assert abs(stop.item() - used["stopExposure"]) <= 1e-5
    assert counts.item() == used["numExposures"]
    if impl == "extension":
        ours = flip_loss.hdr_flip(t, r, ppd, eps=0.0, **kwargs)
    else:
        ours = oracle.hdr_flip(t.double(), r.double(), ppd, kwargs["tone_mapper"], exposures, counts, 0.0)[0]
    assert_agrees(ours[0, 0].double().numpy(), theirs)


def hdr_pair(shape=(2, 3, 12, 14), seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    ref = torch.exp2(6 * torch.rand(shape, generator=g, dtype=dtype) - 3)
    test = ref * (1 + 0.2 * torch.randn(shape, generator=g, dtype=dtype)).clamp(min=0.1)
    return test, ref


def test_exposure_anchors():
    assert hdr.exposure_anchor("aces") == pytest.approx(2.11887312, abs=1e-6)
    assert hdr.exposure_anchor("HABLE") == pytest.approx(3.12774992, abs=1e-6)
    assert hdr.exposure_anchor("reinhard") == pytest.approx(0.85 / 0.15, abs=1e-5)


def test_extension_matches_the_oracle_values_and_gradients():
    test, ref = hdr_pair()
    exposures, counts, _, _ = hdr.exposures_for(ref, "hable")
    for tm in TONE_MAPPERS:

        def ours(x, y, tm=tm):
            return torch.ops.flip.hdr_flip(x, y, exposures, counts, 20.0, tm, 1e-15)[0]

        def theirs(x, y, tm=tm):
            return oracle.hdr_flip(x, y, 20.0, tm, exposures, counts, 1e-15)[0]

        xs = [v.clone().requires_grad_() for v in (test, ref)]
        ys = [v.clone().requires_grad_() for v in (test, ref)]
        w = torch.rand(test.shape[0], 1, *test.shape[2:], dtype=test.dtype)
        o1, o2 = ours(*xs), theirs(*ys)
        torch.testing.assert_close(o1, o2, rtol=0, atol=1e-12)
        (o1 * w).sum().backward()
        (o2 * w).sum().backward()
        for a, b in zip(xs, ys):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-8, atol=1e-12)


def test_batch_with_different_ranges_equals_per_image_calls():
    test, ref = hdr_pair((3, 3, 16, 18), seed=3)
    ref[1] *= 40  # a much brighter image: a different automatic range and count
    ref[2] = ref[2] ** 2
    batch, emap = flip_loss.hdr_flip(test, ref, 30.0, return_exposure_map=True)
    _, counts, _, _ = hdr.exposures_for(ref)
    assert len(set(counts.tolist())) > 1
    for i in range(3):
        single, semap = flip_loss.hdr_flip(test[i : i + 1], ref[i : i + 1], 30.0, return_exposure_map=True)
        torch.testing.assert_close(batch[i : i + 1], single, rtol=0, atol=0)
        torch.testing.assert_close(emap[i : i + 1], semap, rtol=0, atol=0)


def test_exposure_map_and_ties():
    test, ref = hdr_pair((1, 3, 10, 10), seed=4)
    ex = torch.tensor([[0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)
    err, emap, index = torch.ops.flip.hdr_flip(test, ref, ex, torch.tensor([4]), 30.0, "aces", 1e-15)
    assert set(index.unique().tolist()) <= {0, 1, 2, 3}
    torch.testing.assert_close(emap, index.double() / 3)
    # Identical exposures tie everywhere: strict > keeps the first.
    same = torch.zeros(1, 3, dtype=torch.float64)
    _, emap2, index2 = torch.ops.flip.hdr_flip(test, ref, same, torch.tensor([3]), 30.0, "aces", 1e-15)
    assert (index2 == 0).all() and (emap2 == 0).all()
    # Identical images with eps = 0: no exposure ever wins, the map and exposure map are 0.
    err3, emap3, index3 = torch.ops.flip.hdr_flip(ref, ref, ex, torch.tensor([4]), 30.0, "aces", 0.0)
    assert (err3 == 0).all() and (emap3 == 0).all() and (index3 == -1).all()


def test_zero_median_reference_matches_evaluator_rule():
    test, ref = hdr_pair((1, 3, 10, 10), seed=5)
    ref[..., :6] = 0  # 60 % black
    start, stop = hdr.exposure_range(ref)
    eps = np.finfo(np.float32).eps
    assert torch.isfinite(start).all() and torch.isfinite(stop).all()
    assert stop.item() == pytest.approx(np.log2(hdr.exposure_anchor() / eps), abs=1e-4)
    out = flip_loss.hdr_flip(test, ref, 30.0)
    assert torch.isfinite(out).all()


def test_all_black_reference_is_defined():
    test, _ = hdr_pair((1, 3, 8, 8), seed=6)
    black = torch.zeros_like(test)
    start, stop = hdr.exposure_range(black)
    assert start.item() == stop.item() and np.isfinite(start.item())
    exposures, counts, _, _ = hdr.exposures_for(black)
    assert counts.item() == 2
    x = test.clone().requires_grad_()
    out = flip_loss.hdr_flip(x, black, 30.0)
    out.mean().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


def test_huge_and_negative_values_stay_finite():
    test, ref = hdr_pair((1, 3, 8, 8), seed=8)
    test[0, :, 0, 0] = 1e30
    test[0, :, 1, 1] = -5.0
    for dtype in (torch.float32, torch.float64):
        x = test.to(dtype).requires_grad_()
        out = flip_loss.hdr_flip(x, ref.to(dtype), 30.0)
        out.sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
        assert (x.grad[0, :, 1, 1] == 0).all()  # negative inputs count as 0, with zero gradient


def test_unbatched_and_float16():
    test, ref = hdr_pair((1, 3, 8, 9), seed=9, dtype=torch.float32)
    out = flip_loss.hdr_flip(test[0], ref[0], 30.0)
    assert out.shape == (1, 8, 9)
    half = flip_loss.hdr_flip(test.half(), ref.half(), 30.0)
    assert half.dtype == torch.float16
    torch.testing.assert_close(
        half.float(), flip_loss.hdr_flip(test.half().float(), ref.half().float(), 30.0), rtol=1e-3, atol=1e-3
    )


def test_torch_compile_with_given_exposures():
    torch._dynamo.reset()
    test, ref = hdr_pair((1, 3, 12, 12), seed=10, dtype=torch.float32)

    def loss(x, y):
        return flip_loss.hdr_flip(x, y, 30.0, start_exposure=-2.0, stop_exposure=2.0, num_exposures=4).mean()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    x1, x2 = test.clone().requires_grad_(), test.clone().requires_grad_()
    eager = loss(x1, ref)
    eager.backward()
    out = compiled(x2, ref)
    out.backward()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    torch.testing.assert_close(x2.grad, x1.grad, rtol=0, atol=0)


@pytest.mark.parametrize(
    "case,exc",
    [
        ("num", ValueError),
        ("order", ValueError),
        ("shape", ValueError),
        ("tm", ValueError),
        ("nan", RuntimeError),
        ("per-image", ValueError),
    ],
)
def test_bad_input_raises(case, exc):
    test, ref = hdr_pair((2, 3, 8, 8), dtype=torch.float32)
    kwargs = {}
    if case == "num":
        kwargs["num_exposures"] = 1
    elif case == "order":
        kwargs.update(start_exposure=2.0, stop_exposure=-1.0)
    elif case == "shape":
        ref = ref[..., :7]
    elif case == "tm":
        kwargs["tone_mapper"] = "filmic"
    elif case == "nan":
        test[0, 0, 0, 0] = float("nan")
        kwargs.update(start_exposure=0.0, stop_exposure=1.0)
    elif case == "per-image":
        kwargs["start_exposure"] = torch.zeros(3)
    with pytest.raises(exc, match="flip"):
        flip_loss.hdr_flip(test, ref, 30.0, **kwargs)


def test_op_rejects_bad_counts():
    test, ref = hdr_pair((1, 3, 6, 6), dtype=torch.float32)
    with pytest.raises(ValueError, match="counts"):
        torch.ops.flip.hdr_flip(test, ref, torch.zeros(1, 2), torch.tensor([3]), 30.0, "aces", 1e-15)
    with pytest.raises(ValueError, match="tone_mapper"):
        torch.ops.flip.hdr_flip(test, ref, torch.zeros(1, 2), torch.tensor([2]), 30.0, "agx", 1e-15)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"start_exposure": -2.0, "stop_exposure": 1.0, "num_exposures": 3},
        {"stop_exposure": 2.0, "tone_mapper": "reinhard"},
    ],
)
def test_flip_loss_hdr_eager_and_torchscript(kwargs, tmp_path):
    test, ref = hdr_pair((2, 3, 10, 12), seed=11, dtype=torch.float32)
    loss_fn = flip_loss.FLIPLoss(hdr=True, pixels_per_degree=30.0, **kwargs)
    expected = flip_loss.hdr_flip(test, ref, 30.0, **kwargs).mean()
    x1 = test.clone().requires_grad_()
    eager = loss_fn(x1, ref)
    eager.backward()
    torch.testing.assert_close(eager, expected, rtol=0, atol=0)
    path = tmp_path / "hdr_loss.pt"
    torch.jit.script(loss_fn).save(str(path))
    loaded = torch.jit.load(str(path))
    x2 = test.clone().requires_grad_()
    out = loaded(x2, ref)
    out.backward()
    torch.testing.assert_close(out, eager, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(x2.grad, x1.grad, rtol=1e-4, atol=1e-6)


def test_flip_loss_rejects_hdr_options_without_hdr():
    with pytest.raises(ValueError, match="hdr=True"):
        flip_loss.FLIPLoss(num_exposures=4)
    with pytest.raises(ValueError, match="num_exposures"):
        flip_loss.FLIPLoss(hdr=True, num_exposures=1)
    with pytest.raises(ValueError, match="tone_mapper"):
        flip_loss.FLIPLoss(hdr=True, tone_mapper="agx")


def test_automatic_exposures_are_constants_of_the_metric(monkeypatch):
    """The exposures are settings, not a function of the reference to differentiate: the op gives
    them no gradient, and the pure-PyTorch fallback (a device without kernels, or no extension) must
    give the reference the same gradient."""
    test, ref = hdr_pair((1, 3, 8, 8), seed=3, dtype=torch.float64)
    exposures, _, start, stop = hdr.exposures_for(ref.clone().requires_grad_())
    assert not exposures.requires_grad

    def grads():
        t, r = test.clone().requires_grad_(), ref.clone().requires_grad_()
        flip_loss.hdr_flip(t, r, 20.0).sum().backward()
        return t.grad, r.grad

    op_t, op_r = grads()
    monkeypatch.setattr(flip_loss._ops, "use_extension", lambda *a, **k: False)
    fb_t, fb_r = grads()
    assert op_r.abs().max() > 0
    torch.testing.assert_close(fb_t, op_t, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(fb_r, op_r, rtol=1e-9, atol=1e-10)
