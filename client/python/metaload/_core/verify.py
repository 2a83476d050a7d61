"""verify(): every rank proves that no rank holds a tensor on meta or unfilled.

Python walks the module (what is on meta, what a materialize marked unfilled or kept, which ties
torch broke); the exchange of what each rank found is the core's (client/verify/exchange.h), run
in C++ over the caller's own process group: one all-reduce of every rank's counts, and, only
when some rank has a finding, one of the findings, so that every rank raises the same
MetaTensorError naming each tensor and its rank.
"""
from __future__ import annotations

import contextlib
import datetime
import enum
import os
import threading
import time
import weakref
from typing import Any, Callable, Collection, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple, TypeVar, Union, cast

import torch
import torch.distributed as dist

from .. import _native
from .._env import env_int, rank_and_world, resolve_device
from .._errors import BadInputError, Finding, LoadError, MetaTensorError

T = TypeVar("T")

# Tensors metaload allocated but could not fill (their storage holds garbage, not meta), and
# tensors it found filled already and left alone ("kept": nothing proves their values): the mark
# and why, so that verify() names the first and counts the second as unproven. By id with a weak
# reference (a tensor is no dictionary key: == compares values); a dropped tensor's entry goes
# with it.
class Mark(enum.Enum):
    UNFILLED = "unfilled"  # verify fails naming it
    KEPT = "kept"  # verify counts it, as unproven


_MARKS: Dict[int, Tuple["weakref.ref[torch.Tensor]", Mark, str]] = {}


def _mark(tensor: torch.Tensor, mark: Mark, why: str) -> None:
    key = id(tensor)
    _MARKS[key] = (weakref.ref(tensor, lambda _: _MARKS.pop(key, None)), mark, why)


def mark_unfilled(tensor: torch.Tensor, why: str) -> None:
    _mark(tensor, Mark.UNFILLED, why)


def mark_kept(tensor: torch.Tensor) -> None:
    _mark(tensor, Mark.KEPT, "kept as it was: not on meta, not read")


def clear_mark(tensor: torch.Tensor) -> None:
    """The tensor was filled: an earlier load's mark (the same Parameter object) no longer holds."""
    entry = _MARKS.get(id(tensor))
    if entry is not None and entry[0]() is tensor:
        del _MARKS[id(tensor)]


def marked(tensor: torch.Tensor) -> Optional[Tuple[Mark, str]]:
    entry = _MARKS.get(id(tensor))
    return (entry[1], entry[2]) if entry is not None and entry[0]() is tensor else None


