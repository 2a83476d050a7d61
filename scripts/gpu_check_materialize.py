"""The Python half of the GPU check (scripts/gpu-check.sh, scripts/gpu-check-device.sh), one rank:
metaload.materialize into transformers' own model on DEVICE, plain and FSDP2 (NCCL on cuda, Gloo on
cpu), each compared with from_pretrained bit for bit; then, on cuda, the GB/s of `metactl load`
(from its --report) and of both materializes against a pinned cudaMemcpy of the same bytes,
measured in the same run.

    MASTER_ADDR=... MASTER_PORT=... RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
      python scripts/gpu_check_materialize.py CHECKPOINT_DIR DEVICE METACTL_LOAD_REPORT_JSON
"""
import json, sys, time, torch, torch.distributed as dist, metaload
from transformers import AutoConfig, AutoModelForCausalLM
from torch.distributed.fsdp import fully_shard
folder, device, report_file = sys.argv[1:4]
load = json.load(open(report_file))
assert load["device"].startswith(device) and all(t["sha256"] for t in load["tensors"]), f"metactl load: {load['device']}, unfilled?"
speeds = {"metactl load": load["bytes_read"] / load["seconds"] / 1e9}
config = AutoConfig.from_pretrained(folder)
ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(device)
dist.init_process_group("nccl" if device == "cuda" else "gloo")
sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
for mode in ("plain", "fsdp"):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    if mode == "fsdp":
        for block in model.model.layers:
            fully_shard(block)
        fully_shard(model)
    sync()
    report = metaload.materialize(model, "gpucheck", checkpoint=folder, device=device)
    sync()
    full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in model.state_dict().items()}
    assert all(v.device.type == device for v in full.values()), "a tensor is not on " + device
    bad = [k for k, v in ref.state_dict().items() if not torch.equal(full[k], v)]
    speeds[f"materialize {mode}"] = report.bytes_read / report.seconds / 1e9
    print(f"{mode}: {report}; mismatches {len(bad)}", flush=True)
    assert not bad, bad[:5]
    equal = f"plain and fsdp equal from_pretrained ({len(full)} tensors on {device})"
    del model, full
if device == "cuda":
    pinned = torch.empty(load["bytes_read"], dtype=torch.uint8).pin_memory()
    dest = torch.empty_like(pinned, device="cuda")
    rounds = []
    for _ in range(3):
        torch.cuda.synchronize(); t = time.perf_counter()
        dest.copy_(pinned, non_blocking=True); torch.cuda.synchronize()
        rounds.append(time.perf_counter() - t)
    memcpy = pinned.numel() / min(rounds) / 1e9
    print(f"{equal}; pinned cudaMemcpy of {pinned.numel()} B {memcpy:.2f} GB/s; "
          + "; ".join(f"{k} {v:.2f} GB/s = {v / memcpy:.2f} x memcpy" for k, v in speeds.items()))
else:
    print(f"{equal}; " + "; ".join(f"{k} {v:.2f} GB/s" for k, v in speeds.items()) + " (no H2D on cpu)")
dist.destroy_process_group()
