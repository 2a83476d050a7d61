"""Read once, fan out: which of materialize's requests the ranks of a replica group hold alike.

Where a DTensor is placed ``Replicate()`` on a mesh dimension of size R > 1 (HSDP's replica
dimension, ``replicate``, a TP group repeated across replicas), the R ranks along that dimension
hold the very same local tensor. This module only finds them, from torch's own placements and
the dimension's process group, and hands the core the groups and which group holds each
request. The rest is the core's, the same code ``metactl load`` runs (client/load/fanout.h):
each piece gets one reader (planner/plan/fanout.h AssignWithinGroups: the member with the fewest
bytes so far), the members first check that they hold the same pieces, the reader broadcasts
each piece in CRC-32C-checked chunks as soon as it is read while it reads the next, and a
receiver reads from storage whatever did not arrive intact (a reader that failed or died).
Everything a rank received is reported as ``fanout:rank N`` (N: the global rank that read it).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist


def replica_group(t: torch.Tensor) -> Optional[dist.ProcessGroup]:
    """The process group of the first mesh dimension of size > 1 along which the DTensor `t`
    is replicated, if any."""
    from torch.distributed.tensor import Replicate

    mesh = getattr(t, "device_mesh", None)
    if mesh is None:
        return None
    for dim, placement in enumerate(getattr(t, "placements")):
        if isinstance(placement, Replicate) and mesh.size(dim) > 1:
            return mesh.get_group(dim)  # type: ignore[no-any-return]
    return None


def spec(holders: Sequence[Optional[dist.ProcessGroup]], entries: Sequence[int], identities: Sequence[str],
         device: torch.device, timeout_s: float) -> Optional[Dict[str, Any]]:
    """The native fan_out= of one materialize call: `holders[i]`, the replica group holding
    request i alike (None: this rank alone), `entries[i]` the tensor it fills (one reader per
    tensor), `identities[i]` what request i is (the members compare them before any byte
    moves). None when nothing is shared."""
    by_ranks: Dict[Tuple[int, ...], dist.ProcessGroup] = {}
    ranks_of: List[Optional[Tuple[int, ...]]] = []
    for group in holders:
        ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else None
        # The core numbers a group's members by ascending global rank, as DeviceMesh makes them.
        if ranks is not None and (len(ranks) < 2 or list(ranks) != sorted(set(ranks))):
            ranks = None
        if ranks is not None and group is not None:
            by_ranks.setdefault(ranks, group)
        ranks_of.append(ranks)
    if not by_ranks:
        return None
    order = sorted(by_ranks)  # one order on every rank (the core enters groups in it)
    index = {ranks: i for i, ranks in enumerate(order)}
    collective = "cuda" if "nccl" in str(dist.get_backend(by_ranks[order[0]])) else "cpu"
    return {"rank": dist.get_rank(), "groups": [by_ranks[r] for r in order], "members": [list(r) for r in order],
            "group_of_request": [index[r] if r is not None else -1 for r in ranks_of], "entry_of_request": list(entries),
            "identity": list(identities),
            "device": str(device) if collective == "cuda" else "cpu", "timeout_s": timeout_s}
