"""HSDP: shard within a node, replicate across nodes; each byte leaves storage once.

    torchrun --nnodes 2 --nproc-per-node 8 ... examples/hsdp.py /models/llama-8b

The mesh is (replicas, shards). A replica's ranks read their shards; the same shard on the
other replicas arrives by broadcast over the replicate dimension (metaload's fan-out), so
the job reads the checkpoint once in total, not once per replica.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

import metaload


def main(checkpoint, replicas=2):
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    world = dist.get_world_size()
    mesh = init_device_mesh("cuda" if cuda else "cpu", (replicas, world // replicas),
                            mesh_dim_names=("replicate", "shard"))
    config = AutoConfig.from_pretrained(checkpoint)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=config.dtype)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    report = metaload.materialize(model, checkpoint=checkpoint)
    print(f"rank {dist.get_rank()}: read {report.bytes_read} bytes, received {report.fanout_received_bytes} "
          f"from its replica group, {report.verified_tensors} tensors verified")
    return model


if __name__ == "__main__":
    main(sys.argv[1])
    dist.destroy_process_group()
