"""What flip-loss needs from ``torch.distributed``: whether a process group is there to sync with,
which device its collectives take, the rank a ``torchrun`` launch gave this process (told from
variables a process inherited from a launched worker that started it), and a gather of tensors
whose lengths differ between ranks.

Used by :class:`flip_loss.FLIPMetric` (sync on ``compute()``), :mod:`flip_loss.torchmetrics` and the
sharded folder mode of the command line (``flip_loss.cli.shard``). Nothing here initialises a
process group on import; the functions that need one say so.
"""

import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from . import environment

__all__ = [
    "LaunchedWorld",
    "LAUNCH_OVERRIDE",
    "launched_world",
    "launch_inherited",
    "is_active",
    "backend_device_types",
    "current_device",
    "gather_uneven",
]


class LaunchedWorld(NamedTuple):
    """Where a launcher (``torchrun``, ``torch.distributed.run``) put this process."""

    rank: int
    world_size: int
    local_rank: int


# Says whether the torchrun variables in the environment are this process's launch: "auto" (the
# default: decided as launch_inherited says), "worker" (they are: for a wrapper between torchrun and
# the command line, such as ``torchrun --no-python bash -c '...'``) or "ignore" (they are not:
# run as one process).
LAUNCH_OVERRIDE = "FLIP_LOSS_TORCHRUN"
_OVERRIDE_VALUES = ("auto", "worker", "ignore")

# The variables torchrun's elastic agent sets for each worker that tell one launch from another
# (torch/distributed/elastic/agent/server/local_elastic_agent.py). The agent itself has none of
# them (unless it was started by a launched worker, and then with values of the outer launch).
_LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def _override() -> str:
    return environment.choice(LAUNCH_OVERRIDE, _OVERRIDE_VALUES, "auto")


def _parent_environment() -> Optional[Dict[str, str]]:
    """The environment the parent process started with (Linux: ``/proc/<ppid>/environ``), or None
    where it cannot be read (another system, another user's process)."""
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            data = f.read()
    except OSError:
        return None
    environment = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            environment[os.fsdecode(name)] = os.fsdecode(value)
    return environment


def launch_inherited() -> bool:
    """Whether the torchrun variables in this process's environment (``RANK``, ``WORLD_SIZE > 1``)
    were inherited from the process that started it rather than set for it by a launcher: true
    when the parent process carries the same ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT`` and ``TORCHELASTIC_RUN_ID`` (a launched worker that runs a
    program as a subprocess, e.g. ``subprocess.run(["flip-loss", ...])`` in a training script
    under torchrun), false when it does not (torchrun's agent, which starts its workers with
    variables it does not have itself). ``FLIP_LOSS_TORCHRUN=worker`` / ``ignore`` decide instead
    of the parent (false / true). Where the parent's environment cannot be read (not Linux,
    another user's parent), false: the variables count as this process's. Raises ``ValueError``
    for another value of ``FLIP_LOSS_TORCHRUN``."""
    override = _override()
    if not _names_a_launch():
        return False
    if override != "auto":
        return override == "ignore"
    parent = _parent_environment()
    if parent is None or "RANK" not in parent or "WORLD_SIZE" not in parent:
        return False
    return all(parent.get(name) == os.environ.get(name) for name in _LAUNCH_VARIABLES)


def _names_a_launch() -> bool:
    """Whether ``RANK`` and ``WORLD_SIZE`` are set, ``WORLD_SIZE`` not a number up to 1."""
    world = os.environ.get("WORLD_SIZE")
    if world is None or os.environ.get("RANK") is None:
        return False
    try:
        return int(world) > 1
    except ValueError:  # a launch, if not a sound one
        return True


def _world_from_environment() -> Optional[LaunchedWorld]:
    world = os.environ.get("WORLD_SIZE")
    rank = os.environ.get("RANK")
    if world is None or rank is None:
        return None
    try:
        world_size, rank_value = int(world), int(rank)
        local_rank = int(os.environ.get("LOCAL_RANK", rank_value))
    except ValueError:
        raise ValueError(
            f"RANK={rank!r}, WORLD_SIZE={world!r} and LOCAL_RANK={os.environ.get('LOCAL_RANK')!r} must be integers"
        ) from None
    if world_size <= 1:
        return None
    if not 0 <= rank_value < world_size or local_rank < 0:
        raise ValueError(
            f"RANK={rank_value} is not in [0, WORLD_SIZE={world_size}) or LOCAL_RANK={local_rank} is negative"
        )
    return LaunchedWorld(rank_value, world_size, local_rank)


def launched_world() -> Optional[LaunchedWorld]:
    """This process's place among ``WORLD_SIZE > 1`` processes started by ``torchrun`` (read from
    the environment variables it sets: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), or None for a
    process on its own, also one whose variables were inherited from a launched worker that
    started it (:func:`launch_inherited`). Raises ``ValueError`` when the variables contradict
    each other, or ``FLIP_LOSS_TORCHRUN`` has another value than auto, worker or ignore."""
    if launch_inherited():
        return None
    return _world_from_environment()


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
    padded[: tensor.numel()] = tensor
    parts = [torch.empty_like(padded) for _ in lengths]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([part[:n] for part, n in zip(parts, lengths)])
