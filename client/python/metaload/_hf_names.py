"""Module tensors that transformers (>= 5) names or shapes differently from the checkpoint it
reads: its conversion_mapping renames some modules and fuses per-expert weights into one
tensor when it loads. metaload reads the same stored tensors, each straight into its place in
the fused tensor (only the part this rank holds), with no conversion step and no whole copy.

The rules are the C++ architecture records' (planner/skeleton/hf/architecture_registry.h),
handed over as data by the native module: this file applies them and holds none of its own.
A rule is used only where the checkpoint holds the renamed tensors, so every model gets all of
them (transformers maps several architectures onto Mixtral's conversion).

A "piece" is one stored tensor and the region of the module's tensor it fills: (stored name,
region start, region length), the region's first dimension of length 1 when the stored tensor
is one expert's slab of a stacked tensor (then the stored tensor has one dimension fewer).
"""
from __future__ import annotations

import functools
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import _native

Piece = Tuple[str, List[int], List[int]]


@functools.lru_cache(maxsize=None)
def _rules() -> Tuple[Tuple[Tuple[str, str], ...], Dict[str, Tuple[str, ...]], Optional[re.Pattern[str]]]:
    """(module part -> checkpoint part renames, fused name -> its per-expert names, the pattern
    of a fused expert tensor's name), from the architectures' records."""
    data = _native.checkpoint_renames()
    renames = tuple((r.module_part, r.checkpoint_part) for r in data.renames)
    fused = {f.fused: tuple(f.per_expert) for f in data.fused_experts}
    experts = (re.compile(r"^(.*)\.experts\.(" + "|".join(re.escape(name) for name in fused) + r")$")
               if fused else None)
    return renames, fused, experts


def renamed(name: str, stored: Mapping[str, object]) -> Optional[str]:
    """The checkpoint's name for a module tensor transformers renamed, if the checkpoint has it."""
    for module_part, checkpoint_part in _rules()[0]:
        alternative = name.replace(module_part, checkpoint_part)
        if alternative != name and alternative in stored:
            return alternative
    return None


def fused_pieces(name: str, shape: Sequence[int], stored: Mapping[str, object]) -> Optional[List[Piece]]:
    """The stored tensors a fused expert tensor is made of, or None when it is not one: for
    each expert e, its per-expert tensors stacked on rows in order, each rows // n of them (the
    last the rest): gate_up_proj [E, 2I, H] = w1 [I, H] above w3 [I, H]; down_proj [E, H, I] =
    w2 [H, I]."""
    renames, fused, experts_pattern = _rules()
    match = experts_pattern.match(name) if experts_pattern else None
    if not match or len(shape) != 3:
        return None
    prefix, kind = match.group(1) + ".", match.group(2)
    for module_part, checkpoint_part in renames:
        prefix = prefix.replace(module_part, checkpoint_part)
    prefix = prefix[:-1]
    experts, rows, cols = shape
    parts = fused[kind]
    each = rows // len(parts)
    pieces: List[Piece] = []
    for e in range(experts):
        for i, part in enumerate(parts):
            start = i * each
            length = rows - start if i + 1 == len(parts) else each
            pieces.append((f"{prefix}.experts.{e}.{part}.weight", [e, start, 0], [1, length, cols]))
    if not all(p[0] in stored for p in pieces):
        return None
    return pieces
