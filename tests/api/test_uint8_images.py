"""uint8 images: 8-bit codes k, which LDR-FLIP reads as the values k / 255 on every path (the op,
the Python API, FLIPLoss eager and scripted, torch.compile, the oracle), the kernels reading the
codes themselves (a quarter of the bytes, no conversion); every other op refuses them."""

import pytest
import torch

import flip_loss
from flip_loss import oracle
from flip_loss.image_checks import code_values
from flip_loss.modules import weighted_reduce

SHAPES = [(2, 3, 37, 53), (3, 64, 41), (1, 3, 1, 1), (1, 3, 300, 517)]


def codes(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)


def test_code_values_are_k_over_255_correctly_rounded():
    k = torch.arange(256, dtype=torch.uint8)
    exact = k.double() / 255
    assert torch.equal(code_values(k), exact.float())
    assert torch.equal(code_values(k, torch.float64), exact)


@pytest.mark.parametrize("space", ["srgb", "linear"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_kernels_give_codes_the_map_of_their_values(shape, space):
    test, ref = codes(shape, 1), codes(shape, 2)
    values = code_values(test), code_values(ref)
    out = torch.ops.flip.ldr_flip(test, ref, 67.0, space, 1e-15)
    assert out.dtype == torch.float32 and out.shape == values[0][..., :1, :, :].shape
    assert torch.equal(out, torch.ops.flip.ldr_flip(*values, 67.0, space, 1e-15))
    assert torch.equal(flip_loss.ldr_flip(test, ref, input_space=space), flip_loss.ldr_flip(*values, input_space=space))
    with torch.inference_mode():
        assert torch.equal(torch.ops.flip.ldr_flip(test, ref, 67.0, space, 1e-15), out)


@pytest.mark.parametrize("space", ["srgb", "linear"])
def test_the_oracle_reads_codes_as_the_kernels_do(space):
    test, ref = codes((2, 3, 30, 40), 3), codes((2, 3, 30, 40), 4)
    out = oracle.ldr_flip(test, ref, 40.0, space)
    assert out.dtype == torch.float32
    assert torch.equal(out, oracle.ldr_flip(code_values(test), code_values(ref), 40.0, space))
    torch.testing.assert_close(out, torch.ops.flip.ldr_flip(test, ref, 40.0, space, 1e-15), rtol=0, atol=1e-5)
    # Beside a float image, in either order: the codes' values in its dtype, as the API takes them.
    for dtype in (torch.float16, torch.float64):
        other = torch.rand(2, 3, 30, 40, dtype=dtype)
        for a, b in ((test, other), (other, test)):
            out = oracle.ldr_flip(a, b, 40.0, space)
            values = [code_values(x, dtype) if x.dtype == torch.uint8 else x for x in (a, b)]
            assert out.dtype == dtype and torch.equal(out, oracle.ldr_flip(*values, 40.0, space))
    for bad in (
        lambda: oracle.ldr_flip(test.short(), ref.short()),
        lambda: oracle.hdr_flip(test, ref, 40.0, "aces", torch.zeros(2, 2), torch.tensor([2, 2])),
    ):
        with pytest.raises(TypeError, match="must be floating point"):
            bad()


def test_codes_beside_a_float_image_are_their_values_in_its_dtype():
    ref = codes((1, 3, 20, 30), 5)
    for dtype in (torch.float32, torch.float64):
        test = torch.rand(1, 3, 20, 30, dtype=dtype, requires_grad=True)
        out = flip_loss.ldr_flip(test, ref)
        out.mean().backward()
        twin = test.detach().clone().requires_grad_()
        expected = flip_loss.ldr_flip(twin, code_values(ref, dtype))
        expected.mean().backward()
        assert out.dtype == dtype and torch.equal(out, expected) and torch.equal(test.grad, twin.grad)


def test_data_range_maps_the_float_image_and_leaves_codes_alone():
    test, ref = codes((1, 3, 16, 24), 6), codes((1, 3, 16, 24), 7)
    both_codes = flip_loss.ldr_flip(test, ref)
    assert torch.equal(flip_loss.ldr_flip(test, ref, data_range=255), both_codes)
    assert torch.equal(flip_loss.ldr_flip(test.float(), ref, data_range=255), both_codes)
    assert torch.equal(flip_loss.FLIPLoss(data_range=255, reduction="none")(test.float(), ref), both_codes)


def test_alpha_and_scales_take_codes_as_their_values():
    rgba_t, rgba_r = codes((1, 4, 18, 22), 8), codes((1, 4, 18, 22), 9)
    for kwargs in ({"alpha": "straight"}, {"alpha": "premultiplied", "background": "white"}):
        expected = flip_loss.ldr_flip(code_values(rgba_t), code_values(rgba_r), **kwargs)
        assert torch.equal(flip_loss.ldr_flip(rgba_t, rgba_r, **kwargs), expected)
    test, ref = rgba_t[:, :3], rgba_r[:, :3]
    scales = {"pixels_per_degree": [20.0, 40.0], "ppd_weights": [1.0, 3.0]}
    expected = flip_loss.ldr_flip(code_values(test), code_values(ref), **scales)
    assert torch.equal(flip_loss.ldr_flip(test, ref, **scales), expected)


def test_flip_loss_eager_scripted_compiled_and_the_metric_agree_on_codes():
    test, ref = codes((2, 3, 20, 26), 10), codes((2, 3, 20, 26), 11)
    expected = flip_loss.FLIPLoss()(code_values(test), code_values(ref))
    assert torch.equal(flip_loss.FLIPLoss()(test, ref), expected)
    assert torch.equal(torch.jit.script(flip_loss.FLIPLoss())(test, ref), expected)
    compiled = torch.compile(lambda a, b: flip_loss.ldr_flip(a, b), backend="eager")
    assert torch.equal(compiled(test, ref), flip_loss.ldr_flip(test, ref))
    per_image = flip_loss.FLIPMetric().update(code_values(test), code_values(ref))
    assert torch.equal(flip_loss.FLIPMetric().update(test, ref), per_image)


def test_fake_and_meta_maps_of_codes_are_float32():
    test = codes((2, 3, 8, 9), 12).to("meta")
    out = torch.ops.flip.ldr_flip(test, test, 67.0, "srgb", 1e-15)
    assert out.dtype == torch.float32 and out.shape == (2, 1, 8, 9)


def test_every_other_entry_point_refuses_codes():
    test, ref = codes((1, 3, 8, 9), 13), codes((1, 3, 8, 9), 14)
    hdr_message = "HDR-FLIP takes linear floating-point values"
    with pytest.raises(TypeError, match=hdr_message):
        flip_loss.hdr_flip(test, ref)
    with pytest.raises(TypeError, match=hdr_message):
        flip_loss.FLIPLoss(hdr=True)(test, ref)
    with pytest.raises((TypeError, torch.jit.Error), match="got torch.uint8: .*" + hdr_message):
        torch.jit.script(flip_loss.FLIPLoss(hdr=True))(test, ref)
    # NVIDIA's API takes float images, as NVIDIA's loss does, in each of its entry points.
    for call in (
        lambda: flip_loss.nvidia.LDRFLIPLoss()(test, ref),
        lambda: flip_loss.nvidia.HDRFLIPLoss()(test, ref),
        lambda: flip_loss.nvidia.compute_ldrflip(test, ref, 67.0),
    ):
        with pytest.raises(TypeError, match="floating-point dtype"):
            call()
    with pytest.raises(TypeError, match="error map must be floating point"):
        weighted_reduce(test[:, :1], None, "sum")
    with pytest.raises(TypeError, match="taken by ldr_flip alone"):
        torch.ops.flip.csf_filter(test, 67.0)
    with pytest.raises(TypeError, match="or be uint8"):
        flip_loss.ldr_flip(test.to(torch.int16), ref.to(torch.int16))
