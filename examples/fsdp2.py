"""Plain FSDP2: build the model on meta, shard it, then fill exactly each rank's shards.

    torchrun --nproc-per-node 8 examples/fsdp2.py /models/llama-8b

Each rank reads only the bytes of its own shards (an eighth of the checkpoint here), converts
them to the module's dtype, and one all-reduce proves no rank still holds a meta tensor.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

import metaload


def main(checkpoint):
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    config = AutoConfig.from_pretrained(checkpoint)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=config.dtype)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)  # the root group holds the embedding and the (tied) head together
    report = metaload.materialize(model, checkpoint=checkpoint)
    print(f"rank {dist.get_rank()}: read {report.bytes_read} bytes, {report.verified_tensors} tensors verified")
    return model


if __name__ == "__main__":
    main(sys.argv[1])
    dist.destroy_process_group()
