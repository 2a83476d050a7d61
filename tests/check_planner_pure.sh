#!/usr/bin/env bash
# planner/ must stay free of gRPC, LibTorch and CUDA (DESIGN.md). Fails naming the files.
bad=$(grep -rlE '#include *[<"](grpc|grpcpp|google/protobuf|torch|ATen|c10|cuda|nccl|proto/)' "$1" || true)
if [ -n "$bad" ]; then
  echo "planner/ includes gRPC, protobuf, LibTorch or CUDA headers:"; echo "$bad"; exit 1
fi
echo "planner/ is pure"
