#!/usr/bin/env bash
# Load a registered model on every GPU of this node with torchrun: torchrun sets RANK,
# WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, which `metactl load` reads.
#   NNODES=2 NODE_RANK=0 MASTER=gpu-node-01 deploy/torchrun-example.sh llama-70b
set -euo pipefail
model=${1:?usage: torchrun-example.sh MODEL}
exec torchrun --nnodes "${NNODES:-1}" --node-rank "${NODE_RANK:-0}" --nproc-per-node "${GPUS:-8}" \
  --master-addr "${MASTER:-127.0.0.1}" --master-port "${PORT:-29500}" --no-python \
  metactl load "$model" --daemon 127.0.0.1:7070 --device cuda
