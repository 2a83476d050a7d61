#!/usr/bin/env bash
# The object-storage recipe of README.md, run end to end on this machine: the demo checkpoint in
# an S3 bucket, read by a metad that holds the only credentials, two CPU ranks loading through it.
#
#   1. a local S3 server on loopback (moto, from the project's .venv: the tests' server); with a
#      real bucket, skip this step and export your own AWS_* variables (docs/object-storage.md)
#   2. the demo's Llama-shaped checkpoint (4 layers) uploaded to s3://models/llama-demo
#   3. metactl inspect s3://models/llama-demo          (what any metactl command accepts)
#   4. a metad whose roots are s3://models, started with the keys; the model registered from s3://
#   5. two ranks (`metactl load`) with no AWS keys at all: their bytes come through the daemon,
#      which reads each object range once for the node; then the all-reduce that verifies them
#
# Needs `scripts/setup.sh build` first. Leaves nothing running. Work folder: build/s3-demo/
# (METALOAD_BUILD_DIR names another build folder; the tests run it so).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${METALOAD_BUILD_DIR:-build}
metactl=$bin/client/metactl
metad=$bin/daemon/metad
python=.venv/bin/python
work=$bin/s3-demo
for needed in "$metactl" "$metad" "$python"; do
  [ -x "$needed" ] || { echo "s3-demo: $needed is missing: run scripts/setup.sh build first" >&2; exit 2; }
done

# pids + cleanup on exit, say, start_daemon.
source scripts/demo-lib.sh
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mkdir -p "$work"

say "1. a local S3 server (moto) on loopback; a real bucket needs only the AWS_* variables below"
port=$(free_port)
"$python" tests/integration/s3_server_main.py -H 127.0.0.1 -p "$port" >"$work/s3-server.log" 2>&1 &
pids+=($!)
export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ACCESS_KEY_ID=demo-key AWS_SECRET_ACCESS_KEY=demo-secret
# Nothing of your own ~/.aws: this demo uses only the variables here.
export AWS_REGION=us-east-1 AWS_CONFIG_FILE=$work/none AWS_SHARED_CREDENTIALS_FILE=$work/none
for _ in $(seq 100); do
  "$python" -c "import urllib.request; urllib.request.urlopen('$AWS_ENDPOINT_URL/moto-api/', timeout=1)" \
    2>/dev/null && break
  sleep 0.2
done
echo "  AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL (keys demo-key / demo-secret)"

say "2. the demo checkpoint (4 layers, bf16, sharded) uploaded to s3://models/llama-demo"
ckpt="$work/llama-demo-4L"
[ -f "$ckpt/model.safetensors.index.json" ] ||
  "$metactl" synth "$ckpt" --layers 4 --hidden 1024 --intermediate 2816 --heads 16 --kv-heads 4 \
    --vocab 32000 --dtype bf16 --shard-size 50MB >/dev/null
"$python" - "$ckpt" <<'PY'
import pathlib, sys, boto3
s3 = boto3.client("s3")  # the AWS_* variables above
s3.create_bucket(Bucket="models")
for path in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    s3.upload_file(str(path), "models", f"llama-demo/{path.name}")  # multipart past 8 MB, as aws s3 cp
    print(f"  {path.stat().st_size:>10}  s3://models/llama-demo/{path.name}")
PY

say "3. metactl inspect s3://models/llama-demo"
# Into a file, then its first lines: under pipefail, `| head` kills inspect with SIGPIPE (exit 141)
# whenever head exits before inspect has written everything.
"$metactl" inspect s3://models/llama-demo > "$work/inspect.txt"
head -12 "$work/inspect.txt"

say "4. a metad with roots [s3://models] and the keys; the model registered from the bucket"
cat >"$work/node.yaml" <<YAML
node: node-a
listen: 127.0.0.1:0
gpus: 2
gpu_memory: 512MiB
roots: [s3://models]
YAML
start_daemon node-a "$work/node.yaml"
"$metactl" register llama-demo --checkpoint s3://models/llama-demo --daemon "$address"

say "5. two ranks load through the daemon, without AWS keys of their own, and verify"
master_port=$(free_port)
rank_pids=()
for rank in 0 1; do
  env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_ENDPOINT_URL \
    RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$master_port \
    "$metactl" load llama-demo --daemon "$address" --device cpu --timeout 120 \
    >"$work/rank$rank.out" 2>"$work/rank$rank.err" &
  rank_pids+=($!)
done
failed=0
for pid in "${rank_pids[@]}"; do wait "$pid" || failed=1; done
for rank in 0 1; do sed -n "s/^rank $rank\/2 /  rank $rank: /p" "$work/rank$rank.out"; done
if [ "$failed" != 0 ]; then
  cat "$work"/rank*.err
  echo "  VERDICT: the load FAILED (above)"
  exit 1
fi
grep -h -m1 "verified" "$work/rank0.out" | sed 's/^/  /'
echo "  VERDICT: both ranks hold their half of s3://models/llama-demo, every tensor verified;"
echo "  the daemon read each byte from the bucket once (its log: $work/node-a.log)."
