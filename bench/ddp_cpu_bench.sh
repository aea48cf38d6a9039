#!/usr/bin/env bash
# Data-parallel CPU training, nanoddp against PyTorch 1.13 DDP (Debian python3-torch, Gloo), on the
# benchmark model (depth 4, vocab 4096, T 128, global batch 16 rows, AdamW), one thread per rank,
# all measured in this one run:
#   bench/ddp_cpu_bench.sh [build dir] [steps]
# Prints tokens/s at 1 and 2 ranks for both, nanoddp's communication hidden behind backward, and
# the ratios. docs/benchmarks.md records the output.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
steps="${2:-30}"
bin="$build/nanoddp"
bench="$build/bench/bench_train_ddp"
json() { grep -o '{.*}' | tail -1; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

export OMP_NUM_THREADS=1
ours1=$("$bench" --steps "$steps" | json)
ours2=$("$bin" run --standalone --nproc_per_node 2 "$bench" --steps "$steps" | json)
# Smaller buckets: more of the allreduce can start during the backward (PyTorch's 25 MiB cap puts
# everything but lm_head into one bucket that completes with wte, the backward's last gradient).
ours2s=$("$bin" run --standalone --nproc_per_node 2 "$bench" --steps "$steps" --bucket_cap_mb 4 | json)
torchrun=(/usr/bin/python3 -m torch.distributed.run --standalone --redirects 1 --tee 1)
theirs1=$("${torchrun[@]}" --nproc_per_node 1 tools/torch_ddp_bench.py --steps "$steps" | json)
theirs2=$("${torchrun[@]}" --nproc_per_node 2 tools/torch_ddp_bench.py --steps "$steps" | json)

o1=$(field "$ours1" tokens_per_s); o2=$(field "$ours2" tokens_per_s)
t1=$(field "$theirs1" tokens_per_s); t2=$(field "$theirs2" tokens_per_s)
hidden=$(field "$ours2" hidden); alone=$(field "$ours2" comm_alone_ms); exposed=$(field "$ours2" exposed_ms)
o2s=$(field "$ours2s" tokens_per_s); hidden_s=$(field "$ours2s" hidden); alone_s=$(field "$ours2s" comm_alone_ms)
exposed_s=$(field "$ours2s" exposed_ms)
python3 - "$o1" "$o2" "$t1" "$t2" "$hidden" "$alone" "$exposed" "$o2s" "$hidden_s" "$alone_s" "$exposed_s" <<'PY'
import sys
o1, o2, t1, t2, hidden, alone, exposed, o2s, hidden_s, alone_s, exposed_s = map(float, sys.argv[1:])
print(f"{'ranks':>5} | {'nanoddp tok/s':>13} | {'PyTorch DDP tok/s':>17} | {'nanoddp/PyTorch':>15}")
print(f"{1:>5} | {o1:>13.0f} | {t1:>17.0f} | {o1 / t1:>14.2f}x")
print(f"{2:>5} | {o2:>13.0f} | {t2:>17.0f} | {o2 / t2:>14.2f}x")
print(f"scaling 1 -> 2 ranks: nanoddp {o2 / o1:.2f}x, PyTorch {t2 / t1:.2f}x")
print(f"nanoddp gradient allreduce, 25 MiB buckets: {alone:.2f} ms/step alone, {exposed:.2f} ms/step exposed "
      f"after backward -> {100 * hidden:.0f}% hidden")
print(f"nanoddp gradient allreduce, 4 MiB buckets: {alone_s:.2f} ms/step alone, {exposed_s:.2f} ms/step exposed "
      f"after backward -> {100 * hidden_s:.0f}% hidden ({o2s:.0f} tok/s)")
PY
