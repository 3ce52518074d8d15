"""Forward-mode automatic differentiation through ``torch.ops.flip.*``: refused, never a silent zero.

The ops have no JVP. Without a refusal a dual input (``torch.autograd.forward_ad``, or the
``torch.func.jvp``/``jacfwd`` transforms) came out with no tangent, which ``jvp`` reports as a
derivative of exactly 0. Every op (public, backward and internal), with a tangent on any of its
tensor arguments, in every mode (eager, ``torch.no_grad``, ``jvp``, ``jacfwd``, ``vmap`` of ``jvp``,
TorchScript, ``torch.compile``) raises NotImplementedError naming forward mode and the op.
"""

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from op_names import PRODUCT_OPS
from op_registry import OPS

MESSAGE = r"forward-mode automatic differentiation .* is not supported: flip::{}"

# Every op's calls: the opcheck calls of the registry, which cover each op and each backward op
# (the last of an op's calls, one with floating-point images).
CALLS = {check.op: check.args for entry in OPS for check in entry.opchecks}


def test_every_op_has_a_call_here():
    assert set(CALLS) == set(PRODUCT_OPS)


def _differentiable(args):
    """The positions of the floating-point tensor arguments (those a tangent can sit on)."""
    return [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]


def _cases():
    for name, make in sorted(CALLS.items()):
        for position in _differentiable(make()):
            yield pytest.param(name, position, id=f"{name}-arg{position}")


def _call(name, args):
    return getattr(torch.ops.flip, name)(*args)


@pytest.mark.parametrize("grad_mode", ["enabled", "no_grad"])
@pytest.mark.parametrize("name, position", list(_cases()))
def test_a_dual_argument_is_refused_by_every_op(name, position, grad_mode):
    args = list(CALLS[name]())
    with torch.set_grad_enabled(grad_mode == "enabled"), fwAD.dual_level():
        args[position] = fwAD.make_dual(args[position], torch.randn_like(args[position]))
        with pytest.raises(NotImplementedError, match=MESSAGE.format(name)):
            _call(name, args)


@pytest.mark.parametrize("transform", ["jvp", "jacfwd", "vmap_jvp"])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_functorch_forward_transforms_are_refused_by_every_op(name, transform):
    args = list(CALLS[name]())
    position = _differentiable(args)[-1]  # the last: a backward op's image, not its incoming gradient

    def f(x):
        out = _call(name, args[:position] + [x] + args[position + 1 :])
        return (out[0] if isinstance(out, tuple) else out).sum()

    x = args[position]
    with pytest.raises(NotImplementedError, match=MESSAGE.format(name)):
        if transform == "jvp":
            torch.func.jvp(f, (x,), (torch.randn_like(x),))
        elif transform == "jacfwd":
            torch.func.jacfwd(f)(x)
        else:
            torch.func.vmap(lambda p, v: torch.func.jvp(f, (p,), (v,))[1])(x[None], torch.randn_like(x)[None])


def test_forward_mode_is_refused_under_torch_compile():
    (test, ref, ppd, space, eps), (htest, href, *hdr_rest) = CALLS["ldr_flip"](), CALLS["hdr_flip"]()
    torch._dynamo.reset()
    ldr = torch.compile(
        lambda t, v: torch.func.jvp(lambda x: torch.ops.flip.ldr_flip(x, ref, ppd, space, eps).sum(), (t,), (v,)),
        backend="eager",
    )
    with pytest.raises(NotImplementedError, match=MESSAGE.format("ldr_flip")):
        ldr(test, torch.randn_like(test))
    hdr = torch.compile(
        lambda t, v: torch.func.jvp(lambda x: torch.ops.flip.hdr_flip(htest, x, *hdr_rest)[0].sum(), (t,), (v,)),
        backend="eager",
    )
    with pytest.raises(NotImplementedError, match=MESSAGE.format("hdr_flip")):
        hdr(href, torch.randn_like(href))


def test_forward_mode_is_refused_in_torchscript():
    scripted = torch.jit.script(_scripted_ldr_flip)
    test, ref, *_ = CALLS["ldr_flip"]()
    with fwAD.dual_level():
        # The interpreter carries the NotImplementedError's message in a RuntimeError.
        with pytest.raises(RuntimeError, match=MESSAGE.format("ldr_flip")):
            scripted(fwAD.make_dual(test, torch.randn_like(test)), ref)


def _scripted_ldr_flip(test: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return torch.ops.flip.ldr_flip(test, ref, 30.0, "srgb", 1e-15)


def test_reverse_mode_and_plain_calls_are_unchanged_under_a_dual_level():
    """Inside a dual level, calls whose arguments carry no tangent run as always (the refusal looks
    at the arguments, not at the level), reverse mode included."""
    test, ref, ppd, space, eps = CALLS["ldr_flip"]()
    want = torch.ops.flip.ldr_flip(test, ref, ppd, space, eps)
    x = test.clone().requires_grad_()
    with fwAD.dual_level():
        got = torch.ops.flip.ldr_flip(x, ref, ppd, space, eps)
        got.sum().backward()
    assert torch.equal(got.detach(), want) and x.grad is not None and x.grad.abs().sum() > 0
