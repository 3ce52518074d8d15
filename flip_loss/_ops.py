"""Loads the compiled operator library (``flip_loss._C``), which registers ``torch.ops.flip.*``."""

import os
import warnings

import torch

HAS_EXTENSION = False
IMPORT_ERROR = None


def _explain_missing_extension(exc: ImportError) -> str:
    """Why ``flip_loss._C`` is missing, and what to do, in words a user can act on. The usual
    cause is a source checkout that was never built, imported instead of an installed copy because
    the current directory comes first on ``sys.path`` (Python then reports a confusing 'circular
    import')."""
    here = os.path.dirname(os.path.abspath(__file__))
    built = [f for f in os.listdir(here) if f.startswith("_C.") and f.endswith((".so", ".pyd"))]
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
    from . import _C  # noqa: F401  (importing registers the ops' schemas and CPU/CUDA kernels)

    HAS_EXTENSION = True
except ImportError as exc:  # exercised only on unbuilt checkouts and broken installs
    IMPORT_ERROR = _explain_missing_extension(exc)

if HAS_EXTENSION:
    from . import op_registration

    op_registration.register()  # their fake, Autograd and Autocast kernels

_warned = set()


def warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def use_extension(*tensors: torch.Tensor, op: str = "ldr_flip") -> bool:
    """True when the compiled kernels of ``op`` can serve these tensors; otherwise warn once and
    let the caller fall back to the pure-PyTorch oracle (flip_loss.oracle)."""
    if not HAS_EXTENSION:
        warn_once(
            "no-ext", f"flip_loss: {IMPORT_ERROR}; falling back to the slow pure-PyTorch oracle (flip_loss.oracle)"
        )
        return False
    for t in tensors:
        if t.device.type not in KERNEL_DEVICES.get(op, ()):
            warn_once(
                f"dev-{op}-{t.device.type}",
                f"flip_loss: no compiled {op} kernels for device '{t.device.type}' in this build; "
                "using the pure-PyTorch oracle (flip_loss.oracle)",
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
    # FLIP_LOSS_CUDA_KERNELS=0 sends CUDA tensors to the pure-PyTorch oracle instead (a way
    # around a CUDA-kernel problem on some GPU without rebuilding).
    use_cuda = os.environ.get("FLIP_LOSS_CUDA_KERNELS", "1") not in ("0", "false", "off", "no")
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
