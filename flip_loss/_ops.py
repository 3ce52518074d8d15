"""Loads the compiled operator library, which registers ``torch.ops.flip.*``: ``flip_loss._C`` (the
ops' schemas and CPU kernels; needs no CUDA library) and, with a CUDA build of torch,
``flip_loss._C_cuda`` (the CUDA kernels of the same ops); and decides, once per device, whether
those kernels serve it. Where they do not (an install without them, a torch older than they need,
MPS, XPU, a ROCm GPU, an NVIDIA GPU this build holds no code for) the portable path, the
pure-PyTorch ``flip_loss.oracle``, computes instead, after one warning that names the device and
why: the same rule for eager calls, torch.compile (the decision is a constant there), TorchScript
and raw ``torch.ops.flip.ldr_flip``/``hdr_flip`` calls (``op_registration``), the metric and the
command line. ``info()`` reports it."""

import json
import os
import sys
import warnings
from typing import Dict, Optional, Tuple

import torch

from . import environment, torch_releases
from .tensor_values import beyond_first_order_reverse

HAS_EXTENSION = False
IMPORT_ERROR = None
# Keys of the warnings already given (warn_once): each reason for a fallback is said once.
_warned = set()
_HERE = os.path.dirname(os.path.abspath(__file__))
# Written by setup.py into an install made without the compiled kernels: {"why": "..."}.
_INSTALL_RECORD = "_install.json"
_PORTABLE_PATH = "the portable pure-PyTorch path (flip_loss.oracle)"


def _user_stacklevel() -> int:
    """The stacklevel of warn_once's warning that names the first frame outside flip_loss and torch
    (the user's line, however deep the package or torch.compile called from it)."""
    internal = (_HERE + os.sep, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    frame, level = sys._getframe(2), 2  # warn_once's caller
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(internal):
        frame, level = frame.f_back, level + 1
    return 2 if frame is None else level


def warn_once(key: str, message: str, stacklevel: Optional[int] = None) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel or _user_stacklevel())


_C_BUILT_BUT_BROKEN = False


def _fallback_message() -> str:
    return f"flip_loss: {IMPORT_ERROR}; every device uses {_PORTABLE_PATH}"


