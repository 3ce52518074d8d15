"""The Python halves of ``torch.ops.flip.*``: the fake kernels, the Autograd kernels, the Autocast
rule and the BackendSelect kernels of every op whose schema and CPU/CUDA kernels the compiled
extension registers.

The extension is built against PyTorch's stable C++ ABI, which has no C++ counterpart for autograd,
autocast or kernels over symbolic sizes, so these are registered here with ``torch.library`` (the
LibTorch CMake package, compiled against the user's own libtorch, keeps its C++ versions in
``csrc/ops/autograd.cpp`` and ``autocast.cpp``: the same rules). Every path checks the arguments
first (``op_checks``) in the Autograd kernel, or in BackendSelect for calls that skip autograd, so
that eager, torch.compile, torch.export, TorchScript and raw ``torch.ops.flip`` calls raise the same
error before any kernel runs. Where the compiled kernels cannot serve a device
(``flip_loss._ops.kernels_run_on``), ``ldr_flip`` and ``hdr_flip`` compute with the portable path
(``PORTABLE_OPS``) on the same paths, so every entry point follows the Python API's rule.
"""

import functools
from contextlib import nullcontext

import torch
from torch import _C as _torch_C

from . import _C, op_checks
from .tensor_values import differentiated_around, functorch_levels, is_compiling

_LIB = torch.library.Library("flip", "IMPL")  # kept alive for the process: the registrations' owner


def _op(name):
    return getattr(torch.ops.flip, name).default


def _run(name, keyset, *args):
    """Runs op ``name`` below autograd (the CPU/CUDA kernel, or what a tracing mode puts there)."""
    with _torch_C._AutoDispatchBelowAutograd():
        return _op(name).redispatch(keyset & _torch_C._after_autograd_keyset, *args)


def _skipped_autograd(first) -> bool:
    """Whether a call reaching BackendSelect came past no Autograd kernel (which checks the
    arguments): under inference mode, or with inference tensors, which carry no Autograd key. Every
    op's first argument is a tensor: when it is an inference tensor and another argument is not,
    the call did pass an Autograd kernel, and checking it again is harmless."""
    return _torch_C.is_inference_mode_enabled() or (isinstance(first, torch.Tensor) and first.is_inference())


def _portable_ldr_flip(test, ref, ppd, space, eps):
    from . import oracle

    return oracle.ldr_flip(test, ref, ppd, space, eps)


def _portable_hdr_flip(test, ref, exposures, counts, ppd, tone_mapper, eps):
    from . import oracle

    if test.dim() == 3:  # the op takes one image as C x H x W, the oracle a batch
        return tuple(
            x.squeeze(0) for x in _portable_hdr_flip(test[None], ref[None], exposures, counts, ppd, tone_mapper, eps)
        )
    return oracle.hdr_flip(test, ref, ppd, tone_mapper, exposures, counts, eps)


def _portable_stage(name):
    """The portable form of a stage op (``flip_loss.oracle``'s function of the same name), for a
    batch or one C x H x W image as the op takes."""

    def run(*args):
        from . import oracle

        function = getattr(oracle, name)
        if args[0].dim() == 3:
            return function(*(a[None] if isinstance(a, torch.Tensor) else a for a in args)).squeeze(0)
        return function(*args)

    return run


def _portable_multiscale(test, ref, ppds, weights, space, eps):
    from .multiscale import weighted_sum

    return weighted_sum([_portable_ldr_flip(test, ref, ppd, space, eps) for ppd in ppds], weights)


