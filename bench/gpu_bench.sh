#!/usr/bin/env bash
# nanoddp against PyTorch on one GPU, side by side in one command: builds bench_train_gpu, runs
# it and bench/torch_gpu_bench.py at each depth (same seq, batch and steps), and prints a table
# of tokens/s, MFU (against the best bf16 GEMM rate either program measured in this run), peak
# memory and memory per token, with nanoddp / PyTorch ratios. Full JSON lines go to $OUT_DIR.
#   bench/gpu_bench.sh                      # depths 12 and 20, seq 2048, batch 16
#   DEPTHS="20" BATCH=32 bench/gpu_bench.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
depths=${DEPTHS:-"12 20"}
seq=${SEQ:-2048}
batch=${BATCH:-16}
steps=${STEPS:-10}
python=${PYTHON:-python3}
out_dir=${OUT_DIR:-$build/gpu_bench}
mkdir -p "$out_dir"
results="$out_dir/results.jsonl"
: > "$results"

cmake -S "$root" -B "$build" -DNANODDP_CUDA=ON -DCMAKE_BUILD_TYPE=Release > "$out_dir/configure.log"
cmake --build "$build" --target bench_train_gpu -j"$(nproc)" > "$out_dir/build.log"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv,noheader | tee "$out_dir/gpu.txt" || true
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out_dir/gpu.txt"

for d in $depths; do
  args=(--depth "$d" --seq "$seq" --batch "$batch" --steps "$steps")
  echo "depth $d: nanoddp" >&2
  "$build/bench/bench_train_gpu" "${args[@]}" 2> "$out_dir/nanoddp_d$d.log" | tail -n 1 >> "$results" ||
    echo "{\"impl\": \"nanoddp\", \"depth\": $d, \"failed\": true}" >> "$results"
  echo "depth $d: pytorch" >&2
  "$python" "$root/bench/torch_gpu_bench.py" "${args[@]}" 2> "$out_dir/pytorch_d$d.log" | tail -n 1 >> "$results" ||
    echo "{\"impl\": \"pytorch\", \"depth\": $d, \"failed\": true}" >> "$results"
done

"$python" - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peak = max([r.get("gemm_tflops", 0) for r in rows] + [1e-9]) * 1e12
print(f"MFU peak: best bf16 GEMM measured in this run = {peak / 1e12:.0f} TFLOP/s")
print(f"{'depth':>5} | {'impl':<22} | {'tok/s':>9} | {'MFU':>6} | {'step ms':>8} | {'peak GiB':>8} | {'KiB/token':>9}")
by = {}
for r in rows:
    by.setdefault(r["depth"], {})["nanoddp" if r["impl"] == "nanoddp" else "pytorch"] = r
    if r.get("failed"):
        print(f"{r['depth']:>5} | {r['impl']:<22} | FAILED (see the logs in the output folder)")
        continue
    mfu = r["mfu"] * r["gemm_tflops"] * 1e12 / peak
    print(f"{r['depth']:>5} | {r['impl']:<22} | {r['tokens_per_s']:>9.0f} | {100 * mfu:>5.1f}% | {r['step_ms']:>8.1f} | "
          f"{r['peak_mem_gib']:>8.2f} | {r['mem_per_token_kib']:>9.1f}")
for d, pair in sorted(by.items()):
    a, b = pair.get("nanoddp", {}), pair.get("pytorch", {})
    if "tokens_per_s" in a and "tokens_per_s" in b:
        print(f"depth {d}: nanoddp/PyTorch tokens/s {a['tokens_per_s'] / b['tokens_per_s']:.2f}x, "
              f"memory/token {a['mem_per_token_kib'] / b['mem_per_token_kib']:.2f}x")
PY
