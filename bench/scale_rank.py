"""One rank of the 100k-tensor case (bench/scale.py): the torchrun environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), CPU and Gloo. Builds the synthetic DeepSeek-V3-shaped model that
`metactl synth --experts` wrote the config of on meta, `fully_shard`s each decoder layer and the
root, then times `metaload.materialize(model, checkpoint=dir, strict=False)`: strict=False
because the checkpoint holds the FP8 release's `weight_scale_inv` tensors, which a BF16 model
has no place for (they are listed in report.unexpected, as from_pretrained leaves them).

Prints one JSON line: this rank's seconds for building + sharding the meta model and for
materialize, the slowest rank's (a Gloo all-reduce after a barrier), and the report's counts.

    torchrun --nproc-per-node 2 bench/scale_rank.py --checkpoint DIR
"""
import argparse
import json
import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import metaload

# The rank leaves as tests/integration/gloo_exit.py says (its DeviceMesh and all-reduce ran on
# tensors made in Python).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "integration"))
from gloo_exit import leave  # noqa: E402


def build(config, mesh):
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def slowest(seconds):
    value = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    config = transformers.AutoConfig.from_pretrained(args.checkpoint)
    build(config, mesh)  # warm-up: transformers imports the model's module lazily
    dist.barrier()
    started = time.perf_counter()
    model = build(config, mesh)
    built = time.perf_counter()
    report = metaload.materialize(model, checkpoint=args.checkpoint, device="cpu", strict=False)
    done = time.perf_counter()
    dist.barrier()
    result = {"rank": dist.get_rank(), "world_size": world, "build_and_shard_s": built - started,
              "materialize_s": done - built, "slowest_materialize_s": slowest(done - built),
              "module_tensors": len(model.state_dict()), "unexpected": len(report.unexpected),
              "bytes_read": report.bytes_read, "pid": os.getpid()}
    print(json.dumps(result), flush=True)
    leave()


if __name__ == "__main__":
    main()
