"""Defaults read as torchrun sets them: RANK, WORLD_SIZE, LOCAL_RANK; METAD_ADDRESS."""
from __future__ import annotations

import os
from typing import Optional, Union

import torch

from ._errors import BadInputError


def env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise BadInputError(f"{name}={text!r} is not an integer") from None


def rank_and_world(process_group=None) -> "tuple[int, int]":
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(process_group), dist.get_world_size(process_group)
    return env_int("RANK", 0), env_int("WORLD_SIZE", 1)


def resolve_device(device: Union[None, str, torch.device]) -> torch.device:
    """None: cuda:LOCAL_RANK when CUDA is available, else the CPU. "cuda": cuda:LOCAL_RANK."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", env_int("LOCAL_RANK", 0))
    return device


def resolve_daemon(daemon: Optional[str]) -> str:
    return daemon if daemon else os.environ.get("METAD_ADDRESS", "")