def _second_order_through_portable(portable):
    """Makes an op's backward differentiable where autograd asks for it (``create_graph=True``,
    eager): the kernels' gradient keeps its values and gains the graph of the portable path's
    gradient of the same call, g + (p - p.detach()), so that a second derivative (a gradient
    penalty, MAML's inner step, torch.autograd.functional.hessian) is the exact reference's.
    ``portable(ctx)`` (each node's) gives the differentiable inputs by argument position and the
    portable form of the op's map over them. Under torch.func and torch.compile, which differentiate
    the node once (their nested transforms are refused before it), the backward runs as it is."""

    def decorate(backward):
        @functools.wraps(backward)
        def run(ctx, grad, *rest):
            if not _torch_C.is_grad_enabled() or getattr(ctx, "under_func_transform", False) or is_compiling():
                return backward(ctx, grad, *rest)
            with torch.no_grad():
                values = list(backward(ctx, grad, *rest))
            inputs, function = portable(ctx)
            wanted = [p for p in sorted(inputs) if values[p] is not None and inputs[p].requires_grad]
            if not wanted or grad is None:
                return tuple(values)
            # Autocast off, as the ops' Autocast kernels run them: the portable path's own backward
            # would otherwise convolve in the autocast dtype.
            device = inputs[wanted[0]].device.type
            autocast_off = torch.autocast(device, enabled=False) if torch.is_autocast_enabled(device) else nullcontext()
            with torch.enable_grad(), autocast_off:
                out = function(*(inputs[p] for p in sorted(inputs)))
                slopes = torch.autograd.grad(
                    out, [inputs[p] for p in wanted], grad, create_graph=True, allow_unused=True
                )
            for p, slope in zip(wanted, slopes):
                if slope is not None:
                    values[p] = values[p] + (slope - slope.detach())
            return tuple(values)

        return run

    return decorate


# The ops that compute with the portable path (the pure-PyTorch flip_loss.oracle, differentiated by
# autograd) where their compiled kernels do not serve the device: MPS, XPU, a ROCm GPU, an NVIDIA
# GPU the build holds no code for.
PORTABLE_OPS = {"ldr_flip": _portable_ldr_flip, "hdr_flip": _portable_hdr_flip}


# flip_loss._ops.kernels_run_on(op, device type, index), the package's one rule (register() is
# handed it: _ops imports this module).
_kernels_run_on = None


def _kernels_serve(name, first) -> bool:
    """Whether op ``name``'s compiled kernels serve its first tensor's device (else: warned once)."""
    return name not in PORTABLE_OPS or _kernels_run_on(name, first.device.type, first.device.index)


def _backend_select(name):
    """The BackendSelect kernel of op ``name``, on every call's path (with or without autograd,
    under ``torch.inference_mode``, from TorchScript, raw ``torch.ops.flip.*`` calls). A call that
    skipped the Autograd kernels (inference mode, inference tensors only) gets the Python checks
    here, so a bad argument raises the same TypeError or ValueError, with the same message, on every
    path (the C++ checks' RuntimeError is left to the C++ API); one that went through an Autograd
    kernel is not checked twice. For an op of ``INTERRUPTIBLE_OPS``, whose CPU kernel may stop for a
    Python signal handler's exception (KeyboardInterrupt from Ctrl-C), which the stable ABI carries
    out as a RuntimeError, the op runs with this thread's exceptions kept
    (``_C.catch_interrupts``) and the one its handler raised, if any, is taken back on every exit
    and raised instead: nothing of an interrupted call is left for a later one. The arguments go on
    as the caller gave them; only the checks need the defaults filled in (``_with_defaults``), and
    only they pay for it."""
    op = _op(name)
    check = _with_defaults(name, getattr(op_checks, name.lstrip("_")), False)
    backend_select = _torch_C.DispatchKey.BackendSelect
    first = op._schema.arguments[0].name
    interruptible = name in INTERRUPTIBLE_OPS
    portable = _with_defaults(name, PORTABLE_OPS[name], False) if name in PORTABLE_OPS else None

    def kernel(keyset, *args, **kwargs):
        _refuse_forward_mode(name, args, kwargs)
        if _skipped_autograd(args[0] if args else kwargs.get(first)):
            check(*args, **kwargs)
            if not _kernels_serve(name, args[0] if args else kwargs[first]):
                return portable(*args, **kwargs)
        if not interruptible:
            return op.redispatch(keyset.remove(backend_select), *args, **kwargs)
        _C.catch_interrupts()
        try:
            return op.redispatch(keyset.remove(backend_select), *args, **kwargs)
        finally:
            interrupt = _C.take_interrupt()
            if interrupt is not None:
                raise interrupt from None

    return kernel


