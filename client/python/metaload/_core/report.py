"""LoadReport: what a rank read, from where, and what it computed instead of reading.

Every loader (materialize, load, the DCP reader) records what the native library hands back
(provenance, failovers, digests, bytes, layouts) through LoadReport's _note* methods: one
builder, not a copy per loader.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    import torch

    from .. import _native
    from .layout import Layout
    from .verify import Verified

#: A part of a tensor: a (start, length) pair per dimension (LoadReport.slices).
Box = Tuple[Tuple[int, int], ...]


def box_per_dim(start: Sequence[int], length: Sequence[int]) -> Box:
    """The box of `start` and `length` (one per dimension) as a (start, length) pair per dimension."""
    return tuple((int(s), int(n)) for s, n in zip(start, length))


@dataclass(frozen=True)
class Provenance:
    """Where one tensor's values came from, as data; ``str()`` is the text ``LoadReport.sources``
    shows (the same rules as ``metactl load``'s report, client/read/provenance.h).

    ``kind``: ``"direct"`` or ``"stream"`` (read; the kind of its first source), ``"init"``
    (initialized as the init policy ``rule`` says), ``"buffer"`` (computed by its ``rule``),
    ``"tied"`` (the same tensor as ``tied_to``), ``"module"`` (left to the module; ``rule``: the
    method that computed it), ``"none"`` (nothing delivered it: an empty shard); and those only
    ``materialize`` reports: ``"unfilled"`` (a buffer nothing could compute), ``"empty"`` (a
    fused tensor none of whose pieces this rank holds), ``"identity"`` (this rank's part of a
    ``Partial`` DTensor is the reduction's identity, ``rule`` names it: ``"Partial(sum)"``;
    another rank holds the value), ``"kept"`` (not on meta: left as it was, unread, and so
    unproven), ``"fanout"`` (checkpoint bytes another rank of its replica group read and
    broadcast: ``rule`` is "rank N") and ``"dequantized"`` (computed from a quantized checkpoint's
    codes and scales, read from ``nodes``; ``rule`` names the quantization and both tensors).
    """

    kind: str
    #: Reads: every source that delivered bytes, in order: "" for a direct read, else the node.
    nodes: Tuple[str, ...] = ()
    #: Reads: the dtype it was converted to on load ("BF16"), None when held as stored.
    converted_to: Optional[str] = None
    rule: str = ""
    #: "tied": the stored tensor it is; a read: the stored tensor it was read as (an alias).
    tied_to: str = ""

    @classmethod
    def from_native(cls, native: "_native.Provenance") -> "Provenance":
        return cls(kind=native.kind, nodes=tuple(native.nodes), converted_to=native.converted_to, rule=native.rule,
                   tied_to=native.tied_to)

    def __str__(self) -> str:
        if self.kind in ("init", "buffer", "identity"):
            return f"{self.kind}:{self.rule}"
        if self.kind == "module":
            return f"module:{self.rule}" if self.rule else "module"
        if self.kind in ("tied", "unfilled", "empty", "kept"):
            return self.kind
        if self.kind == "fanout":
            return f"fanout:{self.rule}"
        parts: List[str] = []
        streaming = False
        for node in self.nodes:
            parts.append("direct" if not node else node if streaming else f"stream:{node}")
            streaming = bool(node)
        text = "+".join(parts)
        if self.kind == "dequantized":
            return f"dequantized:{text}>{self.converted_to} ({self.rule})"
        if self.converted_to:
            text += f">{self.converted_to}"
        if self.tied_to:
            text += f" (tied:{self.tied_to})"
        return text

    @property
    def summary_kind(self) -> str:
        """The word LoadReport's one-line summary counts it under: its kind, "direct+stream" for a
        read that began direct and went on streaming, "" for "none"."""
        if self.kind == "none":
            return ""
        if self.kind == "direct" and any(self.nodes[1:]):
            return "direct+stream"
        return self.kind


@dataclass
class LoadReport:
    model: str
    rank: int
    world_size: int
    device: str
    #: Where each tensor's values came from: "direct", "stream:<node>" (">BF16" appended when
    #: converted on load), "buffer:<rule>" (computed as transformers computes it),
    #: "module:<method>" (the module's own initialization), "init:<policy>", or "kept" (it was
    #: not on meta and was left alone), "identity:Partial(sum)" (this rank holds the sum's
    #: identity, -0.0, and another rank the value: nothing read).
    sources: Dict[str, str] = field(default_factory=dict)
    #: The same, as data (Provenance), by the same names.
    provenance: Dict[str, Provenance] = field(default_factory=dict)
    #: The module tensors read under another name than their own, and the rule that mapped them
    #: (transformers' WeightRenaming/WeightConverter, its base_model_prefix), by module name.
    name_rules: Dict[str, str] = field(default_factory=dict)
    #: The part of each tensor this rank holds, as a (start, length) pair per dimension:
    #: ``((0, 48), (0, 64))`` is rows 0-47 of a [96, 64] tensor; absent: all (or several boxes,
    #: in ``boxes``).
    slices: Dict[str, Box] = field(default_factory=dict)
    #: The tensors whose part here is several boxes (a _StridedShard's rows), every box as in slices.
    boxes: Dict[str, List[Box]] = field(default_factory=dict)
    direct_bytes: int = 0
    streamed_bytes: int = 0
    #: Read once, fan out: bytes this rank received from the rank of its replica group that read
    #: them, and bytes it broadcast to the others (each receiver counted).
    fanout_received_bytes: int = 0
    fanout_sent_bytes: int = 0
    #: What went wrong on the way, if anything ("fan-out over ranks 0, 2 stopped at piece 4 of 9:
    #: ...; 6 pieces read from storage instead"): what did not arrive was read from storage.
    fanout_notes: List[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Tensors verify proved across all ranks: on no rank on meta or unfilled, and filled by
    #: this load (None when verification was skipped). Kept tensors are not among them.
    verified_tensors: Optional[int] = None
    #: Tensors verify checked across all ranks but cannot vouch for: kept as they were.
    unproven_tensors: int = 0
    #: Every tensor's content proven across all ranks (docs/integrity.md): every stored tensor
    #: checked against its registered digest, whatever split the ranks hold, every other computed
    #: by a rule; None when verification was skipped. Only then does the report say "verified".
    proven: Optional[bool] = None
    #: The line that says what was proven and what was not, as metactl load prints it.
    content: str = ""
    #: Each stored tensor the digests could not check, and why ("rank 1: w: unproven: ...").
    content_unproven: List[str] = field(default_factory=list)
    #: Stored tensors by state, each counted once across all ranks: "checked", "no_digest",
    #: "unproven", "mismatch" (a mismatch fails verification).
    stored_states: Dict[str, int] = field(default_factory=dict)
    #: (alias, tensor) pairs the module's config ties but the checkpoint stores with values of
    #: their own: loaded apart, untied, as transformers' from_pretrained does.
    untied: List[Tuple[str, str]] = field(default_factory=list)
    #: Checkpoint tensors no module tensor uses (strict=False loaded the rest; a transformers
    #: base model's unused head tensors are listed too, as from_pretrained ignores them).
    unexpected: List[str] = field(default_factory=list)
    #: Tied names (alias, stored name) and whether the module holds them as one object.
    ties: List[Tuple[str, str, bool]] = field(default_factory=list)
    #: Each switch of source while streaming ("TENSOR: from server A at byte N: ERROR -> server
    #: B"): the stream resumed from its last byte on another daemon, or the same one restarted.
    failovers: List[str] = field(default_factory=list)
    #: Why a checkpoint folder's digest manifest (`metactl digest`) was not used, if it was not.
    digest_note: str = ""

    @property
    def counts(self) -> Dict[str, int]:
        """This rank's tensors by where their values came from: ``checkpoint`` (its bytes, read;
        whether they match their digests is ``stored_states``, across all ranks), ``computed`` (a
        buffer rule or the module's own init), ``tied`` (the same tensor as another),
        ``initialized`` (an init policy asked for), ``dequantized`` (computed from checkpoint
        bytes: a quantized value's codes and scales, by the rule its source names), ``identity`` (a
        Partial(sum)'s identity: another rank holds the value), ``empty`` (this rank holds no
        element of it), ``kept`` (not read: unproven), ``unfilled``. Every tensor of
        ``provenance`` is counted once."""
        out = {k: 0 for k in ("checkpoint", "dequantized", "computed", "tied", "initialized", "identity", "empty",
                              "kept", "unfilled")}
        word = {"direct": "checkpoint", "stream": "checkpoint", "fanout": "checkpoint", "dequantized": "dequantized",
                "buffer": "computed", "module": "computed", "tied": "tied", "init": "initialized", "identity": "identity", "none": "empty",
                "empty": "empty", "kept": "kept", "unfilled": "unfilled"}
        for p in self.provenance.values():
            if p.kind in word:
                out[word[p.kind]] += 1
        return out

    @property
    def bytes_read(self) -> int:
        """Bytes that arrived from the checkpoint's files, read directly or streamed."""
        return self.direct_bytes + self.streamed_bytes

    def _note(self, name: str, provenance: Provenance, text: Optional[str] = None) -> None:
        """Records where `name`'s values came from; `text` (default: str(provenance)) in sources."""
        self.provenance[name] = provenance
        self.sources[name] = str(provenance) if text is None else text

    def _note_failovers(self, name: str, failovers: Sequence["_native.Failover"]) -> None:
        """Records each switch of source while `name` streamed, as one line of ``failovers``."""
        for f in failovers:
            self.failovers.append(f"{name}: from server {f.source} at byte {f.at_byte}: {f.error} -> server {f.target}")

    def _note_outcome(self, out: Union["_native.MaterializeOutcome", "_native.RankLoad"]) -> None:
        """Adds one native load's totals: bytes read, bytes fanned out, what went wrong on the way."""
        self.direct_bytes += out.direct_bytes
        self.streamed_bytes += out.streamed_bytes
        self.fanout_received_bytes += out.fanout_received_bytes
        self.fanout_sent_bytes += out.fanout_sent_bytes
        self.fanout_notes += list(out.fanout_notes)

    def _note_verified(self, verified: "Verified") -> None:
        """Records what verification proved across all ranks."""
        self.verified_tensors = verified.checked - verified.unproven
        self.unproven_tensors = verified.unproven
        self.proven = verified.proven
        self.content = verified.content
        self.content_unproven = list(verified.unproven_lines)
        self.stored_states = dict(verified.stored)

    def _note_layout(self, name: str, local: "torch.Tensor", layout: "Layout") -> None:
        """Records which part of `name` this rank holds (``slices``/``boxes``; a Partial's identity)."""
        boxes = [box_per_dim(b.start, b.length) for b in layout.boxes]
        if layout.identity:
            self._note(name, Provenance("identity", rule="Partial(sum)"))
        elif len(boxes) == 1:
            self.slices[name] = boxes[0]
        elif not boxes:  # an empty shard: a box of no element
            self.slices[name] = box_per_dim((0,) * local.dim(), local.shape)
        else:
            self.boxes[name] = boxes

    def __str__(self) -> str:
        kinds: Dict[str, int] = {}
        for p in self.provenance.values():
            kinds[p.summary_kind] = kinds.get(p.summary_kind, 0) + 1
        how = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        counts = self.counts
        here = [f"{counts[k]} {text}" for k, text in (
            ("checkpoint", "from checkpoint bytes"), ("dequantized", "computed from checkpoint bytes (dequantized)"),
            ("computed", "computed"), ("tied", "tied"),
            ("initialized", "initialized by policy"), ("identity", "a Partial's identity"), ("empty", "empty here"),
            ("kept", "kept unproven")) if counts[k]]
        # "verified" only when every tensor's content is proven; else what was and was not.
        if self.verified_tensors is None:
            verdict = "not verified (verification skipped)"
        else:
            verdict = (f"{'verified' if self.proven else 'loaded, not verified'} across all ranks: {self.content}" +
                       (f" (this rank: {', '.join(here)})" if here else ""))
        if self.unexpected:
            verdict += f"; {len(self.unexpected)} checkpoint tensors unused"
        failed_over = len({line.split(": from server ")[0] for line in self.failovers})
        moved = f", {failed_over} failed over" if failed_over else ""
        return (f"metaload: rank {self.rank}/{self.world_size} {self.model} on {self.device}: "
                f"{len(self.sources)} tensors ({how}{moved}), {self.bytes_read / 2**20:.2f} MiB read in "
                f"{self.seconds:.2f} s, {verdict}")
