"""Parameters that are tensor subclasses holding FP8 codes beside their scales — torchao's
``Float8Tensor`` (``qdata`` float8 [N, K], ``scale`` float32, ``block_size``: elements per scale
along each dimension) — as materialize reads them.

Each inner tensor is an entry of its own: the codes under the checkpoint's codes name, declaring
torchao's granularity (``Request.scale_block``), the scales under the checkpoint's scale name. The
C++ core then decides as for any module keeping codes as stored (client/resolve/resolver.h): the
granularity must be the checkpoint's, each rank's scales those of its codes. Python only says
what torchao holds: a per-tensor scale torchao keeps as [1, 1] is read as the checkpoint stores it
([] or [1]), the same element. Allocation goes through the subclass's own ``__tensor_flatten__`` /
``__tensor_unflatten__`` (torchao implements no ``empty_like``), and the parameter is marked with
its inner tensors' outcome, for verify.

A DTensor whose local tensor is a Float8Tensor (``DTensor.from_local``: torchao shards one with
none of torch's APIs, docs/quantization.md) reads the codes of its box and the scales torchao's
arithmetic places beside them. Any other tensor subclass (torchao's int4, MX, NVFP4 tensors) is
refused before anything is allocated.

Thread-compatible: functions over their arguments; mark_parameters records marks (marks.py).
"""
from __future__ import annotations

import math
import sys
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, cast

import torch

from .. import _native
from .._errors import BadInputError
from .entries import _Entry, inner, local_of
from .layout import HeldBox, Layout, dtensor_layout
from .marks import Mark, mark_kept, mark_read, mark_unfilled, marked

#: torchao's attribute names: the codes and the scales of a Float8Tensor.
CODES, SCALES = "qdata", "scale"


def is_float8(t: torch.Tensor) -> bool:
    """`t` (a parameter, or a DTensor's local tensor) is torchao's Float8Tensor. Without
    torchao.quantization imported no module holds one (and metaload never imports it)."""
    cls = getattr(sys.modules.get("torchao.quantization"), "Float8Tensor", None)
    return cls is not None and isinstance(t, cls)


def _is_subclass(t: torch.Tensor) -> bool:
    """A wrapper tensor subclass other than DTensor (which layout.py reads)."""
    return hasattr(t, "__tensor_flatten__") and not hasattr(t, "device_mesh")


def refusal(name: str, t: torch.Tensor) -> Optional[str]:
    """Why metaload cannot fill `t` (named `name`), or None: a tensor subclass it does not know,
    alone or as a DTensor's local tensor."""
    local = local_of(t)
    if _is_subclass(local) and not is_float8(local):
        return (f"{name}: a {type(local).__module__}.{type(local).__name__}: metaload reads into plain tensors, "
                "DTensors and torchao's Float8Tensor")
    return None


def empty(t: torch.Tensor, allocate: Any) -> torch.Tensor:
    """Fresh memory for a meta Float8Tensor: each inner tensor by `allocate`, put together by
    the subclass's own unflatten (its block size, dtype and kernel preference kept)."""
    names, context = t.__tensor_flatten__()  # type: ignore[attr-defined]
    inner = {n: allocate(getattr(t, n)) for n in names}
    return type(t).__tensor_unflatten__(inner, context, t.shape, t.stride())  # type: ignore[attr-defined,no-any-return]


