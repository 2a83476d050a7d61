"""One torchrun rank of test_torchao.py: each case builds a transformers Llama on meta whose
projections hold torchao Float8Tensor weights (per row or per tensor by torchao's own quantize_,
128x128 blocks by Float8Tensor.from_hp on meta), fills it with metaload.materialize from an FP8
checkpoint, and compares every Float8Tensor's qdata and scale with the checkpoint's tensors and
the model's output with the same torchao module built from the checkpoint's tensors directly.

usage: torchao_rank.py CASES_JSON OUT_DIR
"""
import torch
import torch.distributed as dist
import transformers
from torchao.quantization import Float8Tensor, Float8WeightOnlyConfig, quantize_
from torchao.quantization.granularity import PerBlock, PerRow, PerTensor

import metaload
from layouts_rank import checkpoint_tensors
from quant_rank import run_rank

GRANULARITY = {"row": PerRow(), "tensor": PerTensor()}


def projections(module, fqn):
    return isinstance(module, torch.nn.Linear) and fqn.endswith("_proj")


def skeleton(folder, granularity, device="meta", quantize_lm_head=False):
    """The Llama of `folder`'s config.json, its projections torchao Float8Tensors of
    `granularity` ("row", "tensor", "block"), built on `device` without allocating on meta."""
    config = transformers.AutoConfig.from_pretrained(folder)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    chosen = (lambda m, fqn: projections(m, fqn) or fqn == "lm_head") if quantize_lm_head else projections
    if granularity == "block":
        # Float8WeightOnlyConfig takes PerRow or PerTensor; 128x128 blocks are Float8Tensor.from_hp's
        # (quantize_ builds them only with Float8DynamicActivationFloat8WeightConfig, on SM89+ GPUs).
        for fqn, m in model.named_modules():
            if chosen(m, fqn):
                m.weight = torch.nn.Parameter(Float8Tensor.from_hp(m.weight, granularity=PerBlock([128, 128])),
                                              requires_grad=False)
    else:
        quantize_(model, Float8WeightOnlyConfig(granularity=GRANULARITY[granularity]), filter_fn=chosen)
    return model


def from_checkpoint(folder, granularity):
    """The same torchao model built on the CPU from the checkpoint's own tensors: the reference."""
    model = skeleton(folder, granularity, device="cpu")
    stored = checkpoint_tensors(folder)
    with torch.no_grad():
        for name, p in list(model.named_parameters()):
            module, _, attr = name.rpartition(".")
            owner = model.get_submodule(module)
            if isinstance(p, Float8Tensor):
                scale = stored.get(name + "_scale_inv", stored.get(name + "_scale"))
                owner.weight = torch.nn.Parameter(
                    Float8Tensor(stored[name], scale.float().reshape(p.scale.shape), block_size=p.block_size,
                                 dtype=p.dtype), requires_grad=False)
            else:
                p.copy_(stored[name])
    return model


