"""What flip-loss needs from ``torch.distributed``: whether a process group is there to sync with,
which device its collectives take, the rank a ``torchrun`` launch gave this process, and a gather
of tensors whose lengths differ between ranks.

Used by :class:`flip_loss.FLIPMetric` (sync on ``compute()``), :mod:`flip_loss.torchmetrics` and the
sharded folder mode of the command line (``flip_loss.cli.shard``). Nothing here initialises a
process group on import; the functions that need one say so.
"""
import os
from typing import List, NamedTuple, Optional, Tuple

import torch

__all__ = ["LaunchedWorld", "launched_world", "is_active", "backend_device_types", "current_device",
           "gather_uneven"]


class LaunchedWorld(NamedTuple):
    """Where a launcher (``torchrun``, ``torch.distributed.run``) put this process."""
    rank: int
    world_size: int
    local_rank: int


def launched_world() -> Optional[LaunchedWorld]:
    """This process's place among ``WORLD_SIZE > 1`` processes started by ``torchrun`` (read from
    the environment variables it sets: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), or None for a
    process on its own. Raises ``ValueError`` when the variables contradict each other."""
    world = os.environ.get("WORLD_SIZE")
    rank = os.environ.get("RANK")
    if world is None or rank is None:
        return None
    try:
        world_size, rank_value = int(world), int(rank)
        local_rank = int(os.environ.get("LOCAL_RANK", rank_value))
    except ValueError:
        raise ValueError(f"RANK={rank!r}, WORLD_SIZE={world!r} and LOCAL_RANK="
                         f"{os.environ.get('LOCAL_RANK')!r} must be integers") from None
    if world_size <= 1:
        return None
    if not 0 <= rank_value < world_size or local_rank < 0:
        raise ValueError(f"RANK={rank_value} is not in [0, WORLD_SIZE={world_size}) or LOCAL_RANK={local_rank} "
                         "is negative")
    return LaunchedWorld(rank_value, world_size, local_rank)


def is_active(group=None) -> bool:
    """True when ``group`` (None: the default process group) is initialised and has more than one
    rank, i.e. when there is something to sync with."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def backend_device_types(group=None) -> Tuple[str, ...]:
    """The device types whose tensors ``group``'s backends take (``init_process_group("gloo")``:
    cpu and cuda; ``"nccl"``: cuda; ``"cpu:gloo,cuda:nccl"``: both), from its backend
    configuration."""
    import torch.distributed as dist

    config = dist.get_backend_config(group)
    types = []
    for item in config.split(","):
        device_type, _, _ = item.partition(":")
        device_type = device_type.strip()
        if device_type and device_type not in types:
            types.append(device_type)
    return tuple(types)


def current_device(device_type: str) -> torch.device:
    """The device of type ``device_type`` this process works on: the CPU, or the current device
    of an accelerator (the one ``torch.cuda.set_device`` chose, as every NCCL program does)."""
    if device_type == "cpu":
        return torch.device("cpu")
    module = getattr(torch, device_type, None)
    if module is not None and hasattr(module, "current_device"):
        return torch.device(device_type, module.current_device())
    return torch.device(device_type)


def gather_uneven(tensor: torch.Tensor, lengths: List[int], group=None) -> torch.Tensor:
    """All ranks' 1-D ``tensor`` concatenated in rank order, on every rank. ``lengths`` holds every
    rank's length (all ranks must pass the same list, e.g. from an earlier all_gather); the
    tensors are padded to the longest for the collective. Every rank must call it."""
    import torch.distributed as dist

    longest = max(lengths)
    if longest == 0:
        return tensor.new_empty(0)
    padded = tensor.new_zeros(longest)
    padded[:tensor.numel()] = tensor
    parts = [torch.empty_like(padded) for _ in lengths]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([part[:n] for part, n in zip(parts, lengths)])
