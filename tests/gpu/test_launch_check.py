"""What a real GPU adds to the CUDA host code, checked without one: the launch checks
(csrc/flip/cuda/launch_check.h) run the kernels' launch sequences against a simulated CUDA runtime
(tests/cpp/launch_check.cpp, compiled here with g++): an error earlier work left is not taken for
flip's, every launch is checked, nothing is left pending; and the CUDA runtime calls of the host
code (csrc/ops/cuda.cpp, csrc/flip/cuda/kernels.cu), read from the source: a call that may come
inside a CUDA graph capture (the first one of a process included) makes only calls a capture
allows; those it forbids (allocation, a blocking copy, synchronisation) come only where no capture
can be under way."""

import re
from pathlib import Path

import pytest
from check_programs import run_check_program

ROOT = Path(__file__).resolve().parents[2]
CUDA_CPP = ROOT / "csrc" / "ops" / "cuda.cpp"
KERNELS_CU = ROOT / "csrc" / "flip" / "cuda" / "kernels.cu"


def test_launch_checks_on_a_simulated_runtime(tmp_path):
    lines = run_check_program(ROOT / "tests" / "cpp" / "launch_check.cpp", tmp_path, ("-O1",))
    # Every launch of eight sequences (the tiled backwards in several bands, HDR-FLIP over three
    # exposures) failed once.
    assert int(lines[-2].split()[0]) > 50, lines


