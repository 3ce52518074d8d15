"""The CPU kernels' sRGB decoding of 8-bit images from a table (csrc/flip/cpu/eight_bit_srgb.h): a
row whose samples are all code values k / 255 is decoded from the table, any other row through the
power. Both must give the same bits. An image of code values (all 256 of them) is compared with the
same image in which every row holds one sample moved by one ulp, so that every row takes the power:
at columns beyond the filters' reach from the moved samples, the maps and both images' gradients
are identical, through every CPU op that decodes sRGB (the forward, the forward that keeps the
sensitivities and the backward from them, the backward that recomputes, multi-scale FLIP)."""

import pytest
import torch

import flip_loss  # noqa: F401  (registers torch.ops.flip)

ops = torch.ops.flip
PPD = 10.0  # filter radii of a few pixels: columns from FAR on are out of the moved samples' reach
FAR = 64


def code_images(dtype):
    """Two 2 x 3 x 24 x 96 images of code values k / 255 that use every k."""
    g = torch.Generator().manual_seed(3)
    codes = torch.arange(256).repeat(2 * 3 * 24 * 96 // 256 + 1)[: 2 * 3 * 24 * 96]
    a = codes[torch.randperm(codes.numel(), generator=g)].reshape(2, 3, 24, 96)
    b = codes[torch.randperm(codes.numel(), generator=g)].reshape(2, 3, 24, 96)
    return a.to(dtype) / 255, b.to(dtype) / 255


def off_codes(x):
    """x with one sample per row moved up by one ulp: in the first columns for even rows (where the
    kernels look first) and at column 40 for odd rows (found only by the whole row's check)."""
    y = x.clone()
    up = torch.full_like(y[:, 1, :, 0], 2.0)
    y[:, 1, 0::2, 0] = torch.nextafter(y[:, 1, 0::2, 0], up[:, 0::2])
    y[:, 2, 1::2, 40] = torch.nextafter(y[:, 2, 1::2, 40], up[:, 1::2])
    return y


def far(t):
    return t[..., FAR:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_code_value_rows_give_the_bits_of_the_power(dtype):
    a, b = code_images(dtype)
    a_off, b_off = off_codes(a), off_codes(b)
    assert not torch.equal(a, a_off)

    table = ops.ldr_flip(a, b, PPD, "srgb", 1e-15)
    power = ops.ldr_flip(a_off, b_off, PPD, "srgb", 1e-15)
    assert torch.equal(far(table), far(power))
    assert not torch.equal(table, power)  # the moved samples are seen near them

    both = [True, True]
    table_map, table_s = ops._ldr_flip_with_sensitivities(a, b, PPD, "srgb", 1e-15, both)
    power_map, power_s = ops._ldr_flip_with_sensitivities(a_off, b_off, PPD, "srgb", 1e-15, both)
    assert torch.equal(far(table_map), far(table)) and torch.equal(far(power_map), far(power))
    grad = torch.rand(table.shape, generator=torch.Generator().manual_seed(4), dtype=dtype)
    table_g = ops._ldr_flip_backward_from_sensitivities(grad, table_s, a, b, PPD, "srgb", both)
    power_g = ops._ldr_flip_backward_from_sensitivities(grad, power_s, a_off, b_off, PPD, "srgb", both)
    recomputed_g = ops.ldr_flip_backward(grad, a, b, PPD, "srgb", 1e-15, both)
    for t, p, r in zip(table_g, power_g, recomputed_g):
        assert torch.equal(far(t), far(p))
        assert torch.equal(far(r), far(p))

    ppds, weights = [PPD, 2 * PPD], [0.25, 0.75]
    table_ms, table_ms_s = ops._ldr_flip_multiscale(a, b, ppds, weights, "srgb", 1e-15, both)
    power_ms, power_ms_s = ops._ldr_flip_multiscale(a_off, b_off, ppds, weights, "srgb", 1e-15, both)
    assert torch.equal(far(table_ms), far(power_ms))
    table_ms_g = ops._ldr_flip_multiscale_backward(grad, table_ms_s, a, b, ppds, weights, "srgb", both)
    power_ms_g = ops._ldr_flip_multiscale_backward(grad, power_ms_s, a_off, b_off, ppds, weights, "srgb", both)
    for t, p in zip(table_ms_g, power_ms_g):
        assert torch.equal(far(t), far(p))


def test_values_near_code_values_take_the_power():
    """Samples one ulp from a code value, and values outside [0, 1], NaN and infinities in rows
    that start with code values, are decoded as the power decodes them (or reported)."""
    a, b = code_images(torch.float32)
    x = a.clone()
    x[0, 0, 3, 50] = 1.5  # clamped to 1: the decode of code 255, by the power
    x[0, 0, 5, 50] = -0.25  # clamped to 0
    y = x.clone()
    y[0, 0, 3, 50] = 1.0
    y[0, 0, 5, 50] = 0.0
    torch.testing.assert_close(
        ops.ldr_flip(x, b, PPD, "srgb", 1e-15), ops.ldr_flip(y, b, PPD, "srgb", 1e-15), rtol=0, atol=0
    )
    for bad in (float("nan"), float("inf")):
        z = a.clone()
        z[1, 2, 7, 70] = bad
        with pytest.raises(RuntimeError, match="NaN or infinite"):
            ops.ldr_flip(z, b, PPD, "srgb", 1e-15)