def shard_rows(model, granularity):
    """Each Float8Tensor weight as torchao's own tensor-parallel tests build one: every rank
    quantizes its rows (here on meta: nothing allocated) and DTensor.from_local puts them
    together, Shard(0); torchao shards one with none of torch's APIs (docs/quantization.md)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for m in model.modules():
        if isinstance(getattr(m, "weight", None), Float8Tensor):
            n, k = m.weight.shape
            rows = torch.empty(n // mesh.size(), k, dtype=torch.bfloat16, device="meta")
            local = Float8Tensor.from_hp(rows, granularity=PerBlock([128, 128]) if granularity == "block"
                                         else GRANULARITY[granularity])
            m.weight = torch.nn.Parameter(DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                                             shape=(n, k), stride=(k, 1)), requires_grad=False)
    return mesh


def loaded(case):
    if case.get("cut"):  # 384 rows in 128-row blocks over 2 ranks: 192 each, through the second block
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        # by hand: torchao's from_hp refuses 192 rows in 128-row blocks, and DTensor.from_local
        # (its view_as) a local scale of other than floor(192 / 128) = 1 row
        local = Float8Tensor(torch.empty(192, 256, dtype=torch.float8_e4m3fn, device="meta"),
                             torch.empty(1, 2, device="meta"), block_size=[128, 128], dtype=torch.bfloat16)
        model = torch.nn.Module()
        model.proj = torch.nn.Module()
        model.proj.weight = torch.nn.Parameter(DTensor.from_local(
            local, init_device_mesh("cpu", (2,)), [Shard(0)], run_check=False, shape=(384, 256), stride=(256, 1)),
            requires_grad=False)
    elif case.get("partial"):  # 160 rows in 128-row blocks, as torchao cannot build (from_hp refuses it)
        model = torch.nn.Module()
        model.proj = torch.nn.Module()
        model.proj.weight = torch.nn.Parameter(Float8Tensor(
            torch.empty(160, 256, dtype=torch.float8_e4m3fn, device="meta"),
            torch.empty(2, 2, device="meta"), block_size=[128, 128], dtype=torch.bfloat16), requires_grad=False)
    else:
        model = skeleton(case["folder"], case["granularity"], quantize_lm_head=case.get("lm_head", False))
        if case.get("sharded"):
            shard_rows(model, case["granularity"])
    return model, metaload.materialize(model, checkpoint=case["folder"])


def run_case(case):
    model, report = loaded(case)
    stored, bad, kinds = checkpoint_tensors(case["folder"]), [], set()
    rank, world = dist.get_rank(), dist.get_world_size()
    for name, p in model.named_parameters():
        kinds.add(type(p).__name__)
        local = p.to_local() if case.get("sharded") and hasattr(p, "to_local") else p
        if isinstance(local, Float8Tensor):
            codes = stored[name]
            scale = stored.get(name + "_scale_inv", stored.get(name + "_scale"))
            if case.get("sharded"):  # this rank's rows, and the scale rows of its blocks (or rows)
                codes, scale = codes.chunk(world)[rank], scale.chunk(world)[rank]
            # codes as bytes; scales as values (a BF16 scale held in float32 is the same value)
            if not torch.equal(local.qdata.view(torch.uint8), codes.view(torch.uint8)):
                bad.append(name + ".qdata")
            if local.scale.dtype != torch.float32 or not torch.equal(local.scale,
                                                                     scale.float().reshape(local.scale.shape)):
                bad.append(name + ".scale")
        elif not torch.equal(p.view(torch.int16), stored[name].view(torch.int16)):
            bad.append(name)
    reference = transformers.AutoModelForCausalLM.from_pretrained(case["folder"] + "-reference",
                                                                  dtype=torch.bfloat16).state_dict()
    dequantized = []
    for n, p in model.named_parameters():
        local = p.to_local() if case.get("sharded") and hasattr(p, "to_local") else p
        want = reference[n].chunk(world)[rank] if case.get("sharded") else reference[n]
        if isinstance(local, Float8Tensor) and not torch.equal(local.dequantize().view(torch.int16),
                                                               want.view(torch.int16)):
            dequantized.append(n)
    with torch.no_grad():
        if case.get("sharded"):  # one column-parallel projection: this rank's output columns
            from torch.distributed.tensor import DTensor, Replicate

            proj, name = model.model.layers[0].mlp.down_proj, "model.layers.0.mlp.down_proj.weight"
            x = torch.randn(3, proj.weight.shape[1], dtype=torch.bfloat16, generator=torch.Generator().manual_seed(1))
            ours = proj(DTensor.from_local(x, proj.weight.device_mesh, [Replicate()])).to_local()
            mine = Float8Tensor(stored[name].chunk(world)[rank], proj.weight.to_local().scale.clone(),
                                block_size=proj.weight.to_local().block_size, dtype=torch.bfloat16)
            theirs = torch.nn.functional.linear(x, mine)
        else:
            tokens = torch.tensor([[1, 5, 9, 33, 2, 71]])
            ours = model(tokens).logits
            theirs = from_checkpoint(case["folder"], case["granularity"])(tokens).logits
    first = next(n for n, p in model.named_parameters() if n.endswith("q_proj.weight"))
    return {"bad": bad, "kinds": sorted(kinds), "same_output": torch.equal(ours, theirs),
            "dequantized_differ": dequantized, "sources": {k: v for k, v in report.sources.items() if first in k},
            "proven": report.proven, "content": report.content, "verified_line": _verified_line(report)}


def _verified_line(report):
    lines = [line for line in str(report).splitlines() if "verified" in line]
    return lines[0].strip() if lines else str(report).splitlines()[0]


if __name__ == "__main__":
    run_rank(run_case)
