"""One rank of tests/integration/python/test_python_materialize.py, run under torchrun (Gloo, CPU).

    torchrun --nproc-per-node N materialize_rank.py CASES.json OUT_DIR

Each case builds a model on meta the way training scripts do, parallelizes it (none, FSDP2,
tensor parallel, FSDP2 x TP), calls metaload.materialize, and compares with transformers'
own from_pretrained: every local shard against torch's own sharding of the reference tensor
(distribute_tensor), full tensors, the bytes read, and logits of a fixed batch. What it saw
goes to OUT_DIR/rank<R>.json; the pytest side asserts on it.
"""
import json
import os
import pathlib
import sys
import traceback

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor

import metaload

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/integration: gloo_exit
from gloo_exit import leave  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def build_on_meta(folder, dtype, extra_head=False):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        if extra_head:
            model.value_head = torch.nn.Linear(config.hidden_size, 1)
    return model


def decoder_layers(model):
    base = getattr(model, model.base_model_prefix)
    return base.layers if hasattr(base, "layers") else base.h


def parallelize(model, mode, world):
    if mode == "plain":
        return None
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for block in decoder_layers(model):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if mode == "tp":
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
        tp_mesh = mesh
    else:  # dp_tp: FSDP over dp x TP over tp
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
        tp_mesh = mesh["tp"]
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel()}
    for block in decoder_layers(model):
        parallelize_module(block, tp_mesh, plan)
    if mode == "dp_tp":
        from torch.distributed.fsdp import fully_shard

        for block in decoder_layers(model):
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return mesh


def stored_element_bytes(folder):
    from safetensors import safe_open

    sizes = {}
    index = os.path.join(folder, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    for f in files:
        with safe_open(os.path.join(folder, f), "pt") as h:
            for k in h.keys():
                sizes[k] = h.get_slice(k).get_dtype()
    return {k: {"BF16": 2, "F16": 2, "F32": 4, "F64": 8}[v] for k, v in sizes.items()}


def compare(model, ref, report, folder):
    """Mismatching names, and the bytes this rank should have read."""
    ref_sd = ref.state_dict()
    bad, expected_bytes, seen = [], 0, set()
    element = stored_element_bytes(folder)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        want = ref_sd.get(name, dict(ref.named_buffers()).get(name))
        if want is None:
            bad.append(f"{name}: not in from_pretrained's model")
            continue
        if isinstance(t, DTensor):
            mine = t.to_local()
            oracle = distribute_tensor(want.to(t.dtype), t.device_mesh, t.placements).to_local()
            if not torch.equal(t.full_tensor(), want.to(t.dtype)):
                bad.append(f"{name}: full_tensor() differs")
        else:
            mine, oracle = t, want.to(t.dtype)
        if mine.shape != oracle.shape or not torch.equal(mine, oracle):
            bad.append(f"{name}: local {tuple(mine.shape)} differs from the reference's {tuple(oracle.shape)}")
        source = report.sources.get(name, "")
        if id(t) not in seen and (source.startswith("direct") or source.startswith("stream")):
            stored_name = source.split("(as ")[-1].rstrip(")") if "(as " in source else name
            # A fused tensor (Mixtral's experts) is read from several stored ones of one dtype.
            expected_bytes += mine.numel() * element.get(stored_name, element[next(iter(element))])
        seen.add(id(t))
    return bad, expected_bytes


class DTensorOps:
    """The aten ops dispatched on DTensors while active (a dispatch mode sees each op, DTensor's
    own too, before the tensor subclass handles it)."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        seen = self.seen = set()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if any(issubclass(t, DTensor) for t in types):
                    seen.add(str(func))
                return func(*args, **(kwargs or {}))

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)


def run_case(case, rank, world):
    dtype = DTYPES[case.get("dtype", "float32")]
    from transformers import AutoModelForCausalLM

    model = build_on_meta(case["folder"], dtype, case.get("extra_head", False))
    parallelize(model, case["mode"], world)
    kwargs = {k: case[k] for k in ("daemon", "checkpoint", "source", "init_missing") if k in case}
    out = {"name": case["id"]}
    try:
        if case.get("dtensor_ops"):
            with DTensorOps() as ops:
                report = metaload.materialize(model, case["model"], **kwargs)
            out["dtensor_ops"] = sorted(ops.seen)
        else:
            report = metaload.materialize(model, case["model"], **kwargs)
    except metaload.Error as e:
        out.update(error=type(e).__name__, message=str(e),
                   findings=[list(f) for f in getattr(e, "findings", [])])
        return out
    out.update(sources=report.sources, bytes_read=report.bytes_read, streamed=report.streamed_bytes,
               verified=report.verified_tensors, ties=report.ties, report=str(report))
    if case.get("leave_on_meta_rank") is not None:
        if rank == case["leave_on_meta_rank"]:
            block = decoder_layers(model)[0]
            block.mlp.up_proj.weight = torch.nn.Parameter(torch.empty(block.mlp.up_proj.weight.shape, device="meta"))
        try:
            metaload.verify(model)
            out["verify"] = "passed"
        except metaload.MetaTensorError as e:
            out.update(verify="raised", message=str(e), findings=[list(f) for f in e.findings])
        return out
    if case.get("extra_head"):
        out["value_head_zero"] = bool((model.value_head.weight.full_tensor() if isinstance(
            model.value_head.weight, DTensor) else model.value_head.weight).eq(0).all())
        return out
    ref = AutoModelForCausalLM.from_pretrained(case["folder"], dtype=dtype)
    bad, expected = compare(model, ref, report, case["folder"])
    out.update(mismatches=bad, expected_bytes=expected)
    out["requires_grad"] = all(p.requires_grad for p in model.parameters())
    tied = getattr(model.config, "tie_word_embeddings", False)
    if tied:
        out["tied_one_object"] = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    out["logits_equal"], out["logits_max_diff"] = compare_outputs(model, ref)
    return out


def compare_outputs(model, ref):
    """Whether `model` gives the reference's output (logits, or a base model's hidden states) on
    a fixed batch, and the largest difference."""
    torch.manual_seed(0)
    batch = torch.randint(0, model.config.vocab_size, (2, 12))
    model.eval()  # from_pretrained returns a model in eval mode; from_config does not (dropout)
    ref.eval()
    with torch.no_grad():
        mine, want = model(batch), ref(batch)
    mine, want = (mine.logits, want.logits) if hasattr(want, "logits") else (mine[0], want[0])
    if isinstance(mine, DTensor):
        mine = mine.full_tensor()
    return bool(torch.equal(mine, want)), float((mine.float() - want.float()).abs().max())


def main(run=run_case):
    """Runs each case of argv[1] with `run(case, rank, world)`; writes argv[2]/rank<R>.json."""
    cases, out_dir = json.load(open(sys.argv[1])), sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = []
    for case in cases:
        try:
            results.append(run(case, rank, world))
        except Exception:
            results.append({"name": case["id"], "crash": traceback.format_exc()})
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f, indent=1)
    leave()


if __name__ == "__main__":
    main()
