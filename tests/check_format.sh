#!/usr/bin/env bash
# Checks that every file listed in tests/format_allowlist.txt is laid out as .clang-format says.
# The list holds the files that already are; a file joins it once `clang-format -i FILE` leaves it
# as its author wants, so the whole tree gets there file by file without one big reformatting.
#   tests/check_format.sh [ROOT]   ROOT: the repository (default: this script's)
# Exit 0: every listed file matches; 1: some differ or are missing (each named with the fix);
# 77 (ctest's skip): no clang-format 14, unless NANODDP_REQUIRE_REFERENCES=1 (CI), where that fails.
# Version 14 (Debian 12's) because other versions lay out some constructs differently.
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
list=tests/format_allowlist.txt
want_major=14

tool=""
for candidate in clang-format-$want_major clang-format; do
  if command -v "$candidate" >/dev/null &&
     [ "$("$candidate" --version | grep -oE 'version [0-9]+' | cut -d' ' -f2)" = "$want_major" ]; then
    tool=$candidate
    break
  fi
done
if [ -z "$tool" ]; then
  echo "check_format.sh: no clang-format $want_major on PATH (Debian 12: apt-get install clang-format, or scripts/setup.sh)" >&2
  [ "${NANODDP_REQUIRE_REFERENCES:-0}" = 1 ] && exit 1
  exit 77
fi
[ -f "$list" ] || { echo "check_format.sh: $root/$list does not exist" >&2; exit 1; }

failed=0
checked=0
while IFS= read -r line || [ -n "$line" ]; do
  file="${line%%#*}"                          # comments after '#'
  file="$(echo "$file" | tr -d '[:space:]')"
  [ -n "$file" ] || continue
  if [ ! -f "$file" ]; then
    echo "$file: listed in $list but missing; take it off the list" >&2
    failed=1
    continue
  fi
  checked=$((checked + 1))
  # The number of lines clang-format would replace (the old side of a diff).
  changed=$("$tool" --style=file "$file" | diff "$file" - | grep -c '^<' || true)
  if [ "$changed" != 0 ]; then
    echo "$file: $changed lines differ from .clang-format; run \`$tool -i $file\` (or take it off $list)" >&2
    failed=1
  fi
done < "$list"
[ "$failed" = 0 ] && echo "check_format.sh: the $checked files of $list match .clang-format"
exit "$failed"
