"""One rank of test_fanout.py: a transformers Llama on an HSDP mesh (2 replicas x fsdp 2),
filled by metaload.materialize with and without fan-out, compared with from_pretrained.

Usage (under torchrun, 4 ranks): fanout_rank.py CHECKPOINT OUT_PREFIX
Writes OUT_PREFIX<rank>.json: per mode, bytes read, sources, fan-out bytes, mismatches.
"""
import json
import sys

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


def main():
    folder, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    reference = AutoModelForCausalLM.from_pretrained(folder).state_dict()
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
            "summary": str(report)}
    with open(f"{out}{rank}.json", "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
