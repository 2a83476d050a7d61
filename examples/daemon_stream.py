"""Hosts without the checkpoint: ranks stream their shards from a metad that can read it.

    metad --node-config node.yaml                        # on a host that sees /models
    metactl register llama-8b --checkpoint /models/llama-8b
    METAD_ADDRESS=10.0.0.1:7070 torchrun --nproc-per-node 8 examples/daemon_stream.py llama-8b

The config.json comes from the daemon too (recorded at registration), so this host needs nothing
but the address. Each rank streams only its shards' byte ranges, CRC-checked, resuming a broken
stream on another server of the file. With a module you build yourself, the same is
metaload.materialize(model, "llama-8b") (the daemon from METAD_ADDRESS).
"""
import os
import sys

import torch.distributed as dist
from transformers.distributed import DistributedConfig

import metaload


def main(model_name):
    world = int(os.environ.get("WORLD_SIZE", 1))
    model = metaload.from_pretrained(model_name, daemon=os.environ["METAD_ADDRESS"],
                                     distributed_config=DistributedConfig(fsdp_size=world))
    report = model.metaload_report
    print(f"rank {dist.get_rank()}: streamed {report.streamed_bytes} bytes from "
          f"{sorted(set(s for s in report.sources.values() if s.startswith('stream')))}, "
          f"{report.verified_tensors} tensors verified")
    return model


if __name__ == "__main__":
    main(sys.argv[1])
    dist.destroy_process_group()
