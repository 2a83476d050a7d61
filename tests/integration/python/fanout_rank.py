"""One rank of test_fanout.py: a transformers Llama on an HSDP mesh (2 replicas x fsdp 2),
filled by metaload.materialize with and without fan-out, compared with from_pretrained.

Usage (under torchrun, 4 ranks): fanout_rank.py CHECKPOINT OUT_PREFIX [kill]
Writes OUT_PREFIX<rank>.json: per mode, bytes read, sources, fan-out bytes, mismatches. With
`kill` (test_fanout.py sets the core's knob for rank 2: it SIGKILLs itself after N chunks),
the others write what verification raised, where their tensors came from, the fan-out notes and
whether their local shards hold torch's bytes.
"""
import json
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

import metaload

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/integration: gloo_exit
from gloo_exit import leave  # noqa: E402


def build(folder, mesh):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def killed_reader(folder, out, rank, mesh, reference):
    """Rank 2 kills itself after sending some chunks (the core's test knob,
    METALOAD_FANOUT_TEST_KILL_AFTER_CHUNKS, set for it alone); the others must not wait for it
    forever, and must hold torch's bytes, read from storage where they did not arrive."""
    model = build(folder, mesh)
    started = time.monotonic()
    report = metaload.materialize(model, checkpoint=folder, verify=False)
    try:
        metaload.verify(model, timeout_s=5)
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
                   "sources": report.sources, "notes": report.fanout_notes,
                   "received": report.fanout_received_bytes}, f)
    os._exit(0)  # the group is broken: no teardown that would wait for rank 2


def main():
    folder, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    reference = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    mode = sys.argv[3] if len(sys.argv) > 3 else ""
    if mode == "kill":
        killed_reader(folder, out, rank, mesh, reference)
    results = {}
    for fan_out in (True, False):
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
            "summary": str(report), "notes": report.fanout_notes}
    with open(f"{out}{rank}.json", "w") as f:
        json.dump(results, f)
    leave()


if __name__ == "__main__":
    main()
