#!/usr/bin/env bash
# Tests scripts/chat_accuracy.sh (the main job's verdict) on eval outputs written here: it prints the
# three accuracies and what each stage added, passes at the floor, fails with one line under it, and
# fails (not passes) when an output holds no eval JSON.
#   tests/chat_accuracy_test.sh ROOT SCRATCH
set -euo pipefail
root="$1"
scratch="$2"
rm -rf "$scratch"
mkdir -p "$scratch"
fail() { echo "chat_accuracy_test.sh: $*" >&2; exit 1; }
eval_out() { printf 'nanoddp run: a log line\n{"accuracy":%s,"correct":0,"n":100,"task":"t.jsonl"}\n' "$2" > "$scratch/$1"; }
eval_out base 0.01
eval_out sft 0.29
eval_out rl 0.35
check() { bash "$root/scripts/chat_accuracy.sh" "$scratch/base" "$scratch/sft" "$scratch/rl" "$1" 2>&1; }

set +e
out=$(check 35); rc=$?
[ "$rc" = 0 ] || fail "an accuracy at the floor failed (rc $rc): $out"
[[ "$out" == *"base 1%, after SFT 29% (+28 from SFT), after RL 35% (+6 from RL)"* ]] || fail "wrong summary: $out"
[[ "$out" == *"100 held-out problems"* ]] || fail "the problem count is missing: $out"
out=$(check 36); rc=$?
[ "$rc" = 1 ] || fail "an accuracy under the floor passed (rc $rc): $out"
[ "$(grep -c 'under the floor of 36%' <<<"$out")" = 1 ] || fail "no one-line verdict: $out"
printf 'nanoddp: error: something\n' > "$scratch/rl"
out=$(check 0); rc=$?
[ "$rc" = 1 ] || fail "an output without eval's JSON passed (rc $rc): $out"
[[ "$out" == *"no accuracy in"* ]] || fail "no reason given: $out"
echo "chat_accuracy_test.sh: ok"
