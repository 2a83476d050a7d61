#!/usr/bin/env bash
# scripts/gpu-check.sh's checks on a GPU machine that cannot build: no network, no gRPC, protobuf,
# Abseil or yaml-cpp, only a Python environment with torch. It runs the binaries, libmetaload.so and
# the Python extension prebuilt into .devicepkg/ (built elsewhere against the same torch, with those
# libraries bundled: scripts/device-package.sh makes it) and takes LibTorch, the CUDA runtime and NCCL from
# that environment's torch, so that each process holds the one LibTorch the machine has.
#   1. `metactl load --device cuda` of a synthetic 1.65 GiB Llama-shaped checkpoint, verified over
#      NCCL (world 1),
#   2. metaload.materialize on cuda, plain and FSDP2 (NCCL, world 1), against from_pretrained,
#   3. H2D GB/s of both loads against a pinned cudaMemcpy of the same bytes, in the same run,
#   4. the peers on the same checkpoint (scripts/gpu_check_peers.py: the Run:ai Model Streamer,
#      fastsafetensors, InstantTensor, each bit for bit, timed against materialize in the same run).
#      Their packages are not in a torch-only environment and the machine has no network: carry them
#      in .devicepkg/peers (GPU_CHECK_PEERS_PATH), made on the build machine for the device's Python:
#        pip install --target .devicepkg/peers --python-version 3.12 --only-binary=:all: --no-deps \
#          runai-model-streamer==0.17.1 humanize fastsafetensors==0.5.0 instanttensor==0.2.2
# Prints one line per check; exits non-zero at the first failure, with the tail of its log.
# Usage: scripts/gpu-check-device.sh    from the checkout with .devicepkg/ beside scripts/
# GPU_CHECK_DEVICE=cpu: the same on the CPU over Gloo (the dry run; no H2D, InstantTensor reported as
# CUDA only). GPU_CHECK_PYTHON: the interpreter with torch (python3). GPU_CHECK_LAYERS: 16.
# GPU_CHECK_PEERS_PATH: the peers' packages (.devicepkg/peers). OUT: a folder that keeps the logs.
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=$(pwd)/.devicepkg
device=${GPU_CHECK_DEVICE:-cuda}
layers=${GPU_CHECK_LAYERS:-16}
py=${GPU_CHECK_PYTHON:-python3}
work=$(mktemp -d)
logs=${OUT:-$work}
mkdir -p "$logs"
daemon_pid=""
cleanup() { [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# check NAME COMMAND...: the command's output goes to $logs/NAME.log; its last line is the verdict.
check() {
  local name=$1 rc=0 start=$SECONDS
  shift
  "$@" > "$logs/$name.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL $name (exit $rc, $((SECONDS - start)) s); the end of ${OUT:+$OUT/}$name.log:"
    tail -25 "$logs/$name.log" | sed 's/^/    /'
    exit 1
  fi
  echo "ok   $name ($((SECONDS - start)) s): $(tail -1 "$logs/$name.log")"
}

# The package links LibTorch's C++ ABI of one version: another torch would fail later and worse.
torch_facts() {
  "$py" - "$device" "$(cat "$pkg/torch.txt")" "$work/torch_dir" <<'PY'
import os, sys, torch
device, built, dir_file = sys.argv[1:4]
base = torch.__version__.split("+")[0]
assert base == built, f"torch {torch.__version__} here, .devicepkg was built against {built}"
assert device == "cpu" or torch.cuda.is_available(), "torch sees no CUDA device"
open(dir_file, "w").write(os.path.dirname(torch.__file__))
gpu = f"{torch.cuda.get_device_name(0)}, NCCL {torch.cuda.nccl.version()}" if device != "cpu" else "CPU only"
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) at {os.path.dirname(torch.__file__)}; {gpu}")
PY
}
check torch torch_facts
torch_dir=$(cat "$work/torch_dir")
# metactl-load and metad find LibTorch, libcudart and libnccl (no RUNPATH names this machine).
nvidia=$(ls -d "$torch_dir"/../nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$torch_dir/lib:$nvidia${LD_LIBRARY_PATH:-}"
# A library the package should have bundled, named before anything runs.
libs() {
  local missing
  missing=$(for f in "$pkg"/bin/* "$pkg"/lib/*.so* "$pkg"/python/metaload/*.so; do ldd "$f" | sed -n "s|^\s*\(.*not found\)|$f: \1|p"; done)
  [ -z "$missing" ] || { echo "$missing"; return 1; }
  echo "every library of $(ls "$pkg"/bin/* "$pkg"/lib/*.so* "$pkg"/python/metaload/*.so | wc -l) files resolves"
}
check libs libs
[ "$device" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$logs/nvidia-smi.log" 2>&1 || true

check synth "$pkg/bin/metactl" synth "$work/ckpt" --layers "$layers" --hidden 2048 --heads 16 --kv-heads 8 \
  --intermediate 5632 --vocab 32000
printf 'node: gpu\nlisten: 127.0.0.1:0\ngpus: 1\ngpu_memory: 80GiB\nroots: [%s]\n' "$work" > "$work/node.yaml"
"$pkg/bin/metad" --node-config "$work/node.yaml" > "$logs/metad.out" 2> "$logs/metad.log" &
daemon_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$logs/metad.out" && break; sleep 0.1; done
address=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$logs/metad.out")
check metad sh -c 'grep "listening on" "$1" || { cat "$2"; exit 1; }' _ "$logs/metad.out" "$logs/metad.log"
check register "$pkg/bin/metactl" register gpucheck --checkpoint "$work/ckpt" --daemon "$address"

check "load-$device" env MASTER_ADDR=127.0.0.1 MASTER_PORT=29531 "$pkg/bin/metactl" load gpucheck \
  --daemon "$address" --rank 0 --world 1 --device "$device" --report "$logs/report.json"

# As gpu-check.sh step 3, then both loads' GB/s against a pinned memcpy of the bytes they read.
check "materialize-$device" env PYTHONPATH="$pkg/python" MASTER_ADDR=127.0.0.1 MASTER_PORT=29532 RANK=0 \
  WORLD_SIZE=1 LOCAL_RANK=0 "$py" "$(dirname "$0")/gpu_check_materialize.py" "$work/ckpt" "$device" \
  "$logs/report.json"
# Last, so that a peer missing from this environment fails after metaload's own checks have passed.
peers=${GPU_CHECK_PEERS_PATH:-$pkg/peers}
[ -d "$peers" ] || peers=""
check "peers-$device" env PYTHONPATH="$pkg/python${peers:+:$peers}" "$py" "$(dirname "$0")/gpu_check_peers.py" \
  "$work/ckpt" "$device"
echo "gpu-check-device: all passed on $device${OUT:+ (logs in $OUT)}"
