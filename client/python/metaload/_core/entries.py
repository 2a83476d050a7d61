"""The module's tensors as materialize sees them: one _Entry per tensor object (tied parameters
under every name they have), the checkpoint name each is read from, which part of it this rank
holds, and the native requests that fill it.

Thread-compatible: functions over their arguments; an entry caches its DTensor layout.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union, cast

import torch

from .. import _native
from .hf_names import NameMap, Piece
from .layout import HeldBox, Layout, dtensor_layout


class _NoLayout:
    """An entry's layout not computed yet."""


_NO_LAYOUT = _NoLayout()


@dataclass
class _Entry:
    """One tensor object of the module, under every name it has (tied parameters have several)."""

    names: List[str]
    tensor: torch.Tensor
    is_buffer: bool
    owners: List[Tuple[torch.nn.Module, str]] = field(default_factory=list)
    name: str = ""  # the name read from the checkpoint
    pieces: Optional[List[Piece]] = None  # a fused tensor: the stored tensors it is made of
    layout: Union[None, Layout, _NoLayout] = None  # the DTensor's layout, once computed (_local_layout)
    rule: str = ""  # the name mapping that found `name` ("": the module's own name)
    # An inner tensor of a tensor subclass parameter (torchao's Float8Tensor, subclasses.py): its
    # attribute and the shape it is read as; None: the parameter or buffer itself.
    inner: Optional[Tuple[str, List[int]]] = None
    scale_block: Tuple[int, ...] = ()  # codes kept as stored: the module's elements per scale
    whole: Optional[List[int]] = None  # an inner tensor's whole shape (None: the tensor's own)


def _collect(model: torch.nn.Module) -> List[_Entry]:
    entries: Dict[int, _Entry] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for is_buffer, table in ((False, module._parameters), (True, module._buffers)):
            for attr, t in table.items():
                if t is None:
                    continue
                full = f"{prefix}.{attr}" if prefix else attr
                entry = entries.setdefault(id(t), _Entry([], t, is_buffer, layout=_NO_LAYOUT))
                if full not in entry.names:
                    entry.names.append(full)
                entry.owners.append((module, attr))
    return list(entries.values())


def _resolve_names(entry: _Entry, view: _native.ModelView, names: NameMap) -> None:
    """The checkpoint name(s) of an entry: what transformers' rules read it from (its own name,
    a renamed one, the stored pieces of a fused tensor: hf_names.py), else its name as the
    checkpoint's skeleton spells it for a tie or a computed buffer."""
    for name in entry.names:
        read = names.reads.get(name)
        if read is not None:
            entry.name, entry.pieces, entry.rule = read.stored, read.pieces, read.rule
            return
    for candidates in (view.tied_to, view.buffer_rules):
        for name in entry.names:
            spelled, rule = names.checkpoint_name(name)
            if spelled in candidates:
                entry.name, entry.rule = spelled, rule
                return
    entry.name = entry.names[0]


def _local_layout(e: _Entry) -> Tuple[torch.Tensor, Optional[Layout]]:
    """The tensor this rank holds of `e.tensor` and, for a DTensor, which parts of the whole it
    holds (layout.py; None: all of it): computed once per entry (DTensor's shape arithmetic is
    slow in Python). Raises BadInputError for a placement metaload refuses."""
    if e.inner is not None:  # a Float8Tensor's inner tensor: its layout set by subclasses.split
        return e.tensor, e.layout if isinstance(e.layout, Layout) else None
    if not hasattr(e.tensor, "device_mesh"):
        return e.tensor, None
    from torch.distributed.tensor import DTensor

    t = cast(DTensor, e.tensor)
    if isinstance(e.layout, _NoLayout):
        e.layout = dtensor_layout(e.names[0], t)
    return t.to_local(), e.layout


# One native request before it is made: (stored name, whole shape, box start, box length, destination).
_Part = Tuple[str, List[int], Optional[List[int]], Optional[List[int]], torch.Tensor]


