#!/usr/bin/env bash
# examples/fashion_mnist against the same model under PyTorch 1.13 DDP (Debian python3-torch, Gloo,
# tools/torch_fashion_mnist.py): training samples/s at 1 and 2 ranks, one thread per rank, 64
# images per rank per step, one epoch, all measured in this one run:
#   bench/fashion_mnist_bench.sh [build dir] [epochs]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
epochs="${2:-1}"
json() { grep -o '{.*}' | tail -1; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
export OMP_NUM_THREADS=1
out=$(mktemp -d)
ours1=$("$build/examples/fashion_mnist" --epochs "$epochs" --out "$out/w1.safetensors" | json)
ours2=$("$build/nanoddp" run --standalone --nproc_per_node 2 "$build/examples/fashion_mnist" --epochs "$epochs" \
  --out "$out/w2.safetensors" | json)
torchrun=(/usr/bin/python3 -m torch.distributed.run --standalone --redirects 1 --tee 1)
theirs1=$("${torchrun[@]}" --nproc_per_node 1 tools/torch_fashion_mnist.py --epochs "$epochs" | json)
theirs2=$("${torchrun[@]}" --nproc_per_node 2 tools/torch_fashion_mnist.py --epochs "$epochs" | json)
rm -rf "$out"
python3 - "$(field "$ours1" samples_per_s)" "$(field "$ours2" samples_per_s)" "$(field "$theirs1" samples_per_s)" \
  "$(field "$theirs2" samples_per_s)" "$(field "$ours1" test_accuracy)" "$(field "$theirs1" test_accuracy)" <<'PY'
import sys
o1, o2, t1, t2, oa, ta = map(float, sys.argv[1:])
print(f"{'ranks':>5} | {'nanoddp samples/s':>17} | {'PyTorch DDP samples/s':>21} | {'nanoddp/PyTorch':>15}")
print(f"{1:>5} | {o1:>17.0f} | {t1:>21.0f} | {o1 / t1:>14.2f}x")
print(f"{2:>5} | {o2:>17.0f} | {t2:>21.0f} | {o2 / t2:>14.2f}x")
print(f"test accuracy after the run (1 rank): nanoddp {oa:.4f}, PyTorch {ta:.4f}")
PY
