"""One torchrun rank of test_quantized.py: each case builds transformers' own model of a quantized
checkpoint on meta, places every parameter with distribute_tensor (layouts_rank.place), calls
metaload.materialize(..., dequantize=True), and compares each local tensor bit for bit with
distribute_tensor(reference) — the reference computed by the format's own definition
(quant_checkpoints.py) — and records what the report says of each tensor.

usage: quant_rank.py CASES_JSON OUT_DIR
"""
import json
import os
import pathlib
import sys
import traceback

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh

import metaload
from layouts_rank import fitted, oracle, place, placement, same_bits

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/integration: gloo_exit
from gloo_exit import leave  # noqa: E402


def kept_module(case):
    """A module holding FP8 codes beside their block scales: transformers' own FP8Linear layers
    (replace_with_fp8_linear, as its FP8 quantizer builds a pre-quantized model) for "kept-hf",
    else one layer of the same two parameters."""
    with torch.device("meta"):
        if case["kind"] == "kept-hf-quantizer":  # transformers' FP8 quantizer builds it: FP8Linear, FP8Experts
            from transformers.quantizers import AutoHfQuantizer

            config = transformers.AutoConfig.from_pretrained(case["folder"])
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
            AutoHfQuantizer.from_config(config.quantization_config, pre_quantized=True).preprocess_model(
                model, dtype=torch.bfloat16)
            return model
        if case["kind"] == "kept-hf":
            from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

            model = transformers.AutoModelForCausalLM.from_config(
                transformers.AutoConfig.from_pretrained(case["folder"]), dtype=torch.bfloat16)
            return replace_with_fp8_linear(model, modules_to_not_convert=["lm_head"], pre_quantized=True,
                                           quantization_config=transformers.FineGrainedFP8Config(
                                               weight_block_size=(128, 128)))
        module = torch.nn.Module()
        module.proj = torch.nn.Module()
        module.proj.weight = torch.nn.Parameter(torch.empty(512, 256, dtype=torch.float8_e4m3fn), requires_grad=False)
        module.proj.weight_scale_inv = torch.nn.Parameter(torch.empty(4, 2), requires_grad=False)
        return module


def fused_experts(stored, name):
    """transformers' fused experts tensor `name` (`...experts.gate_up_proj[_scale_inv]`,
    `...experts.down_proj[_scale_inv]`) from the per-expert tensors stored: gate and up
    concatenated, the experts stacked."""
    prefix, _, fused = name.rpartition(".")
    suffix = ".weight_scale_inv" if fused.endswith("_scale_inv") else ".weight"
    parts = ["gate_proj", "up_proj"] if fused.startswith("gate_up_proj") else ["down_proj"]
    experts = sorted({int(k[len(prefix) + 1:].split(".")[0]) for k in stored if k.startswith(prefix + ".")
                      and k[len(prefix) + 1:].split(".")[0].isdigit()})
    return torch.stack([torch.cat([stored[f"{prefix}.{e}.{p}{suffix}"] for p in parts]) for e in experts])


def kept_case(case, mesh):
    """FP8 codes and their scales kept as stored, each placed alike: the local codes and scales
    must be the checkpoint's slices."""
    from layouts_rank import checkpoint_tensors

    module = kept_module(case)
    placements = [placement(p) for p in case["placements"]]
    place(module, mesh, lambda p: [fitted(x, p.ndim) for x in placements])
    report = metaload.materialize(module, checkpoint=case["folder"])
    stored, bad = checkpoint_tensors(case["folder"]), []
    for name, t in module.named_parameters():
        # FP8 compared as its bytes: distribute_tensor of the codes' uint8 view places them alike.
        want = stored[name] if name in stored else fused_experts(stored, name)
        want = want.view(torch.uint8) if want.dtype == torch.float8_e4m3fn else want
        mine = t.to_local()
        if not torch.equal(mine.view(torch.uint8) if mine.dtype == torch.float8_e4m3fn else mine, oracle(want, t)):
            bad.append(name)
    return {"bad": bad, "sources": report.sources, "proven": report.proven, "content": report.content,
            "unproven": report.content_unproven, "bytes_read": report.bytes_read}


def run_case(case, meshes, references):
    mesh = meshes.setdefault(tuple(case["mesh"]), init_device_mesh("cpu", tuple(case["mesh"])))
    if case.get("kind") in ("kept", "kept-hf", "kept-hf-quantizer"):
        return kept_case(case, mesh)
    reference = references.setdefault(case["folder"], transformers.AutoModelForCausalLM.from_pretrained(
        case["folder"] + "-reference", dtype=torch.bfloat16).state_dict())
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(case["folder"]),
                                                              dtype=torch.bfloat16)
    placements = [placement(p) for p in case["placements"]]
    place(model, mesh, lambda p: [fitted(x, p.ndim) for x in placements])
    if case.get("kind") == "dcp":  # DCP's own load through metaload's StorageReader
        import torch.distributed.checkpoint as dcp

        model.to_empty(device="cpu")
        planner = metaload.LoadPlanner()
        reader = metaload.StorageReader(case["folder"], dequantize=True)
        dcp.load(model.state_dict(), storage_reader=reader, planner=planner)
        report = reader.report
    else:
        report = metaload.materialize(model, checkpoint=case["folder"], dequantize=case.get("dequantize", True),
                                      read_threads=2)
    bad, expected_bytes = [], 0
    stored = checkpoint_shapes(case["folder"])
    for name, t in model.named_parameters():
        mine, expected = t.to_local(), oracle(reference[name].to(t.dtype), t)
        if not same_bits(mine, expected):
            bad.append(f"{name} {t.placements}: {mine.flatten()[:6].tolist()} vs {expected.flatten()[:6].tolist()}")
        # What this rank must read of an unfused FP8 model: its own codes (a byte each) and the
        # value's whole scale tensor, or its own part of any other tensor in its stored dtype.
        scale = stored.get(name + "_scale")
        if mine.numel() and name in stored:
            expected_bytes += mine.numel() * (1 if scale else stored[name]) + (scale or 0)
    return {"bad": bad, "sources": report.sources, "proven": report.proven, "content": report.content,
            "unproven": report.content_unproven, "bytes_read": report.bytes_read, "expected_bytes": expected_bytes,
            "counts": report.counts, "summary": str(report)}


def checkpoint_shapes(folder):
    """Stored name -> element bytes, and for each `*_scale`, its whole tensor's bytes."""
    from safetensors import safe_open

    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(folder, f), "pt") as h:
                for k in h.keys():
                    t = h.get_slice(k)
                    size = {"F8_E4M3": 1, "BF16": 2, "F32": 4, "U8": 1}[t.get_dtype()]
                    count = 1
                    for d in t.get_shape():
                        count *= d
                    out[k] = count * size if k.endswith("_scale") else size
    return out


def run_rank(run_case):
    """Runs every case of argv[1] on this torchrun rank (`run_case(case)`: its result, a dict) and
    writes them to argv[2]/rank{N}.json; a case that raises is recorded as its crash."""
    cases, out = json.loads(open(sys.argv[1]).read()), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results = []
    for case in cases:
        try:
            results.append({"name": case["name"], **run_case(case)})
        except Exception as e:  # the test shows it; the other cases still run
            results.append({"name": case["name"], "crash": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})
        dist.barrier()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"world": dist.get_world_size(), "results": results}, f)
    leave()


def main():
    meshes, references = {}, {}
    run_rank(lambda case: run_case(case, meshes, references))


if __name__ == "__main__":
    main()
