#!/usr/bin/env bash
# Fails when a source file includes a header from a higher layer (docs/ARCHITECTURE.md), when the
# DDP engine includes a process-group backend instead of the interface, or when model, ddp or train
# code includes a kernel backend or a CUDA header.
set -u
src="${1:-$(dirname "$0")/../src}"
status=0
# One pass over every #include "layer/..." line: awk knows each layer's rank.
violations=$(cd "$src" && grep -rnoE '^#include "[a-z_]+/[^"]+"' --include='*.h' --include='*.cpp' \
    --include='*.cu' --include='*.cuh' . | awk -F: '
  BEGIN { n = split("core ops model dist ddp data train cli", l, " "); for (i = 1; i <= n; i++) rank[l[i]] = i }
  {
    split($1, path, "/"); layer = path[2];
    inc = $3; sub(/^#include "/, "", inc); sub(/"$/, "", inc); split(inc, t, "/"); target = t[1];
    if ((target in rank) && (layer in rank) && rank[target] > rank[layer])
      printf "layering: %s (%s) includes %s (%s is above %s)\n", substr($1, 3), layer, inc, target, layer
  }')
if [ -n "$violations" ]; then
  echo "$violations"
  status=1
fi
# The DDP engine sees the ProcessGroup interface only (never Gloo, MPI or NCCL).
if grep -rnE '#include "dist/(gloo|mpi|nccl)_' "$src/ddp" "$src/model" "$src/train"; then
  echo "layering: ddp/model/train include a process-group backend instead of dist/process_group.h"
  status=1
fi
# The model sees the ops interface only (never a backend or CUDA).
if grep -rnE '#include ("ops/(cpu|cuda)/|<cu|<nccl|<cudnn)' "$src/model" "$src/ddp" "$src/train"; then
  echo "layering: model/ddp/train include a kernel backend or CUDA header instead of ops/ops.h"
  status=1
fi
[ $status -eq 0 ] && echo "layering: ok"
exit $status
