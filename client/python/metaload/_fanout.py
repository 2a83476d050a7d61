"""Read once, fan out: ranks that hold the same bytes read each tensor once between them.

Where a DTensor is placed ``Replicate()`` on a mesh dimension of size R > 1 (HSDP's replica
dimension, ``replicate``, a TP group repeated across replicas), the R ranks along that dimension
hold the very same local tensor. Each such tensor is assigned to one of them — the least loaded
by bytes so far, in the module's order, so that every member computes the same assignment — which
reads it from storage and broadcasts it over the dimension's process group (the collective
backend the job already has: Gloo on CPU, NCCL on GPUs). The others read nothing of it.

Reads and broadcasts overlap: a group's entries are cut into batches of bounded bytes (every
member cuts alike), and each rank reads its share of batch k+1 (one native call, the GIL
released) while batch k's broadcasts are in flight; batch k is waited for and checked after.

Safety, in order:
- the members first agree on what they fan out (one all-gather of a digest of the names, shapes
  and dtypes): a group whose members hold different tensors fans out nothing and reads;
- after reading a batch, each reader says which of its tensors it failed to fill and a CRC-32 of
  those it filled (CPU tensors; on GPUs the bytes are not checked here): a receiver reads a
  tensor itself when its reader failed, and when the bytes that arrived do not match the CRC;
- a collective that fails or times out (a reader gone) ends fan-out for the group: every member
  reads from storage what it did not get, and what it had yet to read for the others.

Everything a rank received is reported as ``fanout:rank N`` (N: the global rank that read it).
"""
from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.distributed as dist

from ._collectives import all_gather_json, keep, wait
from ._errors import LoadError
from ._verify import collective_device

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

# A batch: the unit in which reads and broadcasts overlap. Large enough that a batch's all-gather
# and native call cost little beside its bytes, small enough that the first batch's read (the
# link idle) and the last batch's broadcasts (the disk idle) are a small part of the whole.
# Measured on bench/cluster's hsdp regime (0.5 GiB, 2 replicas x 2, one busy 2-core machine):
# 64 MiB 1.27 s, 16 MiB 1.42 s, every read before every broadcast 2.23 s.
BATCH_BYTES = 64 << 20
MIN_BATCHES = 4  # a group of less than 4 x BATCH_BYTES is cut in 4, so that a small model overlaps too
MIN_BATCH_BYTES = 1 << 20  # but never into batches smaller than this: their all-gathers would dominate

# A test seam: when a list, every group's (event, batch number) in order: "read" (this rank
# starts reading its entries of the batch), "issued" (the batch's broadcasts are in flight),
# "wait" (this rank starts waiting for them), "arrived" (all arrived), "broken" (the group broke).
TRACE: Optional[List[Tuple[str, int]]] = None


@dataclass
class GroupPlan:
    """One replica group's fan-out, as this rank sees it."""

    group: dist.ProcessGroup
    ranks: List[int]  # global ranks, in the group's order
    entries: List[int]  # entry indices fanned out in this group, in order
    reader: Dict[int, int] = field(default_factory=dict)  # entry index -> global rank that reads it
    nbytes: Dict[int, int] = field(default_factory=dict)  # entry index -> its local bytes (alike on every member)


@dataclass
class FanOutPlan:
    groups: List[GroupPlan] = field(default_factory=list)

    def receives(self, rank: int) -> Dict[int, int]:
        """Entry index -> the global rank it comes from, for every entry `rank` does not read."""
        return {i: r for g in self.groups for i, r in g.reader.items() if r != rank}


def _replica_dim(t: torch.Tensor) -> Optional[int]:
    """The first mesh dimension of size > 1 along which `t` is replicated, if any."""
    from torch.distributed.tensor import Replicate

    mesh: "DeviceMesh" = getattr(t, "device_mesh")
    for dim, placement in enumerate(getattr(t, "placements")):
        if isinstance(placement, Replicate) and mesh.size(dim) > 1:
            return dim
    return None


