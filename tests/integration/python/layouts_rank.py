"""One rank of tests/integration/python/test_python_layouts.py, run under torchrun (Gloo, CPU).

    torchrun --nproc-per-node 4 layouts_rank.py CASES.json OUT_DIR

Each case builds a module on meta, places every parameter with DTensor's own distribute_tensor
on a mesh (1-D, 2-D, 3-D) by the case's placements (Replicate, Shard, _StridedShard, Partial),
calls metaload.materialize, and compares with torch: each local tensor bit for bit against
distribute_tensor(reference, mesh, placements).to_local(), full_tensor() bit for bit against
the checkpoint's tensor, and the bytes read against the bytes the rank holds. A Partial(sum)
is held, by its reduction's definition, as the value on the rank at coordinate 0 of that mesh
dimension and the identity elsewhere (distribute_tensor's own partition, value/n on every rank,
is not exact: it is the oracle only for the Replicate view). What it saw goes to
OUT_DIR/rank<R>.json; the pytest side asserts on it.
"""
import json
import os
import pathlib
import sys
import traceback

import torch
import torch.distributed as dist
from safetensors import safe_open
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _MaskPartial, _StridedShard

import metaload

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/integration: gloo_exit
from gloo_exit import leave  # noqa: E402

ELEMENT_BYTES = {torch.float32: 4, torch.bfloat16: 2}


def placement(text):
    """"R", "S0", "SS1/3" (_StridedShard(1, split_factor=3)), "Psum", "Pproduct", "Pmask"."""
    if text == "R":
        return Replicate()
    if text.startswith("SS"):
        dim, factor = text[2:].split("/")
        return _StridedShard(int(dim), split_factor=int(factor))
    if text.startswith("S"):
        return Shard(int(text[1:]))
    if text == "Pmask":  # a Partial(sum) with semantics of its own (embedding masks)
        return _MaskPartial("sum")
    return Partial(text[1:])


def checkpoint_tensors(folder):
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(folder, f), "pt") as h:
                out.update({k: h.get_tensor(k) for k in h.keys()})
    return out


def place(module, mesh, placements_of):
    """Every parameter of `module` (on meta) as a DTensor placed as distribute_tensor places it."""
    for _, sub in list(module.named_modules()):
        for attr, p in list(sub._parameters.items()):
            if p is None:
                continue
            placements = placements_of(p)
            if any(isinstance(x, Partial) and x.reduce_op not in ("sum", "avg", "min", "max") or
                   type(x) is _MaskPartial for x in placements):
                # distribute_tensor cannot partition these, nor nn.Parameter detach them (a
                # redistribution): the local tensor as a DTensor, held as the module's tensor.
                local_shape, _ = compute_local_shape_and_global_offset(p.shape, mesh, placements)
                local = torch.empty(local_shape, dtype=p.dtype, device="meta")
                sub._parameters[attr] = DTensor.from_local(local, mesh, placements, run_check=False, shape=p.shape,
                                                           stride=p.stride())
                continue
            d = distribute_tensor(p, mesh, placements, src_data_rank=None)
            sub.register_parameter(attr, torch.nn.Parameter(d, requires_grad=p.requires_grad))


