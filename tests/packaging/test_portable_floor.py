"""The oldest torch flip-loss runs on (torch_releases.PORTABLE_MIN_TORCH): the package imports
without its compiled kernels, says once why, and computes LDR-FLIP and HDR-FLIP (values and both
gradients) and the metric with the portable path, matching the compiled kernels' results within
the documented float64 agreement (docs/algorithm.md §7.1).

It runs in .venv-portable-floor (``scripts/setup.sh --with-portable-floor-torch``; scripts/test.sh's
full tier runs this module there) and skips with any torch the kernels serve. The kernels' results
come from a child process of the environment that has them: ``FLIP_LOSS_KERNELS_PYTHON``, else
.venv's Python, on the same inputs (an .npz file both sides read)."""

import json
import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import flip_loss
from flip_loss import torch_releases

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    torch_releases.kernels_unsupported_reason(torch.__version__) is None,
    reason="the compiled kernels serve this torch: this module is for a torch older than they need",
)

# The kernels and the portable path agree to about 1e-14 in values and 1e-13 relative in gradients
# in float64 (measured here: 8e-15 and 1e-13): values within 1e-13 of each other, gradients within
# 1e-11 of their largest magnitude.
VALUE_BOUND = 1e-13
GRADIENT_BOUND = 1e-11

# What both sides compute from the inputs: the LDR and HDR maps, the gradients of their means with
# respect to both images, and the metric's pooled mean.
COMPUTE = """
import json, sys
import numpy as np
import torch
import flip_loss

def results(arrays):
    out = {}
    for kind in ("ldr", "hdr"):
        test = torch.from_numpy(arrays[kind + "_test"]).requires_grad_()
        ref = torch.from_numpy(arrays[kind + "_ref"]).requires_grad_()
        error = flip_loss.hdr_flip(test, ref) if kind == "hdr" else flip_loss.ldr_flip(test, ref)
        grad_test, grad_ref = torch.autograd.grad(error.mean(), (test, ref))
        out[kind + "_map"], out[kind + "_grad_test"], out[kind + "_grad_ref"] = error, grad_test, grad_ref
    metric = flip_loss.FLIPMetric()
    metric.update(torch.from_numpy(arrays["ldr_test"]), torch.from_numpy(arrays["ldr_ref"]))
    out["metric_mean"] = torch.tensor(metric.compute().pooled.mean)
    return {name: value.detach().numpy() for name, value in out.items()}
"""
KERNELS_CHILD = (
    COMPUTE
    + """
assert flip_loss.HAS_EXTENSION, flip_loss._ops.IMPORT_ERROR
np.savez(sys.argv[2], **results(np.load(sys.argv[1])))
"""
)


def kernels_python():
    python = os.environ.get("FLIP_LOSS_KERNELS_PYTHON") or str(ROOT / ".venv" / "bin" / "python")
    if not os.path.exists(python):
        pytest.skip(f"no Python with the compiled kernels to compare with ({python}; set FLIP_LOSS_KERNELS_PYTHON)")
    return python


def inputs(path):
    rng = np.random.default_rng(11)
    arrays = {
        "ldr_test": rng.random((2, 3, 24, 20)),
        "ldr_ref": rng.random((2, 3, 24, 20)),
        "hdr_test": rng.random((2, 3, 24, 20)) * 4.0,
        "hdr_ref": rng.random((2, 3, 24, 20)) * 4.0,
    }
    np.savez(path, **arrays)
    return dict(np.load(path))


def test_the_oldest_torch_imports_the_package_and_says_why_there_are_no_kernels():
    assert not flip_loss.HAS_EXTENSION
    info = flip_loss.info()
    assert info["install"].startswith("pure Python") and torch.__version__ in info["install"]
    assert info["devices"]["cpu"] == "portable path"


def test_the_portable_path_on_the_oldest_torch_matches_the_kernels(tmp_path):
    arrays = inputs(tmp_path / "inputs.npz")
    namespace = {}
    exec(COMPUTE, namespace)
    flip_loss._ops._warned.discard("no-ext")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        portable = namespace["results"](arrays)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and torch.__version__ in said[0] and "portable pure-PyTorch path" in said[0], said

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    child = subprocess.run(
        [kernels_python(), "-c", KERNELS_CHILD, tmp_path / "inputs.npz", tmp_path / "kernels.npz"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    kernels = dict(np.load(tmp_path / "kernels.npz"))
    assert sorted(kernels) == sorted(portable)
    report = {}
    for name, value in portable.items():
        bound = GRADIENT_BOUND * float(np.abs(kernels[name]).max()) if "grad" in name else VALUE_BOUND
        report[name] = float(np.abs(value - kernels[name]).max())
        assert value.shape == kernels[name].shape and report[name] <= bound, json.dumps(report)
    assert float(portable["ldr_map"].mean()) > 0.0 and float(np.abs(portable["hdr_grad_test"]).max()) > 0.0
