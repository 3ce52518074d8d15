"""The test tiers, in one table: which tests run on which torch release.

The extension is one binary on PyTorch's stable ABI, so most of what the suite proves (the maths of
the kernels, the command line, the documents, the emulator, the tools) is the same whatever torch
release loads it: those tests run once, with the newest supported torch. What can differ between
releases runs with the oldest supported torch too: the ops' registration and dispatch, their
autograd, autocast and fake kernels (registered from Python against each release's
``torch.library``), opcheck and gradcheck with the gradient at each kink, torch.compile,
TorchScript, torch.export and AOTInductor, the C++ link and the wheel's metadata.

A test belongs to the ``torch_release`` tier when its module (the file name without ``.py``;
unique across the folders of tests/) is in ``TORCH_RELEASE_MODULES`` or its
name contains one of ``TORCH_RELEASE_WORDS`` (the test names say which face of torch they drive).
``scripts/test.sh --tier`` selects the tiers (docs/development.md, "Test tiers")."""

# Every test of these modules drives what a torch release provides.
TORCH_RELEASE_MODULES = frozenset(
    {
        "test_op_tester",  # every op: gradcheck, opcheck, autocast, meta/fake, the oracle
        "test_ops",  # the kink rules, dtypes and layouts of the registered ops
        "test_op_checks",  # the C++ checks' errors as each release translates them; registered op list
        "test_sensitivities",  # the Autograd kernel's choice of the internal ops, under compile too
        "test_op_forward_mode",  # forward-mode AD refused by each op's registered kernels
        "test_op_func_grad",  # torch.func's reverse-mode transforms through the Autograd kernels
        "test_forward_mode",  # forward mode through the Python API (the portable path); the oracle's
        "test_process_defaults",  # default device and dtype as each release applies them
        "test_torch_releases",  # the supported range, at build and import
        "test_missing_extension",  # import, fallback and torch.jit.script without the extension
        "test_portable_fallback",  # the Autograd and BackendSelect kernels' portable route per device
        "test_cpu_only_torch",  # what the CPU module needs from the release's libtorch_cpu
        "test_cpp",  # the C++ programs link against the release's libtorch
        "test_deploy",  # torch.export, AOTInductor, the installed CMake package
    }
)

# Tests elsewhere whose names say they drive a face of torch that releases change.
TORCH_RELEASE_WORDS = ("compile", "script", "export", "opcheck", "gradcheck", "autocast", "fake", "meta", "vmap")

# Modules whose tests never drive torch itself (the emulator and the disassembly compile the kernels
# with their own tools; lint and documents read files): a word in their names means something else.
RELEASE_FREE_MODULES = frozenset(
    {
        "test_gpu_emulation",
        "test_emulator_checks",
        "test_sass_report",
        "test_gpu_check_script",
        "test_build_wheel_script",
        "test_fastmath",
        "test_pure_install",  # a pip install without a compiler ("compiler" is not torch.compile)
        "test_cpu_dispatch",
        "test_lint",
        "test_docs",
    }
)


def in_torch_release_tier(module: str, test_name: str) -> bool:
    """Whether the test ``test_name`` of ``module`` (without ``.py``) runs on every torch release."""
    if module in RELEASE_FREE_MODULES:
        return False
    name = test_name.lower()
    return module in TORCH_RELEASE_MODULES or any(word in name for word in TORCH_RELEASE_WORDS)
