"""load(): what `metactl load` does, in this process: this rank's tensors of a plan."""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Union

import torch
import torch.distributed as dist

from .. import _native
from .._env import rank_and_world, resolve_daemon, resolve_device
from .._errors import BadInputError
from .progress import ProgressArg, tracker as progress_tracker
from .report import LoadReport, Provenance, box_per_dim
from .verify import collective_group, exchange_findings


_LOADS = 0  # load() calls in this process: each fans out under keys of its own (every rank counts alike)


class LoadedTensors(Dict[str, torch.Tensor]):
    """This rank's tensors by name (a dict), with ``.report``: a LoadReport whose ``slices``
    say which part of each whole tensor a tp/fsdp plan gave this rank."""

    report: LoadReport


def load(name: str, *, daemon: Optional[str] = None, strategy: str = "layers", tp: int = 1, pp: int = 0,
         device: Union[None, str, torch.device] = None, dtype: Optional[str] = None, source: str = "auto",
         init_missing: Optional[str] = None, rank: Optional[int] = None, world_size: Optional[int] = None,
         process_group: Optional[dist.ProcessGroup] = None, verify: bool = True, read_threads: int = 2,
         timeout_s: float = 600.0, fan_out: bool = True, require_proof: bool = False,
         dequantize: bool = False, progress: ProgressArg = None) -> LoadedTensors:
    """Load this rank's part of the plan for the registered model `name`, as `metactl load` does.

    The daemon (default ``$METAD_ADDRESS``) plans the model for ``world_size`` ranks with
    ``strategy`` (``layers``, ``tp`` with ``tp``/``pp``, ``fsdp``, ``replicate``); this rank
    allocates only its tensors on ``device`` (default: ``cuda:LOCAL_RANK`` when CUDA is
    available, else the CPU) and reads only their bytes: directly when this host can read the
    file, streamed from a daemon otherwise (``source``). ``dtype`` converts on load ("bf16");
    ``dequantize=True`` loads a quantized checkpoint's values (``metactl load --dequantize``).
    ``init_missing`` must be the policy the model was registered with (None: that policy).
    ``rank``/``world_size`` default to the initialized process group's, else RANK/WORLD_SIZE.
    Every argument after ``name`` is keyword-only.

    Read once, fan out (``fan_out=True``, with a process group): where the plan gives ranks on
    several nodes the same bytes (``replicate``, replicas of a tp group), one rank reads them
    and sends them to the other nodes' ranks, as ``metactl load`` does (``report`` counts
    ``fanout_received_bytes``/``fanout_sent_bytes``).

    Then every rank proves, in one exchange, that no rank holds a tensor on meta or unfilled,
    that all ranks loaded the same plan, and what proves each tensor's content (every stored
    tensor's bytes against its registered digest, summed over every rank's part:
    ``report.proven``/``report.content``; ``require_proof=True`` raises unless every tensor's
    content is proven, as ``metactl load --require-proof`` exits 3). ``verify=False`` skips it.

    ``progress``: a bar on the node's first rank, or a callable of ``metaload.LoadProgress``,
    as ``materialize`` takes it.

    Returns a dict of tensors (``result.report`` tells sources, slices and bytes read). Raises
    BadInputError (metactl exit 2), MetaTensorError (exit 3), LoadError (exit 1).

    Example::

        tensors = metaload.load("llama-8b", strategy="tp", tp=2)
        tensors["model.layers.0.self_attn.q_proj.weight"]   # this rank's rows
        tensors.report.slices[...]                          # ((start, length), ...) per dim
    """
    started = time.monotonic()
    default_rank, default_world = rank_and_world(process_group)
    rank = default_rank if rank is None else rank
    world_size = default_world if world_size is None else world_size
    daemon = resolve_daemon(daemon)
    if not daemon:
        raise BadInputError("no daemon: pass daemon=\"host:port\" or set METAD_ADDRESS")
    resolved = resolve_device(device, rank)
    # Read once, fan out, as metactl load does: over Gloo groups made on the store of the
    # process group (the initialized default group unless one is given), whose ranks are the plan's.
    global _LOADS
    _LOADS += 1
    fan_group = process_group if process_group is not None else (
        dist.group.WORLD if fan_out and dist.is_available() and dist.is_initialized() else None)
    progressed = progress_tracker(progress, rank)
    try:
        out = _native.load_rank(
            name, daemon=daemon, rank=rank, world_size=world_size, device=str(resolved), source=source,
            strategy=strategy, tp=tp, pp=pp, dtype=dtype, init_missing=init_missing, read_threads=read_threads,
            timeout_s=timeout_s, group=fan_group if fan_out else None, fanout_key=f"metaload/load/{_LOADS}/fanout",
            dequantize=dequantize, progress=progressed.native if progressed is not None else None)
    finally:
        if progressed is not None:
            progressed.close()
    result = LoadedTensors()
    report = LoadReport(model=name, rank=rank, world_size=world_size, device=out.device)
    report._note_outcome(out)
    bad = [("", why) for why in out.failures]  # about the whole rank
    tensors = out.tensors
    proofs: List[_native.Proof] = []
    computed = initialized = 0
    for t in tensors:
        result[t.name] = t.tensor
        outcome = t.result
        report._note(t.name, Provenance.from_native(outcome.provenance))
        if outcome.filled and outcome.proof is not None:
            proofs.append(outcome.proof)
        elif outcome.filled and outcome.provenance.kind == "buffer":
            computed += 1
        elif outcome.filled and outcome.provenance.kind == "init":
            initialized += 1
        report._note_failovers(t.name, outcome.failovers)
        if t.box_start is not None and t.box_length is not None:
            report.slices[t.name] = box_per_dim(t.box_start, t.box_length)
        if not outcome.filled:
            bad.append((t.name, outcome.error or "not filled"))
    result.report = report
    if verify:
        # The core's exchange compares every rank's plan digest too (the same plan on every rank).
        with collective_group(process_group, resolved) as group:
            report._note_verified(exchange_findings(bad, len(tensors), group, could_not_load=bool(out.failures),
                                                    plan_digest=out.plan_digest, proofs=proofs, computed=computed,
                                                    initialized=initialized,
                                                    require_proof=require_proof or out.proof_required))
    report.seconds = time.monotonic() - started
    return result
