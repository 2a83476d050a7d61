#!/usr/bin/env bash
# The metaload demo: two metad nodes on loopback, four CPU ranks, one sharded checkpoint.
#
#   node-a (coordinator) can read the checkpoint: its ranks 0 and 1 read their shards directly.
#   node-b cannot: its ranks 2 and 3 stream their byte ranges from node-a over gRPC. (On this one
#   machine every process could open the files, and a rank reads directly whatever it can open;
#   so node-b's ranks run with the checkpoint folder hidden under an empty tmpfs in a private
#   mount namespace, as root, or with --source stream otherwise.)
# Then one Gloo all-reduce proves that no rank holds a tensor on meta or unfilled. Later steps:
# tensor parallel, FSDP2 inside torchrun, and a daemon killed mid-stream (the rank fails over).
#
# Run through `scripts/setup.sh demo` (which builds first). Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build
metactl="$bin/client/metactl"
metad="$bin/daemon/metad"
metad_faulty="$bin/tests/metad_faulty"  # metad with the test faults (tests/faults/): step 8's kill
work="$bin/demo"
layers=${DEMO_LAYERS:-12}

# pids + cleanup on exit, say, start_daemon.
source scripts/demo-lib.sh

mkdir -p "$work/storage-a" "$work/storage-b"
ckpt="$work/storage-a/llama-demo-${layers}L"
say "1. a Llama-shaped checkpoint ($layers layers, hidden 1024, bf16, sharded safetensors)"
if [ ! -f "$ckpt/model.safetensors.index.json" ]; then
  "$metactl" synth "$ckpt" --layers "$layers" --hidden 1024 --intermediate 2816 --heads 16 --kv-heads 4 \
    --vocab 32000 --dtype bf16 --shard-size 100MB
else
  echo "reusing $ckpt"
fi
ls -l "$ckpt" | tail -n +2 | awk '{printf "  %10d  %s\n", $5, $9}'

say "2. two metad nodes on loopback"
cat >"$work/node-a.yaml" <<YAML
node: node-a
listen: 127.0.0.1:0
gpus: 2
gpu_memory: 512MiB
roots: [$(pwd)/$work/storage-a]
member_timeout: 5s
YAML
start_daemon node-a "$work/node-a.yaml"; addr_a=$address
cat >"$work/node-b.yaml" <<YAML
node: node-b
listen: 127.0.0.1:0
coordinator: $addr_a
gpus: 2
gpu_memory: 512MiB
roots: [$(pwd)/$work/storage-b]
YAML
start_daemon node-b "$work/node-b.yaml"; addr_b=$address
for _ in $(seq 100); do "$metactl" status --daemon "$addr_a" | grep "node-b " > /dev/null && break; sleep 0.1; done

say "3. register the checkpoint with node-a (headers only; the skeleton becomes meta tensors)"
"$metactl" register llama-demo --checkpoint "$ckpt" --daemon "$addr_a"

say "4. the plan the coordinator gives the ranks: layers strategy, 4 ranks on 2 nodes x 2 GPUs of 512 MiB"
"$metactl" plan llama-demo --daemon "$addr_a" --gpus 4

# node-b's view of this machine: without the checkpoint folder.
if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
  as_node_b=(unshare --mount --propagation private sh -c 'mount -t tmpfs node-b "$1" && shift && exec "$@"' \
    node-b "$(pwd)/$work/storage-a")
  node_b_source=()
else
  as_node_b=()
  node_b_source=(--source stream)
fi

