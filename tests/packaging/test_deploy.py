"""Deployment: the installed C++ package, the public header, the C++ examples, torch.export and
AOTInductor.

(a) builds the CMake project (shared with test_cpp.py), installs it, builds examples/cpp against that install with find_package(flip_loss)
    (no torch path given: the package config finds the torch it was built with), and checks
    flip_infer (values, pooled statistics, raw and PNG maps) and flip_train (the loss falls, the
    trained TorchScript model reloads in Python) against Python, and that the installed library and
    the programs load the CUDA libraries of torch's nvidia-* wheels (a torch from PyPI);
(b) runs tests/cpp/header_api.cpp (every function of <flip_loss/flip_loss.h>) on tensors saved here
    and compares with Python;
(c) torch.export round trips (export, save, load, run; dynamic H and W) of the op and of FLIPLoss;
(d) AOTInductor: aoti_compile_and_package of an exported model that calls flip.ldr_flip, loaded
    with aoti_load_package (the custom op runs through AOTI's proxy executor).

Build directories (kept between runs; only what changed is rebuilt), under build/torch-<release>/
unless moved (tests/helpers/build_dirs.py): FLIP_LOSS_CPP_BUILD_DIR (cpp), FLIP_LOSS_DEPLOY_PREFIX
(deploy-install), FLIP_LOSS_EXAMPLES_BUILD_DIR (examples-cpp).
"""

import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import flip_loss
from flip_loss import colormaps
from flip_loss.imageio import load_image, save_png

from build_dirs import build_dir
from cpp_tools import (
    ROOT,
    Tensors,
    executable,
    generator_args,
    libraries_not_from_wheels,
    run,
    script,
    stale_extension_note,
    torch_wheel_library_dirs,
)
from op_names import PRODUCT_OPS

PREFIX = build_dir("FLIP_LOSS_DEPLOY_PREFIX", "deploy-install")
EXAMPLES_BUILD_DIR = build_dir("FLIP_LOSS_EXAMPLES_BUILD_DIR", "examples-cpp")

needs_cmake = pytest.mark.skipif(
    shutil.which("cmake") is None, reason="cmake is not on PATH: cannot build the C++ library and examples"
)

pytestmark = pytest.mark.slow  # builds C++ programs (minutes)


def _cache_value(cache: Path, key: str):
    if not cache.is_file():
        return None
    for line in cache.read_text(errors="replace").splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    return None


# ---- session fixtures: install, build the examples (cpp_build is in conftest.py) ------------------


@pytest.fixture(scope="session")
def installed(cpp_build):
    """cmake --install into PREFIX; returns PREFIX."""
    run(["cmake", "--install", cpp_build, "--prefix", PREFIX], "install into " + str(PREFIX))
    return PREFIX


@pytest.fixture(scope="session")
def examples(installed):
    """examples/cpp configured with CMAKE_PREFIX_PATH = the install prefix only, and built."""
    cache = EXAMPLES_BUILD_DIR / "CMakeCache.txt"
    expected_dir = installed / "lib" / "cmake" / "flip_loss"
    found = _cache_value(cache, "flip_loss_DIR")
    if found is not None and Path(found).resolve() != expected_dir.resolve():
        shutil.rmtree(EXAMPLES_BUILD_DIR)  # configured against another install
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_PREFIX_PATH", "Torch_DIR")}
    run(
        [
            "cmake",
            "-S",
            ROOT / "examples" / "cpp",
            "-B",
            EXAMPLES_BUILD_DIR,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_PREFIX_PATH={installed}",
            *generator_args(),
        ],
        "configure examples/cpp",
        env=env,
    )
    found = _cache_value(cache, "flip_loss_DIR")
    assert found is not None and Path(found).resolve() == expected_dir.resolve(), (
        f"examples/cpp found flip_loss in {found}, not in the test's install {expected_dir}"
    )
    run(["cmake", "--build", EXAMPLES_BUILD_DIR, "-j2"], "build examples/cpp")
    return EXAMPLES_BUILD_DIR


