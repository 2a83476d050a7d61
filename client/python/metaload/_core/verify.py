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
import os
import threading
import time
from typing import Any, Callable, Collection, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple, TypeVar, Union, cast

import torch
import torch.distributed as dist

from .. import _native
from .._env import env_int, rank_and_world, resolve_device
from .._errors import BadInputError, Finding, LoadError, MetaTensorError
from .marks import Mark, local_tensor, marked, region_marked

T = TypeVar("T")

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


class Walk(NamedTuple):
    """What a walk of a module found on this rank: its findings, counts, and what proves the
    values of the tensors it holds (the proofs of reads, and how many were computed or
    initialized)."""

    bad: List[Tuple[str, str]]
    counts: Counts
    proofs: List[_native.Proof]
    initialized: int
    computed: int


NOT_LOADED = ("not filled by metaload (its values were never loaded or checked by it): load it with "
              "metaload.materialize, from_pretrained or a StorageReader, or verify(meta_only=True) to check "
              "only that nothing is on meta")


def module_findings(model: torch.nn.Module, meta_only: bool = False) -> Walk:
    """Every distinct parameter and buffer of `model`: (name, why) of each on meta, left
    unfilled, or (unless `meta_only`) never filled by metaload; the proofs and states of the
    others."""
    bad: List[Tuple[str, str]] = []
    seen: Set[int] = set()
    unproven = initialized = computed = 0
    proofs: List[_native.Proof] = []
    for prefix, module in model.named_modules(remove_duplicate=False):
        for kind, table in (("parameter", module._parameters), ("buffer", module._buffers)):
            for name, t in table.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                full = f"{prefix}.{name}" if prefix else name
                if _is_meta(t):
                    bad.append((full, f"{kind} still on meta"))
                    continue
                mark = marked(t) or region_marked(t)
                if mark is None:
                    # A non-persistent buffer no checkpoint holds (rotary inv_freq) that the module
                    # computed itself (a dcp.load never touches it): not metaload's to prove.
                    if meta_only or (kind == "buffer" and name in module._non_persistent_buffers_set):
                        unproven += 1
                    else:
                        bad.append((full, NOT_LOADED))
                elif mark[0] is Mark.UNFILLED:
                    bad.append((full, mark[1]))
                elif mark[0] is Mark.KEPT:
                    unproven += 1
                elif mark[0] is Mark.READ:
                    proofs += mark[2]
                elif mark[0] is Mark.COMPUTED:
                    computed += 1
                elif mark[0] is Mark.INITIALIZED:
                    initialized += 1
    bad += [(target, why) for target, _, why in broken_ties(model)]
    return Walk(bad, Counts(len(seen), unproven), proofs, initialized, computed)


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


class Verified(NamedTuple):
    """What the exchange proved across every rank (client/verify/outcome.h)."""

    checked: int  # distinct tensors looked at, summed over ranks
    unproven: int  # of those, kept as they were (or, with meta_only, not filled by metaload)
    proven: bool  # every tensor's content proven: said "verified"
    content: str  # "content proven: 291 stored tensors checked against their registered fast digests, ..."
    unproven_lines: List[str]  # each stored tensor the digests could not check, and why
    stored: Dict[str, int]  # stored tensors by state, each once: checked, no_digest, unproven, mismatch