def same_bits(a, b):
    """Equal bit for bit (torch.equal takes -0.0 for 0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    as_int = torch.int16 if a.element_size() == 2 else torch.int32
    return torch.equal(a.reshape(-1).view(as_int), b.reshape(-1).view(as_int))


def oracle(want, t):
    """What this rank must hold of `want` placed as `t` is."""
    placements = list(t.placements)
    sums = [i for i, p in enumerate(placements) if type(p) is Partial and p.reduce_op == "sum"]
    for i in sums:
        placements[i] = Replicate()
    local = distribute_tensor(want, t.device_mesh, placements, src_data_rank=None).to_local()
    coordinate = t.device_mesh.get_coordinate()
    if any(coordinate[i] != 0 for i in sums):
        return torch.full_like(local, -0.0)
    return local


def compare(model, reference, report, full_tensor):
    """Mismatching names, and the bytes this rank holds of the checkpoint."""
    bad, holds_bytes = [], 0
    for name, t in model.named_parameters():
        want = reference[name].detach()
        if not isinstance(t, DTensor):
            bad.append(f"{name}: not a DTensor")
            continue
        mine, expected = t.to_local(), oracle(want.to(t.dtype), t)
        if not same_bits(mine, expected):
            bad.append(f"{name} {t.placements}: local {tuple(mine.shape)} differs from torch's "
                       f"{tuple(expected.shape)}: {mine.flatten()[:8].tolist()} vs {expected.flatten()[:8].tolist()}")
        if full_tensor and not same_bits(t.full_tensor(), want.to(t.dtype)):
            bad.append(f"{name} {t.placements}: full_tensor() differs from the checkpoint's")
        if report.sources.get(name, "").startswith("direct"):
            holds_bytes += mine.numel() * ELEMENT_BYTES[t.dtype]
    return bad, holds_bytes


class Sweep(torch.nn.Module):
    """The sweep's tensors: uneven row counts (1002 over 4: 251, 251, 251, 249; 5 over 4: 2, 2,
    1, 0: one shard empty) and column counts (6, 5, 3 over 4: 3 leaves one empty), two dtypes."""

    def __init__(self, shapes):
        super().__init__()
        for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            holder = torch.nn.Module()
            for name, shape in shapes.items():
                holder.register_parameter(name, torch.nn.Parameter(torch.empty(shape, dtype=dtype)))
            self.add_module(dtype_name, holder)


def fitted(p, ndim):
    """A placement on dimension 1 of a 1-D tensor (a norm's weight) is placed on dimension 0."""
    if type(p) is _StridedShard and p.dim >= ndim:
        return _StridedShard(0, split_factor=p.split_factor)
    if type(p) is Shard and p.dim >= ndim:
        return Shard(0)
    return p


def reference_tensors(case):
    """The checkpoint's tensors by module name: as stored (the sweep), or as transformers'
    from_pretrained builds them (Mixtral stores each expert apart; the module fuses them)."""
    if case["kind"] == "sweep":
        return checkpoint_tensors(case["folder"])
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(case["folder"], dtype=torch.float32)
    return dict(model.named_parameters())


def build(case):
    if case["kind"] == "sweep":
        with torch.device("meta"):
            return Sweep({k: tuple(v) for k, v in case["shapes"].items()})
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(case["folder"])
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def run_case(case, meshes):
    mesh = meshes[tuple(case["mesh"])]
    placements = [placement(p) for p in case["placements"]]
    model = build(case)
    place(model, mesh, lambda p: [fitted(x, p.dim()) for x in placements])
    out = {"name": case["id"]}
    try:
        report = metaload.materialize(model, case["id"], checkpoint=case["folder"])
    except metaload.Error as e:
        out.update(error=type(e).__name__, message=str(e),
                   still_meta=all(p.to_local().is_meta for p in model.parameters()))
        return out
    reference = reference_tensors(case)
    bad, holds = compare(model, reference, report, case.get("full_tensor", True))
    out.update(mismatches=bad, bytes_read=report.bytes_read, received=report.fanout_received_bytes,
               notes=report.fanout_notes, holds_bytes=holds, sources=report.sources,
               boxes={k: [list(map(list, b)) for b in v] for k, v in getattr(report, "boxes", {}).items()},
               slices={k: list(map(list, v)) for k, v in report.slices.items()}, verified=report.verified_tensors,
               counts=report.counts)
    return out


def main():
    cases, out_dir = json.load(open(sys.argv[1])), sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    meshes = {}
    for case in cases:
        shape = tuple(case["mesh"])
        if shape not in meshes:
            meshes[shape] = init_device_mesh("cpu", shape)
    results = []
    for case in cases:
        if rank == 0:  # which case a crash (a collective torch mismatched) happened in
            print(f"case {case['id']}", file=sys.stderr, flush=True)
        try:
            results.append(run_case(case, meshes))
        except Exception:
            results.append({"name": case["id"], "crash": traceback.format_exc()})
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"world": world, "results": results}, f, indent=1)
    leave()


if __name__ == "__main__":
    main()
