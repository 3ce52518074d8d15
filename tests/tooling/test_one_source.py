"""Facts the code states in more than one place, because each language or build system needs its
own copy, are equal everywhere: the options' limits and the tone mappers (C++ limits.h and
tone_mapper.h, which the ops enforce, against flip_loss.constants and the command line), the tone
mappers' coefficients and FLIP's constants (the kernels' C++, exported by flip_loss._C, against
flip_loss.constants and the oracle, bit for bit), the default pixels per degree and eps, the version (Python package, CMake package, C++ header), the CUDA
architectures of a build, the oldest supported torch release (the Python extension's and the CMake
package's stable-ABI target)."""

import math
import re
from pathlib import Path

import pytest
import torch

import flip_loss
from flip_loss import constants, hdr, nvidia, op_checks, options, oracle, torch_releases
from flip_loss.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def limits(ops):
    return flip_loss._C.limits()


def test_the_python_limits_are_the_ones_the_ops_enforce(limits):
    assert limits["min_ppd"] == constants.MIN_PPD
    assert limits["max_ppd"] == constants.MAX_PPD
    assert limits["max_eps"] == constants.MAX_EPS
    assert limits["max_exposures"] == constants.MAX_EXPOSURES
    assert limits["min_exposures"] == constants.MIN_EXPOSURES
    assert limits["sensitivity_planes_per_image"] == op_checks.SENSITIVITY_PLANES_PER_IMAGE
    assert limits["cuda_kept_sensitivities_bytes"] == op_checks.CUDA_KEPT_SENSITIVITIES_BYTES


def test_one_oldest_torch_release():
    """The stable-ABI target of the Python extension (setup.py) and of the CMake package is the
    oldest supported release, and the package requires the supported range."""
    macro = torch_releases.target_version_macro()
    assert int(macro, 16) == (torch_releases.MIN_TORCH[0] << 56) | (torch_releases.MIN_TORCH[1] << 48)
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert re.findall(r"TORCH_TARGET_VERSION=(0x[0-9a-f]+)", cmake) == [macro]
    assert torch_releases.requirement() == "torch>=2.11,<2.16"


def test_the_ops_refuse_what_the_limits_refuse(ops, limits):
    x = torch.rand(1, 3, 8, 8)
    for ppd in (limits["min_ppd"], limits["max_ppd"]):
        assert ops.ldr_flip(x, x, ppd, "srgb", 0.0).shape == (1, 1, 8, 8)
        options.checked_pixels_per_degree(ppd)
    for ppd in (limits["min_ppd"] * 0.999, limits["max_ppd"] * 1.001):
        with pytest.raises(ValueError, match="pixels_per_degree"):
            ops.ldr_flip(x, x, ppd, "srgb", 0.0)
        with pytest.raises(ValueError, match="pixels_per_degree"):
            options.checked_pixels_per_degree(ppd)


def test_one_list_of_tone_mappers(ops, limits):
    assert sorted(limits["tone_mappers"]) == sorted(constants.TONE_MAPPERS)
    assert options.TONE_MAPPERS == constants.TONE_MAPPERS
    actions = {a.dest: a for a in build_parser()._actions}
    assert tuple(actions["tone_mapper"].choices) == constants.TONE_MAPPERS
    # every name is accepted by the ops and the API, in any case
    x = torch.rand(1, 3, 8, 8) * 4
    exposures, counts = torch.tensor([[-1.0, 1.0]]), torch.tensor([2])
    for name in constants.TONE_MAPPERS:
        ops.hdr_flip(x, x, exposures, counts, 67.0, name.upper(), 0.0)
        assert options.tone_mapper(name.upper()) == name
    with pytest.raises(ValueError, match=re.escape(", ".join(f"'{n}'" for n in constants.TONE_MAPPERS))):
        ops.hdr_flip(x, x, exposures, counts, 67.0, "filmic", 0.0)


def bits(values):
    """The exact bits of a float or a nested tuple of floats (== would take -0.0 for 0.0)."""
    if isinstance(values, (tuple, list)):
        return [bits(v) for v in values]
    return float(values).hex()


