"""Tensor parallel inside a node, FSDP2 across: a 2-D (dp, tp) mesh.

    torchrun --nproc-per-node 8 examples/tp_fsdp2.py /models/llama-8b 2

torch's parallelize_module shards the attention and MLP projections over "tp" (column-wise in,
row-wise out), fully_shard shards what results over "dp"; each rank then reads only the
strided slices its DTensors hold.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from transformers import AutoConfig, AutoModelForCausalLM

import metaload

LAYER_PLAN = {
    "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
    "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
    "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel(),
}


def main(checkpoint, tp=2):
    tp = int(tp)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    mesh = init_device_mesh("cuda" if cuda else "cpu", (dist.get_world_size() // tp, tp), mesh_dim_names=("dp", "tp"))
    config = AutoConfig.from_pretrained(checkpoint)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=config.dtype)
    for layer in model.model.layers:
        parallelize_module(layer, mesh["tp"], LAYER_PLAN)
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    report = metaload.materialize(model, checkpoint=checkpoint)
    print(f"rank {dist.get_rank()}: read {report.bytes_read} bytes, {report.verified_tensors} tensors verified")
    return model


if __name__ == "__main__":
    main(*sys.argv[1:3])
    dist.destroy_process_group()
