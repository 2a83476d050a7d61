"""materialize(): fill a meta-built module with exactly the tensors, and the parts of them, it holds."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Sequence, Set, Tuple, Union, cast

import torch
import torch.distributed as dist

from .. import _native
from .._env import rank_and_world, resolve_daemon, resolve_device
from .._errors import BadInputError, MetaTensorError
from . import fanout as _fanout
from .hf_names import NameMap, Piece, map_names
from .layout import HeldBox, Layout, dtensor_layout
from .report import LoadReport, Provenance
from .strict import MISSING, InitMissing, account, check_policies
from .verify import (JOIN_TIMEOUT_S, _is_meta, clear_mark, collective_group, exchange_findings, mark_kept,
                      mark_unfilled, marked, module_findings)


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


def _note_layout(report: LoadReport, key: str, local: torch.Tensor, layout: Layout) -> None:
    """The report's record of which part of `key` this rank holds (LoadReport.slices/boxes)."""
    boxes = [(tuple(b.start), tuple(b.length)) for b in layout.boxes]
    if layout.identity:
        report._note(key, Provenance("identity", rule="Partial(sum)"))
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


def materialize(model: torch.nn.Module, name: Optional[str] = None, *, daemon: Optional[str] = None,
                device: Union[None, str, torch.device] = None, process_group: Optional[dist.ProcessGroup] = None,
                init_missing: Optional[InitMissing] = "error", strict: bool = True, overwrite: bool = False,
                source: str = "auto", checkpoint: Optional[str] = None, verify: bool = True, read_threads: int = 2,
                timeout_s: float = 600.0, verify_timeout_s: float = JOIN_TIMEOUT_S,
                key_mapping: Optional[Mapping[str, str]] = None, fan_out: bool = True,
                _tied_after: Collection[str] = ()) -> LoadReport:
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
    ``checkpoint="/path/to/hf-folder"``: a folder of safetensors this host reads directly
    (``name`` then defaults to the folder's name).

    Strict, all or nothing (``strict=True``): before anything is allocated or read, every module
    tensor must have a source — checkpoint bytes, a computed buffer, a tie, or an init policy
    you asked for — and every checkpoint tensor must have a place in the module; else
    ``MetaTensorError`` names the tensors and the likely cause (another size of this model?
    another architecture?). ``strict=False`` loads what matches and lists the checkpoint's
    other tensors in ``report.unexpected`` (a pipeline stage holding layers 10-19 reads only
    those). Tensors that are not on meta are left alone ("kept", and not counted as verified);
    under ``strict`` that is refused where the checkpoint has them (the model was not built on
    meta?) unless ``overwrite=True`` reads the checkpoint into them.

    ``init_missing``: what fills tensors the checkpoint lacks — a policy (``"zeros"``,
    ``"normal:STD"``) for every missing tensor, or ``{"value_head.*": "zeros"}``: policies by
    tensor name or fnmatch pattern, for those only (None: the policy the model was registered
    with). A load in which it would initialize most of the module is refused with what the
    checkpoint lacks.

    Read once, fan out (``fan_out=True``): where ranks hold the same bytes — a DTensor placed
    ``Replicate()`` on a mesh dimension (HSDP's replica dimension, ``replicate``, a TP group
    repeated across replicas) — each tensor is read by one rank of that dimension and broadcast
    to the others over the dimension's process group, CRC-checked on CPU; what does not arrive
    intact is read from storage. ``report.sources`` says ``fanout:rank N``; ``report.bytes_read``
    counts only this rank's own reads.

    Afterwards ``verify`` runs over ``process_group`` (default: the initialized default group;
    else one made from torchrun's variables and torn down after, waiting ``verify_timeout_s``
    (300 s by default, as metactl load) for every rank and naming those that never
    came): every rank raises if any rank left a tensor on meta or unfilled. A fill that fails midway leaves no tensor
    looking filled: ``metaload.verify(model)`` then fails too.

    Example (each rank, under torchrun)::

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        for block in model.model.layers:
            fully_shard(block)
        fully_shard(model)
        report = metaload.materialize(model, "llama-8b")   # daemon from METAD_ADDRESS
        print(report)     # where each tensor came from, bytes read, what verified proves

    Every argument after ``name`` is keyword-only. Returns a LoadReport. Raises BadInputError
    (bad arguments, unknown model), MetaTensorError, LoadError (a daemon down, a deadline, an
    I/O error, a rank that never came to verify).
    """
    started = time.monotonic()
    if not isinstance(model, torch.nn.Module):
        raise BadInputError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    if name is None:
        if not checkpoint:
            raise BadInputError("name: give the name of a model registered with the daemon (metactl register), "
                                "or checkpoint=\"/path/to/hf-folder\" (then the name is optional)")
        name = os.path.basename(os.path.normpath(checkpoint))
    daemon = "" if checkpoint else resolve_daemon(daemon)
    rank, world = rank_and_world(process_group)
    resolved = resolve_device(device, rank)
    view = _native.open_model(name, daemon=daemon, checkpoint=checkpoint or "", timeout_s=timeout_s)
    if init_missing is None:  # the policy the model was registered with
        init_missing = view.init_missing or "error"
    check_policies(view, init_missing)
    stored = view.stored()
    untied, apart = _untie_both_stored(model, stored)
    # Tensors the caller ties to another once loaded (from_pretrained's tie_weights, as
    # transformers ties after loading): neither read nor counted here.
    tied_after = set(_tied_after)
    everything = [e for e in _collect(model) if not set(e.names) <= tied_after]
    entries = [e for e in everything if overwrite or _is_meta(e.tensor)]
    kept = [e for e in everything if not overwrite and not _is_meta(e.tensor)]
    names = map_names(model, {n: list(e.tensor.shape) for e in everything for n in e.names}, stored,
                      stored_shapes={k: t.shape for k, t in stored.items()}, model_name=name,
                      key_mapping=key_mapping)
    for e in everything:
        _resolve_names(e, view, names)
    report = LoadReport(model=name, rank=rank, world_size=world, device=str(resolved))
    report.name_rules = {e.names[0]: e.rule for e in entries if e.rule}
    how = _How(source=source, init_missing="error", read_threads=read_threads, timeout_s=timeout_s, fan_out=fan_out)

    requests, owner, _ = _requests(entries)
    first = how.materialize(view, requests, check_only=True)
    plan = account(model, entries, kept, view, stored, [(owner[i], why) for i, why in _refusals(first, requests)],
                   init_missing=init_missing, strict=strict, checkpoint=checkpoint, tied_after=tied_after)
    report.unexpected = list(plan.unexpected)
    # Resolved again without the tensors an init policy fills: the native grouping of what
    # remains ("layers 2–3 of 4 are missing") is the message; the accounting's own lines first.
    rest = [i for i in range(len(requests)) if owner[i] not in plan.init]
    checked = how.materialize(view, [requests[i] for i in rest], check_only=True)
    refused = list(plan.refused) + apart or [(f.tensor, f.why) for f in checked.refused]
    summary = list(plan.summary) + list(checked.summary) + [f"{t}: {why}" for t, why in apart]
    summary += [f"{t}: {why}" for t, why in plan.refused if why.startswith(MISSING + ":")]
    if not refused:
        # The library's resolution says which buffers only the module can compute.
        module_init = {owner[rest[i]] for i, r in enumerate(checked.results) if r.provenance.kind == "module"}
        _fill(model, entries, module_init, plan.init, view, resolved, how, report)
        report.untied = _tie_again_where_equal(model, untied, report)
        for e in kept:
            mark_kept(e.tensor)
            for alias in e.names:
                report._note(alias, Provenance("kept"))
    report.ties = _ties(model, view)
    report.seconds = time.monotonic() - started
    if not verify and not refused:
        return report
    with collective_group(process_group, resolved, verify_timeout_s) as group:
        if refused:
            exchange_findings(refused, len(entries), group, summary, refusal=True, timeout_s=verify_timeout_s)
            raise MetaTensorError("unreachable: refused tensors were not reported")  # pragma: no cover
        bad, counts = module_findings(model)
        total = exchange_findings(bad, counts, group, timeout_s=verify_timeout_s)
        report.verified_tensors = total.checked - total.unproven
        report.unproven_tensors = total.unproven
    report.seconds = time.monotonic() - started
    return report


def _untie_both_stored(model: torch.nn.Module, stored: Mapping[str, _native.StoredTensor]
                       ) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
    """A tie the module's config makes whose tensors the checkpoint stores apart: transformers
    (tie_weights during from_pretrained) loads both and does not tie them when their values
    differ. Each such alias gets a meta tensor of its own here, to be read from its own bytes
    (_tie_again_where_equal ties those that hold the same values back, as transformers does).
    Returns the (alias, tensor) pairs untied, and (alias, why) for those it cannot untie: a
    DTensor whose parallelization already holds the tie."""
    first: Dict[int, str] = {}
    untied: List[Tuple[str, str]] = []
    apart: List[Tuple[str, str]] = []
    for prefix, module in list(model.named_modules(remove_duplicate=False)):
        for attr, t in list(module._parameters.items()):
            if t is None or not _is_meta(t):
                continue
            full = f"{prefix}.{attr}" if prefix else attr
            if id(t) not in first:
                first[id(t)] = full
                continue
            source = first[id(t)]
            if full == source or full not in stored or source not in stored:
                continue
            if hasattr(t, "device_mesh"):
                apart.append((full, f"tied to {source} in the module, but the checkpoint stores both, with values "
                                    "of their own (transformers then loads them untied): build the model with "
                                    "tie_word_embeddings=False before parallelizing it"))
                continue
            module._parameters[attr] = torch.nn.Parameter(torch.empty_like(t, device="meta"),
                                                          requires_grad=t.requires_grad)
            untied.append((full, source))
            # As transformers' tie_weights records it: the model's ties no longer include it.
            ties = getattr(model, "all_tied_weights_keys", None)
            if isinstance(ties, dict):
                ties.pop(full, None)
    return untied, apart


def _tie_again_where_equal(model: torch.nn.Module, untied: List[Tuple[str, str]],
                           report: LoadReport) -> List[Tuple[str, str]]:
    """Of the pairs _untie_both_stored untied, ties back those whose bytes turned out equal (as
    transformers' tie_weights does); returns the pairs left apart."""
    apart: List[Tuple[str, str]] = []
    for alias, source in untied:
        held, kept_apart = model.get_parameter(alias), model.get_parameter(source)
        if torch.equal(held, kept_apart):
            parent, _, attr = alias.rpartition(".")
            model.get_submodule(parent)._parameters[attr] = kept_apart
            report._note(alias, Provenance("tied", tied_to=source), f"tied:{source}")
            ties = getattr(model, "all_tied_weights_keys", None)
            if isinstance(ties, dict):
                ties[alias] = source
        else:
            apart.append((alias, source))
    return apart


def _refusals(outcome: _native.MaterializeOutcome, requests: Sequence[_native.Request]) -> List[Tuple[int, str]]:
    """(request index, why) of each refusal of a check-only resolution (refusals name tensors)."""
    index: Dict[str, List[int]] = {}
    for i, r in enumerate(requests):
        index.setdefault(r.name, []).append(i)
    out: List[Tuple[int, str]] = []
    for f in outcome.refused:
        out += [(i, f.why) for i in index.get(f.tensor, [])]
    return out


@dataclass(frozen=True)
class _How:
    """How materialize reads: the options it hands the native library on every call."""

    source: str
    init_missing: Optional[str]
    read_threads: int
    timeout_s: float
    fan_out: bool = True

    def materialize(self, view: _native.ModelView, requests: Sequence[_native.Request], *,
                    check_only: bool, fan_out: Optional[Dict[str, Any]] = None) -> _native.MaterializeOutcome:
        return _native.materialize(view, requests, source=self.source, init_missing=self.init_missing,
                                   read_threads=self.read_threads, timeout_s=self.timeout_s, check_only=check_only,
                                   fan_out=fan_out)


def _fill(model: torch.nn.Module, entries: List[_Entry], module_init: Set[int], init: Dict[int, str],
          view: _native.ModelView, device: torch.device, how: _How, report: LoadReport) -> None:
    # Allocation through Module._apply, as to_empty does: FSDP2 re-registers its sharded
    # parameters there. Swapping (not replacing) each parameter keeps every Python object, so a
    # parameter tied between two modules is still one object when the second module is visited.
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model._apply(lambda t: _empty(t, device) if _is_meta(t) else t)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    for e in entries:
        module, attr = e.owners[0]
        e.tensor = _owned(module, attr)
        # _apply allocates a buffer once per module that registers it: one buffer object under
        # several names is one tensor again, filled once (as load_state_dict sees it).
        if e.is_buffer:
            for other, other_attr in e.owners[1:]:
                other._buffers[other_attr] = e.tensor
    # Every other place that held one of these tensors must now hold the same object; one that
    # does not (a tie torch broke) holds memory nobody fills: verify must name it.
    for e in entries:
        for module, attr in e.owners[1:]:
            if _owned(module, attr) is not e.tensor:
                mark_unfilled(_owned(module, attr), f"allocated apart from {e.name}, which it was tied to, "
                                                    "and never filled")
    try:
        _fill_allocated(model, entries, module_init, init, view, how, report)
    except BaseException as e:
        # A fill that stopped midway (an I/O error, a deadline, Ctrl-C): no tensor it allocated
        # may look filled; verify names them all.
        for entry in entries:
            mark_unfilled(entry.tensor, f"the load stopped before it was filled: {type(e).__name__}: {e}")
        raise


def _empty(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Fresh memory for a meta tensor on `device`; a DTensor's as a local tensor wrapped in the
    same layout (DTensor.from_local): empty_like on a DTensor goes through DTensor's sharding
    propagation, uncached on first use (~0.1 s for a Llama's ~60 parameters, per rank)."""
    if not hasattr(t, "device_mesh"):
        return torch.empty_like(t, device=device)
    from torch.distributed.tensor import DTensor

    d = cast(DTensor, t)
    local = torch.empty(d.to_local().shape, dtype=d.dtype, device=device)
    return DTensor.from_local(local, d.device_mesh, d.placements, run_check=False, shape=d.shape, stride=d.stride())


def _fill_allocated(model: torch.nn.Module, entries: List[_Entry], module_init: Set[int], init: Dict[int, str],
                    view: _native.ModelView, how: _How, report: LoadReport) -> None:
    for index in sorted(module_init):
        e = entries[index]
        method = _module_init(model, e)
        report._note(e.name, Provenance("module", rule=method) if method else Provenance("unfilled"))
        if method:
            clear_mark(e.tensor)
        else:
            mark_unfilled(e.tensor, "a buffer the checkpoint lacks, with no rule in metaload and no "
                                    "_init_weights/reset_parameters in the module to compute it")
    # One native call per init policy the tensors it fills were given (init_missing by pattern),
    # and one for everything else, which the accounting resolved with no policy.
    groups: Dict[str, List[int]] = {}
    for index in range(len(entries)):
        groups.setdefault(init.get(index, "error"), []).append(index)
    # What the checkpoint has (no init policy) may fan out; what a policy computes is computed.
    for policy, indices in sorted(groups.items(), key=lambda item: item[0] != "error"):
        _fill_group(entries, indices, module_init, view, replace(how, init_missing=policy), report,
                    fan_out=how.fan_out and policy == "error")


def _fan_out_spec(group: List[_Entry], requests: List[_native.Request], owner: List[int],
                  how: _How) -> Optional[Dict[str, Any]]:
    """Which requests the ranks of a replica group hold alike (_fanout.py): the DTensors placed
    Replicate() on a mesh dimension, with bytes here."""
    holders: List[Optional[dist.ProcessGroup]] = []
    identities: List[str] = []
    device = torch.device("cpu")
    for r, index in zip(requests, owner):
        e = group[index]
        local, layout = _local_layout(e)
        shared = layout is not None and not layout.identity and bool(layout.boxes) and local.numel() > 0
        holders.append(_fanout.replica_group(e.tensor) if shared else None)
        if holders[-1] is not None:
            device = local.device
        identities.append(f"{r.name} {list(r.full_shape)} {r.box_start} {r.box_length} {local.dtype}")
    if not any(h is not None for h in holders):
        return None
    return _fanout.spec(holders, owner, identities, device, how.timeout_s)


def _fill_group(entries: List[_Entry], indices: List[int], module_init: Set[int], view: _native.ModelView,
                how: _How, report: LoadReport, fan_out: bool = False) -> None:
    group = [entries[i] for i in indices]
    requests, owner, staged = _requests(group)
    spec = _fan_out_spec(group, requests, owner, how) if fan_out and dist.is_initialized() else None
    out = how.materialize(view, requests, check_only=False, fan_out=spec)
    report.fanout_received_bytes += out.fanout_received_bytes
    report.fanout_sent_bytes += out.fanout_sent_bytes
    report.fanout_notes += list(out.fanout_notes)
    with torch.no_grad():
        for dest, tmp in staged:
            dest.copy_(tmp)
    outcome: Dict[int, List[_native.TensorResult]] = {}
    for index, r in zip(owner, out.results):
        outcome.setdefault(index, []).append(r)
    _count_digests(out.results, report)
    for index, e in enumerate(group):
        native = outcome.get(index, [])
        results = [(r.filled, Provenance.from_native(r.provenance), r.error) for r in native]
        if indices[index] in module_init or any(p.kind == "module" for _, p, _ in results):
            continue
        filled = all(f for f, _, _ in results)
        provenance = results[0][1] if results else Provenance("empty")
        label = str(provenance)
        if e.pieces is not None and len(e.pieces) == 1 and not e.pieces[0].whole:
            label += f" (part of {e.pieces[0].stored})"
        elif e.pieces is not None:
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
        if filled and native and all(r.digest == "matched" for r in native):
            report._digest_checked.add(key)  # every byte of it matched a registered digest
        if filled:
            clear_mark(e.tensor)
        else:
            mark_unfilled(e.tensor, next((err for f, _, err in results if not f and err), "not filled"))
    for i, r in enumerate(out.results):
        report._note_failovers(group[owner[i]].name, r.failovers)
    report.direct_bytes += out.direct_bytes
    report.streamed_bytes += out.streamed_bytes


def _count_digests(results: Sequence[_native.TensorResult], report: LoadReport) -> None:
    """Adds what registered digests (`metactl register --digest`) proved of these reads to
    report.registered_digests, the counts metactl load reports; left None without digests."""
    for r in results:
        if r.filled and r.digest != "none":
            if report.registered_digests is None:
                report.registered_digests = {"matched": 0, "sliced_not_checked": 0, "on_device_not_checked": 0}
            report.registered_digests[r.digest] = report.registered_digests.get(r.digest, 0) + 1


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
