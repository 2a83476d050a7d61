"""verify(): one all-reduce proves that no rank holds a tensor on meta or unfilled.

Every rank counts its own bad tensors; one all-reduce (sum) of [bad, checked] tells every rank
whether any rank has one. Only then are the names exchanged (all_gather_object), so that every
rank raises the same MetaTensorError naming each tensor and its rank.
"""
from __future__ import annotations

import contextlib
import datetime
import weakref
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import torch
import torch.distributed as dist

from ._env import env_int, rank_and_world, resolve_device
from ._errors import Finding, MetaTensorError

# Tensors metaload allocated but could not fill (their storage holds garbage, not meta): the
# reason, so that verify() names them like meta tensors. By id with a weak reference (a tensor
# is no dictionary key: == compares values); a dropped tensor's entry goes with it.
_UNFILLED: Dict[int, Tuple["weakref.ref[torch.Tensor]", str]] = {}


def mark_unfilled(tensor: torch.Tensor, why: str) -> None:
    key = id(tensor)
    _UNFILLED[key] = (weakref.ref(tensor, lambda _: _UNFILLED.pop(key, None)), why)


def unfilled_reason(tensor: torch.Tensor) -> Optional[str]:
    entry = _UNFILLED.get(id(tensor))
    return entry[1] if entry is not None and entry[0]() is tensor else None


def _is_meta(t: torch.Tensor) -> bool:
    local = t.to_local() if hasattr(t, "to_local") else t
    return bool(local.is_meta)


def module_findings(model: torch.nn.Module) -> Tuple[List[Tuple[str, str]], int]:
    """(name, why) of each parameter or buffer of `model` on meta or left unfilled; and how many
    distinct tensors were checked."""
    bad: List[Tuple[str, str]] = []
    seen: Set[int] = set()
    for prefix, module in model.named_modules(remove_duplicate=False):
        for kind, table in (("parameter", module._parameters), ("buffer", module._buffers)):
            for name, t in table.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                full = f"{prefix}.{name}" if prefix else name
                if _is_meta(t):
                    bad.append((full, f"{kind} still on meta"))
                elif (why := unfilled_reason(t)) is not None:
                    bad.append((full, why))
    return bad, len(seen)


_GROUPS_MADE = 0  # groups collective_group made from the environment in this process


class Single:
    """The "group" of one process alone, with no process group: nothing to all-reduce."""


#: What verification runs over: a process group, None (the initialized default group), or Single.
Group = Union[dist.ProcessGroup, None, Single]


@contextlib.contextmanager
def collective_group(process_group: Optional[dist.ProcessGroup], device: torch.device) -> Iterator[Group]:
    """The group to verify over: the one given, else the initialized default group, else (under
    torchrun's variables with WORLD_SIZE > 1) one created from the environment — Gloo for CPU,
    NCCL for CUDA — and torn down afterwards. Yields Single() for one process alone."""
    if process_group is not None:
        yield process_group
        return
    if dist.is_available() and dist.is_initialized():
        yield None
        return
    world = env_int("WORLD_SIZE", 1)
    if world <= 1:
        yield Single()
        return
    global _GROUPS_MADE
    _GROUPS_MADE += 1
    backend = "nccl" if device.type == "cuda" else "gloo"
    # The store from the environment (torchrun's agent store, else one rank 0 hosts at
    # MASTER_ADDR:MASTER_PORT), with keys of this group's own: a group made again later in
    # the same job must not find the keys of this one (its ranks' old addresses), where its
    # Gloo rendezvous would wait for peers that are gone. Every rank makes groups in the same
    # order, so the count agrees across ranks.
    store, rank, world = next(dist.rendezvous("env://", rank=env_int("RANK", 0), world_size=world))
    store = dist.PrefixStore(f"metaload/verify/{_GROUPS_MADE}", store)
    # Five minutes, not torch's thirty: a rank that never comes fails the job while people
    # still look at it.
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=datetime.timedelta(minutes=5))
    try:
        yield None
    finally:
        dist.destroy_process_group()


def _collective_device(group: Optional[dist.ProcessGroup]) -> torch.device:
    backend = str(dist.get_backend(group))
    if "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# What each rank hands the others when some rank has a finding: (rank, [(tensor, why)], summary).
_RankFindings = Tuple[int, List[Tuple[str, str]], List[str]]


def exchange_findings(local: Sequence[Tuple[str, str]], checked: int, group: Group,
                      summary: Sequence[str] = ()) -> int:
    """The all-reduce; raises MetaTensorError on every rank if any rank has a finding. Returns
    the tensors checked across all ranks."""
    gathered: List[_RankFindings]
    if isinstance(group, Single):
        rank, world, total_bad, total_checked = 0, 1, len(local), checked
        gathered = [(0, list(local), list(summary))]
    else:
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        counts = torch.tensor([len(local), checked], dtype=torch.int64, device=_collective_device(group))
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=group)
        total_bad, total_checked = int(counts[0]), int(counts[1])
        gathered = []
        if total_bad:
            received: List[Optional[_RankFindings]] = [None] * world
            dist.all_gather_object(received, (rank, list(local), list(summary)), group=group)
            gathered = [item for item in received if item is not None]
    if total_bad == 0:
        return total_checked
    findings = [Finding(name, r, why) for r, items, _ in gathered for name, why in items]
    lines = []
    for r, items, rank_summary in gathered:
        shown = rank_summary if rank_summary else [f"{name}: {why}" for name, why in items]
        lines += [f"  rank {r}: {line}" for line in shown]
    ranks = sorted({f.rank for f in findings})
    raise MetaTensorError(
        f"verification failed: {total_bad} tensor{'s' if total_bad != 1 else ''} on meta or unfilled on "
        f"rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))} of {world}:\n" + "\n".join(lines),
        findings)


def verify(model: torch.nn.Module, *, process_group: Optional[dist.ProcessGroup] = None) -> int:
    """Prove across ranks that no parameter or buffer of `model` is on meta or left unfilled.

    One all-reduce over ``process_group`` (keyword-only; default: the initialized default group;
    else, under torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, a Gloo (CPU) or NCCL (CUDA)
    group made for this call and torn down after). Every rank must call it.

    Returns the number of distinct tensors checked across all ranks. Raises MetaTensorError on
    every rank, naming each tensor and the rank holding it, if any rank has one. Works on any
    module, however it was loaded::

        model = build_and_load(...)
        metaload.verify(model)   # raises: "rank 1: lm_head.weight: parameter still on meta"
    """
    bad, checked = module_findings(model)
    device = resolve_device(None, rank_and_world(process_group)[0])
    with collective_group(process_group, device) as group:
        return exchange_findings(bad, checked, group)
