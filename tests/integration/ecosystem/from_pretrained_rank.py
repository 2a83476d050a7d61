"""One rank of test_from_pretrained.py: for each case, the model transformers' own
from_pretrained(distributed_config=...) loads, and the one metaload.from_pretrained loads, on this
rank; writes what differs (nothing, when it passes) to OUT/rank<R>.json.

    torchrun --nproc-per-node 4 from_pretrained_rank.py CASES.json OUT
"""
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM
from transformers.distributed import DistributedConfig

import metaload


def local(t):
    return t.to_local() if isinstance(t, DTensor) else t


def differences(ref, ours):
    """Every way `ours` is not `ref`: names, kinds (DTensor or not), placements, dtypes, local
    values bit for bit, and which names share one tensor object."""
    out = []
    ref_sd, our_sd = ref.state_dict(keep_vars=True), ours.state_dict(keep_vars=True)
    if ref_sd.keys() != our_sd.keys():
        out.append(f"names: only transformers {sorted(ref_sd.keys() - our_sd.keys())}, "
                   f"only metaload {sorted(our_sd.keys() - ref_sd.keys())}")
    for name in sorted(ref_sd.keys() & our_sd.keys()):
        a, b = ref_sd[name], our_sd[name]
        if isinstance(a, DTensor) != isinstance(b, DTensor):
            out.append(f"{name}: DTensor {isinstance(a, DTensor)} vs {isinstance(b, DTensor)}")
            continue
        if isinstance(a, DTensor) and (a.placements != b.placements or a.device_mesh.shape != b.device_mesh.shape):
            out.append(f"{name}: placements {a.placements} vs {b.placements}")
        la, lb = local(a), local(b)
        if la.dtype != lb.dtype or la.shape != lb.shape or la.device != lb.device:
            out.append(f"{name}: {la.dtype} {tuple(la.shape)} {la.device} vs {lb.dtype} {tuple(lb.shape)} {lb.device}")
        elif not torch.equal(la, lb):
            out.append(f"{name}: values differ")
        if type(a) is not type(b) or a.requires_grad != b.requires_grad:
            out.append(f"{name}: {type(a).__name__} requires_grad={a.requires_grad} vs "
                       f"{type(b).__name__} requires_grad={b.requires_grad}")

    def shared(model):
        by_id = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(p), []).append(name)
        return sorted(sorted(names) for names in by_id.values() if len(names) > 1)

    if shared(ref) != shared(ours):
        out.append(f"tied: {shared(ref)} vs {shared(ours)}")
    if ours.training != ref.training:
        out.append(f"training {ref.training} vs {ours.training}")
    return out


def run(case):
    config = DistributedConfig(**case["distributed_config"])
    if case.get("refused"):  # a load metaload must refuse: this rank's error, nothing to compare
        try:
            metaload.from_pretrained(case["folder"], distributed_config=config)
        except metaload.MetaTensorError as e:
            return {"refused": str(e), "findings": [list(f) for f in e.findings]}
        return {"refused": None}
    reference = AutoModelForCausalLM.from_pretrained(case["folder"], distributed_config=config)
    model, info = metaload.from_pretrained(case.get("name", case["folder"]), daemon=case.get("daemon"),
                                           distributed_config=DistributedConfig(**case["distributed_config"]),
                                           source=case.get("source", "auto"), output_loading_info=True)
    if case.get("perturb"):  # the control: a comparison that cannot fail proves nothing
        with torch.no_grad():
            local(model.model.embed_tokens.weight).view(-1)[0] += 1
    diffs = differences(reference, model)
    tokens = torch.arange(12).reshape(2, 6) % 50
    with torch.no_grad():
        want, got = reference(tokens).logits, model(tokens).logits
    if not torch.equal(local(want), local(got)):
        diffs.append("logits differ")
    report = info["metaload"]
    return {"diffs": diffs, "bytes_read": report.bytes_read, "streamed": report.streamed_bytes,
            "fanout_received": report.fanout_received_bytes, "counts": dict(report.counts),
            "class": type(model).__name__, "report_is_attached": model.metaload_report is report}


def main():
    cases, out = json.loads(open(sys.argv[1]).read()), sys.argv[2]
    results = {}
    for case in cases:
        try:
            results[case["id"]] = run(case)
        except Exception:  # the test reads the traceback per case, every rank's
            results[case["id"]] = {"crash": traceback.format_exc()[-4000:]}
    rank = int(os.environ["RANK"])
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "results": results}, f)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