def test_one_table_of_tone_coefficients(limits):
    """The kernels' coefficients (tone_coefficients, csrc/flip/hdr_pixel.h, by ToneMapper value: the
    C++ compiler's reading of flip_loss/tone_mappers.inc) are the Python package's reading of the
    same rows, which the oracle and the exposure solve use, bit for bit and in the same order."""
    assert limits["tone_mappers"] == tuple(constants.TONE_MAPPER_DISPLAY_NAMES)  # the registry's order
    assert len(limits["tone_coefficients"]) == len(limits["tone_mappers"])
    for name, row in zip(limits["tone_mappers"], limits["tone_coefficients"]):
        assert len(row) == 6
        assert bits(row) == bits(constants.tone_coefficients(name)), name
    assert sorted(constants.TONE_COEFFICIENTS) == sorted(constants.TONE_MAPPERS)
    assert oracle.tone_coefficients is constants.tone_coefficients
    # NVIDIA's double row of each curve is what the kernels' float32 row rounds (within flip-
    # evaluator's six-digit rounding of Hable's: 2e-6), and the drop-in reads it.
    for name in constants.TONE_MAPPERS:
        exact, kernel = nvidia._exact_tone_coefficients(name), constants.tone_coefficients(name)
        assert exact == constants.NVIDIA_TONE_COEFFICIENTS[name]
        assert exact == pytest.approx(kernel, rel=2e-6, abs=2e-6), name


def test_the_named_curves_rows_are_their_sources():
    """The registry's rows of the three published curves, read as C++ reads them, are what their
    sources compute (docs/algorithm.md §5.3): ACES in float32 as flip-evaluator multiplies it out,
    Hable's six-digit rounding in the kernels and, for NVIDIA's loss, its derivation from the curve's
    parameters in double; Reinhard's x / (1 + x)."""
    f = constants._f32
    six = f(0.6) * f(0.6)  # exact in double: a product of two float32 values
    aces = (f(f(six) * f(2.51)), f(f(0.6) * f(0.03)), 0.0, f(f(six) * f(2.43)), f(f(0.6) * f(0.59)), f(0.14))
    assert bits(constants.tone_coefficients("aces")) == bits(aces)
    assert constants.NVIDIA_TONE_COEFFICIENTS["aces"] == (
        0.6 * 0.6 * 2.51,
        0.6 * 0.03,
        0.0,
        0.6 * 0.6 * 2.43,
        0.6 * 0.59,
        0.14,
    )
    assert bits(constants.tone_coefficients("hable")) == bits([f(v) for v in (0.231683, 0.013791, 0, 0.18, 0.3, 0.018)])
    a, b, c, d, e, f_, white = 0.15, 0.50, 0.10, 0.20, 0.02, 0.30, 11.2
    num = (a * f_ - a * e, c * b * f_ - b * e)
    den = (a * f_, b * f_, d * f_ * f_)
    scale = (den[0] * white * white + den[1] * white + den[2]) / (num[0] * white * white + num[1] * white)
    # the white point's normalisation, then the exposure bias of 2 (x -> 2x)
    hable = (4.0 * num[0] * scale, 2.0 * num[1] * scale, 0.0, 4.0 * den[0], 2.0 * den[1], den[2])
    assert constants.NVIDIA_TONE_COEFFICIENTS["hable"] == hable
    assert constants.tone_coefficients("reinhard") == constants.NVIDIA_TONE_COEFFICIENTS["reinhard"]
    assert constants.tone_coefficients("reinhard") == (0.0, 1.0, 0.0, 0.0, 1.0, 1.0)


def toy_row(
    head='kToy, "toy", "Toy"', kernel="1.0f, 2.0f, 0.0f, 1.0f, 1.0f, 1.0f", exact="1.0, 2.0, 0.0, 1.0, 1.0, 1.0"
):
    return f"FLIP_TONE_MAPPER({head}, ({kernel}), ({exact}))"


