"""Module tensors that transformers (>= 5) names or shapes differently from the checkpoint it
reads: its conversion_mapping renames some modules and fuses per-expert weights into one
tensor when it loads. metaload reads the same stored tensors, each straight into its place in
the fused tensor (only the part this rank holds), with no conversion step and no whole copy.

A "piece" is one stored tensor and the region of the module's tensor it fills: (stored name,
region start, region length), the region's first dimension of length 1 when the stored tensor
is one expert's slab of a stacked tensor (then the stored tensor has one dimension fewer).
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

Piece = Tuple[str, List[int], List[int]]

# Module name part -> checkpoint name part (Mixtral and the architectures transformers maps to it).
_RENAMES = ((".mlp.", ".block_sparse_moe."),)
_EXPERTS = re.compile(r"^(.*)\.experts\.(gate_up_proj|down_proj)$")


def renamed(name: str, stored: Dict[str, object]) -> Optional[str]:
    """The checkpoint's name for a module tensor transformers renamed, if the checkpoint has it."""
    for module_part, checkpoint_part in _RENAMES:
        alternative = name.replace(module_part, checkpoint_part)
        if alternative != name and alternative in stored:
            return alternative
    return None


def fused_pieces(name: str, shape: Sequence[int], stored: Dict[str, object]) -> Optional[List[Piece]]:
    """The stored tensors a fused expert tensor is made of, or None when it is not one:
    gate_up_proj [E, 2I, H] = per expert e: w1 [I, H] above w3 [I, H]; down_proj [E, H, I] =
    per expert e: w2 [H, I]."""
    match = _EXPERTS.match(name)
    if not match or len(shape) != 3:
        return None
    prefix, kind = match.group(1) + ".", match.group(2)
    for module_part, checkpoint_part in _RENAMES:
        prefix = prefix.replace(module_part, checkpoint_part)
    prefix = prefix[:-1]
    experts, rows, cols = shape
    pieces: List[Piece] = []
    for e in range(experts):
        if kind == "gate_up_proj":
            half = rows // 2
            pieces.append((f"{prefix}.experts.{e}.w1.weight", [e, 0, 0], [1, half, cols]))
            pieces.append((f"{prefix}.experts.{e}.w3.weight", [e, half, 0], [1, rows - half, cols]))
        else:
            pieces.append((f"{prefix}.experts.{e}.w2.weight", [e, 0, 0], [1, rows, cols]))
    if not all(p[0] in stored for p in pieces):
        return None
    return pieces
