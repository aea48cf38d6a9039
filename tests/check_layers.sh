#!/usr/bin/env bash
# Fails when a source file includes a header from a higher layer (docs/ARCHITECTURE.md), when the
# DDP engine includes a process-group backend instead of the interface, or when code outside the
# CUDA folders includes CUDA, cuBLAS, cuDNN or NCCL headers without the build-config guard.
set -u
src="${1:-$(dirname "$0")/../src}"
layers=(core ops model dist ddp data train cli)
rank_of() { for i in "${!layers[@]}"; do [ "${layers[$i]}" = "$1" ] && echo "$i" && return; done; echo -1; }
status=0
for layer in "${layers[@]}"; do
  mine=$(rank_of "$layer")
  while IFS= read -r -d '' file; do
    while IFS= read -r inc; do
      target=${inc%%/*}
      theirs=$(rank_of "$target")
      if [ "$theirs" -gt "$mine" ]; then
        echo "layering: ${file#$src/} ($layer) includes $inc ($target is above $layer)"
        status=1
      fi
    done < <(grep -oE '^#include "[a-z_]+/[^"]+"' "$file" | sed -E 's/#include "(.*)"/\1/')
  done < <(find "$src/$layer" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0)
done
# The DDP engine sees the ProcessGroup interface only (never Gloo, MPI or NCCL).
if grep -nE '#include "dist/(gloo|mpi|nccl)_' -r "$src/ddp" "$src/model" "$src/train" 2>/dev/null; then
  echo "layering: ddp/model/train include a process-group backend instead of dist/process_group.h"
  status=1
fi
# The model sees the ops interface only (never a backend or CUDA).
if grep -nE '#include ("ops/(cpu|cuda)/|<cu|<nccl|<cudnn)' -r "$src/model" "$src/ddp" "$src/train" 2>/dev/null; then
  echo "layering: model/ddp/train include a kernel backend or CUDA header instead of ops/ops.h"
  status=1
fi
[ $status -eq 0 ] && echo "layering: ok"
exit $status
