"""Loads the compiled operator library, which registers ``torch.ops.flip.*``: ``flip_loss._C`` (the
ops' schemas and CPU kernels; needs no CUDA library) and, with a CUDA build of torch,
``flip_loss._C_cuda`` (the CUDA kernels of the same ops)."""

import os
import warnings

import torch

HAS_EXTENSION = False
IMPORT_ERROR = None
# Keys of the warnings already given (warn_once): each reason for a fallback is said once.
_warned = set()


def warn_once(key: str, message: str, stacklevel: int = 3) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)


_C_BUILT_BUT_BROKEN = False


def _fallback_message() -> str:
    return f"flip_loss: {IMPORT_ERROR}; falling back to the slow pure-PyTorch oracle (flip_loss.oracle)"


def _explain_missing_extension(exc: ImportError) -> str:
    """Why ``flip_loss._C`` is missing, and what to do, in words a user can act on. The usual
    cause is a source checkout that was never built, imported instead of an installed copy because
    the current directory comes first on ``sys.path`` (Python then reports a confusing 'circular
    import')."""
    here = os.path.dirname(os.path.abspath(__file__))
    global _C_BUILT_BUT_BROKEN
    built = [f for f in os.listdir(here) if f.startswith("_C.") and f.endswith((".so", ".pyd"))]
    _C_BUILT_BUT_BROKEN = bool(built)
    if built:  # a binary is there but does not load: usually built against another torch
        return (
            f"flip_loss._C in {here} could not be loaded ({exc}); it was probably built against "
            f"another torch than the installed {torch.__version__}: rebuild it with "
            "'pip install --no-build-isolation .' (or '-e .' in a checkout)"
        )
    message = f"the compiled extension flip_loss._C is not built in {here}"
    if os.path.exists(os.path.join(os.path.dirname(here), "setup.py")):
        message += (
            " (a source checkout: build it there with 'pip install --no-build-isolation -e .', "
            "or run from another directory to use an installed copy"
        )
        try:
            from importlib import metadata

            dist = metadata.distribution("flip-loss")
            location = os.path.abspath(str(dist.locate_file("")))
            if os.path.commonpath([location, here]) != os.path.dirname(here):
                message += f", such as the one installed in {location}"
        except Exception:  # no installed copy, or metadata unreadable: nothing more to say
            pass
        message += ")"
    return message


try:
    from . import _C  # noqa: F401  (importing registers the ops' schemas and CPU kernels)

    HAS_EXTENSION = True
except ImportError as exc:  # exercised only on unbuilt checkouts and broken installs
    IMPORT_ERROR = _explain_missing_extension(exc)
    if _C_BUILT_BUT_BROKEN:
        # A binary that is there and does not load is a broken install, not an unbuilt checkout:
        # said at once, not only at the first op that falls back (which then says nothing more).
        warn_once("no-ext", _fallback_message(), stacklevel=2)


def _cuda_kernels_wanted() -> bool:
    # FLIP_LOSS_CUDA_KERNELS=0 sends CUDA tensors to the pure-PyTorch oracle instead (a way
    # around a CUDA-kernel problem on some GPU, or a CUDA module that does not load, without
    # rebuilding); the CUDA module is then not even loaded.
    return os.environ.get("FLIP_LOSS_CUDA_KERNELS", "1") not in ("0", "false", "off", "no")


# Why flip_loss._C_cuda, the CUDA kernels, did not load although it is there (None when it loaded,
# is absent, or was not wanted).
CUDA_IMPORT_ERROR = None


def _load_cuda_kernels() -> None:
    """Imports flip_loss._C_cuda, which registers the CUDA kernels for the schemas _C defined (so
    _C comes first). Only with a CUDA build of torch: a CPU-only torch has no libtorch_cuda nor CUDA
    runtime for it to load with. Its failure leaves the CPU kernels working and says so once, here,
    where it happens: otherwise CUDA tensors would only meet a 'no kernels for this device'."""
    global CUDA_IMPORT_ERROR
    if not HAS_EXTENSION or not _cuda_kernels_wanted() or torch.version.cuda is None:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    if not any(f.startswith("_C_cuda.") and f.endswith((".so", ".pyd")) for f in os.listdir(here)):
        return  # built without CUDA kernels: CPU kernels only, nothing went wrong
    try:
        from . import _C_cuda  # noqa: F401  (importing registers the ops' CUDA kernels)
    except ImportError as exc:
        CUDA_IMPORT_ERROR = f"the CUDA kernels flip_loss._C_cuda in {here} could not be loaded ({exc})"
        warnings.warn(
            f"flip_loss: {CUDA_IMPORT_ERROR}; they were probably built against another CUDA release "
            f"than torch {torch.__version__}'s (CUDA {torch.version.cuda}): rebuild with an nvcc of "
            "that release ('pip install --no-build-isolation .'), or set FLIP_LOSS_CUDA_KERNELS=0 "
            "to skip them. The CPU kernels are unaffected; CUDA tensors use the slow pure-PyTorch "
            "oracle (flip_loss.oracle)",
            RuntimeWarning,
            stacklevel=2,
        )


_load_cuda_kernels()

if HAS_EXTENSION:
    from . import op_registration

    op_registration.register()  # their fake, Autograd and Autocast kernels


def use_extension(*tensors: torch.Tensor, op: str = "ldr_flip") -> bool:
    """True when the compiled kernels of ``op`` can serve these tensors; otherwise warn once and
    let the caller fall back to the pure-PyTorch oracle (flip_loss.oracle)."""
    if not HAS_EXTENSION:
        warn_once("no-ext", _fallback_message())
        return False
    for t in tensors:
        if t.device.type not in KERNEL_DEVICES.get(op, ()):
            reason = f"no compiled {op} kernels for device '{t.device.type}' in this build"
            if t.device.type == "cuda" and CUDA_IMPORT_ERROR is not None:
                reason = CUDA_IMPORT_ERROR
            warn_once(
                f"dev-{op}-{t.device.type}",
                f"flip_loss: {reason}; using the pure-PyTorch oracle (flip_loss.oracle)",
            )
            return False
    return True


def kernels_serve(op: str, *tensors: torch.Tensor) -> bool:
    """Whether the compiled ``op`` serves these tensors: on a device with kernels (``use_extension``), or on
    the meta device, where the ops' Meta kernels give the result's shape and dtype (the
    pure-PyTorch oracle would work too, but slowly and with a warning)."""
    if HAS_EXTENSION and all(t.device.type == "meta" for t in tensors):
        return True
    return use_extension(*tensors, op=op)


def _devices_with_kernels():
    use_cuda = _cuda_kernels_wanted()
    table = {}
    for op in ("ldr_flip", "hdr_flip"):
        devs = set()
        if HAS_EXTENSION:
            for key, dev in (("CPU", "cpu"), ("CUDA", "cuda")):
                if dev == "cuda" and not use_cuda:
                    continue
                if torch._C._dispatch_has_kernel_for_dispatch_key(f"flip::{op}", key):
                    devs.add(dev)
        table[op] = frozenset(devs)
    return table


# op -> devices with compiled kernels; fixed at import so that torch.compile sees constants.
KERNEL_DEVICES = _devices_with_kernels()
