"""transformers' DistributedConfig: its own TP/FSDP/HSDP/EP/PP plans, the weights from metaload.

    torchrun --nproc-per-node 8 examples/distributed_config.py /models/qwen2-7b 2

Equal bit for bit to AutoModelForCausalLM.from_pretrained(path, distributed_config=...), tied
models included, while each rank reads only its shards (streamed from a daemon when the path is
a registered model's name: metaload.from_pretrained("qwen2-7b", daemon="10.0.0.1:7070", ...)).
"""
import os
import sys

import torch.distributed as dist
from transformers.distributed import DistributedConfig

import metaload


def main(checkpoint, tp=2):
    tp = int(tp)
    # transformers initializes the process group and the mesh from torchrun's variables.
    world = int(os.environ.get("WORLD_SIZE", 1))
    model = metaload.from_pretrained(checkpoint, distributed_config=DistributedConfig(tp_size=tp, fsdp_size=world // tp))
    report = model.metaload_report
    print(f"rank {dist.get_rank()}: {type(model).__name__}, read {report.bytes_read} bytes, "
          f"{report.verified_tensors} tensors verified")
    return model


if __name__ == "__main__":
    main(*sys.argv[1:3])
    dist.destroy_process_group()