def plan_fanout(tensors: Sequence[Tuple[int, torch.Tensor, int]], timeout_s: float) -> FanOutPlan:
    """`tensors`: (entry index, the DTensor, its local bytes) of every entry that may fan out
    (read from the checkpoint, holding bytes). Collective within each replica group found."""
    by_group: Dict[Tuple[int, ...], GroupPlan] = {}
    for index, t, nbytes in tensors:
        if not hasattr(t, "device_mesh") or nbytes == 0:
            continue
        dim = _replica_dim(t)
        if dim is None:
            continue
        group = getattr(t, "device_mesh").get_group(dim)
        ranks = dist.get_process_group_ranks(group)
        plan = by_group.setdefault(tuple(ranks), GroupPlan(group, list(ranks), []))
        plan.entries.append(index)
        plan.nbytes[index] = nbytes
    out = FanOutPlan()
    sizes = {index: (t, nbytes) for index, t, nbytes in tensors}
    # Groups in one order on every rank: a rank in two groups (two meshes) enters them alike.
    for key in sorted(by_group):
        plan = by_group[key]
        # Every member must fan out the same tensors in the same order, else nothing here.
        mine = hashlib.sha256(repr([(i, tuple(sizes[i][0].shape), str(sizes[i][0].dtype))
                                    for i in plan.entries]).encode()).hexdigest()
        try:
            agreed = len(set(all_gather_json(mine, plan.group, collective_device(plan.group), timeout_s))) == 1
        except (RuntimeError, dist.DistError, LoadError):
            agreed = False  # a member gone already: everyone here reads for itself
        if not agreed:
            continue
        load = {r: 0 for r in plan.ranks}
        for index in plan.entries:
            reader = min(plan.ranks, key=lambda r: (load[r], r))
            plan.reader[index] = reader
            load[reader] += sizes[index][1]
        out.groups.append(plan)
    return out


def _crc(t: torch.Tensor) -> Optional[int]:
    if t.device.type != "cpu":
        return None
    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    return zlib.crc32(flat.numpy().data) if flat.numel() else 0


