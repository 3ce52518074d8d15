"""The C++ side: builds the CMake project (libflip_ops + tests/cpp) and checks that a scripted
FLIPLoss saved from Python gives, when run by a LibTorch C++ program, the same error map and the
same input gradients as eager Python.

The build goes to build/torch-<release>/cpp (kept between runs; only what changed is rebuilt;
tests/helpers/build_dirs.py). Set FLIP_LOSS_CPP_BUILD_DIR to use another directory.
"""

import subprocess

import pytest
import torch

import flip_loss

from cpp_tools import Tensors, executable, stale_extension_note

pytestmark = pytest.mark.slow  # builds C++ programs (minutes)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
@pytest.mark.parametrize(
    "ppd, weights",
    [(30.0, None), ([20.0, 40.0], [1.0, 3.0])],
    ids=["one-scale", "multi-scale"],  # multi-scale: the C++ autograd of _ldr_flip_multiscale
)
def test_scripted_flip_loss_in_cpp_matches_eager_python(cpp_build, tmp_path, ppd, weights):
    assert flip_loss.HAS_EXTENSION, "flip_loss._C is not built (python setup.py build_ext --inplace)"
    gen = torch.Generator().manual_seed(1234)
    test = torch.rand(2, 3, 24, 32, generator=gen, dtype=torch.float32)
    reference = torch.rand(2, 3, 24, 32, generator=gen, dtype=torch.float32)

    module_path, inputs_path, outputs_path = (tmp_path / n for n in ("module.pt", "inputs.pt", "outputs.pt"))
    loss = flip_loss.FLIPLoss(reduction="none", pixels_per_degree=ppd, ppd_weights=weights)
    torch.jit.script(loss).save(str(module_path))
    torch.jit.script(Tensors(test=test, reference=reference)).save(str(inputs_path))

    exe = executable(cpp_build, "flip_run_scripted")
    proc = subprocess.run(
        [str(exe), str(module_path), str(inputs_path), str(outputs_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{exe.name} failed (exit {proc.returncode}):\n{proc.stdout}"
    print(proc.stdout)

    out = dict(torch.load(str(outputs_path), weights_only=True))  # ((name, tensor), ...)
    assert set(out) == {"map", "grad_test", "grad_reference", "dispatcher_map"}

    # Eager Python, same inputs.
    t = test.clone().requires_grad_(True)
    r = reference.clone().requires_grad_(True)
    expected = flip_loss.ldr_flip(t, r, pixels_per_degree=ppd, ppd_weights=weights)
    expected.sum().backward()

    assert out["map"].shape == expected.shape == (2, 1, 24, 32)
    assert out["map"].dtype == torch.float32
    note = stale_extension_note()
    if weights is not None:  # a multi-scale module: no single ppd to call flip::ldr_flip with
        assert out["dispatcher_map"].numel() == 0
    for name in ("map", "dispatcher_map") if weights is None else ("map",):
        diff = (out[name] - expected.detach()).abs().max().item()
        assert diff <= 1e-6, f"{name}: max |C++ - eager Python| = {diff:.3g} > 1e-6{note}"
    for name, grad in (("grad_test", t.grad), ("grad_reference", r.grad)):
        assert out[name].shape == grad.shape, name
        torch.testing.assert_close(out[name], grad, rtol=1e-5, atol=1e-7, msg=lambda m, name=name: f"{name}: {m}{note}")
        assert out[name].abs().max().item() > 0, f"{name} is all zeros"
        assert torch.isfinite(out[name]).all(), f"{name} has non-finite values"