@pytest.fixture(scope="session")
def exported_modules(tmp_path_factory):
    """flip_loss.pt and flip_model.pt from examples/export_torchscript.py (ppd 40)."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import export_torchscript
    finally:
        sys.path.pop(0)
    out = tmp_path_factory.mktemp("torchscript")
    loss_path, model_path = export_torchscript.export(str(out), pixels_per_degree=40.0)
    return {"loss": Path(loss_path), "model": Path(model_path), "ppd": 40.0, "module": export_torchscript}


@pytest.fixture(scope="session")
def png_pair(tmp_path_factory):
    """Two small 8-bit PNGs: crops of the bundled example pair (reference, test), and a tinted copy
    of the reference crop (a degradation a small model can learn in a few steps)."""
    out = tmp_path_factory.mktemp("png")
    ref = load_image(ROOT / "flip_loss" / "data" / "example_reference.png")[:, 100:140, 180:236]
    test = load_image(ROOT / "flip_loss" / "data" / "example_test.png")[:, 100:140, 180:236]
    tint = (ref * torch.tensor([0.8, 0.9, 1.0]).view(3, 1, 1) + 0.05).clamp(0, 1)
    paths = {}
    for name, img in (("reference", ref), ("test", test), ("tinted", tint)):
        path = out / f"{name}.png"
        save_png(path, (img.permute(1, 2, 0).numpy() * 255 + 0.5).astype(np.uint8))
        paths[name] = path
    return paths


def _run_program(cmd, timeout=600):
    proc = subprocess.run(
        [str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"{Path(str(cmd[0])).name} failed (exit {proc.returncode}):\n{proc.stdout}"
    return proc.stdout


# ---- (a) the installed package and the examples -------------------------------------------------


@needs_cmake
def test_installed_package_layout_and_rpath(installed):
    for rel in (
        "include/flip_loss/flip_loss.h",
        "lib/cmake/flip_loss/flip_lossConfig.cmake",
        "lib/cmake/flip_loss/flip_lossConfigVersion.cmake",
        "lib/cmake/flip_loss/flip_lossTargets.cmake",
    ):
        assert (installed / rel).is_file(), f"{rel} is not installed"
    libs = sorted((installed / "lib").glob("libflip_ops.so*"))
    assert libs, "libflip_ops.so is not installed"
    targets = (installed / "lib/cmake/flip_loss/flip_lossTargets.cmake").read_text()
    assert "flip_loss::flip_ops" in targets
    assert "LINKER:--no-as-needed" in targets, "the --no-as-needed link option is not exported"
    assert str(Path(torch.__file__).parent) not in targets, "the export hard-codes this machine's torch paths"
    config = (installed / "lib/cmake/flip_loss/flip_lossConfig.cmake").read_text()
    assert "find_dependency(Torch" in config
    # The installed library loads in a fresh process with no torch imported and no
    # LD_LIBRARY_PATH: its RUNPATH finds torch's libraries; loading it registers the ops.
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    snippet = (
        "import ctypes, sys; ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL); "
        "import torch; print(torch.ops.flip.ldr_flip.default._schema); "
        "print(sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith('flip')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", snippet, str(installed / "lib" / "libflip_ops.so")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, f"the installed libflip_ops.so does not load:\n{proc.stdout}"
    assert "flip::ldr_flip(Tensor test, Tensor reference" in proc.stdout
    # The product's ops only: no test-only op (the GPU emulator is built by the tests, tests/emulator).
    assert proc.stdout.splitlines()[-1] == str(sorted(f"flip::{n}" for n in PRODUCT_OPS)), proc.stdout


@needs_cmake
def test_programs_load_the_cuda_libraries_torch_was_installed_with(cpp_build, installed, examples):
    """With a torch from PyPI, the built library and programs resolve every CUDA library that torch's
    nvidia-* wheels hold (libnvrtc, libcudart, libnccl, ...) from those wheels, as `import torch`
    does, never from a CUDA toolkit or the system path (older copies that torch cannot run on)."""
    wheel_dirs = torch_wheel_library_dirs()
    if not wheel_dirs:
        pytest.skip("this torch has no nvidia-* wheels next to it (a CPU-only build or not from PyPI)")
    binaries = [
        installed / "lib" / "libflip_ops.so",
        executable(examples, "flip_infer"),
        executable(examples, "flip_train"),
        executable(cpp_build, "flip_run_scripted"),
        executable(cpp_build, "flip_header_api"),
    ]
    for binary in binaries:
        elsewhere, resolved = libraries_not_from_wheels(binary, wheel_dirs)
        assert resolved > 0, f"{binary.name} needs none of the wheels' libraries: is it linked against torch?"
        assert not elsewhere, f"{binary.name} loads these from outside torch's nvidia-* wheels: {elsewhere}"


_POOLED_KEYS = (
    ("Mean", "mean"),
    ("Weighted median", "weighted_median"),
    ("1st weighted quartile", "weighted_quartile_1"),
    ("3rd weighted quartile", "weighted_quartile_3"),
    ("Min", "min"),
    ("Max", "max"),
)


def _parse_pooled(stdout):
    values = {}
    for label, key in _POOLED_KEYS:
        m = re.search(rf"^\s+{re.escape(label)}: ([-+0-9.eE]+)$", stdout, re.MULTILINE)
        assert m, f"flip_infer printed no '{label}' line:\n{stdout}"
        values[key] = float(m.group(1))
    return values


@needs_cmake
def test_flip_infer_matches_python(examples, exported_modules, png_pair, tmp_path):
    ppd = exported_modules["ppd"]
    ref_t = load_image(png_pair["reference"])
    test_t = load_image(png_pair["test"])
    h, w = ref_t.shape[-2:]
    expected = flip_loss.ldr_flip(test_t, ref_t, ppd, eps=0.0)[0]  # H x W, as the CLI computes it
    expected_pool = flip_loss.pool(expected)
    note = stale_extension_note()

    exe = executable(examples, "flip_infer")
    out_png, out_raw = tmp_path / "map.png", tmp_path / "map.f32"
    stdout = _run_program(
        [
            exe,
            "--module",
            exported_modules["loss"],
            "--reference",
            png_pair["reference"],
            "--test",
            png_pair["test"],
            "--output",
            out_png,
            "--raw",
            out_raw,
            "--digits",
            "10",
        ]
    )
    print(stdout)
    assert f"Pixels per degree: {round(ppd)}" in stdout
    printed = _parse_pooled(stdout)

    raw = torch.from_numpy(np.fromfile(out_raw, dtype=np.float32))
    assert raw.numel() == h * w, f"raw map has {raw.numel()} values, expected {h} x {w}"
    raw = raw.view(h, w)
    diff = (raw - expected).abs().max().item()
    assert diff <= 1e-6, f"flip_infer map vs flip_loss.ldr_flip: max |diff| = {diff:.3g}{note}"

    # The printed values are flip_loss::pool of the C++ map: equal to flip_loss.pool of that same map
    # (to the 10 printed decimals), and within the map tolerance of Python's own pipeline.
    raw_pool = flip_loss.pool(raw)
    for key, value in printed.items():
        assert abs(value - getattr(raw_pool, key)) <= 1e-10, f"{key}: printed {value} vs pool(raw map)"
        assert abs(value - getattr(expected_pool, key)) <= 2e-6, f"{key}: printed {value} vs Python {expected_pool}"

    # The magma PNG: exactly flip_loss.colormaps.apply_colormap of the C++ map, and within one
    # level of Python's map.
    png = np.asarray(load_image(out_png).permute(1, 2, 0).numpy() * 255 + 0.5, dtype=np.uint8)
    assert png.shape == (h, w, 3)
    np.testing.assert_array_equal(png, colormaps.apply_colormap(raw.numpy()))
    assert np.abs(png.astype(int) - colormaps.apply_colormap(expected.numpy()).astype(int)).max() <= 1

    # Without a module: the header's flip_loss::ldr_flip (eps 0), grey map.
    out_grey, out_raw2 = tmp_path / "grey.png", tmp_path / "map2.f32"
    stdout2 = _run_program(
        [
            exe,
            "--ppd",
            ppd,
            "--reference",
            png_pair["reference"],
            "--test",
            png_pair["test"],
            "--no-magma",
            "--output",
            out_grey,
            "--raw",
            out_raw2,
            "--digits",
            "10",
        ]
    )
    assert "flip_loss::ldr_flip" in stdout2
    raw2 = torch.from_numpy(np.fromfile(out_raw2, dtype=np.float32)).view(h, w)
    assert torch.equal(raw2, raw), "the C++ API and the TorchScript module give different maps"
    assert _parse_pooled(stdout2) == printed
    grey = np.asarray(load_image(out_grey)[0].numpy() * 255 + 0.5, dtype=np.uint8)
    np.testing.assert_array_equal(grey, colormaps.to_grey_uint8(raw.numpy()))

    # Errors the user can act on exit with 2 and one message.
    proc = subprocess.run(
        [str(exe), "--reference", str(png_pair["reference"]), "--test", str(tmp_path / "nope.png")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "flip_infer: error: cannot read" in proc.stdout, proc.stdout


def _losses(stdout):
    steps = [float(v) for v in re.findall(r"^step\s+\d+/\d+\s+FLIP loss ([0-9.eE+-]+)$", stdout, re.MULTILINE)]
    m = re.search(r"^final FLIP loss ([0-9.eE+-]+)", stdout, re.MULTILINE)
    assert steps and m, f"flip_train printed no losses:\n{stdout}"
    return steps, float(m.group(1))


@needs_cmake
def test_flip_train_image_loss_falls(examples, png_pair, tmp_path):
    ppd = 40.0
    stdout = _run_program(
        [
            executable(examples, "flip_train"),
            "--reference",
            png_pair["reference"],
            "--test",
            png_pair["test"],
            "--ppd",
            ppd,
            "--steps",
            20,
            "--output",
            tmp_path / "opt.png",
        ]
    )
    print(stdout)
    steps, final = _losses(stdout)
    assert len(steps) == 20
    # Step 1 is the loss of the start image: FLIP mean with the default eps, as in Python.
    start = flip_loss.ldr_flip(load_image(png_pair["test"]), load_image(png_pair["reference"]), ppd).mean().item()
    assert abs(steps[0] - start) <= 1e-6, f"first loss {steps[0]} vs Python {start}{stale_extension_note()}"
    falls = sum(b < a for a, b in zip(steps, steps[1:]))
    assert falls >= 15, f"the loss fell in only {falls} of 19 steps: {steps}"
    assert final < 0.6 * steps[0], f"the loss did not fall enough: {steps[0]} -> {final}"
    assert (tmp_path / "opt.png").is_file()


@needs_cmake
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")
def test_flip_train_scripted_model_in_cpp(examples, exported_modules, png_pair, tmp_path):
    trained = tmp_path / "trained.pt"
    stdout = _run_program(
        [
            executable(examples, "flip_train"),
            "--model",
            exported_modules["model"],
            "--reference",
            png_pair["reference"],
            "--test",
            png_pair["tinted"],
            "--steps",
            20,
            "--save",
            trained,
        ]
    )
    print(stdout)
    steps, final = _losses(stdout)
    assert len(steps) == 20
    ref = load_image(png_pair["reference"]).unsqueeze(0)
    start = load_image(png_pair["tinted"]).unsqueeze(0)
    model = torch.jit.load(str(exported_modules["model"]))
    with torch.no_grad():
        first = model.training_loss(start, ref).item()
    assert abs(steps[0] - first) <= 1e-6, f"first loss {steps[0]} vs the module in Python {first}"
    assert final < 0.8 * steps[0], f"training did not reduce the loss: {steps}, final {final}"
    # The module trained and saved in C++ loads in Python and gives the loss C++ printed.
    reloaded = torch.jit.load(str(trained))
    with torch.no_grad():
        again = reloaded.training_loss(start, ref).item()
    assert abs(again - final) <= 1e-5, f"reloaded trained model: loss {again}, C++ printed {final}"
    changed = any(not torch.equal(a, b) for a, b in zip(model.parameters(), reloaded.parameters()))
    assert changed, "the saved model's parameters did not change"


def test_magma_header_matches_python_table():
    text = (ROOT / "examples" / "cpp" / "magma.h").read_text()
    body = text[text.index("kMagma[256][3] = {") :]
    entries = [tuple(int(v) for v in m) for m in re.findall(r"\{\s*(\d+),\s*(\d+),\s*(\d+)\}", body)]
    assert len(entries) == 256
    np.testing.assert_array_equal(np.array(entries, dtype=np.uint8), colormaps._lut(colormaps.MAGMA))


# ---- (b) the public header, function by function -----------------------------------------------


@needs_cmake
def test_header_api_matches_python(cpp_build, tmp_path):
    assert flip_loss.HAS_EXTENSION, "flip_loss._C is not built (python setup.py build_ext --inplace)"
    gen = torch.Generator().manual_seed(77)
    n, h, w = 2, 20, 28
    ppd, eps = 40.0, 1e-10
    test = torch.rand(n, 3, h, w, generator=gen)
    reference = torch.rand(n, 3, h, w, generator=gen)
    opponent = torch.cat([torch.rand(n, 1, h, w, generator=gen), torch.rand(n, 2, h, w, generator=gen) - 0.5], dim=1)
    lin_test, lin_reference = torch.rand(n, 3, h, w, generator=gen), torch.rand(n, 3, h, w, generator=gen)
    ach_test, ach_reference = torch.rand(n, 1, h, w, generator=gen), torch.rand(n, 1, h, w, generator=gen)
    pools = {
        "rand32": torch.rand(37, 41, generator=gen),
        "rand64": torch.rand(3, 1, 19, 23, generator=gen, dtype=torch.float64),
        "half": torch.rand(17, 9, generator=gen).half(),
        "ties": torch.randint(0, 5, (31, 29), generator=gen).float() / 4,
        "zero": torch.zeros(5, 6),
        "single": torch.tensor([[0.25]]),
        "wide": torch.rand(1, 1, 300, 400, generator=gen) ** 3,
    }
    inputs = Tensors(
        test=test,
        reference=reference,
        opponent=opponent,
        lin_test=lin_test,
        lin_reference=lin_reference,
        ach_test=ach_test,
        ach_reference=ach_reference,
        params=torch.tensor([ppd, eps], dtype=torch.float64),
        **{"pool_" + k: v for k, v in pools.items()},
    )
    inputs_path, outputs_path = tmp_path / "inputs.pt", tmp_path / "outputs.pt"
    script(inputs).save(str(inputs_path))

    stdout = _run_program([executable(cpp_build, "flip_header_api"), inputs_path, outputs_path])
    print(stdout)
    out = dict(torch.load(str(outputs_path), weights_only=True))
    note = stale_extension_note()

    ops = torch.ops.flip
    t = test.clone().requires_grad_(True)
    r = reference.clone().requires_grad_(True)
    expected_map = ops.ldr_flip(t, r, ppd, "srgb", eps)
    expected_map.sum().backward()
    with torch.no_grad():
        expected = {
            "ldr_flip": expected_map.detach(),
            "ldr_flip_linear": ops.ldr_flip(test, reference, ppd, "linear", eps),
            "ldr_flip_defaults": ops.ldr_flip(test, reference),
            "csf_filter": ops.csf_filter(opponent, ppd),
            "hunt_hyab": ops.hunt_hyab(lin_test, lin_reference, eps),
            "feature_difference": ops.feature_difference(ach_test, ach_reference, ppd, eps),
        }
    for name, value in expected.items():
        assert out[name].shape == value.shape, name
        diff = (out[name] - value).abs().max().item()
        assert diff <= 1e-6, f"{name}: max |C++ header - Python op| = {diff:.3g}{note}"
    for name, grad in (("grad_test", t.grad), ("grad_reference", r.grad)):
        torch.testing.assert_close(out[name], grad, rtol=1e-5, atol=1e-7, msg=lambda m, name=name: f"{name}: {m}{note}")
        assert out[name].abs().max().item() > 0, f"{name} is all zeros"

    # hdr_flip: the header's evenly spaced exposures give flip_loss.hdr_flip's values and gradient.
    ht = (test * 4).requires_grad_(True)
    hmap, hemap = flip_loss.hdr_flip(ht, reference * 4, ppd, "hable", -2.0, 1.0, 4, return_exposure_map=True, eps=eps)
    hmap.sum().backward()
    torch.testing.assert_close(out["hdr_flip"], hmap.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["hdr_exposure_map"], hemap, rtol=0, atol=0)
    torch.testing.assert_close(out["hdr_grad_test"], ht.grad, rtol=1e-4, atol=1e-6)

    # pixels_per_degree and kDefaultPpd: the same doubles as Python.
    cpp_ppd = out["ppd"].tolist()
    assert cpp_ppd[0] == flip_loss.DEFAULT_PPD == flip_loss.pixels_per_degree(0.7, 0.7, 3840)
    assert cpp_ppd[1] == flip_loss.pixels_per_degree(0.5, 0.3, 1920)
    assert cpp_ppd[2] == flip_loss.DEFAULT_PPD

    # pool: exactly flip_loss.pool (the mean to float64 rounding: numpy sums pairwise).
    pools["ldr_flip"] = out["ldr_flip"]
    for name, m in pools.items():
        got = out["pooled_" + name].tolist()
        want = list(flip_loss.pool(m))
        assert got[0] == pytest.approx(want[0], rel=1e-14, abs=1e-15), f"pool({name}).mean: {got[0]} vs {want[0]}"
        assert got[1:] == want[1:], f"pool({name}): C++ {got} vs Python {want}"

    assert out["checks"].tolist() == [1] * 13, (
        f"error-path, autocast and 8-bit code checks failed: {out['checks'].tolist()}"
    )


# ---- (c) torch.export ---------------------------------------------------------------------------


class _OpModule(torch.nn.Module):
    def forward(self, test, reference):
        return torch.ops.flip.ldr_flip(test, reference, 30.0, "srgb", 1e-15)


class _RestoreAndScore(torch.nn.Module):
    """A small model followed by FLIPLoss(reduction="none"): the shape of a deployed pipeline."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randn(self.conv.weight.shape, generator=gen) * 0.1)
            self.conv.bias.zero_()
        self.loss = flip_loss.FLIPLoss(pixels_per_degree=30.0, reduction="none")

    def forward(self, test, reference):
        return self.loss((test + self.conv(test)).clamp(0, 1), reference)


