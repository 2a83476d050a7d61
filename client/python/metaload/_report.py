"""LoadReport: what a rank read, from where, and what it computed instead of reading."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass
class LoadReport:
    model: str
    rank: int
    world_size: int
    device: str
    #: Where each tensor's values came from: "direct", "stream:<node>" (">BF16" appended when
    #: converted on load), "buffer:<rule>" (computed as transformers computes it),
    #: "module:<method>" (the module's own initialization), "init:<policy>", or "kept" (it was
    #: not on meta and was left alone).
    sources: Dict[str, str] = field(default_factory=dict)
    #: The part of each tensor this rank holds, as (start, length) per dimension; absent: all.
    slices: Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...]]] = field(default_factory=dict)
    direct_bytes: int = 0
    streamed_bytes: int = 0
    seconds: float = 0.0
    #: Tensors checked by verify across all ranks (None when verification was skipped).
    verified_tensors: Optional[int] = None
    #: Tied names (alias, stored name) and whether the module holds them as one object.
    ties: List[Tuple[str, str, bool]] = field(default_factory=list)
    #: Each switch of source while streaming ("TENSOR: from server A at byte N: ERROR -> server
    #: B"): the stream resumed from its last byte on another daemon, or the same one restarted.
    failovers: List[str] = field(default_factory=list)
    #: This rank's tensors checked against the digests recorded at `metactl register --digest`:
    #: {"matched", "sliced_not_checked", "on_device_not_checked"} counts; None when the model has
    #: no digests (or the load was not plan-driven). A mismatch fails the tensor (MetaTensorError).
    registered_digests: Optional[Dict[str, int]] = None

    @property
    def bytes_read(self) -> int:
        """Bytes that arrived from the checkpoint's files, read directly or streamed."""
        return self.direct_bytes + self.streamed_bytes

    def __str__(self) -> str:
        kinds: Dict[str, int] = {}
        for s in self.sources.values():
            key = s.split(":")[0].split(" ")[0].split(">")[0]
            kinds[key] = kinds.get(key, 0) + 1
        how = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        verdict = "not verified" if self.verified_tensors is None else f"verified {self.verified_tensors} tensors"
        failed_over = len({line.split(": from server ")[0] for line in self.failovers})
        moved = f", {failed_over} failed over" if failed_over else ""
        return (f"metaload: rank {self.rank}/{self.world_size} {self.model} on {self.device}: "
                f"{len(self.sources)} tensors ({how}{moved}), {self.bytes_read / 2**20:.2f} MiB read in "
                f"{self.seconds:.2f} s, {verdict}")
