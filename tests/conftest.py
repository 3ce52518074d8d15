import signal
import sys
from pathlib import Path

import pytest
import torch

import flip_loss

# The tests sit in folders by what they cover (docs/layout.md); the modules they share sit in
# tests/helpers, imported by name (``import conformance``) from every folder. tests/ itself is on
# the path already (pytest puts this file's folder there), for the emulator package.
HELPERS = Path(__file__).resolve().parent / "helpers"
sys.path.insert(0, str(HELPERS))

from tiers import in_torch_release_tier  # noqa: E402


def pytest_collection_modifyitems(config, items):
    for item in items:
        if in_torch_release_tier(item.module.__name__.rpartition(".")[2], item.name):
            item.add_marker(pytest.mark.torch_release)
    # CUDA tests skip cleanly on machines without a GPU.
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fresh_warning(monkeypatch):
    """The out-of-range warning as if nothing had been checked in this process yet."""
    from flip_loss import functional

    monkeypatch.setattr(functional, "_out_of_range_warned", False)
    monkeypatch.setattr(functional, "_non_finite_warned", False)
    monkeypatch.setattr(functional, "_device_inputs_looked_at", False)


def pytest_configure(config):
    # A shell without job control starts a background job (`cmd &`) with SIGINT ignored, and what
    # it runs inherits that: the command line then rightly leaves Ctrl-C alone, and the tests of
    # what Ctrl-C does (test_cli_user_files, test_op_checks, test_process_state) could deliver none. The suite
    # runs with SIGINT as a terminal delivers it: Python's own handler, which children get too.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line("markers", "cuda: needs a CUDA device")
    config.addinivalue_line(
        "markers",
        "slow: takes more than a few seconds (builds, subprocess launches, "
        "exhaustive sweeps); `pytest -m 'not slow'` is the fast tier",
    )
    config.addinivalue_line(
        "markers",
        "torch_release: can differ between torch releases (tests/helpers/tiers.py); the tier that "
        "scripts/test.sh runs with the oldest supported torch too",
    )


@pytest.fixture(scope="session")
def ops():
    if not flip_loss.HAS_EXTENSION:
        pytest.fail(f"flip_loss._C failed to load: {flip_loss._ops.IMPORT_ERROR}")
    return torch.ops.flip


@pytest.fixture(scope="session")
def emulator(ops):
    """torch.ops.flip_emulator, the test-only host emulation of the CUDA kernels (tests/emulator),
    compiled once into its build directory and loaded."""
    import emulator as emulator_build

    return emulator_build.ops()


@pytest.fixture(scope="session")
def crops():
    """The committed test crops as 3 x H x W float32 sRGB tensors."""
    from conformance import load_crop

    return {name: torch.from_numpy(load_crop(name)).permute(2, 0, 1).contiguous() for name in ("rug", "toys", "blocks")}


@pytest.fixture(scope="session")
def cpp_build():
    """The root CMake project (libflip_ops + tests/cpp), built once per session; its build dir."""
    import cpp_tools

    return cpp_tools.build_library()
