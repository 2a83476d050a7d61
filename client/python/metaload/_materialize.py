"""materialize(): fill a meta-built module with exactly the tensors, and the parts of them, it holds."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union, cast

import torch
import torch.distributed as dist

from . import _native
from ._env import rank_and_world, resolve_daemon, resolve_device
from ._errors import BadInputError, MetaTensorError
from ._hf_names import NameMap, Piece, map_names
from ._layout import HeldBox, Layout, dtensor_layout
from ._report import LoadReport, Provenance
from ._verify import _is_meta, collective_group, exchange_findings, mark_unfilled, module_findings


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
    a renamed one, the stored pieces of a fused tensor: _hf_names), else its name as the
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
    holds (_layout.py; None: all of it): computed once per entry (DTensor's shape arithmetic is
    slow in Python). Raises BadInputError for a placement metaload refuses."""
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
        whole = list(e.tensor.shape)
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
                                            is_buffer=e.is_buffer))
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
        for name, r_start, r_len in pieces:
            lo = [max(b, r) for b, r in zip(box.start, r_start)]
            hi = [min(b + bl, r + rl) for b, bl, r, rl in zip(box.start, box.length, r_start, r_len)]
            if any(h <= l for l, h in zip(lo, hi)):
                continue
            at = [ls + l - b for ls, l, b in zip(box.local_start, lo, box.start)]
            dest = _narrowed(local, at, [h - l for l, h in zip(lo, hi)]).squeeze(0)
            start = [l - r for l, r in zip(lo[1:], r_start[1:])]
            length = [h - l for l, h in zip(lo[1:], hi[1:])]
            out.append((name, list(r_len[1:]), start, length, dest))
    return out


def _note_layout(report: LoadReport, key: str, local: torch.Tensor, layout: Layout) -> None:
    """The report's record of which part of `key` this rank holds (LoadReport.slices/boxes)."""
    boxes = [(tuple(b.start), tuple(b.length)) for b in layout.boxes]
    if layout.identity:
        report.sources[key] = "identity:Partial(sum)"
    elif len(boxes) == 1:
        report.slices[key] = boxes[0]
    elif not boxes:  # an empty shard: a box of no element
        report.slices[key] = ((0,) * local.dim(), tuple(local.shape))
    else:
        report.boxes[key] = boxes


def _module_init(model: torch.nn.Module, entry: _Entry) -> str:
    """A non-persistent buffer metaload has no rule for: the module's own initialization,
    keeping every other tensor of the owning module as it is. Returns the method used or ""."""
    owner, _ = entry.owners[0]
    method: Optional[Callable[[], object]] = None
    init_weights = getattr(model, "_init_weights", None)
    reset_parameters = getattr(owner, "reset_parameters", None)
    if init_weights is not None:
        method, used = (lambda: init_weights(owner)), "_init_weights"
    elif reset_parameters is not None:
        method, used = reset_parameters, "reset_parameters"
    if method is None:
        return ""
    others = {n: t.detach().clone() for n, t in list(owner._parameters.items()) + list(owner._buffers.items())
              if t is not None and t is not entry.tensor and not _is_meta(t)}
    with torch.no_grad():
        method()
        for n, saved in others.items():
            current = owner._parameters.get(n, owner._buffers.get(n))
            assert current is not None, n  # it was there a moment ago
            current.copy_(saved)
    return used


