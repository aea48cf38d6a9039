#!/usr/bin/env bash
# nanoddp against PyTorch on one GPU, side by side in one command: builds bench_train_gpu, runs
# it and bench/torch_gpu_bench.py at each depth (same seq, batch, steps and timing window; PyTorch
# with Muon stacked by shape, as current nanochat, once with FlashAttention-2 and once with cuDNN's
# attention, the faster of the two being the baseline, then with Muon matrix by matrix on that
# faster attention as a second row; nanoddp before and after them, the table taking the mean of
# its two runs), and prints the table of bench/gpu_bench_table.py: tokens/s, MFU against the GPU's
# datasheet peak and against the best bf16 GEMM rate any program measured in this run, the timing
# window's spread, peak memory and memory per token, with nanoddp / PyTorch ratios.
# Full JSON lines go to $OUT_DIR/results.jsonl, each program's log beside them.
# RECIPE=2026: nanoddp's 2026 model and optimizer (bench_train_gpu --recipe 2026) against the PyTorch
# twin (bench/torch_recipe2026_gpu_bench.py) under the same rules: compiled, attention through one
# backend at a time, FlexAttention with its sliding-window block mask or cuDNN (the faster being the
# baseline), Muon stacked by shape, then matrix by matrix.
#   bench/gpu_bench.sh                      # depths 12 and 20, seq 2048, batch 16
#   RECIPE=2026 bench/gpu_bench.sh          # the same for the 2026 recipe
#   DEPTHS="20" BATCH=32 bench/gpu_bench.sh
#   SKIP_BUILD=1 ...                        # bench_train_gpu is already built in $BUILD_DIR
#   NANODDP_AGAIN=0 ...                     # nanoddp once per depth, not before and after PyTorch
#   MIN_SECONDS=4 ...                       # each program times at least this long (see below)
#   MUON_LOOP=0 ...                         # no PyTorch row with Muon matrix by matrix
# The timing window: at least STEPS steps and at least MIN_SECONDS seconds. In the second GPU run
# (docs/benchmarks.md) windows of 10 steps gave nanoddp's two runs 0.7% apart at depth 12 (0.9 s)
# and 0.2% at depth 20 (2.8 s); 4 s puts both depths past the longer of those, and every program
# reports its two halves' spread, which the table flags past 2%.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
depths=${DEPTHS:-"12 20"}
seq=${SEQ:-2048}
batch=${BATCH:-16}
steps=${STEPS:-10}
min_seconds=${MIN_SECONDS:-4}
python=${PYTHON:-python3}
recipe=${RECIPE:-classic}
case $recipe in
  classic) torch_bench=$root/bench/torch_gpu_bench.py sdpas=${SDPA:-"flash cudnn"} ;;
  2026) torch_bench=$root/bench/torch_recipe2026_gpu_bench.py sdpas=${SDPA:-"flex cudnn"} ;;
  *) echo "gpu_bench.sh: RECIPE must be classic or 2026 (got $recipe)" >&2; exit 2 ;;
esac
out_dir=${OUT_DIR:-$build/gpu_bench}
mkdir -p "$out_dir"
results="$out_dir/results.jsonl"
: > "$results"

if [ -z "${SKIP_BUILD:-}" ]; then
  source "$root/scripts/configure.sh"
  nanoddp_configure "$root" "$build" -DNANODDP_CUDA=ON > "$out_dir/configure.log"
  cmake --build "$build" --target bench_train_gpu -j"$(nproc)" > "$out_dir/build.log"
fi
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv,noheader | tee "$out_dir/gpu.txt" || true
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out_dir/gpu.txt" || true

# run NAME JSON-FALLBACK CMD...: CMD's last stdout line (its JSON) into results, or FALLBACK if it fails.
run() {
  local name=$1 fallback=$2; shift 2
  echo "$name" >&2
  local line
  if line=$("$@" 2> "$out_dir/$name.log" | tail -n 1) && [ -n "$line" ]; then
    echo "$line" >> "$results"
  else
    echo "$fallback" >> "$results"
  fi
}

for d in $depths; do
  args=(--depth "$d" --seq "$seq" --batch "$batch" --steps "$steps" --min_seconds "$min_seconds")
  run "nanoddp_d$d" "{\"impl\": \"nanoddp\", \"recipe\": \"$recipe\", \"depth\": $d, \"failed\": true}" \
    "$build/bench/bench_train_gpu" "${args[@]}" --recipe "$recipe"
  for sdpa in $sdpas; do
    run "pytorch_${sdpa}_d$d" "{\"impl\": \"pytorch\", \"recipe\": \"$recipe\", \"sdpa\": \"$sdpa\", \"muon\": \"stacked\", \"depth\": $d, \"failed\": true}" \
      "$python" "$torch_bench" "${args[@]}" --sdpa "$sdpa" --muon stacked
  done
  if [ "${MUON_LOOP:-1}" = 1 ]; then
    # The second row: Muon matrix by matrix, on whichever attention was faster above.
    fast=$("$python" -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in rows if r.get("depth") == int(sys.argv[2]) and r.get("muon") == "stacked" and not r.get("failed")]
print(max(ok, key=lambda r: r["tokens_per_s"])["sdpa"] if ok else sys.argv[3])' "$results" "$d" "${sdpas%% *}")
    run "pytorch_${fast}_loop_d$d" "{\"impl\": \"pytorch\", \"recipe\": \"$recipe\", \"sdpa\": \"$fast\", \"muon\": \"loop\", \"depth\": $d, \"failed\": true}" \
      "$python" "$torch_bench" "${args[@]}" --sdpa "$fast" --muon loop
  fi
  # nanoddp again after PyTorch: the table compares their mean and shows how far the two drift.
  if [ "${NANODDP_AGAIN:-1}" = 1 ]; then
    run "nanoddp_d${d}_again" "{\"impl\": \"nanoddp\", \"recipe\": \"$recipe\", \"depth\": $d, \"failed\": true}" \
      "$build/bench/bench_train_gpu" "${args[@]}" --recipe "$recipe"
  fi
done

"$python" "$root/bench/gpu_bench_table.py" "$results"
