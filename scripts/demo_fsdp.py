"""Demo step: the same checkpoint inside a training process. Each torchrun rank builds the
model on meta with transformers, shards it with FSDP2, and metaload.materialize fills exactly
its shards from the daemon's registration; one all-reduce then verifies every rank.

    torchrun --nproc-per-node 4 scripts/demo_fsdp.py MODEL CHECKPOINT_DIR DAEMON
"""
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import AutoConfig, AutoModelForCausalLM

import metaload

name, folder, daemon = sys.argv[1:4]
dist.init_process_group("gloo")
rank = dist.get_rank()
with torch.device("meta"):
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder), dtype=torch.bfloat16)
for block in model.model.layers:
    fully_shard(block)
fully_shard(model)
start = time.monotonic()
report = metaload.materialize(model, name, daemon=daemon)
reports = [None] * dist.get_world_size()
dist.all_gather_object(reports, str(report))
if rank == 0:
    print("\n".join(f"  {line}" for line in reports), flush=True)
    shard = model.model.embed_tokens.weight
    (row, rows), _ = report.slices["model.embed_tokens.weight"]  # (start, length) per dim
    print(f"  e.g. model.embed_tokens.weight: a DTensor {tuple(shard.shape)}, placements {shard.placements}; "
          f"rank 0 holds rows {row}+{rows} of it", flush=True)
    with torch.no_grad():
        logits = model(torch.tensor([[1, 2, 3, 4]])).logits
    print(f"  a forward pass on the FSDP2 model: logits {tuple(logits.shape)}, finite: "
          f"{bool(torch.isfinite(logits.full_tensor() if hasattr(logits, 'full_tensor') else logits).all())}")
else:
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3, 4]]))  # FSDP2's forward is collective: every rank runs it
dist.destroy_process_group()