def _requests(entries: List[_Entry]) -> Tuple[List[_native.Request], List[int], List[Tuple[torch.Tensor, torch.Tensor]]]:
    """Native requests, the entry each fills, and (destination, source) pairs to copy afterwards:
    a request's destination must be contiguous (a non-contiguous one is read into a staging
    tensor), and a Partial's identity is set after the reads."""
    requests: List[_native.Request] = []
    owner: List[int] = []
    staged: List[Tuple[torch.Tensor, torch.Tensor]] = []
    for index, e in enumerate(entries):
        local, layout = _local_layout(e)
        # The same storage without autograd: the library writes the bytes (and converts dtypes
        # on its own threads, where autograd would refuse in-place writes to a leaf).
        local = local.detach()
        whole = e.whole if e.whole is not None else list(e.tensor.shape)
        parts: List[_Part]
        if e.pieces is not None:
            parts = _piece_requests(e.pieces, whole, local, layout)
        elif layout is None:
            parts = [(e.name, whole, None, None, local)]
        else:
            parts = [(e.name, whole, b.start, b.length, _narrowed(local, b.local_start, b.length))
                     for b in layout.boxes]
            if not parts:
                # Nothing of it held here (an empty shard, a Partial's identity): a request that
                # reads nothing still has the library resolve its name, on every rank alike. (A
                # 0-d tensor has no empty box: its one element is read, then set to the identity.)
                nothing = [0] * len(whole)
                parts = [(e.name, whole, nothing, nothing, _narrowed(local, [0] * local.dim(), [0] * local.dim()))]
        for name, shape, start, length, dest in parts:
            if not dest.is_contiguous() and not dest.is_meta:
                tmp = torch.empty(dest.shape, dtype=dest.dtype, device=dest.device)
                staged.append((dest, tmp))
                dest = tmp
            requests.append(_native.Request(name, shape, dest, box_start=start, box_length=length,
                                            is_buffer=e.is_buffer, scale_block=e.scale_block))
            owner.append(index)
        if layout is not None and layout.identity and not local.is_meta:
            # -0.0 is IEEE addition's identity (x + -0.0 == x for every x, -0.0 too): the sum over
            # the mesh dimension gives the value back bit for bit, where +0.0 would turn -0.0 into +0.0.
            staged.append((local, torch.full((), -0.0, dtype=local.dtype, device=local.device).expand(local.shape)))
    return requests, owner, staged


def _narrowed(t: torch.Tensor, start: Sequence[int], length: Sequence[int]) -> torch.Tensor:
    for d, (s, n) in enumerate(zip(start, length)):
        t = t.narrow(d, s, n)
    return t


def _piece_requests(pieces: List[Piece], whole: List[int], local: torch.Tensor, layout: Optional[Layout]) -> List[_Part]:
    """A fused tensor's pieces that meet this rank's boxes: each stored tensor's part that falls in
    a box, read into its place in the local tensor."""
    everything = HeldBox([0] * len(whole), list(whole), [0] * len(whole))
    out: List[_Part] = []
    for box in layout.boxes if layout is not None else [everything]:
        for p in pieces:
            lo = [max(b, r) for b, r in zip(box.start, p.start)]
            hi = [min(b + bl, r + rl) for b, bl, r, rl in zip(box.start, box.length, p.start, p.length)]
            if any(h <= l for l, h in zip(lo, hi)):
                continue
            at = [ls + l - b for ls, l, b in zip(box.local_start, lo, box.start)]
            dest = _narrowed(local, at, [h - l for l, h in zip(lo, hi)])
            lead = 1 if p.stacked else 0  # a stacked region's leading dimension is not the stored tensor's
            if p.stacked:
                dest = dest.squeeze(0)
            start = [l - r + s for l, r, s in zip(lo[lead:], p.start[lead:], p.stored_start)]
            length = [h - l for l, h in zip(lo[lead:], hi[lead:])]
            out.append((p.stored, list(p.stored_shape), start, length, dest))
    return out


def _held(e: _Entry) -> torch.Tensor:
    """The tensor entry `e` fills, as its first owner holds it now (after allocation)."""
    owned = _owned(*e.owners[0])
    return owned if e.inner is None else inner(owned, *e.inner)


def local_of(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of `t`: a DTensor's local tensor (the object the DTensor holds, whose
    inner tensors are the memory filled, not to_local()'s autograd result), any other tensor itself."""
    return cast(torch.Tensor, getattr(t, "_local_tensor")) if hasattr(t, "device_mesh") else t


def inner(t: torch.Tensor, attr: str, shape: Sequence[int]) -> torch.Tensor:
    """The inner tensor `attr` of Float8Tensor `t` (or of a DTensor's local one), shaped as the
    checkpoint stores it."""
    held: torch.Tensor = getattr(local_of(t), attr)
    return held if list(held.shape) == list(shape) else held.view(list(shape))


def _owned(module: torch.nn.Module, attr: str) -> torch.Tensor:
    owned = module._parameters[attr] if attr in module._parameters else module._buffers[attr]
    assert owned is not None, attr  # _collect skipped the None ones
    return owned