def materialize(model: torch.nn.Module, name: str, *, daemon: Optional[str] = None,
                device: Union[None, str, torch.device] = None, process_group: Optional[dist.ProcessGroup] = None,
                init_missing: str = "error", source: str = "auto", checkpoint: Optional[str] = None,
                verify: bool = True, read_threads: int = 2, timeout_s: float = 600.0,
                key_mapping: Optional[Mapping[str, str]] = None) -> LoadReport:
    """Fill every parameter and buffer of `model` that is on ``meta`` with this rank's part of it.

    ``model`` is built on meta (``with torch.device("meta")``, ``init_empty_weights()``,
    ``AutoModelForCausalLM.from_config``), and may already be parallelized: after FSDP2
    ``fully_shard`` or ``parallelize_module`` its DTensor parameters get exactly their local
    shard (``Shard(d)``, ``_StridedShard``, ``Replicate``, meshes of any rank, uneven and empty
    ``torch.chunk`` shards) and this rank reads only those bytes; a ``Partial`` holds the value as
    its reduction defines (sum: on coordinate 0, the others -0.0; avg/max/min: everywhere), and
    any other placement is refused before anything is allocated. Tensors that are not on meta
    are left alone.

    What is read is what the module holds, by its names in the checkpoint (a pipeline stage
    holding layers 10-19 reads only those), mapped as transformers' ``from_pretrained`` maps them
    for a transformers model: its conversion mapping (Mixtral's and the qwen2_moe family's
    per-expert tensors read straight into the fused ``experts.gate_up_proj``/``down_proj``), its
    ``base_model_prefix`` (a base ``AutoModel`` from a ``...ForCausalLM`` checkpoint) and
    ``key_mapping`` (checkpoint-name regex -> module name, as ``from_pretrained`` takes it);
    ``LoadReport.name_rules`` says which rule mapped each renamed tensor. A module wrapped in
    another (names ``lm.model...``, the checkpoint's ``model...``) is refused naming the prefix.
    Each tensor keeps the module's dtype (a BF16
    checkpoint into a float32 module is converted as ``load_state_dict`` would). Parameters stay
    the same ``nn.Parameter`` objects (``requires_grad`` kept, tied parameters stay one object).
    Non-persistent buffers (rotary ``inv_freq``) are computed as transformers computes them, or
    by the module's own ``_init_weights``/``reset_parameters`` when metaload has no rule.

    Where from: ``name`` is a model registered with a daemon (``metactl register``); ``daemon``
    (default ``$METAD_ADDRESS``) gives the file locations, files readable on this host are read
    directly and others streamed (``source="auto"|"direct"|"stream"``). Without a daemon, pass
    ``checkpoint="/path/to/hf-folder"``: a folder of safetensors this host reads directly.

    Tensors the checkpoint lacks raise ``MetaTensorError`` naming them before any byte is read,
    unless ``init_missing="zeros"`` or ``"normal:STD"``. Afterwards ``verify`` runs over
    ``process_group`` (default: the initialized default group; else one made from torchrun's
    variables and torn down after): every rank raises if any rank left a tensor on meta.

    Example (each rank, under torchrun)::

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        for block in model.model.layers:
            fully_shard(block)
        fully_shard(model)
        report = metaload.materialize(model, "llama-8b")   # daemon from METAD_ADDRESS
        print(report)     # where each tensor came from, bytes read, verified

    Every argument after ``name`` is keyword-only. Returns a LoadReport. Raises BadInputError
    (bad arguments, unknown model), MetaTensorError, LoadError (a daemon down, a deadline, an
    I/O error).
    """
    started = time.monotonic()
    if not isinstance(model, torch.nn.Module):
        raise BadInputError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    daemon = "" if checkpoint else resolve_daemon(daemon)
    rank, world = rank_and_world(process_group)
    resolved = resolve_device(device, rank)
    view = _native.open_model(name, daemon=daemon, checkpoint=checkpoint or "", timeout_s=timeout_s)
    collected = _collect(model)
    entries = [e for e in collected if _is_meta(e.tensor)]
    stored = view.stored()
    names = map_names(model, {n: list(e.tensor.shape) for e in collected for n in e.names}, stored,
                      stored_shapes={k: t.shape for k, t in stored.items()}, model_name=name, key_mapping=key_mapping)
    for e in entries:
        _resolve_names(e, view, names)
    report = LoadReport(model=name, rank=rank, world_size=world, device=str(resolved))
    report.name_rules = {e.names[0]: e.rule for e in entries if e.rule}
    how = _How(source=source, init_missing=init_missing, read_threads=read_threads, timeout_s=timeout_s)

    requests, owner, _ = _requests(entries)
    checked = how.materialize(view, requests, check_only=True)
    refused = [(f.tensor, f.why) for f in checked.refused]
    if not refused:
        # The library's resolution says which buffers only the module can compute.
        module_init = {owner[i] for i, r in enumerate(checked.results) if r.provenance.kind == "module"}
        _fill(model, entries, module_init, view, resolved, how, report)
    report.ties = _ties(model, view)
    report.seconds = time.monotonic() - started
    if not verify and not refused:
        return report
    with collective_group(process_group, resolved) as group:
        if refused:
            exchange_findings(refused, len(entries), group, checked.summary)
            raise MetaTensorError("unreachable: refused tensors were not reported")  # pragma: no cover
        bad, count = module_findings(model)
        report.verified_tensors = exchange_findings(bad, count, group)
    report.seconds = time.monotonic() - started
    return report