# Four rank processes (ranks 0,1 ask node-a, ranks 2,3 node-b), then the verdict of their
# one all-reduce. Arguments go to every `metactl load`.
run_ranks() {
  local port failed=0 rank_pids=() prefix extra
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  for rank in 0 1 2 3; do
    daemon=$addr_a prefix=() extra=()
    if [ "$rank" -ge 2 ]; then daemon=$addr_b prefix=("${as_node_b[@]}") extra=("${node_b_source[@]}"); fi
    RANK=$rank WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "${prefix[@]}" "$metactl" load llama-demo --daemon "$daemon" --device cpu --timeout 120 "${extra[@]}" "$@" \
      >"$work/rank$rank.out" 2>"$work/rank$rank.err" &
    rank_pids+=($!)
  done
  for i in 0 1 2 3; do
    if ! wait "${rank_pids[$i]}"; then failed=1; fi
  done
  for rank in 0 1 2 3; do
    sed -n "s/^rank $rank\/4 /  rank $rank: /p" "$work/rank$rank.out"
  done
  if [ "$failed" = 0 ]; then
    sed -n '1p' <(grep -h "verified" "$work"/rank0.out)
    echo "  VERDICT: all 4 ranks loaded every tensor of their plan; none is on meta or unfilled."
  else
    cat "$work"/rank*.err
    echo "  VERDICT: verification FAILED (see above)"
  fi
  return $failed
}

say "5. four ranks load their shards (ranks 0,1 on node-a read files; ranks 2,3 on node-b stream from node-a),"
echo "   then verify with one all-reduce over the 4 ranks"
failed=0
run_ranks || failed=1

say "6. tensor parallel: tp 2 x 2 data-parallel replicas (ranks 0,1 on node-a; 2,3 on node-b). Each"
echo "   slice is read once: node-a's ranks read theirs, row-parallel ones in strided runs, and fan"
echo "   them out to node-b's ranks, which hold the same slices (\"received by fan-out\")"
"$metactl" plan llama-demo --daemon "$addr_a" --gpus 4 --strategy tp --tp 2 --pp 1
run_ranks --strategy tp --tp 2 --pp 1 || failed=1

say "7. inside a training process: torchrun starts 4 ranks; each builds the model on meta with"
echo "   transformers, shards it with FSDP2 (fully_shard), and metaload.materialize fills exactly its"
echo "   shards (files this host can read are read directly), then verifies across the ranks"
".venv/bin/torchrun" --nproc-per-node 4 --master-addr 127.0.0.1 --master-port "$(( 29700 + RANDOM % 200 ))" \
  scripts/demo_fsdp.py llama-demo "$ckpt" "$addr_a" 2> "$work/fsdp.err" || { cat "$work/fsdp.err"; failed=1; }

say "8. a daemon dies mid-stream: node-c, a file server on the same storage as node-a, is killed"
echo "   (kill -9, by a fault armed for this demo) after sending 100 MB to a rank that streams the"
echo "   model from it; the rank resumes each broken stream at its last byte from node-a"
cat >"$work/node-c.yaml" <<YAML
node: node-c
listen: 127.0.0.1:0
coordinator: $addr_a
gpus: 0
roots: [$(pwd)/$work/storage-a]
YAML
METALOAD_TEST_KILL_AFTER_BYTES=100000000 start_daemon node-c "$work/node-c.yaml" "$metad_faulty"; addr_c=$address
disown "${pids[-1]}"  # its death is the point: no "Killed" notice from the shell
for _ in $(seq 100); do "$metactl" status --daemon "$addr_a" | grep "node-c .* up " > /dev/null && break; sleep 0.1; done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$metactl" load llama-demo --daemon "$addr_c" \
     --device cpu --source stream --timeout 120 --report "$work/failover.json" >"$work/failover.out" 2>&1; then
  sed -n 's/^rank 0\/1 /  rank 0: /p; s/^rank 0: /  rank 0: /p; /verified/p' "$work/failover.out"
else
  cat "$work/failover.out"; failed=1
fi
grep -m1 "bytes served; SIGKILL" "$work/node-c.log" | sed 's/^/  node-c: /'
# grep without -q and sed, not head: both read all their input, so that under pipefail the writer
# never dies of SIGPIPE (exit 141) because the reader stopped early.
for _ in $(seq 80); do "$metactl" status --daemon "$addr_a" | grep "node-c .* down " > /dev/null && break; sleep 0.1; done

say "9. what the coordinator saw (node-c: down, out of new plans, since member_timeout 5 s passed)"
"$metactl" status --daemon "$addr_a"
"$metactl" status --daemon "$addr_b" | sed -n '1,2p'

say "10. stopping the daemons"
cleanup
pids=()
echo "  done; nothing left running."
exit $failed
