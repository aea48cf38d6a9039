#!/usr/bin/env bash
# Tests scripts/configure.sh: nanoddp_configure passes cmake the source, the build folder, a Release
# build type and the caller's arguments unchanged (one with spaces or a ';' list stays one), and no
# other script of scripts/ or bench/ configures a build with a cmake command of its own.
#   tests/configure_helper_test.sh ROOT SCRATCH
set -euo pipefail
root="$1"
scratch="$2"
rm -rf "$scratch"
mkdir -p "$scratch/bin"
fail() { echo "configure_helper_test.sh: $*" >&2; exit 1; }

# A cmake that writes its arguments, one a line.
printf '#!/bin/sh\nfor a in "$@"; do printf "%%s\\n" "$a"; done > "%s/args"\n' "$scratch" > "$scratch/bin/cmake"
chmod +x "$scratch/bin/cmake"
(
  PATH="$scratch/bin:$PATH"
  source "$root/scripts/configure.sh"
  nanoddp_configure src out -G Ninja "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" "${nanoddp_gpu_cmake_flags[@]}"
)
want=$(printf '%s\n' -S src -B out -DCMAKE_BUILD_TYPE=Release -G Ninja "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/" \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DNANODDP_CUDA=ON -DNANODDP_NCCL=ON -DNANODDP_GLOO=OFF -DNANODDP_MPI=OFF)
[ "$(cat "$scratch/args")" = "$want" ] || fail "cmake got:
$(cat "$scratch/args")
expected:
$want"

# Every configure goes through the helper.
others=$(grep -nE '^[^#]*\bcmake +(-S|-B|\.\.)' "$root"/scripts/*.sh "$root"/bench/*.sh | grep -v 'scripts/configure.sh:' || true)
[ -z "$others" ] || fail "configure through nanoddp_configure (scripts/configure.sh), not cmake itself:
$others"
echo "configure_helper_test.sh: ok"
