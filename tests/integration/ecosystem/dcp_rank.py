"""One rank of tests/integration/ecosystem/test_storage_reader.py, run under torchrun (Gloo, CPU).

    torchrun --nproc-per-node N dcp_rank.py CASES.json OUT_DIR

Each case builds a transformers model on meta, parallelizes it (fsdp: FSDP2 fully_shard; tp:
parallelize_module Colwise/Rowwise; fsdp_tp: both on a 2-D mesh), allocates it (to_empty) and
loads it twice with dcp.load: once with torch's HuggingFaceStorageReader (the oracle) into
memory filled with 0, once with metaload.StorageReader into memory filled with 7 (a tensor
either reader leaves alone cannot match). Every local shard is compared with torch.equal, dtype
and shape too. Failure cases record the exception dcp.load raised. OUT_DIR/rank<R>.json has it all.
"""
import json
import os
import pathlib
import sys
import traceback

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, HuggingFaceStorageReader
from torch.distributed.device_mesh import init_device_mesh

import metaload

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/integration: gloo_exit
from gloo_exit import leave  # noqa: E402


def build(folder, mode, world):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = model.model.layers
    if mode in ("tp", "fsdp_tp"):
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh("cpu", (world // 2, 2) if mode == "fsdp_tp" else (world,),
                                mesh_dim_names=("dp", "tp") if mode == "fsdp_tp" else ("tp",))
        tp_mesh = mesh["tp"]
        plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel()}
        for block in layers:
            parallelize_module(block, tp_mesh, plan)
        if not config.tie_word_embeddings:  # a tied head stays one tensor with the embedding
            parallelize_module(model, tp_mesh, {"lm_head": ColwiseParallel()})
    if mode in ("fsdp", "fsdp_tp"):
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,)) if mode == "fsdp" else mesh["dp"]
        for block in layers:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    if config.tie_word_embeddings:  # to_empty allocates tied parameters apart
        model.tie_weights()
    return model


def locals_of(model, fill):
    with torch.no_grad():
        for t in model.state_dict().values():
            (t.to_local() if hasattr(t, "to_local") else t).fill_(fill)


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def compare(ref, got):
    mismatches = []
    a, b = ref.state_dict(), got.state_dict()
    if sorted(a) != sorted(b):
        return [f"keys differ: {sorted(set(a) ^ set(b))}"]
    for k in a:
        x, y = local(a[k]), local(b[k])
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
            mismatches.append(f"{k}: {x.dtype} {list(x.shape)} vs {y.dtype} {list(y.shape)}")
    return mismatches


def reader_for(c):
    if c.get("daemon"):
        return metaload.StorageReader(c.get("registered", c["model"]), daemon=c["daemon"],
                                      source=c.get("source", "auto"))
    return metaload.StorageReader(c["folder"])


def run_load(c, world):
    folder = c["folder"]
    ref = build(c.get("config_folder", folder), c["mode"], world)
    locals_of(ref, 0)
    tied = ref.config.tie_word_embeddings
    # torch's own planner names lm_head.weight missing from a tied checkpoint: it is filled
    # through the tie (one tensor), so the oracle loads partially.
    dcp.load(ref.state_dict(), storage_reader=HuggingFaceStorageReader(folder),
             planner=DefaultLoadPlanner(allow_partial_load=tied))
    got = build(c.get("config_folder", folder), c["mode"], world)
    locals_of(got, 7)
    reader = reader_for(c)
    planner = DefaultLoadPlanner() if c.get("planner") == "default" else metaload.LoadPlanner()
    dcp.load(got.state_dict(), storage_reader=reader, planner=planner)
    report = reader.report
    return {"mismatches": compare(ref, got), "tensors": len(ref.state_dict()),
            "sharded": sum(1 for t in got.state_dict().values() if hasattr(t, "to_local")),
            "verified": report.verified_tensors, "verify_model": metaload.verify(got),
            "direct_bytes": report.direct_bytes, "streamed_bytes": report.streamed_bytes,
            "sources": sorted(set(report.sources.values())), "proven": report.proven,
            "stored": report.stored_states, "content": report.content,
            "held_elements": sum(local(t).numel() for k, t in got.state_dict().items()
                                 if k != "lm_head.weight" or not tied)}


def run_failure(c, world):
    folder = c["folder"]
    model = build(folder, c["mode"], world)
    if c["failure"] == "on_meta":
        from transformers import AutoConfig, AutoModelForCausalLM

        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    state = model.state_dict()
    if c["failure"] == "missing_key":
        state["model.extra.weight"] = torch.zeros(3)
    elif c["failure"] == "shape":
        state["model.norm.weight"] = torch.zeros(65)
    elif c["failure"] == "unexpected":
        del state["model.norm.weight"]
    try:
        dcp.load(state, storage_reader=reader_for(c), planner=metaload.LoadPlanner())
    except BaseException as e:  # CheckpointException is a BaseException
        failures = getattr(e, "failures", None)
        if failures:
            rank, (inner, _) = sorted(failures.items())[0]
            out = {"raised": type(e).__name__, "inner": type(inner).__name__, "message": str(inner),
                   "ranks": sorted(failures)}
        else:
            out = {"raised": type(e).__name__, "inner": "", "message": str(e), "ranks": []}
        # Nothing was filled: verify names the model's tensors (the marks dcp.load left).
        try:
            out["verify_model"] = metaload.verify(model)
        except metaload.MetaTensorError as v:
            out["verify_error"] = str(v).splitlines()[0]
        return out
    out = {"raised": ""}
    try:
        metaload.verify(model)
    except metaload.MetaTensorError as v:
        out["verify_error"] = str(v).splitlines()[0]
    if c["failure"] == "on_meta":
        model.load_state_dict(state, assign=True)
        model.tie_weights()
        for m in model.modules():  # the non-persistent rotary buffers, as transformers computes them
            if hasattr(m, "original_inv_freq"):
                m.inv_freq, _ = m.compute_default_rope_parameters(m.config)
                m.original_inv_freq = m.inv_freq.clone()
        out["verify_after_assign"] = metaload.verify(model)
    return out


def main():
    cases = json.loads(open(sys.argv[1]).read())
    out_dir = sys.argv[2]
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    results = {}
    for c in cases:
        try:
            results[c["id"]] = run_failure(c, world) if c.get("failure") else run_load(c, world)
        except BaseException:
            results[c["id"]] = {"crash": traceback.format_exc()[-4000:]}
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(results, f)
    leave()


if __name__ == "__main__":
    main()
