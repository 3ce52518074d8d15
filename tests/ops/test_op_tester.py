"""Every op of the registry (tests/helpers/op_registry.py) through the same checks: the forward and
its gradients against the oracle over device x dtype, float64 gradcheck, opcheck of the op and its
backward, autocast, and the meta device and FakeTensor giving the real outputs' shapes and dtypes.
What is particular to one op (the kink rules, its bad arguments, ...) is tested beside it
(test_ops.py, test_op_checks.py, test_sensitivities.py, ...)."""

import pytest
import torch
from torch.autograd import gradcheck
from torch._subclasses.fake_tensor import FakeTensorMode

from flip_loss import gpu_agreement

from op_registry import OPS

ops = torch.ops.flip

# The float32 kernels against the float64 oracle: float32's rounding through the pipeline, relative
# to max(1, the largest value of the map) (gpu_agreement.relative_difference).
FLOAT32_MAP_TOLERANCE = 1e-5


def first(out):
    """The error map: the op's output, or its first output."""
    return out[0] if isinstance(out, (tuple, list)) else out


def grads(fn, inputs, rest, weight_seed=1):
    """The map of fn(*inputs, *rest) and the gradients of (map * w).sum() in the inputs, for a
    seeded random weight w."""
    xs = [x.detach().clone().requires_grad_() for x in inputs]
    out = first(fn(*xs, *rest))
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(weight_seed), dtype=out.dtype)
    (out * w.to(out.device)).sum().backward()
    return out.detach(), [x.grad for x in xs]


