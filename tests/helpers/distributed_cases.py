"""Helpers of tests/cli/test_distributed.py: launching a few processes on 127.0.0.1 with a bounded
wait, and the functions those processes run (spawned processes import them from here, not from the
test module).

Every worker saves what it computed (``torch.save``) for the test to compare with one process;
a worker that raises makes the launch fail with its traceback, and a launch that outlives its
timeout is killed and fails, so a hang cannot stall the suite.
"""

import datetime
import os
import socket
import time
import traceback

import torch

WORLD_SIZE = 2
# How long a collective may wait for the other rank before it fails (the launch's own timeout
# is the outer bound).
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=60)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world_size, port, out_dir, function, args):
    import torch.distributed as dist

    torch.set_num_threads(1)  # two ranks share the machine's cores
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size, timeout=COLLECTIVE_TIMEOUT
    )
    try:
        result = function(rank, world_size, *args)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    except BaseException:
        with open(os.path.join(out_dir, f"rank{rank}.error"), "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def launch(function, out_dir, *args, world_size=WORLD_SIZE, timeout=180.0):
    """Runs ``function(rank, world_size, *args)`` in ``world_size`` spawned processes that share a
    gloo process group; returns the list of what each returned (rank order). Fails when a process
    fails or the whole takes longer than ``timeout`` seconds."""
    import torch.multiprocessing as mp

    os.makedirs(out_dir, exist_ok=True)
    context = mp.start_processes(
        _entry,
        args=(world_size, free_port(), out_dir, function, args),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise AssertionError(f"the {world_size} processes did not finish within {timeout:.0f} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [torch.load(os.path.join(out_dir, f"rank{rank}.pt"), weights_only=False) for rank in range(world_size)]


# --- the metric ---------------------------------------------------------------------------------


def error_maps(seed=0):
    """Seven error maps (1 x 1 x H x W, float32, values in [0, 1]) of a few sizes: what the metric
    cases share with one process."""
    g = torch.Generator().manual_seed(seed)
    sizes = ((20, 24), (9, 31), (20, 24), (16, 16), (5, 7), (33, 12), (20, 24))
    return [torch.rand(1, 1, h, w, generator=g) ** 3 for h, w in sizes]


def image_pair(seed=1):
    """One (test, reference) LDR pair, 2 x 3 x 18 x 22."""
    g = torch.Generator().manual_seed(seed)
    reference = torch.rand(2, 3, 18, 22, generator=g)
    return (reference + 0.2 * torch.randn(2, 3, 18, 22, generator=g)).clamp(0, 1), reference


# Which maps each rank folds in, and how: rank 0 in two batches, rank 1 one by one.
RANK_MAPS = {0: [[0, 2, 6], [4]], 1: [[1], [3], [5]]}


def _outcome(call):
    """(result, None) or (None, (exception type name, message)): an expected error is data."""
    try:
        return call(), None
    except Exception as exc:  # noqa: BLE001 - the test checks which
        return None, (type(exc).__name__, str(exc))


def metric_worker(rank, world_size):
    """The metric under a 2-rank gloo group, each case on every rank (every compute() a collective)."""
    from flip_loss import FLIPMetric
    from flip_loss.torchmetrics import FLIPTorchMetric

    maps = error_maps()
    test, reference = image_pair()
    out = {}

    # Synced: both ranks' maps, plus an image pair through update() on rank 1.
    synced = FLIPMetric()
    for batch in RANK_MAPS[rank]:
        synced.update_error_map(torch.cat([maps[i] for i in batch]))
    if rank == 1:
        synced.update(test, reference)
    out["synced"] = synced.compute()
    # compute() leaves the local statistics alone: more updates, then compute again.
    synced.update_error_map(maps[rank])
    out["synced_again"] = synced.compute()

    # The same through torchmetrics.
    tm = FLIPTorchMetric()
    plain = FLIPMetric()
    for batch in RANK_MAPS[rank]:
        for i in batch:
            tm.update(*pair_of(i))
            plain.update(*pair_of(i))
    out["torchmetrics"] = tm.compute()
    out["plain_for_torchmetrics"] = plain.compute()

    # Not synced: this rank's maps only.
    local = FLIPMetric(sync_on_compute=False)
    for batch in RANK_MAPS[rank]:
        local.update_error_map(torch.cat([maps[i] for i in batch]))
    out["local"] = local.compute()

    # Rank 1 sees nothing: the result is rank 0's, on both ranks (torchmetrics too).
    lonely = FLIPMetric()
    lonely_tm = FLIPTorchMetric()
    if rank == 0:
        lonely.update_error_map(maps[0])
        lonely_tm.update(*pair_of(0))
    out["rank0_only"] = lonely.compute()
    out["rank0_only_torchmetrics"] = lonely_tm.compute()

    # Nobody saw anything; the ranks disagree about bins: the same error on both, no hang.
    out["nothing"] = _outcome(lambda: FLIPMetric().compute())
    mismatched = FLIPMetric(bins=256 if rank == 0 else 512)
    mismatched.update_error_map(maps[rank])
    out["bins_mismatch"] = _outcome(mismatched.compute)
    # torchmetrics' sync: ranks whose metrics have different options (equal state shapes).
    other_options = FLIPTorchMetric(pixels_per_degree=40.0 if rank == 0 else 41.0)
    other_options.update(*pair_of(rank))
    out["torchmetrics_options_mismatch"] = _outcome(other_options.compute)
    return out


def pair_of(index, seed=5):
    """A (test, reference) LDR pair (1 x 3 x H x 14, its height from ``index``)."""
    g = torch.Generator().manual_seed(seed + index)
    reference = torch.rand(1, 3, 12 + index, 14, generator=g)
    return (reference + 0.3 * torch.randn(reference.shape, generator=g)).clamp(0, 1), reference


# --- the command line ---------------------------------------------------------------------------


def make_folders(root, sizes, broken=()):
    """``root/references`` and ``root/tests`` with one pair of PNG images per (height, width) in
    ``sizes``, named p0, p1, ...; the test image of each position in ``broken`` is the wrong size.
    Returns (reference folder, test folder) as absolute paths."""
    import numpy as np
    from PIL import Image

    references, tests = os.path.join(root, "references"), os.path.join(root, "tests")
    os.makedirs(references, exist_ok=True)
    os.makedirs(tests, exist_ok=True)
    rng = np.random.default_rng(11)
    for i, (h, w) in enumerate(sizes):
        reference = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        # The noise grows with i, so that the pairs' FLIP values differ (the gate picks one out).
        test = np.clip(reference.astype(int) + rng.integers(-8 - 12 * i, 9 + 12 * i, (h, w, 3)), 0, 255)
        if i in broken:
            test = test[:-1]
        Image.fromarray(reference).save(os.path.join(references, f"p{i}.png"))
        Image.fromarray(test.astype(np.uint8)).save(os.path.join(tests, f"p{i}.png"))
    return references, tests


def rank_environment(rank, world_size, port):
    """The variables torchrun gives rank ``rank`` of a one-machine launch."""
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world_size),
        GROUP_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    return env


def cli_rank_worker(rank, world_size, argv, cwd, broken_rank):
    """flip_loss.cli.main as rank ``rank`` (inside the harness's own process group, as a program
    that has one calls it); on ``broken_rank`` evaluating a pair raises an unexpected error."""
    import contextlib
    import io

    from flip_loss.cli import main
    from flip_loss.cli.pair_steps import PairWork

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    if rank == broken_rank:

        def broken(self, prepared):
            raise RuntimeError("a bug on this rank")

        PairWork.evaluate = broken
    os.chdir(cwd)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


# --- DDP training (examples/train_denoiser.py) -------------------------------------------------------

EXAMPLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples", "train_denoiser.py"
)


def load_denoiser_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_denoiser_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_training(module):
    """Settings and data for a few training steps of the example's denoiser: synthetic images, a
    global batch of 4 crops, 3 held-out crops (shared 2 + 1 between two ranks)."""
    import argparse

    args = argparse.Namespace(steps=3, crop=16, batch=4, sigma=0.1, lr=2e-3, channels=8, depth=3, ppd=67.0206, seed=0)
    g = torch.Generator().manual_seed(3)
    images = [torch.rand(3, 40, 48, generator=g), torch.rand(3, 36, 36, generator=g)]
    eval_gen = torch.Generator().manual_seed(4)
    eval_clean = module.random_crops(images, 3, args.crop, eval_gen)
    eval_noisy = module.add_noise(eval_clean, args.sigma, eval_gen)
    return args, images, eval_noisy, eval_clean


def train_few_steps():
    """The example's train() with L1 + 0.5 FLIP, in this process's share when a group is up:
    (parameters, history, held-out results, held-out FLIP and PSNR of the noisy input)."""
    module = load_denoiser_example()
    processes = module.Processes("cpu")
    args, images, eval_noisy, eval_clean = tiny_training(module)
    base = module.evaluate(None, eval_noisy, eval_clean, args.ppd, processes)
    model, history, results = module.train("L1 + 0.5*FLIP", 0.5, args, images, eval_noisy, eval_clean, processes)
    return {
        "parameters": [p.detach().clone() for p in model.parameters()],
        "history": history,
        "results": results,
        "base": base,
        "size": processes.size,
    }


def ddp_worker(rank, world_size):
    return train_few_steps()


# --- interrupting a rank, and environments inherited from a rank ----------------------------------


def cli_rank_with_hooks(marker_dir, hang_ranks, argv):
    """flip_loss.cli.main(argv) as a rank of a launch (the torchrun variables in the environment),
    with two hooks for the interruption tests: on the ranks in ``hang_ranks`` evaluating a pair
    writes ``marker_dir/evaluating.<rank>`` and then hangs; every rank writes
    ``marker_dir/waiting.<rank>`` when it enters a gather (so a test knows it waits for the
    others). Returns main's exit code."""
    from flip_loss.cli import main
    from flip_loss.cli import shard
    from flip_loss.cli.pair_steps import PairWork

    rank = int(os.environ["RANK"])

    def touch(name):
        with open(os.path.join(marker_dir, f"{name}.{rank}"), "w"):
            pass

    if rank in hang_ranks:

        def hang(self, prepared):
            touch("evaluating")
            time.sleep(3600)

        PairWork.evaluate = hang
    real_gather = shard._Group.gather

    def gather(self, payload):
        touch("waiting")
        return real_gather(self, payload)

    shard._Group.gather = gather
    return main(argv)


# A parent process that runs its arguments as a child (which inherits its environment), with
# NAME=VALUE pairs (comma-separated, first argument) added to the child's environment only.
INHERITING_PARENT = (
    "import os, subprocess, sys\n"
    "env = dict(os.environ)\n"
    "env.update(item.split('=', 1) for item in sys.argv[1].split(',') if item)\n"
    "sys.exit(subprocess.run(sys.argv[2:], env=env).returncode)\n"
)

# A training script's rank under torchrun that runs the command line as a subprocess (a gate):
# rank 0 in folder mode, rank 1 with one reference; each writes the child's exit code and
# stderr to <cwd>/rank<r>.json. argv: references, tests, reference image, test image.
GATING_RANK_SCRIPT = """
import json, os, subprocess, sys
rank = int(os.environ["RANK"])
references, tests, reference, test = sys.argv[1:5]
if rank == 0:
    argv = ["--reference-dir", references, "--test-dir", tests, "-d", "out0", "--dist-timeout", "20"]
else:
    argv = ["-r", reference, "-t", test, "-d", "out1"]
child = subprocess.run([sys.executable, "-m", "flip_loss", *argv, "--no-progress", "--device", "cpu"],
                       capture_output=True, text=True, timeout=150)
with open(f"rank{rank}.json", "w") as f:
    json.dump({"code": child.returncode, "stdout": child.stdout, "stderr": child.stderr}, f)
"""
