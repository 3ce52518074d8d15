"""The CPU kernels' scratch pool (csrc/flip/cpu/workspace.h) keeps what a loop needs: alternating
forwards and forward+backward steps, on 2 threads and on 16, allocate no buffer after their first
round, a burst of buffers lent at once is let go again, and a request never takes a buffer more
than four times its size; checked on the host by tests/cpp/workspace_pool.cpp, compiled here with
g++. Through the ops: a forward and a forward+backward alternated on two threads give the maps and
gradients that each gives alone, bit for bit."""

from pathlib import Path

import torch
from check_programs import run_check_program

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "cpp" / "workspace_pool.cpp"


def test_the_pool_policy_holds_on_the_host(tmp_path):
    run_check_program(SOURCE, tmp_path, ("-O2",))


def test_alternating_forward_and_backward_keep_their_values():
    g = torch.Generator().manual_seed(5)
    ref = torch.rand(1, 3, 70, 90, generator=g)
    test = (ref + 0.1 * torch.randn(ref.shape, generator=g)).clamp(0, 1)

    def step():
        x = test.clone().requires_grad_()
        m = torch.ops.flip.ldr_flip(x, ref, 67.0, "srgb", 0.0)
        (grad,) = torch.autograd.grad(m.sum(), x)
        return m.detach(), grad

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        alone = torch.ops.flip.ldr_flip(test, ref, 67.0, "srgb", 0.0), step()
        for _ in range(3):
            forward = torch.ops.flip.ldr_flip(test, ref, 67.0, "srgb", 0.0)
            map_, grad = step()
            assert torch.equal(forward, alone[0])
            assert torch.equal(map_, alone[1][0]) and torch.equal(grad, alone[1][1])
    finally:
        torch.set_num_threads(threads)
