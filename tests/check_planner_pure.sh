#!/usr/bin/env bash
# planner/ (and util/, which it builds on) must stay free of gRPC, LibTorch and CUDA
# (docs/design.md). Fails naming the files. Arguments: the folders to check.
bad=$(grep -rlE '#include *[<"](grpc|grpcpp|google/protobuf|torch|ATen|c10|cuda|nccl|proto/|libtorch/|client/|daemon/)' "$@" || true)
if [ -n "$bad" ]; then
  echo "planner/ or util/ includes gRPC, protobuf, LibTorch, CUDA or a component above them:"; echo "$bad"; exit 1
fi
echo "$* pure"
