"""Helpers of tests/test_distributed.py: launching a few processes on 127.0.0.1 with a bounded
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
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=COLLECTIVE_TIMEOUT)
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
    context = mp.start_processes(_entry, args=(world_size, free_port(), out_dir, function, args),
                                 nprocs=world_size, join=False, start_method="spawn")
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
    return out


def pair_of(index, seed=5):
    """A (test, reference) LDR pair (1 x 3 x H x 14, its height from ``index``)."""
    g = torch.Generator().manual_seed(seed + index)
    reference = torch.rand(1, 3, 12 + index, 14, generator=g)
    return (reference + 0.3 * torch.randn(reference.shape, generator=g)).clamp(0, 1), reference
