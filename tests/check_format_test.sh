#!/usr/bin/env bash
# Tests tests/check_format.sh on a scratch tree with this repository's .clang-format: a listed file
# laid out as it says passes; a listed file that is not, or a listed file that is missing, fails
# naming the file and the fix; an unlisted badly laid-out file is not checked.
#   tests/check_format_test.sh ROOT SCRATCH
set -euo pipefail
root="$1"
scratch="$2"
rm -rf "$scratch"
mkdir -p "$scratch/tests"
cp "$root/.clang-format" "$scratch/"
printf 'int f(int x) { return x + 1; }\n' > "$scratch/good.cpp"
printf 'int g( int x ){return x+1;}\n' > "$scratch/bad.cpp"
fail() { echo "check_format_test.sh: $*" >&2; exit 1; }

set +e
printf '# comment\ngood.cpp  # trailing comment\n\n' > "$scratch/tests/format_allowlist.txt"
out=$(bash "$root/tests/check_format.sh" "$scratch" 2>&1); rc=$?
[ "$rc" = 77 ] && { echo "$out"; exit 77; }  # no clang-format 14 here
[ "$rc" = 0 ] || fail "a well laid-out file failed (rc $rc): $out"

printf 'good.cpp\nbad.cpp\n' > "$scratch/tests/format_allowlist.txt"
out=$(bash "$root/tests/check_format.sh" "$scratch" 2>&1); rc=$?
[ "$rc" = 1 ] || fail "a badly laid-out file passed (rc $rc): $out"
grep -q "bad.cpp: 1 lines differ from .clang-format; run \`clang-format.* -i bad.cpp\`" <<<"$out" || fail "no fix named: $out"
grep -q "good.cpp" <<<"$out" && fail "the good file was blamed: $out"

printf 'good.cpp\nmissing.cpp\n' > "$scratch/tests/format_allowlist.txt"
out=$(bash "$root/tests/check_format.sh" "$scratch" 2>&1); rc=$?
[ "$rc" = 1 ] || fail "a missing listed file passed (rc $rc): $out"
grep -q "missing.cpp: listed in tests/format_allowlist.txt but missing" <<<"$out" || fail "missing file not named: $out"
set -e
rm -rf "$scratch"
echo "check_format_test.sh: ok"
