"""The collectives fan-out (_fanout.py) runs over the caller's process groups, made safe to run
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

Every call is bounded: it waits at most `timeout_s` for its collective (a rank that died or
hangs would otherwise hold the others until the group's own timeout, 30 minutes by default),
polling, so that Ctrl-C interrupts it, and raises LoadError naming the operation.
"""
from __future__ import annotations

import collections
import json
import time
from typing import Any, Deque, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from ._errors import LoadError

# The tensors of the last collectives: far more than the works Gloo can hold in flight at once
# for one verification (an all-reduce, two all-gathers, a barrier).
_KEPT: Deque[Tuple[torch.Tensor, ...]] = collections.deque(maxlen=32)


def keep(*tensors: torch.Tensor) -> None:
    """Keeps tensors made for a collective referenced from Python (see above)."""
    _KEPT.append(tuple(tensors))


def wait(work: Optional[dist.Work], what: str, timeout_s: float) -> None:
    """Waits for `work` at most `timeout_s`, in short sleeps (Ctrl-C gets through)."""
    if work is None:
        return
    deadline = time.monotonic() + timeout_s
    pause = 0.0002
    while not work.is_completed():
        if time.monotonic() >= deadline:
            raise LoadError(f"{what}: not every rank of the group answered within {timeout_s:g} s (a rank that died "
                            "or is stuck elsewhere; wait longer with verify_timeout_s=)")
        time.sleep(pause)
        pause = min(2 * pause, 0.01)
    work.wait()  # raises what the collective raised


def all_gather_json(value: Any, group: Optional[dist.ProcessGroup], device: torch.device,
                    timeout_s: float) -> List[Any]:
    """Every rank's `value` (JSON-serializable), in rank order."""
    world = dist.get_world_size(group)
    encoded = json.dumps(value).encode()
    size = torch.tensor([len(encoded)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    keep(size, *sizes)
    wait(dist.all_gather(sizes, size, group=group, async_op=True), "an all-gather", timeout_s)
    lengths = [int(s.item()) for s in sizes]
    padded = torch.zeros(max(lengths), dtype=torch.uint8, device=device)
    if encoded:
        padded[:len(encoded)] = torch.frombuffer(bytearray(encoded), dtype=torch.uint8).to(device)
    received = [torch.empty_like(padded) for _ in range(world)]
    keep(padded, *received)
    wait(dist.all_gather(received, padded, group=group, async_op=True), "an all-gather", timeout_s)
    return [json.loads(bytes(r[:n].cpu().tolist()).decode()) for r, n in zip(received, lengths)]