def _installed_without_kernels() -> Optional[str]:
    """Why this install was made without the compiled kernels (setup.py's record), or None."""
    try:
        with open(os.path.join(_HERE, _INSTALL_RECORD), encoding="utf-8") as record:
            return str(json.load(record)["why"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _explain_missing_extension(exc: ImportError) -> str:
    """Why ``flip_loss._C`` is missing, and what to do, in words a user can act on. The usual
    cause is a source checkout that was never built, imported instead of an installed copy because
    the current directory comes first on ``sys.path`` (Python then reports a confusing 'circular
    import')."""
    global _C_BUILT_BUT_BROKEN
    built = [f for f in os.listdir(_HERE) if f.startswith("_C.") and f.endswith((".so", ".pyd"))]
    _C_BUILT_BUT_BROKEN = bool(built)
    if built:  # a binary is there but does not load: usually built against another torch
        return (
            f"flip_loss._C in {_HERE} could not be loaded ({exc}); it was probably built against "
            f"another torch than the installed {torch.__version__}: rebuild it with "
            "'pip install --no-build-isolation .' (or '-e .' in a checkout)"
        )
    why = _installed_without_kernels()
    if why is not None:
        return (
            f"this flip-loss was installed without its compiled kernels ({why}); docs/install.md says "
            "what a reinstall needs for them"
        )
    message = f"the compiled extension flip_loss._C is not built in {_HERE}"
    if os.path.exists(os.path.join(os.path.dirname(_HERE), "setup.py")):
        message += (
            " (a source checkout: build it there with 'pip install --no-build-isolation -e .', "
            "or run from another directory to use an installed copy"
        )
        try:
            from importlib import metadata

            dist = metadata.distribution("flip-loss")
            location = os.path.abspath(str(dist.locate_file("")))
            if os.path.commonpath([location, _HERE]) != os.path.dirname(_HERE):
                message += f", such as the one installed in {location}"
        except Exception:  # no installed copy, or metadata unreadable: nothing more to say
            pass
        message += ")"
    return message


_TOO_OLD_FOR_KERNELS = torch_releases.kernels_unsupported_reason(torch.__version__)
if _TOO_OLD_FOR_KERNELS is not None:
    # Never loaded: the binary is built on PyTorch's stable ABI, which this torch predates.
    IMPORT_ERROR = _TOO_OLD_FOR_KERNELS
else:
    try:
        from . import _C  # noqa: F401  (importing registers the ops' schemas and CPU kernels)

        HAS_EXTENSION = True
    except ImportError as exc:  # exercised only on unbuilt checkouts and broken installs
        IMPORT_ERROR = _explain_missing_extension(exc)
        if _C_BUILT_BUT_BROKEN:
            # A binary that is there and does not load is a broken install, not an unbuilt checkout:
            # said at once, not only at the first op that falls back (which then says nothing more).
            warn_once("no-ext", _fallback_message(), stacklevel=2)


def extension_function(name: str):
    """The function ``name`` of ``flip_loss._C`` (its helpers for image files and pooling), or None:
    no extension, or one built before it (the callers then use NumPy or Pillow)."""
    if not HAS_EXTENSION:
        return None
    from . import _C

    return getattr(_C, name, None)


def _cuda_kernels_wanted() -> bool:
    # FLIP_LOSS_CUDA_KERNELS=0 sends CUDA tensors to the portable path instead (a way around a
    # CUDA-kernel problem on some GPU, or a CUDA module that does not load, without rebuilding);
    # the CUDA module is then not even loaded.
    return environment.switch("FLIP_LOSS_CUDA_KERNELS", True)


# Why flip_loss._C_cuda, the CUDA kernels, did not load although it is there (None when it loaded,
# is absent, or was not wanted); said at the first call on a CUDA device.
CUDA_IMPORT_ERROR = None
_C_cuda = None


def _load_cuda_kernels() -> None:
    """Imports flip_loss._C_cuda, which registers the CUDA kernels for the schemas _C defined (so
    _C comes first). Only with a CUDA build of torch: a CPU-only torch has no libtorch_cuda nor CUDA
    runtime for it to load with, and a ROCm torch (whose GPUs are "cuda" devices too) runs no
    NVIDIA code. Its failure leaves the CPU kernels working; the first call on a CUDA device says
    why, naming the device."""
    global CUDA_IMPORT_ERROR, _C_cuda
    if not HAS_EXTENSION or not _cuda_kernels_wanted() or torch.version.cuda is None or torch.version.hip:
        return
    if not any(f.startswith("_C_cuda.") and f.endswith((".so", ".pyd")) for f in os.listdir(_HERE)):
        return  # built without CUDA kernels: CPU kernels only, nothing went wrong
    try:
        from . import _C_cuda as module  # importing registers the ops' CUDA kernels
    except ImportError as exc:
        CUDA_IMPORT_ERROR = f"the CUDA kernels flip_loss._C_cuda in {_HERE} could not be loaded ({exc})"
        return
    _C_cuda = module


_load_cuda_kernels()


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


# op -> device types with compiled kernels; fixed at import so that torch.compile sees constants.
KERNEL_DEVICES = _devices_with_kernels()

# CUDA device index -> why the kernels cannot run there (None: they can), decided at the first call
# on the device and kept for the process. Strings only: nothing in it depends on the mode, dtype or
# device default of the call that decided.
_cuda_verdicts: Dict[int, Optional[str]] = {}
# The CUDA runtime's answers that mean "no image of these kernels runs on this GPU".
_NO_IMAGE_ERRORS = frozenset(
    {
        "cudaErrorNoKernelImageForDevice",
        "cudaErrorInvalidDeviceFunction",
        "cudaErrorInvalidKernelImage",
        "cudaErrorUnsupportedPtxVersion",
        "cudaErrorInvalidPtx",
        "cudaErrorJitCompilerNotFound",
        "cudaErrorInvalidSource",
    }
)

# The CUDA runtime's answers that mean "there is no GPU here to ask about".
_NO_DEVICE_ERRORS = frozenset({"cudaErrorInsufficientDriver", "cudaErrorNoDevice"})


def _compiled_architectures() -> Optional[Tuple[Tuple[int, int], ...]]:
    """The compute capabilities the loaded CUDA kernels were compiled for ((8, 0), (8, 6), ...), or
    None without them."""
    if _C_cuda is None:
        return None
    listed = [int(a) for a in _C_cuda.architectures().split(",") if a.strip()]
    return tuple((a // 100, a % 100 // 10) for a in listed)


def _spelled_capabilities(capabilities) -> str:
    return ", ".join(f"{major}.{minor}" for major, minor in capabilities) or "none"


def _cuda_device_verdict(index: int) -> Optional[str]:
    """Why the loaded CUDA kernels cannot run on CUDA device ``index`` (None when they can), from
    the CUDA runtime itself: whether the build holds SASS of the GPU's generation or PTX it can
    JIT. Asked once per device; an unexpected error of the query raises and decides nothing."""
    if index in _cuda_verdicts:
        return _cuda_verdicts[index]
    error, _, _ = _C_cuda.kernel_image(index)
    if error in _NO_DEVICE_ERRORS:
        # No GPU to run anything on, so no real tensor can be there: the call traces fake CUDA
        # tensors (torch.compile, shape propagation), which the kernels' fake kernels serve. Not kept:
        # it decides nothing about a device.
        return None
    if error is None:
        verdict = None
    elif error in _NO_IMAGE_ERRORS:
        major, minor = torch.cuda.get_device_capability(index)
        verdict = (
            f"this build's CUDA kernels hold no code it can run (compiled for compute capabilities "
            f"{_spelled_capabilities(_compiled_architectures())}; the CUDA runtime says {error}): rebuild "
            f"for it with TORCH_CUDA_ARCH_LIST=\"{major}.{minor}\" set ('pip install --no-build-isolation .', "
            "docs/install.md)"
        )
    else:
        raise RuntimeError(f"flip_loss: asking the CUDA runtime whether cuda:{index} runs the kernels failed: {error}")
    _cuda_verdicts[index] = verdict
    return verdict


def _device_label(device_type: str, index: Optional[int]) -> str:
    """The device as a user knows it: 'cuda:0 (NVIDIA H100 80GB HBM3, compute capability 9.0)'."""
    if device_type != "cuda":
        return device_type if index is None else f"{device_type}:{index}"
    try:
        if index is None:
            index = torch.cuda.current_device()
        name = torch.cuda.get_device_name(index)
        if torch.version.hip:
            return f"cuda:{index} ({name})"
        major, minor = torch.cuda.get_device_capability(index)
        return f"cuda:{index} ({name}, compute capability {major}.{minor})"
    except Exception:  # no device to ask (a CPU-only machine naming one): the name alone
        return "cuda" if index is None else f"cuda:{index}"


def _cuda_reason(op: str, index: Optional[int]) -> Optional[str]:
    if torch.version.hip:
        return (
            f"torch {torch.__version__} is a ROCm build (HIP {torch.version.hip}), whose GPUs are 'cuda' "
            "devices, and flip-loss's GPU kernels are CUDA code for NVIDIA GPUs only"
        )
    if "cuda" in KERNEL_DEVICES.get(op, ()):
        return _cuda_device_verdict(torch.cuda.current_device() if index is None else index)
    if not _cuda_kernels_wanted():
        return "FLIP_LOSS_CUDA_KERNELS=0 turns the CUDA kernels off"
    if CUDA_IMPORT_ERROR is not None:
        return (
            f"{CUDA_IMPORT_ERROR}; they were probably built against another CUDA release than torch "
            f"{torch.__version__}'s (CUDA {torch.version.cuda}): rebuild with an nvcc of that release "
            "('pip install --no-build-isolation .'), or set FLIP_LOSS_CUDA_KERNELS=0 to skip them. The CPU "
            "kernels are unaffected"
        )
    return (
        "this build of flip-loss has no CUDA kernels (it was built without nvcc, or with FLIP_LOSS_CUDA=0): "
        "rebuild with the CUDA toolkit's nvcc on the PATH ('pip install --no-build-isolation .')"
    )


def _why_not(op: str, device_type: str, index: Optional[int]) -> Optional[Tuple[str, str]]:
    """(warning key, reason) when the compiled ``op`` does not serve this device, else None. The
    key says which warnings are one: a missing extension is said once for every device, else once
    per device."""
    if not HAS_EXTENSION:
        return "no-ext", str(IMPORT_ERROR)
    if device_type == "meta":  # the ops' Meta kernels give shapes and dtypes
        return None
    if device_type == "cuda":
        reason = _cuda_reason(op, index)
        if reason is None:
            return None
    elif device_type in KERNEL_DEVICES.get(op, ()):
        return None
    else:
        reason = f"flip-loss has compiled kernels for CPUs and NVIDIA GPUs (CUDA) only, none for {device_type}"
    label = _device_label(device_type, index)
    return f"dev-{label}", f"{label}: {reason}"


def fallback_notice(op: str, device_type: str, index: Optional[int] = None) -> Optional[Tuple[str, str]]:
    """(key, message) of the warning that the compiled ``op`` does not serve this device and the
    portable path computes there instead (said once per key: ``warn_once``), or None when the
    kernels serve it."""
    why = _why_not(op, device_type, index)
    if why is None:
        return None
    key, reason = why
    where = "every device uses" if key == "no-ext" else "it uses"
    return key, f"flip_loss: {reason}; {where} {_PORTABLE_PATH}"


def _constant_under_compile(function):
    """torch.compile calls the function while it traces and keeps its result as a constant: the
    decision (and its warning) happens then, and the compiled code has no branch on it. This is
    what torch.compiler.assume_constant_result does (torch 2.1-2.15; tests/api/test_portable_fallback.py
    holds the two alike) without importing torch._dynamo, which takes a second or more, into every
    process that imports flip_loss."""
    function._dynamo_marked_constant = True
    return function


@_constant_under_compile
def kernels_run_on(op: str, device_type: str, index: Optional[int]) -> bool:
    """Whether the compiled ``op`` serves tensors on this device; if not, warns once (the
    ``fallback_notice``) and the caller computes with the portable path."""
    notice = fallback_notice(op, device_type, index)
    if notice is None:
        return True
    warn_once(*notice)
    return False


if HAS_EXTENSION:
    from . import op_registration

    op_registration.register(kernels_run_on)  # their fake, Autograd and Autocast kernels


def use_extension(*tensors: torch.Tensor, op: str = "ldr_flip") -> bool:
    """True when the compiled kernels of ``op`` can serve these tensors; otherwise warn once and
    let the caller fall back to the portable path (flip_loss.oracle)."""
    if not HAS_EXTENSION:
        return kernels_run_on(op, "cpu", None)
    return all(kernels_run_on(op, t.device.type, t.device.index) for t in tensors)


def kernels_serve(op: str, *tensors: torch.Tensor) -> bool:
    """Whether the compiled ``op`` serves these tensors: on a device with kernels (``use_extension``), or on
    the meta device, where the ops' Meta kernels give the result's shape and dtype (the
    pure-PyTorch oracle would work too, but slowly and with a warning). Not where the call is
    differentiated beyond first-order reverse mode (forward mode, grad of grad), which the ops'
    autograd nodes cannot follow and the portable path can: no warning, nothing was missing."""
    if HAS_EXTENSION and all(t.device.type == "meta" for t in tensors):
        return True
    if beyond_first_order_reverse(*tensors):
        return False
    return use_extension(*tensors, op=op)


def info(*devices) -> dict:
    """What this install computes with, per device: see ``flip_loss.info``."""
    if not devices:
        devices = ["cpu"]
        if torch.cuda.is_available():
            devices.append(f"cuda:{torch.cuda.current_device()}")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            devices.append("mps")
    kernels = {}
    for device in devices:
        device = torch.device(device)
        try:
            why = _why_not("ldr_flip", device.type, device.index)
        except RuntimeError as exc:  # the CUDA runtime could not answer (no such device)
            kernels[str(device)] = f"undecided: {exc}"
            continue
        if why is None:
            kernels[str(device)] = "compiled kernels"
        else:
            kernels[str(device)] = "portable path" + ("" if why[0] == "no-ext" else f": {why[1]}")
    if HAS_EXTENSION:
        install = "compiled kernels (flip_loss._C" + (", flip_loss._C_cuda" if _C_cuda is not None else "") + ")"
    else:
        install = f"pure Python, no compiled kernels: {IMPORT_ERROR}"
    cuda = _compiled_architectures()
    return {
        "torch": torch.__version__,
        "install": install,
        "cuda_architectures": None if cuda is None else _spelled_capabilities(cuda),
        "devices": kernels,
        "portable_path": _PORTABLE_PATH,
    }