# Tensors a dcp.load was to fill (metaload.LoadPlanner), by the memory they hold: its state_dict's
# values are views (model.state_dict() detaches every parameter), not the module's own objects,
# so the mark is keyed by the storage, the offset, shape and stride, and dtype of the local
# tensor, and holds the storage only weakly (StorageWeakRef: a freed storage's mark is void).
_RegionKey = Tuple[Any, int, Tuple[int, ...], Tuple[int, ...], torch.dtype]
_REGION_MARKS: Dict[_RegionKey, Tuple[Mark, str]] = {}
_REGION_MARKS_KEPT = 0  # marks left after the last sweep of expired ones


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """What this rank holds of `t`: a DTensor's local tensor, any other tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def region_key(tensor: torch.Tensor) -> _RegionKey:
    """What identifies the memory `tensor` (a DTensor: its local tensor) is: two views of the
    same storage, offset, shape, stride and dtype have the same key."""
    from torch.multiprocessing.reductions import StorageWeakRef

    local = local_tensor(tensor)
    storage = StorageWeakRef(local.untyped_storage())  # type: ignore[no-untyped-call]
    return (storage, int(local.storage_offset()), tuple(local.shape), tuple(local.stride()), local.dtype)


def mark_region(tensor: torch.Tensor, mark: Mark, why: str) -> None:
    """Marks the memory `tensor` (or a DTensor's local tensor) holds: every tensor that is a view
    of exactly that memory (the module's Parameter behind a state_dict value) is marked too."""
    global _REGION_MARKS_KEPT
    _REGION_MARKS[region_key(tensor)] = (mark, why)
    if len(_REGION_MARKS) > 2 * _REGION_MARKS_KEPT + 64:  # freed storages' marks go, amortized
        for key in [k for k in _REGION_MARKS if k[0].expired()]:
            del _REGION_MARKS[key]
        _REGION_MARKS_KEPT = len(_REGION_MARKS)


def clear_region(tensor: torch.Tensor) -> None:
    _REGION_MARKS.pop(region_key(tensor), None)


def region_marked(tensor: torch.Tensor) -> Optional[Tuple[Mark, str]]:
    if not _REGION_MARKS:
        return None
    key = region_key(tensor)
    return None if key[0].expired() else _REGION_MARKS.get(key)


def _is_meta(t: torch.Tensor) -> bool:
    return bool(local_tensor(t).is_meta)


def broken_ties(model: torch.nn.Module, checkpoint_ties: Optional[Dict[str, str]] = None,
                tied_after: Collection[str] = ()) -> List[Tuple[str, str, str]]:
    """(tensor, the tensor it is tied to, why) for each tie that the module holds as two tensors:
    a tie torch broke (``fully_shard(embed)`` then ``fully_shard(root)``; ``_apply``). Trained
    apart, or sharded by two FSDP groups, they are not the model the checkpoint describes. The
    ties are the module's own rules (transformers' ``all_tied_weights_keys``), or, for a module
    transformers did not build, ``checkpoint_ties``: the ones its checkpoint records (the alias
    stores nothing of its own: save_model's metadata, a config.json), which a module holding
    two tensors of another shape or dtype under those names does not match at all. `tied_after`:
    targets the caller ties once the load is done (metaload.from_pretrained, as transformers)."""
    ties = getattr(model, "all_tied_weights_keys", None)
    from_checkpoint = not isinstance(ties, dict)
    if from_checkpoint:
        ties = checkpoint_ties
    if not isinstance(ties, dict) or not ties:
        return []
    found: Dict[str, torch.Tensor] = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for attr, t in list(module._parameters.items()) + list(module._buffers.items()):
            if t is not None:
                found[f"{prefix}.{attr}" if prefix else attr] = t
    fix = ("shard the tied modules in one fully_shard group, or build the model untied "
           f"{'' if from_checkpoint else '(tie_word_embeddings=False) '}and tie after")
    out = []
    for target, source in ties.items():
        if target in tied_after or target not in found or source not in found or found[target] is found[source]:
            continue
        mine, theirs = found[target], found[source]
        if from_checkpoint and (mine.shape != theirs.shape or mine.dtype != theirs.dtype):
            out.append((target, source, f"the checkpoint stores it as {source} (one tensor under both names), "
                                        f"but the module holds {target} as {_kind(mine)} and {source} as "
                                        f"{_kind(theirs)}: not the module the checkpoint was saved from"))
        else:
            where = " in the checkpoint, which stores only the latter" if from_checkpoint else ""
            out.append((target, source, f"tied to {source}{where}, but torch holds them as two tensors (a tie "
                                        f"fully_shard or _apply broke): {fix}"))
    return out


def _kind(t: torch.Tensor) -> str:
    """A tensor's whole shape and dtype, for messages: "[16, 8] float32"."""
    return f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}"


class Counts(NamedTuple):
    """Distinct tensors verify looked at, and those of them it cannot vouch for (kept)."""

    checked: int
    unproven: int


def module_findings(model: torch.nn.Module) -> Tuple[List[Tuple[str, str]], Counts]:
    """(name, why) of each parameter or buffer of `model` on meta or left unfilled; how many
    distinct tensors were checked, and how many of them metaload kept without reading."""
    bad: List[Tuple[str, str]] = []
    seen: Set[int] = set()
    unproven = 0
    for prefix, module in model.named_modules(remove_duplicate=False):
        for kind, table in (("parameter", module._parameters), ("buffer", module._buffers)):
            for name, t in table.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                full = f"{prefix}.{name}" if prefix else name
                if _is_meta(t):
                    bad.append((full, f"{kind} still on meta"))
                elif (mark := marked(t)) is not None or (mark := region_marked(t)) is not None:
                    if mark[0] is Mark.UNFILLED:
                        bad.append((full, mark[1]))
                    else:
                        unproven += 1
    bad += [(target, why) for target, _, why in broken_ties(model)]
    return bad, Counts(len(seen), unproven)


_GROUPS_MADE = 0  # groups collective_group made from the environment in this process


class Single:
    """The "group" of one process alone, with no process group: nothing to all-reduce."""


#: What verification runs over: a process group, None (the initialized default group), or Single.
Group = Union[dist.ProcessGroup, None, Single]


#: How long verification waits for every rank to arrive by default: the core's, as metactl load.
JOIN_TIMEOUT_S: float = _native.DEFAULT_VERIFY_TIMEOUT_S


def _wait(what: Callable[[], T], timeout_s: float) -> T:
    """`what()` (a blocking c10d call that ignores signals) on a thread of its own, while this
    one waits in short steps: Ctrl-C interrupts the wait at once. The call itself ends by its own
    timeout; its result is then dropped."""
    box: List[Any] = []

    def run() -> None:
        try:
            box.append((True, what()))
        except BaseException as e:  # handed to the waiting thread
            box.append((False, e))

    thread = threading.Thread(target=run, name="metaload-rendezvous", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s + 5.0  # the call's own timeout ends it first
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(0.05)
    if not box:
        raise LoadError(f"verification: the rendezvous did not answer within {timeout_s:g} s")
    ok, value = box[0]
    if not ok:
        raise value
    return cast(T, value)


def _env_store(rank: int, world: int, timeout_s: float) -> "dist.Store":
    """A client of the store at MASTER_ADDR:MASTER_PORT (torchrun's agent's, else one rank 0
    hosts), made as torch's env:// rendezvous makes it, except that rank 0 does not wait inside
    the constructor for the others: _join waits, interruptibly, and names who never came."""
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = env_int("MASTER_PORT", 29500)
    agent = (os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == str(True) and os.environ.get("MASTER_ADDR") == addr
             and os.environ.get("MASTER_PORT") == str(port))
    timeout = datetime.timedelta(seconds=timeout_s)
    if agent:
        return _wait(lambda: dist.TCPStore(addr, port, world, False, timeout=timeout), timeout_s)
    try:
        return _wait(lambda: dist.TCPStore(addr, port, world, rank == 0, timeout=timeout, wait_for_workers=False,
                                           multi_tenant=True), timeout_s)
    except (RuntimeError, dist.DistError) as e:
        if rank == 0:
            raise LoadError(f"verification: rank 0 cannot host the rendezvous at {addr}:{port}: {e}") from None
        raise LoadError(f"verification: rank 0 (it hosts the rendezvous at {addr}:{port}) never joined within "
                        f"{timeout_s:g} s") from None


def _join(store: "dist.Store", rank: int, world: int, timeout_s: float) -> None:
    """Every rank announces itself, then waits until all have: LoadError naming the ranks that
    did not come within `timeout_s`. Sleeps in short steps (Ctrl-C stops it at once)."""
    store.set(f"arrived/{rank}", "1")
    keys = [f"arrived/{r}" for r in range(world)]
    deadline = time.monotonic() + timeout_s
    while not store.check(keys):
        if time.monotonic() >= deadline:
            missing = [r for r, key in enumerate(keys) if not store.check([key])]
            if not missing:
                return
            ranks = f"rank{'s' if len(missing) != 1 else ''} {', '.join(map(str, missing))}"
            raise LoadError(f"verification: {ranks} of {world} never joined within {timeout_s:g} s (every rank "
                            "must call it; wait longer with verify_timeout_s=)")
        time.sleep(0.02)


@contextlib.contextmanager
def collective_group(process_group: Optional[dist.ProcessGroup], device: torch.device,
                     timeout_s: float = JOIN_TIMEOUT_S) -> Iterator[Group]:
    """The group to verify over: the one given, else the initialized default group, else (under
    torchrun's variables with WORLD_SIZE > 1) one created from the environment — Gloo for CPU,
    NCCL for CUDA — and torn down afterwards. Yields Single() for one process alone. A group
    it makes waits `timeout_s` for every rank to come (LoadError naming those that did not),
    and as long for each collective."""
    _native.check_timeout("verify_timeout_s", timeout_s)  # the core's bound, before a group is made
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
    rank = env_int("RANK", 0)
    # Keys of this group's own: a group made again later in the same job must not find the keys
    # of this one (its ranks' old addresses), where its Gloo rendezvous would wait for peers
    # that are gone. Every rank makes groups in the same order, so the count agrees across ranks.
    store = dist.PrefixStore(f"metaload/verify/{_GROUPS_MADE}", _env_store(rank, world, timeout_s))
    _join(store, rank, world, timeout_s)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        yield None
    finally:
        dist.destroy_process_group()


def collective_device(group: Optional[dist.ProcessGroup]) -> torch.device:
    """Where the group's collectives take their tensors: the current GPU for NCCL, else CPU."""
    if "nccl" in str(dist.get_backend(group)):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def exchange_findings(local: Sequence[Tuple[str, str]], counts: Union[int, Counts], group: Group,
                      summary: Sequence[str] = (), refusal: bool = False,
                      timeout_s: float = JOIN_TIMEOUT_S, could_not_load: bool = False,
                      plan_digest: str = "") -> Counts:
    """The exchange every entry point shares, in C++ (client/verify/exchange.h) over `group`:
    raises MetaTensorError on every rank, with the same message and findings, if any rank has a
    finding, could not load, or loaded another plan (`refusal`: findings of a load refused
    before anything was allocated or read). `local`: (tensor, why) of this rank ("" for the
    whole rank). Returns the tensors checked, and those unproven (kept), across all ranks."""
    if isinstance(counts, int):
        counts = Counts(counts, 0)
    pg = None if isinstance(group, Single) else (group if group is not None else dist.group.WORLD)
    device = "cpu" if pg is None else str(collective_device(pg))
    out = _native.exchange_reports(pg, device=device, findings=[(str(n), str(w)) for n, w in local],
                                   summary=list(summary), checked=counts.checked, unproven=counts.unproven,
                                   could_not_load=could_not_load, plan_digest=plan_digest, refusal=refusal,
                                   timeout_s=timeout_s)
    if not out["ok"]:
        raise MetaTensorError(out["message"], [Finding(name, r, why) for name, r, why in out["findings"]])
    return Counts(out["checked"], out["unproven"])


def verify(model: torch.nn.Module, *, process_group: Optional[dist.ProcessGroup] = None,
           timeout_s: float = JOIN_TIMEOUT_S) -> int:
    """Prove across ranks that no parameter or buffer of `model` is on meta or left unfilled.

    One all-reduce over ``process_group`` (keyword-only; default: the initialized default group;
    else, under torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, a Gloo (CPU) or NCCL (CUDA)
    group made for this call and torn down after: it waits ``timeout_s`` (300 s, as metactl load) for
    every rank, then raises LoadError naming the ranks that never came; Ctrl-C stops the wait).
    Every rank must call it.

    Returns the number of distinct tensors verified across all ranks: those checked, less those
    a ``materialize`` found filled already and kept as they were (nothing proves their values).
    Raises MetaTensorError on every rank, naming each tensor and the rank holding it, if any
    rank has one — on meta, or left unfilled by a failed or partial ``materialize``. Works on
    any module, however it was loaded::

        model = build_and_load(...)
        metaload.verify(model)   # raises: "rank 1: lm_head.weight: parameter still on meta"
    """
    bad, counts = module_findings(model)
    device = resolve_device(None, rank_and_world(process_group)[0])
    with collective_group(process_group, device, timeout_s) as group:
        total = exchange_findings(bad, counts, group, timeout_s=timeout_s)
    return total.checked - total.unproven