def split(entries: Sequence[_Entry], view: _native.ModelView,
          stored: Mapping[str, _native.StoredTensor]) -> List[_Entry]:
    """`entries` with each Float8Tensor's entry (alone or a DTensor's local tensor) replaced by
    its codes' and its scales' (named ``x.weight`` and ``x.weight.scale`` in the report). Entries'
    names must be resolved. Raises BadInputError for a tensor it cannot fill (refusal) or a
    placement layout.py refuses."""
    out: List[_Entry] = []
    quantized = view.quantized
    for e in entries:
        why = refusal(e.names[0], e.tensor)
        if why:
            raise BadInputError(why)
        t: Any = local_of(e.tensor)
        if not is_float8(t):
            out.append(e)
            continue
        layout = dtensor_layout(e.names[0], cast(Any, e.tensor)) if hasattr(e.tensor, "device_mesh") else None
        if layout is not None and layout.identity:
            raise BadInputError(f"{e.names[0]}: a Float8Tensor placed Partial(sum): its codes are read as stored, "
                                "never set to a reduction's identity")
        block = [int(b) for b in t.block_size]
        out.append(replace(e, tensor=t.qdata, inner=(CODES, list(t.qdata.shape)), scale_block=tuple(block),
                           whole=list(e.tensor.shape), layout=layout))
        if e.name not in quantized:
            continue  # stored unquantized (or not at all): the core refuses the codes, naming it
        codes_name, scales_name = quantized[e.name][0], quantized[e.name][1]
        out[-1].name = codes_name
        scale: torch.Tensor = t.scale
        shape, whole = list(scale.shape), list(scale.shape)
        theirs = stored.get(scales_name)
        if theirs is not None and list(theirs.shape) != shape and math.prod(theirs.shape) == scale.numel() == 1:
            shape = whole = list(theirs.shape)  # torchao's per-tensor [1, 1] is the checkpoint's [] or [1]
        elif theirs is not None and layout is not None:
            whole = list(theirs.shape)
        out.append(replace(e, names=[n + "." + SCALES for n in e.names], tensor=inner(t, SCALES, shape),
                           inner=(SCALES, shape), name=scales_name, pieces=None, rule="", scale_block=(),
                           whole=whole, layout=_scale_layout(layout, block, shape)))
    return out


def _scale_layout(codes: Optional[Layout], block: Sequence[int], scale_shape: Sequence[int]) -> Optional[Layout]:
    """Where a sharded Float8Tensor's local scale lies in the whole, by torchao's own arithmetic:
    local scale element i covers local codes [i x block, (i + 1) x block), so each codes box holds
    the scale blocks that cover it, as far as the local scale reaches (torchao keeps
    floor(local rows / block) of them). Whether those are the checkpoint's blocks of its codes is
    the core's rule (KeptSplitProblem), which refuses a box through a block."""
    if codes is None or len(scale_shape) != len(block):
        return None
    boxes = []
    for b in codes.boxes:
        local = [s // k for s, k in zip(b.local_start, block)]
        length = [min(-(-(s + n) // k) - s // k, held - at)
                  for s, n, k, held, at in zip(b.start, b.length, block, scale_shape, local)]
        boxes.append(HeldBox([s // k for s, k in zip(b.start, block)], length, local))
    return Layout(boxes)


def mark_parameters(entries: Sequence[_Entry]) -> None:
    """Each Float8Tensor parameter marked as its inner tensors' entries are: read (their proofs
    together) when both were read, unfilled when either was not, kept when they were kept."""
    parts: Dict[int, Tuple[torch.Tensor, List[Optional[Tuple[Mark, str, Tuple[_native.Proof, ...]]]]]] = {}
    for e in entries:
        if e.inner is None:
            continue
        module, attr = e.owners[0]
        wrapper: torch.Tensor = getattr(module, attr)  # the parameter (or buffer) holding it now
        parts.setdefault(id(wrapper), (wrapper, []))[1].append(marked(e.tensor))
    for wrapper, marks in parts.values():
        if any(m is None for m in marks):
            continue  # not touched by this load: verify says so
        found = [m for m in marks if m is not None]
        unfilled = [m[1] for m in found if m[0] is Mark.UNFILLED]
        if unfilled:
            mark_unfilled(wrapper, unfilled[0])
        elif all(m[0] is Mark.READ for m in found):
            mark_read(wrapper, [p for m in found for p in m[2]])
        elif any(m[0] is Mark.KEPT for m in found):
            mark_kept(wrapper)