def _dynamic_hw():
    h = torch.export.Dim("H", min=2, max=2048)
    w = torch.export.Dim("W", min=2, max=2048)
    return ({2: h, 3: w}, {2: h, 3: w})


def _flip_nodes(ep):
    return [n for n in ep.graph.nodes if n.op == "call_function" and n.target is torch.ops.flip.ldr_flip.default]


def _pair(n, h, w, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, h, w, generator=gen), torch.rand(n, 3, h, w, generator=gen)


def test_torch_export_op_round_trip_dynamic_hw(ops, tmp_path):
    module = _OpModule()
    test, reference = _pair(2, 24, 32, 0)
    ep = torch.export.export(module, (test, reference), dynamic_shapes=_dynamic_hw())
    assert len(_flip_nodes(ep)) == 1, f"flip.ldr_flip is not in the exported graph:\n{ep.graph}"
    assert "flip.ldr_flip" in ep.graph_module.code
    path = tmp_path / "flip_op.pt2"
    torch.export.save(ep, str(path))
    loaded = torch.export.load(str(path))
    assert len(_flip_nodes(loaded)) == 1
    for shape in ((2, 24, 32), (2, 41, 17), (2, 5, 64)):  # H and W are dynamic
        t, r = _pair(*shape, seed=sum(shape))
        got = loaded.module()(t, r)
        assert got.shape == (shape[0], 1, shape[1], shape[2])
        assert torch.equal(got, module(t, r)), f"exported program differs from eager for {shape}"
    with pytest.raises(Exception):  # noqa: B017 (the guard's error type differs across torch releases) a static dimension is still checked
        loaded.module()(*_pair(3, 24, 32, 1))


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_torch_export_flip_loss_module_with_gradients(ops, tmp_path, reduction):
    module = flip_loss.FLIPLoss(pixels_per_degree=40.0, reduction=reduction)
    test, reference = _pair(1, 20, 24, 5)
    ep = torch.export.export(module, (test, reference), dynamic_shapes=_dynamic_hw())
    assert len(_flip_nodes(ep)) == 1, f"flip.ldr_flip is not in the exported graph:\n{ep.graph}"
    path = tmp_path / f"flip_loss_{reduction}.pt2"
    torch.export.save(ep, str(path))
    loaded = torch.export.load(str(path)).module()
    t, r = _pair(1, 33, 27, 6)
    torch.testing.assert_close(loaded(t, r), module(t, r), rtol=0, atol=0)
    # The exported program is still differentiable (the op's autograd kernel).
    t1, t2 = t.clone().requires_grad_(True), t.clone().requires_grad_(True)
    loaded(t1, r).sum().backward()
    module(t2, r).sum().backward()
    torch.testing.assert_close(t1.grad, t2.grad, rtol=0, atol=0)


