"""What a call may read of its tensors on the host: whether it is traced (torch.compile), whether
its tensors hold values at all (not meta tensors or FakeTensors, seen through functorch's wrappers),
and a small table of them read back for the checks that need values (``ldr_flip``, ``hdr_flip``,
``FLIPLoss``, ``FLIPMetric`` and NVIDIA's API share them)."""

from typing import List, Optional

import torch
from torch.autograd import forward_ad


def is_compiling() -> bool:
    """Whether torch.compile is tracing the call (its values are symbolic)."""
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())


def is_device_call(test) -> bool:
    """Whether an eager call with ``test`` counts as its owner's look at inputs on a device (not one
    with inputs without values, meta tensors or FakeTensors, which cannot be looked at)."""
    return (
        isinstance(test, torch.Tensor)
        and test.device.type != "cpu"
        and not is_compiling()
        and (is_plain_tensor(test) or _unwrapped_has_values(test))
    )


def _unwrapped(t: torch.Tensor) -> torch.Tensor:
    """``t`` without its functorch wrappers (vmap, grad, ...): the tensor that holds the values."""
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(t):
        t = functorch.get_unwrapped(t)
    return t


@torch.jit.unused
def requires_grad_inside(t: torch.Tensor) -> bool:
    """Whether ``t`` or a tensor inside its functorch wrappers requires grad: a vmapped tensor never
    says so itself, while an op's Autograd kernel sees each example's, which may. Under
    torch.compile, which cannot trace the unwrapping, the tensor's own flag."""
    if is_compiling():
        return t.requires_grad
    functorch = torch._C._functorch
    while not t.requires_grad and functorch.is_functorch_wrapped_tensor(t):
        t = functorch.get_unwrapped(t)
    return t.requires_grad


def carries_tangent(*args) -> bool:
    """Whether a tensor among ``args`` carries a forward-mode tangent (a dual tensor of
    ``torch.autograd.forward_ad``, or of ``torch.func.jvp``/``jacfwd``, which use the same levels)."""
    if getattr(forward_ad, "_current_level", 0) < 0:  # no dual level is open: no tangent anywhere
        return False
    return any(isinstance(a, torch.Tensor) and forward_ad.unpack_dual(a).tangent is not None for a in args)


def functorch_levels() -> List[str]:
    """The torch.func transforms the call is under, innermost last ("grad", "vmap", "jvp", ...)."""
    if not torch._C._are_functorch_transforms_active():
        return []
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    return [str(interpreter.key()).rsplit(".", 1)[-1].lower() for interpreter in retrieve_all_functorch_interpreters()]


def differentiated_around(t) -> bool:
    """Whether autograd or forward mode differentiates ``t`` outside its torch.func wrappers: the
    tensor below them requires grad or carries a tangent (a function of a parameter that eager
    autograd differentiates, taken through ``torch.func.grad``)."""
    if not isinstance(t, torch.Tensor):
        return False
    base = _unwrapped(t)
    return base.requires_grad or carries_tangent(base)


def beyond_first_order_reverse(*tensors) -> bool:
    """Whether the call is differentiated in a way the compiled ops' autograd nodes cannot follow:
    forward mode (a tangent on one of ``tensors``: forward_ad, jvp, jacfwd, hessian), two or more
    torch.func gradient transforms (grad of grad), or one with autograd or forward mode around it.
    The Python API computes such calls with the portable path, which autograd differentiates every
    way. Not under torch.compile, whose trace of the portable path under these transforms fails
    inside PyTorch: the ops refuse them there."""
    if is_compiling():
        return False
    if carries_tangent(*tensors):
        return True
    levels = functorch_levels()  # jvp around grad (hessian): the tangent sits below grad's wrapper
    if "jvp" in levels or levels.count("grad") > 1:
        return True
    return "grad" in levels and any(differentiated_around(t) for t in tensors)


def is_plain_tensor(t: torch.Tensor) -> bool:
    """A tensor that holds its values itself: not a subclass (FakeTensor), not functorch-wrapped,
    not on the meta device."""
    return (
        type(t) is torch.Tensor and t.device.type != "meta" and not torch._C._functorch.is_functorch_wrapped_tensor(t)
    )


def _unwrapped_has_values(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    t = _unwrapped(t)
    return t.device.type != "meta" and not is_fake(t)


def host_table(table: torch.Tensor) -> Optional[torch.Tensor]:
    """The values of a small table (rows of flags or per-image values, computed for a check) as a
    float64 CPU tensor of ``table.shape[0]`` rows, for the checks that read values back; None when
    there are no values to read (meta tensors, FakeTensors: the check is skipped, and nothing in the
    result depends on it). Under functorch transforms (vmap, grad, ...) the table is unwrapped, and
    the values of every vmapped example are read: row i then holds row i of every example (each
    vmap level's batch dimension moved last and flattened into the row), so a check covers all of
    them, whatever was called before. Not for traced code (torch.compile, TorchScript)."""
    t = table
    functorch = torch._C._functorch
    while functorch.is_functorch_wrapped_tensor(t):
        if functorch.is_batchedtensor(t):
            bdim = functorch.maybe_get_bdim(t)
            t = functorch.get_unwrapped(t).movedim(bdim, -1)
        else:
            t = functorch.get_unwrapped(t)
    if not _unwrapped_has_values(t):
        return None
    return t.detach().to("cpu", torch.float64).reshape(table.shape[0], -1)
