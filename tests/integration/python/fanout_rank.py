"""One rank of test_fanout.py: a transformers Llama on an HSDP mesh (2 replicas x fsdp 2),
filled by metaload.materialize with and without fan-out, compared with from_pretrained.

Usage (under torchrun, 4 ranks): fanout_rank.py CHECKPOINT OUT_PREFIX [kill | kill-later | pipeline]
Writes OUT_PREFIX<rank>.json: per mode, bytes read, sources, fan-out bytes, mismatches. With
`kill`, rank 2 is killed (SIGKILL) once it has read its share, before it broadcasts any of it;
the others write what materialize raised and whether their local shards hold torch's bytes.
`kill-later` cuts the fan-out into batches of 64 KiB and kills rank 2 at batch 3, once batches
0-2 were read and 0-1 delivered; the survivors also write what arrived and what they read after.
`pipeline` fills with fan-out only, in batches of 64 KiB, and writes the exchange's trace too.
"""
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

import metaload


def build(folder, mesh):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


SMALL_BATCH_BYTES = 64 << 10  # this Llama's ~0.45 MB per replica group in ~6 batches
KILLED_AT_BATCH = 3


def killed_reader(folder, out, rank, mesh, reference, later):
    """Rank 2 dies before it shares what it read (of everything, or of batch 3); the others must
    not wait for it forever."""
    from metaload import _fanout, _materialize

    killed_at = 0
    if later:
        _fanout.BATCH_BYTES, killed_at = SMALL_BATCH_BYTES, KILLED_AT_BATCH
    if rank == 2:
        share_batch = _fanout.share_batch

        def die(*args, **kwargs):
            if args[-1] == killed_at:  # the batch number
                os.kill(os.getpid(), signal.SIGKILL)
            return share_batch(*args, **kwargs)
        _fanout.share_batch = die  # as exchange calls it
    exchanged = []
    exchange = _materialize.exchange

    def record(*args, **kwargs):
        exchanged.append(exchange(*args, **kwargs))
        return exchanged[-1]
    _materialize.exchange = record
    model = build(folder, mesh)
    started = time.monotonic()
    try:
        metaload.materialize(model, checkpoint=folder, verify_timeout_s=5)
        raised = ""
    except Exception as e:  # what the survivors see: their verification cannot reach rank 2
        raised = f"{type(e).__name__}: {e}"
    # torch's local shard of (Replicate(), Shard(0)), computed here: the group is broken, so no
    # collective (distribute_tensor) can give it.
    shard = mesh.get_coordinate()[1]
    wrong = []
    for name, p in model.named_parameters():
        chunks = torch.chunk(reference[name], 2, dim=0)
        want = chunks[shard] if shard < len(chunks) else reference[name][:0]
        if not torch.equal(p.to_local(), want):
            wrong.append(name)
    with open(f"{out}{rank}.json", "w") as f:
        json.dump({"raised": raised, "wrong": wrong, "seconds": time.monotonic() - started,
                   "arrived_from": sorted({r for e in exchanged for r in e.arrived.values()}),
                   "read_after": sum(len(e.read_yourself) for e in exchanged)}, f)
    os._exit(0)  # the group is broken: no teardown that would wait for rank 2


def main():
    folder, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    reference = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    mode = sys.argv[3] if len(sys.argv) > 3 else ""
    if mode in ("kill", "kill-later"):
        killed_reader(folder, out, rank, mesh, reference, later=mode == "kill-later")
    trace = None
    if mode == "pipeline":
        from metaload import _fanout

        _fanout.BATCH_BYTES, _fanout.TRACE = SMALL_BATCH_BYTES, []
        trace = _fanout.TRACE
    results = {}
    for fan_out in (True,) if mode == "pipeline" else (True, False):
        model = build(folder, mesh)
        report = metaload.materialize(model, checkpoint=folder, fan_out=fan_out)
        state = model.state_dict()
        mismatched = []
        for name, ref in reference.items():
            full = state[name].full_tensor() if hasattr(state[name], "full_tensor") else state[name]
            if not torch.equal(full, ref):
                mismatched.append(name)
        placements = sorted({str(tuple(p.placements)) for p in model.parameters()})
        results["on" if fan_out else "off"] = {
            "bytes_read": report.bytes_read, "received": report.fanout_received_bytes,
            "sent": report.fanout_sent_bytes, "sources": report.sources, "mismatched": mismatched,
            "verified": report.verified_tensors, "counts": report.counts, "placements": placements,
            "summary": str(report), "trace": trace if fan_out else None}
    with open(f"{out}{rank}.json", "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