# ---- (d) AOTInductor ------------------------------------------------------------------------------


def test_aot_inductor_package_with_custom_op(ops, tmp_path):
    """aoti_compile_and_package compiles the graph around flip.ldr_flip to C++; the custom op
    itself is called through AOTInductor's proxy executor (the dispatcher), so the process that
    loads the package must have the ops registered (import flip_loss here; link flip_ops in C++)."""
    if shutil.which(os.environ.get("CXX", "g++")) is None and shutil.which("c++") is None:
        pytest.skip("no C++ compiler for AOTInductor")
    module = _RestoreAndScore().eval()
    test, reference = _pair(1, 24, 32, 11)
    ep = torch.export.export(module, (test, reference), dynamic_shapes=_dynamic_hw())
    assert len(_flip_nodes(ep)) == 1
    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        package = torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp_path / "flip_model.pt2"))
    print(f"[test_deploy] aoti_compile_and_package: {time.monotonic() - start:.1f} s")
    runner = torch._inductor.aoti_load_package(package)
    with torch.no_grad():
        for shape in ((1, 24, 32), (1, 37, 45)):
            t, r = _pair(*shape, seed=sum(shape))
            got = runner(t, r)
            want = module(t, r)
            assert got.shape == want.shape == (1, 1, shape[1], shape[2])
            # Inductor fuses the convolution's epilogue differently from eager: float32 rounding.
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
