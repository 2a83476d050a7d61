"""One rank of tests/integration/python/test_hf_names.py, run under torchrun (Gloo, CPU).

    torchrun --nproc-per-node N names_rank.py CASES.json OUT_DIR

Each case builds a transformers model on meta (a ...ForCausalLM, a base AutoModel, or one
wrapped in the user's own module), shards it with FSDP2 or not, calls metaload.materialize on a
checkpoint whose names transformers maps (fused MoE experts, base_model_prefix), and compares
with the same class's from_pretrained: every local shard against torch's own sharding of the
reference tensor (materialize_rank.compare), the bytes read, and the model's output on a fixed
batch, bit for bit. What it saw goes to OUT_DIR/rank<R>.json; the pytest side asserts on it.
"""
import torch
from torch.distributed.device_mesh import init_device_mesh

import metaload
from materialize_rank import DTYPES, compare, compare_outputs, main


class Wrapper(torch.nn.Module):
    """A user's module around a transformers model: its names are lm.<the model's>."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm


def auto_class(build):
    from transformers import AutoModel, AutoModelForCausalLM

    return AutoModel if build == "base" else AutoModelForCausalLM


def build_on_meta(case, dtype):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(case["folder"], **case.get("config", {}))
    with torch.device("meta"):
        model = auto_class(case["build"]).from_config(config, dtype=dtype)
    return Wrapper(model) if case.get("wrapped") else model


def shard(model, mode, world):
    if mode == "plain":
        return
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    inner = model.lm if isinstance(model, Wrapper) else model
    base = inner if hasattr(inner, "layers") else inner.model
    for block in base.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def run_case(case, rank, world):
    dtype = DTYPES[case.get("dtype", "float32")]
    model = build_on_meta(case, dtype)
    shard(model, case["mode"], world)
    out = {"name": case["id"]}
    try:
        report = metaload.materialize(model, case["model"], checkpoint=case["folder"],
                                      key_mapping=case.get("key_mapping"))
    except metaload.Error as e:
        out.update(error=type(e).__name__, message=str(e))
        return out
    out.update(sources=report.sources, bytes_read=report.bytes_read, verified=report.verified_tensors,
               name_rules=report.name_rules, report=str(report))
    ref = auto_class(case["build"]).from_pretrained(case["folder"], dtype=dtype)
    if case.get("wrapped"):  # loaded through key_mapping: compare what it wraps
        model, report.sources = model.lm, {k[len("lm."):]: v for k, v in report.sources.items()}
    bad, expected = compare(model, ref, report, case["folder"])
    out.update(mismatches=bad, expected_bytes=expected)
    out["output_equal"], out["output_max_diff"] = compare_outputs(model, ref)
    return out


if __name__ == "__main__":
    main(run_case)