@pytest.mark.parametrize(
    "row,problem",
    [
        (toy_row(kernel="1.0f, 2.0f, 0.0f, 1.0f, 1.0f"), "5 coefficients, not the 6"),
        (toy_row(kernel="1.0f, 2.0, 0.0f, 1.0f, 1.0f, 1.0f"), "'2.0' is not float literals"),
        (toy_row(exact="1.0, 2.0f, 0.0, 1.0, 1.0, 1.0"), "'2.0f' is not double literals"),
        (toy_row(kernel="1.0f, 2.0f + 1.0f, 0.0f, 1.0f, 1.0f, 1.0f"), "'2.0f + 1.0f' is not float literals"),
        (toy_row(head='kToy, "Toy", "Toy"'), "every row must be"),
        (toy_row(head='kToy, "toy"'), "every row must be"),
        (toy_row(head='kAces, "aces", "ACES"'), "given twice"),
    ],
)
def test_a_registry_row_out_of_form_stops_the_import(tmp_path, row, problem):
    """A row the Python reading could take otherwise than the compiler (a double in the float row, a
    sum, a missing field or coefficient, a name given twice) is refused with the file named, never
    read as something else or skipped."""
    registry = tmp_path / "tone_mappers.inc"
    registry.write_text(Path(constants.TONE_MAPPER_REGISTRY).read_text() + row + "\n")
    with pytest.raises(ValueError, match=re.escape(str(registry)) + ".*" + re.escape(problem)):
        constants._read_tone_mappers(str(registry))


def test_an_unknown_tone_mapper_has_no_coefficients():
    """No copy of the table falls back to another tone mapper's row for a name it does not know."""
    x = torch.rand(1, 3, 4, 4)
    for coefficients_of in (
        constants.tone_coefficients,
        nvidia._exact_tone_coefficients,
        hdr.exposure_anchor,
        lambda name: oracle.hdr_to_ldr(x, 1.0, name),
    ):
        with pytest.raises(ValueError, match="tone_mapper must be one of .*'filmic'"):
            coefficients_of("filmic")
    with pytest.raises(TypeError, match="tone_mapper must be a string"):
        constants.tone_coefficients(None)
    for name in constants.TONE_MAPPERS:
        assert constants.tone_coefficients(name.upper()) == constants.tone_coefficients(name)


def test_one_set_of_flip_constants(ops):
    """Every constant of csrc/flip/constants.h (and HDR-FLIP's luminance weights and cap,
    hdr_pixel.h) that the Python package also states is the same double, bit for bit."""
    cpp = flip_loss._C.constants()
    python = {
        "qc": constants.QC,
        "pc": constants.PC,
        "pt": constants.PT,
        "gw": constants.GW,
        "qf": constants.QF,
        "csf_a1": oracle._CSF_A1,
        "csf_b1": oracle._CSF_B1,
        "csf_a2": oracle._CSF_A2,
        "csf_b2": oracle._CSF_B2,
        "csf_b_max": max(oracle._CSF_B1 + oracle._CSF_B2),
        "pi": math.pi,
        "lab_delta3": oracle.LAB_T,
        "lab_lin_offset": oracle.LAB_LIN_OFFSET,
        "srgb_knee": oracle.SRGB_DECODE_T,
        "rgb_to_xyz": oracle.RGB_TO_XYZ,
        "xyz_to_rgb": oracle.XYZ_TO_RGB,
        "white": oracle.WHITE,
        "inv_white": oracle.INV_WHITE,
        "luminance_weights": oracle._LUMINANCE_WEIGHTS,
        "gamut_gradient_slack": oracle.GAMUT_GRADIENT_SLACK,
        "hdr_cap": oracle._HDR_CAP,
    }
    for name, value in python.items():
        assert bits(cpp[name]) == bits(value), name
    # The one constant the oracle does not state: the kernels multiply by 1 / (3 delta^2) = 841/108
    # where the oracle divides by 3 delta^2 (the same value to an ulp).
    assert set(cpp) - set(python) == {"lab_lin_slope"}
    assert cpp["lab_lin_slope"] == 841.0 / 108.0
    assert cpp["lab_lin_slope"] == pytest.approx(1.0 / (3.0 * oracle.LAB_DELTA**2), rel=1e-15)


def test_one_default_eps(ops):
    for op in (torch.ops.flip.ldr_flip.default, torch.ops.flip.hdr_flip.default):
        (eps,) = [a.default_value for a in op._schema.arguments if a.name == "eps"]
        assert eps == constants.DEFAULT_EPS