# The CUDA runtime calls a stream capture allows from the capturing thread (none of them is a
# synchronisation, an allocation or a copy from pageable memory): the only ones the host code may
# make on a path a capture can reach.
CAPTURE_SAFE = {
    "cudaGetDevice",
    "cudaSetDevice",
    "cudaDeviceGetAttribute",
    "cudaFuncSetAttribute",  # the >48 KB shared-memory opt-in: a function attribute, not stream work
    "cudaFuncGetAttributes",  # kernel_image: whether the GPU runs the build, asked before its first op
    "cudaStreamIsCapturing",
    "cudaGetLastError",
    "cudaGetErrorName",
    "cudaGetErrorString",
    "cudaMemsetAsync",  # on the call's stream: captured as a memset node
}
# The calls a capture forbids, and the only functions that may make them: the taps upload after
# its refusal during a capture (kernel_taps), and the free of dropped taps memory (DeviceTaps'
# destructor), which the cache never runs during a capture (may_drop is false then).
CAPTURE_FORBIDDEN = {"cudaMalloc", "cudaFree", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize"}
FORBIDDEN_ONLY_IN = {"kernel_taps", "~DeviceTaps"}


def _code(path):
    """The source without comments, string literals (a call named in a message is no call) and
    preprocessor lines."""
    text = path.read_text()
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", text, flags=re.M)


def _closing(code, i, open_, close):
    """The index just past the bracket that closes the one at code[i]."""
    depth = 0
    for j in range(i, len(code)):
        depth += (code[j] == open_) - (code[j] == close)
        if depth == 0:
            return j + 1
    return len(code)


def _functions(code):
    """{name: body} of the functions (and lambdas' enclosing functions) defined at any depth:
    ``name(...)``, then qualifiers, then a brace."""
    out = {}
    for m in re.finditer(r"(~?\b\w+)\s*\(", code):
        name = m.group(1)
        if name in ("if", "for", "while", "switch", "catch", "return", "sizeof", "decltype"):
            continue
        after = _closing(code, m.end() - 1, "(", ")")
        q = re.match(r"\s*(?:const\s*|noexcept\s*|override\s*)*\{", code[after:])
        if q:
            start = after + q.end() - 1
            out.setdefault(name, code[start : _closing(code, start, "{", "}")])
    return out


def _calls(code):
    return re.findall(r"\b(cuda[A-Z]\w*)\s*\(", code)


def test_every_cuda_runtime_call_of_the_host_code_is_classified():
    # A new runtime call must be placed in one of the two tables above, with a thought for captures.
    for path in (CUDA_CPP, KERNELS_CU):
        unknown = set(_calls(_code(path))) - CAPTURE_SAFE - CAPTURE_FORBIDDEN
        assert not unknown, f"{path.name}: {sorted(unknown)}"
    # The legacy-stream copy is never used: from pageable memory it returns before the transfer is
    # done, and a non-blocking stream's kernels would not wait for it.
    assert "cudaMemcpy" not in _calls(_code(CUDA_CPP)) + _calls(_code(KERNELS_CU))


def test_what_a_capture_forbids_comes_only_where_no_capture_is_under_way():
    functions = {**_functions(_code(CUDA_CPP)), **_functions(_code(KERNELS_CU))}
    for name, body in functions.items():
        forbidden = set(_calls(body)) & CAPTURE_FORBIDDEN
        if name in FORBIDDEN_ONLY_IN or not forbidden:
            continue
        # A function that only encloses one of the allowed ones (a lambda's body is its caller's).
        inner = [n for n in FORBIDDEN_ONLY_IN if n in functions and functions[n] in body]
        assert inner and not forbidden - set().union(*(_calls(functions[n]) for n in inner)), (name, forbidden)
    # kernel_taps: the capture status is read first; the upload (allocation, copy, wait) comes after
    # the refusal that a capture meets, and the copy is waited for on the call's stream.
    taps = functions["kernel_taps"]
    refusal = taps.index("if (capturing)")
    assert taps.index("cudaStreamIsCapturing") < refusal
    assert "throw" in taps[refusal : taps.index("}", refusal)]
    for call in ("cudaMalloc", "cudaMemcpyAsync", "cudaStreamSynchronize"):
        assert taps.index(call) > refusal, call
    assert re.search(r"cudaMemcpyAsync\([^;]*,\s*stream\)", taps) and "cudaStreamSynchronize(stream)" in taps
    # The cache is told not to drop entries (whose destructor frees and synchronises) while capturing.
    assert re.search(r"/\*may_drop=\*/\s*!capturing", CUDA_CPP.read_text())


def test_the_first_launch_path_makes_only_calls_a_capture_allows():
    # What every call runs before and around its launches, the first call of a process inside a
    # capture included: the shared-memory opt-in (once per kernel and device), the device's limits,
    # the stream, the launchers and their checks (launch_check.h: CudaErrors).
    functions = {**_functions(_code(CUDA_CPP)), **_functions(_code(KERNELS_CU))}
    on_every_call = [
        "allow_shared_memory",
        "shared_memory_per_block",
        "current_stream",
        "check_cuda",
        "cuda_check",
        "launch",
        "fill_nan",
        "failure_note",
        "take",
    ]
    for name in on_every_call:
        assert name in functions, name
        assert set(_calls(functions[name])) <= CAPTURE_SAFE, (name, _calls(functions[name]))


@pytest.mark.cuda
def test_an_error_left_by_earlier_work_is_reported_as_not_flips_on_a_gpu():
    # A failed cudaMalloc of someone else's, unchecked, leaves its error in the thread's error
    # variable of the runtime the CUDA kernels use. The next flip op raises it, saying whose it is,
    # before launching anything (float32 contiguous inputs: no torch kernel runs before flip's); the
    # error is taken, so the op then runs.
    import ctypes

    import torch

    if not torch._C._dispatch_has_kernel_for_dispatch_key("flip::hunt_hyab", "CUDA"):
        pytest.skip("built without CUDA kernels")
    a, b = torch.rand(1, 3, 8, 8, device="cuda"), torch.rand(1, 3, 8, 8, device="cuda")
    cudart = [line.split()[-1] for line in open("/proc/self/maps") if "libcudart" in line]
    if not cudart:
        pytest.skip("no shared CUDA runtime loaded (linked statically)")
    runtime = ctypes.CDLL(cudart[0])
    memory = ctypes.c_void_p()
    assert runtime.cudaMalloc(ctypes.byref(memory), ctypes.c_size_t(1 << 62)) != 0
    with pytest.raises(RuntimeError, match=r"pending on this thread before flip's hunt_hyab_forward launched anything"):
        torch.ops.flip.hunt_hyab(a, b, 0.0)
    got = torch.ops.flip.hunt_hyab(a, b, 0.0).cpu()
    torch.testing.assert_close(got, torch.ops.flip.hunt_hyab(a.cpu(), b.cpu(), 0.0), rtol=1e-5, atol=1e-6)
