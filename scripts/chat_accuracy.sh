#!/usr/bin/env bash
# The main job's verdict on its chat stages: reads the JSON line that `nanoddp eval` prints last in
# each of three saved outputs (the base model, after SFT, after RL), prints the accuracies and what
# each stage added, and exits 1 with one line when the final one is under the floor.
#   scripts/chat_accuracy.sh BASE_EVAL_OUTPUT SFT_EVAL_OUTPUT RL_EVAL_OUTPUT MIN_PERCENT
set -euo pipefail
min_percent="$4"

# Eval's "accuracy" (a fraction) on the last line, as a whole percent; empty when there is none.
percent() {
  tail -1 "$1" 2>/dev/null | sed -n 's/.*"accuracy":\([0-9.eE+-]*\).*/\1/p' | awk 'NF {printf "%d", $1 * 100 + 0.5}'
}

base=$(percent "$1")
sft=$(percent "$2")
rl=$(percent "$3")
if [ -z "$base" ] || [ -z "$sft" ] || [ -z "$rl" ]; then
  echo "chat_accuracy.sh: no accuracy in $1, $2 or $3 (the last line of nanoddp eval's output is its JSON):" \
    "run that eval again and keep its output" >&2
  exit 1
fi
problems=$(tail -1 "$3" | sed -n 's/.*"n":\([0-9]*\).*/\1/p')
printf 'accuracy on %s held-out problems: base %d%%, after SFT %d%% (%+d from SFT), after RL %d%% (%+d from RL)\n' \
  "$problems" "$base" "$sft" $((sft - base)) "$rl" $((rl - sft))
if [ "$rl" -lt "$min_percent" ]; then
  echo "chat_accuracy.sh: the final accuracy ${rl}% is under the floor of ${min_percent}%: the chat stages did not" \
    "teach what the default main job does; see the sft and rl runs' metrics.jsonl" >&2
  exit 1
fi
