"""What became of each tensor metaload touched: the ledger verify() reads.

A loader marks every tensor it allocates or fills (read, with the core's proofs of its bytes;
computed; initialized; kept; left unfilled), by the tensor object, or for a dcp.load by the
memory it holds (a state_dict's values are views of the module's parameters). verify() trusts
no tensor without a mark: nothing says it was loaded.
"""
from __future__ import annotations

import enum
import weakref
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from .. import _native


# What became of each tensor metaload touched, so that verify() knows what proves its values: a
# mark and why, and for a read the proofs of its bytes (the core's, client/verify/tensor_proof.h),
# which verification sums across ranks against the registered digests. By id with a weak
# reference (a tensor is no dictionary key: == compares values); a dropped tensor's entry goes
# with it. A tensor without a mark was not filled by metaload: verify() names it.
class Mark(enum.Enum):
    UNFILLED = "unfilled"  # allocated, never filled: verify fails naming it
    KEPT = "kept"  # not on meta, left as it was: counted unproven
    READ = "read"  # checkpoint bytes (read, streamed or fanned out): its proofs say what they prove
    COMPUTED = "computed"  # a buffer's rule, the module's own init, a Partial's identity
    INITIALIZED = "initialized"  # an init policy: nothing proves its values


Proofs = Tuple[_native.Proof, ...]
_MARKS: Dict[int, Tuple["weakref.ref[torch.Tensor]", Mark, str, Proofs]] = {}


def _mark(tensor: torch.Tensor, mark: Mark, why: str, proofs: Proofs = ()) -> None:
    key = id(tensor)
    _MARKS[key] = (weakref.ref(tensor, lambda _: _MARKS.pop(key, None)), mark, why, proofs)


def mark_unfilled(tensor: torch.Tensor, why: str) -> None:
    _mark(tensor, Mark.UNFILLED, why)


def mark_kept(tensor: torch.Tensor) -> None:
    _mark(tensor, Mark.KEPT, "kept as it was: not on meta, not read")


def mark_read(tensor: torch.Tensor, proofs: Sequence[_native.Proof]) -> None:
    """Filled from checkpoint bytes; `proofs`: what the core says they prove (one per stored
    tensor read into it), none for a rank that holds no element of it."""
    _mark(tensor, Mark.READ, "read", tuple(proofs))


def mark_computed(tensor: torch.Tensor, how: str) -> None:
    _mark(tensor, Mark.COMPUTED, how)


def mark_initialized(tensor: torch.Tensor, how: str) -> None:
    _mark(tensor, Mark.INITIALIZED, how)


def marked(tensor: torch.Tensor) -> Optional[Tuple[Mark, str, Proofs]]:
    entry = _MARKS.get(id(tensor))
    return (entry[1], entry[2], entry[3]) if entry is not None and entry[0]() is tensor else None


# Tensors a dcp.load was to fill (metaload.LoadPlanner), by the memory they hold: its state_dict's
# values are views (model.state_dict() detaches every parameter), not the module's own objects,
# so the mark is keyed by the storage, the offset, shape and stride, and dtype of the local
# tensor, and holds the storage only weakly (StorageWeakRef: a freed storage's mark is void).
_RegionKey = Tuple[Any, int, Tuple[int, ...], Tuple[int, ...], torch.dtype]
_REGION_MARKS: Dict[_RegionKey, Tuple[Mark, str, Proofs]] = {}
_REGION_MARKS_KEPT = 0  # marks left after the last sweep of expired ones


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of `t`: a DTensor's local tensor, any other tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def region_key(tensor: torch.Tensor) -> _RegionKey:
    """What identifies the memory `tensor` (a DTensor: its local tensor) is: two views of the
    same storage, offset, shape, stride and dtype have the same key."""
    from torch.multiprocessing.reductions import StorageWeakRef

    local = local_tensor(tensor)
    storage = StorageWeakRef(local.untyped_storage())  # type: ignore[no-untyped-call]
    return (storage, int(local.storage_offset()), tuple(local.shape), tuple(local.stride()), local.dtype)


def mark_region(tensor: torch.Tensor, mark: Mark, why: str, proofs: Sequence[_native.Proof] = ()) -> None:
    """Marks the memory `tensor` (or a DTensor's local tensor) holds: every tensor that is a view
    of exactly that memory (the module's Parameter behind a state_dict value) is marked too."""
    global _REGION_MARKS_KEPT
    _REGION_MARKS[region_key(tensor)] = (mark, why, tuple(proofs))
    if len(_REGION_MARKS) > 2 * _REGION_MARKS_KEPT + 64:  # freed storages' marks go, amortized
        for key in [k for k in _REGION_MARKS if k[0].expired()]:
            del _REGION_MARKS[key]
        _REGION_MARKS_KEPT = len(_REGION_MARKS)


def clear_region(tensor: torch.Tensor) -> None:
    _REGION_MARKS.pop(region_key(tensor), None)


def region_marked(tensor: torch.Tensor) -> Optional[Tuple[Mark, str, Proofs]]:
    if not _REGION_MARKS:
        return None
    key = region_key(tensor)
    return None if key[0].expired() else _REGION_MARKS.get(key)