def batches(g: GroupPlan) -> List[List[int]]:
    """The group's entries, in their agreed order, cut into batches of at most about
    min(BATCH_BYTES, a MIN_BATCHES-th of the group, at least MIN_BATCH_BYTES) (a larger tensor is a
    batch of its own). Every member cuts alike: the same entries, sizes and order."""
    total = sum(g.nbytes[i] for i in g.entries)
    bound = min(BATCH_BYTES, max(MIN_BATCH_BYTES, -(-total // MIN_BATCHES)))
    out: List[List[int]] = []
    size = 0
    for i in g.entries:
        if not out or (size and size + g.nbytes[i] > bound):
            out.append([])
            size = 0
        out[-1].append(i)
        size += g.nbytes[i]
    return out


def share_batch(state: Dict[str, Any], group: dist.ProcessGroup, device: torch.device, timeout_s: float,
                batch: int) -> List[Any]:
    """Every member's (failed, CRC) of batch `batch` (a seam: tests kill a reader here)."""
    return all_gather_json(state, group, device, timeout_s)


def _trace(event: str, batch: int) -> None:
    if TRACE is not None:
        TRACE.append((event, batch))


@dataclass
class Exchanged:
    """What the exchange did for this rank."""

    arrived: Dict[int, int] = field(default_factory=dict)  # entry -> the global rank it arrived from
    read_yourself: List[int] = field(default_factory=list)  # entries this rank must still read itself
    received_bytes: int = 0
    sent_bytes: int = 0


@dataclass
class _Batch:
    """One batch's broadcasts in flight: (entry, the buffer it travels in, its work)."""

    number: int
    crcs: Dict[int, Optional[int]]
    in_flight: List[Tuple[int, torch.Tensor, Optional[dist.Work]]] = field(default_factory=list)


ReadEntries = Callable[[List[int]], Dict[int, bool]]  # reads entries from storage: whether each was filled


def exchange(plan: FanOutPlan, local: Dict[int, torch.Tensor], read: ReadEntries, rank: int,
             timeout_s: float) -> Exchanged:
    """Reads this rank's share of each group's entries (through `read`) and broadcasts it,
    batch by batch: batch k+1 is read while batch k's broadcasts are in flight. `local`: entry
    index -> this rank's local tensor (the destination, contiguous or not). Groups are entered
    in the plan's order, the same on every rank."""
    out = Exchanged()
    for g in plan.groups:
        _GroupExchange(g, local, read, rank, timeout_s, out).run()
    return out


class _GroupExchange:
    def __init__(self, g: GroupPlan, local: Dict[int, torch.Tensor], read: ReadEntries, rank: int,
                 timeout_s: float, out: Exchanged) -> None:
        self.g, self.local, self.read, self.rank, self.timeout_s, self.out = g, local, read, rank, timeout_s, out
        self.device = collective_device(g.group)
        self.settled: Set[int] = set()  # entries arrived, sent, read here, or handed to read_yourself

    def run(self) -> None:
        pending: Optional[_Batch] = None
        for number, batch in enumerate(batches(self.g)):
            issued = self._read_and_issue(number, batch)
            # Batch k-1 is waited for only now: its bytes moved while this rank read batch k.
            if pending is not None and not self._drain(pending):
                break
            if issued is None:
                break
            if issued.in_flight and issued.in_flight[-1][2] is None:  # a broadcast that could not start
                self._drain(issued)
                break
            pending = issued
        else:
            if pending is not None:
                self._drain(pending)
        # A broken group (a reader gone, a collective failed or timed out): what did not arrive
        # and what this rank had yet to read for the others is read from storage.
        self.out.read_yourself += [i for i in self.g.entries if i not in self.settled]

    def _read_and_issue(self, number: int, batch: List[int]) -> Optional[_Batch]:
        """Reads this rank's entries of the batch, agrees on what was read, issues the batch's
        broadcasts. None: the group broke (nothing of the batch in flight)."""
        g, rank = self.g, self.rank
        mine = [i for i in batch if g.reader[i] == rank]
        _trace("read", number)
        filled = self.read(mine) if mine else {}
        self.settled.update(mine)
        state = {"failed": [i for i in mine if not filled.get(i, False)],
                 "crc": {str(i): _crc(self.local[i]) for i in mine if filled.get(i, False)}}
        try:
            states = share_batch(state, g.group, self.device, self.timeout_s, number)
        except (RuntimeError, dist.DistError, LoadError):
            _trace("broken", number)
            return None
        failed = {int(i) for s in states for i in s["failed"]}
        issued = _Batch(number, {int(k): v for s in states for k, v in s["crc"].items()})
        # Every broadcast of the batch is issued at once and then waited for in order: the
        # backend runs them back to back, where one wait per tensor left the link idle between
        # them (a poll's sleep, a round trip each: 2.96 s against DCP's 1.56 s for 4 replicas of
        # a 0.1 GiB model on the benchmark's emulated hosts).
        temporaries: List[torch.Tensor] = []
        for i in batch:
            if i in failed:  # its reader failed it: everyone else reads it
                if g.reader[i] != rank:
                    self._read_yourself(i)
                continue
            t = self.local[i]
            buffer = t if t.is_contiguous() else torch.empty(t.shape, dtype=t.dtype, device=t.device)
            if g.reader[i] == rank and buffer is not t:
                buffer.copy_(t)
            if buffer is not t:
                temporaries.append(buffer)
            try:
                work: Optional[dist.Work] = dist.broadcast(buffer, src=g.reader[i], group=g.group, async_op=True)
            except (RuntimeError, dist.DistError):
                work = None  # the group cannot deliver it (nor anything after it)
            issued.in_flight.append((i, buffer, work))
            if work is None:
                break
        if temporaries:
            keep(*temporaries)
        _trace("issued", number)
        return issued

    def _drain(self, batch: _Batch) -> bool:
        """Waits for a batch's broadcasts in order and checks what arrived; False: the group broke."""
        _trace("wait", batch.number)
        g, rank, out = self.g, self.rank, self.out
        for i, buffer, work in batch.in_flight:
            reader, t = g.reader[i], self.local[i]
            try:
                if work is None:
                    raise LoadError("the broadcast could not start")
                wait(work, f"a broadcast from rank {reader}", timeout_s=self.timeout_s)
            except (RuntimeError, dist.DistError, LoadError):
                _trace("broken", batch.number)
                return False
            if reader == rank:
                out.sent_bytes += t.numel() * t.element_size() * (len(g.ranks) - 1)
                continue
            if buffer is not t:
                t.copy_(buffer)
            expected = batch.crcs.get(i)
            if expected is not None and _crc(t) != expected:
                self._read_yourself(i)
                continue
            out.arrived[i] = reader
            out.received_bytes += t.numel() * t.element_size()
            self.settled.add(i)
        _trace("arrived", batch.number)
        return True

    def _read_yourself(self, i: int) -> None:
        self.out.read_yourself.append(i)
        self.settled.add(i)
