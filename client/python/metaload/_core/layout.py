"""Which parts of a DTensor's whole tensor this rank holds, as boxes, from DTensor's own arithmetic.

A plain layout (Shard, Replicate) is one box: torch's compute_local_shape_and_global_offset. A
_StridedShard's rows are not one box (rows [0, 1, 4, 5] of 8 on rank 0 of 2, split factor 2): each
dimension's held indices come from applying every placement's own split (its `_split_tensor`, the
function distribute_tensor shards with) to an `arange` of that dimension, mesh dimension by mesh
dimension left to right as distribute_tensor applies them; each run of consecutive indices is one
box. `Partial` holds the value as its reduction defines: sum on the rank at coordinate 0 of that
mesh dimension (the others hold the identity), avg/max/min on every rank. Any other placement is
refused (BadInputError naming the tensor and the placement), before anything is allocated or read.

Pure functions of the DTensor's metadata; thread-compatible.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import torch

from .._errors import BadInputError

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Placement

#: Partial reductions whose value every rank can hold exactly: op -> whether only coordinate 0
#: holds it (sum: the others hold the identity, so the reduction gives the value back exactly).
_PARTIAL_OPS = {"sum": True, "avg": False, "max": False, "min": False}


@dataclass(frozen=True)
class HeldBox:
    """One box of the whole tensor this rank holds, and where it lies in the local tensor."""

    start: List[int]  # in the whole tensor, per dimension
    length: List[int]
    local_start: List[int]  # in the local tensor, per dimension


@dataclass(frozen=True)
class Layout:
    """This rank's part of a DTensor. ``boxes`` are disjoint and cover the local tensor; none
    when it holds no element (an empty shard) or holds the identity of a Partial(sum) instead of
    the value (``identity``: nothing is read, the local tensor is set to the identity)."""

    boxes: List[HeldBox]
    identity: bool = False


def dtensor_layout(name: str, t: "DTensor") -> Optional[Layout]:
    """This rank's part of `t` (named `name` in messages); None: all of it (every placement
    replicates the value). Raises BadInputError for a placement metaload cannot prove it reads
    right, or a local tensor whose shape its placements do not give."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec

    mesh, placements = t.device_mesh, tuple(t.placements)
    order = getattr(t._spec, "shard_order", None)
    if order is not None and order != DTensorSpec.compute_default_shard_order(placements):
        raise BadInputError(f"{name}: placements {placements} with shard order {order}: metaload reads only "
                            "DTensor's default left-to-right order (or _StridedShard) and refuses this one")
    coordinate = mesh.get_coordinate()
    local_shape = list(t.to_local().shape)
    if coordinate is None:  # this rank is not in the mesh: it holds nothing
        return Layout([])
    return held_layout(name, list(t.shape), list(mesh.shape), list(coordinate), placements, local_shape)


def held_layout(name: str, shape: Sequence[int], mesh_sizes: Sequence[int], coordinate: Sequence[int],
                placements: Sequence["Placement"], local_shape: Sequence[int]) -> Optional[Layout]:
    """The Layout of a tensor of `shape` placed by `placements` on a mesh of `mesh_sizes`, at
    `coordinate`; `local_shape` is what the rank holds, checked against the placements."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    identity, strided, sharded = False, False, False
    for mesh_dim, p in enumerate(placements):
        # Exact types: a subclass (_MaskPartial, say) has semantics of its own.
        if type(p) is Replicate:
            continue
        if type(p) is Shard or type(p) is _StridedShard:
            sharded, strided = True, strided or type(p) is _StridedShard
            continue
        if type(p) is Partial and p.reduce_op in _PARTIAL_OPS:
            identity = identity or (_PARTIAL_OPS[p.reduce_op] and coordinate[mesh_dim] != 0)
            continue
        raise BadInputError(f"{name}: placement {p!r} on mesh dimension {mesh_dim} (placements "
                            f"{tuple(placements)}): metaload cannot prove which values this rank holds and "
                            "refuses it before allocating or reading anything (it reads Replicate, Shard, "
                            "_StridedShard and Partial sum/avg/max/min)")
    if strided:
        held = _held_indices(shape, mesh_sizes, coordinate, placements)
        runs = [_runs(index) for index in held]
        given = [len(index) for index in held]
    elif sharded:
        from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

        local, offset = _compute_local_shape_and_global_offset(list(shape), list(mesh_sizes), list(coordinate),
                                                               placements)
        given = list(local)
        runs = [[(o, n, 0)] if n else [] for o, n in zip(offset, local)]
    else:
        given, runs = list(shape), [[(0, n, 0)] if n else [] for n in shape]
    if given != list(local_shape):
        raise BadInputError(f"{name}: a DTensor's local shard has shape {tuple(local_shape)}, but its placements "
                            f"{tuple(placements)} give {tuple(given)}: a layout metaload cannot read into")
    if identity:
        return Layout([], identity=True)
    if not sharded:
        return None
    boxes = [HeldBox([r[0] for r in box], [r[1] for r in box], [r[2] for r in box])
             for box in itertools.product(*runs)]
    return Layout(boxes)


def _held_indices(shape: Sequence[int], mesh_sizes: Sequence[int], coordinate: Sequence[int],
                  placements: Sequence["Placement"]) -> List[torch.Tensor]:
    """Per dimension, the whole tensor's indices this rank holds, in local order."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    held: List[torch.Tensor] = []
    for d, size in enumerate(shape):
        # The indices laid along dimension d of a tensor of the same rank, so that each
        # placement splits them exactly as it splits the tensor itself.
        index = torch.arange(size).view([size if i == d else 1 for i in range(len(shape))])
        for mesh_dim, p in enumerate(placements):
            if (type(p) is Shard or type(p) is _StridedShard) and p.dim % len(shape) == d:
                chunks, _ = p._split_tensor(index, mesh_sizes[mesh_dim], with_padding=False, contiguous=False)
                index = chunks[coordinate[mesh_dim]]
        held.append(index.reshape(-1))
    return held


def _runs(index: torch.Tensor) -> List[Tuple[int, int, int]]:
    """Runs of consecutive indices: (start in the whole, length, start in the local tensor)."""
    if index.numel() == 0:
        return []
    breaks = (torch.nonzero(index[1:] - index[:-1] != 1).reshape(-1) + 1).tolist()
    starts, ends = [0] + breaks, breaks + [index.numel()]
    return [(int(index[s]), e - s, s) for s, e in zip(starts, ends)]