def exchange_findings(local: Sequence[Tuple[str, str]], counts: Union[int, Counts], group: Group,
                      summary: Sequence[str] = (), refusal: bool = False,
                      timeout_s: float = JOIN_TIMEOUT_S, could_not_load: bool = False,
                      plan_digest: str = "", proofs: Sequence[_native.Proof] = (), initialized: int = 0,
                      computed: int = 0, require_proof: bool = False) -> Verified:
    """The exchange every entry point shares, in C++ (client/verify/exchange.h) over `group`:
    raises MetaTensorError on every rank, with the same message and findings, if any rank has a
    finding, could not load, or loaded another plan (`refusal`: findings of a load refused
    before anything was allocated or read), or a stored tensor's bytes differ from its digest;
    with `require_proof`, also unless every tensor's content is proven. `local`: (tensor, why)
    of this rank ("" for the whole rank); `proofs`: what this rank's reads prove, summed with
    every rank's against the registered digests."""
    if isinstance(counts, int):
        counts = Counts(counts, 0)
    pg = None if isinstance(group, Single) else (group if group is not None else dist.group.WORLD)
    device = "cpu" if pg is None else str(collective_device(pg))
    out = _native.exchange_reports(pg, device=device, findings=[(str(n), str(w)) for n, w in local],
                                   summary=list(summary), checked=counts.checked, unproven=counts.unproven,
                                   could_not_load=could_not_load, plan_digest=plan_digest, refusal=refusal,
                                   timeout_s=timeout_s, proofs=list(proofs), initialized=initialized,
                                   computed=computed)
    if not out["ok"]:
        raise MetaTensorError(out["message"], [Finding(name, r, why) for name, r, why in out["findings"]])
    verified = Verified(out["checked"], out["unproven"], out["proven"], out["content"], list(out["unproven_lines"]),
                        dict(out["stored"]))
    if require_proof and not verified.proven:
        raise MetaTensorError("verification failed (require_proof): " + verified.content +
                              "".join(f"\n  {line}" for line in verified.unproven_lines + list(out["notes"])),
                              [Finding(line.split(": ")[1] if line.count(": ") > 1 else "", -1, line)
                               for line in verified.unproven_lines])
    return verified


class Verification(int):
    """What verify() returns: the number of distinct tensors verified across all ranks (an int,
    as before), with what their content proves: ``proven`` (every tensor's content checked
    against a registered digest or computed by a rule: "verified"), ``content`` (the line that
    says what was and was not proven) and ``unproven`` (each stored tensor the digests could not
    check, and why)."""

    proven: bool
    content: str
    unproven: List[str]

    def __new__(cls, count: int, verified: Verified) -> "Verification":
        out = super().__new__(cls, count)
        out.proven = verified.proven
        out.content = verified.content
        out.unproven = verified.unproven_lines
        return out


def verify(model: torch.nn.Module, *, process_group: Optional[dist.ProcessGroup] = None,
           timeout_s: float = JOIN_TIMEOUT_S, require_proof: bool = False, meta_only: bool = False) -> Verification:
    """Prove across ranks that every parameter and buffer of `model` holds what metaload loaded
    into it, and say what proves its content.

    One collective exchange over ``process_group`` (keyword-only; default: the initialized default
    group; else, under torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, a Gloo (CPU) or NCCL
    (CUDA) group made for this call and torn down after: it waits ``timeout_s`` (300 s, as
    metactl load) for every rank, then raises LoadError naming the ranks that never came; Ctrl-C
    stops the wait). Every rank must call it.

    Raises MetaTensorError on every rank, naming each tensor and the rank holding it, if any rank
    has one on meta, left unfilled by a failed or partial load, never filled by metaload at all
    (``meta_only=True`` checks only that nothing is on meta, and counts such tensors unproven),
    or whose bytes differ from the digest registered for them (summed over every rank's tiles,
    whatever split the ranks hold, docs/integrity.md). With ``require_proof=True`` also unless
    every tensor's content is proven.

    Returns the number of distinct tensors verified across all ranks (an int), whose
    ``.proven``, ``.content`` and ``.unproven`` say what proves their values::

        v = metaload.verify(model)   # raises: "rank 1: lm_head.weight: parameter still on meta"
        print(v.content)             # content proven: 291 stored tensors checked against ...
    """
    total = verify_module(model, process_group=process_group, timeout_s=timeout_s, require_proof=require_proof,
                          meta_only=meta_only)
    return Verification(total.checked - total.unproven, total)


def verify_module(model: torch.nn.Module, *, process_group: Optional[dist.ProcessGroup] = None,
                  timeout_s: float = JOIN_TIMEOUT_S, require_proof: bool = False,
                  meta_only: bool = False) -> Verified:
    """verify()'s work, with all it proved (for the loaders' reports)."""
    walk = module_findings(model, meta_only=meta_only)
    device = resolve_device(None, rank_and_world(process_group)[0])
    with collective_group(process_group, device, timeout_s) as group:
        return exchange_findings(walk.bad, walk.counts, group, timeout_s=timeout_s, proofs=walk.proofs,
                                 initialized=walk.initialized, computed=walk.computed, require_proof=require_proof)