def test_one_default_pixels_per_degree(ops):
    schema_default = torch.ops.flip.ldr_flip.default._schema.arguments[2].default_value
    assert schema_default == constants.DEFAULT_PPD
    header = (ROOT / "csrc" / "include" / "flip_loss" / "flip_loss.h").read_text()
    assert float(re.search(r"kDefaultPpd = ([0-9.]+);", header).group(1)) == constants.DEFAULT_PPD
    assert constants.DEFAULT_PPD == flip_loss.pixels_per_degree(0.7, 0.7, 3840)


def test_one_table_of_op_signatures(ops):
    # csrc/include/flip_loss/op_signatures.h has one entry per op of the schema (csrc/ops/schema.cpp);
    # each entry's C++ signature is checked against the registered kernels when its handle is made.
    table = (ROOT / "csrc" / "include" / "flip_loss" / "op_signatures.h").read_text()
    entries = re.findall(r'name = "flip::(\w+)";', table)
    registered = [n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("flip::")]
    assert sorted(entries) == sorted(registered)


def test_one_list_of_autocast_ops():
    """The ops the CMake package's Autocast kernels cast (op::AutocastOps, op_signatures.h) are the
    ones the Python extension registers autocast for (op_registration.AUTOCAST_OPS)."""
    from flip_loss import op_registration

    table = (ROOT / "csrc" / "include" / "flip_loss" / "op_signatures.h").read_text()
    op_of = dict(re.findall(r'struct (\w+) \{\s*static constexpr const char\* name = "flip::(\w+)";', table))
    (listed,) = re.findall(r"using AutocastOps = std::tuple<([^>]*)>;", table)
    assert sorted(op_of[s.strip()] for s in listed.split(",")) == sorted(op_registration.AUTOCAST_OPS)


def test_one_version():
    # flip_loss.__version__ is the version; the CMake package and the C++ header restate it.
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert re.search(r"project\(flip_loss VERSION ([0-9.]+)", cmake).group(1) == flip_loss.__version__
    header = (ROOT / "csrc" / "include" / "flip_loss" / "flip_loss.h").read_text()
    parts = [
        re.search(rf"constexpr int kVersion{part} = ([0-9]+);", header).group(1) for part in ("Major", "Minor", "Patch")
    ]
    assert ".".join(parts) == flip_loss.__version__


def test_one_set_of_cuda_architectures():
    """The GPU targets are flip_loss/cuda_arches.py's: setup.py builds with them, the CMake package and
    its config restate them (CMake's own syntax for the PTX), setup.py's docstring and the README name
    them."""
    from flip_loss import cuda_arches

    setup = (ROOT / "setup.py").read_text()
    assert 'os.environ["TORCH_CUDA_ARCH_LIST"] = cuda_arches().build_arch_list(' in setup
    default = cuda_arches.default_arch_list()
    assert f'(default "{default}"' in setup  # its docstring
    cmake = (ROOT / "CMakeLists.txt").read_text()
    config = (ROOT / "cmake" / "flip_lossConfig.cmake.in").read_text()
    assert re.search(r'set\(_flip_default_archs "(\d[^"]*)"\)', cmake).group(1) == cuda_arches.cmake_architectures()
    for text in (cmake, config):
        assert re.search(r'set\(TORCH_CUDA_ARCH_LIST "([^"]+)"', text).group(1) == default
    readme = (ROOT / "README.md").read_text()
    assert f"default `{default}`" in readme