def _wants_grad(*tensors) -> bool:
    return _torch_C.is_grad_enabled() and _torch_C._any_requires_grad(*tensors)


def _kept(flag: bool, t):
    return t if flag else None


# The ops' autograd nodes: torch.autograd.Function less its routing to torch.func (see _record).
_SingleLevelFunction = torch.autograd.function._SingleLevelFunction


def _record(name, function, *args):
    """``function.apply(*args)``, the autograd node of op ``name``, from inside its Autograd kernel.
    Under a torch.func gradient transform (grad, vjp, jacrev) the transform has already unwrapped
    the tensors of its level, as for ATen's own ops, and a plain node on them is what it
    differentiates: the node is recorded as functorch records its own single-level ones. vmap
    levels around it are carried by the tensors (per-example gradients). A second gradient level
    would need a node of its own, which the ops do not have (first order only), and a forward-mode
    level around it a JVP, as would eager autograd or forward mode around the transform (outside its
    wrappers): refused, rather than a silent zero (the Python API takes the portable path there)."""
    levels = functorch_levels()
    if not levels:
        return function.apply(*args)
    from torch._functorch.utils import enable_single_level_autograd_function

    if "jvp" in levels:
        raise op_checks.forward_mode_error(name)
    if levels.count("grad") != 1 or any(level not in ("grad", "vmap") for level in levels):
        raise NotImplementedError(
            "flip: under torch.func the ops support one gradient transform (grad, vjp, jacrev), with vmap "
            f"inside or around it; this call is under {' over '.join(levels)}"
        )
    if any(differentiated_around(a) for a in args):
        raise NotImplementedError(
            "flip: under torch.func the ops support one gradient transform (grad, vjp, jacrev), with vmap "
            "inside or around it; this call is under grad with autograd or forward mode around it (a "
            "tensor below its wrappers requires grad or carries a tangent)"
        )
    with enable_single_level_autograd_function():
        outputs = function.apply(*args)
    node = (outputs[0] if isinstance(outputs, (tuple, list)) else outputs).grad_fn
    if node is not None:  # its backward runs under the transform's create_graph=True: first order
        node.under_func_transform = True
    return outputs


# ---- the forward ops ----


