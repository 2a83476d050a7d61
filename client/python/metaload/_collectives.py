"""The few collectives verification runs over the caller's process group, made safe to run
right before the process exits.

Why not torch's own calls alone: Gloo's worker thread may drop its last reference to a work
after the caller has returned, and a barrier keeps weak references to the works in flight
when it was issued, so a work's tensors can be freed on that thread later, in the last
moments of the process. A tensor made in Python then needs the GIL to free its Python
object; once the interpreter is finalizing, a thread that asks for the GIL is ended by
CPython, and ending a thread inside a C++ destructor is std::terminate: "terminate called
without an active exception" (seen in 2 of 12 runs of a two-rank FSDP script that ended
right after materialize; the core shows ~AsyncBarrierWork -> ~AsyncAllgatherWork ->
TensorImpl::decref_pyobject -> take_gil -> pthread_exit). So every tensor handed to a
collective here stays referenced from Python (the last few calls' tensors): when the worker
drops a work, a tensor's Python object still owns it, and nothing on that thread needs the GIL.
Objects are exchanged as JSON (not pickle: a peer's bytes are never code).
"""
from __future__ import annotations

import collections
import json
from typing import Any, Deque, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

# The tensors of the last collectives: far more than the works Gloo can hold in flight at once
# for one verification (an all-reduce, two all-gathers, a barrier).
_KEPT: Deque[Tuple[torch.Tensor, ...]] = collections.deque(maxlen=32)


def _keep(*tensors: torch.Tensor) -> None:
    _KEPT.append(tuple(tensors))


def collective_device(group: Optional[dist.ProcessGroup]) -> torch.device:
    """Where the group's collectives take their tensors: the current GPU for NCCL, else CPU."""
    if "nccl" in str(dist.get_backend(group)):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(values: Sequence[int], group: Optional[dist.ProcessGroup], device: torch.device) -> List[int]:
    summed = torch.tensor(list(values), dtype=torch.int64, device=device)
    _keep(summed)
    dist.all_reduce(summed, op=dist.ReduceOp.SUM, group=group)
    return [int(v) for v in summed.tolist()]


def all_gather_json(value: Any, group: Optional[dist.ProcessGroup], device: torch.device) -> List[Any]:
    """Every rank's `value` (JSON-serializable), in rank order."""
    world = dist.get_world_size(group)
    encoded = json.dumps(value).encode()
    size = torch.tensor([len(encoded)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    _keep(size, *sizes)
    dist.all_gather(sizes, size, group=group)
    lengths = [int(s.item()) for s in sizes]
    padded = torch.zeros(max(lengths), dtype=torch.uint8, device=device)
    if encoded:
        padded[:len(encoded)] = torch.frombuffer(bytearray(encoded), dtype=torch.uint8).to(device)
    received = [torch.empty_like(padded) for _ in range(world)]
    _keep(padded, *received)
    dist.all_gather(received, padded, group=group)
    return [json.loads(bytes(r[:n].cpu().tolist()).decode()) for r, n in zip(received, lengths)]


def barrier(group: Optional[dist.ProcessGroup]) -> None:
    dist.barrier(group=group)
