#!/usr/bin/env bash
# The CUDA path on a machine with a GPU, in one run that fits a short device lease:
#   1. build (scripts/setup.sh build),
#   2. `metactl load --device cuda` of a synthetic ~1 GiB Llama-shaped checkpoint, verified over
#      NCCL (world 1: one GPU cannot hold two NCCL ranks),
#   3. metaload.materialize on cuda: plain and FSDP2 (NCCL, world 1) against from_pretrained,
#   4. H2D GB/s of that load against a pinned cudaMemcpy (torch .to("cuda", non_blocking)) of the
#      same bytes, measured in the same run.
# Prints one line per check and exits non-zero at the first failure. Usage: scripts/gpu-check.sh
# GPU_CHECK_DEVICE=cpu GPU_CHECK_LAYERS=2 runs the same steps on the CPU over Gloo (a dry run of
# this script where no GPU is lent; the H2D comparison is skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
device=${GPU_CHECK_DEVICE:-cuda}
layers=${GPU_CHECK_LAYERS:-16}
work=$(mktemp -d)
daemon_pid=""
cleanup() { [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

bash scripts/setup.sh build > "$work/build.log" || { tail -30 "$work/build.log"; exit 1; }
[ "$device" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
py="$root/.venv/bin/python"

build/client/metactl synth "$work/ckpt" --layers "$layers" --hidden 2048 --heads 16 --kv-heads 8 \
  --intermediate 5632 --vocab 32000
printf 'node: gpu\nlisten: 127.0.0.1:0\ngpus: 1\ngpu_memory: 80GiB\nroots: [%s]\n' "$work" > "$work/node.yaml"
build/daemon/metad --node-config "$work/node.yaml" > "$work/metad.out" 2> "$work/metad.log" &
daemon_pid=$!
for _ in $(seq 50); do grep -q "listening on" "$work/metad.out" && break; sleep 0.1; done
address=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$work/metad.out")
build/client/metactl register gpucheck --checkpoint "$work/ckpt" --daemon "$address"

echo "== metactl load on $device, verified (NCCL on cuda, Gloo on cpu)"
MASTER_ADDR=127.0.0.1 MASTER_PORT=29531 build/client/metactl load gpucheck --daemon "$address" \
  --rank 0 --world 1 --device "$device" --report "$work/report.json"

echo "== materialize on $device (plain, FSDP2) against from_pretrained; H2D against pinned memcpy"
MASTER_ADDR=127.0.0.1 MASTER_PORT=29532 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 "$py" - "$work/ckpt" "$device" <<'PY'
import sys, time, torch, torch.distributed as dist, metaload
from transformers import AutoConfig, AutoModelForCausalLM
from torch.distributed.fsdp import fully_shard
folder, device = sys.argv[1], sys.argv[2]
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
    bad = [k for k, v in ref.state_dict().items() if not torch.equal(full[k], v)]
    gbps = report.bytes_read / report.seconds / 1e9
    print(f"{mode}: {report}; mismatches {len(bad)}; {gbps:.2f} GB/s", flush=True)
    assert not bad, bad[:5]
if device == "cpu":
    sys.exit(0)
pinned = torch.empty(report.bytes_read, dtype=torch.uint8).pin_memory()
dest = torch.empty_like(pinned, device="cuda")
rounds = []
for _ in range(3):
    torch.cuda.synchronize(); t = time.perf_counter()
    dest.copy_(pinned, non_blocking=True); torch.cuda.synchronize()
    rounds.append(time.perf_counter() - t)
memcpy = pinned.numel() / min(rounds) / 1e9
print(f"pinned cudaMemcpy: {memcpy:.2f} GB/s; materialize/memcpy = {gbps / memcpy:.2f}")
dist.destroy_process_group()
PY
echo "gpu-check: all passed on $device"
