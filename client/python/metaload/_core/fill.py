"""Allocation and filling for materialize: fresh memory through Module._apply (as to_empty
allocates), then one native call per init policy, each fanning out over the replica groups
where ranks hold the same bytes; every tensor ends filled or marked unfilled for verify.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, cast

import torch
import torch.distributed as dist

from .. import _native
from . import fanout, subclasses
from .entries import _Entry, _held, _local_layout, _owned, _requests, local_of
from .report import LoadReport, Provenance
from .marks import mark_computed, mark_initialized, mark_read, mark_unfilled
from .verify import _is_meta


@dataclass(frozen=True)
class _How:
    """How materialize reads: the options it hands the native library on every call."""

    source: str
    init_missing: Optional[str]
    read_threads: int
    timeout_s: float
    fan_out: bool = True
    dequantize: bool = False
    #: The values a dequantizing load computes (ModelView.quantized's names); empty otherwise.
    quantized: Tuple[str, ...] = ()
    #: What the reads report their progress to (progress.Tracker.native); None: nothing.
    progress: Optional[Callable[[_native.Progress], None]] = field(default=None, compare=False)

    def materialize(self, view: _native.ModelView, requests: Sequence[_native.Request], *,
                    check_only: bool, fan_out: Optional[Dict[str, Any]] = None) -> _native.MaterializeOutcome:
        return _native.materialize(view, requests, source=self.source, init_missing=self.init_missing,
                                   read_threads=self.read_threads, timeout_s=self.timeout_s, check_only=check_only,
                                   fan_out=fan_out, dequantize=self.dequantize,
                                   progress=None if check_only else self.progress)


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
        e.tensor = _held(e)
        # _apply allocates a buffer once per module that registers it: one buffer object under
        # several names is one tensor again, filled once (as load_state_dict sees it).
        if e.is_buffer:
            for other, other_attr in e.owners[1:]:
                other._buffers[other_attr] = e.tensor
    # Every other place that held one of these tensors must now hold the same object; one that
    # does not (a tie torch broke) holds memory nobody fills: verify must name it.
    for e in entries:
        for module, attr in e.owners[1:]:
            if _owned(module, attr) is not _owned(*e.owners[0]):
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
    if subclasses.is_float8(t):
        return subclasses.empty(t, lambda inner: _empty(inner, device))
    if not hasattr(t, "device_mesh"):
        return torch.empty_like(t, device=device)
    from torch.distributed.tensor import DTensor

    d = cast(DTensor, t)
    held = local_of(d)
    if subclasses.is_float8(held):
        local = subclasses.empty(held, lambda inner: torch.empty_like(inner, device=device))
    else:
        local = torch.empty(d.to_local().shape, dtype=d.dtype, device=device)
    return DTensor.from_local(local, d.device_mesh, d.placements, run_check=False, shape=d.shape, stride=d.stride())


def _fill_allocated(model: torch.nn.Module, entries: List[_Entry], module_init: Set[int], init: Dict[int, str],
                    view: _native.ModelView, how: _How, report: LoadReport) -> None:
    for index in sorted(module_init):
        e = entries[index]
        method = _module_init(model, e)
        report._note(e.name, Provenance("module", rule=method) if method else Provenance("unfilled"))
        if method:
            mark_computed(e.tensor, f"module:{method}")
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


def _mark_filled(tensor: torch.Tensor, results: Sequence[_native.TensorResult]) -> None:
    """What proves a filled tensor's values, for verify(): the proofs of the stored tensors read
    into it; or the rule that computed it; or the policy that initialized it."""
    kinds = {r.provenance.kind for r in results}
    proofs = [r.proof for r in results if r.proof is not None] + [p for r in results for p in r.more_proofs]
    if proofs or kinds & {"direct", "stream", "fanout", "dequantized"}:
        mark_read(tensor, proofs)
    elif "init" in kinds:
        mark_initialized(tensor, ", ".join(f"init:{r.provenance.rule}" for r in results))
    elif kinds & {"buffer", "module"}:
        mark_computed(tensor, ", ".join(f"{r.provenance.kind}:{r.provenance.rule}" for r in results))
    else:  # nothing held here (an empty shard, a fused tensor none of whose pieces is here)
        mark_read(tensor, [])


def _fan_out_spec(group: List[_Entry], requests: List[_native.Request], owner: List[int],
                  how: _How) -> Optional[Dict[str, Any]]:
    """Which requests the ranks of a replica group hold alike (fanout.py): the DTensors placed
    Replicate() on a mesh dimension, with bytes here."""
    holders: List[Optional[dist.ProcessGroup]] = []
    identities: List[str] = []
    device = torch.device("cpu")
    # A dequantized value is computed by each holder from the codes and scales it reads and
    # proves itself: its bytes are not what a replica would prove by the reader's sums.
    quantized = set(how.quantized)
    for r, index in zip(requests, owner):
        e = group[index]
        local, layout = _local_layout(e)
        # A Float8Tensor's inner tensors are read by every holder (no replica group of their own).
        shared = (layout is not None and not layout.identity and bool(layout.boxes) and local.numel() > 0
                  and r.name not in quantized and e.inner is None)
        holders.append(fanout.replica_group(e.tensor) if shared else None)
        if holders[-1] is not None:
            device = local.device
        identities.append(f"{r.name} {list(r.full_shape)} {r.box_start} {r.box_length} {local.dtype}")
    if not any(h is not None for h in holders):
        return None
    return fanout.spec(holders, owner, identities, device, how.timeout_s)


def _fill_group(entries: List[_Entry], indices: List[int], module_init: Set[int], view: _native.ModelView,
                how: _How, report: LoadReport, fan_out: bool = False) -> None:
    group = [entries[i] for i in indices]
    requests, owner, staged = _requests(group)
    spec = _fan_out_spec(group, requests, owner, how) if fan_out and dist.is_initialized() else None
    out = how.materialize(view, requests, check_only=False, fan_out=spec)
    report._note_outcome(out)
    with torch.no_grad():
        for dest, tmp in staged:
            dest.copy_(tmp)
    outcome: Dict[int, List[_native.TensorResult]] = {}
    for index, r in zip(owner, out.results):
        outcome.setdefault(index, []).append(r)
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
            report._note_layout(key, local, layout)
        if not filled:
            mark_unfilled(e.tensor, next((err for f, _, err in results if not f and err), "not filled"))
        elif layout is not None and layout.identity:
            mark_computed(e.tensor, "identity:Partial(sum)")  # another rank holds the value
        else:
            _mark_filled(e.tensor, native)
    for i, r in enumerate(out.results):
        report._note_failovers(group[owner[i]].name, r.failovers)
