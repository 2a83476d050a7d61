"""Load Hugging Face weights the way torchtitan does, through metaload.

meta init -> parallelize (tensor parallel, then FSDP2) -> to_empty -> dcp.load with
metaload.StorageReader and metaload.LoadPlanner -> metaload.verify. Each rank reads only its
shards; with --model NAME (registered with a daemon: metactl register) the layout comes from
the daemon (--daemon or $METAD_ADDRESS) and ranks that cannot see the files stream them.

    torchrun --nproc-per-node 4 examples/torchtitan_dcp.py --checkpoint /models/llama-8b --tp 2
    torchrun --nproc-per-node 4 examples/torchtitan_dcp.py --config /models/llama-8b --model llama-8b \\
        --daemon node-a:7070
    ... --compare: every rank also builds from_pretrained and compares the logits of a batch.
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from transformers import AutoConfig, AutoModelForCausalLM

import metaload

TP_PLAN = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
           "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
           "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="a Hugging Face folder this host sees (read directly)")
    parser.add_argument("--model", help="a model registered with a daemon (read through it)")
    parser.add_argument("--daemon", help="HOST:PORT of a metad (default: $METAD_ADDRESS)")
    parser.add_argument("--config", help="the folder holding config.json (default: --checkpoint)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree; FSDP2 over the rest")
    parser.add_argument("--compare", action="store_true", help="compare logits with from_pretrained")
    args = parser.parse_args()
    if not (args.checkpoint or args.model):
        parser.error("give --checkpoint or --model")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh(device, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))

    # 1. Build on meta: no memory, no initialization.
    config = AutoConfig.from_pretrained(args.config or args.checkpoint)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # 2. Parallelize: tensor parallel inside each tp group, FSDP2 across the dp dimension.
    if args.tp > 1:
        for block in model.model.layers:
            parallelize_module(block, mesh["tp"], TP_PLAN)
        if not config.tie_word_embeddings:
            # Each rank computes its vocabulary columns; Replicate() gathers the whole logits (as
            # torchtitan does without loss parallelism): a local output would be 1/tp of them.
            parallelize_module(model, mesh["tp"], {"lm_head": ColwiseParallel(output_layouts=Replicate())})
    if world // args.tp > 1:
        for block in model.model.layers:
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    # 3. Allocate this rank's shards; the non-persistent buffers (rotary inv_freq), which no
    #    checkpoint holds, computed by transformers' own initialization.
    model.to_empty(device=device)
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "original_inv_freq"):
                model._init_weights(module)
    # 4. Load: each rank reads its shards (directly, or streamed from a daemon), verified.
    if args.model:
        reader = metaload.StorageReader(args.model, daemon=args.daemon)
    else:
        reader = metaload.StorageReader(args.checkpoint)
    dcp.load(model.state_dict(), storage_reader=reader, planner=metaload.LoadPlanner())
    print(f"rank {rank}: {reader.report}", flush=True)
    # 5. Any module, however it was loaded: no tensor on meta or unfilled on any rank.
    print(f"rank {rank}: metaload.verify(model): {metaload.verify(model)} tensors", flush=True)

    if args.compare:
        batch = torch.arange(16, device=device).reshape(2, 8) % config.vocab_size
        with torch.no_grad():
            logits = model(batch).logits
            logits = logits.full_tensor() if hasattr(logits, "full_tensor") else logits
            reference = AutoModelForCausalLM.from_pretrained(args.config or args.checkpoint,
                                                             dtype=torch.float32).to(device)(batch).logits
        # The weights are equal bit for bit (verified); tensor parallel sums the row-parallel
        # products in another order than one process does, so logits may differ by rounding.
        print(f"rank {rank}: logits match from_pretrained: {torch.allclose(logits, reference, rtol=1e-5, atol=1e-5)} "
              f"(max abs diff {(logits - reference).abs().max().item():.3g})", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