def to(value, device=None, dtype=None):
    """A floating tensor (or a list of them) moved and cast; anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(device=device, dtype=dtype)
    return value


def cases(attribute):
    return [
        pytest.param(entry, call, id=f"{entry.name}-{call.id}") for entry in OPS for call in getattr(entry, attribute)
    ]


DEVICE_DTYPES = [
    pytest.param("cpu", torch.float64, id="cpu-float64"),
    pytest.param("cpu", torch.float32, id="cpu-float32"),
    pytest.param("cuda", torch.float64, id="cuda-float64", marks=pytest.mark.cuda),
    pytest.param("cuda", torch.float32, id="cuda-float32", marks=pytest.mark.cuda),
]


def needs_cuda_kernels(entry, device):
    if device != "cuda":
        return
    if not entry.cuda:
        pytest.skip(f"{entry.name} has no CUDA kernel (CPU only)")
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"flip::{entry.name}", "CUDA"):
        pytest.skip("built without CUDA kernels")


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES)
@pytest.mark.parametrize("entry,call", cases("oracle_calls"))
def test_forward_and_gradients_match_the_oracle(ops, entry, call, device, dtype):
    needs_cuda_kernels(entry, device)
    op = getattr(ops, entry.name)
    args = call.args()
    images, rest = args[: call.images], args[call.images :]
    if device == "cpu" and dtype == torch.float64:
        # The kernels against autograd through the pure-PyTorch oracle, in float64.
        o1, g1 = grads(op, images, rest)
        o2, g2 = grads(entry.oracle, images, rest)
        torch.testing.assert_close(o1, o2, rtol=0, atol=entry.map_atol)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b, rtol=entry.grad_rtol, atol=entry.grad_atol)
    elif device == "cpu":
        got = first(op(*(x.to(dtype) for x in images), *(to(v, dtype=dtype) for v in rest)))
        assert got.dtype == dtype
        want = first(entry.oracle(*images, *rest))
        assert gpu_agreement.relative_difference(got, want) <= FLOAT32_MAP_TOLERANCE
    else:
        # CUDA against the CPU kernels, within the promised agreement (flip_loss/gpu_agreement.py).
        cpu_images = [x.to(dtype) for x in images]
        cpu_rest = [to(v, dtype=dtype) for v in rest]
        o_cpu, g_cpu = grads(op, cpu_images, cpu_rest)
        o_gpu, g_gpu = grads(op, [x.cuda() for x in cpu_images], [to(v, device="cuda") for v in cpu_rest])
        if entry.name == "hdr_flip":  # the winning exposure may differ where two nearly tie
            same = (
                first(op(*cpu_images, *cpu_rest)[2:])
                == first(op(*(x.cuda() for x in cpu_images), *(to(v, device="cuda") for v in cpu_rest))[2:]).cpu()
            )
            assert (~same).double().mean().item() <= gpu_agreement.HDR_INDEX_MISMATCH
            o_cpu, o_gpu = o_cpu * same, o_gpu * same.cuda()
        else:
            for a, b in zip(g_gpu, g_cpu):
                assert gpu_agreement.within(a, b, dtype, gradient=True)
        assert gpu_agreement.within(o_gpu, o_cpu, dtype)


@pytest.mark.parametrize("entry,call", cases("gradcheck_calls"))
def test_gradcheck(ops, entry, call):
    op = getattr(ops, entry.name)
    args = call.args()
    images = tuple(x.detach().clone().requires_grad_() for x in args[: call.images])
    rest = args[call.images :]
    assert gradcheck(lambda *xs: first(op(*xs, *rest)), images, eps=entry.gradcheck_eps, atol=1e-6)


OPCHECKS = [pytest.param(entry, check, id=f"{entry.name}-{check.id}") for entry in OPS for check in entry.opchecks]


@pytest.mark.parametrize("entry,check", OPCHECKS)
def test_opcheck(ops, entry, check):
    args = check.args()
    args = tuple(a.clone().requires_grad_() if i < check.requires_grad else a for i, a in enumerate(args))
    kwargs = {"test_utils": check.test_utils} if check.test_utils else {}
    torch.library.opcheck(getattr(ops, check.op).default, args, **kwargs)


AUTOCASTS = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bfloat16"),
    pytest.param("cpu", torch.float16, id="cpu-float16"),
    pytest.param("cuda", torch.float16, id="cuda-float16", marks=pytest.mark.cuda),
]


@pytest.mark.parametrize("device,dtype", AUTOCASTS)
@pytest.mark.parametrize("entry", [pytest.param(e, id=e.name) for e in OPS if e.autocast])
def test_autocast_computes_in_float32(ops, entry, device, dtype):
    # Under torch.autocast the op takes a low-precision image from a layer before it and the
    # other in float32, without casts by the caller (the registered Autocast kernels), computes
    # in float32 (the float32 call's map, bit for bit) and passes the gradient back to the layer.
    needs_cuda_kernels(entry, device)
    op = getattr(ops, entry.name)
    call = entry.autocast_call or entry.gradcheck_calls[0]
    args = [to(v, device=device, dtype=torch.float32) for v in call.args()]
    args = [v.to(device) if isinstance(v, torch.Tensor) else v for v in args]
    x = args[0].clone().requires_grad_()
    channels = x.shape[-3]
    conv = torch.nn.Conv2d(channels, channels, 1).eval().to(device)
    with torch.no_grad():
        conv.weight.copy_(torch.eye(channels).view(channels, channels, 1, 1))
        conv.bias.zero_()
    with torch.autocast(device, dtype=dtype):
        out = conv(x.unsqueeze(0) if x.dim() == 3 else x)  # low precision under autocast
        out = out.squeeze(0) if x.dim() == 3 else out
        assert out.dtype == dtype
        error = first(op(out, *args[1:]))  # mixed dtypes: no cast needed
        loss = error.float().mean()
    assert error.dtype == torch.float32
    loss.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    expected = first(op(out.detach().float(), *args[1:]))
    torch.testing.assert_close(error.detach(), expected, rtol=0, atol=0)


def tensors(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("entry", [pytest.param(e, id=e.name) for e in OPS])
def test_meta_and_fake_tensors_give_the_shapes_and_dtypes(ops, entry):
    op = getattr(ops, entry.name)
    args = [to(v, dtype=torch.float32) for v in entry.gradcheck_calls[0].args()]
    real = tensors(op(*args))
    meta = tensors(op(*(v.to("meta") if isinstance(v, torch.Tensor) else v for v in args)))
    with FakeTensorMode() as mode:
        fake = tensors(op(*(mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in args)))
    for outputs, device in ((meta, "meta"), (fake, "cpu")):
        assert len(outputs) == len(real)
        for got, want in zip(outputs, real):
            assert got.device.type == device
            assert (got.shape, got.dtype) == (want.shape, want.dtype)


def test_every_registered_op_runs_through_the_tester(ops):
    # Each op of the library is an entry of the registry or one of the ops an entry's opchecks
    # call (its backward ops): a new op without an entry fails here.
    registered = {name.split("::", 1)[1] for name in torch._C._dispatch_get_all_op_names() if name.startswith("flip::")}
    covered = {entry.name for entry in OPS} | {check.op for entry in OPS for check in entry.opchecks}
    assert registered == covered
