"""materialize(): fill a meta-built module with exactly the tensors, and the parts of them, it holds.

The flow: the module's tensors as entries (entries.py), named as transformers names them
(hf_names.py), accounted for before anything is allocated (strict.py), allocated and filled
(fill.py), ties restored (ties.py), then proven on every rank (verify.py).
"""
from __future__ import annotations

import time
import warnings
from typing import Collection, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from .. import _native
from . import subclasses
from .._env import rank_and_world, resolve_daemon, resolve_device
from .._errors import BadInputError, MetaTensorError
from .entries import _collect, _requests, _resolve_names
from .fill import _How, _fill
from .hf_names import map_names
from .progress import ProgressArg, tracker as progress_tracker
from .report import LoadReport, Provenance
from .strict import MISSING, InitMissing, account, check_policies
from .ties import _tie_again_where_equal, _ties, _untie_both_stored
from .marks import mark_kept
from .verify import JOIN_TIMEOUT_S, _is_meta, collective_group, exchange_findings, module_findings


def materialize(model: torch.nn.Module, name: Optional[str] = None, *, daemon: Optional[str] = None,
                device: Union[None, str, torch.device] = None, process_group: Optional[dist.ProcessGroup] = None,
                init_missing: Optional[InitMissing] = "error", strict: bool = True, overwrite: bool = False,
                source: str = "auto", checkpoint: Optional[str] = None, verify: bool = True, read_threads: int = 2,
                timeout_s: float = 600.0, verify_timeout_s: float = JOIN_TIMEOUT_S,
                key_mapping: Optional[Mapping[str, str]] = None, fan_out: bool = True,
                require_proof: bool = False, dequantize: bool = False, progress: ProgressArg = None,
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
    came): every rank raises if any rank left a tensor on meta or unfilled, or a stored tensor's
    bytes differ from the digest registered for it (every rank's tiles summed, whatever split they
    hold: docs/integrity.md). ``report.proven``/``report.content`` say what proves each
    tensor's values — the report says "verified" only when every one is checked against its
    digest or computed by a rule — and ``require_proof=True`` raises unless they all are. A
    folder's digests come from its ``metaload.digests.json`` (``metactl digest``). A fill that
    fails midway leaves no tensor looking filled: ``metaload.verify(model)`` then fails too.

    Example (each rank, under torchrun)::

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        for block in model.model.layers:
            fully_shard(block)
        fully_shard(model)
        report = metaload.materialize(model, "llama-8b")   # daemon from METAD_ADDRESS
        print(report)     # where each tensor came from, bytes read, what verified proves

    Quantized checkpoints (the config's ``quantization_config``: FP8 with 128x128 block scales as
    DeepSeek-V3 and Qwen3 FP8 ship, compressed-tensors FP8 per channel or per tensor, gpt-oss
    MXFP4): a module tensor held in a floating dtype is refused naming the quantization unless
    ``dequantize=True``; then each rank reads only the codes of its part and the scale blocks
    covering it, and computes ``float32(code) * float32(scale)`` rounded once to the module's
    dtype (MXFP4: ``E2M1 value * 2**(scale - 127)``); the report's source says
    ``dequantized:... (rule)`` and both the codes and the scales are proven like any read. A
    module that holds the codes as stored (FP8 parameters beside their ``weight_scale_inv``, or
    torchao ``Float8Tensor`` weights: ``qdata`` the codes, ``scale`` the scales, torchao's
    ``block_size`` the checkpoint's granularity; sharded as ``DTensor.from_local`` builds them)
    reads them as stored, refused when a rank's shard cuts through a scale block.

    Progress (``progress``): by default a tqdm bar on stderr on the node's first rank
    (``LOCAL_RANK`` 0, else rank 0), in bytes, its postfix what this rank read directly, streamed
    and received by fan-out — the way transformers draws "Loading weights", and off where
    transformers' bars are (``transformers.utils.logging.disable_progress_bar()``,
    ``HF_HUB_DISABLE_PROGRESS_BARS=1``) or without tqdm. ``True``: a bar on this rank whatever the
    switches; ``False``: none; a callable: called with a ``metaload.LoadProgress`` every 200 ms
    from a thread of the load's own (it holds the GIL meanwhile; no byte waits for it) and once
    at the end with ``finished`` set, whose bytes are the report's; one that raises is called no
    more (a warning says why).

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
        name = _native.location_name(checkpoint)
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
    # A dequantizing load reads each quantized value under its own name (gpt-oss's
    # `gate_up_proj`, stored as `gate_up_proj_blocks` and `_scales`): a name the module may hold.
    quantized = view.quantized if dequantize else {}
    shapes = {k: list(t.shape) for k, t in stored.items()}
    shapes.update({k: list(q[2]) for k, q in quantized.items()})
    names = map_names(model, {n: list(e.tensor.shape) for e in everything for n in e.names},
                      {**stored, **{k: q for k, q in quantized.items() if k not in stored}},
                      stored_shapes=shapes, model_name=name, key_mapping=key_mapping)
    for e in everything:
        _resolve_names(e, view, names)
    # torchao's Float8Tensor: its codes and its scales, each read as stored (subclasses.py).
    everything = subclasses.split(everything, view, stored)
    entries = [e for e in everything if overwrite or _is_meta(e.tensor)]
    kept = [e for e in everything if not overwrite and not _is_meta(e.tensor)]
    report = LoadReport(model=name, rank=rank, world_size=world, device=str(resolved), digest_note=view.digest_note)
    if view.digest_note:
        warnings.warn(f"metaload: {view.digest_note}: the checkpoint is read without digests", stacklevel=2)
    report.name_rules = {e.names[0]: e.rule for e in entries if e.rule}
    progressed = progress_tracker(progress, rank)
    how = _How(source=source, init_missing="error", read_threads=read_threads, timeout_s=timeout_s, fan_out=fan_out,
               dequantize=dequantize, quantized=tuple(quantized),
               progress=progressed.native if progressed is not None else None)

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
        try:
            _fill(model, entries, module_init, plan.init, view, resolved, how, report)
        finally:
            if progressed is not None:
                progressed.close()
        report.untied = _tie_again_where_equal(model, untied, report)
        for e in kept:
            mark_kept(e.tensor)
            for alias in e.names:
                report._note(alias, Provenance("kept"))
        subclasses.mark_parameters(entries + kept)
    report.ties = _ties(model, view)
    report.seconds = time.monotonic() - started
    if not verify and not refused:
        return report
    with collective_group(process_group, resolved, verify_timeout_s) as group:
        if refused:
            exchange_findings(refused, len(entries), group, summary, refusal=True, timeout_s=verify_timeout_s)
            raise MetaTensorError("unreachable: refused tensors were not reported")  # pragma: no cover
        walk = module_findings(model)
        report._note_verified(exchange_findings(walk.bad, walk.counts, group, timeout_s=verify_timeout_s,
                                                proofs=walk.proofs, initialized=walk.initialized,
                                                computed=walk.computed,
                                                require_proof=require_proof or view.proof_required))
    report.seconds = time.monotonic() - started
    return report


def _refusals(outcome: _native.MaterializeOutcome, requests: Sequence[_native.Request]) -> List[Tuple[int, str]]:
    """(request index, why) of each refusal of a check-only resolution (refusals name tensors)."""
    index: Dict[str, List[int]] = {}
    for i, r in enumerate(requests):
        index.setdefault(r.name, []).append(i)
    out: List[Tuple[int, str]] = []
    for f in outcome.refused:
        out += [(i, f.why) for i in index.get(f.tensor, [])]
    return out