@dataclass(frozen=True)
class _How:
    """How materialize reads: the options it hands the native library on every call."""

    source: str
    init_missing: Optional[str]
    read_threads: int
    timeout_s: float

    def materialize(self, view: _native.ModelView, requests: Sequence[_native.Request], *,
                    check_only: bool) -> _native.MaterializeOutcome:
        return _native.materialize(view, requests, source=self.source, init_missing=self.init_missing,
                                   read_threads=self.read_threads, timeout_s=self.timeout_s, check_only=check_only)


def _fill(model: torch.nn.Module, entries: List[_Entry], module_init: Set[int], view: _native.ModelView,
          device: torch.device, how: _How, report: LoadReport) -> None:
    # Allocation through Module._apply, as to_empty does: FSDP2 re-registers its sharded
    # parameters there. Swapping (not replacing) each parameter keeps every Python object, so a
    # parameter tied between two modules is still one object when the second module is visited.
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model._apply(lambda t: torch.empty_like(t, device=device) if _is_meta(t) else t)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    for e in entries:
        module, attr = e.owners[0]
        e.tensor = _owned(module, attr)
    # Every other place that held one of these tensors must now hold the same object; one that
    # does not (a tie torch broke) holds memory nobody fills: verify must name it.
    for e in entries:
        for module, attr in e.owners[1:]:
            if _owned(module, attr) is not e.tensor:
                mark_unfilled(_owned(module, attr), f"allocated apart from {e.name}, which it was tied to, "
                                                    "and never filled")
    for index in sorted(module_init):
        e = entries[index]
        method = _module_init(model, e)
        report._note(e.name, Provenance("module", rule=method) if method else Provenance("unfilled"))
        if not method:
            mark_unfilled(e.tensor, "a buffer the checkpoint lacks, with no rule in metaload and no "
                                    "_init_weights/reset_parameters in the module to compute it")
    requests, owner, staged = _requests(entries)
    out = how.materialize(view, requests, check_only=False)
    with torch.no_grad():
        for dest, tmp in staged:
            dest.copy_(tmp)
    outcome: Dict[int, List[Tuple[bool, Provenance, str]]] = {}
    for index, r in zip(owner, out.results):
        outcome.setdefault(index, []).append((r.filled, Provenance.from_native(r.provenance), r.error))
    for index, e in enumerate(entries):
        results = outcome.get(index, [])
        if any(p.kind == "module" for _, p, _ in results):
            continue
        filled = all(f for f, _, _ in results)
        provenance = results[0][1] if results else Provenance("empty")
        label = str(provenance)
        if e.pieces is not None:
            label += f" (fused from {len(results)} stored tensors)"
        key = e.name if e.name in e.names else e.names[0]  # the module's own name
        if key != e.name:
            label += f" (as {e.name})"
        report._note(key, provenance, label)
        for alias in e.names:
            if alias != key:
                report._note(alias, Provenance("tied", tied_to=key), f"tied:{key}")
        local, layout = _local_layout(e)
        if layout is not None:
            _note_layout(report, key, local, layout)
        if not filled:
            mark_unfilled(e.tensor, next((err for f, _, err in results if not f and err), "not filled"))
    for i, r in enumerate(out.results):
        report._note_failovers(entries[owner[i]].name, r.failovers)
    report.direct_bytes = out.direct_bytes
    report.streamed_bytes = out.streamed_bytes


def _owned(module: torch.nn.Module, attr: str) -> torch.Tensor:
    owned = module._parameters[attr] if attr in module._parameters else module._buffers[attr]
    assert owned is not None, attr  # _collect skipped the None ones
    return owned


def _ties(model: torch.nn.Module, view: _native.ModelView) -> List[Tuple[str, str, bool]]:
    found: Dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for attr, t in module._parameters.items():
            if t is not None:
                found[f"{prefix}.{attr}" if prefix else attr] = t
    return [(alias, stored, found[alias] is found[stored]) for alias, stored in view.tied_to.items()
            if alias in found and stored in found]
