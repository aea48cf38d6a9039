#!/usr/bin/env bash
# The classic recipe against today's nanochat (--recipe 2026) on the CPU, on the same data, batch and
# number of tokens: what nanochat itself measures (time to a good model), at depths 4 and 6.
#   bench/recipe_bench.sh [build dir] [log dir]
# Environment: NANODDP_RECIPE_DEPTHS (default "4 6"), NANODDP_RECIPE_BATCH (tokens per step, default
# 4096, the main job's; a multiple of 2048), NANODDP_RECIPE_STEPS (default 300), NANODDP_RECIPE_EVAL_EVERY
# (default 25), NANODDP_THREADS (default: all cores). Note: the 2026 recipe scales its learning rates
# by sqrt(batch / 2^19) as nanochat's base_train does, so small batches train it at small rates.
# (To train it at nanochat's own rates instead, give --embedding_lr, --unembedding_lr, --matrix_lr and
# --scalar_lr times sqrt(2^19 / batch) to nanoddp train: docs/benchmarks.md has such runs.)
# Prints, per depth: the val bits per byte of each recipe at equal tokens and at equal training time
# (evaluations excluded: the sum of the steps' dt_ms), tokens/s (median over the steps after the first
# tenth) and their ratios, 2026 against classic measured in the same run; writes recipe_curves.svg (val
# bpb against tokens and against seconds) and recipe_table.txt in the log dir. Each recipe runs with its
# own default learning rates and schedules; the data, batch, sequence length, seed and steps are shared.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
logs="${2:-$(mktemp -d /tmp/recipe_bench.XXXX)}"
depths="${NANODDP_RECIPE_DEPTHS:-4 6}"
steps="${NANODDP_RECIPE_STEPS:-300}"
batch="${NANODDP_RECIPE_BATCH:-4096}"
eval_every="${NANODDP_RECIPE_EVAL_EVERY:-25}"
threads="${NANODDP_THREADS:-0}"
bin="$build/nanoddp"
[[ -x "$bin" ]] || { echo "recipe_bench: $bin is missing; build first (cmake --build $build -j --target nanoddp)" >&2; exit 1; }
mkdir -p "$logs"
echo "logs: $logs"
"$bin" env 2>&1 | grep -E '^cpu ' | tee "$logs/env.txt" || true
uptime | tee -a "$logs/env.txt"

# The Brown corpus with a 4096-token BPE, as the main job prepares it (reused when already there).
data="$logs/data"
if [[ ! -f "$data/meta.json" ]]; then
  "$bin" data corpus --name brown --out "$logs/brown.jsonl"
  "$bin" tokenizer train --input "$logs/brown.jsonl" --vocab_size 4096 --out "$logs/tokenizer.tiktoken" --overwrite
  "$bin" data prepare --input "$logs/brown.jsonl" --tokenizer "$logs/tokenizer.tiktoken" --out "$data" --overwrite
fi

runs=()
for depth in $depths; do
  for recipe in classic 2026; do
    out="$logs/d${depth}_${recipe}"
    echo "== depth $depth, recipe $recipe ($steps steps of $batch tokens)"
    "$bin" train --recipe "$recipe" --data "$data" --out "$out" --depth "$depth" --max_seq_len 256 \
      --device_batch_size 8 --total_batch_size "$batch" --num_iterations "$steps" --eval_every "$eval_every" \
      --eval_tokens 65536 --save_every -1 --save_minutes 0 --threads "$threads" --seed 42 --overwrite \
      > "$logs/d${depth}_${recipe}.log" 2>&1 || { tail -5 "$logs/d${depth}_${recipe}.log"; exit 1; }
    tail -1 "$logs/d${depth}_${recipe}.log"
    runs+=("$depth:$recipe:$out/metrics.jsonl")
  done
done
python3 bench/recipe_curves.py --svg "$logs/recipe_curves.svg" "${runs[@]}" | tee "$logs/recipe_table.txt"
echo "curves: $logs/recipe_curves.svg"
