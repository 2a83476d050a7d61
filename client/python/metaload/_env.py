"""Defaults read as torchrun sets them: RANK, WORLD_SIZE, LOCAL_RANK; METAD_ADDRESS."""
from __future__ import annotations

import os
from typing import Optional, Tuple, Union

import torch
import torch.distributed as dist

from . import _native
from ._errors import BadInputError


def env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise BadInputError(f"{name}={text!r} is not an integer") from None


def rank_and_world(process_group: Optional["dist.ProcessGroup"] = None) -> Tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(process_group), dist.get_world_size(process_group)
    return env_int("RANK", 0), env_int("WORLD_SIZE", 1)


def resolve_device(device: Union[None, str, torch.device], rank: int) -> torch.device:
    """The device as `metactl load --device` resolves it (client/load/device.h, one rule for
    both): None: cuda when a CUDA device is visible, else the CPU; "cuda": cuda:LOCAL_RANK, else
    cuda:(rank % visible devices); "cuda:N"; "cpu". BadInputError for anything else."""
    text = "" if device is None else str(device)
    return torch.device(_native.resolve_device(text, rank=rank))


def resolve_daemon(daemon: Optional[str]) -> str:
    return daemon if daemon else os.environ.get("METAD_ADDRESS", "")
