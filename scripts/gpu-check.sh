#!/usr/bin/env bash
# The CUDA path on a machine with a GPU, in one run that fits a short device lease:
#   1. build (scripts/setup.sh build),
#   2. `metactl load --device cuda` of a synthetic ~1 GiB Llama-shaped checkpoint, verified over
#      NCCL (world 1: one GPU cannot hold two NCCL ranks),
#   3. metaload.materialize on cuda: plain and FSDP2 (NCCL, world 1) against from_pretrained,
#   4. H2D GB/s of that load against a pinned cudaMemcpy (torch .to("cuda", non_blocking)) of the
#      same bytes, measured in the same run,
#   5. the peers on the same checkpoint and GPU (scripts/gpu_check_peers.py): the Run:ai Model
#      Streamer, fastsafetensors and InstantTensor, each bit for bit against the files, timed
#      against metaload.materialize in the same run (their packages: scripts/requirements.txt).
# Prints one line per check and exits non-zero at the first failure. Usage: scripts/gpu-check.sh
# GPU_CHECK_DEVICE=cpu GPU_CHECK_LAYERS=2 runs the same steps on the CPU over Gloo (a dry run of
# this script where no GPU is lent; the H2D comparison is skipped, InstantTensor reported as CUDA only).
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
PYTHONPATH="$root/build/python" MASTER_ADDR=127.0.0.1 MASTER_PORT=29532 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
  "$py" scripts/gpu_check_materialize.py "$work/ckpt" "$device" "$work/report.json"

echo "== the peers on $device (Run:ai Model Streamer, fastsafetensors, InstantTensor) against materialize"
PYTHONPATH="$root/build/python" "$py" scripts/gpu_check_peers.py "$work/ckpt" "$device"
echo "gpu-check: all passed on $device"