class _LdrFlip(_SingleLevelFunction):
    @staticmethod
    def forward(keyset, test, ref, ppd, space, eps):
        return _run("ldr_flip", keyset, test, ref, ppd, space, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, test, ref, ppd, space, eps = inputs
        ctx.save_for_backward(test, ref)
        ctx.args = (ppd, space, eps)

    @staticmethod
    def portable(ctx):
        test, ref = ctx.saved_tensors[:2]
        ppd, space, eps = ctx.args
        return {1: test, 2: ref}, lambda t, r: _portable_ldr_flip(t, r, ppd, space, eps)

    @staticmethod
    @_second_order_through_portable(portable.__func__)
    def backward(ctx, grad):
        test, ref = ctx.saved_tensors
        mask = [ctx.needs_input_grad[1], ctx.needs_input_grad[2]]
        gt, gr = torch.ops.flip.ldr_flip_backward(grad, test, ref, *ctx.args, mask)
        return None, _kept(mask[0], gt), _kept(mask[1], gr), None, None, None


class _LdrFlipWithSensitivities(_SingleLevelFunction):
    """A forward that also keeps the sensitivities of the images in ``keep`` (a non-differentiable
    second output), so that the backward only scales them and runs the transposed filters."""

    @staticmethod
    def forward(keyset, test, ref, ppd, space, eps, keep):
        return _run("_ldr_flip_with_sensitivities", keyset, test, ref, ppd, space, eps, keep)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, test, ref, ppd, space, eps, keep = inputs
        sens = output[1]
        ctx.save_for_backward(test, ref, sens)
        ctx.args = (ppd, space, eps)
        ctx.keep = tuple(keep)
        ctx.mark_non_differentiable(sens)
        # No gradient ever flows into the sensitivities: without this, autograd would hand the
        # backward a zero-filled tensor of their size (7 planes per image) on every call.
        ctx.set_materialize_grads(False)

    @staticmethod
    @_second_order_through_portable(_LdrFlip.portable)
    def backward(ctx, grad, _grad_sens):
        test, ref, sens = ctx.saved_tensors
        want = (ctx.needs_input_grad[1], ctx.needs_input_grad[2])
        nothing = (None,) * 7
        if not (want[0] or want[1]) or grad is None:
            return nothing
        ppd, space, eps = ctx.args
        keep = ctx.keep
        if (want[0] and not keep[0]) or (want[1] and not keep[1]):
            # A gradient whose sensitivities were not kept (only when the internal op is called
            # with an output_mask that leaves out an input requiring grad): recompute it all.
            gt, gr = torch.ops.flip.ldr_flip_backward(grad, test, ref, ppd, space, eps, list(want))
        else:
            if want != keep:  # both kept, one wanted (backward(inputs=...)): its planes
                planes = op_checks.SENSITIVITY_PLANES_PER_IMAGE
                sens = sens.narrow(-3, 0 if want[0] else planes, planes)
            gt, gr = torch.ops.flip._ldr_flip_backward_from_sensitivities(grad, sens, test, ref, ppd, space, list(want))
        return None, _kept(want[0], gt), _kept(want[1], gr), None, None, None, None


class _LdrFlipMultiscale(_SingleLevelFunction):
    """Multi-scale LDR-FLIP (CPU): the forward keeps the sensitivities of the images in ``keep`` at
    every scale, the backward runs each scale's transposed filters from them. There is no
    recomputing backward, so the Autograd kernel refuses a ``keep`` that leaves out an input that
    requires grad."""

    @staticmethod
    def forward(keyset, test, ref, ppds, weights, space, eps, keep):
        return _run("_ldr_flip_multiscale", keyset, test, ref, ppds, weights, space, eps, keep)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, test, ref, ppds, weights, space, eps, keep = inputs
        sens = output[1]
        ctx.save_for_backward(test, ref, sens)
        ctx.args = (ppds, weights, space)
        ctx.eps = eps  # for the portable form (second order); the backward op takes no eps
        ctx.keep = list(keep)
        ctx.mark_non_differentiable(sens)
        ctx.set_materialize_grads(False)  # as _LdrFlipWithSensitivities

    @staticmethod
    def portable(ctx):
        test, ref = ctx.saved_tensors[:2]
        ppds, weights, space = ctx.args
        return {1: test, 2: ref}, lambda t, r: _portable_multiscale(t, r, ppds, weights, space, ctx.eps)

    @staticmethod
    @_second_order_through_portable(portable.__func__)
    def backward(ctx, grad, _grad_sens):
        want = (ctx.needs_input_grad[1], ctx.needs_input_grad[2])
        if not (want[0] or want[1]) or grad is None:
            return (None,) * 8
        test, ref, sens = ctx.saved_tensors
        # Every kept image's gradient (the sensitivities' layout), of which the wanted ones are returned.
        gt, gr = torch.ops.flip._ldr_flip_multiscale_backward(grad, sens, test, ref, *ctx.args, ctx.keep)
        return None, _kept(want[0], gt), _kept(want[1], gr), None, None, None, None, None


class _HdrFlip(_SingleLevelFunction):
    @staticmethod
    def forward(keyset, test, ref, exposures, counts, ppd, tone_mapper, eps):
        return _run("hdr_flip", keyset, test, ref, exposures, counts, ppd, tone_mapper, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, test, ref, exposures, counts, ppd, tone_mapper, eps = inputs
        _, exposure_map, index = output
        ctx.save_for_backward(test, ref, exposures, counts, index)
        ctx.args = (ppd, tone_mapper, eps)
        ctx.mark_non_differentiable(exposure_map, index)
        ctx.set_materialize_grads(False)  # as above: no zero-filled exposure-map / index gradients

    @staticmethod
    def portable(ctx):
        test, ref, exposures, counts = ctx.saved_tensors[:4]
        return {1: test, 2: ref}, lambda t, r: _portable_hdr_flip(t, r, exposures, counts, *ctx.args)[0]

    @staticmethod
    @_second_order_through_portable(portable.__func__)
    def backward(ctx, grad, _grad_emap, _grad_index):
        if grad is None:
            return (None,) * 8
        test, ref, exposures, counts, index = ctx.saved_tensors
        mask = [ctx.needs_input_grad[1], ctx.needs_input_grad[2]]
        gt, gr = torch.ops.flip.hdr_flip_backward(grad, test, ref, exposures, counts, index, *ctx.args, mask)
        return None, _kept(mask[0], gt), _kept(mask[1], gr), None, None, None, None, None


class _CsfFilter(_SingleLevelFunction):
    @staticmethod
    def forward(keyset, opponent, ppd):
        return _run("csf_filter", keyset, opponent, ppd)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, opponent, ppd = inputs
        ctx.save_for_backward(opponent)
        ctx.ppd = ppd

    @staticmethod
    def portable(ctx):
        return {1: ctx.saved_tensors[0]}, lambda o: _portable_stage("csf_filter")(o, ctx.ppd)

    @staticmethod
    @_second_order_through_portable(portable.__func__)
    def backward(ctx, grad):
        (opponent,) = ctx.saved_tensors
        return None, torch.ops.flip.csf_filter_backward(grad, opponent, ctx.ppd), None


class _HuntHyab(_SingleLevelFunction):
    @staticmethod
    def forward(keyset, test, ref, eps):
        return _run("hunt_hyab", keyset, test, ref, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, test, ref, eps = inputs
        ctx.save_for_backward(test, ref)
        ctx.eps = eps

    @staticmethod
    def portable(ctx):
        test, ref = ctx.saved_tensors
        return {1: test, 2: ref}, lambda t, r: _portable_stage("hunt_hyab")(t, r, ctx.eps)

    @staticmethod
    @_second_order_through_portable(portable.__func__)
    def backward(ctx, grad):
        test, ref = ctx.saved_tensors
        mask = [ctx.needs_input_grad[1], ctx.needs_input_grad[2]]
        gt, gr = torch.ops.flip.hunt_hyab_backward(grad, test, ref, ctx.eps, mask)
        return None, _kept(mask[0], gt), _kept(mask[1], gr), None


class _FeatureDifference(_SingleLevelFunction):
    @staticmethod
    def forward(keyset, test, ref, ppd, eps):
        return _run("feature_difference", keyset, test, ref, ppd, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, test, ref, ppd, eps = inputs
        ctx.save_for_backward(test, ref)
        ctx.args = (ppd, eps)

    @staticmethod
    def portable(ctx):
        test, ref = ctx.saved_tensors
        return {1: test, 2: ref}, lambda t, r: _portable_stage("feature_difference")(t, r, *ctx.args)

    @staticmethod
    @_second_order_through_portable(portable.__func__)
    def backward(ctx, grad):
        test, ref = ctx.saved_tensors
        mask = [ctx.needs_input_grad[1], ctx.needs_input_grad[2]]
        gt, gr = torch.ops.flip.feature_difference_backward(grad, test, ref, *ctx.args, mask)
        return None, _kept(mask[0], gt), _kept(mask[1], gr), None, None


def _ldr_flip_autograd(keyset, test, ref, ppd, space, eps):
    """With a gradient to come, the internal pair that keeps the sensitivities where
    ``op_checks.keeps_sensitivities`` says so (on the CPU always; on CUDA up to 256 MiB per call, one
    4K image's in float32): the forward keeps them for the images that require grad (7 planes per
    image in the compute dtype), and the backward only scales them and runs the transposed filters
    (``_ldr_flip_backward_from_sensitivities``). Past that size CUDA's backward recomputes the
    forward in tiles, with memory flat in the image size."""
    op_checks.ldr_flip(test, ref, ppd, space, eps)
    if not _kernels_serve("ldr_flip", test):
        return _portable_ldr_flip(test, ref, ppd, space, eps)
    if not _wants_grad(test, ref):
        return _run("ldr_flip", keyset, test, ref, ppd, space, eps)
    if op_checks.keeps_sensitivities(test, ref):
        keep = [test.requires_grad, ref.requires_grad]
        return _record("ldr_flip", _LdrFlipWithSensitivities, keyset, test, ref, ppd, space, eps, keep)[0]
    return _record("ldr_flip", _LdrFlip, keyset, test, ref, ppd, space, eps)


def _ldr_flip_with_sensitivities_autograd(keyset, test, ref, ppd, space, eps, keep):
    op_checks.ldr_flip_with_sensitivities(test, ref, ppd, space, eps, keep)
    if not _wants_grad(test, ref):
        return _run("_ldr_flip_with_sensitivities", keyset, test, ref, ppd, space, eps, keep)
    return _record("_ldr_flip_with_sensitivities", _LdrFlipWithSensitivities, keyset, test, ref, ppd, space, eps, keep)


def _ldr_flip_multiscale_autograd(keyset, test, ref, ppds, weights, space, eps, keep):
    """Multi-scale LDR-FLIP (CPU, the Python API's) always keeps the sensitivities of the images
    that require grad, at every scale, and its backward starts from them."""
    op_checks.ldr_flip_multiscale(test, ref, ppds, weights, space, eps, keep)
    if not _wants_grad(test, ref):
        return _run("_ldr_flip_multiscale", keyset, test, ref, ppds, weights, space, eps, keep)
    if (test.requires_grad and not keep[0]) or (ref.requires_grad and not keep[1]):
        raise ValueError(
            "flip: _ldr_flip_multiscale's output_mask must keep the sensitivities of every input that requires grad"
        )
    return _record("_ldr_flip_multiscale", _LdrFlipMultiscale, keyset, test, ref, ppds, weights, space, eps, keep)


def _forward_autograd(name, function, tensors):
    """The Autograd kernel of a forward op whose first ``tensors`` arguments may require grad."""
    check = getattr(op_checks, name)

    def kernel(keyset, *args):
        check(*args)
        if not _kernels_serve(name, args[0]):
            return PORTABLE_OPS[name](*args)
        if not _wants_grad(*args[:tensors]):
            return _run(name, keyset, *args)
        return _record(name, function, keyset, *args)

    return kernel


# ---- the backward ops ----


class _FirstOrderOnly(_SingleLevelFunction):
    """Runs a backward op below autograd; differentiating its results raises (with
    ``create_graph=True``), so a gradient penalty through FLIP fails loudly instead of silently
    getting no gradient from it."""

    @staticmethod
    def forward(name, keyset, *args):
        return _run(name, keyset, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.name = inputs[0]

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(
            "flip: double backward (second-order gradients) of FLIP is not supported: "
            f"flip::{ctx.name} is not differentiable"
        )


def _backward_autograd(name):
    check = getattr(op_checks, name.lstrip("_"))

    def kernel(keyset, *args):
        check(*args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not _wants_grad(*tensors):
            return _run(name, keyset, *args)
        return _record(name, _FirstOrderOnly, name, keyset, *args)

    return kernel


# ---- the fake kernels: shapes and dtypes only, with symbolic sizes ----


def _map_like(t, dtype=None):
    shape = list(t.shape)
    shape[-3] = 1
    return t.new_empty(shape, dtype=dtype)


def _grad_like(t, wanted):
    return t.new_empty(t.shape) if wanted else t.new_empty((0,))


def _fake_ldr_flip(test, ref, ppd, space, eps):
    op_checks.ldr_flip(test, ref, ppd, space, eps)
    return _map_like(test, op_checks.map_dtype(test.dtype))


def _fake_ldr_flip_backward(grad, test, ref, ppd, space, eps, mask):
    op_checks.ldr_flip_backward(grad, test, ref, ppd, space, eps, mask)
    return _grad_like(test, mask[0]), _grad_like(ref, mask[1])


def _fake_ldr_flip_with_sensitivities(test, ref, ppd, space, eps, mask):
    op_checks.ldr_flip_with_sensitivities(test, ref, ppd, space, eps, mask)
    sens = test.new_empty(op_checks.sensitivities_shape(test, mask), dtype=op_checks.compute_dtype(test.dtype))
    return _map_like(test), sens


def _fake_ldr_flip_backward_from_sensitivities(grad, sensitivities, test, ref, ppd, space, mask):
    op_checks.ldr_flip_backward_from_sensitivities(grad, sensitivities, test, ref, ppd, space, mask)
    return _grad_like(test, mask[0]), _grad_like(ref, mask[1])


def _fake_ldr_flip_multiscale(test, ref, ppds, weights, space, eps, mask):
    op_checks.ldr_flip_multiscale(test, ref, ppds, weights, space, eps, mask)
    shape = op_checks.multiscale_sensitivities_shape(test, mask, len(ppds))
    return _map_like(test), test.new_empty(shape, dtype=op_checks.compute_dtype(test.dtype))


def _fake_ldr_flip_multiscale_backward(grad, sensitivities, test, ref, ppds, weights, space, mask):
    op_checks.ldr_flip_multiscale_backward(grad, sensitivities, test, ref, ppds, weights, space, mask)
    return _grad_like(test, mask[0]), _grad_like(ref, mask[1])


def _fake_hdr_flip(test, ref, exposures, counts, ppd, tone_mapper, eps):
    op_checks.hdr_flip(test, ref, exposures, counts, ppd, tone_mapper, eps)
    return _map_like(test), _map_like(test), _map_like(test, torch.int32)


def _fake_hdr_flip_backward(grad, test, ref, exposures, counts, index, ppd, tone_mapper, eps, mask):
    op_checks.hdr_flip_backward(grad, test, ref, exposures, counts, index, ppd, tone_mapper, eps, mask)
    return _grad_like(test, mask[0]), _grad_like(ref, mask[1])


def _fake_csf_filter(opponent, ppd):
    op_checks.csf_filter(opponent, ppd)
    return opponent.new_empty(opponent.shape)


def _fake_csf_filter_backward(grad, opponent, ppd):
    op_checks.csf_filter_backward(grad, opponent, ppd)
    return opponent.new_empty(opponent.shape)


def _fake_hunt_hyab(test, ref, eps):
    op_checks.hunt_hyab(test, ref, eps)
    return _map_like(test)


def _fake_hunt_hyab_backward(grad, test, ref, eps, mask):
    op_checks.hunt_hyab_backward(grad, test, ref, eps, mask)
    return _grad_like(test, mask[0]), _grad_like(ref, mask[1])


def _fake_feature_difference(test, ref, ppd, eps):
    op_checks.feature_difference(test, ref, ppd, eps)
    return test.new_empty(test.shape)


def _fake_feature_difference_backward(grad, test, ref, ppd, eps, mask):
    op_checks.feature_difference_backward(grad, test, ref, ppd, eps, mask)
    return _grad_like(test, mask[0]), _grad_like(ref, mask[1])


FAKE_KERNELS = {
    "ldr_flip": _fake_ldr_flip,
    "ldr_flip_backward": _fake_ldr_flip_backward,
    "_ldr_flip_with_sensitivities": _fake_ldr_flip_with_sensitivities,
    "_ldr_flip_backward_from_sensitivities": _fake_ldr_flip_backward_from_sensitivities,
    "_ldr_flip_multiscale": _fake_ldr_flip_multiscale,
    "_ldr_flip_multiscale_backward": _fake_ldr_flip_multiscale_backward,
    "hdr_flip": _fake_hdr_flip,
    "hdr_flip_backward": _fake_hdr_flip_backward,
    "csf_filter": _fake_csf_filter,
    "csf_filter_backward": _fake_csf_filter_backward,
    "hunt_hyab": _fake_hunt_hyab,
    "hunt_hyab_backward": _fake_hunt_hyab_backward,
    "feature_difference": _fake_feature_difference,
    "feature_difference_backward": _fake_feature_difference_backward,
}

AUTOGRAD_KERNELS = {
    "ldr_flip": _ldr_flip_autograd,
    "_ldr_flip_with_sensitivities": _ldr_flip_with_sensitivities_autograd,
    "_ldr_flip_multiscale": _ldr_flip_multiscale_autograd,
    "hdr_flip": _forward_autograd("hdr_flip", _HdrFlip, 2),
    "csf_filter": _forward_autograd("csf_filter", _CsfFilter, 1),
    "hunt_hyab": _forward_autograd("hunt_hyab", _HuntHyab, 2),
    "feature_difference": _forward_autograd("feature_difference", _FeatureDifference, 2),
    "ldr_flip_backward": _backward_autograd("ldr_flip_backward"),
    "_ldr_flip_backward_from_sensitivities": _backward_autograd("_ldr_flip_backward_from_sensitivities"),
    "_ldr_flip_multiscale_backward": _backward_autograd("_ldr_flip_multiscale_backward"),
    "hdr_flip_backward": _backward_autograd("hdr_flip_backward"),
    "csf_filter_backward": _backward_autograd("csf_filter_backward"),
    "hunt_hyab_backward": _backward_autograd("hunt_hyab_backward"),
    "feature_difference_backward": _backward_autograd("feature_difference_backward"),
}

# The ops whose CPU kernels poll for Python signals between steps (csrc/flip/cpu/hdr_flip.inc, the
# exposures), whose BackendSelect kernels (_backend_select) re-raise a handler's exception.
INTERRUPTIBLE_OPS = ("hdr_flip", "hdr_flip_backward")

# The forward ops, cast to float32 under torch.autocast (floating inputs only: counts stay integers;
# like PyTorch's own losses, the result stays float32); _ldr_flip_multiscale too, which the Python
# API calls directly.
AUTOCAST_OPS = ("ldr_flip", "_ldr_flip_multiscale", "hdr_flip", "csf_filter", "hunt_hyab", "feature_difference")


def _with_defaults(name, kernel, with_keyset):
    """The kernel called with every argument, positionally: a Python kernel receives the arguments
    as the caller gave them, without the schema's defaults (all of the ops' are positional)."""
    arguments = _op(name)._schema.arguments

    def full(args, kwargs):
        return [
            args[i] if i < len(args) else kwargs[a.name] if a.name in kwargs else a.default_value
            for i, a in enumerate(arguments)
        ]

    if with_keyset:
        return lambda keyset, *args, **kwargs: kernel(keyset, *full(args, kwargs))
    return lambda *args, **kwargs: kernel(*full(args, kwargs))


def _refuse_forward_mode(name, args, kwargs) -> None:
    """Forward mode (``forward_ad``, ``torch.func.jvp``/``jacfwd``/``hessian``) refused by every op
    (``op_checks.refuse_forward_mode``): the ops have no JVP, and without the refusal a tangent would
    silently come out as zero. Also where the portable path computes inside the op: run from an op's Python kernel, the oracle meets an error inside
    PyTorch under forward mode, while the Python API, which calls the oracle itself there, has it."""
    op_checks.refuse_forward_mode(name, *args, *kwargs.values())


def _autograd_kernel(name, kernel):
    """The Autograd kernel of op ``name``: forward mode refused first (under torch.compile's tracing
    the call never reaches BackendSelect), then ``kernel`` with every argument."""
    full = _with_defaults(name, kernel, True)

    def autograd(keyset, *args, **kwargs):
        _refuse_forward_mode(name, args, kwargs)
        return full(keyset, *args, **kwargs)

    return autograd


def register(kernels_run_on) -> None:
    """Registers the kernels above for every op (once per process: flip_loss._ops calls it, with
    its rule for where the compiled kernels serve)."""
    global _kernels_run_on
    _kernels_run_on = kernels_run_on
    for name, fake in FAKE_KERNELS.items():
        torch.library.register_fake(f"flip::{name}", _with_defaults(name, fake, False), lib=_LIB)
    for name, kernel in AUTOGRAD_KERNELS.items():
        _LIB.impl(name, _autograd_kernel(name, kernel), "Autograd", with_keyset=True)
    for name in FAKE_KERNELS:  # every op
        _LIB.impl(name, _backend_select(name), "BackendSelect", with_keyset=True)
    for name in AUTOCAST_OPS:
        for device in ("cpu", "cuda"):
            torch.library.register_autocast(f"flip::{name}", device, torch.float32, lib=_LIB)