def test_one_set_of_nvcc_flags():
    """The CMake package compiles the CUDA kernels with setup.py's nvcc flags (its definitions apart,
    which CMake sets on their own): -fmad=false above all, the device's floating-point contract
    (docs/algorithm.md §9.2)."""
    import ast

    tree = ast.parse((ROOT / "setup.py").read_text())
    setup = next(
        ast.literal_eval(v)
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for k, v in zip(node.keys, node.values)
        if isinstance(k, ast.Constant) and k.value == "nvcc"
    )
    cmake = re.search(r"\$<\$<COMPILE_LANGUAGE:CUDA>:([^>]*)>", (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert "-fmad=false" in setup
    assert cmake.split() == [f for f in setup if not f.startswith("-D")]


def test_one_oldest_torch_pin():
    """The oldest supported release is what CI builds and tests against (requirements-oldest-torch.txt);
    a build takes any supported torch (pyproject.toml's build requirement is the supported range,
    not a pin, and names nothing else the build does not use); the development pin is the newest."""
    oldest = re.findall(r"^torch==(\d+)\.(\d+)\.\d+$", (ROOT / "requirements-oldest-torch.txt").read_text(), re.M)
    assert [tuple(map(int, v)) for v in oldest] == [torch_releases.MIN_TORCH]
    build = re.search(r"^requires = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    build_requirements = re.findall(r'"([^"]+)"', build)
    assert torch_releases.requirement() in build_requirements
    assert sorted(re.split(r"[<>=!~ ]", r)[0] for r in build_requirements) == [
        "ninja",
        "setuptools",
        "torch",
        "wheel",
    ]
    newest = re.findall(r"^torch==(\d+)\.(\d+)\.\d+$", (ROOT / "requirements.txt").read_text(), re.M)
    assert [tuple(map(int, v)) for v in newest] == [torch_releases.NEWEST_TORCH]


def _written(x):
    """A bound as the documents write it: 1e-05 -> '1e-5', 0.0005 -> '5e-4'."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _float_constants(path):
    import ast

    tree = ast.parse(path.read_text())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, float)}


def test_one_gpu_and_cpu_agreement():
    """The promised agreement of the CUDA kernels with the CPU kernels is defined once, in
    flip_loss/gpu_agreement.py: the README's promise and docs/algorithm.md §9.2 state its numbers,
    and the tests and the GPU machine's smoke check measure against it rather than against copies
    of their own (scripts/gpu/smoke.py once allowed 1e-4 where the README promised 5e-4)."""
    from flip_loss import gpu_agreement as ga

    f32, f64 = torch.float32, torch.float64
    readme = (ROOT / "README.md").read_text()
    promise = readme[readme.index("### GPU and CPU agreement") :]
    promise = " ".join(promise[: promise.index("\n### ", 5)].split())
    assert (
        f"maps within {_written(ga.MAP_TOLERANCE[f32])} (float32) / {_written(ga.MAP_TOLERANCE[f64])} (float64)"
        in promise
    )
    assert (
        f"gradients within {_written(ga.GRADIENT_TOLERANCE[f32])} / {_written(ga.GRADIENT_TOLERANCE[f64])}" in promise
    )
    assert f"{ga.HDR_INDEX_MISMATCH * 100:g} % of pixels" in promise
    algorithm = " ".join((ROOT / "docs" / "algorithm.md").read_text().split())
    section = algorithm[algorithm.index("### 9.2 GPU and CPU agreement") : algorithm.index("### 9.3")]
    assert f"the {_written(ga.GRADIENT_TOLERANCE[f32])} promised" in section
    assert "flip_loss/gpu_agreement.py" in section
    # Every comparison of the GPU with the CPU takes the bounds from the module.
    bounds = set(ga.MAP_TOLERANCE.values()) | set(ga.GRADIENT_TOLERANCE.values()) | {ga.HDR_INDEX_MISMATCH}
    for name in ("tests/gpu/test_cuda.py", "tests/gpu/test_cuda_graphs.py", "tests/gpu/test_gpu_emulation.py"):
        path = ROOT / name
        assert "gpu_agreement" in path.read_text(), name
        assert ga.GRADIENT_TOLERANCE[f32] not in _float_constants(path), f"{name} repeats the gradient bound"
    for name in ("scripts/gpu/smoke.py", "scripts/gpu/gpu_check.py"):
        path = ROOT / name
        assert not bounds & _float_constants(path), f"{name} has a bound of its own"
    assert "gpu_agreement" in (ROOT / "scripts" / "gpu" / "smoke.py").read_text()
    # The derivation in the module's docstring gives the numbers it defines.
    doc = " ".join(ga.__doc__.split())
    for bound in (ga.GRADIENT_TOLERANCE[f32], ga.MAP_TOLERANCE[f32], ga.MAP_TOLERANCE[f64]):
        assert _written(bound) in doc
